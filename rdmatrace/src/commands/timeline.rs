//! `rdmatrace timeline FILE... -o OUT [--format perfetto|json]`: recordings as a timeline for
//! Perfetto (native protobuf, default) or Chrome-JSON viewers. Several files (one per host) share
//! one UTC time axis. No privileges needed.

use std::{path::PathBuf, process::ExitCode};

use crate::{
    correlate::filter::Filter,
    replay,
    sinks::timeline::TimelineSink,
    timeline::{chrome, perfetto, TimelineBuilder},
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
    let mut builder = TimelineBuilder::new();
    let mut replays = Vec::new();
    for path in &cfg.inputs {
        let (_, _, replayed) = replay::file(path, Filter::default(), |h| {
            TimelineSink::new(&mut builder, &h.hostname, &h.kernel, h.clock_offset_ns)
        })?;
        replays.push(replayed);
    }
    let tl = builder.finish();
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
