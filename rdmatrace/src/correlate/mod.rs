//! The correlator: pure state over the event stream (no I/O, no clock). It is the one place
//! that tracks each QP's life, state and owner by (device, QPN) and each process's name; it
//! annotates events with what the kernel record alone cannot say (the state a QP is leaving,
//! the owner of a retransmit sent from softirq) and says what each record changed
//! ([`QpChange`]), so analysis and timelines follow QPs without tracking them again.

pub mod analysis;
pub mod cgroups;
pub mod filter;
pub mod fleet;

use rustc_hash::FxHashMap;

use crate::event::{Body, CompactString, QpInfo, QpKey, QpState, Record};

use cgroups::{Cgroups, Place};

/// What the correlator knows about a live QP.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QpTrack {
    /// This QP's life among all QPs seen (0, 1, 2... in order of appearance): a (device, QPN)
    /// reused after a destroy is a new life.
    pub life: usize,
    pub state: Option<QpState>,
    pub owner_pid: u32,
    pub owner_comm: CompactString,
    pub qp_type: u32,
    /// Monotonic ns of the last state change.
    pub since_ns: u64,
    /// Where its life was first seen.
    pub origin: Origin,
    /// When a table sample last moved its state, and the state before: a modify older than
    /// that sample (its record waited in the ring buffer, drained every DRAIN_MS, while the
    /// sample was read at a tick) started from that earlier state, not from the sample's.
    pub table_moved: Option<(u64, Option<QpState>)>,
}

impl QpTrack {
    /// Moves the QP to `to` at `ts`; the change, unless it was there already.
    fn move_to(&mut self, key: &QpKey, to: QpState, by_driver: bool, ts: u64) -> Option<QpChange> {
        if self.state == Some(to) {
            return None;
        }
        let change = QpChange::State {
            key: key.clone(),
            life: self.life,
            from: self.state,
            to,
            by_driver,
        };
        self.state = Some(to);
        self.since_ns = ts;
        Some(change)
    }
}

/// What one record changed in a QP's life (at most one change per record).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum QpChange {
    /// A QP's life starts: created (`state` RESET), or first seen (older than the trace) in
    /// the kernel's QP table or at a successful modify.
    Born {
        key: QpKey,
        life: usize,
        state: Option<QpState>,
        origin: Origin,
    },
    /// A QP moved: by its owner's modify, or (`by_driver`) as the kernel's QP table shows it,
    /// without a modify (a driver moving a QP to ERR after a transport error).
    State {
        key: QpKey,
        life: usize,
        from: Option<QpState>,
        to: QpState,
        by_driver: bool,
    },
    /// A QP's life ends: destroyed, or gone from the kernel's QP table.
    Gone {
        key: QpKey,
        life: usize,
        /// The state it was in.
        state: Option<QpState>,
    },
}

/// Where a QP's life was first seen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// Its creation.
    Create,
    /// A row of the kernel's QP table (owner and state from the kernel).
    Table,
    /// A successful modify (the modifier taken as its owner, no table to ask).
    Modify,
}

/// Its maps are looked up on every record: they hash with FxHash (keys are kernel ids and
/// names, not attacker-chosen in a way that matters for a post-processing tool) rather than
/// SipHash, and are never iterated, so their order cannot reach any output.
#[derive(Default)]
pub struct Correlator {
    qps: FxHashMap<QpKey, QpTrack>,
    /// Destroyed QPs' lives and owners: samples and timers can still arrive after the
    /// destroy. A new QP with the same (device, QPN) replaces the entry.
    ended: FxHashMap<QpKey, (usize, u32, CompactString)>,
    /// When each `ended` entry was made (life, key), oldest first: a long run forgets them.
    ended_at: std::collections::VecDeque<(u64, usize, QpKey)>,
    /// The latest monotonic ns observed.
    now_ns: u64,
    comms: FxHashMap<u32, CompactString>,
    /// Lives started so far (the next life's number).
    lives: usize,
    /// What the last observed record changed.
    change: Option<QpChange>,
    /// Each process's cgroup, container and pod.
    cgroups: Cgroups,
    /// CQ owners by (device, restrack id), from the resource tracker, while the CQs exist.
    cqs: FxHashMap<(CompactString, u32), (u32, CompactString)>,
    /// Each process's transport variables (allowlisted environment), while it lives.
    envs: FxHashMap<u32, Vec<(CompactString, String)>>,
}

impl Correlator {
    pub fn new() -> Correlator {
        Correlator::default()
    }

