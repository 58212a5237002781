//! `rdmatrace report FILE [--json]`: the post-mortem of a recording, without privileges:
//! processes with verdicts, QP table, retransmit blame, anomalies in time order.

use std::{path::Path, process::ExitCode};

use super::replay::Replay;
use crate::{
    correlate::analysis::Analyzer,
    sinks::report::{self, Source},
};

pub fn run(path: &Path, json: bool) -> anyhow::Result<ExitCode> {
    let replay = Replay::open(path)?;
    let mut analyzer = Analyzer::new();
    let replayed = replay.run(|record| analyzer.push(record));
    let src = Source {
        hostname: replay.header().hostname.clone(),
        kernel: replay.header().kernel.clone(),
    };
    let report = analyzer.finish();
    if json {
        println!("{}", report::to_json(&report, &src));
    } else {
        print!("{}", report::text(&report, &src));
    }
    replayed.warn(path);
    Ok(ExitCode::SUCCESS)
}
