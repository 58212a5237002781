//! `rdmatrace report FILE [--json]`: the post-mortem of a recording, without privileges:
//! processes with verdicts, QP table, retransmit blame, anomalies in time order.

use std::{path::Path, process::ExitCode};

use crate::{
    correlate::filter::Filter,
    replay,
    sinks::report::{ReportSink, Source},
};

pub fn run(path: &Path, json: bool) -> anyhow::Result<ExitCode> {
    let (_, _, replayed) = replay::file(path, Filter::default(), |h| {
        let src = Source {
            hostname: h.hostname.clone(),
            kernel: h.kernel.clone(),
        };
        ReportSink::new(std::io::stdout(), json, src)
    })?;
    Ok(replay::exit_code([&replayed]))
}
