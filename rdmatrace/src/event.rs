//! The user-side event model: what decode produces, the correlator annotates and sinks print.
//! Owned, validated, independent of the wire layout in `rdmatrace-common`.

use std::fmt;

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

/// `enum ib_qp_type` name, or the raw number for types we do not name.
pub fn qp_type_name(raw: u32) -> String {
    match raw {
        0 => "SMI".into(),
        1 => "GSI".into(),
        2 => "RC".into(),
        3 => "UC".into(),
        4 => "UD".into(),
        5 => "RAW_IPV6".into(),
        6 => "RAW_ETHERTYPE".into(),
        8 => "RAW_PACKET".into(),
        9 => "XRC_INI".into(),
        10 => "XRC_TGT".into(),
        0x1000 => "DRIVER".into(),
        n => format!("TYPE_{n}"),
    }
}

/// `enum ib_mtu` to bytes (0 when unknown).
pub fn mtu_bytes(raw: u32) -> u32 {
    match raw {
        1..=5 => 128 << raw,
        _ => 0,
    }
}

/// Which QP: a QPN is unique only per device.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct QpKey {
    pub dev: String,
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
    pub owner_comm: String,
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
    Retransmit(Retransmit),
    /// Events the kernel could not deliver (ring buffer full) since the previous report.
    Lost {
        count: u64,
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
            Body::Retransmit(_) => "retransmit",
            Body::Lost { .. } => "lost",
        }
    }

    pub fn qp(&self) -> Option<&QpInfo> {
        match self {
            Body::QpCreate { qp, .. } | Body::QpModify { qp, .. } | Body::QpDestroy { qp, .. } => {
                Some(qp)
            }
            Body::Retransmit(r) => r.qp.as_ref(),
            _ => None,
        }
    }
}

impl Record {
    /// The process an event is about: the owner of the QP/socket for events that fire outside
    /// the owner's context (retransmits), else the process that made the call.
    pub fn subject_pid(&self) -> u32 {
        match &self.body {
            Body::Retransmit(r) if r.owner_pid != 0 => r.owner_pid,
            _ => self.pid,
        }
    }

    pub fn subject_comm(&self) -> &str {
        match &self.body {
            Body::Retransmit(r) if r.owner_pid != 0 => &r.owner_comm,
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
    pub comm: String,
    pub body: Body,
}
