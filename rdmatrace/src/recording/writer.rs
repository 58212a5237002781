//! Writing recordings: entries accumulate in memory and go to disk one complete chunk at a time.

use std::{
    fs::{File, OpenOptions},
    io::{self, Write},
    os::unix::fs::OpenOptionsExt,
    path::Path,
};

use super::{
    compact::{Encoder, Order},
    Header, CHUNK_MAGIC, FLAG_LZ4, FLAG_ZSTD, MAGIC, MIN_VERSION, TAG_CGROUP, TAG_ENV, TAG_EVENT,
    TAG_EVENT_COMPACT, TAG_LOST, TAG_LOST_CPU, TAG_SYMBOL, VERSION,
};

/// Flush a chunk once its raw payload reaches this size.
const CHUNK_TARGET: usize = 256 << 10;
/// The same for a recording packed for storage: larger chunks compress better, and a reader
/// still holds only a few of them.
const STORAGE_CHUNK_TARGET: usize = 1 << 20;

pub struct RecordingWriter<W: Write> {
    out: W,
    version: u32,
    raw: Vec<u8>,
    entries: u32,
    /// Version 3: the compact event state of the current chunk.
    compact: Encoder,
    scratch: Vec<u8>,
    /// Chunks are flushed at this many raw bytes.
    chunk_target: usize,
    /// Packing for storage (version 7): chunks are zstd frames at this level, not LZ4.
    zstd: Option<zstd::bulk::Compressor<'static>>,
    pub events: u64,
    pub lost: u64,
    pub bytes_written: u64,
}

impl RecordingWriter<File> {
    /// Creates `path` with mode 0600 (recordings name processes and addresses). An existing
    /// file is an error (`AlreadyExists`) unless `overwrite`.
    pub fn create(
        path: &Path,
        header: &Header,
        overwrite: bool,
    ) -> io::Result<RecordingWriter<File>> {
        let mut opts = OpenOptions::new();
        opts.write(true).mode(0o600);
        if overwrite {
            opts.create(true).truncate(true);
        } else {
            opts.create_new(true);
        }
        let file = opts.open(path)?;
        RecordingWriter::new(file, header)
    }
}

impl<W: Write> RecordingWriter<W> {
    pub fn new(out: W, header: &Header) -> io::Result<RecordingWriter<W>> {
        RecordingWriter::with_version(out, header, VERSION)
    }

