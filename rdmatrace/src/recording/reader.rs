//! Reading recordings. Whole-file errors (not a recording, unknown version, bad header) fail
//! with the offset and what was expected; damage inside the chunk stream is reported per chunk
//! and skipped, so everything intact still replays.

use std::{fmt, path::Path};

use super::{
    compact::{Decoder, Order},
    Entry, Header, MAGIC, MAX_CHUNK, MAX_HEADER, MIN_VERSION, TAG_CGROUP, TAG_ENV, TAG_EVENT,
    TAG_EVENT_COMPACT, TAG_LOST, TAG_LOST_CPU, TAG_SYMBOL, VERSION,
};
use framer::{Data, Framer, Step};

mod framer;

#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("cannot read {path}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "not an rdmatrace recording: offset 0 has {found:02x?}, expected the magic \"RDMATRC\\0\""
    )]
    BadMagic { found: Vec<u8> },
    #[error("recording format version {found} at offset 8 is not supported (this rdmatrace reads versions {MIN_VERSION} to {VERSION})")]
    Version { found: u32 },
    #[error("recording header truncated: offset {offset} needs {need} bytes, the file has {have}")]
    ShortHeader {
        offset: usize,
        need: usize,
        have: usize,
    },
    #[error("recording header at offset 16 is not valid JSON: {0}")]
    Header(#[source] serde_json::Error),
    #[error("compressed recording header at offset 16 is damaged: {0}")]
    HeaderCompression(String),
}

/// What went wrong with one chunk.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ChunkProblem {
    /// The file ends inside a chunk (a recorder killed mid-write): the tail is ignored.
    Truncated {
        offset: usize,
        need: usize,
        have: usize,
    },
    /// No chunk magic where one was expected; bytes skipped up to the next magic.
    Garbage {
        offset: usize,
        skipped: usize,
    },
    Checksum {
        offset: usize,
    },
    Decompress {
        offset: usize,
        why: String,
    },
    BadEntry {
        offset: usize,
        why: String,
    },
    TooLarge {
        offset: usize,
        len: u32,
    },
    /// The file could not be read any further (an I/O error): the rest is not replayed.
    Io {
        why: String,
    },
}

impl fmt::Display for ChunkProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ChunkProblem::Truncated { offset, need, have } => write!(
                f,
                "incomplete chunk at offset {offset}: needs {need} bytes, {have} left (recorder killed?); ignored"
            ),
            ChunkProblem::Garbage { offset, skipped } => {
                write!(f, "no chunk magic \"CHNK\" at offset {offset}: skipped {skipped} bytes")
            }
            ChunkProblem::Checksum { offset } => write!(f, "chunk at offset {offset}: CRC32 mismatch; chunk skipped"),
            ChunkProblem::Decompress { offset, why } => {
                write!(f, "chunk at offset {offset}: cannot decompress ({why}); chunk skipped")
            }
            ChunkProblem::BadEntry { offset, why } => write!(f, "chunk at offset {offset}: {why}; rest of chunk skipped"),
            ChunkProblem::Io { why } => write!(f, "cannot read further: {why}; the rest is not replayed"),
            ChunkProblem::TooLarge { offset, len } => {
                write!(f, "chunk at offset {offset} claims {len} bytes (limit {MAX_CHUNK}); skipped")
            }
        }
    }
}

pub struct Recording {
    pub header: Header,
    /// Format version of the file.
    pub version: u32,
    data: Data,
    body: usize,
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

impl Recording {
    /// Opens a recording file: reads its preamble and header now, its chunks one at a time as
    /// they replay.
    pub fn open(path: &Path) -> Result<Recording, ReadError> {
        let io = |source| ReadError::Io {
            path: path.display().to_string(),
            source,
        };
        let file = std::fs::File::open(path).map_err(io)?;
        let len = file.metadata().map_err(io)?.len() as usize;
        Recording::parse(Data::File { file, len }).map_err(|e| match e {
            ParseError::Read(r) => r,
            ParseError::Io(source) => io(source),
        })
    }

