//! Soft-RoCE (rdma_rxe) internals: the requester's retransmit timer and the RNR NAK timer.
//! Both are handed the `timer_list` embedded in `struct rxe_qp`; the QP is found by
//! container_of with offsets from rdma_rxe's BTF. They fire in softirq context, so the owner
//! is left for user space to fill from the QP's creator.

use aya_ebpf::{macros::kprobe, programs::ProbeContext};
use rdmatrace_common::{
    config::ProbeConfig,
    event::{reason, transport, EventKind, RetransmitEvent},
    limits::UNRESOLVED,
};

use crate::{
    emit::{config, header, output},
    probes::qp::qp_ident,
};

#[inline(always)]
fn emit(cfg: &ProbeConfig, timer: u64, timer_off: u32, why: u32) -> Option<u32> {
    if timer == 0 || timer_off == UNRESOLVED || cfg.rxe_qp_ibqp == UNRESOLVED {
        return None;
    }
    let ibqp = timer
        .wrapping_sub(u64::from(timer_off))
        .wrapping_add(u64::from(cfg.rxe_qp_ibqp));
    // SAFETY: all-zero is a valid value of this integer-only struct.
    let mut ev: RetransmitEvent = unsafe { core::mem::zeroed() };
    header(&mut ev.header, EventKind::Retransmit as u32);
    qp_ident(cfg, ibqp, &mut ev.qp);
    ev.transport = transport::RXE;
    ev.reason = why;
    output(&ev);
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
    let timer: u64 = ctx.arg(0)?;
    let off = if why == reason::RXE_RETRANSMIT_TIMER {
        cfg.rxe_qp_retrans_timer
    } else {
        cfg.rxe_qp_rnr_nak_timer
    };
    emit(cfg, timer, off, why)
}
