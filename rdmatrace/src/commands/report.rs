//! `rdmatrace report FILE [--json]`: the post-mortem of a recording, without privileges:
//! processes with verdicts, QP table, retransmit blame, anomalies in time order.

use std::{path::Path, process::ExitCode};

use crate::{
    clock::ClockAnchor,
    correlate::{analysis::Analyzer, Correlator},
    decode::decode,
    recording::{reader::Recording, Entry},
    sinks::report::{self, Source},
};

pub fn run(path: &Path, json: bool) -> anyhow::Result<ExitCode> {
    let rec = Recording::open(path)?;
    let anchor = ClockAnchor::fixed(i128::from(rec.header.clock_offset_ns));
    let mut correlator = Correlator::new();
    let mut analyzer = Analyzer::new();
    let mut undecodable = 0u64;
    let problems = rec.replay(|entry| {
        let record = match entry {
            Entry::Event(bytes) => match decode(bytes, &anchor) {
                Ok(r) => r,
                Err(_) => {
                    undecodable += 1;
                    return;
                }
            },
            Entry::Lost { ts_ns, count } => crate::event::Record::lost(count, ts_ns, &anchor),
        };
        let mut record = record;
        correlator.observe(&mut record);
        analyzer.push(&record);
    });
    let src = Source {
        hostname: rec.header.hostname.clone(),
        kernel: rec.header.kernel.clone(),
    };
    let report = analyzer.finish();
    if json {
        println!("{}", report::to_json(&report, &src));
    } else {
        print!("{}", report::text(&report, &src));
    }
    for p in &problems {
        eprintln!("rdmatrace: {}: {p}", path.display());
    }
    if undecodable > 0 {
        eprintln!("rdmatrace: {undecodable} records could not be decoded (recorded by a newer rdmatrace?)");
    }
    Ok(ExitCode::SUCCESS)
}
