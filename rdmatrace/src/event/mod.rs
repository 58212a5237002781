//! The user-side event model: what decode produces, the correlator annotates and sinks print.
//! Owned, validated, independent of the wire layout in `rdmatrace-common`.
//!
//! Process and device names, and the names of event codes, are [`CompactString`]s: they come
//! from fixed kernel arrays of at most 16 (comm) or 64 (device) bytes and are almost always
//! under 24 bytes, which `CompactString` keeps inline, so decoding and correlating a record
//! allocates nothing for them (replay runs at millions of records per second).

use std::fmt;

pub use compact_str::CompactString;

mod device;
mod names;
mod stack;
pub use device::*;
pub use names::*;
pub use stack::*;

/// `enum ib_qp_state`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum QpState {
    Reset,
    Init,
    Rtr,
    Rts,
    Sqd,
    Sqe,
    Err,
}

impl QpState {
    pub fn from_raw(raw: u32) -> Option<QpState> {
        Some(match raw {
            0 => QpState::Reset,
            1 => QpState::Init,
            2 => QpState::Rtr,
            3 => QpState::Rts,
            4 => QpState::Sqd,
            5 => QpState::Sqe,
            6 => QpState::Err,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            QpState::Reset => "RESET",
            QpState::Init => "INIT",
            QpState::Rtr => "RTR",
            QpState::Rts => "RTS",
            QpState::Sqd => "SQD",
            QpState::Sqe => "SQE",
            QpState::Err => "ERR",
        }
    }
}

impl fmt::Display for QpState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Which QP: a QPN is unique only per device.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct QpKey {
    pub dev: CompactString,
    pub qpn: u32,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QpInfo {
    pub key: QpKey,
    pub qp_type: u32,
}

/// Attributes of a modify call; `None` where the caller's mask did not include the field.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct ModifyAttrs {
    pub attr_mask: u32,
    /// From the call when it set `IB_QP_CUR_STATE`, otherwise filled by the correlator from the
    /// last state it saw (still `None` when the QP predates the trace).
    pub cur_state: Option<QpState>,
    pub new_state: Option<QpState>,
    pub path_mtu: Option<u32>,
    pub dest_qpn: Option<u32>,
    pub sq_psn: Option<u32>,
    pub rq_psn: Option<u32>,
    pub timeout: Option<u8>,
    pub retry_cnt: Option<u8>,
    pub rnr_retry: Option<u8>,
    pub dgid: Option<[u8; 16]>,
    /// The source GID index of the address vector (with `dgid`; recordings before this field:
    /// `None`).
    pub sgid_index: Option<u32>,
    /// The RNR NAK delay this QP asks its senders to wait (IB code 0-31; recordings before this
    /// field: `None`).
    pub min_rnr_timer: Option<u8>,
}

/// A TCP connection as the kernel sees it from this host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TcpTuple {
    pub saddr: std::net::IpAddr,
    pub sport: u16,
    pub daddr: std::net::IpAddr,
    pub dport: u16,
    /// `TCP_ESTABLISHED` = 1, ...
    pub state: u16,
}

/// Which transport retransmitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    Rxe,
    Mlx5,
    Tcp,
}

impl Transport {
    pub fn name(self) -> &'static str {
        match self {
            Transport::Rxe => "rxe",
            Transport::Mlx5 => "mlx5",
            Transport::Tcp => "tcp",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Retransmit {
    pub transport: Transport,
    /// `retransmit_timer`, `rnr_nak_timer`, `tcp_retransmit_skb`.
    pub reason: &'static str,
    /// The QP (RDMA transports).
    pub qp: Option<QpInfo>,
    /// The connection (TCP).
    pub tcp: Option<TcpTuple>,
    /// The process owning the QP / socket (0 when unknown); the record's pid is whoever was
    /// on CPU when it fired.
    pub owner_pid: u32,
    pub owner_comm: CompactString,
}

/// `enum rdma_restrack_type` as the object names used in output.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ResType {
    Pd,
    Cq,
    Qp,
    CmId,
    Mr,
    Ctx,
    Counter,
    Srq,
    Other(u32),
}

impl ResType {
    pub fn from_raw(raw: u32) -> ResType {
        match raw {
            0 => ResType::Pd,
            1 => ResType::Cq,
            2 => ResType::Qp,
            3 => ResType::CmId,
            4 => ResType::Mr,
            5 => ResType::Ctx,
            6 => ResType::Counter,
            7 => ResType::Srq,
            n => ResType::Other(n),
        }
    }

