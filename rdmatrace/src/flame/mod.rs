//! Flamegraphs from recordings: folded stacks (`frame;frame;frame count`, Brendan Gregg's format)
//! built by pure folders, rendered to SVG by inferno ([`svg`]).
//!
//! Kinds:
//! - `retransmits`: retransmit blame, `process;device;QPN;reason` (TCP: `process;tcp;4-tuple;
//!   reason`) weighted by count: which process's which QP retransmits, and why.
//! - `verbs`: user stacks at control-path verbs calls (libibverbs/librdmacm uprobes),
//!   `process;outermost caller;...;direct caller;ibv_create_qp` weighted by calls.
//! - `cpu`: on-CPU samples of the traced processes (perf events),
//!   `process;user frames;kernel frames_[k]` weighted by samples (kernel frames carry the
//!   `_[k]` suffix flamegraph tools colour as kernel code).

pub mod svg;

use std::{collections::BTreeMap, sync::Arc};

use rustc_hash::FxHashMap;

use crate::event::{Body, Frame, Record};

/// Which flamegraph.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Retransmits,
    Verbs,
    Cpu,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Retransmits => "retransmits",
            Kind::Verbs => "verbs",
            Kind::Cpu => "cpu",
        }
    }

    /// What one unit of width is.
    pub fn count_name(self) -> &'static str {
        match self {
            Kind::Retransmits => "retransmits",
            Kind::Verbs => "calls",
            Kind::Cpu => "samples",
        }
    }

    pub fn title(self) -> &'static str {
        match self {
            Kind::Retransmits => "Retransmit blame: process / device / QP / reason",
            Kind::Verbs => "Verbs control-path calls: user stacks",
            Kind::Cpu => "On-CPU samples of the traced processes",
        }
    }
}

/// Stacks (root first) and their weights. Frames are interned (a million samples share a few
/// thousand frame names); output is sorted by the frames' text, so it is deterministic.
#[derive(Clone, Debug, Default)]
pub struct Folded {
    /// Frame id -> text.
    frames: Vec<Box<str>>,
    ids: FxHashMap<Box<str>, u32>,
    /// Stack -> its index in `counts`.
    stacks: FxHashMap<Box<[u32]>, u32>,
    /// Weights, by the index [`Folded::add_ids`] returns.
    counts: Vec<u64>,
    /// Reused by [`Folded::add`].
    scratch: Vec<u32>,
}
/// A frame as inferno can take it: `;` separates frames and the count follows the last space,
/// so `;` becomes `:` and newlines become spaces.
pub fn frame(s: &str) -> String {
    s.replace(';', ":").replace(['\n', '\r'], " ")
}

/// `comm [pid]`, the root frame of every stack.
pub fn process_frame(pid: u32, comm: &str) -> String {
    match (pid, comm.is_empty()) {
        (0, _) => "[unknown owner]".to_string(),
        (_, true) => format!("? [{pid}]"),
        (_, false) => frame(&format!("{comm} [{pid}]")),
    }
}

impl Folded {
    pub fn add(&mut self, stack: Vec<String>, n: u64) {
        self.add_frames(stack.iter().map(String::as_str), n);
    }

