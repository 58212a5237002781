//! Samples: per-process TCP bytes, per-QP traffic and CQ notifications summed in the kernel
//! (running totals in maps, deltas in the `*Sample` records user space makes from them), and
//! the records user space makes from sysfs and rdma netlink (port counters, port states, the
//! QP resource table, per-QP counters). Same wire rules as every record: `#[repr(C)]`,
//! explicit padding, sizes asserted.

use super::{EventHeader, QpIdent};
use crate::limits::{COMM_LEN, DEV_NAME_LEN, GID_LEN};

/// Per-process TCP traffic per peer address, summed in the kernel (`sock_send_length` /
/// `sock_recv_length` on TCP sockets) and read by user space. As a kernel map value the fields
/// are running totals; as a [`TcpBytesSample`] they are deltas since the previous sample.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TcpBytes {
    pub tx_bytes: u64,
    pub rx_bytes: u64,
    pub tx_calls: u64,
    pub rx_calls: u64,
    pub comm: [u8; COMM_LEN],
    /// The peer's address: AF_INET in the first 4 bytes, AF_INET6 all 16; `family` 0 when
    /// unknown (records before it was kept, or a kernel path without the socket).
    pub daddr: [u8; 16],
    pub family: u16,
    pub _pad: [u8; 6],
}
const _: () = assert!(core::mem::size_of::<TcpBytes>() == 48 + 24);

/// Size of [`TcpBytesSample`] before the peer address was appended.
pub const TCP_BYTES_SAMPLE_V1: usize = 88;

/// The key of the kernel's TCP byte totals: a process and one peer address. Aligned to 8 so
/// that the kernel programs read the address as two 8-byte words.
#[repr(C, align(8))]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TcpPeerKey {
    pub tgid: u32,
    pub family: u16,
    pub _pad: u16,
    pub daddr: [u8; 16],
}
const _: () = assert!(core::mem::size_of::<TcpPeerKey>() == 24);

#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TcpBytesSample {
    /// `pid`/`comm`: the process; `ts_ns`: when sampled.
    pub header: EventHeader,
    pub bytes: TcpBytes,
}
const _: () = assert!(core::mem::size_of::<TcpBytesSample>() == 88 + 24);

/// Packets and bytes a QP sent (rxe: `rxe_xmit_packet`) and received, keyed in the kernel by the QP's
/// address; totals in the map, deltas in a [`QpTrafficSample`].
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpTraffic {
    pub qp: QpIdent,
    pub tx_packets: u64,
    pub tx_bytes: u64,
    /// Received (rxe: `rxe_resp_queue_pkt` / `rxe_comp_queue_pkt`). Appended in format 1.1.
    pub rx_packets: u64,
    pub rx_bytes: u64,
}
const _: () = assert!(core::mem::size_of::<QpTraffic>() == 104);

/// One slot of the per-QP traffic array: a QP's totals, like a `QP_TRAFFIC` entry, in the
/// slot its `struct rxe_qp *` hashes to ([`qp_slot`]; not its QP number: each device numbers
/// its QPs from the same start). Per packet the kernel program only
/// compares `key` and adds (no hash-map lookup). `key` is 0 for a free slot, the QP's
/// address while it lives, and the address with [`SLOT_FREED`] set once the QP is being
/// destroyed: user space then reads the last totals and frees the slot (zeroes it, `key`
/// last). The kernel claims only a free slot, writing the QP's identity before `key`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpSlot {
    pub key: u64,
    pub traffic: QpTraffic,
}
const _: () = assert!(core::mem::size_of::<QpSlot>() == 112);

/// Set in [`QpSlot::key`] when the QP is being destroyed (addresses are 8-byte aligned).
pub const SLOT_FREED: u64 = 1;

/// The slot of the QP at kernel address `qp` among `slots` (a power of two): a multiplicative
/// hash of the address (QPs are allocated at aligned addresses, so its low bits say little).
#[inline(always)]
pub fn qp_slot(qp: u64, slots: u32) -> u32 {
    ((qp >> 4).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40) as u32 & (slots - 1)
}