    /// (JSON type when added, when removed, text verb when added, when removed, label).
    pub fn names(
        self,
    ) -> (
        &'static str,
        &'static str,
        &'static str,
        &'static str,
        &'static str,
    ) {
        match self {
            ResType::Pd => ("pd_alloc", "pd_dealloc", "alloc", "free", "PD"),
            ResType::Cq => ("cq_create", "cq_destroy", "create", "destroy", "CQ"),
            ResType::Qp => ("qp_track", "qp_untrack", "track", "untrack", "QP"),
            ResType::CmId => (
                "cm_id_create",
                "cm_id_destroy",
                "create",
                "destroy",
                "CM_ID",
            ),
            ResType::Mr => ("mr_reg", "mr_dereg", "reg", "dereg", "MR"),
            ResType::Ctx => ("ctx_open", "ctx_close", "open", "close", "CTX"),
            ResType::Counter => ("counter_alloc", "counter_free", "alloc", "free", "COUNTER"),
            ResType::Srq => ("srq_create", "srq_destroy", "create", "destroy", "SRQ"),
            ResType::Other(_) => ("res_add", "res_del", "add", "del", "RES"),
        }
    }
}

/// An RDMA object added to / removed from the kernel's resource tracker.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resource {
    pub added: bool,
    pub res_type: ResType,
    pub dev: CompactString,
    /// The tracker id (`rdma res show`'s cqn / mrn / pdn / srqn / cm-idn).
    pub id: u32,
    pub owner_pid: u32,
    pub owner_comm: CompactString,
    pub user: bool,
    /// CQ: (cqe, comp_vector).
    pub cq: Option<(u32, u32)>,
    pub mr: Option<MrInfo>,
}

/// An MR's keys and extent, and the access it was registered with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MrInfo {
    pub lkey: u32,
    pub rkey: u32,
    pub length: u64,
    pub iova: u64,
    /// `enum ib_access_flags`; `None` where the driver's registration was not seen (deregistration,
    /// a driver without an access probe, older recordings).
    pub access: Option<u32>,
}

/// What an asynchronous event is about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AsyncElement {
    Qp(QpKey),
    Cq(u32),
    Srq(u32),
    Port(u32),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AsyncEvent {
    pub dev: CompactString,
    pub event: CompactString,
    pub element: AsyncElement,
    /// Who reported it: `uverbs` (delivered to the process) or `mlx5` (the driver's view).
    pub source: &'static str,
    /// The owner of the QP, when the correlator knows it.
    pub owner_pid: u32,
    pub owner_comm: CompactString,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CmEvent {
    pub dev: CompactString,
    /// 0 when the id has no QP yet.
    pub qpn: u32,
    pub event: CompactString,
    pub status: i32,
    pub cm_id: u32,
    pub owner_pid: u32,
    pub owner_comm: CompactString,
    pub src: Option<std::net::SocketAddr>,
    pub dst: Option<std::net::SocketAddr>,
}

/// TCP traffic of one process since the previous sample.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TcpBytesDelta {
    pub tx_bytes: u64,
    pub rx_bytes: u64,
    pub tx_calls: u64,
    pub rx_calls: u64,
    /// The peer's address (IPv4-mapped IPv6 as IPv4); `None` when not known.
    pub peer: Option<std::net::IpAddr>,
}

/// Packets and bytes a QP sent and received since the previous sample.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QpTrafficDelta {
    pub qp: QpInfo,
    pub tx_packets: u64,
    pub tx_bytes: u64,
    pub rx_packets: u64,
    pub rx_bytes: u64,
    /// The QP's owner, from the correlator.
    pub owner_pid: u32,
    pub owner_comm: CompactString,
}

/// A TCP socket changed state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TcpState {
    /// `tcp.state` is the new state.
    pub tcp: TcpTuple,
    pub old_state: u16,
    /// The socket's owner (0 when not known yet: e.g. a passive open before the first send).
    pub owner_pid: u32,
    pub owner_comm: CompactString,
}

/// A work completion with an error status.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WcError {
    pub qp: QpKey,
    pub cqn: u32,
    pub status: CompactString,
    pub vendor_err: u32,
    pub owner_pid: u32,
    pub owner_comm: CompactString,
}

/// Completion-channel notifications of one CQ since the previous sample.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CqNotifyDelta {
    pub dev: CompactString,
    pub cqn: u32,
    pub count: u64,
    pub owner_pid: u32,
    pub owner_comm: CompactString,
}

/// A port counter that moved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CounterDelta {
    pub dev: CompactString,
    pub port: u32,
    /// From `hw_counters` (driver) rather than `counters` (IB standard).
    pub hw: bool,
    pub name: String,
    pub value: u64,
    pub delta: u64,
}

