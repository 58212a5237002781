//! Entry points shared by the fuzz targets (`fuzz/`, `cargo xtask fuzz`) and the host test that
//! replays their corpus (`tests/fuzz_corpus.rs`): each takes arbitrary bytes and must neither
//! panic nor hang, whatever they hold. Not an API.

use crate::{
    correlate::{filter::Filter, Correlator},
    decode::decode,
    event::Record,
    recording::{
        reader::Recording, writer::RecordingWriter, Header, CHUNK_MAGIC, FLAG_LZ4, FLAG_ZSTD,
    },
    sinks::{jsonl::to_json, text::line, Each},
};

/// Formats `rec` both ways output does (JSON Lines, text); returns the text's length.
fn render(rec: &Record) -> usize {
    to_json(rec, None).to_string().len() + line(rec).len()
}

/// `data` as a whole recording file: open it, replay every intact chunk through decode and the
/// correlator, format every record. Returns how many records replayed.
pub fn recording(data: &[u8]) -> usize {
    let Ok(rec) = Recording::from_bytes(data.to_vec()) else {
        return 0;
    };
    let mut n = 0;
    // Damage is reported, not fatal: the problems themselves are not of interest here.
    let _damage = crate::replay::recording(
        &rec,
        Filter::default(),
        Each(|r: &Record| {
            render(r);
            n += 1;
        }),
    );
    n
}

/// `data` as the stored bytes of one chunk, inside a valid file and chunk header with the right
/// CRC, so mutations reach the decompressors and the entry parser behind the checksum. The
/// first byte picks the storage: raw (bit 0 clear), LZ4 (bit 0 set), zstd (bits 0 and 1 set);
/// for LZ4 and zstd the next two bytes are the claimed raw length. Returns how many records
/// replayed.
pub fn chunk(data: &[u8]) -> usize {
    let Some((&mode, rest)) = data.split_first() else {
        return 0;
    };
    let (flags, raw_len, stored) = if mode & 1 == 1 {
        let Some((len, stored)) = rest.split_first_chunk::<2>() else {
            return 0;
        };
        let flags = if mode & 3 == 3 { FLAG_ZSTD } else { FLAG_LZ4 };
        (flags, u32::from(u16::from_le_bytes(*len)), stored)
    } else {
        (0, rest.len() as u32, rest)
    };
    recording(&file_with_chunk(flags, raw_len, stored))
}

/// A file of the current version: preamble, a minimal header, one chunk of `stored` bytes
/// with a correct CRC.
pub fn file_with_chunk(flags: u32, raw_len: u32, stored: &[u8]) -> Vec<u8> {
    let header = Header {
        tool: "fuzz".into(),
        hostname: "fuzz".into(),
        kernel: "fuzz".into(),
        endian: "little".into(),
        clock_offset_ns: 0,
        probes: Vec::new(),
        command: None,
    };
    // The preamble and header as the writer makes them (current version, compressed header).
    let mut f = RecordingWriter::new(Vec::new(), &header)
        .and_then(RecordingWriter::finish)
        .map(|(bytes, _)| bytes)
        .unwrap_or_default();
    f.extend_from_slice(CHUNK_MAGIC);
    f.extend_from_slice(&flags.to_le_bytes());
    f.extend_from_slice(&raw_len.to_le_bytes());
    f.extend_from_slice(&(stored.len() as u32).to_le_bytes());
    f.extend_from_slice(&0u32.to_le_bytes());
    f.extend_from_slice(&crc32fast::hash(stored).to_le_bytes());
    f.extend_from_slice(stored);
    f
}

/// `data` as one ring-buffer record: decode, correlate, format. Whether it decoded.
pub fn record(data: &[u8]) -> bool {
    let anchor = crate::clock::ClockAnchor::fixed(0);
    match decode(data, &anchor) {
        Ok(mut rec) => {
            Correlator::new().observe(&mut rec);
            render(&rec);
            true
        }
        Err(_) => false,
    }
}
