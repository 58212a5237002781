//! Soft-RoCE (rdma_rxe) internals: the requester's retransmit timer and the RNR NAK timer.
//! Both are handed the `timer_list` embedded in `struct rxe_qp`; the QP is found by
//! container_of with offsets from rdma_rxe's BTF. They fire in softirq context, so the owner
//! is left for user space to fill from the QP's creator.

use aya_ebpf::{macros::kprobe, programs::ProbeContext};
use rdmatrace_common::{
    config::{ProbeConfig, TYPED_RXE_PACKETS},
    event::{qp_slot, reason, transport, EventKind, QpTraffic, RetransmitEvent, SLOT_FREED},
    limits::{QP_SLOTS as QP_SLOT_COUNT, UNRESOLVED},
};

use crate::{
    emit::{config, header, output},
    maps::{add, NOEXIST, QP_SLOTS, QP_TRAFFIC},
    probes::{qp::qp_ident, res::remember_mr_access},
    read,
    regs::{self, arg},
    zero::Slot,
};

#[inline(always)]
fn emit(cfg: &ProbeConfig, timer: u64, timer_off: u32, why: u32) -> Option<u32> {
    if timer == 0 || timer_off == UNRESOLVED || cfg.rxe_qp_ibqp == UNRESOLVED {
        return None;
    }
    let ibqp = timer
        .wrapping_sub(u64::from(timer_off))
        .wrapping_add(u64::from(cfg.rxe_qp_ibqp));
    let mut slot = Slot::<RetransmitEvent>::new();
    // SAFETY: all-zero is a valid value of this integer-only struct.
    let ev = unsafe { slot.zeroed() };
    header(&mut ev.header, EventKind::Retransmit as u32);
    qp_ident(cfg, ibqp, &mut ev.qp);
    ev.transport = transport::RXE;
    ev.reason = why;
    output(ev);
    Some(0)
}

#[kprobe]
pub fn rxe_retransmit_timer(ctx: ProbeContext) -> u32 {
    try_rxe_timer(&ctx, reason::RXE_RETRANSMIT_TIMER).unwrap_or(0)
}

#[kprobe]
pub fn rxe_rnr_nak_timer(ctx: ProbeContext) -> u32 {
    try_rxe_timer(&ctx, reason::RXE_RNR_NAK_TIMER).unwrap_or(0)
}

fn try_rxe_timer(ctx: &ProbeContext, why: u32) -> Option<u32> {
    let cfg = config()?;
    let timer = regs::arg_at(ctx, 0)?;
    let off = if why == reason::RXE_RETRANSMIT_TIMER {
        cfg.rxe_qp_retrans_timer
    } else {
        cfg.rxe_qp_rnr_nak_timer
    };
    emit(cfg, timer, off, why)
}

/// `rxe_xmit_packet(qp, pkt, skb)`: every packet a QP sends (first sends and retransmits),
/// summed per QP in `QP_TRAFFIC`.
#[kprobe]
pub fn rxe_xmit(ctx: ProbeContext) -> u32 {
    config()
        .and_then(|c| count(c, arg(&ctx, c.xmit_arg_qp), arg(&ctx, c.xmit_arg_skb), true))
        .unwrap_or(0)
}

/// `rxe_resp_queue_pkt(qp, skb)` (requests for our responder) and `rxe_comp_queue_pkt(qp, skb)`
/// (acks and read responses for our requester): every packet a QP receives, after the QP was
/// looked up from the packet's BTH.
#[kprobe]
pub fn rxe_recv(ctx: ProbeContext) -> u32 {
    config()
        .and_then(|c| count(c, arg(&ctx, c.rcv_arg_qp), arg(&ctx, c.rcv_arg_skb), false))
        .unwrap_or(0)
}

/// `rxe_reg_user_mr(pd, start, length, iova, access, ...)`: the MR's access flags.
#[kprobe]
pub fn rxe_mr_access(ctx: ProbeContext) -> u32 {
    if let Some(cfg) = config() {
        remember_mr_access(arg(&ctx, cfg.rxe_mr_arg_access) as u32);
    }
    0
}

#[inline(always)]
fn count(cfg: &ProbeConfig, qp: u64, skb: u64, tx: bool) -> Option<u32> {
    // Counted by the fentry programs instead (and these kprobes detached).
    if qp == 0 || cfg.rxe_qp_ibqp == UNRESOLVED || cfg.typed & TYPED_RXE_PACKETS != 0 {
        return None;
    }
    let len = u64::from(read::field::<u32>(skb, cfg.skb_len).unwrap_or(0));
    add_traffic(cfg, qp, len, tx)
}

