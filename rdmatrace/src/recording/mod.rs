//! The recording file format (`.rdmt`), version 7 (versions 1 to 6 still read). Written by
//! `rdmatrace record`, read by `trace --input`, `report`, ... without privileges.
//!
//! ```text
//! file   := preamble header chunk*
//! preamble := "RDMATRC\0" (8 bytes) | version u32 LE | header_len u32 LE
//! header := header_len bytes: JSON (Header): host, kernel, clock anchor, probe report;
//!           from version 3: json_len u32 LE | LZ4 block of json_len bytes of that JSON,
//!           compressed with a dictionary: [`HEADER_DICT`] in versions 3 to 5,
//!           [`HEADER_DICT_6`] from version 6
//! chunk  := "CHNK" | flags u32 | raw_len u32 | stored_len u32 | entries u32 | crc32 u32
//!           | stored_len bytes (LZ4 block of raw_len bytes when flags & 1 (before version 7)
//!           or flags == 1, a zstd frame of raw_len bytes when flags == 2 (version 7), raw when
//!           flags == 0)
//! raw    := entry*;  entry := tag u8 | len u16 LE | len bytes
//! ```
//! Entry tags: [`TAG_EVENT`] (a kernel ring-buffer record, native endian, exactly as the probe
//! wrote it), [`TAG_LOST`] (`ts_ns u64 | count u64`: events the kernel dropped) and, from
//! version 2, [`TAG_SYMBOL`] (`pid u32 | addr u64 | name UTF-8`, little endian: what a stack
//! address was, resolved by the recorder while the process lived; pid 0 = a kernel address).
//! A symbol entry comes before the first event that needs it, and a later one for the same
//! (pid, addr) replaces it (the process exec'd another program).
//!
//! Version 3 adds two tags (a version 1 or 2 file holding them is damaged):
//! - [`TAG_EVENT_COMPACT`]: a ring-buffer record whose 40-byte `EventHeader` is stored as a
//!   delta, and whose trailing zero bytes are cut. Integers are LEB128 varints (`v`), `z` is a
//!   zigzag varint:
//!   ```text
//!   kind v | cpu v | ts_ns - previous ts_ns z | task v
//!     [ | pid v | tid v | comm_len u8 | comm_len bytes ]   when task is a new task
//!   | zeros v | body
//!   ```
//!   The record is the `EventHeader` (in the header's byte order: `Header::endian`) followed by
//!   `body` and `zeros` zero bytes: exactly the bytes the probe wrote. `task` indexes the
//!   chunk's task table, the (pid, tid, comm) triples in order of first appearance; `task` equal
//!   to the table's length is a new task, spelled out after it (`comm` without its NUL padding)
//!   and appended. A record shorter than an `EventHeader` is stored as [`TAG_EVENT`].
//! - [`TAG_LOST_CPU`]: `ts_ns u64 | count u64 | cpu u32` (little endian): events the kernel
//!   dropped on one CPU (the ring buffer's loss counter is per CPU).
//!
//! Version 4 adds [`TAG_CGROUP`]: `id u64 | path UTF-8` (little endian): the cgroup v2 path
//! (below the cgroup2 root) of cgroup `id`, resolved by the recorder while the cgroup existed,
//! before the first `ProcessCgroup` event that names `id` (a version 1 to 3 file holding it is
//! damaged).
//!
//! Version 5 adds [`TAG_ENV`]: `pid u32 | name UTF-8 | 0 | value UTF-8` (little endian): one
//! transport variable of process `pid`'s environment (only names on the allowlist of
//! `crate::environ`), read by the recorder when the process was first seen, written after the
//! record that made it read them.
//!
//! Version 6 changes only the header's dictionary ([`HEADER_DICT_6`]: a later probe report, so
//! a typical header takes ~300 bytes instead of ~650); its chunks are version 5's.
//!
//! Version 7 adds the chunk flag [`FLAG_ZSTD`]: the chunk's payload is one zstd frame (whose
//! content is the same entries). The recorder still writes LZ4 chunks as it goes (cheap, one a
//! second); a finished recording is packed for storage ([`repack`]): its chunks merged and
//! compressed with zstd. Flags other than 0, 1 and 2 make a version 7 chunk damaged; before
//! version 7 only bit 0 (LZ4) was read.
//!
//! Every chunk starts from a clean state (previous `ts_ns` 0, empty task table), so chunks
//! stay independently decodable.
//!
//! A chunk is written with one `write` once complete, so a recorder killed with -9 leaves a
//! file whose complete chunks all replay; the reader reports an incomplete tail and resyncs on
//! the next chunk magic after a corrupt chunk, so one bad chunk loses only itself.

mod compact;
pub mod reader;
pub mod repack;
pub mod writer;

use serde::{Deserialize, Serialize};

pub const MAGIC: &[u8; 8] = b"RDMATRC\0";
pub const VERSION: u32 = 7;
/// Oldest version this reader still reads (1: no symbol entries).
pub const MIN_VERSION: u32 = 1;
pub const CHUNK_MAGIC: &[u8; 4] = b"CHNK";
pub const CHUNK_HEADER_LEN: usize = 24;
pub const FLAG_LZ4: u32 = 1;
/// Version 7: the chunk's payload is a zstd frame.
pub const FLAG_ZSTD: u32 = 2;
/// Largest raw chunk payload the reader accepts (a writer flushes far below it).
pub const MAX_CHUNK: u32 = 16 << 20;

pub const TAG_EVENT: u8 = 1;
pub const TAG_LOST: u8 = 2;
pub const TAG_SYMBOL: u8 = 3;
/// Version 3: an event with a delta-coded header and its trailing zeros cut.
pub const TAG_EVENT_COMPACT: u8 = 4;
/// Version 3: events lost on one CPU.
pub const TAG_LOST_CPU: u8 = 5;
/// Version 4: a cgroup id's path.
pub const TAG_CGROUP: u8 = 6;
/// Version 5: a transport variable of a process's environment.
pub const TAG_ENV: u8 = 7;
/// Largest JSON header a version-3 reader decompresses.
pub const MAX_HEADER: u32 = 1 << 20;
/// The LZ4 dictionary of version-3 headers: a typical header (a lab recording's probe report)
/// with the host's values emptied, so a header mostly refers to it. Part of the format:
/// never edit it (a test pins its checksum); a better one needs a new version.
pub const HEADER_DICT: &[u8] = include_bytes!("header_dict.json");
/// The LZ4 dictionary of version-6 headers: a lab recording's probe report of a later probe set
/// (host values emptied), after the reasons a host without RDMA gives. Frozen like
/// [`HEADER_DICT`].
pub const HEADER_DICT_6: &[u8] = include_bytes!("header_dict_6.json");

/// The dictionary a compressed header of format `version` (3 or later) was written with.
pub fn header_dict(version: u32) -> &'static [u8] {
    if version >= 6 {
        HEADER_DICT_6
    } else {
        HEADER_DICT
    }
}

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
    /// `count` events the kernel dropped, on `cpu` when known (version 3; before, per-second
    /// totals over all CPUs).
    Lost {
        ts_ns: u64,
        count: u64,
        cpu: Option<u32>,
    },
    /// Address `addr` of process `pid` (0: the kernel) is `name`.
    Symbol {
        pid: u32,
        addr: u64,
        name: &'a str,
    },
    /// Cgroup `id` is `path` (version 4).
    Cgroup {
        id: u64,
        path: &'a str,
    },
    /// Process `pid` has transport variable `name` set to `value` (version 5).
    Env {
        pid: u32,
        name: &'a str,
        value: &'a str,
    },
}