/// How a QP resource-table row changed since the previous sample.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResChange {
    /// In the first sample: the QP is older than the trace.
    Present,
    New,
    Changed,
    Gone,
}

impl ResChange {
    pub fn from_raw(raw: u32) -> ResChange {
        use rdmatrace_common::event::qp_res_change as c;
        match raw {
            c::NEW => ResChange::New,
            c::CHANGED => ResChange::Changed,
            c::GONE => ResChange::Gone,
            _ => ResChange::Present,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            ResChange::Present => "present",
            ResChange::New => "new",
            ResChange::Changed => "changed",
            ResChange::Gone => "gone",
        }
    }
}

/// A row of the kernel's QP resource table (rdma netlink), as it appeared, changed or went.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QpResRow {
    pub qp: QpInfo,
    pub port: u32,
    pub rqpn: Option<u32>,
    pub sq_psn: u32,
    pub rq_psn: Option<u32>,
    /// `None` for a value outside `enum ib_qp_state`.
    pub state: Option<QpState>,
    pub change: ResChange,
}

/// A per-QP statistic counter (rdma netlink) that moved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QpCounterDelta {
    pub dev: CompactString,
    pub port: u32,
    pub counter_id: u32,
    /// QPs bound to the counter (the first few when many are).
    pub qpns: Vec<u32>,
    pub nqpns: u32,
    pub name: String,
    pub value: u64,
    pub delta: u64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Body {
    QpCreate {
        qp: QpInfo,
        ret: i32,
    },
    QpModify {
        qp: QpInfo,
        attrs: ModifyAttrs,
        ret: i32,
    },
    QpDestroy {
        qp: QpInfo,
        ret: i32,
    },
    ProcessExec {
        ppid: u32,
    },
    ProcessExit {
        ppid: u32,
        exit_code: i32,
    },
    /// The process's cgroup v2 id (its path: [`crate::correlate::Correlator::place`]).
    ProcessCgroup {
        id: u64,
    },
    Retransmit(Retransmit),
    Resource(Resource),
    Async(AsyncEvent),
    Cm(CmEvent),
    TcpBytes(TcpBytesDelta),
    QpTraffic(QpTrafficDelta),
    Counter(CounterDelta),
    TcpState(TcpState),
    WcError(WcError),
    CqNotify(CqNotifyDelta),
    QpRes(QpResRow),
    QpCounter(QpCounterDelta),
    Port(PortInfo),
    Gid(GidInfo),
    UmemFailed(UmemFailed),
    QpCaps(QpCaps),
    QueueCaps(QueueCaps),
    VerbsCall(VerbsCall),
    CpuSample(CpuSample),
    /// Events the kernel could not deliver (ring buffer full) since the previous report, on
    /// `cpu` when known (recordings before version 3 stored totals over all CPUs).
    Lost {
        count: u64,
        cpu: Option<u32>,
    },
}

impl Body {
    /// The JSON `type` of this event.
    pub fn type_name(&self) -> &'static str {
        match self {
            Body::QpCreate { .. } => "qp_create",
            Body::QpModify { .. } => "qp_modify",
            Body::QpDestroy { .. } => "qp_destroy",
            Body::ProcessExec { .. } => "process_exec",
            Body::ProcessExit { .. } => "process_exit",
            Body::ProcessCgroup { .. } => "process_cgroup",
            Body::Retransmit(_) => "retransmit",
            Body::Resource(r) => {
                let (add, del, ..) = r.res_type.names();
                if r.added {
                    add
                } else {
                    del
                }
            }
            Body::Async(_) => "async_event",
            Body::TcpBytes(_) => "tcp_bytes",
            Body::QpTraffic(_) => "qp_traffic",
            Body::Counter(_) => "counter",
            Body::Cm(_) => "cm_event",
            Body::TcpState(_) => "tcp_state",
            Body::WcError(_) => "wc_error",
            Body::CqNotify(_) => "cq_event",
            Body::QpRes(_) => "qp_res",
            Body::QpCounter(_) => "qp_counter",
            Body::Port(_) => "port",
            Body::Gid(_) => "gid",
            Body::UmemFailed(_) => "mr_reg_failed",
            Body::QpCaps(_) => "qp_caps",
            Body::QueueCaps(_) => "queue_caps",
            Body::VerbsCall(_) => "verbs_call",
            Body::CpuSample(_) => "cpu_sample",
            Body::Lost { .. } => "lost",
        }
    }

    pub fn qp(&self) -> Option<&QpInfo> {
        match self {
            Body::QpCreate { qp, .. } | Body::QpModify { qp, .. } | Body::QpDestroy { qp, .. } => {
                Some(qp)
            }
            Body::Retransmit(r) => r.qp.as_ref(),
            Body::QpTraffic(t) => Some(&t.qp),
            Body::QpRes(r) => Some(&r.qp),
            _ => None,
        }
    }
}

