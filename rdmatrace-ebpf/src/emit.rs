//! Common plumbing: config lookup, in-kernel filter, event header, ring-buffer output with loss
//! accounting.

use aya_ebpf::helpers::{
    bpf_get_current_comm, bpf_get_current_pid_tgid, bpf_get_smp_processor_id, bpf_ktime_get_ns,
};
use rdmatrace_common::{
    config::{ProbeConfig, FILTER_TRACED},
    event::EventHeader,
};

use crate::maps::{CONFIG, EVENTS, LOST, TRACED};

/// The config written by user space; `None` only if the map is missing its single entry.
#[inline(always)]
pub fn config() -> Option<&'static ProbeConfig> {
    CONFIG.get(0)
}

/// Whether the current task passes the kernel-side filter.
#[inline(always)]
pub fn wanted(cfg: &ProbeConfig) -> bool {
    wanted_pid(cfg, (bpf_get_current_pid_tgid() >> 32) as u32)
}

/// Whether events of process `tgid` pass the kernel-side filter.
#[inline(always)]
pub fn wanted_pid(cfg: &ProbeConfig, tgid: u32) -> bool {
    if cfg.filter_mode != FILTER_TRACED {
        return true;
    }
    // SAFETY: the value is only tested for presence.
    unsafe { TRACED.get(tgid) }.is_some()
}

/// Fills `h` for the current task.
#[inline(always)]
pub fn header(h: &mut EventHeader, kind: u32) {
    let id = bpf_get_current_pid_tgid();
    h.kind = kind;
    // SAFETY: helpers without arguments or preconditions.
    h.cpu = unsafe { bpf_get_smp_processor_id() };
    // SAFETY: as above.
    h.ts_ns = unsafe { bpf_ktime_get_ns() };
    h.pid = (id >> 32) as u32;
    h.tid = id as u32;
    h.comm = bpf_get_current_comm().unwrap_or([0; 16]);
}

/// Sends `event` to user space; counts it in `LOST` if the ring buffer is full.
#[inline(always)]
pub fn output<T: 'static>(event: &T) {
    if EVENTS.output::<T>(event, 0).is_err() {
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
