//! Reading recordings. Whole-file errors (not a recording, unknown version, bad header) fail
//! with the offset and what was expected; damage inside the chunk stream is reported per chunk
//! and skipped, so everything intact still replays.

use std::{fmt, path::Path};

use super::{
    compact::{Decoder, Order},
    Entry, Header, CHUNK_HEADER_LEN, CHUNK_MAGIC, FLAG_LZ4, HEADER_DICT, MAGIC, MAX_CHUNK,
    MAX_HEADER, MIN_VERSION, TAG_EVENT, TAG_EVENT_COMPACT, TAG_LOST, TAG_LOST_CPU, TAG_SYMBOL,
    VERSION,
};

#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("cannot read {path}: {source}")]
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
    data: Vec<u8>,
    body: usize,
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

impl Recording {
    pub fn open(path: &Path) -> Result<Recording, ReadError> {
        let data = std::fs::read(path).map_err(|source| ReadError::Io {
            path: path.display().to_string(),
            source,
        })?;
        Recording::from_bytes(data)
    }

    pub fn from_bytes(data: Vec<u8>) -> Result<Recording, ReadError> {
        if data.len() < 16 {
            if !MAGIC.starts_with(&data[..data.len().min(8)]) {
                return Err(ReadError::BadMagic {
                    found: data[..data.len().min(8)].to_vec(),
                });
            }
            return Err(ReadError::ShortHeader {
                offset: 0,
                need: 16,
                have: data.len(),
            });
        }
        if &data[..8] != MAGIC {
            return Err(ReadError::BadMagic {
                found: data[..8].to_vec(),
            });
        }
        let version = u32_at(&data, 8);
        if !(MIN_VERSION..=VERSION).contains(&version) {
            return Err(ReadError::Version { found: version });
        }
        let len = u32_at(&data, 12) as usize;
        if data.len() < 16 + len {
            return Err(ReadError::ShortHeader {
                offset: 16,
                need: len,
                have: data.len() - 16,
            });
        }
        let stored = &data[16..16 + len];
        let header = if version >= 3 {
            serde_json::from_slice(&header_json(stored)?)
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
    /// entries all replayed (re-encoding a file chunk for chunk).
    pub fn replay_chunks(&self, mut f: impl FnMut(Option<Entry<'_>>)) -> Vec<ChunkProblem> {
        let mut problems = Vec::new();
        let mut compact = Decoder::new(Order::from_header(&self.header.endian));
        let d = &self.data;
        let mut at = self.body;
        // One decompression buffer for the whole file: a fresh one per chunk costs an
        // allocation and the kernel's zeroing of its pages, more than decoding the chunk.
        let mut buf: Vec<u8> = Vec::new();
        while at < d.len() {
            if d.len() - at < CHUNK_HEADER_LEN {
                if d[at..].starts_with(CHUNK_MAGIC) || CHUNK_MAGIC.starts_with(&d[at..]) {
                    problems.push(ChunkProblem::Truncated {
                        offset: at,
                        need: CHUNK_HEADER_LEN,
                        have: d.len() - at,
                    });
                } else {
                    problems.push(ChunkProblem::Garbage {
                        offset: at,
                        skipped: d.len() - at,
                    });
                }
                break;
            }
            if &d[at..at + 4] != CHUNK_MAGIC {
                let next = find_magic(d, at + 1);
                problems.push(ChunkProblem::Garbage {
                    offset: at,
                    skipped: next - at,
                });
                at = next;
                continue;
            }
            let flags = u32_at(d, at + 4);
            let raw_len = u32_at(d, at + 8);
            let stored_len = u32_at(d, at + 12);
            let crc = u32_at(d, at + 20);
            if raw_len > MAX_CHUNK || stored_len > MAX_CHUNK {
                problems.push(ChunkProblem::TooLarge {
                    offset: at,
                    len: raw_len.max(stored_len),
                });
                at = find_magic(d, at + 1);
                continue;
            }
            let start = at + CHUNK_HEADER_LEN;
            let end = start + stored_len as usize;
            if end > d.len() {
                // Either the recorder died mid-chunk, or the length is corrupt: look for a later
                // chunk before calling it the tail.
                let next = find_magic(d, at + 1);
                if next < d.len() {
                    problems.push(ChunkProblem::Checksum { offset: at });
                    at = next;
                    continue;
                }
                problems.push(ChunkProblem::Truncated {
                    offset: at,
                    need: CHUNK_HEADER_LEN + stored_len as usize,
                    have: d.len() - at,
                });
                break;
            }
            let stored = &d[start..end];
            if crc32fast::hash(stored) != crc {
                problems.push(ChunkProblem::Checksum { offset: at });
                at = find_magic(d, at + 1);
                continue;
            }
            let raw: &[u8] = if flags & FLAG_LZ4 != 0 {
                let raw_len = raw_len as usize;
                if buf.len() < raw_len {
                    buf.resize(raw_len, 0);
                }
                match lz4_flex::block::decompress_into(stored, &mut buf[..raw_len]) {
                    Ok(n) => &buf[..n],
                    Err(e) => {
                        problems.push(ChunkProblem::Decompress {
                            offset: at,
                            why: e.to_string(),
                        });
                        at = end;
                        continue;
                    }
                }
            } else {
                stored
            };
            compact.reset();
            let parsed = entries(raw, self.version, &mut compact, &mut |e| f(Some(e)));
            match parsed {
                Ok(()) => f(None),
                Err(why) => problems.push(ChunkProblem::BadEntry { offset: at, why }),
            }
            at = end;
        }
        problems
    }
}

/// A version-3 header: `json_len u32 LE | LZ4 block`.
fn header_json(stored: &[u8]) -> Result<Vec<u8>, ReadError> {
    let (len, block) = stored
        .split_first_chunk::<4>()
        .ok_or_else(|| ReadError::HeaderCompression("shorter than its length field".into()))?;
    let len = u32::from_le_bytes(*len);
    if len > MAX_HEADER {
        return Err(ReadError::HeaderCompression(format!(
            "claims {len} bytes of JSON (limit {MAX_HEADER})"
        )));
    }
    lz4_flex::block::decompress_with_dict(block, len as usize, HEADER_DICT)
        .map_err(|e| ReadError::HeaderCompression(e.to_string()))
}

fn find_magic(d: &[u8], from: usize) -> usize {
    d.get(from..)
        .and_then(|rest| rest.windows(4).position(|w| w == CHUNK_MAGIC))
        .map_or(d.len(), |p| from + p)
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
mod tests;
