//! The chunk stream of a recording: where its bytes are ([`Data`]), and each chunk found,
//! checked (CRC32) and decompressed in turn ([`Framer`]). A large file is framed on a reader
//! thread one step ahead of the replay ([`frame_ahead`]): decompression then costs no time
//! on the replaying thread.

use std::{
    io,
    sync::mpsc::{channel, sync_channel},
};

use super::{u32_at, ChunkProblem};
use crate::recording::{CHUNK_HEADER_LEN, CHUNK_MAGIC, FLAG_LZ4, FLAG_ZSTD, MAX_CHUNK};

/// Where a recording's bytes are: a file read as a stream of chunks (a multi-GiB recording
/// replays in bounded memory: a few chunks at a time), or bytes already in memory.
pub(super) enum Data {
    File { file: std::fs::File, len: usize },
    Mem(Vec<u8>),
}

impl Data {
    pub(super) fn len(&self) -> usize {
        match self {
            Data::File { len, .. } => *len,
            Data::Mem(v) => v.len(),
        }
    }

    /// `len` bytes at `at` (the caller checked they exist): borrowed from memory, or read from
    /// the file into `buf`.
    pub(super) fn bytes<'a>(
        &'a self,
        at: usize,
        len: usize,
        buf: &'a mut Vec<u8>,
    ) -> io::Result<&'a [u8]> {
        match self {
            Data::Mem(v) => Ok(&v[at..at + len]),
            Data::File { file, .. } => {
                use std::os::unix::fs::FileExt as _;
                buf.resize(len, 0);
                file.read_exact_at(&mut buf[..len], at as u64)?;
                Ok(&buf[..len])
            }
        }
    }

    /// Offset of the next chunk magic at or after `from`, or the end; read in blocks.
    fn find_magic(&self, from: usize, buf: &mut Vec<u8>) -> io::Result<usize> {
        const BLOCK: usize = 1 << 16;
        let end = self.len();
        let mut at = from;
        while at < end {
            let n = (end - at).min(BLOCK + CHUNK_MAGIC.len() - 1);
            let block = self.bytes(at, n, buf)?;
            if let Some(p) = block.windows(4).position(|w| w == CHUNK_MAGIC) {
                return Ok(at + p);
            }
            if n < CHUNK_MAGIC.len() {
                break;
            }
            // Overlap the next block by 3 bytes: a magic may straddle the boundary.
            at += n - (CHUNK_MAGIC.len() - 1);
        }
        Ok(end)
    }
}

/// One step through the chunk stream.
#[derive(Debug)]
pub(super) enum Step {
    /// An intact chunk at `offset`: its entries are in the caller's buffer.
    Chunk { offset: usize },
    /// A damaged or incomplete stretch, skipped.
    Problem(ChunkProblem),
    /// Nothing more.
    End,
}

/// Walks the chunks from the first one on.
pub(super) struct Framer<'a> {
    data: &'a Data,
    at: usize,
    /// One buffer each for the chunk read and the magic scan, for the whole file: a fresh one
    /// per chunk costs an allocation and the kernel's zeroing of its pages, more than decoding
    /// the chunk.
    read_buf: Vec<u8>,
    scan_buf: Vec<u8>,
    /// The file's format version (what a chunk's flags may say).
    version: u32,
    /// Made at the first zstd chunk, then reused (a context per chunk costs its allocation).
    zstd: Option<zstd::bulk::Decompressor<'static>>,
}

