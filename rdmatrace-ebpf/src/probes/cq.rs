//! Completions. `ib_uverbs_comp_handler(cq, ctx)`: a CQ's completion channel fired (the process
//! armed it with `ibv_req_notify_cq`); counted per CQ in `CQ_NOTIFY`, not emitted one by one.
//! `rxe_cq_post(cq, cqe, solicited)`: Soft-RoCE posts a completion; only error completions are
//! emitted, with their `ib_wc_status`.

use aya_ebpf::{macros::kprobe, programs::ProbeContext};
use rdmatrace_common::{
    config::{ProbeConfig, TYPED_RXE_CQ_POST},
    event::{CqNotify, EventKind, WcErrorEvent},
    limits::UNRESOLVED,
};

use crate::{
    emit::{config, header, output, wanted_pid},
    maps::{add, CQ_NOTIFY, NOEXIST},
    probes::res::res_owner,
    read,
    regs::arg,
    zero::Slot,
};

/// `enum rdma_restrack_type` of CQs.
const RES_CQ: usize = 1;

/// The `rdma_restrack_entry` of a `struct ib_cq *`, or 0.
#[inline(always)]
fn cq_res(cfg: &ProbeConfig, cq: u64) -> u64 {
    let base = cfg.res_base[RES_CQ];
    if cq == 0 || base == UNRESOLVED {
        return 0;
    }
    cq + u64::from(base)
}

#[kprobe]
pub fn cq_comp(ctx: ProbeContext) -> u32 {
    try_cq_comp(&ctx).unwrap_or(0)
}

fn try_cq_comp(ctx: &ProbeContext) -> Option<u32> {
    let cfg = config()?;
    let cq = arg(ctx, cfg.comp_arg_cq);
    let res = cq_res(cfg, cq);
    if res == 0 {
        return None;
    }
    let cqn = read::field::<u32>(res, cfg.res_id).unwrap_or(0);
    // A new CQ, or a new CQ at a freed CQ's address: start from zero.
    let known = CQ_NOTIFY.get_ptr(cq);
    // SAFETY: only the cqn is read, to compare.
    let fresh = known.is_none_or(|n| unsafe { (*n).cqn } != cqn);
    if fresh {
        let mut slot = Slot::<CqNotify>::new();
        // SAFETY: all-zero is a valid value of this integer-only struct.
        let n = unsafe { slot.zeroed() };
        n.owner_pid = res_owner(cfg, res, &mut n.owner_comm);
        if !wanted_pid(cfg, n.owner_pid) {
            return None;
        }
        n.cqn = cqn;
        let dev = read::field::<u64>(cq, cfg.res_device[RES_CQ]).unwrap_or(0);
        read::bytes(dev, cfg.device_name, &mut n.dev);
        // A freed CQ's entry is replaced; a new CQ's is made unless another CPU just did (two
        // CPUs replacing a stale entry at once may lose a first notification of the new CQ).
        let flags = if known.is_some() { 0 } else { NOEXIST };
        let _ = CQ_NOTIFY.insert(cq, n, flags);
    }
    let n = CQ_NOTIFY.get_ptr_mut(cq)?;
    // SAFETY: a live map value; other CPUs add to its count too, atomically.
    unsafe {
        if !wanted_pid(cfg, (*n).owner_pid) {
            return None;
        }
        add(&raw mut (*n).count, 1);
    }
    Some(0)
}

#[kprobe]
pub fn rxe_cq_post(ctx: ProbeContext) -> u32 {
    try_rxe_cq_post(&ctx).unwrap_or(0)
}

fn try_rxe_cq_post(ctx: &ProbeContext) -> Option<u32> {
    let cfg = config()?;
    // Checked by the fentry program instead (and this kprobe detached).
    if cfg.typed & TYPED_RXE_CQ_POST != 0 {
        return None;
    }
    let rcq = arg(ctx, cfg.cq_post_arg_cq);
    let cqe = arg(ctx, cfg.cq_post_arg_cqe);
    // The common case, success, costs one read: the status sits at the same offset in both
    // completion layouts (as BTF says on every kernel seen so far), so it is read before
    // asking which layout this CQ uses.
    let same_place = cfg.uwc_status == cfg.wc_status;
    if same_place && read::field::<u32>(cqe, cfg.wc_status)? == 0 {
        return None;
    }
    wc_error(cfg, rcq, cqe)
}

/// Emits the completion `cqe` posted to the rxe CQ `rcq` when its status is an error (both
/// plain numbers, read with `bpf_probe_read_kernel`): shared by the kprobe and the fentry
/// program (`rxe_fentry.rs`), which check for success first, each its own way.
#[inline(always)]
pub fn wc_error(cfg: &ProbeConfig, rcq: u64, cqe: u64) -> Option<u32> {
    if rcq == 0 || cqe == 0 || cfg.rxe_cq_ibcq == UNRESOLVED {
        return None;
    }
    let user = read::field::<u8>(rcq, cfg.rxe_cq_is_user).unwrap_or(0) != 0;
    let (status_off, opcode_off, vendor_off) = if user {
        (cfg.uwc_status, cfg.uwc_opcode, cfg.uwc_vendor_err)
    } else {
        (cfg.wc_status, cfg.wc_opcode, cfg.wc_vendor_err)
    };
    let status = read::field::<u32>(cqe, status_off)?;
    if status == 0 {
        return None;
    }
    let cq = rcq + u64::from(cfg.rxe_cq_ibcq);
    let mut slot = Slot::<WcErrorEvent>::new();
    // SAFETY: all-zero is a valid value of this integer-only struct.
    let ev = unsafe { slot.zeroed() };
    let res = cq_res(cfg, cq);
    ev.owner_pid = res_owner(cfg, res, &mut ev.owner_comm);
    if !wanted_pid(cfg, ev.owner_pid) {
        return None;
    }
    header(&mut ev.header, EventKind::WcError as u32);
    ev.status = status;
    ev.opcode = read::field::<u32>(cqe, opcode_off).unwrap_or(0);
    ev.vendor_err = read::field::<u32>(cqe, vendor_off).unwrap_or(0);
    ev.cqn = read::field::<u32>(res, cfg.res_id).unwrap_or(0);
    ev.qp.qpn = if user {
        read::field::<u32>(cqe, cfg.uwc_qp_num).unwrap_or(0)
    } else {
        let qp = read::field::<u64>(cqe, cfg.wc_qp).unwrap_or(0);
        read::field::<u32>(qp, cfg.qp_qp_num).unwrap_or(0)
    };
    let dev = read::field::<u64>(cq, cfg.res_device[RES_CQ]).unwrap_or(0);
    read::bytes(dev, cfg.device_name, &mut ev.qp.dev);
    output(ev);
    Some(0)
}
