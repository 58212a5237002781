//! Records about devices and ports rather than QPs: port states, GID table entries, refused
//! QP creations and failed registrations.

use super::CompactString;

/// An RDMA port's state and active MTU (sampled at start and on change).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortInfo {
    pub dev: CompactString,
    pub port: u32,
    /// `DOWN`, `INIT`, `ARMED`, `ACTIVE`, `ACTIVE_DEFER` or `?`.
    pub state: &'static str,
    /// Bytes; `None` when unknown.
    pub active_mtu: Option<u32>,
    pub netdev_mtu: Option<u32>,
    pub link_layer: String,
    pub netdev: String,
}

/// A refused QP creation's asked capacities and the device's limits (0: not read).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QpCaps {
    pub dev: CompactString,
    pub ret: i32,
    pub qp_type: u32,
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
    pub dev_max_qp_wr: u32,
    pub dev_max_send_sge: u32,
    pub dev_max_recv_sge: u32,
}

/// A refused CQ or SRQ creation: the depth (and SGEs) asked and the device's limits (0: not
/// read).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueCaps {
    pub dev: CompactString,
    pub ret: i32,
    /// `CQ` or `SRQ`.
    pub queue: &'static str,
    pub depth: u32,
    pub sge: u32,
    pub dev_max_depth: u32,
    pub dev_max_sge: u32,
}

impl QueueCaps {
    /// The device attributes its limits are: `max_cqe`, or `max_srq_wr` and `max_srq_sge`.
    pub fn limit_names(&self) -> (&'static str, &'static str) {
        if self.queue == "CQ" {
            ("max_cqe", "")
        } else {
            ("max_srq_wr", "max_srq_sge")
        }
    }
}

/// Pinning user memory for a registration failed (`ib_umem_get`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UmemFailed {
    pub dev: CompactString,
    /// Negative errno.
    pub ret: i32,
    pub size: u64,
    /// RLIMIT_MEMLOCK (bytes); `None`: unlimited or not read.
    pub memlock: Option<u64>,
    /// Bytes the process had pinned already; `None`: not read.
    pub pinned: Option<u64>,
}

/// One entry of a port's GID table (sampled at start and on change).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GidInfo {
    pub dev: CompactString,
    pub port: u32,
    pub index: u32,
    /// `None`: the entry was deleted.
    pub gid: Option<[u8; 16]>,
    /// `RoCE v2`, `IB/RoCE v1` or `?`.
    pub gid_type: &'static str,
    pub netdev: String,
}

/// The name sysfs gives a GID type (`gid_attrs/types/N`).
pub fn gid_type_name(raw: u32) -> &'static str {
    match raw {
        rdmatrace_common::event::GID_TYPE_IB_ROCE_V1 => "IB/RoCE v1",
        rdmatrace_common::event::GID_TYPE_ROCE_V2 => "RoCE v2",
        _ => "?",
    }
}
