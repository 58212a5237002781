//! On-CPU profile of the traced processes (see `rdmatrace-ebpf/src/probes/profile.rs`): a
//! perf event on every online CPU's software clock, sampled at `--cpu-hz`. Opt-in
//! (`record --cpu-profile`): unlike the control-path probes it costs something on every CPU
//! all the time.

use rdmatrace_common::config::ProbeConfig;

use super::{Area, Hook, ProbeSpec, Role};
use crate::btf::{BtfError, KernelBtf};

/// Default sampling frequency: off the kernel's own 100/250/1000 Hz ticks, so samples do not
/// land in lockstep with periodic work.
pub const DEFAULT_HZ: u64 = 99;

pub const AREA: Area = Area {
    name: "cpu-profile",
    rdma: false,
    probes: &[ProbeSpec {
        program: "cpu_sample",
        hook: Hook::PerfCpuClock,
        target: "cpu-clock",
        role: Role::Always,
    }],
    resolve,
};

fn resolve(_: &mut KernelBtf, _: &mut ProbeConfig) -> Result<Vec<String>, BtfError> {
    Ok(Vec::new())
}
