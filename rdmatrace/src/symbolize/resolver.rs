//! Naming stack addresses while the process lives (record time): user addresses through the
//! process's mappings (cached per process, read again when an address falls outside them, dropped
//! at exec) and the ELF symbols of the mapped files; kernel addresses through kallsyms.
//! Never fails: what cannot be named reads `[module]` or `[unknown]`.

use std::{
    collections::{BTreeMap, HashMap, HashSet},
    path::PathBuf,
};

use blazesym::{
    symbolize::{
        source::{Elf, Kernel, Source},
        Input, Symbolized, Symbolizer,
    },
    MaybeDefault,
};

use super::{
    maps::{self, Mapping},
    stack_addrs, SymbolName, KERNEL_PID,
};
use crate::event::{Body, Record, UNKNOWN_FRAME};

pub struct Resolver {
    symbolizer: Symbolizer,
    /// Executable mappings per process, from its first stack on.
    maps: HashMap<u32, Vec<Mapping>>,
    /// (pid, addr) already named: each is named (and recorded) once.
    named: HashSet<(u32, u64)>,
}

impl Default for Resolver {
    fn default() -> Self {
        Resolver::new()
    }
}

impl Resolver {
    pub fn new() -> Resolver {
        Resolver {
            // Function names only: no line numbers, no inlined frames (no DWARF parsing).
            symbolizer: Symbolizer::builder()
                .enable_code_info(false)
                .enable_inlined_fns(false)
                .enable_demangling(true)
                .build(),
            maps: HashMap::new(),
            named: HashSet::new(),
        }
    }

    /// The names a decoded record needs that were not given before (in the order to record
    /// them, before the record itself). An exec drops what was known of that process.
    pub fn names_for(&mut self, rec: &Record) -> Vec<SymbolName> {
        if let Body::ProcessExec { .. } = rec.body {
            self.forget(rec.pid);
            // Read the new program's mappings now: a short-lived process may be gone by the
            // time its first stack is handled, and its own code (where the callers of interest
            // live) is mapped from exec on. Libraries mapped later are added when a stack needs
            // them, while the process lives.
            if let Some(m) = maps::read(rec.pid) {
                self.maps.insert(rec.pid, m);
            }
            return Vec::new();
        }
        let Some((pid, user, kernel)) = stack_addrs(rec) else {
            return Vec::new();
        };
        let mut out = self.user(pid, &user);
        out.extend(self.kernel(&kernel));
        out
    }

    /// Loads the kernel's symbols now (kallsyms is large: parsing it at the first kernel stack
    /// could stall the recorder long enough for short-lived processes to exit before their
    /// mappings are read).
    pub fn warm_kernel(&mut self) {
        let src = kernel_source();
        let _ = self
            .symbolizer
            .symbolize(&src, Input::AbsAddr(&[0xffff_ffff_8100_0000]));
    }

    /// Forgets a process's mappings and names (it exec'd: same pid, another program).
    pub fn forget(&mut self, pid: u32) {
        self.maps.remove(&pid);
        self.named.retain(|(p, _)| *p != pid);
    }

    fn fresh(&self, pid: u32, addrs: &[u64]) -> Vec<u64> {
        let mut seen = HashSet::new();
        addrs
            .iter()
            .copied()
            .filter(|a| !self.named.contains(&(pid, *a)) && seen.insert(*a))
            .collect()
    }

    fn user(&mut self, pid: u32, addrs: &[u64]) -> Vec<SymbolName> {
        let fresh = self.fresh(pid, addrs);
        if fresh.is_empty() {
            return Vec::new();
        }
        let covered = |m: &Vec<Mapping>| fresh.iter().all(|a| m.iter().any(|m| m.contains(*a)));
        if !self.maps.get(&pid).is_some_and(covered) {
            // First stack of this process, or code mapped since (dlopen): read the maps again
            // while the process is still there. An exiting process (or a zombie) shows no
            // mappings at all, so what is read is added to what we had, never replaces it.
            if let Some(fresh_maps) = maps::read(pid) {
                let known = self.maps.entry(pid).or_default();
                // A range mapped anew (dlclose, then dlopen) takes the place of the old one.
                known.retain(|old| {
                    !fresh_maps
                        .iter()
                        .any(|n| n.start < old.end && old.start < n.end)
                });
                known.extend(fresh_maps);
            }
        }
        let mappings = self.maps.get(&pid).cloned().unwrap_or_default();
        // Group by file so each file is opened once per batch.
        let mut by_file: BTreeMap<PathBuf, Vec<(u64, u64, String)>> = BTreeMap::new();
        let mut out = Vec::new();
        for addr in fresh {
            match mappings.iter().find(|m| m.contains(addr)) {
                Some(m) if m.is_file() => by_file.entry(file_path(pid, m)).or_default().push((
                    addr,
                    m.file_offset(addr),
                    m.module_label(),
                )),
                Some(m) => out.push(self.named(pid, addr, m.module_label())),
                None => out.push(self.named(pid, addr, UNKNOWN_FRAME.to_string())),
            }
        }
        for (path, wanted) in by_file {
            let offsets: Vec<u64> = wanted.iter().map(|w| w.1).collect();
            let src = Source::Elf(Elf {
                debug_syms: false,
                ..Elf::new(path)
            });
            let names = names_of(
                self.symbolizer
                    .symbolize(&src, Input::FileOffset(&offsets))
                    .ok(),
            );
            for (i, (addr, _, module)) in wanted.into_iter().enumerate() {
                let name = names.get(i).cloned().flatten().unwrap_or(module);
                out.push(self.named(pid, addr, name));
            }
        }
        out
    }

    fn kernel(&mut self, addrs: &[u64]) -> Vec<SymbolName> {
        let fresh = self.fresh(KERNEL_PID, addrs);
        if fresh.is_empty() {
            return Vec::new();
        }
        let src = kernel_source();
        let names = names_of(self.symbolizer.symbolize(&src, Input::AbsAddr(&fresh)).ok());
        let mut out = Vec::new();
        for (i, addr) in fresh.iter().enumerate() {
            let name = names
                .get(i)
                .cloned()
                .flatten()
                .unwrap_or_else(|| UNKNOWN_FRAME.to_string());
            out.push(self.named(KERNEL_PID, *addr, name));
        }
        out
    }

    fn named(&mut self, pid: u32, addr: u64, name: String) -> SymbolName {
        self.named.insert((pid, addr));
        SymbolName { pid, addr, name }
    }
}

/// kallsyms only: a vmlinux with DWARF would be slow to load and is rarely installed.
fn kernel_source() -> Source<'static> {
    Source::Kernel(Kernel {
        vmlinux: MaybeDefault::None,
        debug_syms: false,
        ..Kernel::default()
    })
}

/// Function names from a batch (`None` where blazesym found none, empty when it failed).
fn names_of(batch: Option<Vec<Symbolized<'_>>>) -> Vec<Option<String>> {
    batch
        .unwrap_or_default()
        .iter()
        .map(|s| match s {
            Symbolized::Sym(s) => Some(s.name.to_string()),
            Symbolized::Unknown(_) => None,
        })
        .collect()
}

/// The file as this process sees it: its own path when that exists here, else the process's
/// handle on the mapping (other mount namespaces, deleted files) while it lives.
fn file_path(pid: u32, m: &Mapping) -> PathBuf {
    if m.path.exists() {
        m.path.clone()
    } else {
        PathBuf::from(format!("/proc/{pid}/map_files/{:x}-{:x}", m.start, m.end))
    }
}