/// Adds one packet of `len` bytes of the QP at `qp` (`struct rxe_qp *`, a plain number) to
/// its totals: in its slot when it has or can claim one, else in the hash.
#[inline(always)]
pub fn add_traffic(cfg: &ProbeConfig, qp: u64, len: u64, tx: bool) -> Option<u32> {
    let slotted = if cfg.qp_slots != 0 {
        slot(cfg, qp)
    } else {
        None
    };
    let t = match slotted {
        Some(t) => t,
        None => hashed(cfg, qp)?,
    };
    // SAFETY: fields of a live map value; other CPUs add to them too, atomically.
    unsafe {
        if tx {
            add(&raw mut (*t).tx_packets, 1);
            add(&raw mut (*t).tx_bytes, len);
        } else {
            add(&raw mut (*t).rx_packets, 1);
            add(&raw mut (*t).rx_bytes, len);
        }
    }
    Some(0)
}

/// The QP's totals in `QP_SLOTS`: its own slot, or the free slot it hashes to, claimed now
/// (identity written before the key, which user space reads first); `None` when another QP
/// holds that slot. Per packet: the verifier's inlined array lookup and one compare.
/// (Two CPUs claiming one free slot for two new QPs at once may count the first packet of
/// one in the other's slot: bounded, and only for two QPs of one slot starting together.)
#[inline(always)]
fn slot(cfg: &ProbeConfig, qp: u64) -> Option<*mut QpTraffic> {
    let s = QP_SLOTS.get_ptr_mut(qp_slot(qp, QP_SLOT_COUNT))?;
    // SAFETY: a live map value; other CPUs add to its counters and user space frees it, key
    // last, so every access goes through volatile reads and writes.
    unsafe {
        let key = core::ptr::read_volatile(&raw const (*s).key);
        let t = &raw mut (*s).traffic;
        if key == qp {
            return Some(t);
        }
        if key != 0 {
            return None;
        }
        // A free slot's counters are zero (the array starts so; user space zeroes a slot
        // before freeing it): not written here, so that another CPU claiming it for the same
        // QP at once cannot wipe this one's first add.
        qp_ident(cfg, qp + u64::from(cfg.rxe_qp_ibqp), &mut (*t).qp);
        core::ptr::write_volatile(&raw mut (*s).key, qp);
        Some(t)
    }
}

/// A QP is being destroyed (`ib_destroy_qp_user(ibqp)`, any driver): when it holds a slot,
/// the slot is marked for user space to read its last totals and free it. A QP of another
/// driver holds none (only the rxe programs claim slots).
#[inline(always)]
pub fn release_slot(cfg: &ProbeConfig, ibqp: u64) {
    if cfg.qp_slots == 0 || cfg.rxe_qp_ibqp == UNRESOLVED || ibqp == 0 {
        return;
    }
    let qp = ibqp.wrapping_sub(u64::from(cfg.rxe_qp_ibqp));
    if let Some(s) = QP_SLOTS.get_ptr_mut(qp_slot(qp, QP_SLOT_COUNT)) {
        // SAFETY: a live map value, accessed as in `slot`.
        unsafe {
            if core::ptr::read_volatile(&raw const (*s).key) == qp {
                core::ptr::write_volatile(&raw mut (*s).key, qp | SLOT_FREED);
            }
        }
    }
}

/// The QP's totals in the `QP_TRAFFIC` hash: a new QP, or a new QP at a freed QP's address,
/// starts from zero.
#[inline(always)]
fn hashed(cfg: &ProbeConfig, qp: u64) -> Option<*mut QpTraffic> {
    let ibqp = qp + u64::from(cfg.rxe_qp_ibqp);
    let qpn = read::field::<u32>(ibqp, cfg.qp_qp_num).unwrap_or(0);
    // SAFETY: only the qpn is read, to compare.
    match QP_TRAFFIC.get_ptr_mut(qp) {
        Some(t) if unsafe { (*t).qp.qpn } == qpn => Some(t),
        found => {
            let mut slot = Slot::<QpTraffic>::new();
            // SAFETY: all-zero is a valid value of this integer-only struct.
            let t = unsafe { slot.zeroed() };
            qp_ident(cfg, ibqp, &mut t.qp);
            // A freed QP's entry is replaced; a new QP's is made unless another CPU just did.
            // (Two CPUs replacing the same stale entry at once may lose the first packets of the
            // new QP: bounded, and only when a QP reuses a freed one's address.)
            let flags = if found.is_some() { 0 } else { NOEXIST };
            let _ = QP_TRAFFIC.insert(qp, t, flags);
            QP_TRAFFIC.get_ptr_mut(qp)
        }
    }
}
