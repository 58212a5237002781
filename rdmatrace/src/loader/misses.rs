//! Program runs the kernel skipped. It does not start a BPF program on a CPU where that program
//! (for kprobe programs: any kprobe or tracepoint program, `bpf_prog_active`) is already
//! running, and counts each skip in the program's `recursion_misses`; a kprobe hit while another
//! kprobe's handler runs is dropped before any program and counted on the kprobe, read from its
//! perf link. A skipped run of a counting program (per-QP traffic, socket bytes) is a packet or
//! call missing from its totals, of another program an event missing: the live commands report
//! them at exit beside the ring buffer's losses.

use std::{collections::BTreeMap, os::fd::AsFd as _};

use super::{
    btfprog::{kprobe_missed, recursion_misses},
    plink::Held,
    Tracer,
};

impl Tracer {
    /// Skipped runs so far of every loaded program the kernel counts them for, by program
    /// name (the runs of one program loaded for several functions summed); `None` when the
    /// kernel counts none (before Linux 5.12).
    pub fn missed_runs(&self) -> Option<BTreeMap<String, u64>> {
        let mut out = BTreeMap::new();
        let mut known = false;
        for (name, prog) in self.ebpf.programs() {
            let Ok(fd) = prog.fd() else { continue };
            if let Some(n) = recursion_misses(fd.as_fd()) {
                known = true;
                *out.entry(name.to_string()).or_default() += n;
            }
        }
        for (name, fd) in self.typed.iter().flat_map(|t| t.programs()) {
            if let Some(n) = recursion_misses(fd) {
                known = true;
                *out.entry(name.to_string()).or_default() += n;
            }
        }
        for (name, held) in &self.links.links {
            let Held::Fd(fd) = held else { continue };
            if let Some(n) = kprobe_missed(fd.as_fd()) {
                known = true;
                *out.entry(name.to_string()).or_default() += n;
            }
        }
        known.then_some(out)
    }
}
