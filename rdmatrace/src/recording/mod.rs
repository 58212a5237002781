//! The recording file format (`.rdmt`), version 2 (version 1 files still read). Written by `rdmatrace record`, read by
//! `trace --input`, `report`, ... without privileges.
//!
//! ```text
//! file   := preamble header chunk*
//! preamble := "RDMATRC\0" (8 bytes) | version u32 LE | header_len u32 LE
//! header := header_len bytes of JSON (Header): host, kernel, clock anchor, probe report
//! chunk  := "CHNK" | flags u32 | raw_len u32 | stored_len u32 | entries u32 | crc32 u32
//!           | stored_len bytes (LZ4 block of raw_len bytes when flags & 1, else raw)
//! raw    := entry*;  entry := tag u8 | len u16 LE | len bytes
//! ```
//! Entry tags: [`TAG_EVENT`] (a kernel ring-buffer record, native endian, exactly as the probe
//! wrote it), [`TAG_LOST`] (`ts_ns u64 | count u64`: events the kernel dropped) and, from
//! version 2, [`TAG_SYMBOL`] (`pid u32 | addr u64 | name UTF-8`, little endian: what a stack
//! address was, resolved by the recorder while the process lived; pid 0 = a kernel address).
//! A symbol entry comes before the first event that needs it, and a later one for the same
//! (pid, addr) replaces it (the process exec'd another program).
//!
//! A chunk is written with one `write` once complete, so a recorder killed with -9 leaves a
//! file whose complete chunks all replay; the reader reports an incomplete tail and resyncs on
//! the next chunk magic after a corrupt chunk, so one bad chunk loses only itself.

pub mod reader;
pub mod writer;

use serde::{Deserialize, Serialize};

pub const MAGIC: &[u8; 8] = b"RDMATRC\0";
pub const VERSION: u32 = 2;
/// Oldest version this reader still reads (1: no symbol entries).
pub const MIN_VERSION: u32 = 1;
pub const CHUNK_MAGIC: &[u8; 4] = b"CHNK";
pub const CHUNK_HEADER_LEN: usize = 24;
pub const FLAG_LZ4: u32 = 1;
/// Largest raw chunk payload the reader accepts (a writer flushes far below it).
pub const MAX_CHUNK: u32 = 16 << 20;

pub const TAG_EVENT: u8 = 1;
pub const TAG_LOST: u8 = 2;
pub const TAG_SYMBOL: u8 = 3;

/// The JSON header: what a reader needs to interpret the events.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Header {
    pub tool: String,
    pub hostname: String,
    pub kernel: String,
    /// Byte order of the kernel records ("little" / "big").
    pub endian: String,
    /// wall = monotonic + offset (ns).
    pub clock_offset_ns: i64,
    /// Probe report at start: `area program target state`.
    pub probes: Vec<String>,
    /// The command recorded with `record -- CMD`, if any.
    pub command: Option<Vec<String>>,
}

/// One entry of a chunk (borrowed from the decompressed chunk).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Entry<'a> {
    Event(&'a [u8]),
    Lost {
        ts_ns: u64,
        count: u64,
    },
    /// Address `addr` of process `pid` (0: the kernel) is `name`.
    Symbol {
        pid: u32,
        addr: u64,
        name: &'a str,
    },
}
