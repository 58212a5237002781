//! Sizes shared by both sides.

/// `TASK_COMM_LEN` in the kernel.
pub const COMM_LEN: usize = 16;
/// `IB_DEVICE_NAME_MAX` in `include/rdma/ib_verbs.h`.
pub const DEV_NAME_LEN: usize = 64;
/// Raw GID (`union ib_gid`) size.
pub const GID_LEN: usize = 16;
/// Default size of the event ring buffer (bytes, power of two, multiple of the page size).
pub const RINGBUF_BYTES: u32 = 1 << 22;
/// How often user space drains the ring buffer whether or not it was woken (ms): records (but
/// an exec's) do not wake the reader until an eighth of the ring is waiting, so this bounds how
/// late an event is seen.
pub const DRAIN_MS: u64 = 100;
/// How many in-flight probed calls (entry seen, return not yet) are tracked at once.
pub const MAX_INFLIGHT: u32 = 4096;
/// Marks an offset or argument index that BTF could not resolve on this kernel: the program skips
/// the read and the field stays at its "unknown" value.
pub const UNRESOLVED: u32 = u32::MAX;
/// How many processes a pid filter can follow (the traced command and its descendants).
pub const MAX_TRACED: u32 = 8192;
/// Sockets whose owner is remembered for TCP retransmit attribution.
pub const MAX_SOCKETS: u32 = 16384;
/// Processes whose TCP traffic is summed at once.
pub const MAX_PROCESSES: u32 = 8192;
/// Cgroups a `--container` / `--pod` / `--cgroup` filter can name at once.
pub const MAX_CGROUPS: u32 = 4096;
/// QPs whose traffic is summed at once.
pub const MAX_QPS: u32 = 16384;
/// Slots of the per-QP traffic array (`QP_SLOTS`), a power of two: a QP whose slot another
/// QP holds is summed in the `QP_TRAFFIC` hash instead.
pub const QP_SLOTS: u32 = 4096;
/// Slots of the per-process TCP byte array (`SOCK_SLOTS`), a power of two: a socket whose slot
/// another socket holds is summed in the `TCP_BYTES` hash instead.
pub const SOCK_SLOTS: u32 = 1024;

/// CQs whose completion notifications are counted at once (LRU beyond that).
pub const MAX_CQS: u32 = 16384;