    /// Adds a stack given as its frames' texts (root first).
    pub fn add_frames<'a>(&mut self, stack: impl IntoIterator<Item = &'a str>, n: u64) {
        let mut ids = std::mem::take(&mut self.scratch);
        ids.clear();
        ids.extend(stack.into_iter().map(|f| self.intern(f)));
        self.add_ids(&ids, n);
        self.scratch = ids;
    }

    /// The id of frame text `f`.
    pub fn intern(&mut self, f: &str) -> u32 {
        match self.ids.get(f) {
            Some(&id) => id,
            None => {
                let id = self.frames.len() as u32;
                self.frames.push(f.into());
                self.ids.insert(f.into(), id);
                id
            }
        }
    }

    /// Adds a stack given as interned frames (root first); its index for [`Folded::add_at`]
    /// (`None` for an empty stack or no weight, which are not kept).
    pub fn add_ids(&mut self, ids: &[u32], n: u64) -> Option<u32> {
        if n == 0 || ids.is_empty() {
            return None;
        }
        let i = match self.stacks.get(ids) {
            Some(&i) => i,
            None => {
                let i = self.counts.len() as u32;
                self.counts.push(0);
                self.stacks.insert(ids.into(), i);
                i
            }
        };
        self.counts[i as usize] += n;
        Some(i)
    }

    /// Adds `n` to the stack [`Folded::add_ids`] returned `i` for.
    pub fn add_at(&mut self, i: u32, n: u64) {
        if let Some(c) = self.counts.get_mut(i as usize) {
            *c += n;
        }
    }

    pub fn is_empty(&self) -> bool {
        self.stacks.is_empty()
    }

    /// Distinct stacks.
    pub fn len(&self) -> usize {
        self.stacks.len()
    }

    pub fn total(&self) -> u64 {
        self.counts.iter().sum()
    }

    fn texts(&self, ids: &[u32]) -> Vec<&str> {
        ids.iter().map(|&i| &*self.frames[i as usize]).collect()
    }

    /// Stacks as their frames' texts with their weights, in order.
    fn sorted(&self) -> Vec<(Vec<&str>, u64)> {
        let mut v: Vec<(Vec<&str>, u64)> = self
            .stacks
            .iter()
            .map(|(ids, &i)| (self.texts(ids), self.counts[i as usize]))
            .collect();
        v.sort_unstable();
        v
    }

    /// `a;b;c N` lines, sorted.
    pub fn lines(&self) -> Vec<String> {
        self.sorted()
            .into_iter()
            .map(|(s, n)| format!("{} {n}", s.join(";")))
            .collect()
    }

    /// Differential lines `stack BASE THIS` over the union of both stack sets (inferno's
    /// differential input: width from THIS, colour from the change).
    pub fn diff_lines(base: &Folded, this: &Folded) -> Vec<String> {
        let mut all: BTreeMap<Vec<&str>, (u64, u64)> = BTreeMap::new();
        for (s, n) in base.sorted() {
            all.entry(s).or_default().0 = n;
        }
        for (s, n) in this.sorted() {
            all.entry(s).or_default().1 = n;
        }
        all.into_iter()
            .map(|(s, (a, b))| format!("{} {a} {b}", s.join(";")))
            .collect()
    }
}

/// Folds the recording's records for one kind of flamegraph.
pub trait Folder {
    fn push(&mut self, rec: &Record);
    fn finish(self: Box<Self>) -> Folded;
}

/// Retransmit blame: the owner (from the correlator), the target, the reason.
#[derive(Default)]
pub struct RetransmitFolder {
    folded: Folded,
}

impl Folder for RetransmitFolder {
    fn push(&mut self, rec: &Record) {
        let Body::Retransmit(r) = &rec.body else {
            return;
        };
        let mut stack = vec![process_frame(r.owner_pid, &r.owner_comm)];
        match (&r.qp, &r.tcp) {
            (Some(qp), _) => {
                stack.push(frame(&qp.key.dev));
                stack.push(format!("QPN {:#x}", qp.key.qpn));
            }
            (None, Some(t)) => {
                stack.push(r.transport.name().to_string());
                stack.push(frame(&format!(
                    "{}->{}",
                    std::net::SocketAddr::new(t.saddr, t.sport),
                    std::net::SocketAddr::new(t.daddr, t.dport)
                )));
            }
            (None, None) => stack.push(r.transport.name().to_string()),
        }
        stack.push(frame(r.reason));
        self.folded.add(stack, 1);
    }

    fn finish(self: Box<Self>) -> Folded {
        self.folded
    }
}

/// Interns `frames` outermost first (records keep them innermost first) into `ids`, each label
/// with `suffix` and made safe as [`frame`] does. Names are shared with the symbol table, so a
/// name seen before is found by its address (the cache holds it, so the address stays its own).
fn push_outer_first(folded: &mut Folded, s: &mut Scratch, frames: &[Frame], suffix: &'static str) {
    for f in frames.iter().rev() {
        let key = (name_address(f), suffix.len());
        if let Some((_, id)) = s.seen.get(&key) {
            s.ids.push(*id);
            continue;
        }
        s.buf.clear();
        let label = f.label();
        if label.contains([';', '\n', '\r']) {
            s.buf.push_str(&frame(label));
        } else {
            s.buf.push_str(label);
        }
        s.buf.push_str(suffix);
        let id = folded.intern(&s.buf);
        s.seen.insert(key, (f.name.clone(), id));
        s.ids.push(id);
    }
}

