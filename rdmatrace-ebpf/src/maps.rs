//! Maps shared by every probe area. User space finds them by these names.

use aya_ebpf::{
    macros::map,
    maps::{Array, HashMap, LruHashMap, PerCpuArray, RingBuf},
};
use rdmatrace_common::{
    config::ProbeConfig,
    event::{
        CqNotify, Owner, QpDestroyEvent, QpModifyEvent, QpSlot, QpTraffic, SockSlot, TcpBytes,
        TcpPeerKey,
    },
    limits::{
        MAX_CGROUPS, MAX_CQS, MAX_INFLIGHT, MAX_PROCESSES, MAX_QPS, MAX_SOCKETS, MAX_TRACED,
        QP_SLOTS as QP_SLOT_COUNT, RINGBUF_BYTES, SOCK_SLOTS as SOCK_SLOT_COUNT,
    },
};

/// Every event goes here. User space may resize it before load (`--ringbuf-size`).
#[map]
pub static EVENTS: RingBuf = RingBuf::with_byte_size(RINGBUF_BYTES, 0);

/// Events that found [`EVENTS`] full, per CPU. Read and reported by user space; never silent.
#[map]
pub static LOST: PerCpuArray<u64> = PerCpuArray::with_max_entries(1, 0);

/// Filter and BTF-resolved offsets; written once by user space before attaching.
#[map]
pub static CONFIG: Array<ProbeConfig> = Array::with_max_entries(1, 0);

/// Thread-group ids to report when the config's filter mode is `FILTER_TRACED` (`--pid`, or a
/// command run by `record -- CMD` and, with `follow_forks`, its descendants).
#[map]
pub static TRACED: HashMap<u32, u32> = HashMap::with_max_entries(MAX_TRACED, 0);

/// Cgroup ids whose processes are traced under `FILTER_CGROUP`; kept up to date by user space
/// as matching cgroups appear.
#[map]
pub static WANTED_CGROUPS: HashMap<u64, u8> = HashMap::with_max_entries(MAX_CGROUPS, 0);

/// The cgroup id last reported per thread-group id: a `ProcessCgroup` event is sent when a
/// process is first seen or its cgroup changed. LRU: exited processes age out.
#[map]
pub static PROC_CGROUP: LruHashMap<u32, u64> = LruHashMap::with_max_entries(MAX_PROCESSES, 0);

/// `ib_create_qp_user` entry arguments (device, init_attr) by pid_tgid, until it returns.
#[map]
pub static PENDING_CREATE: HashMap<u64, [u64; 2]> = HashMap::with_max_entries(MAX_INFLIGHT, 0);

/// `ib_modify_qp_with_udata` event under construction by pid_tgid, completed at return.
#[map]
pub static PENDING_MODIFY: HashMap<u64, QpModifyEvent> = HashMap::with_max_entries(MAX_INFLIGHT, 0);

/// `ib_destroy_qp_user` event under construction (read before the QP is freed), by pid_tgid.
#[map]
pub static PENDING_DESTROY: HashMap<u64, QpDestroyEvent> =
    HashMap::with_max_entries(MAX_INFLIGHT, 0);

/// Socket (`struct sock *`) -> the process that last sent on or connected it. LRU: closed
/// sockets age out without bookkeeping.
#[map]
pub static SOCK_OWNER: LruHashMap<u64, Owner> = LruHashMap::with_max_entries(MAX_SOCKETS, 0);

/// A CQ or SRQ create's entry -> return: (the `ib_cq *` or the `ib_pd *`, the init attr) per
/// task.
#[map]
pub static PENDING_QUEUE: HashMap<u64, [u64; 2]> = HashMap::with_max_entries(MAX_INFLIGHT, 0);

/// `ib_umem_get` entry -> return: (device, size) per task.
#[map]
pub static PENDING_UMEM: HashMap<u64, [u64; 2]> = HashMap::with_max_entries(MAX_INFLIGHT, 0);

