//! `rdmatrace timeline FILE... -o OUT [--format perfetto|json]`: recordings as a timeline for
//! Perfetto (native protobuf, default) or Chrome-JSON viewers. Several files (one per host)
//! share one UTC time axis: each host's clock is corrected from the connections paired across
//! the recordings (as `report` does), the correction is stated on its track, and each paired
//! connection's handshake is joined by a flow arrow. No privileges needed.

use std::{path::PathBuf, process::ExitCode};

use crate::{
    correlate::{filter::Filter, fleet::Fleet},
    recording::reader::Recording,
    replay,
    sinks::timeline::TimelineSink,
    timeline::{chrome, perfetto, Timeline, TimelineBuilder},
};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimelineFormat {
    /// Perfetto TrackEvent protobuf (open in ui.perfetto.dev or trace_processor).
    Perfetto,
    /// Chrome trace-event JSON.
    Json,
}

#[derive(Clone, Debug)]
pub struct TimelineConfig {
    pub inputs: Vec<PathBuf>,
    /// `-` for stdout.
    pub output: PathBuf,
    pub format: TimelineFormat,
}

pub fn run(cfg: &TimelineConfig) -> anyhow::Result<ExitCode> {
    let fleet = if cfg.inputs.len() > 1 {
        Some(super::report::build(&cfg.inputs)?.0)
    } else {
        None
    };
    let mut builder = TimelineBuilder::new();
    let mut replays = Vec::new();
    for (i, path) in cfg.inputs.iter().enumerate() {
        let mut rec = Recording::open(path)?;
        let clock = fleet.as_ref().map(|f| &f.clocks[i]);
        if let Some(c) = clock {
            rec.header.clock_offset_ns = rec.header.clock_offset_ns.saturating_add(c.offset_ns);
        }
        let h = rec.header.clone();
        let sink = TimelineSink::new(&mut builder, &h.hostname, &h.kernel, h.clock_offset_ns);
        let host = sink.host();
        let (sink, replayed) = replay::recording(&rec, Filter::default(), sink);
        replayed.warn(path);
        sink?;
        if let (Some(c), true) = (clock, i > 0) {
            let note = if c.aligned {
                format!(
                    "clock {:+.3} s ± {:.3} s",
                    c.offset_ns as f64 / 1e9,
                    c.uncertainty_ns as f64 / 1e9
                )
            } else {
                "clock not aligned".to_string()
            };
            builder.clock_note(host, note);
        }
        replays.push(replayed);
    }
    let mut tl = builder.finish();
    if let Some(f) = &fleet {
        handshakes(&mut tl, f);
    }
    let bytes = match cfg.format {
        TimelineFormat::Perfetto => perfetto::encode(&tl),
        TimelineFormat::Json => {
            let mut v = serde_json::to_vec(&chrome::to_json(&tl))?;
            v.push(b'\n');
            v
        }
    };
    if super::write_output(&cfg.output, &bytes)? {
        eprintln!(
            "rdmatrace: wrote {} ({} tracks, {} events, {} bytes)",
            cfg.output.display(),
            tl.tracks.len(),
            tl.events.len(),
            bytes.len()
        );
    }
    Ok(replay::exit_code(&replays))
}

/// A flow arrow per paired connection across hosts, from the end that reached RTR first.
fn handshakes(tl: &mut Timeline, f: &Fleet) {
    for c in f.connections.iter().filter(|c| c.paired()) {
        let mut ends: Vec<_> = c
            .ends
            .iter()
            .filter_map(|e| {
                let q = f.qp(e);
                let rtr = q.rtr_ns?;
                Some((e.host, q.owner_pid, q.key.clone(), f.aligned(e.host, rtr)))
            })
            .collect();
        if ends.len() != 2 {
            continue;
        }
        ends.sort_by_key(|e| e.3);
        let name = format!("{} handshake", c.id);
        tl.flow(&name, &ends[0], &ends[1]);
    }
}
