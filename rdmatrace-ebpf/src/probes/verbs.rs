//! Control-path verbs calls: one uprobe program attached at the entry of each probed
//! libibverbs/librdmacm function, told which one by the attach cookie. Emits the caller's user
//! stack so user space can answer "which code path creates/modifies these QPs".

use aya_ebpf::{
    bindings::BPF_F_USER_STACK,
    helpers::{bpf_get_attach_cookie, bpf_get_stack},
    macros::uprobe,
    programs::ProbeContext,
    EbpfContext as _,
};
use rdmatrace_common::event::{EventKind, VerbsCallEvent, STACK_DEPTH};

use crate::{
    emit::{config, header, lost, note_cgroup, wake_flags, wanted},
    maps::EVENTS,
    regs,
};

#[uprobe]
pub fn verbs_call(ctx: ProbeContext) -> u32 {
    try_verbs_call(&ctx).unwrap_or(0)
}

fn try_verbs_call(ctx: &ProbeContext) -> Option<u32> {
    let cfg = config()?;
    if !wanted(cfg) {
        return None;
    }
    // Before the reservation: a record reserved earlier reaches user space first.
    note_cgroup();
    let Some(mut entry) = EVENTS.reserve::<VerbsCallEvent>(0) else {
        lost();
        return None;
    };
    let ev = entry.as_mut_ptr();
    // SAFETY: `ev` points at a reserved ring-buffer record of the right size, written field by
    // field before it is submitted; integer fields accept any value.
    unsafe {
        header(&mut (*ev).header, EventKind::VerbsCall as u32);
        // SAFETY (helper): the context is the probe's own.
        (*ev).func = bpf_get_attach_cookie(ctx.as_ptr()) as u32;
        // The kernel's user-stack walk follows frame pointers from the caller's frame: at a
        // function's entry that skips the direct caller, whose return address is still at the
        // top of the stack (x86_64) or in the link register (aarch64). Walk into ips[1..], then
        // put the entry IP first and that return address second (`regs` knows where they are).
        let ips = &mut (*ev).ips;
        let got = bpf_get_stack(
            ctx.as_ptr(),
            ips.as_mut_ptr().add(1).cast(),
            (8 * (STACK_DEPTH - 1)) as u32,
            u64::from(BPF_F_USER_STACK),
        );
        let walked = if got > 0 { got as u32 / 8 } else { 0 };
        ips[0] = regs::uprobe_entry_ip(ctx);
        ips[1] = regs::uprobe_return_address(ctx);
        (*ev).frames = if ips[1] == 0 { 1 } else { walked.max(1) + 1 };
    }
    entry.submit(wake_flags());
    Some(0)
}