impl<'a> Framer<'a> {
    pub(super) fn new(data: &'a Data, body: usize, version: u32) -> Framer<'a> {
        Framer {
            data,
            at: body,
            read_buf: Vec::new(),
            scan_buf: Vec::new(),
            version,
            zstd: None,
        }
    }

    /// The next chunk (its entries decompressed and appended to `out`: what `out` held is
    /// kept), problem, or the end.
    pub(super) fn next(&mut self, out: &mut Vec<u8>) -> io::Result<Step> {
        let d = self.data;
        let len = d.len();
        let at = self.at;
        if at >= len {
            return Ok(Step::End);
        }
        if len - at < CHUNK_HEADER_LEN {
            self.at = len;
            let rest = d.bytes(at, len - at, &mut self.read_buf)?;
            let problem = if rest.starts_with(CHUNK_MAGIC) || CHUNK_MAGIC.starts_with(rest) {
                ChunkProblem::Truncated {
                    offset: at,
                    need: CHUNK_HEADER_LEN,
                    have: len - at,
                }
            } else {
                ChunkProblem::Garbage {
                    offset: at,
                    skipped: len - at,
                }
            };
            return Ok(Step::Problem(problem));
        }
        let head = d.bytes(at, CHUNK_HEADER_LEN, &mut self.read_buf)?;
        if &head[..4] != CHUNK_MAGIC {
            let next = d.find_magic(at + 1, &mut self.scan_buf)?;
            self.at = next;
            return Ok(Step::Problem(ChunkProblem::Garbage {
                offset: at,
                skipped: next - at,
            }));
        }
        let flags = u32_at(head, 4);
        let raw_len = u32_at(head, 8);
        let stored_len = u32_at(head, 12);
        let crc = u32_at(head, 20);
        if raw_len > MAX_CHUNK || stored_len > MAX_CHUNK {
            self.at = d.find_magic(at + 1, &mut self.scan_buf)?;
            return Ok(Step::Problem(ChunkProblem::TooLarge {
                offset: at,
                len: raw_len.max(stored_len),
            }));
        }
        let start = at + CHUNK_HEADER_LEN;
        let end = start + stored_len as usize;
        if end > len {
            // Either the recorder died mid-chunk, or the length is corrupt: look for a later
            // chunk before calling it the tail.
            let next = d.find_magic(at + 1, &mut self.scan_buf)?;
            if next < len {
                self.at = next;
                return Ok(Step::Problem(ChunkProblem::Checksum { offset: at }));
            }
            self.at = len;
            return Ok(Step::Problem(ChunkProblem::Truncated {
                offset: at,
                need: CHUNK_HEADER_LEN + stored_len as usize,
                have: len - at,
            }));
        }
        let stored = d.bytes(start, stored_len as usize, &mut self.read_buf)?;
        if crc32fast::hash(stored) != crc {
            self.at = d.find_magic(at + 1, &mut self.scan_buf)?;
            return Ok(Step::Problem(ChunkProblem::Checksum { offset: at }));
        }
        self.at = end;
        // Before version 7 only the LZ4 bit was read.
        let flags = if self.version >= 7 {
            flags
        } else {
            flags & FLAG_LZ4
        };
        let start = out.len();
        let unpacked = match flags {
            0 => {
                out.extend_from_slice(stored);
                return Ok(Step::Chunk { offset: at });
            }
            FLAG_LZ4 => {
                out.resize(start + raw_len as usize, 0);
                lz4_flex::block::decompress_into(stored, &mut out[start..])
                    .map(|n| out.truncate(start + n))
                    .map_err(|e| e.to_string())
            }
            FLAG_ZSTD => unzstd(&mut self.zstd, stored, raw_len as usize, out),
            other => Err(format!("unknown compression flags {other:#x}")),
        };
        Ok(match unpacked {
            Ok(()) => Step::Chunk { offset: at },
            Err(why) => {
                out.truncate(start);
                Step::Problem(ChunkProblem::Decompress { offset: at, why })
            }
        })
    }
}

/// Appends the zstd frame `stored`, which must hold exactly `raw_len` bytes, to `out` (the
/// caller truncates `out` on an error).
fn unzstd(
    ctx: &mut Option<zstd::bulk::Decompressor<'static>>,
    stored: &[u8],
    raw_len: usize,
    out: &mut Vec<u8>,
) -> Result<(), String> {
    let ctx = match ctx {
        Some(ctx) => ctx,
        None => ctx.insert(zstd::bulk::Decompressor::new().map_err(|e| e.to_string())?),
    };
    let start = out.len();
    out.reserve(raw_len);
    // Written from `start` into the spare capacity (not zeroed first: a memset of every chunk
    // cost about 2 % of a packed replay). zstd writes at most that capacity and `out` grows by
    // what it wrote; a frame holding another length than `raw_len` is an error (the caller
    // truncates to `start`).
    let mut at_end = std::io::Cursor::new(&mut *out);
    at_end.set_position(start as u64);
    let r = ctx.decompress_to_buffer(stored, &mut at_end);
    match r {
        Ok(n) if n == raw_len => Ok(()),
        Ok(n) => Err(format!(
            "zstd frame holds {n} bytes, the chunk header says {raw_len}"
        )),
        Err(e) => Err(e.to_string()),
    }
}

/// Below this many bytes of chunks a file is framed on the replaying thread (a thread costs
/// more than it saves).
const AHEAD_MIN_BYTES: usize = 1 << 20;

/// Batches framed ahead of the replay, at most (with one being replayed and one being
/// framed): memory stays bounded by a few batches.
const AHEAD_BATCHES: usize = 2;

/// A batch is sent once it holds this many bytes of entries or [`BATCH_STEPS`] steps: one
/// hand-over between the threads per chunk costs more than decoding a small chunk (a recorder
/// flushes a chunk a second, a few hundred bytes when little happens).
const BATCH_BYTES: usize = 256 << 10;
const BATCH_STEPS: usize = 256;

/// Steps framed in a row, and their chunks' entries one after the other in `buf`.
#[derive(Default)]
struct Batch {
    /// A step and, for a chunk, where its entries are in `buf`.
    steps: Vec<(Step, std::ops::Range<usize>)>,
    buf: Vec<u8>,
}

/// Whether [`frame_ahead`] is worth a thread for `data` (a file of more than a few chunks, on
/// a machine with more than one CPU).
pub(super) fn worth_a_thread(data: &Data, body: usize) -> bool {
    matches!(data, Data::File { .. })
        && data.len().saturating_sub(body) >= AHEAD_MIN_BYTES
        && std::thread::available_parallelism().is_ok_and(|n| n.get() > 1)
}

/// Calls `each` with every step of [`Framer`] over `data`, in file order, the chunks framed
/// on a reader thread ahead of it, in batches; `Ok(false)` if no thread could be started
/// (nothing was called: frame on this thread instead).
pub(super) fn frame_ahead(
    data: &Data,
    body: usize,
    version: u32,
    mut each: impl FnMut(Step, &[u8]),
) -> io::Result<bool> {
    std::thread::scope(|s| {
        let (tx, rx) = sync_channel::<io::Result<Batch>>(AHEAD_BATCHES);
        // Batches come back to the reader thread to be framed into again.
        let (back_tx, back_rx) = channel::<Batch>();
        let reader = std::thread::Builder::new()
            .name("rdmatrace-read".into())
            .spawn_scoped(s, move || {
                let mut framer = Framer::new(data, body, version);
                loop {
                    let mut batch = back_rx.try_recv().unwrap_or_default();
                    batch.steps.clear();
                    batch.buf.clear();
                    let mut error = None;
                    while batch.buf.len() < BATCH_BYTES && batch.steps.len() < BATCH_STEPS {
                        let start = batch.buf.len();
                        match framer.next(&mut batch.buf) {
                            Ok(Step::End) => break,
                            Ok(step) => batch.steps.push((step, start..batch.buf.len())),
                            Err(e) => {
                                error = Some(e);
                                break;
                            }
                        }
                    }
                    let full = batch.buf.len() >= BATCH_BYTES || batch.steps.len() >= BATCH_STEPS;
                    let last = error.is_some() || !full;
                    if !batch.steps.is_empty() && tx.send(Ok(batch)).is_err() {
                        break;
                    }
                    if let Some(e) = error {
                        let _ = tx.send(Err(e));
                    }
                    if last {
                        break;
                    }
                }
            });
        if reader.is_err() {
            return Ok(false);
        }
        for msg in rx {
            let mut batch = msg?;
            for (step, range) in batch.steps.drain(..) {
                each(step, &batch.buf[range]);
            }
            // The reader thread may have ended (the last batch): the batch is then dropped.
            let _ = back_tx.send(batch);
        }
        Ok(true)
    })
}