    pub fn from_bytes(data: Vec<u8>) -> Result<Recording, ReadError> {
        Recording::parse(Data::Mem(data)).map_err(|e| match e {
            ParseError::Read(r) => r,
            // Memory reads cannot fail.
            ParseError::Io(source) => ReadError::Io {
                path: "<memory>".into(),
                source,
            },
        })
    }

    fn parse(data: Data) -> Result<Recording, ParseError> {
        let mut buf = Vec::new();
        let total = data.len();
        let head = data.bytes(0, total.min(16), &mut buf)?.to_vec();
        if head.len() < 16 {
            if !MAGIC.starts_with(&head[..head.len().min(8)]) {
                return Err(ReadError::BadMagic {
                    found: head[..head.len().min(8)].to_vec(),
                }
                .into());
            }
            return Err(ReadError::ShortHeader {
                offset: 0,
                need: 16,
                have: head.len(),
            }
            .into());
        }
        if &head[..8] != MAGIC {
            return Err(ReadError::BadMagic {
                found: head[..8].to_vec(),
            }
            .into());
        }
        let version = u32_at(&head, 8);
        if !(MIN_VERSION..=VERSION).contains(&version) {
            return Err(ReadError::Version { found: version }.into());
        }
        let len = u32_at(&head, 12) as usize;
        if total < 16 + len {
            return Err(ReadError::ShortHeader {
                offset: 16,
                need: len,
                have: total - 16,
            }
            .into());
        }
        let stored = data.bytes(16, len, &mut buf)?;
        let header = if version >= 3 {
            serde_json::from_slice(&header_json(stored, version)?)
        } else {
            serde_json::from_slice(stored)
        }
        .map_err(ReadError::Header)?;
        Ok(Recording {
            header,
            version,
            data,
            body: 16 + len,
        })
    }

    /// Where the chunks start (preamble and header before).
    pub fn body_offset(&self) -> usize {
        self.body
    }

