//! The attach pass: every probe of the wanted areas verified (on worker threads) and attached
//! (one at a time), in area order, with why each did not. It needs neither the kernel's BTF nor
//! the offsets resolved from it: the programs emit nothing until user space writes their config
//! (see `rdmatrace_common::config::ProbeConfig::ready`), so the pass runs on the object's
//! thread while the main thread reads BTF. Areas whose offsets then fail to resolve are taken
//! off again ([`unload_areas`]).

use std::path::PathBuf;

use aya::{programs::Program, Ebpf};

use super::{
    attach::{attach_one, Failed},
    kernel_has, uprobe, verify, AttachReport, LoadOptions, ProbeState, ProbeStatus,
};
use crate::collect::{Area, Hook, Role};

/// Attaches every probe of `areas`; their statuses, and the pass's phase timings.
pub(super) fn attach_areas(
    ebpf: &mut Ebpf,
    areas: &[&Area],
    opts: &LoadOptions,
    phases: &mut super::Phases,
) -> AttachReport {
    let lib_dirs: Vec<PathBuf> = uprobe::library_dirs();
    let mut libs = super::LibSymbols::new();
    let mut kallsyms = None;
    let kprobes = super::kprobes_supported();
    let mut report = AttachReport::default();
    std::thread::scope(|s| {
        let mut programs = verify::start(s, ebpf, areas, &lib_dirs);
        for area in areas {
            for spec in area.probes {
                let state = if let Some(why) = report.standby_reason(area.name, spec) {
                    ProbeState::Standby(why)
                } else {
                    let r = programs
                        .program(spec.program)
                        .map_err(Failed::from)
                        .and_then(|prog| attach_one(prog, spec, opts, &lib_dirs, &mut libs));
                    phases.mark(match spec.hook {
                        Hook::Kprobe | Hook::Kretprobe => {
                            "(beside it) kprobes verified and attached"
                        }
                        Hook::RawTracepoint => "(beside it) tracepoints verified and attached",
                        Hook::Uprobe { .. } => "(beside it) uprobes verified and attached",
                        Hook::PerfCpuClock => "(beside it) perf events opened",
                    });
                    // Whether a where-present function is missing is asked of /proc/kallsyms
                    // (megabytes) only when the kernel could have made the kprobe at all: on
                    // one without kprobes every attach fails, and the RDMA areas reach this
                    // pass before their offsets are known (a host without RDMA modules).
                    let missing = |f: &Failed, kallsyms: &mut Option<String>| {
                        f.absent || (kprobes && !kernel_has(kallsyms, spec.target))
                    };
                    match r {
                        Ok(()) => ProbeState::Attached,
                        Err(f) if spec.role == Role::WherePresent && missing(&f, &mut kallsyms) => {
                            ProbeState::Standby(format!(
                                "not needed: this kernel has no {}",
                                spec.target
                            ))
                        }
                        Err(f) => ProbeState::Off(f.why),
                    }
                };
                report.probes.push(ProbeStatus {
                    area: area.name,
                    rdma: area.rdma,
                    spec: *spec,
                    state,
                });
            }
        }
    });
    phases.mark("(beside it) kprobes verified and attached");
    report
}

/// Detaches the programs of `off` (areas attached before their offsets failed to resolve),
/// except those a kept area also runs.
pub(super) fn unload_areas(ebpf: &mut Ebpf, off: &[&Area], kept: &[&Area]) {
    for spec in off.iter().flat_map(|a| a.probes) {
        if kept
            .iter()
            .flat_map(|a| a.probes)
            .any(|k| k.program == spec.program)
        {
            continue;
        }
        if let Some(prog) = ebpf.program_mut(spec.program) {
            // Unloading detaches every link of the program; one never loaded is left alone.
            let _ = match prog {
                Program::KProbe(p) => p.unload(),
                Program::UProbe(p) => p.unload(),
                Program::RawTracePoint(p) => p.unload(),
                Program::PerfEvent(p) => p.unload(),
                _ => Ok(()),
            };
        }
    }
}
