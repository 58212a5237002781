//! rdmatrace: eBPF tracing and fault localization for RDMA.
//!
//! Data flows one way: kernel programs -> `source` (ring buffer) or a recording (`replay`) ->
//! `stage` (decode -> stack names -> `correlate` -> filter) -> a `sinks::Sink`. `loader` and
//! `collect` put the programs in the kernel; `commands` pick the sink for each subcommand;
//! `cli` is the only place that knows clap.

pub mod btf;
pub mod cli;
pub mod clock;
pub mod collect;
pub mod commands;
pub mod config;
pub mod container;
pub mod correlate;
pub mod decode;
pub mod environ;
pub mod event;
pub mod exporter;
pub mod flame;
pub mod flight;
pub mod format;
#[doc(hidden)]
pub mod fuzzing;
pub mod gids;
pub mod loader;
pub mod netlink;
pub mod pending;
pub mod ports;
pub mod recording;
pub mod replay;
pub mod sample;
pub mod sinks;
pub mod source;
pub mod stage;
pub mod symbolize;
#[doc(hidden)]
pub mod testing;
pub mod timeline;
pub mod wire;
