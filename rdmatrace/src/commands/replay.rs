//! Replaying a recording through the correlator, for the commands that post-process files
//! (`timeline`, `flamegraph`): decode every entry, annotate it, hand it over, and say afterwards
//! what could not be read.

use std::path::Path;

use crate::{
    clock::ClockAnchor,
    correlate::Correlator,
    decode::decode,
    event::Record,
    recording::{reader::Recording, Entry, Header},
    symbolize::Symbols,
};

/// A recording opened for replay.
pub struct Replay {
    rec: Recording,
}

/// What a replay saw besides the records.
pub struct Replayed {
    /// Damaged chunks, as messages for stderr.
    pub problems: Vec<String>,
    /// Records that did not decode (recorded by a newer rdmatrace?).
    pub undecodable: u64,
}

impl Replayed {
    /// Tells stderr about damage, once per file.
    pub fn warn(&self, path: &Path) {
        for p in &self.problems {
            eprintln!("rdmatrace: {}: {p}", path.display());
        }
        if self.undecodable > 0 {
            eprintln!(
                "rdmatrace: {}: {} records could not be decoded (recorded by a newer rdmatrace?)",
                path.display(),
                self.undecodable
            );
        }
    }
}

impl Replay {
    pub fn open(path: &Path) -> anyhow::Result<Replay> {
        Ok(Replay {
            rec: Recording::open(path)?,
        })
    }

    /// A recording already in memory (benchmarks, fuzzing).
    pub fn from_bytes(data: Vec<u8>) -> anyhow::Result<Replay> {
        Ok(Replay {
            rec: Recording::from_bytes(data)?,
        })
    }

    pub fn header(&self) -> &Header {
        &self.rec.header
    }

    /// Calls `f` with every correlated record, in file order.
    pub fn run(&self, mut f: impl FnMut(&Record)) -> Replayed {
        let anchor = ClockAnchor::fixed(i128::from(self.rec.header.clock_offset_ns));
        let mut correlator = Correlator::new();
        let mut symbols = Symbols::default();
        let mut undecodable = 0u64;
        let problems = self.rec.replay(|entry| {
            let mut record = match entry {
                Entry::Event(bytes) => match decode(bytes, &anchor) {
                    Ok(mut r) => {
                        symbols.annotate(&mut r);
                        r
                    }
                    Err(_) => {
                        undecodable += 1;
                        return;
                    }
                },
                Entry::Lost { ts_ns, count, cpu } => Record::lost(count, cpu, ts_ns, &anchor),
                Entry::Symbol { pid, addr, name } => {
                    symbols.insert(pid, addr, name);
                    return;
                }
            };
            correlator.observe(&mut record);
            f(&record);
        });
        Replayed {
            problems: problems.iter().map(ToString::to_string).collect(),
            undecodable,
        }
    }
}
