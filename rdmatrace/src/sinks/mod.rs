//! Outputs. Every output is a [`Sink`]: the stage ([`crate::stage`]) hands each one the same
//! correlated records, live or replayed, so adding an output is a new file here, not a new
//! copy of the loop.
//!
//! | sink | command | output |
//! |---|---|---|
//! | [`text::TextSink`] | `trace` | bcc-style lines |
//! | [`jsonl::JsonlSink`] | `trace --json` | JSON Lines |
//! | [`recording::RecordingSink`] | `record` | a recording (the raw records, names, losses) |
//! | [`report::ReportSink`] | `report` | the post-mortem, text or JSON |
//! | [`report::VerdictSink`] | `verdict` | one verdict per process, text or JSON |
//! | [`top::TopSink`] | `top` | a frame per interval |
//! | [`timeline::TimelineSink`] | `timeline` | one host's tracks in a shared timeline |
//! | [`flame::FlameSink`] | `flamegraph` | folded stacks of one kind |

use std::io;

use crate::{correlate::Correlator, event::Record};

pub mod flame;
pub mod fleet;
pub mod jsonl;
pub mod metrics;
pub mod parquet;
pub mod recording;
pub mod report;
pub mod text;
pub mod timeline;
pub mod top;

pub trait Sink {
    /// Called once before the first record.
    fn start(&mut self) -> io::Result<()> {
        Ok(())
    }
    /// Whether the stage should take this raw record at all (before anything is done with it:
    /// a record refused here is not named, decoded or correlated). `record` refuses its own
    /// CPU samples.
    fn accepts(&mut self, _bytes: &[u8]) -> bool {
        true
    }
    /// Every raw ring-buffer record as it came, decodable or not (a recording keeps them).
    fn raw(&mut self, _bytes: &[u8]) -> io::Result<()> {
        Ok(())
    }
    /// A stack address named for the first time, before the first record that needs it.
    fn symbol(&mut self, _pid: u32, _addr: u64, _name: &str) -> io::Result<()> {
        Ok(())
    }
    /// A cgroup id's path, resolved for the first time, before the first record that names it.
    fn cgroup(&mut self, _id: u64, _path: &str) -> io::Result<()> {
        Ok(())
    }
    /// A transport variable of a process's environment (allowlisted names only), after the
    /// record that made it read.
    fn env(&mut self, _pid: u32, _name: &str, _value: &str) -> io::Result<()> {
        Ok(())
    }
    /// One record, after `state` observed it (owners, states, the QP change it made).
    fn record(&mut self, rec: &Record, state: &Correlator) -> io::Result<()>;
    /// Live only: once a second (frames, periodic flushes, gauges), with the correlator's
    /// state then.
    fn tick(&mut self, _state: &Correlator) -> io::Result<()> {
        Ok(())
    }
    /// Called once at the end, with the final state; writes what is left and flushes.
    fn finish(&mut self, _state: &Correlator) -> io::Result<()>;
    /// Whether the sink wants no more (e.g. `top -n` drew its frames).
    fn done(&self) -> bool {
        false
    }
}

/// A sink that forwards to a boxed one (the CLI picks among several at run time).
impl Sink for Box<dyn Sink> {
    fn start(&mut self) -> io::Result<()> {
        (**self).start()
    }
    fn accepts(&mut self, bytes: &[u8]) -> bool {
        (**self).accepts(bytes)
    }
    fn raw(&mut self, bytes: &[u8]) -> io::Result<()> {
        (**self).raw(bytes)
    }
    fn symbol(&mut self, pid: u32, addr: u64, name: &str) -> io::Result<()> {
        (**self).symbol(pid, addr, name)
    }
    fn cgroup(&mut self, id: u64, path: &str) -> io::Result<()> {
        (**self).cgroup(id, path)
    }
    fn env(&mut self, pid: u32, name: &str, value: &str) -> io::Result<()> {
        (**self).env(pid, name, value)
    }
    fn record(&mut self, rec: &Record, state: &Correlator) -> io::Result<()> {
        (**self).record(rec, state)
    }
    fn tick(&mut self, state: &Correlator) -> io::Result<()> {
        (**self).tick(state)
    }
    fn finish(&mut self, _state: &Correlator) -> io::Result<()> {
        (**self).finish(_state)
    }
    fn done(&self) -> bool {
        (**self).done()
    }
}