/// One slot of the per-process TCP byte array (`SOCK_SLOTS`): one socket's totals while one
/// process uses it, in the slot [`sock_slot`] puts the socket's own hash in. Per send
/// or receive the kernel program compares `sk` and the process in `key`, and adds: no hash-map
/// lookup, and of the socket only its hash is read (its protocol, family and peer once, when
/// the slot is claimed). A socket whose slot another holds, and a process using a socket
/// another process's slot holds, go to `TCP_BYTES`. `key` is 0 for a free slot, else
/// [`sock_slot_key`] of the process and the peer's family; `sk` is the socket's address, with
/// [`SOCK_CLOSED`] set once the socket closed (it then matches no socket: the kernel reuses a
/// closed socket's memory for new ones); `bytes.daddr` is the peer. The kernel claims only a
/// free slot, writing the identity (process name, peer, socket) before `key`; user space
/// frees a slot whose socket closed or whose process is gone once its last totals are read
/// (zeroes it, `key` last). User space sums a process's slots towards one peer (one per
/// socket) with its `TCP_BYTES` entry.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SockSlot {
    pub key: u64,
    pub sk: u64,
    pub bytes: TcpBytes,
}
const _: () = assert!(core::mem::size_of::<SockSlot>() == 88);

/// Set in [`SockSlot::sk`] by the kernel when the socket closes (socket addresses are aligned,
/// so no socket's address has it).
pub const SOCK_CLOSED: u64 = 1;

/// [`SockSlot::key`] of process `tgid` towards a peer of address family `family` (never 0).
#[inline(always)]
pub const fn sock_slot_key(tgid: u32, family: u16) -> u64 {
    ((tgid as u64) << 32) | ((family as u64) << 16) | 1
}

/// The process of a [`SockSlot::key`].
pub const fn sock_slot_tgid(key: u64) -> u32 {
    (key >> 32) as u32
}

/// The peer's address family of a [`SockSlot::key`].
pub const fn sock_slot_family(key: u64) -> u16 {
    (key >> 16) as u16
}

/// The slot of a socket whose `skc_hash` (its hash of its addresses and ports, set when it
/// connects or is accepted) is `hash`, among `slots` (a power of two, at least 2): the top bits
/// of a multiplicative hash of it. (The socket's address itself cannot be hashed by a typed
/// program: the verifier allows no arithmetic on a typed pointer.)
#[inline(always)]
pub fn sock_slot(hash: u32, slots: u32) -> u32 {
    (u64::from(hash).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - slots.trailing_zeros())) as u32
        & (slots - 1)
}

#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpTrafficSample {
    pub header: EventHeader,
    pub traffic: QpTraffic,
}
const _: () = assert!(core::mem::size_of::<QpTrafficSample>() == 144);
/// Size of [`QpTrafficSample`] before the receive counters were appended.
pub const QP_TRAFFIC_SAMPLE_V1: usize = 128;

/// Longest counter file name kept.
pub const COUNTER_NAME_LEN: usize = 48;

/// A port counter (`/sys/class/infiniband/DEV/ports/N/{counters,hw_counters}/NAME`) that moved.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CounterSample {
    pub header: EventHeader,
    pub dev: [u8; DEV_NAME_LEN],
    pub port: u32,
    /// 1 for `hw_counters`, 0 for `counters`.
    pub hw: u32,
    pub name: [u8; COUNTER_NAME_LEN],
    pub value: u64,
    pub delta: u64,
}
const _: () = assert!(core::mem::size_of::<CounterSample>() == 40 + 64 + 8 + 48 + 16);

/// How a [`QpResSample`] row differs from the previous sample of the QP resource table.
pub mod qp_res_change {
    /// Present in the first sample (the QP is older than the trace).
    pub const PRESENT: u32 = 0;
    pub const NEW: u32 = 1;
    /// State, remote QPN or PSNs changed.
    pub const CHANGED: u32 = 2;
    pub const GONE: u32 = 3;
}