    /// Calls `f` on every entry of every intact chunk, in file order; returns the problems met.
    pub fn replay(&self, mut f: impl FnMut(Entry<'_>)) -> Vec<ChunkProblem> {
        self.replay_chunks(|e| {
            if let Some(e) = e {
                f(e);
            }
        })
    }

    /// [`replay`](Self::replay) that also calls `f(None)` at the end of every chunk whose
    /// entries all replayed (re-encoding a file chunk for chunk). A file is read a
    /// few chunks at a time (a large file is read and decompressed on a thread a step ahead of
    /// `f`): memory stays bounded by a few of the largest chunks ([`MAX_CHUNK`]).
    pub fn replay_chunks(&self, mut f: impl FnMut(Option<Entry<'_>>)) -> Vec<ChunkProblem> {
        let mut problems = Vec::new();
        if let Err(e) = self.chunks(&mut f, &mut problems) {
            problems.push(ChunkProblem::Io { why: e.to_string() });
        }
        problems
    }

    fn chunks(
        &self,
        f: &mut impl FnMut(Option<Entry<'_>>),
        problems: &mut Vec<ChunkProblem>,
    ) -> std::io::Result<()> {
        let mut compact = Decoder::new(Order::from_header(&self.header.endian));
        let version = self.version;
        let mut each = |step: Step, raw: &[u8]| match step {
            Step::Chunk { offset } => {
                compact.reset();
                match entries(raw, version, &mut compact, &mut |e| f(Some(e))) {
                    Ok(()) => f(None),
                    Err(why) => problems.push(ChunkProblem::BadEntry { offset, why }),
                }
            }
            Step::Problem(p) => problems.push(p),
            Step::End => {}
        };
        if framer::worth_a_thread(&self.data, self.body)
            && framer::frame_ahead(&self.data, self.body, version, &mut each)?
        {
            return Ok(());
        }
        let mut framer = Framer::new(&self.data, self.body, version);
        let mut buf = Vec::new();
        loop {
            buf.clear();
            match framer.next(&mut buf)? {
                Step::End => return Ok(()),
                step => each(step, &buf),
            }
        }
    }
}

/// Opening fails on the file's content, or on reading it.
enum ParseError {
    Read(ReadError),
    Io(std::io::Error),
}

impl From<ReadError> for ParseError {
    fn from(e: ReadError) -> Self {
        ParseError::Read(e)
    }
}

impl From<std::io::Error> for ParseError {
    fn from(e: std::io::Error) -> Self {
        ParseError::Io(e)
    }
}

/// A version-3 (or later) header: `json_len u32 LE | LZ4 block`.
fn header_json(stored: &[u8], version: u32) -> Result<Vec<u8>, ReadError> {
    let (len, block) = stored
        .split_first_chunk::<4>()
        .ok_or_else(|| ReadError::HeaderCompression("shorter than its length field".into()))?;
    let len = u32::from_le_bytes(*len);
    if len > MAX_HEADER {
        return Err(ReadError::HeaderCompression(format!(
            "claims {len} bytes of JSON (limit {MAX_HEADER})"
        )));
    }
    lz4_flex::block::decompress_with_dict(block, len as usize, super::header_dict(version))
        .map_err(|e| ReadError::HeaderCompression(e.to_string()))
}

fn entries(
    raw: &[u8],
    version: u32,
    compact: &mut Decoder,
    f: &mut impl FnMut(Entry<'_>),
) -> Result<(), String> {
    let mut i = 0;
    while i < raw.len() {
        if raw.len() - i < 3 {
            return Err(format!("entry header cut at payload byte {i}"));
        }
        let tag = raw[i];
        let len = u16::from_le_bytes([raw[i + 1], raw[i + 2]]) as usize;
        let body = raw
            .get(i + 3..i + 3 + len)
            .ok_or_else(|| format!("entry at payload byte {i} runs past the chunk"))?;
        match tag {
            TAG_EVENT => f(Entry::Event(body)),
            TAG_EVENT_COMPACT if version >= 3 => {
                let record = compact
                    .decode(body)
                    .map_err(|why| format!("{why} (entry at payload byte {i})"))?;
                f(Entry::Event(record));
            }
            TAG_LOST if len == 16 => {
                let ts_ns = u64::from_le_bytes(body[..8].try_into().unwrap_or_default());
                let count = u64::from_le_bytes(body[8..].try_into().unwrap_or_default());
                f(Entry::Lost {
                    ts_ns,
                    count,
                    cpu: None,
                });
            }
            TAG_LOST_CPU if len == 20 && version >= 3 => {
                let ts_ns = u64::from_le_bytes(body[..8].try_into().unwrap_or_default());
                let count = u64::from_le_bytes(body[8..16].try_into().unwrap_or_default());
                let cpu = u32::from_le_bytes(body[16..].try_into().unwrap_or_default());
                f(Entry::Lost {
                    ts_ns,
                    count,
                    cpu: Some(cpu),
                });
            }
            TAG_SYMBOL if len >= 12 => {
                let pid = u32::from_le_bytes(body[..4].try_into().unwrap_or_default());
                let addr = u64::from_le_bytes(body[4..12].try_into().unwrap_or_default());
                let name = std::str::from_utf8(&body[12..])
                    .map_err(|e| format!("symbol entry at payload byte {i} is not UTF-8: {e}"))?;
                f(Entry::Symbol { pid, addr, name });
            }
            TAG_CGROUP if len >= 8 && version >= 4 => {
                let id = u64::from_le_bytes(body[..8].try_into().unwrap_or_default());
                let path = std::str::from_utf8(&body[8..])
                    .map_err(|e| format!("cgroup entry at payload byte {i} is not UTF-8: {e}"))?;
                f(Entry::Cgroup { id, path });
            }
            TAG_ENV if len >= 5 && version >= 5 => {
                let pid = u32::from_le_bytes(body[..4].try_into().unwrap_or_default());
                let text = std::str::from_utf8(&body[4..])
                    .map_err(|e| format!("env entry at payload byte {i} is not UTF-8: {e}"))?;
                let (name, value) = text
                    .split_once('\0')
                    .ok_or_else(|| format!("env entry at payload byte {i} has no value"))?;
                f(Entry::Env { pid, name, value });
            }
            other => {
                return Err(format!(
                    "unknown entry tag {other} (len {len}) at payload byte {i} of a version {version} recording"
                ))
            }
        }
        i += 3 + len;
    }
    Ok(())
}

#[cfg(test)]
mod packed_tests;
#[cfg(test)]
mod tests;
