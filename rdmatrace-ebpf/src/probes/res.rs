//! Every RDMA object through the kernel's resource tracker: `rdma_restrack_add` (return probe:
//! the id is assigned inside) and `rdma_restrack_del` (entry: the object is still whole). The
//! tracker records the owning task, so ownership survives objects created or destroyed from
//! kernel threads.

use aya_ebpf::{
    helpers::bpf_get_current_pid_tgid,
    macros::{kprobe, kretprobe},
    programs::{ProbeContext, RetProbeContext},
};
use rdmatrace_common::{
    config::{ProbeConfig, RES_TYPES},
    event::{EventKind, ResourceEvent},
    limits::UNRESOLVED,
};

use crate::{
    emit::{config, header, output, wanted_pid},
    maps::{PENDING_MR_ACCESS, PENDING_RES},
    read, regs,
    zero::Slot,
};

/// `enum rdma_restrack_type`: QPs have their own, richer events.
const RES_QP: u32 = 2;
const RES_CQ: u32 = 1;
const RES_MR: u32 = 4;

/// The owner the tracker recorded: (tgid, comm).
#[inline(always)]
pub fn res_owner(cfg: &ProbeConfig, res: u64, comm: &mut [u8; 16]) -> u32 {
    let task = read::field::<u64>(res, cfg.res_task).unwrap_or(0);
    read::bytes(task, cfg.task_comm, comm);
    read::field::<u32>(task, cfg.task_tgid).unwrap_or(0)
}

#[inline(always)]
fn emit(cfg: &ProbeConfig, res: u64, kind: EventKind) -> Option<u32> {
    let t = read::field::<u32>(res, cfg.res_type)?;
    if t == RES_QP || t as usize >= RES_TYPES {
        return None;
    }
    let base_off = cfg.res_base[t as usize];
    if base_off == UNRESOLVED {
        return None;
    }
    let obj = res.wrapping_sub(u64::from(base_off));
    let mut slot = Slot::<ResourceEvent>::new();
    // SAFETY: all-zero is a valid value of this integer-only struct.
    let ev = unsafe { slot.zeroed() };
    ev.owner_pid = res_owner(cfg, res, &mut ev.owner_comm);
    if !wanted_pid(cfg, ev.owner_pid) {
        return None;
    }
    header(&mut ev.header, kind as u32);
    ev.res_type = t;
    ev.res_id = read::field::<u32>(res, cfg.res_id).unwrap_or(0);
    ev.user = u32::from(read::field::<u8>(res, cfg.res_user).unwrap_or(0));
    let dev = read::field::<u64>(obj, cfg.res_device[t as usize]).unwrap_or(0);
    read::bytes(dev, cfg.device_name, &mut ev.dev);
    if t == RES_CQ {
        ev.cqe = read::field::<u32>(obj, cfg.cq_cqe).unwrap_or(0);
        ev.comp_vector = read::field::<u32>(obj, cfg.cq_comp_vector).unwrap_or(0);
    } else if t == RES_MR {
        ev.lkey = read::field::<u32>(obj, cfg.mr_lkey).unwrap_or(0);
        ev.rkey = read::field::<u32>(obj, cfg.mr_rkey).unwrap_or(0);
        ev.length = read::field::<u64>(obj, cfg.mr_length).unwrap_or(0);
        ev.iova = read::field::<u64>(obj, cfg.mr_iova).unwrap_or(0);
        if kind == EventKind::ResourceAdd {
            let key = bpf_get_current_pid_tgid();
            // SAFETY: copied out before the entry is removed.
            if let Some(access) = unsafe { PENDING_MR_ACCESS.get(key) } {
                ev.access = *access;
                let _ = PENDING_MR_ACCESS.remove(key);
            }
        }
    }
    output(ev);
    Some(0)
}

/// Called at a driver's reg_user_mr entry: the access flags ib_uverbs passes down, kept until
/// the MR reaches the tracker. Drivers probe this from their own area (rxe, mlx5).
#[inline(always)]
pub fn remember_mr_access(access: u32) {
    let _ = PENDING_MR_ACCESS.insert(bpf_get_current_pid_tgid(), access, 0);
}

#[kprobe]
pub fn res_add_enter(ctx: ProbeContext) -> u32 {
    if let Some(res) = regs::arg_at(&ctx, 0) {
        let _ = PENDING_RES.insert(bpf_get_current_pid_tgid(), res, 0);
    }
    0
}

#[kretprobe]
pub fn res_add_exit(_ctx: RetProbeContext) -> u32 {
    try_res_add_exit().unwrap_or(0)
}

fn try_res_add_exit() -> Option<u32> {
    let cfg = config()?;
    let key = bpf_get_current_pid_tgid();
    // SAFETY: copied out before the entry is removed.
    let res = *unsafe { PENDING_RES.get(key) }?;
    let _ = PENDING_RES.remove(key);
    emit(cfg, res, EventKind::ResourceAdd)
}

#[kprobe]
pub fn res_del(ctx: ProbeContext) -> u32 {
    try_res_del(&ctx).unwrap_or(0)
}

fn try_res_del(ctx: &ProbeContext) -> Option<u32> {
    let cfg = config()?;
    emit(cfg, regs::arg_at(ctx, 0)?, EventKind::ResourceDel)
}
