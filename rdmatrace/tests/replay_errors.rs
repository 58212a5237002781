//! Bad input: corrupt, truncated or foreign files give a clear error naming the offset and what
//! was expected, never a panic, and lose nothing that is intact.

mod common;

use common::*;

const FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../tests/fixtures/lab-pingpong.rdmt"
);

/// `bytes` in a new file of the calling test's own, removed when dropped.
fn tmp(name: &str, bytes: &[u8]) -> tempfile::TempPath {
    let mut file = tempfile::Builder::new()
        .prefix(&format!("rdmatrace-{name}-"))
        .tempfile()
        .expect("temp file");
    std::io::Write::write_all(&mut file, bytes).expect("write");
    file.into_temp_path()
}

#[test]
fn not_a_recording() {
    let p = tmp("zip", b"PK\x03\x04 not ours");
    let out = run(&["trace", "--input", p.to_str().expect("utf8")]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        out.stderr.contains("not an rdmatrace recording") && out.stderr.contains("offset 0"),
        "{}",
        out.stderr
    );
    assert!(!out.stderr.contains("panicked"), "{}", out.stderr);
}

#[test]
fn missing_file_names_the_path() {
    let out = run(&["trace", "--input", "/nonexistent/x.rdmt"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stderr.contains("/nonexistent/x.rdmt"), "{}", out.stderr);
}

#[test]
fn truncated_tail_replays_the_complete_part() {
    let bytes = std::fs::read(FIXTURE).expect("fixture");
    let full = run(&["trace", "--input", FIXTURE]);
    let p = tmp("cut", &bytes[..bytes.len() - 10]);
    let out = run(&["trace", "--input", p.to_str().expect("utf8")]);
    // The fixture is a single chunk: cutting it leaves the header line and a notice.
    assert!(
        out.status.success(),
        "an incomplete tail is what kill -9 leaves: {}",
        out.stderr
    );
    assert!(
        out.stderr.contains("incomplete chunk at offset"),
        "{}",
        out.stderr
    );
    assert!(full.stdout.starts_with(&out.stdout));
}

#[test]
fn corrupt_chunk_is_reported_with_its_offset() {
    let mut bytes = std::fs::read(FIXTURE).expect("fixture");
    let last = bytes.len() - 1;
    bytes[last] ^= 0x55;
    let p = tmp("crc", &bytes);
    let out = run(&["trace", "--input", p.to_str().expect("utf8")]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "damage is reported in the exit status"
    );
    assert!(
        out.stderr.contains("CRC32 mismatch") && out.stderr.contains("offset"),
        "{}",
        out.stderr
    );
}
