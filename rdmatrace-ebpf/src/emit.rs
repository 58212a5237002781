//! Common plumbing: config lookup, in-kernel filter, event header, ring-buffer output with loss
//! accounting.

use aya_ebpf::{
    bindings::{BPF_RB_AVAIL_DATA, BPF_RB_FORCE_WAKEUP, BPF_RB_NO_WAKEUP, BPF_RB_RING_SIZE},
    helpers::{
        bpf_get_current_cgroup_id, bpf_get_current_pid_tgid, bpf_get_smp_processor_id,
        bpf_ktime_get_ns,
    },
};
use rdmatrace_common::{
    config::{ProbeConfig, FILTER_ALL, FILTER_CGROUP},
    event::{CgroupEvent, EventHeader, EventKind},
};

use crate::maps::{CONFIG, EVENTS, LOST, PROC_CGROUP, TRACED, WANTED_CGROUPS};

/// The config written by user space; `None` until it is written (or if the map is missing its
/// single entry).
#[inline(always)]
pub fn config() -> Option<&'static ProbeConfig> {
    // Not written yet (the programs are attached before the offsets are known): nothing to do.
    CONFIG.get(0).filter(|c| c.ready != 0)
}

/// Whether the current task passes the kernel-side filter. Under the cgroup filter, a task of
/// a wanted cgroup is added to `TRACED` here, so events later blamed on it as an owner (from
/// softirq or a kernel worker) pass [`wanted_pid`] too.
#[inline(always)]
pub fn wanted(cfg: &ProbeConfig) -> bool {
    wanted_task(cfg, (bpf_get_current_pid_tgid() >> 32) as u32)
}

/// [`wanted`] for the current task, whose process id the caller read already.
#[inline(always)]
pub fn wanted_task(cfg: &ProbeConfig, tgid: u32) -> bool {
    if wanted_pid(cfg, tgid) {
        return true;
    }
    if cfg.filter_mode != FILTER_CGROUP {
        return false;
    }
    // SAFETY: helper without arguments or preconditions.
    let cgroup = unsafe { bpf_get_current_cgroup_id() };
    // SAFETY: the value is only tested for presence.
    if unsafe { WANTED_CGROUPS.get(&cgroup) }.is_none() {
        return false;
    }
    let _ = TRACED.insert(&tgid, &1, 0);
    true
}

/// Whether events of process `tgid` pass the kernel-side filter.
#[inline(always)]
pub fn wanted_pid(cfg: &ProbeConfig, tgid: u32) -> bool {
    if cfg.filter_mode == FILTER_ALL {
        return true;
    }
    // SAFETY: the value is only tested for presence.
    unsafe { TRACED.get(tgid) }.is_some()
}

/// Sends a `ProcessCgroup` event for the current process if it is new or changed cgroup since
/// its last one: called before the process's own events are written, so user space knows its
/// cgroup first. Skipped for the idle task and for processes the filter does not trace.
#[inline(always)]
pub fn note_cgroup() {
    let id = bpf_get_current_pid_tgid();
    let tgid = (id >> 32) as u32;
    if tgid == 0 {
        return;
    }
    let Some(cfg) = config() else { return };
    if !wanted_pid(cfg, tgid) {
        return;
    }
    // SAFETY: helper without arguments or preconditions.
    let cgroup = unsafe { bpf_get_current_cgroup_id() };
    // SAFETY: the value is copied out at once.
    if unsafe { PROC_CGROUP.get(&tgid) }.is_some_and(|&known| known == cgroup) {
        return;
    }
    let _ = PROC_CGROUP.insert(&tgid, &cgroup, 0);
    let Some(mut entry) = EVENTS.reserve::<CgroupEvent>(0) else {
        lost();
        return;
    };
    let ev = entry.as_mut_ptr();
    // SAFETY: `ev` points at a reserved record of the right size; every field is written
    // before it is submitted.
    unsafe {
        fill(&mut (*ev).header, EventKind::ProcessCgroup as u32, id);
        (*ev).cgroup_id = cgroup;
    }
    entry.submit(wake_flags());
}

/// Fills `h` for the current task (pid_tgid `id`), without the cgroup check.
#[inline(always)]
fn fill(h: &mut EventHeader, kind: u32, id: u64) {
    h.kind = kind;
    // SAFETY: helpers without arguments or preconditions.
    h.cpu = unsafe { bpf_get_smp_processor_id() };
    // SAFETY: as above.
    h.ts_ns = unsafe { bpf_ktime_get_ns() };
    h.pid = (id >> 32) as u32;
    h.tid = id as u32;
    crate::zero::comm_into(&mut h.comm);
}

/// Fills `h` for the current task, after sending its cgroup if that is news ([`note_cgroup`];
/// programs that reserve their record before filling it call that first themselves).
#[inline(always)]
pub fn header(h: &mut EventHeader, kind: u32) {
    note_cgroup();
    fill(h, kind, bpf_get_current_pid_tgid());
}

/// Whether a record sent now wakes the reader. User space drains the ring on a short timer
/// anyway (`limits::DRAIN_MS`), so a record does not wake it (a wake-up is an irq_work, then
/// a task woken on another CPU: in the lab it cost several times the program that sent the
/// record) — unless an eighth of the ring is already waiting, when waiting for the timer could
/// let a burst fill it.
#[inline(always)]
pub fn wake_flags() -> u64 {
    let waiting = EVENTS.query(u64::from(BPF_RB_AVAIL_DATA));
    let size = EVENTS.query(u64::from(BPF_RB_RING_SIZE));
    if waiting.saturating_mul(8) >= size {
        u64::from(BPF_RB_FORCE_WAKEUP)
    } else {
        u64::from(BPF_RB_NO_WAKEUP)
    }
}

/// Sends `event` to user space, waking the reader only when the ring fills up
/// ([`wake_flags`]).
#[inline(always)]
pub fn output<T: 'static>(event: &T) {
    send(event, wake_flags());
}

/// Sends `event` to user space and wakes the reader at once: for the records user space acts on
/// in a hurry (an exec: the new process's own copy of a verbs library is looked for and probed
/// before its first calls).
#[inline(always)]
pub fn output_now<T: 'static>(event: &T) {
    send(event, u64::from(BPF_RB_FORCE_WAKEUP));
}

/// Copies `event` into the ring buffer with `flags`; counts it in `LOST` if the ring is full.
#[inline(always)]
fn send<T: 'static>(event: &T, flags: u64) {
    if EVENTS.output::<T>(event, flags).is_err() {
        lost();
    }
}

/// Counts one event that found the ring buffer full.
#[inline(always)]
pub fn lost() {
    if let Some(lost) = LOST.get_ptr_mut(0) {
        // SAFETY: per-CPU slot, only this CPU writes it while this program runs.
        unsafe { *lost += 1 };
    }
}
