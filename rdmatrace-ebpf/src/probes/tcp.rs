//! TCP, for contrast with RDMA: retransmits attributed to the socket's owner (bcc's tcpretrans
//! shows whoever is on CPU, usually nobody useful). Ownership is learnt where a process acts
//! on the socket: `tcp_sendmsg` (kprobe, where kprobes exist) and connect, via
//! `inet_sock_set_state` to SYN_SENT (raw tracepoint, works everywhere).

use aya_ebpf::{
    helpers::bpf_get_current_pid_tgid,
    macros::{kprobe, kretprobe, raw_tracepoint},
    programs::{ProbeContext, RawTracePointContext, RetProbeContext},
};
use rdmatrace_common::{
    config::{ProbeConfig, TYPED_SOCK},
    event::{
        reason, sock_slot, sock_slot_key, sock_slot_tgid, transport, EventKind, Owner,
        RetransmitEvent, SockSlot, TcpBytes, TcpPeerKey, TcpStateEvent, TcpTuple, SOCK_CLOSED,
    },
    limits::{SOCK_SLOTS as SOCK_SLOT_COUNT, UNRESOLVED},
};

use crate::{
    emit::{config, header, output, wanted, wanted_pid, wanted_task},
    maps::{add, NOEXIST, PENDING_TCP_SK, SOCK_OWNER, SOCK_SLOTS, TCP_BYTES},
    read, regs,
    zero::{comm_into, copy_words, Slot},
};

pub const AF_INET: u16 = 2;
pub const AF_INET6: u16 = 10;
const TCP_SYN_SENT: i32 = 2;
const TCP_CLOSE: i32 = 7;
const TCP_LISTEN: i32 = 10;

#[inline(always)]
fn remember_owner(sk: u64) {
    if sk == 0 {
        return;
    }
    let mut slot = Slot::<Owner>::new();
    // SAFETY: all-zero is a valid value of this integer-only struct.
    let owner = unsafe { slot.zeroed() };
    owner.pid = (bpf_get_current_pid_tgid() >> 32) as u32;
    comm_into(&mut owner.comm);
    let _ = SOCK_OWNER.insert(sk, owner, 0);
}

#[kprobe]
pub fn tcp_sendmsg_owner(ctx: ProbeContext) -> u32 {
    if let Some(sk) = regs::arg_at(&ctx, 0) {
        remember_owner(sk);
    }
    0
}

/// `tcp_sendmsg(sk, ...)` / `tcp_recvmsg(sk, ...)` entry, before 6.3 only: the socket for the
/// return probe that counts the bytes.
#[kprobe]
pub fn tcp_msg_sk(ctx: ProbeContext) -> u32 {
    if let Some(sk) = regs::arg_at(&ctx, 0) {
        let _ = PENDING_TCP_SK.insert(bpf_get_current_pid_tgid(), sk, 0);
    }
    0
}

/// `inet_sock_set_state(sk, oldstate, newstate)`: learns the owner at connect() (which runs in
/// the caller's context) and reports every TCP state change with the socket's owner.
#[raw_tracepoint(tracepoint = "inet_sock_set_state")]
pub fn tcp_state(ctx: RawTracePointContext) -> u32 {
    try_tcp_state(&ctx).unwrap_or(0)
}

fn try_tcp_state(ctx: &RawTracePointContext) -> Option<u32> {
    let sk: u64 = ctx.arg(0);
    let newstate: i32 = ctx.arg(2);
    let r = tcp_state_event(ctx, sk, newstate);
    // A closed socket's memory is reused for new sockets: they must not inherit its owner.
    if newstate == TCP_CLOSE {
        let _ = SOCK_OWNER.remove(&sk);
        if let Some(cfg) = config() {
            closed(cfg, sk);
        }
    }
    r
}

fn tcp_state_event(ctx: &RawTracePointContext, sk: u64, newstate: i32) -> Option<u32> {
    let oldstate: i32 = ctx.arg(1);
    // Connecting and listening run in the owner's context.
    if newstate == TCP_SYN_SENT || newstate == TCP_LISTEN {
        remember_owner(sk);
    }
    let cfg = config()?;
    if read::field::<u16>(sk, cfg.sk_protocol)? != IPPROTO_TCP {
        return None;
    }
    let mut slot = Slot::<TcpStateEvent>::new();
    // SAFETY: all-zero is a valid value of this integer-only struct.
    let ev = unsafe { slot.zeroed() };
    if !owner_of(cfg, sk, &mut ev.owner) {
        return None;
    }
    header(&mut ev.header, EventKind::TcpState as u32);
    tuple(cfg, sk, &mut ev.tcp);
    ev.tcp.state = newstate as u16;
    ev.oldstate = oldstate as u32;
    output(ev);
    Some(0)
}

