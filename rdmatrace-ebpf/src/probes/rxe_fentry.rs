//! fentry twins of the rxe per-packet kprobes (`rxe_xmit`, `rxe_recv` in `rxe.rs`, and
//! `rxe_cq_post` in `cq.rs`), loaded by
//! user space itself (aya 0.14 cannot attach a tracing program to a module's function) and
//! used in their place when the kernel takes them. A tracing program's arguments are typed
//! pointers whose fields it loads directly, with no `bpf_probe_read_kernel` call per packet:
//! the argument slot and field offset of the packet length's load are placeholders
//! (`rdmatrace_common::patch`) that user space sets from BTF before loading. The QP's address
//! as a plain number, for its slot (the verifier allows no arithmetic on a typed pointer),
//! comes from `bpf_get_func_arg` (inlined by the verifier), so the rest is `add_traffic`,
//! shared with the kprobes. A completion's status is one direct load too; only an error
//! completion goes on to `wc_error` (shared with the kprobe, reading with helpers).

use aya_ebpf::{
    helpers::generated::bpf_get_func_arg, macros::fentry, programs::FEntryContext, EbpfContext as _,
};
use rdmatrace_common::{
    config::{ProbeConfig, TYPED_RXE_CQ_POST, TYPED_RXE_PACKETS},
    patch,
};

use crate::{
    emit::config,
    maps::CONFIG,
    probes::{cq::wc_error, rxe::add_traffic},
    typed::arg_field,
};

/// `rxe_xmit_packet(qp, pkt, skb)`: every packet a QP sends.
#[fentry(function = "rxe_xmit_packet")]
pub fn rxe_xmit_f(ctx: FEntryContext) -> u32 {
    CONFIG
        .get(0)
        .and_then(|c| count(&ctx, c, c.xmit_arg_qp, true))
        .unwrap_or(0)
}

/// `rxe_resp_queue_pkt(qp, skb)` and `rxe_comp_queue_pkt(qp, skb)` (the same program loaded
/// for each): every packet a QP receives.
#[fentry(function = "rxe_resp_queue_pkt")]
pub fn rxe_recv_f(ctx: FEntryContext) -> u32 {
    CONFIG
        .get(0)
        .and_then(|c| count(&ctx, c, c.rcv_arg_qp, false))
        .unwrap_or(0)
}

/// The config's `ready` is not checked: `typed` is zero until user space writes the config
/// whole.
#[inline(always)]
fn count(ctx: &FEntryContext, cfg: &ProbeConfig, qp_arg: u32, tx: bool) -> Option<u32> {
    if cfg.typed & TYPED_RXE_PACKETS == 0 {
        return None;
    }
    let args = ctx.as_ptr().cast::<u8>();
    // SAFETY: the loads are checked by the verifier against the function's BTF once user space
    // has set their offsets (the argument's slot in the context, then a field of the typed
    // pointer); a fault on a bad pointer reads zero.
    let len = unsafe { arg_field::<u32>(args, patch::ARG_SKB, patch::SKB_LEN) }?;
    let mut qp: u64 = 0;
    // SAFETY: the helper writes one u64 through the pointer (argument `qp_arg` of the traced
    // function, or nothing when there is no such argument).
    if unsafe { bpf_get_func_arg(ctx.as_ptr(), qp_arg, &mut qp) } != 0 || qp == 0 {
        return None;
    }
    add_traffic(cfg, qp, u64::from(len), tx)
}

/// `rxe_cq_post(cq, cqe, solicited)`: every completion rxe posts; the status of a successful
/// one (most of them) is all that is read.
#[fentry(function = "rxe_cq_post")]
pub fn rxe_cq_post_f(ctx: FEntryContext) -> u32 {
    cq_post(&ctx).unwrap_or(0)
}

/// A successful completion returns before the config is even looked up (the loads' offsets
/// are in the instructions).
#[inline(always)]
fn cq_post(ctx: &FEntryContext) -> Option<u32> {
    let args = ctx.as_ptr().cast::<u8>();
    // SAFETY: as in `count`: the argument's slot, then the status field of the typed
    // completion (user space loads this program only when both layouts keep it at one offset).
    let status = unsafe { arg_field::<u32>(args, patch::ARG_CQE, patch::CQE_STATUS) }?;
    if status == 0 {
        return None;
    }
    let cfg = config()?;
    if cfg.typed & TYPED_RXE_CQ_POST == 0 {
        return None;
    }
    let (mut cq, mut cqe) = (0u64, 0u64);
    // SAFETY: as in `count`.
    let found = unsafe {
        bpf_get_func_arg(ctx.as_ptr(), cfg.cq_post_arg_cq, &mut cq) == 0
            && bpf_get_func_arg(ctx.as_ptr(), cfg.cq_post_arg_cqe, &mut cqe) == 0
    };
    if !found {
        return None;
    }
    wc_error(cfg, cq, cqe)
}
