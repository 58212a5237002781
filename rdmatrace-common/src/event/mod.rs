//! Records written by the kernel programs into the `EVENTS` ring buffer.
//!
//! Layout rules: `#[repr(C)]`, every field naturally aligned, explicit `_pad` fields, total size a
//! multiple of 8 (the ring buffer aligns records to 8 bytes). Integers instead of `bool`/enums so
//! that any bit pattern is a valid value; user space validates when it decodes.

mod failure;
mod sample;
mod stack;
pub use failure::*;
pub use sample::*;
pub use stack::*;

use crate::limits::{COMM_LEN, DEV_NAME_LEN, GID_LEN};

/// What a record is. Stored as a raw `u32` in [`EventHeader::kind`].
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    QpCreate = 1,
    QpModify = 2,
    QpDestroy = 3,
    ProcessExec = 4,
    ProcessExit = 5,
    Retransmit = 6,
    ResourceAdd = 7,
    ResourceDel = 8,
    AsyncEvent = 9,
    CmEvent = 10,
    TcpState = 11,
    WcError = 12,
    /// The cgroup (v2) of a process, sent before its first event and again when it changes.
    ProcessCgroup = 13,
    /// Pinning user memory for an RDMA registration failed (`ib_umem_get` returned an error).
    UmemFailed = 14,
    /// A refused QP creation: what was asked and the device's limits (after a failed
    /// [`EventKind::QpCreate`]).
    QpCaps = 15,
    /// A refused CQ or SRQ creation: what was asked and the device's limits.
    QueueCaps = 16,
    /// A control-path verbs call with the caller's user stack (uprobe on libibverbs/librdmacm).
    /// Kinds 20-29 are for stack-bearing records.
    VerbsCall = 20,
    /// An on-CPU sample of a traced process (perf event), with its user and kernel stacks.
    CpuSample = 21,
    /// Samples made by user space from kernel aggregates and sysfs (same wire format, so they
    /// flow and record like every other event).
    TcpBytes = 100,
    QpTraffic = 101,
    Counter = 102,
    CqNotify = 103,
    QpRes = 104,
    QpCounter = 105,
    Port = 106,
    /// A GID table entry of a port (sysfs), sampled at the start and whenever it changes.
    Gid = 107,
}

impl EventKind {
    /// Every kind, for exhaustive tests and decoders.
    pub const ALL: [EventKind; 26] = [
        EventKind::QpCreate,
        EventKind::QpModify,
        EventKind::QpDestroy,
        EventKind::ProcessExec,
        EventKind::ProcessExit,
        EventKind::Retransmit,
        EventKind::ResourceAdd,
        EventKind::ResourceDel,
        EventKind::AsyncEvent,
        EventKind::CmEvent,
        EventKind::TcpState,
        EventKind::WcError,
        EventKind::ProcessCgroup,
        EventKind::UmemFailed,
        EventKind::QpCaps,
        EventKind::QueueCaps,
        EventKind::VerbsCall,
        EventKind::CpuSample,
        EventKind::TcpBytes,
        EventKind::QpTraffic,
        EventKind::Counter,
        EventKind::CqNotify,
        EventKind::QpRes,
        EventKind::QpCounter,
        EventKind::Port,
        EventKind::Gid,
    ];

    pub const fn from_raw(raw: u32) -> Option<EventKind> {
        match raw {
            1 => Some(EventKind::QpCreate),
            2 => Some(EventKind::QpModify),
            3 => Some(EventKind::QpDestroy),
            4 => Some(EventKind::ProcessExec),
            5 => Some(EventKind::ProcessExit),
            6 => Some(EventKind::Retransmit),
            7 => Some(EventKind::ResourceAdd),
            8 => Some(EventKind::ResourceDel),
            9 => Some(EventKind::AsyncEvent),
            10 => Some(EventKind::CmEvent),
            11 => Some(EventKind::TcpState),
            12 => Some(EventKind::WcError),
            13 => Some(EventKind::ProcessCgroup),
            14 => Some(EventKind::UmemFailed),
            15 => Some(EventKind::QpCaps),
            16 => Some(EventKind::QueueCaps),
            20 => Some(EventKind::VerbsCall),
            21 => Some(EventKind::CpuSample),
            100 => Some(EventKind::TcpBytes),
            101 => Some(EventKind::QpTraffic),
            102 => Some(EventKind::Counter),
            103 => Some(EventKind::CqNotify),
            104 => Some(EventKind::QpRes),
            105 => Some(EventKind::QpCounter),
            106 => Some(EventKind::Port),
            107 => Some(EventKind::Gid),
            _ => None,
        }
    }
}