/// `rdma_restrack_add` entry argument (the `rdma_restrack_entry *`) by pid_tgid, until it
/// returns: the tracker id is only assigned inside the call.
#[map]
pub static PENDING_RES: HashMap<u64, u64> = HashMap::with_max_entries(MAX_INFLIGHT, 0);

/// Per-process TCP totals per peer address ((tgid, peer) -> bytes and calls), added to
/// atomically; user space turns totals into deltas.
///
/// The three aggregate maps are shared, not per CPU: a per-CPU map preallocates its values for
/// every possible CPU (these three took 5.6 MiB per CPU: 1.4 GiB of kernel memory on a
/// 256-CPU host), and their counters are added to at most once a packet or call.
#[map]
pub static TCP_BYTES: LruHashMap<TcpPeerKey, TcpBytes> =
    LruHashMap::with_max_entries(MAX_PROCESSES * 4, 0);

/// `tcp_sendmsg` / `tcp_recvmsg` entry -> return (before 6.3): the socket, by pid_tgid.
#[map]
pub static PENDING_TCP_SK: LruHashMap<u64, u64> = LruHashMap::with_max_entries(MAX_INFLIGHT, 0);

/// Per-QP packet and byte totals (rxe: keyed by `struct rxe_qp *`), added to atomically.
#[map]
pub static QP_TRAFFIC: LruHashMap<u64, QpTraffic> = LruHashMap::with_max_entries(MAX_QPS, 0);

/// `BPF_F_MMAPABLE`: user space reads the array through a shared mapping.
const MMAPABLE: u32 = 1 << 10;

/// Per-QP packet and byte totals in slots (see `QpSlot`): the per-packet path when the config
/// allows it (an array lookup the verifier inlines, instead of a hash lookup); a QP whose
/// slot another QP holds goes to `QP_TRAFFIC`. Read by user space through a shared mapping.
#[map]
pub static QP_SLOTS: Array<QpSlot> = Array::with_max_entries(QP_SLOT_COUNT, MMAPABLE);

/// Per-socket TCP byte totals of one process towards one peer in slots (see `SockSlot`): the
/// per-call path when the config allows it (an array lookup the verifier inlines, instead of a
/// hash lookup); a socket whose slot another socket holds goes to `TCP_BYTES`. Read and freed
/// by user space through a shared mapping.
#[map]
pub static SOCK_SLOTS: Array<SockSlot> = Array::with_max_entries(SOCK_SLOT_COUNT, MMAPABLE);

/// Per-CQ completion-channel notification counts (keyed by `struct ib_cq *`), added to
/// atomically.
#[map]
pub static CQ_NOTIFY: LruHashMap<u64, CqNotify> = LruHashMap::with_max_entries(MAX_CQS, 0);

/// `BPF_NOEXIST`: an insert that leaves an existing entry alone (another CPU made it first).
pub const NOEXIST: u64 = 1;

/// Adds `n` to the counter at `at`, atomically (a shared map value other CPUs add to too).
///
/// # Safety
/// `at` points at a live `u64` of a map value, 8-byte aligned.
#[inline(always)]
pub unsafe fn add(at: *mut u64, n: u64) {
    // The bpf target has no compare-and-swap, so no `AtomicU64::fetch_add`: the intrinsic it
    // is made of. Its result unused, LLVM emits the plain BPF atomic add (`lock +=`), which every
    // kernel version and CPU flavour of the target accepts.
    // SAFETY: the caller's pointer is valid and aligned.
    unsafe {
        core::intrinsics::atomic_xadd::<u64, u64, { core::intrinsics::AtomicOrdering::Relaxed }>(
            at, n,
        );
    }
}

/// The `access` argument of a driver's reg_user_mr by pid_tgid, until ib_uverbs adds the new MR
/// to the resource tracker (same task, right after the driver returns). LRU: a failed
/// registration leaves an entry that simply ages out.
#[map]
pub static PENDING_MR_ACCESS: LruHashMap<u64, u32> = LruHashMap::with_max_entries(MAX_INFLIGHT, 0);
