//! Verifying the programs before attaching them, several at a time: the kernel's verifier runs
//! each `BPF_PROG_LOAD` on the calling thread, so programs loaded from several threads are
//! verified in parallel, while attaching (kprobe registration is serialized in the kernel)
//! stays one at a time. Only the programs the attach pass will use first are verified here:
//! the primaries (a fallback is loaded only if its primary does not attach), on hooks this
//! host has (kprobes supported, the uprobe's library found).

use std::{collections::HashMap, path::PathBuf};

use aya::{
    programs::{BtfTracePoint, KProbe, Program, ProgramError, UProbe},
    Btf, Ebpf,
};

use super::{kprobes_supported, program_error, uprobe};
use crate::collect::{Area, Hook, ProbeSpec, Role};

/// Each program's verification: `Ok` (loaded) or why the kernel refused it.
pub(super) type Verified = HashMap<&'static str, Result<(), String>>;

/// The programs of `areas` the attach pass will use first, with what loading them needs.
fn wanted(areas: &[&Area], lib_dirs: &[PathBuf]) -> HashMap<&'static str, ProbeSpec> {
    let kprobes = kprobes_supported();
    let mut found = HashMap::new();
    for spec in areas.iter().flat_map(|a| a.probes) {
        if matches!(spec.role, Role::InsteadOf(_)) {
            continue;
        }
        let usable = match spec.hook {
            Hook::Kprobe | Hook::Kretprobe => kprobes,
            Hook::BtfTracepoint => true,
            Hook::Uprobe { lib, .. } => uprobe::find_library(lib, lib_dirs).is_ok(),
            Hook::PerfCpuClock => false,
        };
        if usable {
            found.entry(spec.program).or_insert(*spec);
        }
    }
    found
}

/// Loads one program for its hook.
fn load(prog: &mut Program, spec: &ProbeSpec, btf: Option<&Btf>) -> Result<(), String> {
    let r = match spec.hook {
        Hook::Kprobe | Hook::Kretprobe => {
            let p: &mut KProbe = prog.try_into().map_err(program_error)?;
            p.load()
        }
        Hook::Uprobe { .. } => {
            let p: &mut UProbe = prog.try_into().map_err(program_error)?;
            p.load()
        }
        Hook::BtfTracepoint => {
            let btf = btf.ok_or("kernel BTF unavailable")?;
            let p: &mut BtfTracePoint = prog.try_into().map_err(program_error)?;
            p.load(spec.target, btf)
        }
        Hook::PerfCpuClock => return Ok(()),
    };
    match r {
        Ok(()) | Err(ProgramError::AlreadyLoaded) => Ok(()),
        Err(e) => Err(program_error(e)),
    }
}

/// Verifies the programs of `areas` the attach pass will use first, on up to as many threads
/// as there are CPUs (at most 4); returns how each went and how many threads ran.
pub(super) fn all(
    ebpf: &mut Ebpf,
    areas: &[&Area],
    btf: Option<&Btf>,
    lib_dirs: &[PathBuf],
) -> (Verified, usize) {
    let wanted = wanted(areas, lib_dirs);
    let mut progs: Vec<(&'static str, ProbeSpec, &mut Program)> = ebpf
        .programs_mut()
        .filter_map(|(name, p)| wanted.get(name).map(|s| (s.program, *s, p)))
        .collect();
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, 4)
        .min(progs.len().max(1));
    let mut shares: Vec<Vec<(&'static str, ProbeSpec, &mut Program)>> =
        (0..threads).map(|_| Vec::new()).collect();
    for (i, p) in progs.drain(..).enumerate() {
        shares[i % threads].push(p);
    }
    let results = std::thread::scope(|s| {
        let running: Vec<_> = shares
            .into_iter()
            .map(|share| {
                s.spawn(move || {
                    share
                        .into_iter()
                        .map(|(name, spec, prog)| (name, load(prog, &spec, btf)))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        running
            .into_iter()
            .flat_map(|t| {
                // A share whose thread panicked is loaded again, one by one, when attached.
                t.join().unwrap_or_default()
            })
            .collect::<Verified>()
    });
    (results, threads)
}
