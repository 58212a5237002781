//! `record`'s output: a recording. It keeps what the stage was given — the raw ring-buffer
//! records, the names of their stack addresses (before the records that need them) and the
//! losses — so a replay goes through the same stage and prints what a live run would have.

use std::{fs::File, io};

use rdmatrace_common::event::EventKind;

use crate::{
    correlate::Correlator,
    decode::peek,
    event::{Body, Record},
    recording::writer::RecordingWriter,
    sinks::Sink,
};

pub struct RecordingSink {
    pub writer: RecordingWriter<File>,
    /// The recorder's own pid: while it is traced (to follow the fork of `-- CMD`), its CPU
    /// samples are its own, not the program's.
    own_pid: u32,
    /// The command's process until it execs: a copy of the recorder, whose CPU samples are
    /// the recorder's spawning code, not the program's.
    pub unexeced_child: Option<u32>,
}

impl RecordingSink {
    pub fn new(writer: RecordingWriter<File>) -> RecordingSink {
        RecordingSink {
            writer,
            own_pid: std::process::id(),
            unexeced_child: None,
        }
    }
}

impl Sink for RecordingSink {
    /// The recorder's own CPU samples (and its spawning copy's) are not the program's: they are
    /// dropped before anything is done with them (naming their stacks would cost the time the
    /// program's own stacks need while it lives).
    fn accepts(&mut self, bytes: &[u8]) -> bool {
        match peek(bytes) {
            Some((EventKind::CpuSample, pid)) => {
                pid != self.own_pid && Some(pid) != self.unexeced_child
            }
            Some((EventKind::ProcessExec, pid)) if Some(pid) == self.unexeced_child => {
                self.unexeced_child = None;
                true
            }
            _ => true,
        }
    }

    fn raw(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.writer.event(bytes)
    }

    fn symbol(&mut self, pid: u32, addr: u64, name: &str) -> io::Result<()> {
        self.writer.symbol(pid, addr, name)
    }

    fn cgroup(&mut self, id: u64, path: &str) -> io::Result<()> {
        self.writer.cgroup(id, path)
    }

    fn env(&mut self, pid: u32, name: &str, value: &str) -> io::Result<()> {
        self.writer.env(pid, name, value)
    }

    /// Losses are stored, and said on stderr as they happen (at most once a second).
    fn record(&mut self, rec: &Record, _state: &Correlator) -> io::Result<()> {
        if let Body::Lost { count, cpu } = rec.body {
            let on = cpu.map_or(String::new(), |c| format!(" (CPU {c})"));
            eprintln!(
                "rdmatrace: {count} events lost: the ring buffer was full{on}; \
                 consider a larger ring buffer (--ringbuf-size)"
            );
            self.writer.lost(rec.ts_ns, cpu, count)?;
        }
        Ok(())
    }

    /// At most a second of events is only in memory: a kill -9 loses no more.
    fn tick(&mut self, _state: &Correlator) -> io::Result<()> {
        self.writer.flush_chunk()
    }

    fn finish(&mut self, _state: &Correlator) -> io::Result<()> {
        self.writer.flush_chunk()
    }
}
