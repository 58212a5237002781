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
pub mod jsonl;
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
    /// One record, after `state` observed it (owners, states, the QP change it made).
    fn record(&mut self, rec: &Record, state: &Correlator) -> io::Result<()>;
    /// Live only: once a second (frames, periodic flushes).
    fn tick(&mut self) -> io::Result<()> {
        Ok(())
    }
    /// Called once at the end; writes what is left and flushes.
    fn finish(&mut self) -> io::Result<()>;
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
    fn record(&mut self, rec: &Record, state: &Correlator) -> io::Result<()> {
        (**self).record(rec, state)
    }
    fn tick(&mut self) -> io::Result<()> {
        (**self).tick()
    }
    fn finish(&mut self) -> io::Result<()> {
        (**self).finish()
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
    fn finish(&mut self) -> io::Result<()> {
        Ok(())
    }
}
