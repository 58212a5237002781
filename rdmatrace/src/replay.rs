//! Replaying a recording: every command that reads recordings (`trace --input`, `report`,
//! `timeline`, `flamegraph`, ...) calls [`file`], with one policy for damage: intact chunks are
//! used, each damaged one is reported on stderr with its offset, and the command exits with
//! [`DAMAGED_EXIT`]. An incomplete tail alone (a recorder killed with -9) is normal.

use std::{io, path::Path, process::ExitCode};

use anyhow::Context as _;

use crate::{
    clock::ClockAnchor,
    correlate::filter::Filter,
    recording::{
        reader::{ChunkProblem, Recording},
        Header,
    },
    sinks::Sink,
    stage::Stage,
};

/// Exit status of a command that read a damaged recording (after using its intact parts).
pub const DAMAGED_EXIT: u8 = 2;

/// What a replay met besides the records.
#[derive(Debug, Default)]
pub struct Replayed {
    /// Chunk problems, in file order.
    pub problems: Vec<ChunkProblem>,
    /// Records that did not decode (recorded by a newer rdmatrace?).
    pub undecodable: u64,
    /// Why the first of them did not.
    pub first_undecodable: Option<String>,
}

impl Replayed {
    /// Tells stderr about damage and undecodable records of the file at `path`.
    pub fn warn(&self, path: &Path) {
        for p in &self.problems {
            eprintln!("rdmatrace: {}: {p}", path.display());
        }
        if let Some(first) = &self.first_undecodable {
            eprintln!(
                "rdmatrace: {}: {} records could not be decoded (recorded by a newer rdmatrace? first: {first})",
                path.display(),
                self.undecodable
            );
        }
    }

    /// Whether the file is damaged (an incomplete tail alone is not damage).
    pub fn damaged(&self) -> bool {
        self.problems
            .iter()
            .any(|p| !matches!(p, ChunkProblem::Truncated { .. }))
    }
}

/// Replays an opened recording through a fresh stage into `sink`: the one replay every
/// command, test, benchmark and fuzz target uses. Returns the finished sink (or the sink's
/// output error) and what the replay met; reports nothing itself.
pub fn recording<S: Sink>(rec: &Recording, filter: Filter, sink: S) -> (io::Result<S>, Replayed) {
    let anchor = ClockAnchor::fixed(i128::from(rec.header.clock_offset_ns));
    let mut stage = Stage::new(anchor, filter, sink);
    if let Err(e) = stage.start() {
        return (Err(e), Replayed::default());
    }
    let problems = rec.replay(|entry| stage.entry(entry));
    let replayed = Replayed {
        problems,
        undecodable: stage.decode_errors,
        first_undecodable: stage.first_decode_error.as_ref().map(ToString::to_string),
    };
    (stage.finish(), replayed)
}

/// Replays the recording at `path` into the sink `make_sink` makes from its header, and
/// reports on stderr what could not be read (each damaged chunk with its offset). Returns the
/// finished sink, the header and what the replay met. Whole-file errors (not a recording,
/// unreadable header) and output errors are errors.
pub fn file<S: Sink>(
    path: &Path,
    filter: Filter,
    make_sink: impl FnOnce(&Header) -> S,
) -> anyhow::Result<(S, Header, Replayed)> {
    let rec = Recording::open(path)?;
    let sink = make_sink(&rec.header);
    let (sink, replayed) = recording(&rec, filter, sink);
    replayed.warn(path);
    let sink = sink.context("cannot write output")?;
    Ok((sink, rec.header, replayed))
}

/// The exit status after replaying files: [`DAMAGED_EXIT`] when any was damaged.
pub fn exit_code<'a>(replays: impl IntoIterator<Item = &'a Replayed>) -> ExitCode {
    if replays.into_iter().any(Replayed::damaged) {
        ExitCode::from(DAMAGED_EXIT)
    } else {
        ExitCode::SUCCESS
    }
}
