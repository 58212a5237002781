//! One file per subcommand: each wires loader, source, pipeline and sinks for its job.
pub mod doctor;
pub mod flamegraph;
pub mod live;
pub mod record;
pub mod replay;
pub mod report;
pub mod timeline;
pub mod trace;
pub mod verdict;
