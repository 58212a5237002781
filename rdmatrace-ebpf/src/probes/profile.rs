//! On-CPU profile: a perf-event program on each CPU's software clock (user space picks the
//! frequency), keeping samples of traced processes with their user and kernel stacks.

use aya_ebpf::{
    bindings::BPF_F_USER_STACK,
    helpers::{bpf_get_current_pid_tgid, bpf_get_stack},
    macros::perf_event,
    programs::PerfEventContext,
    EbpfContext as _,
};
use rdmatrace_common::event::{CpuSampleEvent, EventKind, STACK_DEPTH};

use crate::{
    emit::{config, header, lost, note_cgroup, wake_flags, wanted},
    maps::EVENTS,
};

#[perf_event]
pub fn cpu_sample(ctx: PerfEventContext) -> u32 {
    try_cpu_sample(&ctx).unwrap_or(0)
}

fn try_cpu_sample(ctx: &PerfEventContext) -> Option<u32> {
    let cfg = config()?;
    // The idle task is on every CPU that has nothing to do: never a traced process.
    if bpf_get_current_pid_tgid() >> 32 == 0 || !wanted(cfg) {
        return None;
    }
    // Before the reservation: a record reserved earlier reaches user space first.
    note_cgroup();
    let Some(mut entry) = EVENTS.reserve::<CpuSampleEvent>(0) else {
        lost();
        return None;
    };
    let ev = entry.as_mut_ptr();
    const BYTES: u32 = (8 * STACK_DEPTH) as u32;
    // SAFETY: `ev` points at a reserved ring-buffer record of the right size, written field by
    // field before it is submitted; the helpers write at most BYTES into each array (and zero
    // what they do not fill).
    unsafe {
        header(&mut (*ev).header, EventKind::CpuSample as u32);
        let user = bpf_get_stack(
            ctx.as_ptr(),
            (*ev).user_ips.as_mut_ptr().cast(),
            BYTES,
            u64::from(BPF_F_USER_STACK),
        );
        let kernel = bpf_get_stack(ctx.as_ptr(), (*ev).kernel_ips.as_mut_ptr().cast(), BYTES, 0);
        (*ev).user_frames = if user > 0 { user as u32 / 8 } else { 0 };
        (*ev).kernel_frames = if kernel > 0 { kernel as u32 / 8 } else { 0 };
    }
    entry.submit(wake_flags());
    Some(0)
}