/// The address of `f`'s name (0 for an unnamed frame): names are shared, so one address is one
/// text for as long as the name is kept alive.
fn name_address(f: &Frame) -> usize {
    f.name
        .as_ref()
        .map_or(0, |n| Arc::as_ptr(n).cast::<u8>() as usize)
}

/// A frame name (kept alive: its address is the cache's key) and its id.
type Seen = (Option<Arc<str>>, u32);

/// A folder's reused buffers, and the frames it has seen: (name's address or 0 for unnamed,
/// suffix length) -> (the name, kept alive, and its id).
#[derive(Default)]
struct Scratch {
    ids: Vec<u32>,
    buf: String,
    seen: FxHashMap<(usize, usize), Seen>,
    /// pid -> (comm, id of its process frame).
    procs: FxHashMap<u32, (crate::event::CompactString, u32)>,
}

impl Scratch {
    /// Starts a stack at `rec`'s process frame.
    fn start(&mut self, folded: &mut Folded, rec: &Record) {
        self.ids.clear();
        let id = match self.procs.get(&rec.pid) {
            Some((comm, id)) if *comm == rec.comm => *id,
            _ => {
                let id = folded.intern(&process_frame(rec.pid, &rec.comm));
                self.procs.insert(rec.pid, (rec.comm.clone(), id));
                id
            }
        };
        self.ids.push(id);
    }
}

/// Verbs calls: the caller's user stack, then the call.
#[derive(Default)]
pub struct VerbsFolder {
    folded: Folded,
    scratch: Scratch,
}

impl Folder for VerbsFolder {
    fn push(&mut self, rec: &Record) {
        let Body::VerbsCall(v) = &rec.body else {
            return;
        };
        let s = &mut self.scratch;
        s.start(&mut self.folded, rec);
        push_outer_first(&mut self.folded, s, &v.stack, "");
        s.ids.push(self.folded.intern(&frame(&v.func)));
        self.folded.add_ids(&s.ids, 1);
    }

    fn finish(self: Box<Self>) -> Folded {
        self.folded
    }
}

/// On-CPU samples: user stack, then the kernel stack it was in (if any).
#[derive(Default)]
pub struct CpuFolder {
    folded: Folded,
    scratch: Scratch,
    /// A sample's stack as its process frame's id and its frames' name addresses (user frames,
    /// [`usize::MAX`], kernel frames) -> the stack's index in `folded`. A million samples repeat
    /// a few thousand stacks: a repeat is one lookup instead of one per frame. Every address in
    /// it is of a name `scratch` keeps alive, so it cannot be reused for another text.
    memo: FxHashMap<Box<[usize]>, u32>,
    signature: Vec<usize>,
}

impl Folder for CpuFolder {
    fn push(&mut self, rec: &Record) {
        let Body::CpuSample(c) = &rec.body else {
            return;
        };
        let s = &mut self.scratch;
        s.start(&mut self.folded, rec);
        let sig = &mut self.signature;
        sig.clear();
        sig.push(s.ids[0] as usize);
        sig.extend(c.user.iter().map(name_address));
        sig.push(usize::MAX);
        sig.extend(c.kernel.iter().map(name_address));
        if let Some(&i) = self.memo.get(sig.as_slice()) {
            self.folded.add_at(i, 1);
            return;
        }
        push_outer_first(&mut self.folded, s, &c.user, "");
        push_outer_first(&mut self.folded, s, &c.kernel, "_[k]");
        if let Some(i) = self.folded.add_ids(&s.ids, 1) {
            self.memo.insert(sig.as_slice().into(), i);
        }
    }

    fn finish(self: Box<Self>) -> Folded {
        self.folded
    }
}

/// The folder for `kind`.
pub fn folder(kind: Kind) -> Box<dyn Folder> {
    match kind {
        Kind::Retransmits => Box::new(RetransmitFolder::default()),
        Kind::Verbs => Box::new(VerbsFolder::default()),
        Kind::Cpu => Box::new(CpuFolder::default()),
    }
}

#[cfg(test)]
mod tests;
