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

use std::collections::BTreeMap;

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

/// Stacks (root first) and their weights; ordered, so output is deterministic.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Folded {
    pub stacks: BTreeMap<Vec<String>, u64>,
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
        if n > 0 && !stack.is_empty() {
            *self.stacks.entry(stack).or_default() += n;
        }
    }

    pub fn is_empty(&self) -> bool {
        self.stacks.is_empty()
    }

    pub fn total(&self) -> u64 {
        self.stacks.values().sum()
    }

    /// `a;b;c N` lines, sorted.
    pub fn lines(&self) -> Vec<String> {
        self.stacks
            .iter()
            .map(|(s, n)| format!("{} {n}", s.join(";")))
            .collect()
    }

    /// Differential lines `stack BASE THIS` over the union of both stack sets (inferno's
    /// differential input: width from THIS, colour from the change).
    pub fn diff_lines(base: &Folded, this: &Folded) -> Vec<String> {
        let mut all: BTreeMap<&Vec<String>, (u64, u64)> = BTreeMap::new();
        for (s, n) in &base.stacks {
            all.entry(s).or_default().0 = *n;
        }
        for (s, n) in &this.stacks {
            all.entry(s).or_default().1 = *n;
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

/// Frames outermost first, as folded stacks read (records keep them innermost first).
fn outer_first<'a>(frames: &'a [Frame], suffix: &'a str) -> impl Iterator<Item = String> + 'a {
    frames
        .iter()
        .rev()
        .map(move |f| frame(&format!("{}{suffix}", f.label())))
}

/// Verbs calls: the caller's user stack, then the call.
#[derive(Default)]
pub struct VerbsFolder {
    folded: Folded,
}

impl Folder for VerbsFolder {
    fn push(&mut self, rec: &Record) {
        let Body::VerbsCall(v) = &rec.body else {
            return;
        };
        let mut stack = vec![process_frame(rec.pid, &rec.comm)];
        stack.extend(outer_first(&v.stack, ""));
        stack.push(frame(&v.func));
        self.folded.add(stack, 1);
    }

    fn finish(self: Box<Self>) -> Folded {
        self.folded
    }
}

/// On-CPU samples: user stack, then the kernel stack it was in (if any).
#[derive(Default)]
pub struct CpuFolder {
    folded: Folded,
}

impl Folder for CpuFolder {
    fn push(&mut self, rec: &Record) {
        let Body::CpuSample(c) = &rec.body else {
            return;
        };
        let mut stack = vec![process_frame(rec.pid, &rec.comm)];
        stack.extend(outer_first(&c.user, ""));
        stack.extend(outer_first(&c.kernel, "_[k]"));
        self.folded.add(stack, 1);
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
