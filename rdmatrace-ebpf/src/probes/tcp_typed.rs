//! tp_btf twins of the socket byte counters (`tcp_send_bytes`, `tcp_recv_bytes` in `tcp.rs`),
//! loaded by user space itself (their loads' offsets are set in the instructions first) and
//! used in their place when the kernel takes them. `sock_send_length(sk, ret, flags)` and
//! `sock_recv_length(sk, ret, flags)` give a typed `struct sock *` whose protocol, family and
//! peer address are loaded directly (placeholders of `rdmatrace_common::patch`), with no
//! `bpf_probe_read_kernel` call per send or receive; the totals are `tcp.rs`'s.

use aya_ebpf::{
    helpers::bpf_get_current_pid_tgid, macros::btf_tracepoint, programs::BtfTracePointContext,
    EbpfContext as _,
};
use rdmatrace_common::{config::TYPED_SOCK, event::TcpPeerKey, patch};

use crate::{
    emit::wanted_task,
    maps::CONFIG,
    probes::tcp::{add_held, add_to, claim, hashed, slot_of, AF_INET, AF_INET6, IPPROTO_TCP},
    typed::load,
    zero::Slot,
};

#[btf_tracepoint(function = "sock_send_length")]
pub fn tcp_send_btf(ctx: BtfTracePointContext) -> u32 {
    count(&ctx, true).unwrap_or(0)
}

#[btf_tracepoint(function = "sock_recv_length")]
pub fn tcp_recv_btf(ctx: BtfTracePointContext) -> u32 {
    count(&ctx, false).unwrap_or(0)
}

/// Every socket send/recv in the caller's context; TCP ones (over IPv4 or IPv6) are summed per
/// process and peer. A socket whose slot this process holds is added to at once, before the
/// config is looked up (of the socket only its hash read, no filter: the slot was claimed past
/// both, and user space writes the config once, before any slot can be claimed); otherwise
/// the config's gate, the filter, the socket's protocol, family and peer, then its slot
/// claimed, or else the hash by a key made on the stack. The config's `ready` is not checked:
/// `typed` is zero until user space writes the config whole.
#[inline(always)]
fn count(ctx: &BtfTracePointContext, tx: bool) -> Option<u32> {
    let args = ctx.as_ptr().cast::<u8>();
    // SAFETY: the context holds the tracepoint's arguments as 8-byte slots (the socket, then
    // the bytes moved or an error); the socket's fields are loads the verifier checks against
    // `struct sock`'s BTF once user space has set their offsets (a fault reads zero).
    let (sk, ret) = unsafe { (load::<u64>(args, 0), load::<u64>(args, 8) as i32) };
    if ret <= 0 || sk == 0 {
        return None;
    }
    let tgid = (bpf_get_current_pid_tgid() >> 32) as u32;
    // Slots are only claimed when the config allows them (below): with slots off, none is
    // ever held.
    // SAFETY: as above.
    let s = slot_of(unsafe { load::<u32>(sk as *const u8, patch::SK_HASH) });
    if add_held(s, sk, tgid, ret as u64, tx) {
        return Some(0);
    }
    let cfg = CONFIG.get(0)?;
    if cfg.typed & TYPED_SOCK == 0 {
        return None;
    }
    let s = s.filter(|_| cfg.sock_slots != 0);
    if !wanted_task(cfg, tgid) {
        return None;
    }
    let p = sk as *const u8;
    // SAFETY: as above.
    let (family, d) = unsafe {
        if load::<u16>(p, patch::SK_PROTOCOL) != IPPROTO_TCP {
            return None;
        }
        let family = load::<u16>(p, patch::SK_FAMILY);
        let d = if family == AF_INET {
            let a = u64::from(load::<u32>(p, patch::SK_DADDR));
            // The address's four bytes first in memory, as in the key.
            [
                if cfg!(target_endian = "little") {
                    a
                } else {
                    a << 32
                },
                0,
            ]
        } else if family == AF_INET6 {
            [
                load::<u64>(p, patch::SK_V6_DADDR),
                load::<u64>(p, patch::SK_V6_DADDR_HI),
            ]
        } else {
            return None;
        };
        (family, d)
    };
    let t = match s.and_then(|s| claim(s, sk, tgid, family, d)) {
        Some(t) => t,
        None => {
            let mut key_slot = Slot::<TcpPeerKey>::new();
            // SAFETY: all-zero is a valid value of this integer-only struct.
            let key = unsafe { key_slot.zeroed() };
            key.tgid = tgid;
            key.family = family;
            // SAFETY: the key's address is 8-aligned in an 8-aligned slot.
            unsafe {
                let p = key.daddr.as_mut_ptr().cast::<u64>();
                p.write_volatile(d[0]);
                p.add(1).write_volatile(d[1]);
            }
            hashed(key)?
        }
    };
    add_to(t, ret as u64, tx);
    Some(0)
}
