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
use rdmatrace_common::{
    config::{ProbeConfig, TYPED_SOCK},
    event::TcpPeerKey,
    patch,
};

use crate::{
    emit::{config, wanted_task},
    probes::tcp::{add_to, totals, AF_INET, AF_INET6, IPPROTO_TCP},
    typed::load,
    zero::Slot,
};

#[btf_tracepoint(function = "sock_send_length")]
pub fn tcp_send_btf(ctx: BtfTracePointContext) -> u32 {
    config().and_then(|c| count(&ctx, c, true)).unwrap_or(0)
}

#[btf_tracepoint(function = "sock_recv_length")]
pub fn tcp_recv_btf(ctx: BtfTracePointContext) -> u32 {
    config().and_then(|c| count(&ctx, c, false)).unwrap_or(0)
}

/// Every socket send/recv in the caller's context; TCP ones (over IPv4 or IPv6) are summed per
/// process and peer.
#[inline(always)]
fn count(ctx: &BtfTracePointContext, cfg: &ProbeConfig, tx: bool) -> Option<u32> {
    if cfg.typed & TYPED_SOCK == 0 {
        return None;
    }
    let tgid = (bpf_get_current_pid_tgid() >> 32) as u32;
    if !wanted_task(cfg, tgid) {
        return None;
    }
    let args = ctx.as_ptr().cast::<u8>();
    let mut slot = Slot::<TcpPeerKey>::new();
    // SAFETY: all-zero is a valid value of this integer-only struct.
    let key = unsafe { slot.zeroed() };
    key.tgid = tgid;
    // SAFETY: the context holds the tracepoint's arguments as 8-byte slots (the socket, then
    // the bytes moved or an error); the socket's fields are loads the verifier checks against
    // `struct sock`'s BTF once user space has set their offsets (a fault reads zero). The key's
    // address field is 8-aligned in an 8-aligned slot.
    let ret = unsafe {
        let sk = load::<u64>(args, 0);
        let ret = load::<u64>(args, 8) as i32;
        if ret <= 0 || sk == 0 {
            return None;
        }
        let sk = sk as *const u8;
        if load::<u16>(sk, patch::SK_PROTOCOL) != IPPROTO_TCP {
            return None;
        }
        let family = load::<u16>(sk, patch::SK_FAMILY);
        let d = key.daddr.as_mut_ptr();
        if family == AF_INET {
            d.cast::<u32>()
                .write_volatile(load::<u32>(sk, patch::SK_DADDR));
        } else if family == AF_INET6 {
            d.cast::<u64>()
                .write_volatile(load::<u64>(sk, patch::SK_V6_DADDR));
            d.add(8)
                .cast::<u64>()
                .write_volatile(load::<u64>(sk, patch::SK_V6_DADDR_HI));
        } else {
            return None;
        }
        key.family = family;
        ret
    };
    add_to(totals(key)?, ret as u64, tx);
    Some(0)
}
