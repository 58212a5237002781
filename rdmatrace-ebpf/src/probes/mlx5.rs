//! mlx5_ib (ConnectX): the driver's view of the control path. QP lifecycle already comes
//! driver-independently from ib_core; here: hardware QP events as the driver receives them
//! (`mlx5_ib_qp_event`, kernel-owned QPs included) and MR access flags
//! (`mlx5_ib_reg_user_mr`). The data path never enters the kernel and is not probed.

use aya_ebpf::{macros::kprobe, programs::ProbeContext};
use rdmatrace_common::{
    config::ProbeConfig,
    event::{async_source, element, AsyncEvent, EventKind},
    limits::UNRESOLVED,
};

use crate::{
    emit::{config, header, output},
    probes::{qp::qp_ident, res::remember_mr_access},
    regs::arg,
    zero::Slot,
};

#[kprobe]
pub fn mlx5_qp_event(ctx: ProbeContext) -> u32 {
    try_mlx5_qp_event(&ctx).unwrap_or(0)
}

fn try_mlx5_qp_event(ctx: &ProbeContext) -> Option<u32> {
    let cfg: &ProbeConfig = config()?;
    let mqp = arg(ctx, cfg.mlx5_event_arg_qp);
    if mqp == 0 || cfg.mlx5_qp_mqp == UNRESOLVED || cfg.mlx5_qp_ibqp == UNRESOLVED {
        return None;
    }
    let ibqp = mqp
        .wrapping_sub(u64::from(cfg.mlx5_qp_mqp))
        .wrapping_add(u64::from(cfg.mlx5_qp_ibqp));
    let mut slot = Slot::<AsyncEvent>::new();
    // SAFETY: all-zero is a valid value of this integer-only struct.
    let ev = unsafe { slot.zeroed() };
    header(&mut ev.header, EventKind::AsyncEvent as u32);
    ev.element = element::QP;
    ev.source = async_source::MLX5;
    ev.event_type = arg(ctx, cfg.mlx5_event_arg_type) as u32;
    qp_ident(cfg, ibqp, &mut ev.qp);
    output(ev);
    Some(0)
}

#[kprobe]
pub fn mlx5_mr_access(ctx: ProbeContext) -> u32 {
    if let Some(cfg) = config() {
        remember_mr_access(arg(&ctx, cfg.mlx5_mr_arg_access) as u32);
    }
    0
}
