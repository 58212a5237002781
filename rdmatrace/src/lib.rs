//! rdmatrace: eBPF tracing and fault localization for RDMA.
//!
//! Data flows one way: kernel programs -> `source` (ring buffer) -> `decode` (pure) ->
//! `correlate` (pure) -> `sinks`. `loader` and `collect` put the programs in the kernel;
//! `commands` wire the flow for each subcommand; `cli` is the only place that knows clap.

pub mod cli;
pub mod clock;
pub mod collect;
pub mod commands;
pub mod config;
pub mod correlate;
pub mod decode;
pub mod event;
pub mod flame;
#[doc(hidden)]
pub mod fuzzing;
pub mod loader;
pub mod netlink;
pub mod pipeline;
pub mod ports;
pub mod recording;
pub mod sample;
pub mod sinks;
pub mod source;
pub mod symbolize;
pub mod timeline;
