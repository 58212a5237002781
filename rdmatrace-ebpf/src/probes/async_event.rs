//! Asynchronous events reaching user processes through ib_uverbs: QP, CQ and SRQ events
//! (`ib_uverbs_{qp,cq,srq}_event_handler`) and device/port events (`ib_uverbs_event_handler`);
//! and a device going away (ib_core `__ib_unregister_device`), which no handler reports.

use aya_ebpf::{macros::kprobe, programs::ProbeContext};
use rdmatrace_common::{
    config::ProbeConfig,
    event::{async_source, element, AsyncEvent, EventKind},
    limits::UNRESOLVED,
};

use crate::{
    emit::{config, header, output},
    probes::qp::qp_ident,
    read,
    regs::arg,
    zero::Slot,
};

#[inline(always)]
fn emit(cfg: &ProbeConfig, ev_ptr: u64, kind: u32) -> Option<u32> {
    if ev_ptr == 0 {
        return None;
    }
    let mut slot = Slot::<AsyncEvent>::new();
    // SAFETY: all-zero is a valid value of this integer-only struct.
    let ev = unsafe { slot.zeroed() };
    header(&mut ev.header, EventKind::AsyncEvent as u32);
    ev.element = kind;
    ev.event_type = read::field::<u32>(ev_ptr, cfg.ev_event)?;
    let dev = read::field::<u64>(ev_ptr, cfg.ev_device).unwrap_or(0);
    read::bytes(dev, cfg.device_name, &mut ev.qp.dev);
    if kind == element::PORT {
        ev.element_id = read::field::<u32>(ev_ptr, cfg.ev_element).unwrap_or(0);
    } else {
        let obj = read::field::<u64>(ev_ptr, cfg.ev_element).unwrap_or(0);
        if kind == element::QP {
            qp_ident(cfg, obj, &mut ev.qp);
        } else {
            let ty = if kind == element::CQ { 1 } else { 7 };
            let base = cfg.res_base[ty];
            if base != UNRESOLVED && cfg.res_id != UNRESOLVED {
                ev.element_id = read::field::<u32>(obj, base + cfg.res_id).unwrap_or(0);
            }
        }
    }
    output(ev);
    Some(0)
}

#[kprobe]
pub fn async_qp(ctx: ProbeContext) -> u32 {
    config()
        .and_then(|c| emit(c, arg(&ctx, c.async_arg_event), element::QP))
        .unwrap_or(0)
}

#[kprobe]
pub fn async_cq(ctx: ProbeContext) -> u32 {
    config()
        .and_then(|c| emit(c, arg(&ctx, c.async_arg_event), element::CQ))
        .unwrap_or(0)
}

#[kprobe]
pub fn async_srq(ctx: ProbeContext) -> u32 {
    config()
        .and_then(|c| emit(c, arg(&ctx, c.async_arg_event), element::SRQ))
        .unwrap_or(0)
}

#[kprobe]
pub fn async_port(ctx: ProbeContext) -> u32 {
    config()
        .and_then(|c| emit(c, arg(&ctx, c.async_dev_arg_event), element::PORT))
        .unwrap_or(0)
}

/// `__ib_unregister_device(ib_dev)`: every unregistration path (rdma link delete, driver
/// removal) goes through it, before the device's users are disassociated.
#[kprobe]
pub fn dev_unregister(ctx: ProbeContext) -> u32 {
    try_dev_unregister(&ctx).unwrap_or(0)
}

fn try_dev_unregister(ctx: &ProbeContext) -> Option<u32> {
    let cfg = config()?;
    let dev = arg(ctx, cfg.unreg_arg_dev);
    if dev == 0 {
        return None;
    }
    let mut slot = Slot::<AsyncEvent>::new();
    // SAFETY: all-zero is a valid value of this integer-only struct.
    let ev = unsafe { slot.zeroed() };
    header(&mut ev.header, EventKind::AsyncEvent as u32);
    ev.element = element::PORT;
    ev.source = async_source::CORE;
    ev.event_type = async_source::DEVICE_UNREGISTER;
    read::bytes(dev, cfg.device_name, &mut ev.qp.dev);
    output(ev);
    Some(0)
}
