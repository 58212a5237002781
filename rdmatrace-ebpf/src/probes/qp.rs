//! QP lifecycle as issued through ib_uverbs into ib_core: `ib_create_qp_user`,
//! `ib_modify_qp_with_udata`, `ib_destroy_qp_user` (exported, driver independent). Entry probes
//! read the arguments; return probes add the result and emit.

use aya_ebpf::{
    helpers::bpf_get_current_pid_tgid,
    macros::{kprobe, kretprobe},
    programs::{ProbeContext, RetProbeContext},
};
use rdmatrace_common::{
    config::ProbeConfig,
    event::{
        attr_mask, EventKind, QpCapsEvent, QpCreateEvent, QpDestroyEvent, QpIdent, QpModifyEvent,
        AV_MIN_RNR_TIMER, AV_SGID_INDEX, MIN_RNR_TIMER_SHIFT, STATE_UNKNOWN,
    },
};

use crate::{
    emit::{config, header, output, wanted},
    maps::{PENDING_CREATE, PENDING_DESTROY, PENDING_MODIFY},
    read,
    regs::{self, arg},
    zero::Slot,
};

/// Largest errno the kernel encodes in a pointer (`MAX_ERRNO`).
const MAX_ERRNO: u64 = 4095;

/// Fills device name, QPN and type from a `struct ib_qp *`.
#[inline(always)]
pub fn qp_ident(cfg: &ProbeConfig, qp: u64, out: &mut QpIdent) {
    out.qpn = read::field::<u32>(qp, cfg.qp_qp_num).unwrap_or(0);
    out.qp_type = read::field::<u32>(qp, cfg.qp_qp_type).unwrap_or(0);
    let dev = read::field::<u64>(qp, cfg.qp_device).unwrap_or(0);
    read::bytes(dev, cfg.device_name, &mut out.dev);
}

#[kprobe]
pub fn qp_create_enter(ctx: ProbeContext) -> u32 {
    try_qp_create_enter(&ctx).unwrap_or(0)
}

fn try_qp_create_enter(ctx: &ProbeContext) -> Option<u32> {
    let cfg = config()?;
    if !wanted(cfg) {
        return None;
    }
    let args = [arg(ctx, cfg.create_arg_dev), arg(ctx, cfg.create_arg_attr)];
    PENDING_CREATE
        .insert(bpf_get_current_pid_tgid(), args, 0)
        .ok()?;
    Some(0)
}

#[kretprobe]
pub fn qp_create_exit(ctx: RetProbeContext) -> u32 {
    try_qp_create_exit(&ctx).unwrap_or(0)
}

fn try_qp_create_exit(ctx: &RetProbeContext) -> Option<u32> {
    let cfg = config()?;
    let key = bpf_get_current_pid_tgid();
    // SAFETY: the value is copied out before the entry is removed.
    let [dev, init_attr] = *unsafe { PENDING_CREATE.get(key) }?;
    let _ = PENDING_CREATE.remove(key);

    let mut slot = Slot::<QpCreateEvent>::new();
    // SAFETY: all-zero is a valid value of this integer-only struct.
    let ev = unsafe { slot.zeroed() };
    header(&mut ev.header, EventKind::QpCreate as u32);
    let ret: u64 = regs::ret(ctx);
    if ret >= MAX_ERRNO.wrapping_neg() {
        ev.ret = ret as i64 as i32;
        ev.qp.qp_type = read::field::<u32>(init_attr, cfg.init_attr_qp_type).unwrap_or(0);
        read::bytes(dev, cfg.device_name, &mut ev.qp.dev);
        output(ev);
        refused_caps(cfg, dev, init_attr, ev.ret, ev.qp.qp_type);
    } else {
        qp_ident(cfg, ret, &mut ev.qp);
        output(ev);
    }
    Some(0)
}

/// After a refused create: what was asked against what the device allows.
#[inline(never)]
fn refused_caps(cfg: &ProbeConfig, dev: u64, init_attr: u64, ret: i32, qp_type: u32) {
    let mut slot = Slot::<QpCapsEvent>::new();
    // SAFETY: all-zero is a valid value of this integer-only struct.
    let ev = unsafe { slot.zeroed() };
    header(&mut ev.header, EventKind::QpCaps as u32);
    read::bytes(dev, cfg.device_name, &mut ev.dev);
    ev.ret = ret;
    ev.qp_type = qp_type;
    let c = &cfg.init_cap;
    ev.max_send_wr = read::field::<u32>(init_attr, c[0]).unwrap_or(0);
    ev.max_recv_wr = read::field::<u32>(init_attr, c[1]).unwrap_or(0);
    ev.max_send_sge = read::field::<u32>(init_attr, c[2]).unwrap_or(0);
    ev.max_recv_sge = read::field::<u32>(init_attr, c[3]).unwrap_or(0);
    ev.max_inline_data = read::field::<u32>(init_attr, c[4]).unwrap_or(0);
    let d = &cfg.dev_attr_caps;
    ev.dev_max_qp_wr = read::field::<u32>(dev, d[0]).unwrap_or(0);
    ev.dev_max_send_sge = read::field::<u32>(dev, d[1]).unwrap_or(0);
    ev.dev_max_recv_sge = read::field::<u32>(dev, d[2]).unwrap_or(0);
    output(ev);
}

#[kprobe]
pub fn qp_modify_enter(ctx: ProbeContext) -> u32 {
    try_qp_modify_enter(&ctx).unwrap_or(0)
}