/// Copies the socket's owner into `out` when known; then whether the event passes the filter
/// (on the owner when known, else on the on-CPU task).
#[inline(always)]
fn owner_of(cfg: &ProbeConfig, sk: u64, out: &mut Owner) -> bool {
    if let Some(o) = SOCK_OWNER.get_ptr(sk) {
        // SAFETY: a live map value, copied field by field; both `comm`s sit at offset 8 of a
        // 4-aligned `Owner`.
        unsafe {
            out.pid = (*o).pid;
            copy_words(out.comm.as_mut_ptr(), (*o).comm.as_ptr(), out.comm.len());
        }
    }
    if out.pid != 0 {
        wanted_pid(cfg, out.pid)
    } else {
        wanted(cfg)
    }
}

#[inline(always)]
fn tuple(cfg: &ProbeConfig, sk: u64, ev: &mut TcpTuple) {
    ev.family = read::field::<u16>(sk, cfg.sk_family).unwrap_or(0);
    ev.state = u16::from(read::field::<u8>(sk, cfg.sk_state).unwrap_or(0));
    ev.sport = read::field::<u16>(sk, cfg.sk_num).unwrap_or(0);
    ev.dport = u16::from_be(read::field::<u16>(sk, cfg.sk_dport).unwrap_or(0));
    if ev.family == AF_INET6 {
        read::bytes(sk, cfg.sk_v6_rcv_saddr, &mut ev.saddr);
        read::bytes(sk, cfg.sk_v6_daddr, &mut ev.daddr);
    } else if ev.family == AF_INET {
        read::bytes(sk, cfg.sk_rcv_saddr, &mut ev.saddr[..4]);
        read::bytes(sk, cfg.sk_daddr, &mut ev.daddr[..4]);
    }
}

/// `tcp_retransmit_skb(sk, skb, ...)`.
#[raw_tracepoint(tracepoint = "tcp_retransmit_skb")]
pub fn tcp_retransmit(ctx: RawTracePointContext) -> u32 {
    try_tcp_retransmit(&ctx).unwrap_or(0)
}

fn try_tcp_retransmit(ctx: &RawTracePointContext) -> Option<u32> {
    let cfg = config()?;
    let sk: u64 = ctx.arg(0);
    let mut slot = Slot::<RetransmitEvent>::new();
    // SAFETY: all-zero is a valid value of this integer-only struct.
    let ev = unsafe { slot.zeroed() };
    // Retransmits run in softirq: filter on the owner when it is known.
    if !owner_of(cfg, sk, &mut ev.owner) {
        return None;
    }
    header(&mut ev.header, EventKind::Retransmit as u32);
    ev.transport = transport::TCP;
    ev.reason = reason::TCP_RETRANSMIT_SKB;
    tuple(cfg, sk, &mut ev.tcp);
    output(ev);
    Some(0)
}

pub const IPPROTO_TCP: u16 = 6;

/// `sock_send_length(sk, ret, flags)` / `sock_recv_length(sk, ret, flags)`: every socket
/// send/recv in the caller's context; TCP ones are summed per process and peer. Nothing once
/// the tp_btf twins (`tcp_typed.rs`) count in their place (this program's link is closed
/// beside the start-up: until then it runs beside them, counting nothing). A socket whose
/// slot this process holds is added to at once (of the socket only its hash read: the slot
/// was claimed past the filter and the protocol); otherwise the filter, the protocol, family
/// and peer.
#[inline(always)]
fn count(ctx: &RawTracePointContext, tx: bool) -> Option<u32> {
    let cfg = config()?;
    if cfg.typed & TYPED_SOCK != 0 {
        return None;
    }
    let sk: u64 = ctx.arg(0);
    let ret: i32 = ctx.arg(1);
    if ret <= 0 || sk == 0 {
        return None;
    }
    let tgid = (bpf_get_current_pid_tgid() >> 32) as u32;
    let s = sock_slot_of(cfg, sk);
    if add_held(s, sk, tgid, ret as u64, tx) {
        return Some(0);
    }
    if !wanted_task(cfg, tgid) || read::field::<u16>(sk, cfg.sk_protocol)? != IPPROTO_TCP {
        return None;
    }
    let (family, v4) = family_and_v4_peer(cfg, sk)?;
    if family != AF_INET && family != AF_INET6 {
        return None;
    }
    add_bytes(cfg, (sk, s), (family, v4), tgid, ret as u64, tx)
}