/// First bytes of every record.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EventHeader {
    /// An [`EventKind`] as `u32`: first, so a reader can switch before knowing the layout.
    pub kind: u32,
    /// CPU the probe ran on (ordering across per-CPU paths, loss accounting).
    pub cpu: u32,
    /// `bpf_ktime_get_ns()`: CLOCK_MONOTONIC nanoseconds; user space anchors it to wall time.
    pub ts_ns: u64,
    /// Thread-group id (what user space calls the PID).
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// `comm` of the current task, NUL padded.
    pub comm: [u8; COMM_LEN],
}
const _: () = assert!(core::mem::size_of::<EventHeader>() == 40);

/// Which queue pair an event is about. A QPN is only unique per device, hence both.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpIdent {
    /// `ib_device.name`, NUL padded.
    pub dev: [u8; DEV_NAME_LEN],
    /// `ib_qp.qp_num` (24 bits on the wire).
    pub qpn: u32,
    /// `enum ib_qp_type` (RC = 2, UC = 3, UD = 4, ...).
    pub qp_type: u32,
}
const _: () = assert!(core::mem::size_of::<QpIdent>() == 72);

/// `ib_create_qp_user()` returned.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpCreateEvent {
    pub header: EventHeader,
    /// `qpn` is 0 when the call failed.
    pub qp: QpIdent,
    /// 0, or the negative errno of the failure.
    pub ret: i32,
    pub _pad: u32,
}
const _: () = assert!(core::mem::size_of::<QpCreateEvent>() == 120);

/// `ib_modify_qp_with_udata()` returned.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpModifyEvent {
    pub header: EventHeader,
    pub qp: QpIdent,
    /// 0, or the negative errno of the failure.
    pub ret: i32,
    /// `enum ib_qp_attr_mask` bits the caller set; fields below are meaningful only when their
    /// bit is set (see [`attr_mask`]).
    pub attr_mask: u32,
    /// `attr->cur_qp_state` when `IB_QP_CUR_STATE` is set, else [`STATE_UNKNOWN`].
    pub cur_state: u32,
    /// `attr->qp_state` when `IB_QP_STATE` is set, else [`STATE_UNKNOWN`].
    pub new_state: u32,
    /// `enum ib_mtu` (1 = 256 ... 5 = 4096).
    pub path_mtu: u32,
    pub dest_qpn: u32,
    pub sq_psn: u32,
    pub rq_psn: u32,
    /// Local ACK timeout exponent (4.096 us * 2^timeout).
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    /// [`AV_SGID_INDEX`] when `sgid_index` was read; [`AV_MIN_RNR_TIMER`] with the value in
    /// the bits above ([`MIN_RNR_TIMER_SHIFT`]) when `min_rnr_timer` was (older records: 0).
    pub av_flags: u8,
    /// `attr->ah_attr.grh.sgid_index` when `IB_QP_AV` is set and [`AV_SGID_INDEX`] is in
    /// `av_flags`.
    pub sgid_index: u32,
    /// `attr->ah_attr.grh.dgid` when `IB_QP_AV` is set.
    pub dgid: [u8; GID_LEN],
}
const _: () = assert!(core::mem::size_of::<QpModifyEvent>() == 168);
/// [`QpModifyEvent::av_flags`]: `sgid_index` holds the source GID index.
pub const AV_SGID_INDEX: u8 = 1;
/// [`QpModifyEvent::av_flags`]: bits from [`MIN_RNR_TIMER_SHIFT`] up hold `attr->min_rnr_timer`
/// (5 bits) when `IB_QP_MIN_RNR_TIMER` is set.
pub const AV_MIN_RNR_TIMER: u8 = 2;
pub const MIN_RNR_TIMER_SHIFT: u8 = 3;

/// `ib_destroy_qp_user()` returned.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpDestroyEvent {
    pub header: EventHeader,
    pub qp: QpIdent,
    pub ret: i32,
    pub _pad: u32,
}
const _: () = assert!(core::mem::size_of::<QpDestroyEvent>() == 120);

/// A process started a new program (`sched_process_exec`) or a thread group ended
/// (`sched_process_exit` of its leader). Lets user space name short-lived processes.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProcessEvent {
    pub header: EventHeader,
    /// Parent's thread-group id, when BTF let us read it (0 otherwise).
    pub ppid: u32,
    /// `task->exit_code` for exits (wait(2) status encoding), 0 for exec.
    pub exit_code: i32,
}
const _: () = assert!(core::mem::size_of::<ProcessEvent>() == 48);

