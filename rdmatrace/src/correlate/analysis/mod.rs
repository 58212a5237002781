//! The analysis behind `report`, `verdict` and `top`: per-process and per-QP accounts,
//! retransmit blame and anomalies, built from correlated records. Pure: no I/O, no clock; feed
//! it each record with the correlator that annotated it ([`Analyzer::push`]) and call
//! [`Analyzer::finish`]. QP state and ownership are the correlator's: this module reads them.
//!
//! By concern: [`verdict`] (is it RDMA?), [`qps`] (QP accounting), [`blame`] (retransmits),
//! [`anomalies`] (what went wrong).

pub mod addressing;
pub mod anomalies;
pub mod blame;
pub mod counters;
pub mod diagnosis;
pub mod estimate;
pub mod fabric;
pub mod handshakes;
pub mod qps;
pub mod transport;
pub mod verdict;

use std::collections::BTreeMap;

pub use anomalies::Anomaly;
pub use blame::{BlameRow, RETRANSMIT_COUNTERS};
pub use diagnosis::Diagnosis;
pub use qps::{QpLife, STUCK_NS};
pub use verdict::{ProcStats, Verdict, TCP_DATA_THRESHOLD};

use crate::{
    correlate::{Correlator, Origin, QpChange},
    event::{Body, CompactString, QpKey, QpState, Record, ResType},
};

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcReport {
    pub stats: ProcStats,
    pub verdict: Verdict,
    pub evidence: Vec<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    pub first_wall_ns: u64,
    pub last_wall_ns: u64,
    pub events: u64,
    pub lost: u64,
    /// The lost events whose CPU is known (recordings from version 3, live runs), per CPU.
    pub lost_per_cpu: BTreeMap<u32, u64>,
    pub processes: Vec<ProcReport>,
    pub qps: Vec<QpLife>,
    pub blame: Vec<BlameRow>,
    /// Per-port counter totals that speak of retransmission, for attribution that is only
    /// per port (no per-QP source).
    pub port_counters: Vec<(CompactString, u32, String, u64)>,
    pub anomalies: Vec<Anomaly>,
    /// Faults named with cause, evidence and fix, in time order.
    pub diagnoses: Vec<Diagnosis>,
    /// TCP and RDMA CM connection ends with their handshake steps.
    pub net_ends: Vec<handshakes::NetEnd>,
}

/// Cloneable so a live view (`top`) can take a report now and keep accumulating.
#[derive(Clone, Default)]
pub struct Analyzer {
    procs: BTreeMap<u32, ProcStats>,
    book: qps::QpBook,
    blame: blame::Blame,
    anomalies: anomalies::Anomalies,
    diag: diagnosis::Diagnoser,
    traffic_measured: bool,
    /// Port traffic counters shared among processes (verdicts without per-QP traffic).
    shares: estimate::PortShares,
    first_wall_ns: u64,
    last_wall_ns: u64,
    last_ts_ns: u64,
    events: u64,
    lost: u64,
    lost_per_cpu: BTreeMap<u32, u64>,
    /// Every port counter's total over the run (read as causes at the end).
    counter_totals: counters::Totals,
    /// (pid, kind) of the process diagnoses [`Analyzer::fresh_diagnoses`] returned.
    announced_procs: rustc_hash::FxHashSet<(u32, &'static str)>,
    /// TCP and RDMA CM connection ends, for pairing across hosts.
    handshakes: handshakes::Handshakes,
}

impl Analyzer {
    pub fn new() -> Analyzer {
        Analyzer::default()
    }

    fn proc(&mut self, pid: u32, comm: &str) -> &mut ProcStats {
        let p = self.procs.entry(pid).or_insert_with(|| ProcStats {
            pid,
            ..Default::default()
        });
        if !comm.is_empty() && p.comm != comm {
            p.comm = comm.into();
        }
        p
    }

