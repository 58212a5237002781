//! Writing recordings: entries accumulate in memory and go to disk one complete chunk at a time.

use std::{
    fs::{File, OpenOptions},
    io::{self, Write},
    os::unix::fs::OpenOptionsExt,
    path::Path,
};

use super::{Header, CHUNK_MAGIC, FLAG_LZ4, MAGIC, TAG_EVENT, TAG_LOST, TAG_SYMBOL, VERSION};

/// Flush a chunk once its raw payload reaches this size.
const CHUNK_TARGET: usize = 256 << 10;

pub struct RecordingWriter<W: Write> {
    out: W,
    raw: Vec<u8>,
    entries: u32,
    pub events: u64,
    pub lost: u64,
    pub bytes_written: u64,
}

impl RecordingWriter<File> {
    /// Creates `path` with mode 0600 (recordings name processes and addresses).
    pub fn create(path: &Path, header: &Header) -> io::Result<RecordingWriter<File>> {
        let file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(path)?;
        RecordingWriter::new(file, header)
    }
}

impl<W: Write> RecordingWriter<W> {
    pub fn new(mut out: W, header: &Header) -> io::Result<RecordingWriter<W>> {
        let json = serde_json::to_vec(header)?;
        let mut pre = Vec::with_capacity(16 + json.len());
        pre.extend_from_slice(MAGIC);
        pre.extend_from_slice(&VERSION.to_le_bytes());
        pre.extend_from_slice(&(json.len() as u32).to_le_bytes());
        pre.extend_from_slice(&json);
        out.write_all(&pre)?;
        out.flush()?;
        Ok(RecordingWriter {
            out,
            raw: Vec::with_capacity(CHUNK_TARGET + 512),
            entries: 0,
            events: 0,
            lost: 0,
            bytes_written: pre.len() as u64,
        })
    }

    fn entry(&mut self, tag: u8, bytes: &[u8]) -> io::Result<()> {
        let len = u16::try_from(bytes.len())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "entry longer than 64 KiB"))?;
        self.raw.push(tag);
        self.raw.extend_from_slice(&len.to_le_bytes());
        self.raw.extend_from_slice(bytes);
        self.entries += 1;
        if self.raw.len() >= CHUNK_TARGET {
            self.flush_chunk()?;
        }
        Ok(())
    }

    /// One kernel record, as read from the ring buffer.
    pub fn event(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.events += 1;
        self.entry(TAG_EVENT, bytes)
    }

    pub fn lost(&mut self, ts_ns: u64, count: u64) -> io::Result<()> {
        if count == 0 {
            return Ok(());
        }
        self.lost += count;
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&ts_ns.to_le_bytes());
        b[8..].copy_from_slice(&count.to_le_bytes());
        self.entry(TAG_LOST, &b)
    }

    /// What address `addr` of process `pid` (0: the kernel) is; written before the events that
    /// need it. Names longer than an entry allows are cut (at a character boundary).
    pub fn symbol(&mut self, pid: u32, addr: u64, name: &str) -> io::Result<()> {
        let mut end = name.len().min(4096);
        while !name.is_char_boundary(end) {
            end -= 1;
        }
        let mut b = Vec::with_capacity(12 + end);
        b.extend_from_slice(&pid.to_le_bytes());
        b.extend_from_slice(&addr.to_le_bytes());
        b.extend_from_slice(&name.as_bytes()[..end]);
        self.entry(TAG_SYMBOL, &b)
    }

    /// Writes the pending entries as one chunk (nothing when there are none).
    pub fn flush_chunk(&mut self) -> io::Result<()> {
        if self.entries == 0 {
            return Ok(());
        }
        let stored = lz4_flex::block::compress(&self.raw);
        let mut chunk = Vec::with_capacity(24 + stored.len());
        chunk.extend_from_slice(CHUNK_MAGIC);
        chunk.extend_from_slice(&FLAG_LZ4.to_le_bytes());
        chunk.extend_from_slice(&(self.raw.len() as u32).to_le_bytes());
        chunk.extend_from_slice(&(stored.len() as u32).to_le_bytes());
        chunk.extend_from_slice(&self.entries.to_le_bytes());
        chunk.extend_from_slice(&crc32fast::hash(&stored).to_le_bytes());
        chunk.extend_from_slice(&stored);
        // One write per chunk: a crash leaves whole chunks or a detectable partial tail.
        self.out.write_all(&chunk)?;
        self.out.flush()?;
        self.bytes_written += chunk.len() as u64;
        self.raw.clear();
        self.entries = 0;
        Ok(())
    }

    /// Flushes the last chunk; hands back the output and the file's total size.
    pub fn finish(mut self) -> io::Result<(W, u64)> {
        self.flush_chunk()?;
        Ok((self.out, self.bytes_written))
    }
}