impl Record {
    /// A report of `count` events the kernel dropped (on `cpu` when known), at monotonic time
    /// `ts_ns`.
    pub fn lost(
        count: u64,
        cpu: Option<u32>,
        ts_ns: u64,
        anchor: &crate::clock::ClockAnchor,
    ) -> Record {
        Record {
            ts_ns,
            wall_ns: anchor.wall_ns(ts_ns),
            cpu: cpu.unwrap_or(0),
            pid: 0,
            tid: 0,
            comm: CompactString::const_new(""),
            body: Body::Lost { count, cpu },
        }
    }

    /// The device an event is about, if any.
    pub fn dev(&self) -> Option<&str> {
        match &self.body {
            Body::Resource(r) => Some(&r.dev),
            Body::Async(a) => Some(&a.dev),
            Body::Cm(c) if !c.dev.is_empty() => Some(&c.dev),
            Body::Counter(c) => Some(&c.dev),
            Body::WcError(w) => Some(&w.qp.dev),
            Body::CqNotify(n) => Some(&n.dev),
            Body::QpCounter(c) => Some(&c.dev),
            Body::Port(p) => Some(&p.dev),
            Body::Gid(g) => Some(&g.dev),
            Body::UmemFailed(u) if !u.dev.is_empty() => Some(&u.dev),
            Body::QpCaps(c) if !c.dev.is_empty() => Some(&c.dev),
            Body::QueueCaps(c) if !c.dev.is_empty() => Some(&c.dev),
            b => b.qp().map(|q| q.key.dev.as_str()),
        }
    }

    /// The QPN an event is about, if any.
    pub fn qpn(&self) -> Option<u32> {
        match &self.body {
            Body::Async(AsyncEvent {
                element: AsyncElement::Qp(k),
                ..
            }) => Some(k.qpn),
            Body::Cm(c) if c.qpn != 0 => Some(c.qpn),
            Body::WcError(w) if w.qp.qpn != 0 => Some(w.qp.qpn),
            Body::QpCounter(c) if c.nqpns == 1 => c.qpns.first().copied(),
            b => b.qp().map(|q| q.key.qpn),
        }
    }

    /// The process an event is about: the owner of the QP/socket for events that fire outside
    /// the owner's context (retransmits), else the process that made the call.
    pub fn subject_pid(&self) -> u32 {
        match &self.body {
            Body::Retransmit(r) if r.owner_pid != 0 => r.owner_pid,
            Body::Resource(r) if r.owner_pid != 0 => r.owner_pid,
            Body::Async(a) if a.owner_pid != 0 => a.owner_pid,
            Body::Cm(c) if c.owner_pid != 0 => c.owner_pid,
            Body::QpTraffic(t) if t.owner_pid != 0 => t.owner_pid,
            Body::TcpState(t) if t.owner_pid != 0 => t.owner_pid,
            Body::WcError(w) if w.owner_pid != 0 => w.owner_pid,
            Body::CqNotify(n) if n.owner_pid != 0 => n.owner_pid,
            _ => self.pid,
        }
    }

    pub fn subject_comm(&self) -> &str {
        match &self.body {
            Body::Retransmit(r) if r.owner_pid != 0 => &r.owner_comm,
            Body::Resource(r) if r.owner_pid != 0 => &r.owner_comm,
            Body::Async(a) if a.owner_pid != 0 => &a.owner_comm,
            Body::Cm(c) if c.owner_pid != 0 => &c.owner_comm,
            Body::QpTraffic(t) if t.owner_pid != 0 => &t.owner_comm,
            Body::TcpState(t) if t.owner_pid != 0 => &t.owner_comm,
            Body::WcError(w) if w.owner_pid != 0 => &w.owner_comm,
            Body::CqNotify(n) if n.owner_pid != 0 => &n.owner_comm,
            _ => &self.comm,
        }
    }
}

/// One event, with who and when.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// CLOCK_MONOTONIC ns.
    pub ts_ns: u64,
    /// Wall clock (UTC, ns since the epoch), from the trace's clock anchor.
    pub wall_ns: u64,
    pub cpu: u32,
    pub pid: u32,
    pub tid: u32,
    pub comm: CompactString,
    pub body: Body,
}
