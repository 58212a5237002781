//! Program runs the kernel skipped. It does not start a BPF program on a CPU where that program
//! (for kprobe programs: any kprobe or tracepoint program, `bpf_prog_active`) is already
//! running, and counts each skip in the program's `recursion_misses`; a kprobe hit while another
//! kprobe's handler runs is dropped before any program and counted on the kprobe, read from its
//! perf link. A skipped run of a counting program (per-QP traffic, socket bytes) is a packet or
//! call missing from its totals, of another program an event missing: the live commands report
//! them at exit beside the ring buffer's losses.

use std::{
    collections::BTreeMap,
    os::fd::{AsFd as _, OwnedFd},
};

use super::{
    btfprog::{kprobe_missed, recursion_misses},
    plink::Held,
    Tracer,
};

/// What a count is read from.
enum Source {
    /// A program: its `recursion_misses`.
    Program,
    /// A kprobe's perf link: its `missed`.
    KprobeLink,
}

/// The skipped-run counters of a tracer's programs, on descriptors of its own (duplicated), so
/// that they can be read beside the live loop, e.g. by `serve` for its metrics.
pub struct MissedRuns {
    fds: Vec<(String, OwnedFd, Source)>,
}

impl MissedRuns {
    /// Skipped runs so far, by program name (the runs of one program loaded for several
    /// functions summed); `None` when the kernel counts none (before Linux 5.12).
    pub fn read(&self) -> Option<BTreeMap<String, u64>> {
        let mut out = BTreeMap::new();
        let mut known = false;
        for (name, fd, source) in &self.fds {
            let n = match source {
                Source::Program => recursion_misses(fd.as_fd()),
                Source::KprobeLink => kprobe_missed(fd.as_fd()),
            };
            if let Some(n) = n {
                known = true;
                *out.entry(name.clone()).or_default() += n;
            }
        }
        known.then_some(out)
    }
}

impl Tracer {
    /// The skipped-run counters of every loaded program and kprobe link (descriptors that
    /// cannot be duplicated are left out).
    pub fn missed_reader(&self) -> MissedRuns {
        let mut fds = Vec::new();
        for (name, prog) in self.ebpf.programs() {
            if let Ok(Ok(fd)) = prog.fd().map(|f| f.as_fd().try_clone_to_owned()) {
                fds.push((name.to_string(), fd, Source::Program));
            }
        }
        for (name, fd) in self.typed.iter().flat_map(|t| t.programs()) {
            if let Ok(fd) = fd.try_clone_to_owned() {
                fds.push((name.to_string(), fd, Source::Program));
            }
        }
        for (name, held) in &self.links.links {
            if let Held::Fd(fd) = held {
                if let Ok(fd) = fd.try_clone() {
                    fds.push((name.to_string(), fd, Source::KprobeLink));
                }
            }
        }
        MissedRuns { fds }
    }

    /// Skipped runs so far (see [`MissedRuns::read`]).
    pub fn missed_runs(&self) -> Option<BTreeMap<String, u64>> {
        self.missed_reader().read()
    }
}