    /// A writer of an older format `version` (tests, size comparisons): 2 writes every event
    /// as [`TAG_EVENT`] and every loss as [`TAG_LOST`] under an uncompressed JSON header; 1 is
    /// 2 without symbol entries (the caller must not write any).
    pub fn with_version(
        mut out: W,
        header: &Header,
        version: u32,
    ) -> io::Result<RecordingWriter<W>> {
        if !(MIN_VERSION..=VERSION).contains(&version) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("cannot write recording format version {version}"),
            ));
        }
        let json = serde_json::to_vec(header)?;
        let stored = if version >= 3 {
            let mut b = (json.len() as u32).to_le_bytes().to_vec();
            b.extend_from_slice(&lz4_flex::block::compress_with_dict(
                &json,
                super::header_dict(version),
            ));
            b
        } else {
            json
        };
        let mut pre = Vec::with_capacity(16 + stored.len());
        pre.extend_from_slice(MAGIC);
        pre.extend_from_slice(&version.to_le_bytes());
        pre.extend_from_slice(&(stored.len() as u32).to_le_bytes());
        pre.extend_from_slice(&stored);
        out.write_all(&pre)?;
        out.flush()?;
        Ok(RecordingWriter {
            out,
            version,
            raw: Vec::with_capacity(CHUNK_TARGET + 512),
            entries: 0,
            compact: Encoder::new(Order::from_header(&header.endian)),
            scratch: Vec::with_capacity(256),
            chunk_target: CHUNK_TARGET,
            zstd: None,
            events: 0,
            lost: 0,
            bytes_written: pre.len() as u64,
        })
    }

    /// From now on, chunks are packed for storage (format 7 and later; an older format is left
    /// as it is): up to 1 MiB of entries each, compressed with zstd at `level` (slower to write
    /// than LZ4, about a third smaller on recordings; for a finished recording, see
    /// [`super::repack`]).
    pub fn pack_for_storage(&mut self, level: i32) -> io::Result<()> {
        if self.version < 7 {
            return Ok(());
        }
        self.zstd = Some(zstd::bulk::Compressor::new(level)?);
        self.chunk_target = STORAGE_CHUNK_TARGET;
        self.raw.reserve(STORAGE_CHUNK_TARGET + 512);
        Ok(())
    }

    fn entry(&mut self, tag: u8, bytes: &[u8]) -> io::Result<()> {
        let len = u16::try_from(bytes.len())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "entry longer than 64 KiB"))?;
        self.raw.push(tag);
        self.raw.extend_from_slice(&len.to_le_bytes());
        self.raw.extend_from_slice(bytes);
        self.entries += 1;
        if self.raw.len() >= self.chunk_target {
            self.flush_chunk()?;
        }
        Ok(())
    }

    /// One kernel record, as read from the ring buffer.
    pub fn event(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.events += 1;
        if self.version >= 3 {
            let mut compact = std::mem::take(&mut self.scratch);
            compact.clear();
            let r = if self.compact.encode(bytes, &mut compact) {
                self.entry(TAG_EVENT_COMPACT, &compact)
            } else {
                self.entry(TAG_EVENT, bytes)
            };
            self.scratch = compact;
            return r;
        }
        self.entry(TAG_EVENT, bytes)
    }

    /// `count` events the kernel dropped, on `cpu` when known (stored from version 3).
    pub fn lost(&mut self, ts_ns: u64, cpu: Option<u32>, count: u64) -> io::Result<()> {
        if count == 0 {
            return Ok(());
        }
        self.lost += count;
        let mut b = [0u8; 20];
        b[..8].copy_from_slice(&ts_ns.to_le_bytes());
        b[8..16].copy_from_slice(&count.to_le_bytes());
        match cpu {
            Some(cpu) if self.version >= 3 => {
                b[16..].copy_from_slice(&cpu.to_le_bytes());
                self.entry(TAG_LOST_CPU, &b)
            }
            _ => self.entry(TAG_LOST, &b[..16]),
        }
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

    /// The cgroup v2 path of cgroup `id`, written before the events that name it (version 4;
    /// older formats cannot hold it and skip it). Paths longer than an entry allows are cut.
    pub fn cgroup(&mut self, id: u64, path: &str) -> io::Result<()> {
        if self.version < 4 {
            return Ok(());
        }
        let mut end = path.len().min(4096);
        while !path.is_char_boundary(end) {
            end -= 1;
        }
        let mut b = Vec::with_capacity(8 + end);
        b.extend_from_slice(&id.to_le_bytes());
        b.extend_from_slice(&path.as_bytes()[..end]);
        self.entry(TAG_CGROUP, &b)
    }

    /// Transport variable `name` of process `pid` is `value` (version 5; older formats cannot
    /// hold it and skip it). Values longer than an entry allows are cut.
    pub fn env(&mut self, pid: u32, name: &str, value: &str) -> io::Result<()> {
        if self.version < 5 || name.contains('\0') {
            return Ok(());
        }
        let mut end = value.len().min(1024);
        while !value.is_char_boundary(end) {
            end -= 1;
        }
        let mut b = Vec::with_capacity(5 + name.len() + end);
        b.extend_from_slice(&pid.to_le_bytes());
        b.extend_from_slice(name.as_bytes());
        b.push(0);
        b.extend_from_slice(&value.as_bytes()[..end]);
        self.entry(TAG_ENV, &b)
    }

    /// Any entry read from a recording, written again.
    pub fn put(&mut self, entry: super::Entry<'_>) -> io::Result<()> {
        match entry {
            super::Entry::Event(b) => self.event(b),
            super::Entry::Lost { ts_ns, count, cpu } => self.lost(ts_ns, cpu, count),
            super::Entry::Symbol { pid, addr, name } => self.symbol(pid, addr, name),
            super::Entry::Cgroup { id, path } => self.cgroup(id, path),
            super::Entry::Env { pid, name, value } => self.env(pid, name, value),
        }
    }

    /// Writes the pending entries as one chunk (nothing when there are none).
    pub fn flush_chunk(&mut self) -> io::Result<()> {
        if self.entries == 0 {
            return Ok(());
        }
        let (flags, stored) = match &mut self.zstd {
            Some(z) => (FLAG_ZSTD, z.compress(&self.raw)?),
            None => (FLAG_LZ4, lz4_flex::block::compress(&self.raw)),
        };
        let mut chunk = Vec::with_capacity(24 + stored.len());
        chunk.extend_from_slice(CHUNK_MAGIC);
        chunk.extend_from_slice(&flags.to_le_bytes());
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
        self.compact.reset();
        Ok(())
    }

    /// Flushes the last chunk; hands back the output and the file's total size.
    pub fn finish(mut self) -> io::Result<(W, u64)> {
        self.flush_chunk()?;
        Ok((self.out, self.bytes_written))
    }
}

/// How a rewrite lays out and compresses its chunks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Packing {
    /// Chunk boundaries where `rec` has them (a chunk is cut earlier only where the writer's
    /// size limit says so), LZ4 as the recorder writes.
    Keep,
    /// Packed for storage ([`super::repack`]): chunks merged up to 1 MiB, zstd at this level
    /// (from format 7; an older format merges up to 256 KiB, LZ4).
    Storage { zstd_level: i32 },
}

/// Writes every intact entry of `rec` again, in format `version` (re-encoding an old file,
/// size comparisons, round-trip tests): same header, same entries in the same order.
/// Hands back the output, its size and the damage met in `rec`.
pub fn rewrite<W: Write>(
    rec: &super::reader::Recording,
    out: W,
    version: u32,
    packing: Packing,
) -> io::Result<(W, u64, Vec<super::reader::ChunkProblem>)> {
    let mut w = RecordingWriter::with_version(out, &rec.header, version)?;
    if let Packing::Storage { zstd_level } = packing {
        w.pack_for_storage(zstd_level)?;
    }
    let mut error = None;
    let problems = rec.replay_chunks(|e| {
        if error.is_some() {
            return;
        }
        let r = match e {
            None if packing == Packing::Keep => w.flush_chunk(),
            None => Ok(()),
            Some(e) => w.put(e),
        };
        if let Err(e) = r {
            error = Some(e);
        }
    });
    if let Some(e) = error {
        return Err(e);
    }
    let (out, bytes) = w.finish()?;
    Ok((out, bytes, problems))
}