/// A row of the kernel's QP resource table (rdma netlink `RES_QP_GET`, what
/// `rdma resource show qp` prints) that appeared, changed or vanished. `header.pid` is the
/// owner the kernel recorded (0 for a kernel QP), `header.comm` its name.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpResSample {
    pub header: EventHeader,
    pub qp: QpIdent,
    pub port: u32,
    /// `u32::MAX` when the kernel gave none (unconnected QP types).
    pub rqpn: u32,
    pub sq_psn: u32,
    /// `u32::MAX` when the kernel gave none.
    pub rq_psn: u32,
    /// `enum ib_qp_state`.
    pub state: u32,
    /// A [`qp_res_change`] value.
    pub change: u32,
}
const _: () = assert!(core::mem::size_of::<QpResSample>() == 40 + 72 + 24);

/// QPNs of a per-QP counter kept in a [`QpCounterSample`].
pub const COUNTER_QPNS: usize = 8;

/// A per-QP statistic counter (rdma netlink `STAT_GET`, bound in auto or manual mode) that
/// moved: one record per counter name. `header.pid`: the counter's owner when bound per
/// process, else 0.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpCounterSample {
    pub header: EventHeader,
    pub dev: [u8; DEV_NAME_LEN],
    pub port: u32,
    pub counter_id: u32,
    /// The first [`COUNTER_QPNS`] QPs bound to the counter.
    pub qpns: [u32; COUNTER_QPNS],
    /// How many QPs are bound (may exceed [`COUNTER_QPNS`]).
    pub nqpns: u32,
    pub _pad: u32,
    pub name: [u8; COUNTER_NAME_LEN],
    pub value: u64,
    pub delta: u64,
}
const _: () = assert!(core::mem::size_of::<QpCounterSample>() == 40 + 64 + 8 + 32 + 8 + 48 + 16);

/// An RDMA port as sysfs shows it, sampled at the start and whenever it changes: state and
/// the active MTU (for RoCE estimated from the netdev MTU the way drivers derive it; 0 when
/// unknown, e.g. InfiniBand without a query).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PortSample {
    pub header: EventHeader,
    pub dev: [u8; DEV_NAME_LEN],
    pub port: u32,
    /// `enum ib_port_state` (1 DOWN .. 4 ACTIVE), 0 unknown, [`PORT_STATE_REMOVED`] when the
    /// port (its device) is gone.
    pub state: u32,
    /// Bytes (256 .. 4096), 0 unknown.
    pub active_mtu: u32,
    /// MTU of the netdev under a RoCE port, 0 for none.
    pub netdev_mtu: u32,
    /// `Ethernet` or `InfiniBand`, NUL padded.
    pub link_layer: [u8; 16],
    pub netdev: [u8; 16],
}
const _: () = assert!(core::mem::size_of::<PortSample>() == 40 + 64 + 16 + 32);
/// One entry of a port's GID table as sysfs shows it (`ports/N/gids/I`,
/// `gid_attrs/types/I`, `gid_attrs/ndevs/I`), sampled at the start and whenever it changes. A
/// deleted entry is sent once with an all-zero `gid`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GidSample {
    pub header: EventHeader,
    pub dev: [u8; DEV_NAME_LEN],
    pub port: u32,
    pub index: u32,
    pub gid: [u8; GID_LEN],
    /// [`GID_TYPE_IB_ROCE_V1`], [`GID_TYPE_ROCE_V2`], 0 unknown.
    pub gid_type: u32,
    pub _pad: u32,
    /// The netdev the entry belongs to (RoCE), NUL padded.
    pub netdev: [u8; 16],
}
const _: () = assert!(core::mem::size_of::<GidSample>() == 40 + 64 + 8 + 16 + 8 + 16);
/// [`GidSample::gid_type`]: "IB/RoCE v1".
pub const GID_TYPE_IB_ROCE_V1: u32 = 1;
/// [`GidSample::gid_type`]: "RoCE v2".
pub const GID_TYPE_ROCE_V2: u32 = 2;

/// [`PortSample::state`] of a port whose device went away (`rdma link delete`, hot unplug).
pub const PORT_STATE_REMOVED: u32 = u32::MAX;
