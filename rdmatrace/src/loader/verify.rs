//! Verifying the programs on worker threads while the attach pass runs: the kernel's verifier
//! runs each `BPF_PROG_LOAD` on the calling thread, so programs loaded from several threads are
//! verified in parallel, while the loader's thread opens the kprobes (their registration is
//! serialized in the kernel). Each program goes back to the attach pass as soon as it is
//! verified. Only the programs the attach pass will use first are verified ahead: the
//! primaries (a fallback is loaded only if its primary does not attach), on hooks this host has
//! (kprobes supported, the uprobe's library found), in the order the attach pass wants them.

use std::{
    collections::{HashMap, HashSet},
    path::PathBuf,
    sync::mpsc,
    thread::Scope,
};

use aya::{
    programs::{KProbe, Program, ProgramError, RawTracePoint, UProbe},
    Ebpf,
};

use super::{kprobes_supported, program_error, uprobe};
use crate::collect::{Area, Hook, ProbeSpec, Role};

/// The programs of `areas` the attach pass will use first, in its order, with what loading
/// them needs.
fn wanted(areas: &[&Area], lib_dirs: &[PathBuf]) -> Vec<ProbeSpec> {
    let kprobes = kprobes_supported();
    let mut found: Vec<ProbeSpec> = Vec::new();
    for spec in areas.iter().flat_map(|a| a.probes) {
        if matches!(spec.role, Role::InsteadOf(_))
            || found.iter().any(|f| f.program == spec.program)
        {
            continue;
        }
        let usable = match spec.hook {
            Hook::Kprobe | Hook::Kretprobe => kprobes,
            Hook::RawTracepoint => true,
            Hook::Uprobe { lib, .. } => uprobe::find_library(lib, lib_dirs).is_ok(),
            Hook::PerfCpuClock | Hook::Fentry | Hook::TpBtf => false,
        };
        if usable {
            found.push(*spec);
        }
    }
    // In the attach pass's order: the other hooks before the kprobes.
    found.sort_by_key(|s| !super::pass::before_kprobes(s));
    found
}

/// One program verified: its name, how it went, the program.
type Done<'e> = (&'static str, Result<(), String>, &'e mut Program);

/// The object's programs while some are being verified on worker threads.
pub(super) struct Verifying<'e> {
    done: mpsc::Receiver<Done<'e>>,
    /// Programs back here (verified, or never sent: loaded when attached).
    here: HashMap<&'static str, &'e mut Program>,
    /// How each verified program went.
    verified: HashMap<&'static str, Result<(), String>>,
    /// Programs sent to be verified.
    sent: HashSet<&'static str>,
}

impl Verifying<'_> {
    /// The program `name`, waiting for its verification if it is under way; why not, if the
    /// kernel refused it.
    pub(super) fn program(&mut self, name: &str) -> Result<&mut Program, String> {
        while !self.here.contains_key(name) && self.sent.contains(name) {
            let Ok((n, r, p)) = self.done.recv() else {
                return Err(format!(
                    "the thread verifying program {name} stopped before it was done"
                ));
            };
            self.verified.insert(n, r);
            self.here.insert(n, p);
        }
        if let Some(Err(why)) = self.verified.get(name) {
            return Err(why.clone());
        }
        self.here
            .get_mut(name)
            .map(|p| &mut **p)
            .ok_or_else(|| format!("program {name} missing from the eBPF object"))
    }
}

/// Starts verifying the programs of `areas` the attach pass will use first, on up to as many
/// threads as there are CPUs (at most 4), within `scope`.
pub(super) fn start<'scope, 'e>(
    scope: &'scope Scope<'scope, 'e>,
    ebpf: &'e mut Ebpf,
    areas: &[&Area],
    lib_dirs: &[PathBuf],
) -> Verifying<'e> {
    let wanted = wanted(areas, lib_dirs);
    // Every program under the name its specs use.
    let names: HashMap<&str, &'static str> = areas
        .iter()
        .flat_map(|a| a.probes)
        .map(|s| (s.program, s.program))
        .collect();
    let mut here: HashMap<&'static str, &'e mut Program> = ebpf
        .programs_mut()
        .filter_map(|(name, p)| names.get(name).map(|n| (*n, p)))
        .collect();
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, 4)
        .min(wanted.len().max(1));
    let mut shares: Vec<Vec<(ProbeSpec, &'e mut Program)>> =
        (0..threads).map(|_| Vec::new()).collect();
    let mut sent = HashSet::new();
    for (i, spec) in wanted.into_iter().enumerate() {
        if let Some(p) = here.remove(spec.program) {
            shares[i % threads].push((spec, p));
            sent.insert(spec.program);
        }
    }
    let (tx, done) = mpsc::channel();
    for share in shares {
        let tx = tx.clone();
        scope.spawn(move || {
            for (spec, prog) in share {
                // A panic in one load fails that program only (a scoped thread's panic would
                // fail the whole start-up).
                let r =
                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| load(prog, &spec)))
                        .unwrap_or_else(|_| Err("loading it panicked".to_string()));
                if tx.send((spec.program, r, prog)).is_err() {
                    return;
                }
            }
        });
    }
    Verifying {
        done,
        here,
        verified: HashMap::new(),
        sent,
    }
}

/// Loads one program for its hook (a program already loaded, e.g. one serving several
/// functions, is fine).
pub(super) fn load(prog: &mut Program, spec: &ProbeSpec) -> Result<(), String> {
    let r = match spec.hook {
        Hook::Kprobe | Hook::Kretprobe => {
            let p: &mut KProbe = prog.try_into().map_err(program_error)?;
            p.load()
        }
        Hook::Uprobe { .. } => {
            let p: &mut UProbe = prog.try_into().map_err(program_error)?;
            p.load()
        }
        Hook::RawTracepoint => {
            let p: &mut RawTracePoint = prog.try_into().map_err(program_error)?;
            p.load()
        }
        Hook::PerfCpuClock | Hook::Fentry | Hook::TpBtf => return Ok(()),
    };
    match r {
        Ok(()) | Err(ProgramError::AlreadyLoaded) => Ok(()),
        Err(e) => Err(program_error(e)),
    }
}
