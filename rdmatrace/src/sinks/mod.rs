//! Outputs. Every sink takes the same annotated records; the CLI picks one.

use std::io;

use crate::event::Record;

pub mod jsonl;
pub mod report;
pub mod text;
pub mod top;

pub trait Sink {
    /// Called once before the first record.
    fn start(&mut self) -> io::Result<()> {
        Ok(())
    }
    fn record(&mut self, rec: &Record) -> io::Result<()>;
    /// Called once at the end; flushes.
    fn finish(&mut self) -> io::Result<()>;
}
