//! One policy for damaged recordings in every command that reads them: intact chunks are used,
//! each damaged chunk is reported with its offset, and the exit status is 2. And `record -o`
//! never overwrites a file it was not told to.

mod common;

use std::path::{Path, PathBuf};

use common::*;
use rdmatrace::recording::reader::Recording;

const FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../tests/fixtures/lab-loss.rdmt"
);

/// The fixture with its chunks written three times, the CRCs of the middle copy broken: two
/// intact copies around a damaged one. Returns the file and the first damaged chunk's offset.
fn damaged_copy(dir: &Path) -> (PathBuf, usize) {
    let bytes = std::fs::read(FIXTURE).expect("fixture");
    let body = Recording::from_bytes(bytes.clone())
        .expect("fixture opens")
        .body_offset();
    let chunks = &bytes[body..];
    let mut out = bytes[..body].to_vec();
    out.extend_from_slice(chunks);
    let bad_at = out.len();
    let mut bad = chunks.to_vec();
    // Every chunk's CRC field: `CHNK | flags | raw_len | stored_len | entries | crc32`.
    let mut at = 0;
    while at + 24 <= bad.len() {
        let stored = u32::from_le_bytes(bad[at + 12..at + 16].try_into().expect("4 bytes"));
        bad[at + 20] ^= 0xff;
        at += 24 + stored as usize;
    }
    out.extend_from_slice(&bad);
    out.extend_from_slice(chunks);
    let p = dir.join("damaged.rdmt");
    std::fs::write(&p, out).expect("write");
    (p, bad_at)
}

fn assert_damage_reported(what: &str, out: &Finished, offset: usize) {
    assert_eq!(
        out.status.code(),
        Some(2),
        "{what}: a damaged recording exits 2; stderr:\n{}",
        out.stderr
    );
    assert!(
        out.stderr.contains(&format!("offset {offset}")) && out.stderr.contains("CRC32 mismatch"),
        "{what}: the damage is named with its offset ({offset}); stderr:\n{}",
        out.stderr
    );
    assert!(!out.stderr.contains("panicked"), "{what}: {}", out.stderr);
}

#[test]
fn every_reader_uses_the_intact_chunks_names_the_damage_and_exits_2() {
    let dir = test_dir("damage-readers");
    let d = dir.path();
    let (file, offset) = damaged_copy(d);
    let f = file.to_str().expect("utf8");

    // trace --input: every intact record prints (the fixture's lines, twice).
    let clean = run(&["trace", "--input", FIXTURE]);
    assert!(clean.status.success(), "{}", clean.stderr);
    let out = run(&["trace", "--input", f]);
    assert_damage_reported("trace --input", &out, offset);
    let lines = |s: &str| s.lines().skip(1).count();
    assert_eq!(
        lines(&out.stdout),
        2 * lines(&clean.stdout),
        "both intact copies are printed"
    );

    // report: the analysis of the intact chunks (the lossy transfer's retransmits).
    let out = run(&["report", f, "--json"]);
    assert_damage_reported("report", &out, offset);
    let report: serde_json::Value = serde_json::from_str(&out.stdout).expect("report JSON");
    assert!(
        report["data"]["blame"]
            .as_array()
            .is_some_and(|b| !b.is_empty()),
        "report: retransmit blame from the intact chunks: {report}"
    );

    // timeline: written from the intact chunks.
    let tl = d.join("t.json");
    let out = run(&[
        "timeline",
        f,
        "-o",
        tl.to_str().expect("utf8"),
        "--format",
        "json",
    ]);
    assert_damage_reported("timeline", &out, offset);
    let json = std::fs::read_to_string(&tl).expect("timeline written");
    assert!(json.contains("RTS"), "timeline has the QP slices");

    // flamegraph: folded from the intact chunks.
    let out = run(&[
        "flamegraph",
        f,
        "--kind",
        "retransmits",
        "--folded",
        "-o",
        "-",
    ]);
    assert_damage_reported("flamegraph", &out, offset);
    assert!(
        out.stdout.lines().any(|l| l.contains("retransmit")),
        "folded stacks from the intact chunks:\n{}",
        out.stdout
    );
}

#[test]
fn record_refuses_to_overwrite_a_file_without_force() {
    let dir = test_dir("damage-record");
    let d = dir.path();
    let existing = d.join("keep.rdmt");
    std::fs::write(&existing, b"precious").expect("write");
    let p = existing.to_str().expect("utf8");
    let out = run(&["record", "-o", p, "--duration", "1"]);
    assert!(!out.status.success(), "exits non-zero: {}", out.stderr);
    assert!(
        out.stderr.contains("exists") && out.stderr.contains("--force"),
        "says why and what to do: {}",
        out.stderr
    );
    assert_eq!(
        std::fs::read(&existing).expect("still there"),
        b"precious",
        "the file is untouched"
    );
}

#[test]
#[ignore = "needs root: loads the probes (run by cargo xtask test as root)"]
fn root_record_with_force_overwrites_the_file() {
    let dir = test_dir("damage-force");
    let d = dir.path();
    let existing = d.join("old.rdmt");
    std::fs::write(&existing, b"old").expect("write");
    let p = existing.to_str().expect("utf8");
    let out = run(&["record", "-o", p, "--force", "--duration", "1"]);
    assert!(out.status.success(), "{}", out.stderr);
    let rec = Recording::open(&existing).expect("a recording now");
    assert!(!rec.header.hostname.is_empty());
}