    /// A long-running agent's memory bound: forgets the processes `gone` says are gone (their
    /// accounts and blame rows), QPs destroyed before `before_ns`, and all but the last
    /// `keep_anomalies` anomalies (see [`Analyzer::anomalies_since`]).
    pub fn prune(&mut self, gone: impl Fn(u32) -> bool, before_ns: u64, keep_anomalies: usize) {
        self.procs.retain(|pid, _| !gone(*pid));
        self.announced_procs.retain(|(pid, _)| !gone(*pid));
        self.blame.forget(&gone);
        self.book.forget_destroyed(before_ns);
        let kept: rustc_hash::FxHashSet<&QpKey> = self.book.qps.iter().map(|q| &q.key).collect();
        self.anomalies.forget_qps(|k| kept.contains(k));
        self.anomalies.trim(keep_anomalies);
        self.diag.forget_qps(|k| kept.contains(k));
        self.diag.forget_procs(&gone);
        self.diag.trim(keep_anomalies);
        self.handshakes.forget_before(before_ns);
    }

    /// The verdict of every process with something worth one, now (no copy of the rest: a
    /// live view's once-a-second question).
    pub fn verdicts(&self) -> Vec<ProcReport> {
        self.procs
            .values()
            .filter(|p| p.active())
            .map(|p| {
                let (verdict, evidence) = verdict::verdict(p, self.traffic_measured);
                ProcReport {
                    stats: p.clone(),
                    verdict,
                    evidence,
                }
            })
            .collect()
    }

    /// Each process worth a verdict with its verdict now, without evidence or copies (a live
    /// agent's once-a-second question).
    pub fn verdict_kinds(&self) -> impl Iterator<Item = (&ProcStats, Verdict)> {
        self.procs
            .values()
            .filter(|p| p.active())
            .map(|p| (p, verdict::classify(p, self.traffic_measured)))
    }

    /// (pid, comm, kind, dev) of the diagnoses found since the last call, as known now (a live
    /// agent's once-a-second question). `fabric_loss` is judged on a whole run: not here.
    pub fn fresh_diagnoses(
        &mut self,
    ) -> Vec<(u32, CompactString, &'static str, Option<CompactString>)> {
        let mut out = self.diag.fresh(&self.book.qps, self.traffic_measured);
        for p in self.procs.values().filter(|p| p.active()) {
            let kind = match verdict::classify(p, self.traffic_measured) {
                Verdict::Tcp | Verdict::TcpFallback | Verdict::Mixed
                    if crate::environ::disables_rdma(&p.env).is_some() =>
                {
                    "transport_disabled_by_env"
                }
                Verdict::TcpFallback if transport::found_no_device(p) => "no_rdma_device",
                _ => continue,
            };
            if self.announced_procs.insert((p.pid, kind)) {
                out.push((p.pid, p.comm.clone(), kind, None));
            }
        }
        out
    }

    /// The QPs alive now, with their accounts.
    pub fn live_qps(&self) -> impl Iterator<Item = &QpLife> {
        self.book.qps.iter().filter(|q| q.destroyed_ns.is_none())
    }

    /// Anomalies found so far, counting those pruned.
    pub fn anomalies_total(&self) -> usize {
        self.anomalies.dropped + self.anomalies.list.len()
    }

    /// The anomalies after the first `n` ever found (those still kept).
    pub fn anomalies_since(&self, n: usize) -> &[Anomaly] {
        let skip = n.saturating_sub(self.anomalies.dropped);
        &self.anomalies.list[skip.min(self.anomalies.list.len())..]
    }

    /// Processes with an account.
    pub fn processes(&self) -> usize {
        self.procs.len()
    }

    /// Whether a per-QP traffic source reported (zero RDMA bytes then means none moved).
    pub fn traffic_measured(&self) -> bool {
        self.traffic_measured
    }

