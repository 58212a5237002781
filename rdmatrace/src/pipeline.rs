//! decode -> correlate -> filter -> sink, for one record at a time. Shared by live tracing and
//! replay, so both print the same thing.

use std::io;

use crate::{
    clock::ClockAnchor,
    correlate::{filter::Filter, Correlator},
    decode::{decode, DecodeError},
    event::Record,
    sinks::Sink,
    symbolize::{resolver::Resolver, Symbols},
};

pub struct Pipeline {
    pub anchor: ClockAnchor,
    pub correlator: Correlator,
    pub filter: Filter,
    pub sink: Box<dyn Sink>,
    /// Records seen (before filtering).
    pub events: u64,
    pub decode_errors: u64,
    pub first_decode_error: Option<DecodeError>,
    /// First write error (a closed pipe ends the trace).
    pub write_error: Option<io::Error>,
    /// Names of stack addresses: from the recording on replay, from [`Self::resolver`] live.
    pub symbols: Symbols,
    /// Live only: names stack addresses while the processes live.
    pub resolver: Option<Resolver>,
}

impl Pipeline {
    pub fn new(anchor: ClockAnchor, filter: Filter, sink: Box<dyn Sink>) -> Pipeline {
        Pipeline {
            anchor,
            correlator: Correlator::new(),
            filter,
            sink,
            events: 0,
            decode_errors: 0,
            first_decode_error: None,
            write_error: None,
            symbols: Symbols::default(),
            resolver: None,
        }
    }

    /// One raw ring-buffer record.
    pub fn push_raw(&mut self, bytes: &[u8]) {
        if let Some(resolver) = self.resolver.as_mut() {
            for s in resolver.names_for(bytes) {
                self.symbols.insert(s.pid, s.addr, &s.name);
            }
        }
        match decode(bytes, &self.anchor) {
            Ok(mut rec) => {
                self.symbols.annotate(&mut rec);
                self.push(rec)
            }
            Err(e) => {
                self.decode_errors += 1;
                self.first_decode_error.get_or_insert(e);
            }
        }
    }

    /// One decoded record.
    pub fn push(&mut self, mut rec: Record) {
        self.events += 1;
        self.correlator.observe(&mut rec);
        if self.write_error.is_some() || !self.filter.matches(&rec) {
            return;
        }
        if let Err(e) = self.sink.record(&rec) {
            self.write_error = Some(e);
        }
    }

    /// Reports `count` lost events (on `cpu` when known) at monotonic time `ts_ns`.
    pub fn lost(&mut self, count: u64, cpu: Option<u32>, ts_ns: u64) {
        if count == 0 {
            return;
        }
        self.push(Record::lost(count, cpu, ts_ns, &self.anchor));
    }
}