    /// Updates state from `rec` and fills in what it can (the current state of a modify whose
    /// caller did not pass `IB_QP_CUR_STATE`).
    pub fn observe(&mut self, rec: &mut Record) {
        self.change = None;
        self.now_ns = self.now_ns.max(rec.ts_ns);
        self.cgroups.next(rec.ts_ns);
        // Most records repeat their process's name: write only when it is new or changed.
        if !rec.comm.is_empty()
            && rec.pid != 0
            && self.comms.get(&rec.pid).map(CompactString::as_str) != Some(rec.comm.as_str())
        {
            self.comms.insert(rec.pid, rec.comm.clone());
        }
        match &mut rec.body {
            Body::QpCreate { qp, ret } if *ret == 0 => {
                // The kernel's table lists a QP from inside its creation, so a sample may come
                // before the create's return: that row's life is this QP's.
                let listed = self
                    .qps
                    .get(&qp.key)
                    .is_some_and(|t| t.origin == Origin::Table && t.owner_pid == rec.pid);
                if !listed {
                    let owner = (rec.pid, &rec.comm, rec.ts_ns);
                    self.born(qp, Some(QpState::Reset), Origin::Create, owner);
                }
            }
            Body::QpModify { qp, attrs, ret } => {
                let mut track = self.qps.get_mut(&qp.key);
                if let Some(t) = track.as_mut() {
                    match t.table_moved {
                        // Made before the sample that already holds a later state: it moves
                        // the state the sample started from, not the QP's.
                        Some((at, before)) if rec.ts_ns < at => {
                            if attrs.cur_state.is_none() {
                                attrs.cur_state = before;
                            }
                            if let (0, Some(new)) = (*ret, attrs.new_state) {
                                t.table_moved = Some((at, Some(new)));
                            }
                            return;
                        }
                        Some(_) => t.table_moved = None,
                        None => {}
                    }
                }
                if attrs.cur_state.is_none() {
                    attrs.cur_state = track.as_ref().and_then(|t| t.state);
                }
                if *ret == 0 && track.is_none() {
                    // A QP older than the trace, first seen here: its modifier owns it.
                    if let Some(new) = attrs.new_state {
                        self.born(
                            qp,
                            Some(new),
                            Origin::Modify,
                            (rec.pid, &rec.comm, rec.ts_ns),
                        );
                    }
                } else if *ret == 0 {
                    if let (Some(track), Some(new)) = (track, attrs.new_state) {
                        self.change = track.move_to(&qp.key, new, false, rec.ts_ns);
                    }
                }
            }
            Body::QpDestroy { qp, ret } if *ret == 0 => self.gone(&qp.key),
            Body::QpRes(r) if r.change == crate::event::ResChange::Gone => self.gone(&r.qp.key),
            // The kernel's QP table: owners and states of QPs older than the trace, and state
            // changes made by the driver (ERR after a transport error).
            Body::QpRes(r) => match self.qps.get_mut(&r.qp.key) {
                Some(track) => {
                    if let Some(s) = r.state {
                        let before = track.state;
                        self.change = track.move_to(&r.qp.key, s, true, rec.ts_ns);
                        if self.change.is_some() {
                            track.table_moved = Some((rec.ts_ns, before));
                        }
                    }
                }
                None => {
                    let owner = (rec.pid, &rec.comm, rec.ts_ns);
                    self.born(&r.qp, r.state, Origin::Table, owner);
                }
            },
            Body::ProcessExit { .. } => {
                self.comms.remove(&rec.pid);
                self.envs.remove(&rec.pid);
                self.cgroups.exit(rec.pid, rec.ts_ns);
            }
            // Another program: its environment is read again.
            Body::ProcessExec { .. } => {
                self.envs.remove(&rec.pid);
            }
            Body::ProcessCgroup { id } => self.cgroups.seen(rec.pid, *id),
            // QP and CQ async events are delivered from work queues: the QP's or CQ's creator
            // owns them.
            Body::Async(a) => match &a.element {
                crate::event::AsyncElement::Qp(key) => {
                    if let Some(t) = self.qps.get(key) {
                        a.owner_pid = t.owner_pid;
                        a.owner_comm = t.owner_comm.clone();
                    }
                }
                crate::event::AsyncElement::Cq(id) => {
                    if let Some((pid, comm)) = self.cqs.get(&(a.dev.clone(), *id)) {
                        a.owner_pid = *pid;
                        a.owner_comm = comm.clone();
                    }
                }
                _ => {}
            },
            Body::Resource(r) if r.res_type == crate::event::ResType::Cq => {
                let key = (r.dev.clone(), r.id);
                if r.added && r.owner_pid != 0 {
                    self.cqs.insert(key, (r.owner_pid, r.owner_comm.clone()));
                } else if !r.added {
                    self.cqs.remove(&key);
                }
            }
            Body::QpTraffic(t) if t.owner_pid == 0 => {
                if let Some((pid, comm)) = self.owner_of(&t.qp.key) {
                    t.owner_pid = pid;
                    set_name(&mut t.owner_comm, comm);
                }
            }
            // rxe timers fire in softirq: the QP's creator owns the retransmit.
            Body::Retransmit(r) if r.owner_pid == 0 => {
                if let Some((pid, comm)) = r.qp.as_ref().and_then(|qp| self.owner_of(&qp.key)) {
                    r.owner_pid = pid;
                    set_name(&mut r.owner_comm, comm);
                }
            }
            _ => {}
        }
    }