    /// One record, after `state` observed it (owners filled in, its QP change known).
    pub fn push(&mut self, rec: &Record, state: &Correlator) {
        self.events += 1;
        if self.first_wall_ns == 0 {
            self.first_wall_ns = rec.wall_ns;
        }
        self.last_wall_ns = self.last_wall_ns.max(rec.wall_ns);
        self.last_ts_ns = self.last_ts_ns.max(rec.ts_ns);
        if let Some(change) = state.change() {
            self.qp_change(rec, change);
        }
        match &rec.body {
            Body::QpCreate { ret, .. } if *ret != 0 => self.anomalies.create_failed(rec, *ret),
            Body::QpModify { qp, attrs, ret } if *ret != 0 => {
                if let Some(q) = self.book.live_mut(&qp.key, state) {
                    q.failed_modifies += 1;
                }
                self.anomalies.modify_failed(rec, &qp.key.dev, attrs, *ret);
                self.diag.modify_failed(rec, &qp.key, attrs, *ret);
            }
            Body::QpModify { qp, attrs, .. } => {
                self.anomalies.modified(rec, &qp.key.dev, attrs);
                self.diag.modified(&qp.key, attrs);
                if let Some(q) = self.book.live_mut(&qp.key, state) {
                    if let Some(d) = attrs.dest_qpn {
                        q.peer_qpn = Some(d);
                    }
                    if let Some(g) = attrs.dgid {
                        q.peer_gid = Some(g);
                        let owner = q.owner_pid;
                        let addr = std::net::Ipv6Addr::from(g).to_canonical();
                        if let Some(p) = self.procs.get_mut(&owner) {
                            p.rdma_peer(addr);
                        }
                    }
                    if let Some(i) = attrs.sgid_index {
                        q.sgid_index = Some(i);
                    }
                }
            }
            Body::QpRes(r) if r.state.is_some() => {
                self.diag.table_row(&r.qp.key.dev);
                if let Some(q) = self.book.live_mut(&r.qp.key, state) {
                    if q.peer_qpn.is_none() {
                        q.peer_qpn = r.rqpn;
                    }
                }
            }
            Body::Resource(r) if matches!(r.res_type, ResType::Cq | ResType::Mr) => {
                self.diag.resource(r)
            }
            Body::Resource(r) if r.added && r.res_type == ResType::Ctx && r.owner_pid != 0 => {
                let p = self.proc(r.owner_pid, &r.owner_comm);
                p.ctx_opens += 1;
                if !p.devices.contains(&r.dev) {
                    p.devices.push(r.dev.clone());
                }
            }
            Body::VerbsCall(v) if v.func == "ibv_get_device_list" => {
                self.proc(rec.pid, &rec.comm).device_lookups += 1;
            }
            Body::VerbsCall(v) if v.func == "ibv_open_device" => {
                self.proc(rec.pid, &rec.comm).device_open_calls += 1;
            }
            Body::ProcessExit { exit_code, .. } => {
                if let Some(p) = self.procs.get_mut(&rec.pid) {
                    p.exit_code = Some(*exit_code);
                    p.exit_ns = Some(rec.ts_ns);
                }
            }
            Body::TcpState(t) => self.handshakes.tcp(rec, t),
            Body::TcpBytes(t) => {
                let p = self.proc(rec.pid, &rec.comm);
                p.tcp_tx_bytes += t.tx_bytes;
                p.tcp_rx_bytes += t.rx_bytes;
                p.tcp_calls += t.tx_calls + t.rx_calls;
                p.tcp_to(t.peer, t.tx_bytes + t.rx_bytes);
            }
            Body::QpTraffic(t) => {
                self.traffic_measured = true;
                if let Some(q) = self.book.latest_mut(&t.qp.key, state) {
                    q.tx_bytes += t.tx_bytes;
                    q.tx_packets += t.tx_packets;
                    q.rx_bytes += t.rx_bytes;
                    q.rx_packets += t.rx_packets;
                }
                if t.owner_pid != 0 {
                    let p = self.proc(t.owner_pid, &t.owner_comm);
                    p.rdma_tx_bytes += t.tx_bytes;
                    p.rdma_tx_packets += t.tx_packets;
                    p.rdma_rx_bytes += t.rx_bytes;
                    p.rdma_rx_packets += t.rx_packets;
                }
            }
            Body::WcError(w) => {
                self.anomalies.wc_error(rec, w);
                self.diag.wc_error(rec, w);
                if let Some(q) = self.book.latest_mut(&w.qp, state) {
                    q.wc_errors += 1;
                }
                if w.owner_pid != 0 {
                    self.proc(w.owner_pid, &w.owner_comm).wc_errors += 1;
                }
            }
            Body::Retransmit(r) => {
                let is_rdma = self.blame.retransmit(r);
                if let Some(q) =
                    r.qp.as_ref()
                        .and_then(|qp| self.book.latest_mut(&qp.key, state))
                {
                    q.retransmits += 1;
                    if r.reason == "rnr_nak_timer" {
                        q.rnr_retransmits += 1;
                    }
                }
                if r.owner_pid != 0 {
                    let p = self.proc(r.owner_pid, &r.owner_comm);
                    if is_rdma {
                        p.retrans_rdma += 1;
                    } else {
                        p.retrans_tcp += 1;
                    }
                }
            }
            Body::QpCounter(c) if RETRANSMIT_COUNTERS.contains(&c.name.as_str()) && c.delta > 0 => {
                let owner = c.qpns.first().and_then(|q| {
                    let key = QpKey {
                        dev: c.dev.clone(),
                        qpn: *q,
                    };
                    self.book
                        .latest_mut(&key, state)
                        .map(|l| (l.owner_pid, l.owner_comm.clone()))
                });
                let (pid, comm) = match (rec.pid, owner) {
                    (0, Some(o)) => o,
                    (p, _) => (p, rec.comm.clone()),
                };
                if pid != 0 {
                    self.proc(pid, &comm).retrans_rdma += c.delta;
                }
                self.blame.qp_counter(c, pid, comm);
            }
            Body::Counter(c) => {
                if RETRANSMIT_COUNTERS.contains(&c.name.as_str()) {
                    self.blame.port_counter(c);
                }
                if crate::ports::traffic_counter(&c.name).is_some() {
                    for (pid, e) in self.shares.counter(c, rec.ts_ns) {
                        self.proc(pid, "")
                            .rdma_estimate
                            .get_or_insert_default()
                            .add(&e);
                    }
                    let blank = self.shares.blank(&c.dev);
                    for pid in self.shares.owners(&c.dev) {
                        self.proc(pid, "").rdma_estimate.get_or_insert(blank);
                    }
                }
                *self
                    .counter_totals
                    .entry((c.dev.clone(), c.port, c.name.clone()))
                    .or_default() += c.delta;
            }
            Body::Port(p) => {
                if let Some(mtu) = p.active_mtu {
                    self.shares.mtu(&p.dev, mtu);
                }
                self.anomalies.port(rec, p);
            }
            Body::Gid(g) => self.diag.gid(g),
            Body::UmemFailed(u) => self.diag.umem_failed(rec, u),
            Body::QpCaps(c) => self.diag.qp_caps(rec, c),
            Body::QueueCaps(c) => self.diag.queue_caps(rec, c),
            Body::Async(a) => {
                self.anomalies.async_event(rec, a);
                self.diag.async_event(rec, a);
            }
            Body::Cm(c) => {
                self.anomalies.cm(rec, c);
                self.handshakes.cm(rec, c);
            }
            Body::Lost { count, cpu } => {
                self.lost += count;
                if let Some(cpu) = cpu {
                    *self.lost_per_cpu.entry(*cpu).or_default() += count;
                }
                self.anomalies.lost(rec, *count, *cpu);
            }
            _ => {}
        }
        self.place(rec, state);
    }