/// The cgroup v2 id (`bpf_get_current_cgroup_id`: the inode number of the cgroup's directory)
/// of the header's process. Sent before the first event of a process and whenever its cgroup
/// changes, so user space keeps pid -> cgroup and names each event's container. User space
/// resolves the id to a path while the cgroup exists and records the path.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CgroupEvent {
    pub header: EventHeader,
    pub cgroup_id: u64,
}
const _: () = assert!(core::mem::size_of::<CgroupEvent>() == 48);

/// Who owns a socket: the last process seen sending on it (or connecting it). Kept in the
/// kernel so a retransmit, which fires in softirq context, names its owner, not the on-CPU task.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Owner {
    pub pid: u32,
    pub _pad: u32,
    pub comm: [u8; COMM_LEN],
}
const _: () = assert!(core::mem::size_of::<Owner>() == 24);

/// [`RetransmitEvent::transport`].
pub mod transport {
    pub const RXE: u32 = 1;
    pub const MLX5: u32 = 2;
    pub const TCP: u32 = 3;
}

/// [`RetransmitEvent::reason`].
pub mod reason {
    /// rxe: the requester's ACK timeout fired (`retransmit_timer`): packets are resent.
    pub const RXE_RETRANSMIT_TIMER: u32 = 1;
    /// rxe: the RNR NAK back-off expired (`rnr_nak_timer`): the peer had no receive posted.
    pub const RXE_RNR_NAK_TIMER: u32 = 2;
    /// tcp: `tcp_retransmit_skb`.
    pub const TCP_RETRANSMIT_SKB: u32 = 3;
}

/// A retransmission (or its timer) on one transport. RDMA ones carry the QP; TCP ones the
/// 4-tuple. `header.pid` is whoever was on CPU (often a kernel thread); `owner` is the
/// process the QP/socket belongs to, when the kernel side knows it.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetransmitEvent {
    pub header: EventHeader,
    pub qp: QpIdent,
    pub transport: u32,
    pub reason: u32,
    /// `owner.pid == 0`: unknown in the kernel (user space may still know the QP's owner).
    pub owner: Owner,
    /// TCP only.
    pub tcp: TcpTuple,
}

/// A TCP socket's addresses and state.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TcpTuple {
    /// AF_INET (2) or AF_INET6 (10).
    pub family: u16,
    /// TCP state (`TCP_ESTABLISHED` = 1, ...).
    pub state: u16,
    /// Local and remote ports, host byte order.
    pub sport: u16,
    pub dport: u16,
    /// IPv4 in the first 4 bytes, or IPv6.
    pub saddr: [u8; GID_LEN],
    pub daddr: [u8; GID_LEN],
}
const _: () = assert!(core::mem::size_of::<TcpTuple>() == 40);

/// A TCP socket changed state (`inet_sock_set_state`); `tcp.state` is the new state.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TcpStateEvent {
    pub header: EventHeader,
    /// The socket's owner when known (it connected or sent), else pid 0.
    pub owner: Owner,
    pub tcp: TcpTuple,
    pub oldstate: u32,
    pub _pad: u32,
}
const _: () = assert!(core::mem::size_of::<TcpStateEvent>() == 40 + 24 + 40 + 8);

/// A work completion with an error status (rxe: `rxe_cq_post`). Posted from the driver's
/// tasklet or work item: the owner is the CQ's, from its tracker entry.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WcErrorEvent {
    pub header: EventHeader,
    /// Device, and the QPN the completion belongs to (`qp_type` 0: not known here).
    pub qp: QpIdent,
    /// The CQ's tracker id (cqn).
    pub cqn: u32,
    /// `enum ib_wc_status` (never 0 = success here).
    pub status: u32,
    /// `enum ib_wc_opcode`.
    pub opcode: u32,
    pub vendor_err: u32,
    pub owner_pid: u32,
    pub _pad: u32,
    pub owner_comm: [u8; COMM_LEN],
}
const _: () = assert!(core::mem::size_of::<WcErrorEvent>() == 40 + 72 + 24 + 16);

/// Completion-channel notifications of one CQ (`ib_uverbs_comp_handler`), counted in the kernel
/// (busy CQs notify at packet rates); totals in the map, deltas in a [`CqNotifySample`].
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CqNotify {
    pub dev: [u8; DEV_NAME_LEN],
    /// The CQ's tracker id (cqn).
    pub cqn: u32,
    pub owner_pid: u32,
    pub owner_comm: [u8; COMM_LEN],
    pub count: u64,
}
const _: () = assert!(core::mem::size_of::<CqNotify>() == 96);

