//! The attach pass: every probe of the wanted areas verified (on worker threads) and attached,
//! with why each did not (reported in area order). The kprobes are opened (armed) from the
//! start of the load on a thread of their own ([`open_kprobes`]: arming them is serialized in
//! the kernel and takes longest) while the object is loaded and its programs verified; the pass
//! attaches the probes on other hooks meanwhile, then links each kprobe to its program. It
//! needs neither the kernel's BTF nor the offsets resolved from it: the programs emit nothing
//! until user space writes their config (see
//! `rdmatrace_common::config::ProbeConfig::ready`), so the pass runs on the object's thread
//! while the main thread reads BTF. Areas whose offsets then fail to resolve are taken off
//! again ([`unload_areas`]).

use std::{os::fd::OwnedFd, path::PathBuf};

use aya::{programs::Program, Ebpf};

use super::{
    attach::{attach_one, open_kprobe, Failed},
    kernel_has, plink, uprobe, verify, AttachReport, LoadOptions, ProbeState, ProbeStatus,
};
use crate::collect::{Area, Hook, ProbeSpec, Role};

/// The perf events of every primary kprobe of `areas`, in the order their probes come (`None`
/// for the other probes), opened one after the other.
pub(super) type Opened = Vec<Option<Result<OwnedFd, Failed>>>;

/// Opens (arms) every primary kprobe of `areas`: one at a time in the kernel, the longest part
/// of start-up, and it needs no program, so it runs on a thread of its own from the start,
/// beside the object load and the verification (only where the kernel has kprobes: `load`
/// checks). Fallbacks are opened only when needed.
/// (Opening the uprobes on yet another thread meanwhile was tried: in the lab the kprobes then
/// took longer to open by more than the uprobes gained.)
pub(super) fn open_kprobes(areas: &[&Area]) -> Opened {
    areas
        .iter()
        .flat_map(|a| a.probes)
        .map(|spec| {
            let primary = !matches!(spec.role, Role::InsteadOf(_));
            (primary && spec.hook.is_kprobe()).then(|| open_kprobe(spec))
        })
        .collect()
}

/// Whether the pass attaches `spec` before the kprobes: a primary on another hook (these need
/// nothing the kprobes' thread is still doing). The verifying threads take programs in the same
/// order.
pub(super) fn before_kprobes(spec: &ProbeSpec) -> bool {
    !spec.hook.is_kprobe() && !matches!(spec.role, Role::InsteadOf(_))
}

/// Attaches every probe of `areas`, linking the kprobes [`open_kprobes`] opened (`opened`:
/// waited for when the pass reaches its first kprobe; `None` if that thread failed or never
/// ran); their statuses, and the pass's phase timings.
pub(super) fn attach_areas(
    ebpf: &mut Ebpf,
    areas: &[&Area],
    opts: &LoadOptions,
    phases: &mut super::Phases,
    links: &mut plink::Links,
    opened: impl FnOnce() -> Option<Opened>,
) -> AttachReport {
    let lib_dirs: Vec<PathBuf> = uprobe::library_dirs();
    let mut kallsyms = None;
    let kprobes = super::kprobes_supported();
    let mut report = AttachReport::default();
    std::thread::scope(|s| {
        let mut programs = verify::start(s, ebpf, areas, &lib_dirs);
        let flat: Vec<(&Area, &ProbeSpec)> = areas
            .iter()
            .flat_map(|a| a.probes.iter().map(move |p| (*a, p)))
            .collect();
        // The probes on other hooks first, while the kprobes are still being opened on their
        // own thread; then the kprobes, each linked once its program is verified, and the
        // fallbacks (which look at what their primaries did).
        let mut order: Vec<usize> = (0..flat.len()).collect();
        order.sort_by_key(|&i| !before_kprobes(flat[i].1));
        let mut opened = Some(opened);
        // In the order of `flat`. (If the opening thread failed, each kprobe is opened when
        // linked.)
        let mut pre_opened: Opened = Vec::new();
        let mut placed = Vec::with_capacity(flat.len());
        for i in order {
            let (area, spec) = flat[i];
            let pre = if spec.hook.is_kprobe() {
                if let Some(open) = opened.take() {
                    pre_opened = open().unwrap_or_default();
                    phases.mark("(beside it) waiting for the kprobes to be opened");
                }
                pre_opened.get_mut(i).and_then(Option::take)
            } else {
                None
            };
            let state = if let Some(why) = report.standby_reason(area.name, spec) {
                ProbeState::Standby(why)
            } else {
                let r = match pre {
                    Some(Err(f)) => Err(f),
                    pre => programs
                        .program(spec.program)
                        .map_err(Failed::from)
                        .and_then(|prog| {
                            attach_one(prog, spec, pre.and_then(Result::ok), opts, &lib_dirs, links)
                        }),
                };
                phases.mark(match spec.hook {
                    Hook::Kprobe | Hook::Kretprobe => "(beside it) kprobes verified and linked",
                    Hook::RawTracepoint => "(beside it) tracepoints verified and attached",
                    Hook::Uprobe { .. } => "(beside it) uprobes verified and attached",
                    Hook::PerfCpuClock => "(beside it) perf events opened",
                    Hook::Fentry | Hook::TpBtf => "(beside it) typed programs attached",
                });
                // Whether a where-present function is missing is asked of /proc/kallsyms
                // (megabytes) only when the kernel could have made the kprobe at all: on one
                // without kprobes every attach fails, and the RDMA areas reach this pass before
                // their offsets are known (a host without RDMA modules).
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
            placed.push(i);
        }
        // Reported in area order, as the areas list their probes.
        let mut statuses: Vec<(usize, ProbeStatus)> =
            placed.into_iter().zip(report.probes.drain(..)).collect();
        statuses.sort_by_key(|(i, _)| *i);
        report.probes = statuses.into_iter().map(|(_, p)| p).collect();
    });
    phases.mark("(beside it) kprobes verified and linked");
    report
}

/// Detaches the programs of `off` (areas attached before their offsets failed to resolve),
/// except those a kept area also runs.
/// Detaches and unloads the programs `programs` (kprobes or uprobes, raw tracepoints, perf
/// events; one never loaded is left alone).
pub(super) fn unload_programs(ebpf: &mut Ebpf, links: &mut plink::Links, programs: &[&str]) {
    for &program in programs {
        links.drop_program(program);
        if let Some(prog) = ebpf.program_mut(program) {
            // Unloading detaches every link of the program.
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
        unload_programs(ebpf, links, &[spec.program]);
    }
}