    /// Keeps each process's cgroup (taken when first known, replaced when it moves) and its
    /// transport variables.
    fn place(&mut self, rec: &Record, state: &Correlator) {
        let pid = rec.subject_pid();
        if pid == 0 {
            return;
        }
        let moved = matches!(rec.body, Body::ProcessCgroup { .. });
        if let Some(p) = self.procs.get_mut(&pid) {
            let env = state.env_of(pid);
            if !env.is_empty() && p.env.len() != env.len() {
                p.env = env.to_vec();
            }
            if p.place.is_none() || moved {
                if let Some(place) = state.cgroups().of(pid) {
                    p.place = Some(place.clone());
                }
            }
        }
    }

    /// A QP life the correlator started, moved or ended with `rec`.
    fn qp_change(&mut self, rec: &Record, change: &QpChange) {
        match change {
            QpChange::Born {
                key,
                life,
                state,
                origin,
            } => {
                let from_table = *origin == Origin::Table;
                // QPs the kernel owns (pid 0 in the table) have no account, nor QPs first seen
                // at a modify (no type, no creation: only the table can say what they are).
                if (from_table && rec.pid == 0) || *origin == Origin::Modify {
                    return;
                }
                let (qp_type, peer) = match &rec.body {
                    Body::QpCreate { qp, .. } => (qp.qp_type, None),
                    Body::QpRes(r) => (r.qp.qp_type, r.rqpn),
                    _ => return,
                };
                let p = self.proc(rec.pid, &rec.comm);
                p.uses(&key.dev, qp_type);
                p.qps_created += 1;
                // A QP older than the trace may already be connected.
                if from_table && QpLife::connected(*state) {
                    p.qps_rts += 1;
                    self.qp_connected(key, *life, rec.pid, rec.ts_ns);
                }
                let q = self.book.open(*life, key, rec, qp_type, *state);
                q.peer_qpn = peer;
            }
            QpChange::State {
                key,
                life,
                from,
                to,
                by_driver,
            } => {
                let Some(q) = self.book.life_mut(*life) else {
                    return;
                };
                q.enter(*to, rec.ts_ns);
                let owner = q.owner_pid;
                let (was, is) = (QpLife::connected(*from), QpLife::connected(Some(*to)));
                // The kernel's table showing it connected counts too: the owner's modify was
                // missed (the driver never connects a QP by itself).
                if is && !was {
                    self.proc(owner, "").qps_rts += 1;
                }
                if is && !was {
                    self.qp_connected(key, *life, owner, rec.ts_ns);
                } else if was && !is {
                    self.shares.disconnected(&key.dev, *life, rec.ts_ns);
                }
                if *to == QpState::Err {
                    self.anomalies.moved_to_err(rec, key, *from, *by_driver);
                    self.diag.moved_to_err(key, *from, *by_driver);
                }
            }
            QpChange::Gone { life, state, .. } => {
                let Some(q) = self.book.life_mut(*life) else {
                    return;
                };
                let open = q.end(rec.ts_ns);
                let dev = q.key.dev.clone();
                self.shares.disconnected(&dev, *life, rec.ts_ns);
                if let (Body::QpDestroy { .. }, Some(s)) = (&rec.body, state) {
                    self.anomalies.stuck_at_destroy(rec, *s, open);
                }
            }
        }
    }