    /// Starts the life of `qp` in `state`, owned by `(pid, comm)` from `ts`; numbers it and
    /// says so.
    fn born(
        &mut self,
        qp: &QpInfo,
        state: Option<QpState>,
        origin: Origin,
        (pid, comm, ts): (u32, &CompactString, u64),
    ) {
        let life = self.lives;
        self.lives += 1;
        self.ended.remove(&qp.key);
        self.qps.insert(
            qp.key.clone(),
            QpTrack {
                life,
                state,
                owner_pid: pid,
                owner_comm: comm.clone(),
                qp_type: qp.qp_type,
                since_ns: ts,
                origin,
                table_moved: None,
            },
        );
        self.change = Some(QpChange::Born {
            key: qp.key.clone(),
            life,
            state,
            origin,
        });
    }

    /// A live QP's life ends (destroyed, or gone from the table).
    fn gone(&mut self, key: &QpKey) {
        if let Some(t) = self.qps.remove(key) {
            self.change = Some(QpChange::Gone {
                key: key.clone(),
                life: t.life,
                state: t.state,
            });
            self.ended_at.push_back((self.now_ns, t.life, key.clone()));
            self.ended
                .insert(key.clone(), (t.life, t.owner_pid, t.owner_comm));
        }
    }

    /// Forgets QPs destroyed more than `age_ns` ago (their late samples have long arrived)
    /// and cgroups no known process is in: a long-running trace's memory bound, called once a
    /// second live.
    pub fn forget_ended(&mut self, age_ns: u64) {
        self.cgroups.forget_unused();
        let before = self.now_ns.saturating_sub(age_ns);
        while self.ended_at.front().is_some_and(|(at, ..)| *at < before) {
            if let Some((_, life, key)) = self.ended_at.pop_front() {
                if self.ended.get(&key).is_some_and(|e| e.0 == life) {
                    self.ended.remove(&key);
                }
            }
        }
    }

    /// QPs destroyed and still remembered (memory accounting, tests).
    pub fn ended_qps(&self) -> usize {
        self.ended.len()
    }

    /// What the last observed record changed in a QP's life, if anything.
    pub fn change(&self) -> Option<&QpChange> {
        self.change.as_ref()
    }

    /// The life of the live QP with this key, else of the last one that had it.
    pub fn life(&self, key: &QpKey) -> Option<usize> {
        match self.qps.get(key) {
            Some(t) => Some(t.life),
            None => self.ended.get(key).map(|e| e.0),
        }
    }

    /// Owner of a live or recently destroyed QP.
    pub fn owner(&self, key: &QpKey) -> Option<(u32, CompactString)> {
        self.owner_of(key).map(|(pid, comm)| (pid, comm.clone()))
    }

    /// [`Correlator::owner`], its name borrowed.
    fn owner_of(&self, key: &QpKey) -> Option<(u32, &CompactString)> {
        match self.qps.get(key) {
            Some(t) => Some((t.owner_pid, &t.owner_comm)),
            None => self.ended.get(key).map(|(_, pid, comm)| (*pid, comm)),
        }
    }

    pub fn qp(&self, key: &QpKey) -> Option<&QpTrack> {
        self.qps.get(key)
    }

    pub fn comm(&self, pid: u32) -> Option<&str> {
        self.comms.get(&pid).map(CompactString::as_str)
    }

    /// Where the process a record is about runs (its owner's cgroup when the record names an
    /// owner: [`Record::subject_pid`]), when its cgroup and the cgroup's path are known.
    pub fn place(&self, rec: &Record) -> Option<&Place> {
        self.cgroups.of(rec.subject_pid()).map(|p| &**p)
    }

    /// Where process `pid` runs, when known.
    pub fn place_of(&self, pid: u32) -> Option<&Place> {
        self.cgroups.of(pid).map(|p| &**p)
    }

    pub fn cgroups(&self) -> &Cgroups {
        &self.cgroups
    }

    /// Process `pid` has transport variable `name` set to `value` (read by the recorder).
    pub fn env_seen(&mut self, pid: u32, name: &str, value: &str) {
        let vars = self.envs.entry(pid).or_default();
        match vars.iter_mut().find(|(n, _)| n == name) {
            Some((_, v)) => *v = value.to_string(),
            None => vars.push((name.into(), value.to_string())),
        }
    }

    /// The transport variables of process `pid` (empty when none were read).
    pub fn env_of(&self, pid: u32) -> &[(CompactString, String)] {
        self.envs.get(&pid).map_or(&[], Vec::as_slice)
    }

    /// Cgroup `id` is at `path` (the recorder resolved it).
    pub fn cgroup_named(&mut self, id: u64, path: &str) {
        self.cgroups.named(id, path);
    }
}

/// `dst` becomes `name`, left alone when it is already (a record decoded into again and again
/// mostly meets the same owner).
fn set_name(dst: &mut CompactString, name: &CompactString) {
    if dst != name {
        dst.clone_from(name);
    }
}

#[cfg(test)]
mod tests;
