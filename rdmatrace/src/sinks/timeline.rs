//! `timeline`'s input side: one host's records into a shared [`TimelineBuilder`] (one sink per
//! recording, all on one UTC axis), with the analysis' anomalies as instants at the end.

use std::io;

use crate::{
    correlate::{analysis::Analyzer, Correlator},
    event::Record,
    sinks::Sink,
    timeline::TimelineBuilder,
};

pub struct TimelineSink<'a> {
    builder: &'a mut TimelineBuilder,
    host: usize,
    analyzer: Analyzer,
}

impl<'a> TimelineSink<'a> {
    /// Starts host `name` in `builder`.
    pub fn new(
        builder: &'a mut TimelineBuilder,
        name: &str,
        kernel: &str,
        clock_offset_ns: i64,
    ) -> TimelineSink<'a> {
        let host = builder.host(name, kernel, clock_offset_ns);
        TimelineSink {
            builder,
            host,
            analyzer: Analyzer::new(),
        }
    }
}

impl TimelineSink<'_> {
    /// This sink's host index in the builder.
    pub fn host(&self) -> usize {
        self.host
    }
}

impl Sink for TimelineSink<'_> {
    fn record(&mut self, rec: &Record, state: &Correlator) -> io::Result<()> {
        self.analyzer.push(rec, state);
        self.builder.push(self.host, rec, state);
        Ok(())
    }

    fn finish(&mut self, _state: &Correlator) -> io::Result<()> {
        let report = std::mem::take(&mut self.analyzer).finish();
        self.builder.anomalies(self.host, &report.anomalies);
        Ok(())
    }
}