/// The slot of socket `sk` in `SOCK_SLOTS` (by its hash, read at the config's offset) when
/// the config allows slots and there is a socket.
#[inline(always)]
fn sock_slot_of(cfg: &ProbeConfig, sk: u64) -> Option<*mut SockSlot> {
    if cfg.sock_slots == 0 || sk == 0 {
        return None;
    }
    read::field::<u32>(sk, cfg.sk_hash).and_then(slot_of)
}

/// How many bytes one read takes from the socket's IPv4 peer address on, when the family lies
/// among them.
const WINDOW: u32 = 24;

/// The socket's family and, when the same read brought it, its IPv4 peer address (`None` when
/// the family cannot be read). One kernel read when the BTF offsets put the family within
/// [`WINDOW`] bytes after the IPv4 peer address (`sock_common` keeps the two close); otherwise
/// the family alone, and the peer is read by [`add_bytes`] as for any family. The family is
/// picked out of the window by shifts, never by a stack offset only known at run time (kernels
/// before 5.12 refuse those).
#[inline(always)]
fn family_and_v4_peer(cfg: &ProbeConfig, sk: u64) -> Option<(u16, Option<[u8; 4]>)> {
    let d = cfg.sk_family.wrapping_sub(cfg.sk_daddr);
    if cfg.sk_daddr != UNRESOLVED && cfg.sk_family != UNRESOLVED && d <= WINDOW - 2 && d % 2 == 0 {
        let w = read::field::<[u64; 3]>(sk, cfg.sk_daddr)?;
        let word = match d / 8 {
            0 => w[0],
            1 => w[1],
            _ => w[2],
        };
        // The family's two bytes at `d % 8` within the word, in the kernel's byte order.
        let shift = if cfg!(target_endian = "little") {
            (d % 8) * 8
        } else {
            48 - (d % 8) * 8
        };
        let family = (word >> shift) as u16;
        return Some((family, Some(w[0].to_ne_bytes()[..4].try_into().ok()?)));
    }
    Some((read::field::<u16>(sk, cfg.sk_family)?, None))
}

/// Reads the socket's peer address into `daddr` (IPv4 in its first four bytes).
#[inline(always)]
fn peer_addr(cfg: &ProbeConfig, sk: u64, family: u16, daddr: &mut [u8; 16]) -> bool {
    if family == AF_INET6 {
        read::bytes(sk, cfg.sk_v6_daddr, daddr)
    } else {
        read::bytes(sk, cfg.sk_daddr, &mut daddr[..4])
    }
}

/// Adds `bytes` to process `tgid`'s TCP totals towards the socket's peer (`peer`: the socket's
/// family, and its IPv4 peer address when the caller read it already), on socket `sk` whose
/// slot `s` another socket or process holds, or is free, or is not to be used.
#[inline(always)]
fn add_bytes(
    cfg: &ProbeConfig,
    (sk, s): (u64, Option<*mut SockSlot>),
    (family, v4): (u16, Option<[u8; 4]>),
    tgid: u32,
    bytes: u64,
    tx: bool,
) -> Option<u32> {
    let mut key_slot = Slot::<TcpPeerKey>::new();
    // SAFETY: all-zero is a valid value of this integer-only struct.
    let key = unsafe { key_slot.zeroed() };
    key.tgid = tgid;
    let known = match v4 {
        Some(a) if family == AF_INET => {
            key.daddr[..4].copy_from_slice(&a);
            true
        }
        _ => peer_addr(cfg, sk, family, &mut key.daddr),
    };
    if known {
        key.family = family;
    }
    add_to(totals((sk, s), key)?, bytes, tx);
    Some(0)
}

