//! Plain config structs: what the CLI (cli.rs) turns its arguments into. The core never sees clap.

use std::{path::PathBuf, time::Duration};

use crate::correlate::filter::Filter;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Text,
    Jsonl,
}

#[derive(Clone, Debug)]
pub struct TraceConfig {
    pub filter: Filter,
    pub format: Format,
    pub duration: Option<Duration>,
    pub probing: Probing,
}

/// How every live command loads the probes (`ProbeArgs`).
#[derive(Clone, Debug)]
pub struct Probing {
    pub ringbuf_bytes: u32,
    pub btf_dir: PathBuf,
    /// Bind per-QP counters over rdma netlink (undone at exit).
    pub bind_qp_counters: bool,
    /// Probe areas switched off (`--no-probe AREA`).
    pub no_probe: Vec<String>,
    /// Typed programs (fentry, tp_btf) in place of kprobes and raw tracepoints where the
    /// kernel takes them (off: `--no-typed-probes`).
    pub typed: bool,
}
