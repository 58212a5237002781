//! zstd chunks (format 7, packed for storage) whose header lies about their length.

use super::tests::header;
use super::*;
use crate::recording::writer::RecordingWriter;
use crate::recording::{CHUNK_HEADER_LEN, CHUNK_MAGIC, FLAG_ZSTD, VERSION};

/// A recording of one LZ4 chunk of five 40-byte events (event i is 40 bytes of i), its body
/// offset and the chunk's raw entries.
fn one_chunk() -> (Vec<u8>, usize, Vec<u8>) {
    let mut w = RecordingWriter::with_version(Vec::new(), &header(), VERSION).expect("writer");
    let body = w.bytes_written as usize;
    for i in 0..5u8 {
        w.event(&[i; 40]).expect("event");
    }
    w.flush_chunk().expect("flush");
    let bytes = w.finish().expect("finish").0;
    let u32_at = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"));
    let (raw_len, stored_len) = (u32_at(body + 8), u32_at(body + 12));
    let stored = &bytes[body + CHUNK_HEADER_LEN..][..stored_len as usize];
    let raw = lz4_flex::block::decompress(stored, raw_len as usize).expect("an LZ4 chunk");
    (bytes, body, raw)
}

/// A zstd chunk of `raw`'s five entries whose header says it holds `raw_len` bytes.
fn zstd_chunk(raw: &[u8], raw_len: u32) -> Vec<u8> {
    let stored = zstd::bulk::compress(raw, 3).expect("zstd");
    let mut c = CHUNK_MAGIC.to_vec();
    for v in [
        FLAG_ZSTD,
        raw_len,
        stored.len() as u32,
        5,
        crc32fast::hash(&stored),
    ] {
        c.extend_from_slice(&v.to_le_bytes());
    }
    c.extend_from_slice(&stored);
    c
}

#[test]
fn a_zstd_chunk_of_another_length_than_its_header_says_loses_only_itself() {
    let (bytes, body, raw) = one_chunk();
    let n = raw.len() as u32;
    let mut file = bytes[..body].to_vec();
    let mut offsets = Vec::new();
    for claimed in [n, n - 1, n + 1, 0, n] {
        offsets.push(file.len());
        file.extend_from_slice(&zstd_chunk(&raw, claimed));
    }
    let rec = Recording::from_bytes(file).expect("open");
    let mut firsts = Vec::new();
    let problems = rec.replay(|e| {
        if let Entry::Event(b) = e {
            firsts.push(b[0]);
        }
    });
    assert_eq!(
        firsts,
        [0, 1, 2, 3, 4, 0, 1, 2, 3, 4],
        "the two good chunks, whole"
    );
    let damaged: Vec<_> = problems
        .iter()
        .map(|p| match p {
            ChunkProblem::Decompress { offset, why } => (*offset, why.clone()),
            other => panic!("not a decompression problem: {other:?}"),
        })
        .collect();
    assert_eq!(
        damaged.iter().map(|d| d.0).collect::<Vec<_>>(),
        offsets[1..4],
        "{damaged:?}"
    );
    // Fewer bytes claimed than the frame holds: zstd stops at the end of its room; more (or
    // none at all): the frame ends short of the claim.
    assert!(damaged[1]
        .1
        .contains(&format!("holds {n} bytes, the chunk header says {}", n + 1)));
}