#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CqNotifySample {
    pub header: EventHeader,
    pub notify: CqNotify,
}
const _: () = assert!(core::mem::size_of::<CqNotifySample>() == 136);
const _: () = assert!(core::mem::size_of::<RetransmitEvent>() == 40 + 72 + 8 + 24 + 8 + 32);

/// An RDMA object (CQ, MR, SRQ, PD, device context, CM id, counter) was added to or removed from
/// the kernel's resource tracker (`rdma_restrack_add` / `rdma_restrack_del`): one driver-independent
/// hook for every object type, with the owning process the kernel recorded for it.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ResourceEvent {
    pub header: EventHeader,
    pub dev: [u8; DEV_NAME_LEN],
    /// `enum rdma_restrack_type` (PD = 0, CQ = 1, QP = 2, CM_ID = 3, MR = 4, CTX = 5, ...).
    pub res_type: u32,
    /// The tracker's id: what `rdma res show` calls cqn / mrn / pdn / srqn / cm-idn.
    pub res_id: u32,
    /// Owner recorded by the kernel (`res->task`), 0 for kernel-owned objects.
    pub owner_pid: u32,
    /// Non-zero for objects created by user space.
    pub user: u32,
    /// CQ: entries and completion vector.
    pub cqe: u32,
    pub comp_vector: u32,
    /// MR: keys, length and I/O virtual address.
    pub lkey: u32,
    pub rkey: u32,
    pub length: u64,
    pub iova: u64,
    pub owner_comm: [u8; COMM_LEN],
    /// MR: `enum ib_access_flags` given to the driver's reg_user_mr (0: not seen).
    /// Appended in format 1.1: older recordings decode it as 0.
    pub access: u32,
    pub _pad: u32,
}
const _: () = assert!(core::mem::size_of::<ResourceEvent>() == 40 + 64 + 32 + 16 + 16 + 8);
/// Size of [`ResourceEvent`] before `access` was appended.
pub const RESOURCE_EVENT_V1: usize = 168;

/// What an [`AsyncEvent`] is about.
pub mod element {
    pub const QP: u32 = 1;
    pub const CQ: u32 = 2;
    pub const SRQ: u32 = 3;
    pub const PORT: u32 = 4;
}

/// An asynchronous event (`enum ib_event_type`) delivered to user space through ib_uverbs.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AsyncEvent {
    pub header: EventHeader,
    /// Device, and the QPN for QP events.
    pub qp: QpIdent,
    pub event_type: u32,
    /// One of [`element`].
    pub element: u32,
    /// CQ / SRQ tracker id, or the port number.
    pub element_id: u32,
    /// One of [`async_source`]: who saw the event.
    pub source: u32,
}

/// [`AsyncEvent::source`].
pub mod async_source {
    /// ib_uverbs' handlers: the event reached a user process; `event_type` is `enum ib_event_type`.
    pub const UVERBS: u32 = 0;
    /// mlx5_ib's `mlx5_ib_qp_event`: the hardware event as the driver got it (kernel QPs too);
    /// `event_type` is the mlx5 event type.
    pub const MLX5: u32 = 1;
    /// ib_core's `__ib_unregister_device`: the device itself is going away (`rdma link delete`,
    /// driver unbind, module unload); `event_type` is [`DEVICE_UNREGISTER`], `element` PORT 0.
    pub const CORE: u32 = 2;
    /// [`CORE`]'s only event.
    pub const DEVICE_UNREGISTER: u32 = 1;
}
const _: () = assert!(core::mem::size_of::<AsyncEvent>() == 40 + 72 + 16);

/// An RDMA CM event delivered to a user process (`ucma_event_handler`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CmEvent {
    pub header: EventHeader,
    /// Device (once bound) and the QPN of the id's QP (0 before one exists).
    pub qp: QpIdent,
    /// `enum rdma_cm_event_type`.
    pub event: u32,
    /// 0, a negative errno, or (REJECTED) the reject reason.
    pub status: i32,
    /// The process owning the cm_id (from its resource tracker entry).
    pub owner_pid: u32,
    /// The cm_id's tracker id.
    pub cm_id: u32,
    pub owner_comm: [u8; COMM_LEN],
    /// AF_INET / AF_INET6 and ports (host order) of the id's source and destination.
    pub src_family: u16,
    pub src_port: u16,
    pub dst_family: u16,
    pub dst_port: u16,
    pub src_addr: [u8; GID_LEN],
    pub dst_addr: [u8; GID_LEN],
}
const _: () = assert!(core::mem::size_of::<CmEvent>() == 40 + 72 + 16 + 16 + 8 + 32);

