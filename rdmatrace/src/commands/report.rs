//! `rdmatrace report FILE... [--json]`: the post-mortem of recordings, without privileges:
//! processes with verdicts, QP table, retransmit blame, anomalies in time order. With several
//! files (one per host): both ends of each connection, the hosts' clocks aligned, and faults
//! localized to a direction and a host.

use std::{path::PathBuf, process::ExitCode};

use crate::{
    correlate::{
        filter::Filter,
        fleet::{Fleet, HostInput},
    },
    replay,
    sinks::{
        fleet::{self, AnalysisSink},
        report::{ReportSink, Source},
    },
};

pub fn run(paths: &[PathBuf], json: bool) -> anyhow::Result<ExitCode> {
    if let [path] = paths {
        let (_, _, replayed) = replay::file(path, Filter::default(), |h| {
            let src = Source {
                hostname: h.hostname.clone(),
                kernel: h.kernel.clone(),
            };
            ReportSink::new(std::io::stdout(), json, src)
        })?;
        return Ok(replay::exit_code([&replayed]));
    }
    let (fleet, kernels, replays) = build(paths)?;
    if json {
        println!("{}", fleet::to_json(&fleet, &kernels));
    } else {
        print!("{}", fleet::text(&fleet, &kernels));
    }
    Ok(replay::exit_code(&replays))
}

/// Analyses each recording and joins them: the fleet, each host's kernel, and how each
/// replay went.
pub fn build(paths: &[PathBuf]) -> anyhow::Result<(Fleet, Vec<String>, Vec<replay::Replayed>)> {
    let mut hosts = Vec::new();
    let mut kernels = Vec::new();
    let mut replays = Vec::new();
    for path in paths {
        let (sink, header, replayed) =
            replay::file(path, Filter::default(), |_| AnalysisSink::default())?;
        hosts.push(HostInput {
            host: header.hostname.clone(),
            clock_offset_ns: header.clock_offset_ns,
            report: sink.report.unwrap_or_default(),
        });
        kernels.push(header.kernel);
        replays.push(replayed);
    }
    Ok((Fleet::build(hosts), kernels, replays))
}
