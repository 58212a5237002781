//! Failures the kernel refused before an object existed: a QP creation (what was asked
//! against the device's limits) and the pinning of a registration's memory.

use super::EventHeader;
use crate::limits::DEV_NAME_LEN;

/// Sent after a failed `ib_create_qp_user()`: the capacities asked (`init_attr->cap`) and the
/// device's limits (`device->attrs`); 0 where a field could not be read.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpCapsEvent {
    pub header: EventHeader,
    pub dev: [u8; DEV_NAME_LEN],
    /// The negative errno of the failed create.
    pub ret: i32,
    pub qp_type: u32,
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
    /// `attrs.max_qp_wr`, `attrs.max_send_sge`, `attrs.max_recv_sge` of the device.
    pub dev_max_qp_wr: u32,
    pub dev_max_send_sge: u32,
    pub dev_max_recv_sge: u32,
}
const _: () = assert!(core::mem::size_of::<QpCapsEvent>() == 40 + 64 + 8 + 32);

/// Sent after a refused CQ or SRQ creation: the depth (and SGEs) asked and the device's limits;
/// 0 where a field could not be read.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueueCapsEvent {
    pub header: EventHeader,
    pub dev: [u8; DEV_NAME_LEN],
    /// The negative errno of the failed create.
    pub ret: i32,
    /// [`QUEUE_CQ`] or [`QUEUE_SRQ`].
    pub queue: u32,
    /// CQ: `attr->cqe`; SRQ: `srq_init_attr->attr.max_wr`.
    pub depth: u32,
    /// SRQ: `srq_init_attr->attr.max_sge`; CQ: 0.
    pub sge: u32,
    /// `attrs.max_cqe` (CQ) or `attrs.max_srq_wr` (SRQ) of the device.
    pub dev_max_depth: u32,
    /// `attrs.max_srq_sge` (SRQ); CQ: 0.
    pub dev_max_sge: u32,
}
const _: () = assert!(core::mem::size_of::<QueueCapsEvent>() == 40 + 64 + 24);
/// [`QueueCapsEvent::queue`]: a completion queue.
pub const QUEUE_CQ: u32 = 1;
/// [`QueueCapsEvent::queue`]: a shared receive queue.
pub const QUEUE_SRQ: u32 = 2;

/// `ib_umem_get()` failed: user memory of an MR (or, for some drivers, a queue buffer) could
/// not be pinned. Sent from the calling process's context.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UmemFailedEvent {
    pub header: EventHeader,
    pub dev: [u8; DEV_NAME_LEN],
    /// The negative errno.
    pub ret: i32,
    pub _pad: u32,
    /// Bytes asked to pin.
    pub size: u64,
    /// The caller's `RLIMIT_MEMLOCK` soft limit in bytes (`u64::MAX`: unlimited or unread).
    pub memlock: u64,
    /// Pages its address space had pinned already (`mm->pinned_vm`; `u64::MAX`: unread).
    pub pinned_pages: u64,
}
const _: () = assert!(core::mem::size_of::<UmemFailedEvent>() == 40 + 64 + 8 + 24);