/// Value of a state field that the caller did not set.
pub const STATE_UNKNOWN: u32 = u32::MAX;

/// `enum ib_qp_attr_mask` bits (uverbs ABI, stable across kernels).
pub mod attr_mask {
    pub const STATE: u32 = 1 << 0;
    pub const CUR_STATE: u32 = 1 << 1;
    pub const EN_SQD_ASYNC_NOTIFY: u32 = 1 << 2;
    pub const ACCESS_FLAGS: u32 = 1 << 3;
    pub const PKEY_INDEX: u32 = 1 << 4;
    pub const PORT: u32 = 1 << 5;
    pub const QKEY: u32 = 1 << 6;
    pub const AV: u32 = 1 << 7;
    pub const PATH_MTU: u32 = 1 << 8;
    pub const TIMEOUT: u32 = 1 << 9;
    pub const RETRY_CNT: u32 = 1 << 10;
    pub const RNR_RETRY: u32 = 1 << 11;
    pub const RQ_PSN: u32 = 1 << 12;
    pub const MAX_QP_RD_ATOMIC: u32 = 1 << 13;
    pub const ALT_PATH: u32 = 1 << 14;
    pub const MIN_RNR_TIMER: u32 = 1 << 15;
    pub const SQ_PSN: u32 = 1 << 16;
    pub const MAX_DEST_RD_ATOMIC: u32 = 1 << 17;
    pub const PATH_MIG_STATE: u32 = 1 << 18;
    pub const CAP: u32 = 1 << 19;
    pub const DEST_QPN: u32 = 1 << 20;
    pub const RATE_LIMIT: u32 = 1 << 25;
}

#[cfg(feature = "user")]
mod pod {
    use super::*;
    // SAFETY: all of these are #[repr(C)], made only of integers and integer arrays, with every
    // padding byte spelled out as a field, so any bit pattern is a valid value.
    unsafe impl aya::Pod for EventHeader {}
    // SAFETY: as above.
    unsafe impl aya::Pod for QpCreateEvent {}
    // SAFETY: as above.
    unsafe impl aya::Pod for QpModifyEvent {}
    // SAFETY: as above.
    unsafe impl aya::Pod for QpDestroyEvent {}
    // SAFETY: as above.
    unsafe impl aya::Pod for ProcessEvent {}
    // SAFETY: as above.
    unsafe impl aya::Pod for CgroupEvent {}
    // SAFETY: as above.
    unsafe impl aya::Pod for RetransmitEvent {}
    // SAFETY: as above.
    unsafe impl aya::Pod for Owner {}
    // SAFETY: as above.
    unsafe impl aya::Pod for ResourceEvent {}
    // SAFETY: as above.
    unsafe impl aya::Pod for AsyncEvent {}
    // SAFETY: as above.
    unsafe impl aya::Pod for CmEvent {}
    // SAFETY: as above.
    unsafe impl aya::Pod for TcpBytes {}
    // SAFETY: as above.
    unsafe impl aya::Pod for TcpBytesSample {}
    // SAFETY: as above.
    unsafe impl aya::Pod for QpTraffic {}
    // SAFETY: as above.
    unsafe impl aya::Pod for QpTrafficSample {}
    // SAFETY: as above.
    unsafe impl aya::Pod for CounterSample {}
    // SAFETY: as above.
    unsafe impl aya::Pod for TcpTuple {}
    // SAFETY: as above.
    unsafe impl aya::Pod for TcpStateEvent {}
    // SAFETY: as above.
    unsafe impl aya::Pod for WcErrorEvent {}
    // SAFETY: as above.
    unsafe impl aya::Pod for CqNotify {}
    // SAFETY: as above.
    unsafe impl aya::Pod for CqNotifySample {}
    // SAFETY: as above.
    unsafe impl aya::Pod for QpResSample {}
    // SAFETY: as above.
    unsafe impl aya::Pod for QpCounterSample {}
    // SAFETY: as above.
    unsafe impl aya::Pod for PortSample {}
    // SAFETY: as above.
    unsafe impl aya::Pod for GidSample {}
    // SAFETY: as above.
    unsafe impl aya::Pod for UmemFailedEvent {}
    // SAFETY: as above.
    unsafe impl aya::Pod for QpCapsEvent {}
    // SAFETY: as above.
    unsafe impl aya::Pod for QueueCapsEvent {}
    // SAFETY: as above.
    unsafe impl aya::Pod for TcpPeerKey {}
    // SAFETY: as above.
    unsafe impl aya::Pod for VerbsCallEvent {}
    // SAFETY: as above.
    unsafe impl aya::Pod for CpuSampleEvent {}
}