fn try_qp_modify_enter(ctx: &ProbeContext) -> Option<u32> {
    let cfg = config()?;
    if !wanted(cfg) {
        return None;
    }
    let qp = arg(ctx, cfg.modify_arg_qp);
    let attr = arg(ctx, cfg.modify_arg_attr);
    let mask = arg(ctx, cfg.modify_arg_mask) as u32;

    let mut slot = Slot::<QpModifyEvent>::new();
    // SAFETY: all-zero is a valid value of this integer-only struct.
    let ev = unsafe { slot.zeroed() };
    header(&mut ev.header, EventKind::QpModify as u32);
    qp_ident(cfg, qp, &mut ev.qp);
    ev.attr_mask = mask;
    ev.cur_state = STATE_UNKNOWN;
    ev.new_state = STATE_UNKNOWN;
    if mask & attr_mask::STATE != 0 {
        ev.new_state = read::field(attr, cfg.attr_qp_state).unwrap_or(STATE_UNKNOWN);
    }
    if mask & attr_mask::CUR_STATE != 0 {
        ev.cur_state = read::field(attr, cfg.attr_cur_qp_state).unwrap_or(STATE_UNKNOWN);
    }
    if mask & attr_mask::PATH_MTU != 0 {
        ev.path_mtu = read::field(attr, cfg.attr_path_mtu).unwrap_or(0);
    }
    if mask & attr_mask::DEST_QPN != 0 {
        ev.dest_qpn = read::field(attr, cfg.attr_dest_qp_num).unwrap_or(0);
    }
    if mask & attr_mask::SQ_PSN != 0 {
        ev.sq_psn = read::field(attr, cfg.attr_sq_psn).unwrap_or(0);
    }
    if mask & attr_mask::RQ_PSN != 0 {
        ev.rq_psn = read::field(attr, cfg.attr_rq_psn).unwrap_or(0);
    }
    if mask & attr_mask::TIMEOUT != 0 {
        ev.timeout = read::field(attr, cfg.attr_timeout).unwrap_or(0);
    }
    if mask & attr_mask::RETRY_CNT != 0 {
        ev.retry_cnt = read::field(attr, cfg.attr_retry_cnt).unwrap_or(0);
    }
    if mask & attr_mask::RNR_RETRY != 0 {
        ev.rnr_retry = read::field(attr, cfg.attr_rnr_retry).unwrap_or(0);
    }
    if mask & attr_mask::MIN_RNR_TIMER != 0 {
        if let Some(t) = read::field::<u8>(attr, cfg.attr_min_rnr_timer) {
            ev.av_flags |= AV_MIN_RNR_TIMER | ((t & 0x1f) << MIN_RNR_TIMER_SHIFT);
        }
    }
    if mask & attr_mask::AV != 0 {
        read::bytes(attr, cfg.attr_dgid, &mut ev.dgid);
        if let Some(i) = read::field::<u8>(attr, cfg.attr_sgid_index) {
            ev.sgid_index = u32::from(i);
            ev.av_flags |= AV_SGID_INDEX;
        }
    }
    PENDING_MODIFY
        .insert(bpf_get_current_pid_tgid(), ev, 0)
        .ok()?;
    Some(0)
}

#[kretprobe]
pub fn qp_modify_exit(ctx: RetProbeContext) -> u32 {
    try_qp_modify_exit(&ctx).unwrap_or(0)
}

fn try_qp_modify_exit(ctx: &RetProbeContext) -> Option<u32> {
    let key = bpf_get_current_pid_tgid();
    let ev = PENDING_MODIFY.get_ptr_mut(key)?;
    // SAFETY: a live map value of this task's key; only this task touches it between entry and
    // return, and it is removed right after use.
    unsafe {
        (*ev).ret = regs::ret::<i64>(ctx) as i32;
        output(&*ev);
    }
    let _ = PENDING_MODIFY.remove(key);
    Some(0)
}

#[kprobe]
pub fn qp_destroy_enter(ctx: ProbeContext) -> u32 {
    try_qp_destroy_enter(&ctx).unwrap_or(0)
}

fn try_qp_destroy_enter(ctx: &ProbeContext) -> Option<u32> {
    let cfg = config()?;
    // Whoever destroys it: a QP's traffic slot is not the filter's business.
    crate::probes::rxe::release_slot(cfg, arg(ctx, cfg.destroy_arg_qp));
    if !wanted(cfg) {
        return None;
    }
    let mut slot = Slot::<QpDestroyEvent>::new();
    // SAFETY: all-zero is a valid value of this integer-only struct.
    let ev = unsafe { slot.zeroed() };
    header(&mut ev.header, EventKind::QpDestroy as u32);
    qp_ident(cfg, arg(ctx, cfg.destroy_arg_qp), &mut ev.qp);
    PENDING_DESTROY
        .insert(bpf_get_current_pid_tgid(), ev, 0)
        .ok()?;
    Some(0)
}

#[kretprobe]
pub fn qp_destroy_exit(ctx: RetProbeContext) -> u32 {
    try_qp_destroy_exit(&ctx).unwrap_or(0)
}

fn try_qp_destroy_exit(ctx: &RetProbeContext) -> Option<u32> {
    let key = bpf_get_current_pid_tgid();
    let ev = PENDING_DESTROY.get_ptr_mut(key)?;
    // SAFETY: as in `try_qp_modify_exit`.
    unsafe {
        (*ev).ret = regs::ret::<i64>(ctx) as i32;
        output(&*ev);
    }
    let _ = PENDING_DESTROY.remove(key);
    Some(0)
}
