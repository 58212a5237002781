//! RDMA CM events delivered to user processes (`ucma_event_handler(cm_id, event)` in rdma_ucm):
//! event name and status, the QP, source and destination addresses, and the owning process
//! from the cm_id's resource-tracker entry (the handler runs in CM work queues).

use aya_ebpf::{macros::kprobe, programs::ProbeContext};
use rdmatrace_common::{
    event::{CmEvent, EventKind},
    limits::UNRESOLVED,
};

use crate::{
    emit::{config, header, output, wanted_pid},
    probes::{qp::qp_ident, res::res_owner},
    read,
    regs::arg,
    zero::Slot,
};

const AF_INET: u16 = 2;
const AF_INET6: u16 = 10;

/// Family, port (host order) and address of a `sockaddr_storage` (uapi layout).
#[inline(always)]
fn sockaddr(base: u64, off: u32, addr: &mut [u8; 16]) -> (u16, u16) {
    if off == UNRESOLVED {
        return (0, 0);
    }
    let family = read::field::<u16>(base, off).unwrap_or(0);
    let port = u16::from_be(read::field::<u16>(base, off + 2).unwrap_or(0));
    if family == AF_INET {
        read::bytes(base, off + 4, &mut addr[..4]);
    } else if family == AF_INET6 {
        read::bytes(base, off + 8, addr);
    }
    (family, port)
}

#[kprobe]
pub fn cm_event(ctx: ProbeContext) -> u32 {
    try_cm_event(&ctx).unwrap_or(0)
}

fn try_cm_event(ctx: &ProbeContext) -> Option<u32> {
    let cfg = config()?;
    let id = arg(ctx, cfg.ucma_arg_id);
    let event = arg(ctx, cfg.ucma_arg_event);
    let mut slot = Slot::<CmEvent>::new();
    // SAFETY: all-zero is a valid value of this integer-only struct.
    let ev = unsafe { slot.zeroed() };
    let id_priv = id.wrapping_sub(u64::from(cfg.cm_priv_id));
    if cfg.cm_priv_id != UNRESOLVED && cfg.cm_priv_res != UNRESOLVED {
        let res = id_priv + u64::from(cfg.cm_priv_res);
        ev.owner_pid = res_owner(cfg, res, &mut ev.owner_comm);
        ev.cm_id = read::field::<u32>(res, cfg.res_id).unwrap_or(0);
    }
    if !wanted_pid(cfg, ev.owner_pid) {
        return None;
    }
    header(&mut ev.header, EventKind::CmEvent as u32);
    ev.event = read::field::<u32>(event, cfg.cm_ev_event)?;
    ev.status = read::field::<i32>(event, cfg.cm_ev_status).unwrap_or(0);
    let qp = read::field::<u64>(id, cfg.cm_id_qp).unwrap_or(0);
    if qp != 0 {
        qp_ident(cfg, qp, &mut ev.qp);
    } else if cfg.cm_priv_id != UNRESOLVED {
        // A QP created in user space: the kernel only knows the QPN it announced.
        ev.qp.qpn = read::field::<u32>(id_priv, cfg.cm_priv_qp_num).unwrap_or(0);
    }
    let dev = read::field::<u64>(id, cfg.cm_id_device).unwrap_or(0);
    read::bytes(dev, cfg.device_name, &mut ev.qp.dev);
    (ev.src_family, ev.src_port) = sockaddr(id, cfg.cm_id_src, &mut ev.src_addr);
    (ev.dst_family, ev.dst_port) = sockaddr(id, cfg.cm_id_dst, &mut ev.dst_addr);
    output(ev);
    Some(0)
}
