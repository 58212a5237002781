//! `rdmatrace export FILE... -o DIR [--format parquet]`: recordings (one per host) as Parquet
//! tables (docs/parquet.md), paired and clock-aligned as `report` does, for an existing
//! analytics engine (DuckDB, Spark, ClickHouse). No privileges needed.

use std::{path::Path, path::PathBuf, process::ExitCode};

use anyhow::Context as _;

use crate::{
    correlate::filter::Filter,
    recording::reader::Recording,
    replay,
    sinks::parquet::{events_fields, tables, EventsSink, TableFile},
};

pub fn run(files: &[PathBuf], dir: &Path) -> anyhow::Result<ExitCode> {
    let (fleet, kernels, _) = super::report::build(files)?;
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let cannot = || format!("cannot write the tables in {}", dir.display());
    let mut events = TableFile::create(dir, "events", events_fields()).with_context(cannot)?;
    let mut replays = Vec::new();
    let mut rows = 0;
    for (i, path) in files.iter().enumerate() {
        let mut rec = Recording::open(path)?;
        rec.header.clock_offset_ns = rec
            .header
            .clock_offset_ns
            .saturating_add(fleet.clocks[i].offset_ns);
        let sink = EventsSink::new(&fleet.hosts[i].host, events);
        let (sink, replayed) = replay::recording(&rec, Filter::default(), sink);
        replayed.warn(path);
        let sink = sink.with_context(cannot)?;
        rows += sink.written;
        events = sink.into_file().with_context(cannot)?;
        replays.push(replayed);
    }
    events.close().with_context(cannot)?;
    tables::write(dir, &fleet, &kernels).with_context(cannot)?;
    eprintln!(
        "rdmatrace: wrote {} ({} hosts, {rows} events, {} QPs, {} connections, {} faults): \
         events, hosts, processes, qps, connections, retransmits, faults (.parquet)",
        dir.display(),
        fleet.hosts.len(),
        fleet
            .hosts
            .iter()
            .map(|h| h.report.qps.len())
            .sum::<usize>(),
        fleet.connections.len(),
        fleet.faults.len()
    );
    Ok(replay::exit_code(&replays))
}
