//! The correlator: pure state over the event stream (no I/O, no clock). It tracks each QP's
//! state and owner by (device, QPN) and each process's name, and annotates events with what the
//! kernel record alone cannot say (e.g. the state a QP is leaving).

pub mod analysis;
pub mod filter;

use rustc_hash::FxHashMap;

use crate::event::{Body, CompactString, QpKey, QpState, Record};

/// What the correlator knows about a live QP.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QpTrack {
    pub state: Option<QpState>,
    pub owner_pid: u32,
    pub owner_comm: CompactString,
    pub qp_type: u32,
    /// Monotonic ns of the last state change.
    pub since_ns: u64,
}

/// Its maps are looked up on every record: they hash with FxHash (keys are kernel ids and
/// names, not attacker-chosen in a way that matters for a post-processing tool) rather than
/// SipHash, and are never iterated, so their order cannot reach any output.
#[derive(Default)]
pub struct Correlator {
    qps: FxHashMap<QpKey, QpTrack>,
    /// Destroyed QPs' owners: samples and timers can still arrive after the destroy. A new QP
    /// with the same (device, QPN) replaces the entry.
    ended: FxHashMap<QpKey, (u32, CompactString)>,
    comms: FxHashMap<u32, CompactString>,
}

impl Correlator {
    pub fn new() -> Correlator {
        Correlator::default()
    }

    /// Updates state from `rec` and fills in what it can (the current state of a modify whose
    /// caller did not pass `IB_QP_CUR_STATE`).
    pub fn observe(&mut self, rec: &mut Record) {
        // Most records repeat their process's name: write only when it is new or changed.
        if !rec.comm.is_empty()
            && rec.pid != 0
            && self.comms.get(&rec.pid).map(CompactString::as_str) != Some(rec.comm.as_str())
        {
            self.comms.insert(rec.pid, rec.comm.clone());
        }
        match &mut rec.body {
            Body::QpCreate { qp, ret } if *ret == 0 => {
                self.ended.remove(&qp.key);
                self.qps.insert(
                    qp.key.clone(),
                    QpTrack {
                        state: Some(QpState::Reset),
                        owner_pid: rec.pid,
                        owner_comm: rec.comm.clone(),
                        qp_type: qp.qp_type,
                        since_ns: rec.ts_ns,
                    },
                );
            }
            Body::QpModify { qp, attrs, ret } => {
                let track = self.qps.get_mut(&qp.key);
                if attrs.cur_state.is_none() {
                    attrs.cur_state = track.as_ref().and_then(|t| t.state);
                }
                if *ret == 0 {
                    if let (Some(track), Some(new)) = (track, attrs.new_state) {
                        if track.state != Some(new) {
                            track.state = Some(new);
                            track.since_ns = rec.ts_ns;
                        }
                    }
                }
            }
            Body::QpDestroy { qp, ret } if *ret == 0 => {
                if let Some(t) = self.qps.remove(&qp.key) {
                    self.ended
                        .insert(qp.key.clone(), (t.owner_pid, t.owner_comm));
                }
            }
            // The kernel's QP table: owners and states of QPs older than the trace, and state
            // changes made by the driver (ERR after a transport error).
            Body::QpRes(r) if r.change != crate::event::ResChange::Gone => {
                let track = self.qps.entry(r.qp.key.clone()).or_insert_with(|| QpTrack {
                    state: r.state,
                    owner_pid: rec.pid,
                    owner_comm: rec.comm.clone(),
                    qp_type: r.qp.qp_type,
                    since_ns: rec.ts_ns,
                });
                if let Some(s) = r.state {
                    if track.state != Some(s) {
                        track.state = Some(s);
                        track.since_ns = rec.ts_ns;
                    }
                }
            }
            Body::ProcessExit { .. } => {
                self.comms.remove(&rec.pid);
            }
            // QP async events are delivered from work queues: the QP's creator owns them.
            Body::Async(a) => {
                if let crate::event::AsyncElement::Qp(key) = &a.element {
                    if let Some(t) = self.qps.get(key) {
                        a.owner_pid = t.owner_pid;
                        a.owner_comm = t.owner_comm.clone();
                    }
                }
            }
            Body::QpTraffic(t) if t.owner_pid == 0 => {
                if let Some((pid, comm)) = self.owner(&t.qp.key) {
                    t.owner_pid = pid;
                    t.owner_comm = comm;
                }
            }
            // rxe timers fire in softirq: the QP's creator owns the retransmit.
            Body::Retransmit(r) if r.owner_pid == 0 => {
                if let Some((pid, comm)) = r.qp.as_ref().and_then(|qp| self.owner(&qp.key)) {
                    r.owner_pid = pid;
                    r.owner_comm = comm;
                }
            }
            _ => {}
        }
    }

    /// Owner of a live or recently destroyed QP.
    pub fn owner(&self, key: &QpKey) -> Option<(u32, CompactString)> {
        match self.qps.get(key) {
            Some(t) => Some((t.owner_pid, t.owner_comm.clone())),
            None => self.ended.get(key).cloned(),
        }
    }

    pub fn qp(&self, key: &QpKey) -> Option<&QpTrack> {
        self.qps.get(key)
    }

    pub fn comm(&self, pid: u32) -> Option<&str> {
        self.comms.get(&pid).map(CompactString::as_str)
    }
}

#[cfg(test)]
mod tests;
