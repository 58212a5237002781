//! Refused CQ and SRQ creations: the resource tracker sees only the ones that succeed. A user
//! SRQ is created through `ib_create_srq_user(pd, srq_init_attr, ...)` (ib_core, any driver);
//! a user CQ goes straight from ib_uverbs to the driver's `create_cq(ibcq, attr, ...)` op
//! (`struct ib_device_ops`: the CQ and its init attr are its first two arguments, with
//! `ibcq->device` set), so its probes are per driver (rxe, mlx5). Entries keep the object and
//! the attr; returns emit on error, with what was asked and the device's limits.

use aya_ebpf::{
    helpers::bpf_get_current_pid_tgid,
    macros::{kprobe, kretprobe},
    programs::{ProbeContext, RetProbeContext},
};
use rdmatrace_common::{
    config::ProbeConfig,
    event::{EventKind, QueueCapsEvent, QUEUE_CQ, QUEUE_SRQ},
};

use crate::{
    emit::{config, header, output, wanted},
    maps::PENDING_QUEUE,
    read,
    regs::{self, arg},
    zero::Slot,
};

/// Largest errno the kernel encodes in a pointer (`MAX_ERRNO`).
const MAX_ERRNO: u64 = 4095;

#[kprobe]
pub fn cq_create_enter(ctx: ProbeContext) -> u32 {
    try_enter(&ctx, 0, 1).unwrap_or(0)
}

#[kretprobe]
pub fn cq_create_exit(ctx: RetProbeContext) -> u32 {
    try_exit(&ctx, QUEUE_CQ).unwrap_or(0)
}

#[kprobe]
pub fn srq_create_enter(ctx: ProbeContext) -> u32 {
    match config() {
        Some(cfg) => try_enter(&ctx, cfg.srq_arg_pd, cfg.srq_arg_attr).unwrap_or(0),
        None => 0,
    }
}

#[kretprobe]
pub fn srq_create_exit(ctx: RetProbeContext) -> u32 {
    try_exit(&ctx, QUEUE_SRQ).unwrap_or(0)
}

fn try_enter(ctx: &ProbeContext, obj_arg: u32, attr_arg: u32) -> Option<u32> {
    let cfg = config()?;
    if !wanted(cfg) {
        return None;
    }
    let args = [arg(ctx, obj_arg), arg(ctx, attr_arg)];
    PENDING_QUEUE
        .insert(bpf_get_current_pid_tgid(), args, 0)
        .ok()?;
    Some(0)
}

fn try_exit(ctx: &RetProbeContext, queue: u32) -> Option<u32> {
    let cfg = config()?;
    let key = bpf_get_current_pid_tgid();
    // SAFETY: the value is copied out before the entry is removed.
    let [obj, attr] = *unsafe { PENDING_QUEUE.get(key) }?;
    let _ = PENDING_QUEUE.remove(key);
    let ret: u64 = regs::ret(ctx);
    // The CQ op returns an int (0 or -errno), the SRQ function a pointer or an ERR_PTR.
    let errno = if queue == QUEUE_CQ {
        let r = ret as u32 as i32;
        if r >= 0 {
            return Some(0);
        }
        r
    } else {
        if ret < MAX_ERRNO.wrapping_neg() {
            return Some(0);
        }
        ret as i64 as i32
    };
    emit(cfg, queue, obj, attr, errno);
    Some(0)
}

#[inline(never)]
fn emit(cfg: &ProbeConfig, queue: u32, obj: u64, attr: u64, errno: i32) {
    let mut slot = Slot::<QueueCapsEvent>::new();
    // SAFETY: all-zero is a valid value of this integer-only struct.
    let ev = unsafe { slot.zeroed() };
    header(&mut ev.header, EventKind::QueueCaps as u32);
    ev.ret = errno;
    ev.queue = queue;
    let d = &cfg.dev_attr_queue;
    let dev = if queue == QUEUE_CQ {
        ev.depth = read::field::<u32>(attr, cfg.cq_attr_cqe).unwrap_or(0);
        let dev = read::field::<u64>(obj, cfg.cq_device).unwrap_or(0);
        ev.dev_max_depth = read::field::<u32>(dev, d[0]).unwrap_or(0);
        dev
    } else {
        ev.depth = read::field::<u32>(attr, cfg.srq_attr_max_wr).unwrap_or(0);
        ev.sge = read::field::<u32>(attr, cfg.srq_attr_max_sge).unwrap_or(0);
        let dev = read::field::<u64>(obj, cfg.pd_device).unwrap_or(0);
        ev.dev_max_depth = read::field::<u32>(dev, d[1]).unwrap_or(0);
        ev.dev_max_sge = read::field::<u32>(dev, d[2]).unwrap_or(0);
        dev
    };
    read::bytes(dev, cfg.device_name, &mut ev.dev);
    output(ev);
}
