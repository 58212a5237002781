//! `flamegraph`'s input side: one recording's records folded into stacks of one kind
//! (retransmit blame, verbs callers, CPU samples).

use std::io;

use crate::{
    correlate::Correlator,
    event::Record,
    flame::{self, Folded, Folder, Kind},
    sinks::Sink,
};

pub struct FlameSink {
    folder: Option<Box<dyn Folder>>,
    /// The stacks, once finished.
    pub folded: Folded,
}

impl FlameSink {
    pub fn new(kind: Kind) -> FlameSink {
        FlameSink {
            folder: Some(flame::folder(kind)),
            folded: Folded::default(),
        }
    }
}

impl Sink for FlameSink {
    fn record(&mut self, rec: &Record, _state: &Correlator) -> io::Result<()> {
        if let Some(f) = self.folder.as_mut() {
            f.push(rec);
        }
        Ok(())
    }

    fn finish(&mut self, _state: &Correlator) -> io::Result<()> {
        if let Some(f) = self.folder.take() {
            self.folded = f.finish();
        }
        Ok(())
    }
}