/// The totals of `key` on socket `sk`: its slot `s` when free (claimed), otherwise its
/// `TCP_BYTES` entry ([`hashed`]).
#[inline(always)]
fn totals((sk, s): (u64, Option<*mut SockSlot>), key: &TcpPeerKey) -> Option<*mut TcpBytes> {
    if let Some(s) = s {
        // SAFETY: the key's address is 8-aligned (after two 4-byte fields of a struct
        // aligned to 8).
        let d = unsafe {
            let p = key.daddr.as_ptr().cast::<u64>();
            [p.read(), p.add(1).read()]
        };
        if let Some(v) = claim(s, sk, key.tgid, key.family, d) {
            return Some(v);
        }
    }
    hashed(key)
}

/// The totals of `key` in `TCP_BYTES`: one lookup when they exist; otherwise made (the
/// process's name, the key's peer) and looked up again. Another CPU's entry for the same key,
/// made meanwhile, is kept (its counts with it).
#[inline(always)]
pub fn hashed(key: &TcpPeerKey) -> Option<*mut TcpBytes> {
    if let Some(v) = TCP_BYTES.get_ptr_mut(key) {
        return Some(v);
    }
    let mut slot = Slot::<TcpBytes>::new();
    // SAFETY: all-zero is a valid value of this integer-only struct.
    let fresh = unsafe { slot.zeroed() };
    comm_into(&mut fresh.comm);
    // SAFETY: two 16-byte arrays, 4-aligned (both structs' are 8-aligned), apart. (A plain
    // array copy would be a byte-wise memcpy.)
    unsafe {
        copy_words(
            fresh.daddr.as_mut_ptr(),
            key.daddr.as_ptr(),
            key.daddr.len(),
        )
    };
    fresh.family = key.family;
    let _ = TCP_BYTES.insert(key, fresh, NOEXIST);
    TCP_BYTES.get_ptr_mut(key)
}

/// The slot of the socket whose `skc_hash` is `hash` in `SOCK_SLOTS` (the verifier's inlined
/// array lookup).
#[inline(always)]
pub fn slot_of(hash: u32) -> Option<*mut SockSlot> {
    SOCK_SLOTS.get_ptr_mut(sock_slot(hash, SOCK_SLOT_COUNT))
}

/// The totals of slot `s` when it holds socket `sk` for process `tgid`: the per-call path
/// (two compares; of the socket, only the hash that picked the slot was read).
#[inline(always)]
fn held(s: *mut SockSlot, sk: u64, tgid: u32) -> Option<*mut TcpBytes> {
    // SAFETY: a live map value; other CPUs add to its counters and user space frees it, key
    // last, so it is read through volatile reads. A slot freed or claimed again between the
    // two reads fails one compare or the other (the kernel writes `sk` before the key, user
    // space zeroes the key last).
    unsafe {
        let mine = core::ptr::read_volatile(&raw const (*s).sk) == sk
            && sock_slot_tgid(core::ptr::read_volatile(&raw const (*s).key)) == tgid;
        if mine {
            Some(&raw mut (*s).bytes)
        } else {
            None
        }
    }
}

/// Claims slot `s` when it is free for socket `sk` of process `tgid` towards the peer of
/// family `family` at address `d` (its 16 bytes as two native words): identity written before
/// the key, which user space reads first. `None` when another socket or process holds it.
/// (Two CPUs claiming one free slot for two sockets at once may leave it with one's socket and
/// the other's process or peer, holding that first call: bounded, and only for two new
/// sockets of one slot starting together; both go on in `TCP_BYTES`.)
#[inline(always)]
pub fn claim(
    s: *mut SockSlot,
    sk: u64,
    tgid: u32,
    family: u16,
    d: [u64; 2],
) -> Option<*mut TcpBytes> {
    // SAFETY: a live map value, written through volatile writes (see `held`); its peer
    // address is 8-aligned (offset 64 of an 8-aligned value).
    unsafe {
        if core::ptr::read_volatile(&raw const (*s).key) != 0 {
            return None;
        }
        let b = &raw mut (*s).bytes;
        let peer = (&raw mut (*b).daddr).cast::<u64>();
        // A free slot's counters are zero (the array starts so; user space zeroes a slot
        // before freeing it): not written here, so that another CPU claiming it for the same
        // socket at once cannot wipe this one's first add.
        comm_into(&mut (*b).comm);
        core::ptr::write_volatile(peer, d[0]);
        core::ptr::write_volatile(peer.add(1), d[1]);
        core::ptr::write_volatile(&raw mut (*b).family, family);
        core::ptr::write_volatile(&raw mut (*s).sk, sk);
        core::ptr::write_volatile(&raw mut (*s).key, sock_slot_key(tgid, family));
        Some(b)
    }
}