/// A sink that calls a function with every record (tests, benchmarks, fuzzing).
pub struct Each<F: FnMut(&Record)>(pub F);

impl<F: FnMut(&Record)> Sink for Each<F> {
    fn record(&mut self, rec: &Record, _state: &Correlator) -> io::Result<()> {
        (self.0)(rec);
        Ok(())
    }
    fn finish(&mut self, _state: &Correlator) -> io::Result<()> {
        Ok(())
    }
}

/// Two sinks fed the same records (`serve`: metrics and the flight recorder).
impl<A: Sink, B: Sink> Sink for (A, B) {
    fn start(&mut self) -> io::Result<()> {
        self.0.start()?;
        self.1.start()
    }
    fn accepts(&mut self, bytes: &[u8]) -> bool {
        // Both take what either takes (each of these two takes everything).
        self.0.accepts(bytes) | self.1.accepts(bytes)
    }
    fn raw(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.0.raw(bytes)?;
        self.1.raw(bytes)
    }
    fn symbol(&mut self, pid: u32, addr: u64, name: &str) -> io::Result<()> {
        self.0.symbol(pid, addr, name)?;
        self.1.symbol(pid, addr, name)
    }
    fn cgroup(&mut self, id: u64, path: &str) -> io::Result<()> {
        self.0.cgroup(id, path)?;
        self.1.cgroup(id, path)
    }
    fn env(&mut self, pid: u32, name: &str, value: &str) -> io::Result<()> {
        self.0.env(pid, name, value)?;
        self.1.env(pid, name, value)
    }
    fn record(&mut self, rec: &Record, state: &Correlator) -> io::Result<()> {
        self.0.record(rec, state)?;
        self.1.record(rec, state)
    }
    fn tick(&mut self, state: &Correlator) -> io::Result<()> {
        self.0.tick(state)?;
        self.1.tick(state)
    }
    fn finish(&mut self, state: &Correlator) -> io::Result<()> {
        let a = self.0.finish(state);
        let b = self.1.finish(state);
        a.and(b)
    }
    fn done(&self) -> bool {
        self.0.done() || self.1.done()
    }
}

/// A sink that may be off.
impl<S: Sink> Sink for Option<S> {
    fn start(&mut self) -> io::Result<()> {
        self.as_mut().map_or(Ok(()), Sink::start)
    }
    fn accepts(&mut self, bytes: &[u8]) -> bool {
        self.as_mut().is_none_or(|s| s.accepts(bytes))
    }
    fn raw(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.as_mut().map_or(Ok(()), |s| s.raw(bytes))
    }
    fn symbol(&mut self, pid: u32, addr: u64, name: &str) -> io::Result<()> {
        self.as_mut().map_or(Ok(()), |s| s.symbol(pid, addr, name))
    }
    fn cgroup(&mut self, id: u64, path: &str) -> io::Result<()> {
        self.as_mut().map_or(Ok(()), |s| s.cgroup(id, path))
    }
    fn env(&mut self, pid: u32, name: &str, value: &str) -> io::Result<()> {
        self.as_mut().map_or(Ok(()), |s| s.env(pid, name, value))
    }
    fn record(&mut self, rec: &Record, state: &Correlator) -> io::Result<()> {
        self.as_mut().map_or(Ok(()), |s| s.record(rec, state))
    }
    fn tick(&mut self, state: &Correlator) -> io::Result<()> {
        self.as_mut().map_or(Ok(()), |s| s.tick(state))
    }
    fn finish(&mut self, state: &Correlator) -> io::Result<()> {
        self.as_mut().map_or(Ok(()), |s| s.finish(state))
    }
    fn done(&self) -> bool {
        self.as_ref().is_some_and(Sink::done)
    }
}
