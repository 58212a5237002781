//! One file per probe area, mirroring `rdmatrace-ebpf/src/probes/<area>.rs`: which kernel points
//! the area's programs attach to, and which offsets it needs from BTF.

use rdmatrace_common::config::ProbeConfig;

use crate::btf::{BtfError, KernelBtf};

pub mod async_event;
pub mod cm;
pub mod cq;
pub mod mlx5;
pub mod profile;
pub mod qp;
pub mod queues;
pub mod res;
pub mod rxe;
pub mod sched;
pub mod tcp;
pub mod umem;
pub mod verbs;

/// How a program attaches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hook {
    Kprobe,
    Kretprobe,
    /// Raw tracepoint (`raw_tp/<name>`): the tracepoint's own arguments, attached by name
    /// (`BPF_RAW_TRACEPOINT_OPEN`); needs neither tracefs nor the kernel's BTF.
    RawTracepoint,
    /// Uprobe at the entry of the exported function `target` of the shared library `lib`
    /// (found on this host), with `cookie` for `bpf_get_attach_cookie`.
    Uprobe {
        lib: &'static str,
        cookie: u64,
    },
    /// Perf event on the software CPU clock of every online CPU (frequency from the load
    /// options).
    PerfCpuClock,
    /// fentry on a module's function (BTF trampoline): loaded and attached by
    /// `loader::typed` in place of kprobes, after the attach pass; never in an area's list.
    Fentry,
    /// tp_btf on a kernel tracepoint (BTF-typed raw tracepoint): loaded and attached by
    /// `loader::typed` in place of raw tracepoints, after the attach pass; never in an area's
    /// list.
    TpBtf,
}

impl Hook {
    /// A kprobe or a kretprobe (a `perf_event_open` of the kprobe PMU).
    pub fn is_kprobe(self) -> bool {
        matches!(self, Hook::Kprobe | Hook::Kretprobe)
    }
}

impl std::fmt::Display for Hook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Hook::Kprobe => "kprobe",
            Hook::Kretprobe => "kretprobe",
            Hook::RawTracepoint => "raw_tp",
            Hook::Uprobe { .. } => "uprobe",
            Hook::PerfCpuClock => "perf_event",
            Hook::Fentry => "fentry",
            Hook::TpBtf => "tp_btf",
        })
    }
}

/// One program and where it goes.
#[derive(Clone, Copy, Debug)]
pub struct ProbeSpec {
    /// Program (function) name in the eBPF object.
    pub program: &'static str,
    pub hook: Hook,
    /// Kernel function or tracepoint.
    pub target: &'static str,
    pub role: Role,
}

/// When a probe is wanted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// On every kernel; not attaching is reported as the probe being off.
    Always,
    /// A fallback, attached only when the named program of the same area is off on this kernel
    /// (e.g. a kretprobe standing in for a tracepoint that older kernels lack).
    InsteadOf(&'static str),
    /// Only where the kernel has the function (e.g. a stable-kernel backport that moved part of
    /// the work into a new function); its absence elsewhere is normal, not a probe off.
    WherePresent,
}

/// A group of programs that stand or fall together on one set of BTF offsets.
pub struct Area {
    pub name: &'static str,
    /// Whether this area is about RDMA (decides the "no RDMA probe point here" message).
    pub rdma: bool,
    pub probes: &'static [ProbeSpec],
    /// Fills this area's fields of the config; an error turns the whole area off, with its reason.
    /// Returned strings are notes about optional fields that were left unresolved.
    pub resolve: fn(&mut KernelBtf, &mut ProbeConfig) -> Result<Vec<String>, BtfError>,
}

/// Every area on by default, in attach order ([`profile::AREA`] is added on request).
pub const AREAS: &[Area] = &[
    qp::AREA,
    res::AREA,
    umem::AREA,
    queues::AREA,
    async_event::AREA,
    async_event::DEV_AREA,
    cm::AREA,
    cq::AREA,
    rxe::AREA,
    cq::RXE_AREA,
    mlx5::AREA,
    tcp::AREA,
    sched::AREA,
    verbs::AREA,
];
