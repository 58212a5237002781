//! The analysis behind `report` and `verdict`: per-process and per-QP accounts, retransmit
//! blame and anomalies, built from correlated records. Pure: no I/O, no clock; feed it
//! records (live or replayed) and call [`Analyzer::finish`].

use std::collections::BTreeMap;

use rustc_hash::{FxHashMap, FxHashSet};

use crate::event::{AsyncElement, Body, CompactString, QpKey, QpState, Record, ResType};

/// TCP traffic below this is a control channel, not a data path (perftest, MPI bootstrap...).
pub const TCP_DATA_THRESHOLD: u64 = 1 << 20;
/// A QP left in INIT or RTR longer than this is reported as stuck.
pub const STUCK_NS: u64 = 5_000_000_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Verdict {
    Rdma,
    TcpFallback,
    Tcp,
    Mixed,
    Idle,
    Unknown,
}

impl Verdict {
    pub fn name(self) -> &'static str {
        match self {
            Verdict::Rdma => "rdma",
            Verdict::TcpFallback => "tcp_fallback",
            Verdict::Tcp => "tcp",
            Verdict::Mixed => "mixed",
            Verdict::Idle => "idle",
            Verdict::Unknown => "unknown",
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProcStats {
    pub pid: u32,
    pub comm: CompactString,
    pub devices: Vec<CompactString>,
    pub ctx_opens: u64,
    pub qps_created: u64,
    pub qps_rts: u64,
    pub qp_types: Vec<String>,
    pub rdma_tx_bytes: u64,
    pub rdma_tx_packets: u64,
    pub rdma_rx_bytes: u64,
    pub rdma_rx_packets: u64,
    /// Error completions on its CQs.
    pub wc_errors: u64,
    pub tcp_tx_bytes: u64,
    pub tcp_rx_bytes: u64,
    pub tcp_calls: u64,
    pub retrans_rdma: u64,
    pub retrans_tcp: u64,
    pub exit_code: Option<i32>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QpLife {
    pub key: QpKey,
    pub owner_pid: u32,
    pub owner_comm: CompactString,
    pub qp_type: u32,
    pub created_ns: u64,
    pub destroyed_ns: Option<u64>,
    pub state: Option<QpState>,
    pub state_since_ns: u64,
    /// ns spent in each state (closed intervals only, plus the open one at finish).
    pub time_in: BTreeMap<&'static str, u64>,
    pub peer_qpn: Option<u32>,
    pub peer_gid: Option<[u8; 16]>,
    pub tx_bytes: u64,
    pub tx_packets: u64,
    pub rx_bytes: u64,
    pub rx_packets: u64,
    pub retransmits: u64,
    /// Error completions (first status kept in the anomalies).
    pub wc_errors: u64,
    pub failed_modifies: u64,
}

impl QpLife {
    /// A QP first seen in `rec`, owned by its process, with nothing counted yet.
    fn new(key: &QpKey, rec: &Record, qp_type: u32) -> QpLife {
        QpLife {
            key: key.clone(),
            owner_pid: rec.pid,
            owner_comm: rec.comm.clone(),
            qp_type,
            created_ns: rec.ts_ns,
            destroyed_ns: None,
            state: None,
            state_since_ns: rec.ts_ns,
            time_in: BTreeMap::new(),
            peer_qpn: None,
            peer_gid: None,
            tx_bytes: 0,
            tx_packets: 0,
            rx_bytes: 0,
            rx_packets: 0,
            retransmits: 0,
            wc_errors: 0,
            failed_modifies: 0,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Anomaly {
    pub ts_ns: u64,
    pub wall_ns: u64,
    pub pid: u32,
    pub comm: CompactString,
    pub dev: Option<CompactString>,
    pub qpn: Option<u32>,
    pub kind: &'static str,
    pub detail: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlameRow {
    pub pid: u32,
    pub comm: CompactString,
    pub transport: &'static str,
    /// `rxe0 QPN 0x11` or `192.0.2.1:5000->192.0.2.2:80`.
    pub target: String,
    pub count: u64,
    pub reasons: Vec<String>,
}

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
}

/// (owner pid, transport, target): one blame row.
type BlameKey = (u32, &'static str, String);

/// Cloneable so a live view (`top`) can take a report now and keep accumulating.
#[derive(Clone, Default)]
pub struct Analyzer {
    procs: BTreeMap<u32, ProcStats>,
    live: FxHashMap<QpKey, usize>,
    qps: Vec<QpLife>,
    blame: FxHashMap<BlameKey, (CompactString, u64, Vec<String>)>,
    port_counters: BTreeMap<(CompactString, u32, String), u64>,
    anomalies: Vec<Anomaly>,
    /// (QP, wc status) pairs already reported as an anomaly; repeats are only counted.
    wc_reported: FxHashSet<(QpKey, CompactString)>,
    /// First error completion status per QP (flushes only if nothing else), to say why a QP
    /// went to ERR.
    last_wc: FxHashMap<QpKey, CompactString>,
    /// Ports as last sampled, for MTU checks and port-down anomalies.
    ports: BTreeMap<(CompactString, u32), crate::event::PortInfo>,
    traffic_measured: bool,
    first_wall_ns: u64,
    last_wall_ns: u64,
    last_ts_ns: u64,
    events: u64,
    lost: u64,
    lost_per_cpu: BTreeMap<u32, u64>,
}

/// Counters that count retransmission-related trouble (rxe and mlx5 names).
const RETRANSMIT_COUNTERS: &[&str] = &[
    "duplicate_request",
    "out_of_seq_request",
    "rcvd_seq_err",
    "rcvd_rnr_err",
    "send_rnr_err",
    "completer_retry_err",
    "retry_exceeded_err",
    "retry_rnr_exceeded_err",
    "out_of_sequence",
    "packet_seq_err",
    "implied_nak_seq_err",
    "local_ack_timeout_err",
    "rnr_nak_retry_err",
    "req_transport_retries_exceeded",
    "req_rnr_retries_exceeded",
    "roce_adp_retrans",
    "roce_adp_retrans_to",
    "roce_slow_restart",
];

pub(crate) fn mib(b: u64) -> String {
    if b >= 1 << 30 {
        format!("{:.1} GiB", b as f64 / (1u64 << 30) as f64)
    } else if b >= 1 << 20 {
        format!("{:.1} MiB", b as f64 / (1u64 << 20) as f64)
    } else if b >= 1 << 10 {
        format!("{:.1} KiB", b as f64 / 1024.0)
    } else {
        format!("{b} B")
    }
}

/// What an error completion usually means, for the reader of an anomaly.
fn wc_status_hint(status: &str) -> &'static str {
    match status {
        "RETRY_EXC_ERR" => {
            ": transport retries exhausted (peer unreachable, lossy path or dead peer QP)"
        }
        "RNR_RETRY_EXC_ERR" => ": receiver not ready too often (peer posts receives too slowly)",
        "REM_ACCESS_ERR" => ": the peer refused access (rkey, bounds or MR access flags)",
        "LOC_PROT_ERR" => ": local protection error (lkey or MR bounds)",
        "LOC_LEN_ERR" => ": message longer than the posted receive buffer",
        "REM_INV_REQ_ERR" => ": the peer found the request invalid (opcode, length or QP type)",
        "WR_FLUSH_ERR" => ": work request flushed because the QP is in ERR",
        "LOC_ACCESS_ERR" => ": local access error (MR access flags)",
        "REM_OP_ERR" => ": the peer could not complete the operation",
        _ => "",
    }
}

/// Whether `from -> to` is a transition the IB spec allows at all (ib_modify_qp_is_ok's table,
/// ignoring attribute requirements).
fn legal(from: QpState, to: QpState) -> bool {
    use QpState::*;
    matches!(
        (from, to),
        (_, Reset)
            | (_, Err)
            | (Reset, Init)
            | (Init, Init)
            | (Init, Rtr)
            | (Rtr, Rts)
            | (Rts, Rts)
            | (Rts, Sqd)
            | (Sqd, Rts)
            | (Sqd, Sqd)
            | (Sqe, Rts)
    )
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

    fn anomaly(&mut self, rec: &Record, kind: &'static str, detail: String) {
        self.anomalies.push(Anomaly {
            ts_ns: rec.ts_ns,
            wall_ns: rec.wall_ns,
            pid: rec.subject_pid(),
            comm: rec.subject_comm().into(),
            dev: rec.dev().map(CompactString::from),
            qpn: rec.qpn(),
            kind,
            detail,
        });
    }

    /// The live QP with this key, else the last one that had it.
    fn qp_mut(&mut self, key: &QpKey) -> Option<&mut QpLife> {
        match self.live.get(key) {
            Some(&i) => self.qps.get_mut(i),
            None => self.qps.iter_mut().rev().find(|q| &q.key == key),
        }
    }

    fn set_state(q: &mut QpLife, new: QpState, ts: u64) {
        if let Some(old) = q.state {
            *q.time_in.entry(old.name()).or_default() += ts.saturating_sub(q.state_since_ns);
        }
        q.state = Some(new);
        q.state_since_ns = ts;
    }

    /// One correlated record (owners already filled in by the correlator).
    pub fn push(&mut self, rec: &Record) {
        self.events += 1;
        if self.first_wall_ns == 0 {
            self.first_wall_ns = rec.wall_ns;
        }
        self.last_wall_ns = self.last_wall_ns.max(rec.wall_ns);
        self.last_ts_ns = self.last_ts_ns.max(rec.ts_ns);
        match &rec.body {
            Body::QpCreate { qp, ret } => {
                if *ret != 0 {
                    self.anomaly(
                        rec,
                        "qp_create_failed",
                        format!("QP create failed: {}", crate::sinks::text::errno_text(*ret)),
                    );
                    return;
                }
                let p = self.proc(rec.pid, &rec.comm);
                p.qps_created += 1;
                let t = crate::event::qp_type_name(qp.qp_type);
                if !p.qp_types.contains(&t) {
                    p.qp_types.push(t);
                }
                if !p.devices.contains(&qp.key.dev) {
                    p.devices.push(qp.key.dev.clone());
                }
                self.live.insert(qp.key.clone(), self.qps.len());
                let mut life = QpLife::new(&qp.key, rec, qp.qp_type);
                life.state = Some(QpState::Reset);
                self.qps.push(life);
            }
            Body::QpModify { qp, attrs, ret } => {
                let idx = self.live.get(&qp.key).copied();
                if *ret != 0 {
                    if let Some(i) = idx {
                        self.qps[i].failed_modifies += 1;
                    }
                    let from = attrs.cur_state.map_or("?", |s| s.name());
                    let to = attrs.new_state.map_or("(same)", |s| s.name());
                    let likely = match (attrs.cur_state, attrs.new_state) {
                        (Some(f), Some(t)) if !legal(f, t) => format!("illegal transition {f}->{t}"),
                        (_, Some(QpState::Rtr)) => match self.mtu_too_big(&qp.key.dev, attrs.path_mtu) {
                            Some(why) => why,
                            None => "check path MTU against the port's active MTU, the GID index and the dest QPN/GID".into(),
                        },
                        (_, Some(QpState::Rts)) => "check timeout / retry_cnt / rnr_retry / SQ PSN".into(),
                        _ => "attributes rejected by the driver".into(),
                    };
                    self.anomaly(
                        rec,
                        "qp_modify_failed",
                        format!(
                            "modify {from}->{to} failed: {}; likely: {likely}",
                            crate::sinks::text::errno_text(*ret)
                        ),
                    );
                    return;
                }
                // Accepted but unusable: rxe takes a path MTU above the link's and then drops
                // the large packets (the peer sees flushes and retries); most HW refuses it.
                if let Some(why) = self.mtu_too_big(&qp.key.dev, attrs.path_mtu) {
                    self.anomaly(
                        rec,
                        "path_mtu",
                        format!("{why}: packets above the link MTU are dropped (expect retries, then errors)"),
                    );
                }
                let Some(i) = idx else { return };
                let q = &mut self.qps[i];
                if let Some(d) = attrs.dest_qpn {
                    q.peer_qpn = Some(d);
                }
                if let Some(g) = attrs.dgid {
                    q.peer_gid = Some(g);
                }
                if attrs.new_state == Some(QpState::Err) && q.state != Some(QpState::Err) {
                    let why = self
                        .last_wc
                        .get(&qp.key)
                        .map(|s| format!(" after an error completion {s}"))
                        .unwrap_or_default();
                    let d = format!("QP moved to ERR by its owner (modify){why}");
                    self.anomaly(rec, "qp_err", d);
                }
                let q = &mut self.qps[i];
                if let Some(new) = attrs.new_state {
                    // RTR is enough to be an RDMA endpoint: a passive side (the target of RDMA writes, a
                    // receiver) may never need RTS.
                    let connected = |s: Option<QpState>| {
                        matches!(s, Some(QpState::Rtr | QpState::Rts | QpState::Sqd))
                    };
                    let reached_rts = connected(Some(new)) && !connected(q.state);
                    Self::set_state(q, new, rec.ts_ns);
                    if reached_rts {
                        let owner = q.owner_pid;
                        self.proc(owner, "").qps_rts += 1;
                    }
                }
            }
            Body::QpDestroy { qp, ret } if *ret == 0 => {
                if let Some(i) = self.live.remove(&qp.key) {
                    let q = &mut self.qps[i];
                    if let Some(s) = q.state {
                        *q.time_in.entry(s.name()).or_default() +=
                            rec.ts_ns.saturating_sub(q.state_since_ns);
                        if matches!(s, QpState::Init | QpState::Rtr)
                            && rec.ts_ns.saturating_sub(q.state_since_ns) > STUCK_NS
                        {
                            let d = format!(
                                "QP spent {:.1} s in {s} before it was destroyed",
                                (rec.ts_ns - q.state_since_ns) as f64 / 1e9
                            );
                            self.anomaly(rec, "qp_stuck", d);
                        }
                    }
                    self.qps[i].destroyed_ns = Some(rec.ts_ns);
                    self.qps[i].state_since_ns = rec.ts_ns;
                }
            }
            Body::Resource(r) if r.added && r.res_type == ResType::Ctx && r.owner_pid != 0 => {
                let p = self.proc(r.owner_pid, &r.owner_comm);
                p.ctx_opens += 1;
                if !p.devices.contains(&r.dev) {
                    p.devices.push(r.dev.clone());
                }
            }
            Body::ProcessExit { exit_code, .. } => {
                if let Some(p) = self.procs.get_mut(&rec.pid) {
                    p.exit_code = Some(*exit_code);
                }
            }
            Body::TcpBytes(t) => {
                let p = self.proc(rec.pid, &rec.comm);
                p.tcp_tx_bytes += t.tx_bytes;
                p.tcp_rx_bytes += t.rx_bytes;
                p.tcp_calls += t.tx_calls + t.rx_calls;
            }
            Body::QpTraffic(t) => {
                self.traffic_measured = true;
                if let Some(q) = self.qp_mut(&t.qp.key) {
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
                // The first error is the cause; flushes of the rest of the queue follow it.
                let first = self
                    .last_wc
                    .entry(w.qp.clone())
                    .or_insert_with(|| w.status.clone());
                if first == "WR_FLUSH_ERR" {
                    *first = w.status.clone();
                }
                if let Some(q) = self.qp_mut(&w.qp) {
                    q.wc_errors += 1;
                }
                if w.owner_pid != 0 {
                    self.proc(w.owner_pid, &w.owner_comm).wc_errors += 1;
                }
                if self.wc_reported.insert((w.qp.clone(), w.status.clone())) {
                    self.anomaly(
                        rec,
                        "wc_error",
                        format!(
                            "completion {} on CQ#{}{}",
                            w.status,
                            w.cqn,
                            wc_status_hint(&w.status)
                        ),
                    );
                }
            }
            Body::Retransmit(r) => {
                let (target, is_rdma) = match (&r.qp, &r.tcp) {
                    (Some(qp), _) => (format!("{} QPN {:#x}", qp.key.dev, qp.key.qpn), true),
                    (_, Some(t)) => (
                        format!("{}:{}->{}:{}", t.saddr, t.sport, t.daddr, t.dport),
                        false,
                    ),
                    _ => ("?".into(), false),
                };
                if let Some(qp) = &r.qp {
                    // The live QP, else the last one with this key.
                    if let Some(q) = self.qp_mut(&qp.key) {
                        q.retransmits += 1;
                    }
                }
                let (pid, comm) = (r.owner_pid, r.owner_comm.clone());
                if pid != 0 {
                    let p = self.proc(pid, &comm);
                    if is_rdma {
                        p.retrans_rdma += 1;
                    } else {
                        p.retrans_tcp += 1;
                    }
                }
                let e = self
                    .blame
                    .entry((pid, r.transport.name(), target))
                    .or_insert_with(|| (comm, 0, Vec::new()));
                e.1 += 1;
                if !e.2.iter().any(|x| x == r.reason) {
                    e.2.push(r.reason.to_string());
                }
            }
            Body::QpRes(r) => self.qp_res(rec, r),
            Body::Port(p) => {
                let key = (p.dev.clone(), p.port);
                let was_active = self.ports.get(&key).is_some_and(|o| o.state == "ACTIVE");
                if p.state == "REMOVED" {
                    let d = format!("device {} removed (port {} gone)", p.dev, p.port);
                    self.anomaly(rec, "device_removed", d);
                } else if was_active && p.state != "ACTIVE" {
                    let d = format!("port {}/{} went {} (was ACTIVE)", p.dev, p.port, p.state);
                    self.anomaly(rec, "port_down", d);
                }
                self.ports.insert(key, p.clone());
            }
            Body::QpCounter(c) if RETRANSMIT_COUNTERS.contains(&c.name.as_str()) && c.delta > 0 => {
                let owner = c.qpns.first().and_then(|q| {
                    let key = QpKey {
                        dev: c.dev.clone(),
                        qpn: *q,
                    };
                    self.qp_mut(&key)
                        .map(|l| (l.owner_pid, l.owner_comm.clone()))
                });
                let (pid, comm) = match (rec.pid, owner) {
                    (0, Some(o)) => o,
                    (p, _) => (p, rec.comm.clone()),
                };
                let target = match c.qpns.as_slice() {
                    [q] if c.nqpns == 1 => format!("{} QPN {q:#x}", c.dev),
                    qs => format!(
                        "{} counter #{} (QPN {})",
                        c.dev,
                        c.counter_id,
                        qs.iter()
                            .map(|q| format!("{q:#x}"))
                            .collect::<Vec<_>>()
                            .join(",")
                    ),
                };
                if pid != 0 {
                    self.proc(pid, &comm).retrans_rdma += c.delta;
                }
                let e = self
                    .blame
                    .entry((pid, "qp_counter", target))
                    .or_insert_with(|| (comm, 0, Vec::new()));
                e.1 += c.delta;
                if !e.2.iter().any(|x| x == &c.name) {
                    e.2.push(c.name.clone());
                }
            }
            Body::Counter(c) if RETRANSMIT_COUNTERS.contains(&c.name.as_str()) => {
                *self
                    .port_counters
                    .entry((c.dev.clone(), c.port, c.name.clone()))
                    .or_default() += c.delta;
            }
            Body::Async(a) => {
                let bad = matches!(
                    a.event.as_str(),
                    "CQ_ERR"
                        | "QP_FATAL"
                        | "QP_REQ_ERR"
                        | "QP_ACCESS_ERR"
                        | "PATH_MIG_ERR"
                        | "SRQ_ERR"
                        | "DEVICE_FATAL"
                        | "PORT_ERR"
                        | "WQ_FATAL"
                        | "DEVICE_UNREGISTER"
                );
                if bad {
                    let what = match &a.element {
                        AsyncElement::Qp(k) => format!("QP {:#x}", k.qpn),
                        AsyncElement::Cq(id) => format!("CQ#{id} (overrun?)"),
                        AsyncElement::Srq(id) => format!("SRQ#{id}"),
                        AsyncElement::Port(_) if a.source == "ib_core" => {
                            "(the device is going away: rdma link delete or driver removal)"
                                .to_string()
                        }
                        AsyncElement::Port(p) => format!("port {p}"),
                    };
                    self.anomaly(
                        rec,
                        "async_error",
                        format!("{} on {} {what}", a.event, a.dev),
                    );
                }
            }
            Body::Cm(c) => {
                let bad = matches!(
                    c.event.as_str(),
                    "ADDR_ERROR"
                        | "ROUTE_ERROR"
                        | "CONNECT_ERROR"
                        | "UNREACHABLE"
                        | "REJECTED"
                        | "DISCONNECTED"
                        | "DEVICE_REMOVAL"
                );
                if bad {
                    let peer = c.dst.map(|d| format!(" to {d}")).unwrap_or_default();
                    self.anomaly(
                        rec,
                        "cm",
                        format!("CM {}{peer} status {}", c.event, c.status),
                    );
                }
            }
            Body::Lost { count, cpu } => {
                self.lost += count;
                let on = match cpu {
                    Some(cpu) => {
                        *self.lost_per_cpu.entry(*cpu).or_default() += count;
                        format!(" on CPU {cpu}")
                    }
                    None => String::new(),
                };
                self.anomaly(
                    rec,
                    "lost_events",
                    format!("{count} events dropped by the kernel{on} (ring buffer full)"),
                );
            }
            _ => {}
        }
    }

    /// Why a path MTU cannot work on `dev`: above the active MTU of every known port.
    fn mtu_too_big(&self, dev: &str, path_mtu: Option<u32>) -> Option<String> {
        let want = crate::event::mtu_bytes(path_mtu?);
        let ports: Vec<&crate::event::PortInfo> = self
            .ports
            .values()
            .filter(|p| p.dev == dev && p.active_mtu.is_some())
            .collect();
        let best = ports.iter().max_by_key(|p| p.active_mtu)?;
        let active = best.active_mtu?;
        if want <= active {
            return None;
        }
        let under = match (best.netdev.as_str(), best.netdev_mtu) {
            ("", _) => String::new(),
            (n, Some(m)) => format!(", from netdev {n} MTU {m}"),
            (n, None) => format!(", netdev {n}"),
        };
        Some(format!(
            "path MTU {want} above the active MTU of {dev} port {} ({active}{under})",
            best.port
        ))
    }

    /// A row of the kernel's QP table: accounts QPs older than the trace, and state changes
    /// no probe saw (a driver moving a QP to ERR after a transport error).
    fn qp_res(&mut self, rec: &Record, r: &crate::event::QpResRow) {
        use crate::event::ResChange;
        let key = &r.qp.key;
        let live = self.live.get(key).copied();
        match (live, r.change) {
            (Some(i), ResChange::Gone) => {
                let q = &mut self.qps[i];
                if let Some(s) = q.state {
                    *q.time_in.entry(s.name()).or_default() +=
                        rec.ts_ns.saturating_sub(q.state_since_ns);
                }
                q.destroyed_ns = Some(rec.ts_ns);
                q.state_since_ns = rec.ts_ns;
                self.live.remove(key);
            }
            (None, ResChange::Gone) => {}
            (Some(i), _) => {
                let Some(new) = r.state else { return };
                let q = &mut self.qps[i];
                if q.peer_qpn.is_none() {
                    q.peer_qpn = r.rqpn;
                }
                if q.state == Some(new) {
                    return;
                }
                let old = q.state;
                Self::set_state(q, new, rec.ts_ns);
                if new == QpState::Err {
                    let why = self
                        .last_wc
                        .get(key)
                        .map(|s| format!(" after an error completion {s}"))
                        .unwrap_or_else(|| " (transport or protocol error)".into());
                    let d = format!(
                        "QP moved {}->ERR by the driver, not by its owner{why}",
                        old.map_or("?", |s| s.name())
                    );
                    self.anomaly(rec, "qp_err", d);
                }
            }
            // A user QP the probes never saw created: it is older than the trace.
            (None, _) if rec.pid != 0 => {
                let t = crate::event::qp_type_name(r.qp.qp_type);
                let connected = matches!(r.state, Some(QpState::Rtr | QpState::Rts | QpState::Sqd));
                let p = self.proc(rec.pid, &rec.comm);
                if !p.qp_types.contains(&t) {
                    p.qp_types.push(t);
                }
                if !p.devices.contains(&key.dev) {
                    p.devices.push(key.dev.clone());
                }
                p.qps_created += 1;
                if connected {
                    p.qps_rts += 1;
                }
                self.live.insert(key.clone(), self.qps.len());
                let mut life = QpLife::new(key, rec, r.qp.qp_type);
                life.state = r.state;
                life.peer_qpn = r.rqpn;
                self.qps.push(life);
            }
            (None, _) => {}
        }
    }

    fn verdict(&self, p: &ProcStats) -> (Verdict, Vec<String>) {
        let mut ev = Vec::new();
        let tcp = p.tcp_tx_bytes + p.tcp_rx_bytes;
        let touched = p.ctx_opens > 0 || p.qps_created > 0;
        let devs = if p.devices.is_empty() {
            "an RDMA device".to_string()
        } else {
            p.devices.join(", ")
        };
        if touched {
            ev.push(format!(
                "opened {devs}; {} QP(s) created ({}), {} reached RTR/RTS",
                p.qps_created,
                if p.qp_types.is_empty() {
                    "-".into()
                } else {
                    p.qp_types.join("/")
                },
                p.qps_rts
            ));
        }
        if self.traffic_measured && touched {
            ev.push(format!(
                "{} sent and {} received on its QPs ({} / {} packets)",
                mib(p.rdma_tx_bytes),
                mib(p.rdma_rx_bytes),
                p.rdma_tx_packets,
                p.rdma_rx_packets
            ));
        }
        if p.wc_errors > 0 {
            ev.push(format!("{} error completion(s)", p.wc_errors));
        }
        let rdma = p.rdma_tx_bytes + p.rdma_rx_bytes;
        ev.push(if tcp == 0 {
            "0 B over TCP".to_string()
        } else {
            let per_mib = if tcp >= 1 << 20 {
                format!(
                    ", {:.0} calls/MiB",
                    p.tcp_calls as f64 / (tcp as f64 / (1u64 << 20) as f64)
                )
            } else {
                String::new()
            };
            format!(
                "{} over TCP ({} sent, {} received) in {} send/recv calls{per_mib}",
                mib(tcp),
                mib(p.tcp_tx_bytes),
                mib(p.tcp_rx_bytes),
                p.tcp_calls
            )
        });
        let tcp_data = tcp >= TCP_DATA_THRESHOLD;
        let verdict = if !touched {
            if tcp > 0 {
                Verdict::Tcp
            } else if p.retrans_tcp > 0 {
                ev.push("TCP retransmits seen but no byte counts (TCP byte probes off?)".into());
                Verdict::Unknown
            } else {
                Verdict::Idle
            }
        } else if p.qps_rts == 0 {
            if tcp_data {
                Verdict::TcpFallback
            } else {
                Verdict::Idle
            }
        } else if self.traffic_measured && rdma == 0 {
            if tcp_data {
                Verdict::TcpFallback
            } else {
                Verdict::Idle
            }
        } else if tcp_data && (!self.traffic_measured || tcp.saturating_mul(10) >= rdma) {
            Verdict::Mixed
        } else {
            Verdict::Rdma
        };
        if verdict == Verdict::Rdma && tcp > 0 {
            ev.push(format!(
                "TCP below the data threshold ({}): a control channel",
                mib(TCP_DATA_THRESHOLD)
            ));
        }
        (verdict, ev)
    }

    /// Closes open intervals at the last event and produces the report.
    pub fn finish(mut self) -> Report {
        let end = self.last_ts_ns;
        let mut stuck = Vec::new();
        for q in self.qps.iter_mut().filter(|q| q.destroyed_ns.is_none()) {
            if let Some(s) = q.state {
                let open = end.saturating_sub(q.state_since_ns);
                *q.time_in.entry(s.name()).or_default() += open;
                if matches!(s, QpState::Init | QpState::Rtr) && open > STUCK_NS {
                    stuck.push((q.key.clone(), q.owner_pid, q.owner_comm.clone(), s, open));
                }
            }
        }
        for (key, pid, comm, s, open) in stuck {
            self.anomalies.push(Anomaly {
                ts_ns: end,
                wall_ns: self.last_wall_ns,
                pid,
                comm,
                dev: Some(key.dev.clone()),
                qpn: Some(key.qpn),
                kind: "qp_stuck",
                detail: format!(
                    "QP still in {s} after {:.1} s at the end of the trace",
                    open as f64 / 1e9
                ),
            });
        }
        let processes: Vec<ProcReport> = self
            .procs
            .values()
            .filter(|p| {
                p.ctx_opens
                    + p.qps_created
                    + p.tcp_calls
                    + p.retrans_rdma
                    + p.retrans_tcp
                    + p.rdma_tx_packets
                    + p.rdma_rx_packets
                    + p.wc_errors
                    > 0
            })
            .map(|p| {
                let (verdict, evidence) = self.verdict(p);
                ProcReport {
                    stats: p.clone(),
                    verdict,
                    evidence,
                }
            })
            .collect();
        let mut blame: Vec<BlameRow> = self
            .blame
            .into_iter()
            .map(
                |((pid, transport, target), (comm, count, reasons))| BlameRow {
                    pid,
                    comm,
                    transport,
                    target,
                    count,
                    reasons,
                },
            )
            .collect();
        blame.sort_by(|a, b| b.count.cmp(&a.count).then(a.target.cmp(&b.target)));
        self.anomalies.sort_by_key(|a| a.ts_ns);
        Report {
            first_wall_ns: self.first_wall_ns,
            last_wall_ns: self.last_wall_ns,
            events: self.events,
            lost: self.lost,
            lost_per_cpu: self.lost_per_cpu,
            processes,
            qps: self.qps,
            blame,
            port_counters: self
                .port_counters
                .into_iter()
                .filter(|(_, v)| *v > 0)
                .map(|((d, p, n), v)| (d, p, n, v))
                .collect(),
            anomalies: self.anomalies,
        }
    }
}

#[cfg(test)]
mod tests;
