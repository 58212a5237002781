//! Stack symbolization. The recorder names every stack address while the process still lives
//! ([`resolver::Resolver`], blazesym over ELF symbols and kallsyms) and stores the names in the
//! recording; replay and live output look them up in a [`Symbols`] table (pure), so recordings
//! render later, anywhere, without privileges, even after the process and its binaries are gone.

pub mod maps;
pub mod resolver;

use std::sync::Arc;

use rustc_hash::{FxHashMap, FxHashSet};

use crate::event::{Body, Frame, Record};

/// The address space a kernel stack address belongs to in the table.
pub const KERNEL_PID: u32 = 0;

/// One resolved address: `addr` of process `pid` ([`KERNEL_PID`]: the kernel) is `name`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SymbolName {
    pub pid: u32,
    pub addr: u64,
    pub name: String,
}

/// (pid, address) -> name, as recorded. A later name for the same key replaces the earlier one
/// (the process exec'd another program).
#[derive(Clone, Debug, Default)]
pub struct Symbols {
    names: FxHashMap<(u32, u64), Arc<str>>,
    /// Each distinct text once: processes of one program, and every process's shared libraries,
    /// name many addresses alike. Fewer, shared names are less memory, and a stack's frames
    /// touch fewer of them (each named frame holds its name).
    texts: FxHashSet<Arc<str>>,
}

impl Symbols {
    pub fn insert(&mut self, pid: u32, addr: u64, name: &str) {
        let text = match self.texts.get(name) {
            Some(t) => t.clone(),
            None => {
                let t: Arc<str> = name.into();
                self.texts.insert(t.clone());
                t
            }
        };
        self.names.insert((pid, addr), text);
    }

    pub fn get(&self, pid: u32, addr: u64) -> Option<&str> {
        self.names.get(&(pid, addr)).map(|n| &**n)
    }

    pub fn len(&self) -> usize {
        self.names.len()
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    fn name_frames(&self, pid: u32, frames: &mut [Frame]) {
        for f in frames {
            if f.name.is_none() {
                f.name = self.names.get(&(pid, f.addr)).cloned();
            }
        }
    }

    /// Names the stack frames of `rec` that the table knows (others stay unnamed: `[unknown]`).
    pub fn annotate(&self, rec: &mut Record) {
        match &mut rec.body {
            Body::VerbsCall(v) => self.name_frames(rec.pid, &mut v.stack),
            Body::CpuSample(c) => {
                self.name_frames(rec.pid, &mut c.user);
                self.name_frames(KERNEL_PID, &mut c.kernel);
            }
            _ => {}
        }
    }
}

/// The addresses a raw record needs named: (pid, user addresses, kernel addresses), or `None`
/// for records without stacks.
pub fn stack_addrs(rec: &Record) -> Option<(u32, Vec<u64>, Vec<u64>)> {
    let addrs = |f: &[Frame]| f.iter().map(|f| f.addr).collect::<Vec<_>>();
    match &rec.body {
        Body::VerbsCall(v) => Some((rec.pid, addrs(&v.stack), Vec::new())),
        Body::CpuSample(c) => Some((rec.pid, addrs(&c.user), addrs(&c.kernel))),
        _ => None,
    }
}

#[cfg(test)]
mod tests;