/// Socket `sk` closed: its slot, if it holds it, stops matching it (the kernel reuses a closed
/// socket's memory for new sockets, which must not count as this one), and user space frees
/// it once its last totals are read.
#[inline(always)]
fn closed(cfg: &ProbeConfig, sk: u64) {
    if cfg.sock_slots == 0 || sk == 0 {
        return;
    }
    if let Some(s) = read::field::<u32>(sk, cfg.sk_hash).and_then(slot_of) {
        // SAFETY: a live map value (see `held`).
        unsafe {
            if core::ptr::read_volatile(&raw const (*s).sk) == sk {
                core::ptr::write_volatile(&raw mut (*s).sk, sk | SOCK_CLOSED);
            }
        }
    }
}

/// Adds a call of `bytes` to the totals of slot `s` when it holds socket `sk` for process
/// `tgid` ([`held`]); whether it did.
#[inline(always)]
pub fn add_held(s: Option<*mut SockSlot>, sk: u64, tgid: u32, bytes: u64, tx: bool) -> bool {
    match s.and_then(|s| held(s, sk, tgid)) {
        Some(t) => {
            add_to(t, bytes, tx);
            true
        }
        None => false,
    }
}

/// Adds one call of `bytes` to the totals `v` (a live `TCP_BYTES` or `SOCK_SLOTS` value).
#[inline(always)]
pub fn add_to(v: *mut TcpBytes, bytes: u64, tx: bool) {
    // SAFETY: fields of a live map value; other CPUs add to them too, atomically.
    unsafe {
        if tx {
            add(&raw mut (*v).tx_bytes, bytes);
            add(&raw mut (*v).tx_calls, 1);
        } else {
            add(&raw mut (*v).rx_bytes, bytes);
            add(&raw mut (*v).rx_calls, 1);
        }
    }
}

#[raw_tracepoint(tracepoint = "sock_send_length")]
pub fn tcp_send_bytes(ctx: RawTracePointContext) -> u32 {
    count(&ctx, true).unwrap_or(0)
}

#[raw_tracepoint(tracepoint = "sock_recv_length")]
pub fn tcp_recv_bytes(ctx: RawTracePointContext) -> u32 {
    count(&ctx, false).unwrap_or(0)
}

/// Before 6.3 there is no `sock_send_length`/`sock_recv_length`: the return values of
/// `tcp_sendmsg` / `tcp_recvmsg` (bytes moved, TCP over IPv4 or IPv6 only) stand in for them.
#[inline(always)]
fn count_ret(ctx: &RetProbeContext, tx: bool) -> Option<u32> {
    let cfg = config()?;
    let key = bpf_get_current_pid_tgid();
    // SAFETY: copied out before the entry is removed.
    let sk = unsafe { PENDING_TCP_SK.get(&key) }.copied().unwrap_or(0);
    let _ = PENDING_TCP_SK.remove(&key);
    let tgid = (key >> 32) as u32;
    let ret = regs::ret::<i64>(ctx) as i32;
    if ret <= 0 {
        return None;
    }
    // A socket whose slot this process holds: added to at once (as in `count`).
    let s = sock_slot_of(cfg, sk);
    if add_held(s, sk, tgid, ret as u64, tx) {
        return Some(0);
    }
    if !wanted_task(cfg, tgid) {
        return None;
    }
    let family = read::field::<u16>(sk, cfg.sk_family).unwrap_or(0);
    add_bytes(cfg, (sk, s), (family, None), tgid, ret as u64, tx)
}

#[kretprobe]
pub fn tcp_send_bytes_ret(ctx: RetProbeContext) -> u32 {
    count_ret(&ctx, true).unwrap_or(0)
}

#[kretprobe]
pub fn tcp_recv_bytes_ret(ctx: RetProbeContext) -> u32 {
    count_ret(&ctx, false).unwrap_or(0)
}