    /// QP life `life` of `pid` connected: its traffic may be in its device's port counters.
    fn qp_connected(&mut self, key: &QpKey, life: usize, pid: u32, ts: u64) {
        self.shares.connected(&key.dev, life, pid, ts);
        if self.shares.counted(&key.dev) {
            let blank = self.shares.blank(&key.dev);
            self.proc(pid, "").rdma_estimate.get_or_insert(blank);
        }
    }

    /// Closes open intervals at the last event and produces the report.
    pub fn finish(mut self) -> Report {
        let end = self.last_ts_ns;
        for (i, s, open) in self.book.close_all(end) {
            let q = &self.book.qps[i];
            self.anomalies.list.push(Anomaly {
                ts_ns: end,
                wall_ns: self.last_wall_ns,
                pid: q.owner_pid,
                comm: q.owner_comm.clone(),
                dev: Some(q.key.dev.clone()),
                qpn: Some(q.key.qpn),
                kind: "qp_stuck",
                detail: format!(
                    "QP still in {s} after {:.1} s at the end of the trace",
                    open as f64 / 1e9
                ),
            });
        }
        for q in &mut self.book.qps {
            q.local_gid = q
                .sgid_index
                .and_then(|i| self.diag.local_gid(&q.key.dev, i));
        }
        let processes = self.verdicts();
        let mut diagnoses = self.diag.finish(&self.book.qps, self.traffic_measured);
        transport::transport_env(&processes, self.last_wall_ns, &mut diagnoses);
        transport::no_device(&processes, self.last_wall_ns, &mut diagnoses);
        let (blame, port_counters) = self.blame.finish();
        let slow = self.diag.short_timeouts(
            &self.book.qps,
            &port_counters,
            self.last_wall_ns,
            &mut diagnoses,
        );
        fabric::fabric_loss(
            &self.book.qps,
            &port_counters,
            |k| self.diag.errored(k) || slow.contains(k),
            self.last_wall_ns,
            &mut diagnoses,
        );
        counters::interpret(
            &self.counter_totals,
            &self.book.qps,
            self.last_wall_ns,
            &mut diagnoses,
        );
        let mut anomalies = self.anomalies.list;
        anomalies.sort_by_key(|a| a.ts_ns);
        Report {
            first_wall_ns: self.first_wall_ns,
            last_wall_ns: self.last_wall_ns,
            events: self.events,
            lost: self.lost,
            lost_per_cpu: self.lost_per_cpu,
            processes,
            qps: self.book.qps,
            blame,
            port_counters,
            anomalies,
            diagnoses,
            net_ends: self.handshakes.ends,
        }
    }
}

#[cfg(test)]
mod addressing_tests;
#[cfg(test)]
mod counters_tests;
#[cfg(test)]
mod diagnosis_tests;
#[cfg(test)]
mod estimate_tests;
#[cfg(test)]
mod fabric_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod timeout_tests;
