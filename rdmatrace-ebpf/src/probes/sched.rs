//! Process lifecycle (raw tracepoints: neither tracefs nor the kernel's BTF needed), so that
//! pid -> comm is known even for short-lived processes and a traced process's death is seen.

use aya_ebpf::{
    helpers::{bpf_get_current_pid_tgid, bpf_get_current_task},
    macros::raw_tracepoint,
    programs::RawTracePointContext,
};
use rdmatrace_common::{
    config::{ProbeConfig, FILTER_ALL, FILTER_TRACED},
    event::{EventKind, ProcessEvent},
};

use crate::{
    emit::{config, header, output, output_now, wanted},
    maps::TRACED,
    read,
    zero::Slot,
};

#[inline(always)]
fn process_event<'s>(
    cfg: &ProbeConfig,
    kind: EventKind,
    slot: &'s mut Slot<ProcessEvent>,
) -> &'s mut ProcessEvent {
    // SAFETY: all-zero is a valid value of this integer-only struct.
    let ev = unsafe { slot.zeroed() };
    header(&mut ev.header, kind as u32);
    // SAFETY: helper without preconditions; the result is only used through checked reads.
    let task = unsafe { bpf_get_current_task() };
    let parent = read::field::<u64>(task, cfg.task_real_parent).unwrap_or(0);
    ev.ppid = read::field::<u32>(parent, cfg.task_tgid).unwrap_or(0);
    ev
}

/// `sched_process_fork(parent, child)`: a child of a traced process is traced too.
#[raw_tracepoint(tracepoint = "sched_process_fork")]
pub fn process_fork(ctx: RawTracePointContext) -> u32 {
    try_process_fork(&ctx).unwrap_or(0)
}

fn try_process_fork(ctx: &RawTracePointContext) -> Option<u32> {
    let cfg = config()?;
    if cfg.filter_mode != FILTER_TRACED || cfg.follow_forks == 0 {
        return None;
    }
    let parent: u64 = ctx.arg(0);
    let child: u64 = ctx.arg(1);
    let parent_tgid = read::field::<u32>(parent, cfg.task_tgid)?;
    // SAFETY: only tested for presence.
    unsafe { TRACED.get(parent_tgid) }?;
    let child_tgid = read::field::<u32>(child, cfg.task_tgid)?;
    TRACED.insert(child_tgid, 1, 0).ok()?;
    Some(0)
}

#[raw_tracepoint(tracepoint = "sched_process_exec")]
pub fn process_exec(_ctx: RawTracePointContext) -> u32 {
    try_process_exec().unwrap_or(0)
}

fn try_process_exec() -> Option<u32> {
    let cfg = config()?;
    if !wanted(cfg) {
        return None;
    }
    let mut slot = Slot::new();
    let ev = process_event(cfg, EventKind::ProcessExec, &mut slot);
    // In a container, the reader looks for the new process's own copies of the verbs
    // libraries at once (see `output_now`); elsewhere the host's copies are probed already.
    if in_other_mount_ns(cfg) {
        output_now(ev);
    } else {
        output(ev);
    }
    Some(0)
}

/// Whether the current task's mount namespace is not rdmatrace's own; `true` when that cannot
/// be told (an offset unresolved, a read failed).
#[inline(always)]
fn in_other_mount_ns(cfg: &ProbeConfig) -> bool {
    if cfg.own_mnt_ns == 0 {
        return true;
    }
    // SAFETY: helper without preconditions; used only through checked reads.
    let task = unsafe { bpf_get_current_task() };
    let inum = read::field::<u64>(task, cfg.task_nsproxy)
        .and_then(|ns| read::field::<u64>(ns, cfg.nsproxy_mnt_ns))
        .and_then(|mnt| read::field::<u32>(mnt, cfg.mnt_ns_inum));
    inum != Some(cfg.own_mnt_ns)
}

#[raw_tracepoint(tracepoint = "sched_process_exit")]
pub fn process_exit(_ctx: RawTracePointContext) -> u32 {
    try_process_exit().unwrap_or(0)
}

fn try_process_exit() -> Option<u32> {
    let cfg = config()?;
    let id = bpf_get_current_pid_tgid();
    // Only the thread-group leader's exit ends the process.
    if (id >> 32) as u32 != id as u32 || !wanted(cfg) {
        return None;
    }
    let mut slot = Slot::new();
    let ev = process_event(cfg, EventKind::ProcessExit, &mut slot);
    // SAFETY: helper without preconditions; used only through checked reads.
    let task = unsafe { bpf_get_current_task() };
    ev.exit_code = read::field::<i32>(task, cfg.task_exit_code).unwrap_or(0);
    output(ev);
    if cfg.filter_mode != FILTER_ALL {
        let _ = TRACED.remove((id >> 32) as u32);
    }
    Some(0)
}
