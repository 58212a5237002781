//! The attach pass: every probe of the wanted areas verified (on worker threads) and attached,
//! in area order, with why each did not. Every kprobe is opened first (arming them is
//! serialized in the kernel and takes longest), while the programs are being verified; then
//! each probe is linked to its program. It needs neither the kernel's BTF nor the offsets
//! resolved from it: the programs emit nothing until user space writes their config (see
//! `rdmatrace_common::config::ProbeConfig::ready`), so the pass runs on the object's thread
//! while the main thread reads BTF. Areas whose offsets then fail to resolve are taken off
//! again ([`unload_areas`]).

use std::{os::fd::OwnedFd, path::PathBuf};

use aya::{programs::Program, Ebpf};

use super::{
    attach::{attach_one, open_kprobe, Failed},
    kernel_has, plink, uprobe, verify, AttachReport, LoadOptions, ProbeState, ProbeStatus,
};
use crate::collect::{Area, Hook, Role};

/// Attaches every probe of `areas`; their statuses, and the pass's phase timings.
pub(super) fn attach_areas(
    ebpf: &mut Ebpf,
    areas: &[&Area],
    opts: &LoadOptions,
    phases: &mut super::Phases,
    links: &mut plink::Links,
) -> AttachReport {
    let lib_dirs: Vec<PathBuf> = uprobe::library_dirs();
    let mut kallsyms = None;
    let kprobes = super::kprobes_supported();
    let mut report = AttachReport::default();
    std::thread::scope(|s| {
        let mut programs = verify::start(s, ebpf, areas, &lib_dirs);
        // Every primary kprobe is opened (armed: one at a time in the kernel, the longest part
        // of the pass) while the programs are still being verified; each is linked below once
        // its program is ready. Fallbacks are opened only when needed.
        // (Opening the uprobes on a thread of their own meanwhile was tried: in the lab the
        // kprobes then took longer to open by more than the uprobes gained.)
        let opened: Vec<Option<Result<OwnedFd, Failed>>> = areas
            .iter()
            .flat_map(|a| a.probes)
            .map(|spec| {
                let primary = !matches!(spec.role, Role::InsteadOf(_));
                let kprobe = matches!(spec.hook, Hook::Kprobe | Hook::Kretprobe);
                (primary && kprobe && kprobes).then(|| open_kprobe(spec))
            })
            .collect();
        phases.mark("(beside it) kprobes opened");
        // In the same order as the loop below walks the probes.
        let mut opened = opened.into_iter();
        for area in areas {
            for spec in area.probes {
                let pre = opened.next().flatten();
                let state = if let Some(why) = report.standby_reason(area.name, spec) {
                    ProbeState::Standby(why)
                } else {
                    let r = match pre {
                        Some(Err(f)) => Err(f),
                        pre => programs
                            .program(spec.program)
                            .map_err(Failed::from)
                            .and_then(|prog| {
                                attach_one(
                                    prog,
                                    spec,
                                    pre.and_then(Result::ok),
                                    opts,
                                    &lib_dirs,
                                    links,
                                )
                            }),
                    };
                    phases.mark(match spec.hook {
                        Hook::Kprobe | Hook::Kretprobe => "(beside it) kprobes verified and linked",
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
    phases.mark("(beside it) kprobes verified and linked");
    report
}

/// Detaches the programs of `off` (areas attached before their offsets failed to resolve),
/// except those a kept area also runs.
pub(super) fn unload_areas(
    ebpf: &mut Ebpf,
    links: &mut plink::Links,
    off: &[&Area],
    kept: &[&Area],
) {
    for spec in off.iter().flat_map(|a| a.probes) {
        if kept
            .iter()
            .flat_map(|a| a.probes)
            .any(|k| k.program == spec.program)
        {
            continue;
        }
        links.drop_program(spec.program);
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
