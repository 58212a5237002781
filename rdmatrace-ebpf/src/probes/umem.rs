//! Failed registrations: `ib_umem_get(device, addr, size, access)` pins the user memory of
//! every user MR (any driver) and fails with the errno the caller will see (`-ENOMEM` over
//! the locked-memory limit). The resource tracker never sees a failed registration, so this
//! is its only trace. Entry keeps device and size; the return emits on error, with the
//! caller's RLIMIT_MEMLOCK and what it had pinned already.

use aya_ebpf::{
    helpers::{bpf_get_current_pid_tgid, bpf_get_current_task},
    macros::{kprobe, kretprobe},
    programs::{ProbeContext, RetProbeContext},
};
use rdmatrace_common::event::{EventKind, UmemFailedEvent};

use crate::{
    emit::{config, header, output, wanted},
    maps::PENDING_UMEM,
    read,
    regs::{self, arg},
    zero::Slot,
};

/// Largest errno the kernel encodes in a pointer (`MAX_ERRNO`).
const MAX_ERRNO: u64 = 4095;

#[kprobe]
pub fn umem_get_enter(ctx: ProbeContext) -> u32 {
    try_umem_get_enter(&ctx).unwrap_or(0)
}

fn try_umem_get_enter(ctx: &ProbeContext) -> Option<u32> {
    let cfg = config()?;
    if !wanted(cfg) {
        return None;
    }
    let args = [arg(ctx, cfg.umem_arg_dev), arg(ctx, cfg.umem_arg_size)];
    PENDING_UMEM
        .insert(bpf_get_current_pid_tgid(), args, 0)
        .ok()?;
    Some(0)
}

#[kretprobe]
pub fn umem_get_exit(ctx: RetProbeContext) -> u32 {
    try_umem_get_exit(&ctx).unwrap_or(0)
}

fn try_umem_get_exit(ctx: &RetProbeContext) -> Option<u32> {
    let cfg = config()?;
    let key = bpf_get_current_pid_tgid();
    // SAFETY: the value is copied out before the entry is removed.
    let [dev, size] = *unsafe { PENDING_UMEM.get(key) }?;
    let _ = PENDING_UMEM.remove(key);
    let ret: u64 = regs::ret(ctx);
    if ret < MAX_ERRNO.wrapping_neg() {
        return Some(0);
    }
    let mut slot = Slot::<UmemFailedEvent>::new();
    // SAFETY: all-zero is a valid value of this integer-only struct.
    let ev = unsafe { slot.zeroed() };
    header(&mut ev.header, EventKind::UmemFailed as u32);
    ev.ret = ret as i64 as i32;
    ev.size = size;
    read::bytes(dev, cfg.device_name, &mut ev.dev);
    // SAFETY: helper without preconditions; the result is only used through checked reads.
    let task = unsafe { bpf_get_current_task() };
    let signal = read::field::<u64>(task, cfg.task_signal).unwrap_or(0);
    ev.memlock = read::field::<u64>(signal, cfg.signal_rlim_memlock).unwrap_or(u64::MAX);
    let mm = read::field::<u64>(task, cfg.task_mm).unwrap_or(0);
    ev.pinned_pages = read::field::<u64>(mm, cfg.mm_pinned_vm).unwrap_or(u64::MAX);
    output(ev);
    Some(0)
}
