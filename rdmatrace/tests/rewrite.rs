//! The lab recordings of formats 1 and 2 (tests/fixtures/old/, kept for this) re-encoded by today's writer (version 3)
//! replay to exactly the same output: every record, its JSON and its text line, and the same
//! header. Prints the sizes before and after (`cargo test --test rewrite -- --nocapture`).

use rdmatrace::{
    correlate::filter::Filter,
    event::Record,
    recording::{
        reader::ChunkProblem,
        reader::Recording,
        repack::{repack_file, temp_path, Repacked},
        writer::{rewrite, Packing, RecordingWriter},
        CHUNK_HEADER_LEN, FLAG_LZ4, FLAG_ZSTD, VERSION,
    },
    replay,
    sinks::{jsonl::to_json, text::line, Each},
};

const FIXTURES: [&str; 3] = ["lab-loss.rdmt", "lab-pingpong.rdmt", "lab-verbs.rdmt"];

fn fixture(name: &str) -> Vec<u8> {
    let p = format!(
        "{}/../tests/fixtures/old/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read(&p).unwrap_or_else(|e| panic!("{p}: {e}"))
}

/// Every record of a recording as it prints: JSON line and text line.
fn printed(bytes: Vec<u8>) -> (Vec<String>, u64) {
    let rec = Recording::from_bytes(bytes).expect("opens");
    let mut out = Vec::new();
    let (_, done) = replay::recording(
        &rec,
        Filter::default(),
        Each(|r: &Record| {
            out.push(to_json(r, None).to_string());
            out.push(line(r));
        }),
    );
    assert!(done.problems.is_empty(), "{:?}", done.problems);
    (out, done.undecodable)
}

#[test]
fn fixtures_rewritten_in_the_current_version_replay_identically() {
    for name in FIXTURES {
        let old = fixture(name);
        let rec = Recording::from_bytes(old.clone()).expect("opens");
        assert!(
            rec.version < VERSION,
            "{name} is already version {}",
            rec.version
        );
        let records = printed(old.clone());
        let (new, size, problems) =
            rewrite(&rec, Vec::new(), VERSION, Packing::Keep).expect("rewrite");
        assert!(problems.is_empty(), "{name}: {problems:?}");
        assert_eq!(size, new.len() as u64);
        let again = Recording::from_bytes(new.clone()).expect("rewritten opens");
        assert_eq!(again.version, VERSION);
        assert_eq!(again.header, rec.header, "{name}");
        assert_eq!(printed(new.clone()), records, "{name}");
        // Same events written the old way, chunked the same: the format's own gain.
        let (v2, ..) = rewrite(&rec, Vec::new(), 2, Packing::Keep).expect("rewrite v2");
        let n = records.0.len() as f64 / 2.0;
        eprintln!(
            "{name}: {n} records; committed v{} {} B ({:.1} B/record), rewritten v2 {} B ({:.1}), v3 {} B ({:.1})",
            rec.version,
            old.len(),
            old.len() as f64 / n,
            v2.len(),
            v2.len() as f64 / n,
            new.len(),
            new.len() as f64 / n,
        );
        assert!(
            new.len() < v2.len(),
            "{name}: v3 {} B, v2 {} B",
            new.len(),
            v2.len()
        );
    }
}

#[test]
fn a_rewritten_recording_keeps_crash_safety() {
    // Cut anywhere, a version-3 file replays a prefix of the records and never panics.
    let rec = Recording::from_bytes(fixture("lab-loss.rdmt")).expect("opens");
    let (new, ..) = rewrite(&rec, Vec::new(), VERSION, Packing::Keep).expect("rewrite");
    let (all, _) = printed(new.clone());
    for cut in (0..new.len()).step_by(7) {
        let Ok(rec) = Recording::from_bytes(new[..cut].to_vec()) else {
            continue; // the header itself is cut
        };
        let mut out = Vec::new();
        let _ = replay::recording(
            &rec,
            Filter::default(),
            Each(|r: &Record| {
                out.push(to_json(r, None).to_string());
                out.push(line(r));
            }),
        );
        assert!(all.starts_with(&out), "cut at {cut}");
    }
}

/// The fixture rewritten in today's format with its chunks as recorded, in a file of its own.
fn current_version_file(dir: &std::path::Path, name: &str) -> (std::path::PathBuf, Vec<u8>) {
    let rec = Recording::from_bytes(fixture(name)).expect("opens");
    let (bytes, ..) = rewrite(&rec, Vec::new(), VERSION, Packing::Keep).expect("rewrite");
    let path = dir.join(name);
    std::fs::write(&path, &bytes).expect("write");
    (path, bytes)
}

fn chunks(bytes: &[u8]) -> usize {
    let rec = Recording::from_bytes(bytes.to_vec()).expect("opens");
    let mut n = 0;
    assert!(rec
        .replay_chunks(|e| n += usize::from(e.is_none()))
        .is_empty());
    n
}

/// Each chunk's flags, in file order, from the chunk headers.
fn flags_of_chunks(bytes: &[u8]) -> Vec<u32> {
    let rec = Recording::from_bytes(bytes.to_vec()).expect("opens");
    let mut at = rec.body_offset();
    let mut flags = Vec::new();
    while at < bytes.len() {
        let word = |i: usize| u32::from_le_bytes(bytes[at + i..at + i + 4].try_into().unwrap());
        flags.push(word(4));
        at += CHUNK_HEADER_LEN + word(12) as usize;
    }
    flags
}

#[test]
fn a_repacked_recording_replays_identically_in_fewer_bytes_and_chunks() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("tempdir");
    for name in FIXTURES {
        let (path, before) = current_version_file(dir.path(), name);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).expect("chmod");
        // A leftover of a repack that was killed is replaced, not an obstacle.
        std::fs::write(temp_path(&path), b"stale").expect("stale temp");
        let done = repack_file(&path).expect("repack");
        let after = std::fs::read(&path).expect("read");
        assert_eq!(
            done,
            Repacked::Done {
                before: before.len() as u64,
                after: after.len() as u64
            },
            "{name}"
        );
        assert!(after.len() < before.len(), "{name}");
        assert!(chunks(&before) > 1, "{name}");
        assert_eq!(chunks(&after), 1, "{name}");
        assert_eq!(flags_of_chunks(&after), vec![FLAG_ZSTD], "{name}");
        assert_eq!(printed(after.clone()), printed(before.clone()), "{name}");
        let mode = std::fs::metadata(&path).expect("stat").permissions().mode();
        assert_eq!(mode & 0o7777, 0o640, "{name}");
        assert!(!temp_path(&path).exists(), "{name}");
        eprintln!(
            "{name}: {} B in {} chunks -> {} B in one",
            before.len(),
            chunks(&before),
            after.len()
        );
        // Once is enough; a leftover temp file goes even when nothing is packed.
        std::fs::write(temp_path(&path), b"stale").expect("stale temp");
        assert_eq!(
            repack_file(&path).expect("again"),
            Repacked::Left("packed already".into())
        );
        assert!(!temp_path(&path).exists(), "{name}");
    }
}

#[test]
fn repack_leaves_damaged_linked_and_old_recordings_as_they_are() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (path, bytes) = current_version_file(dir.path(), "lab-loss.rdmt");
    let left = |p: &std::path::Path| match repack_file(p).expect("repack") {
        Repacked::Left(why) => why,
        done => panic!("{}: {done:?}", p.display()),
    };
    // A damaged chunk: nothing of it may be lost by a rewrite.
    let mut damaged = bytes.clone();
    let n = damaged.len();
    damaged[n - 3] ^= 0xff;
    std::fs::write(&path, &damaged).expect("write");
    assert_eq!(left(&path), "damaged");
    assert_eq!(std::fs::read(&path).expect("read"), damaged);
    // A file cut inside its last chunk (a recorder killed mid-write) is not rewritten either.
    let cut = &bytes[..bytes.len() - 5];
    std::fs::write(&path, cut).expect("write");
    assert_eq!(left(&path), "damaged");
    assert_eq!(std::fs::read(&path).expect("read"), cut);
    // A symbolic link, and a file with another name.
    std::fs::write(&path, &bytes).expect("write");
    let link = dir.path().join("link.rdmt");
    std::os::unix::fs::symlink(&path, &link).expect("symlink");
    assert_eq!(left(&link), "not a regular file");
    let hard = dir.path().join("hard.rdmt");
    std::fs::hard_link(&path, &hard).expect("hard link");
    assert_eq!(left(&path), "it has other hard links");
    assert_eq!(std::fs::read(&path).expect("read"), bytes);
    std::fs::remove_file(&hard).expect("rm");
    // An older format is not rewritten into the current one behind the user's back.
    let old = dir.path().join("old.rdmt");
    std::fs::write(&old, fixture("lab-loss.rdmt")).expect("write");
    assert_eq!(left(&old), "written in another format version");
    assert!(matches!(repack_file(&path), Ok(Repacked::Done { .. })));
}

#[test]
fn a_recording_of_one_lz4_chunk_is_packed_with_zstd_too() {
    let dir = tempfile::tempdir().expect("tempdir");
    let rec = Recording::from_bytes(fixture("lab-verbs.rdmt")).expect("opens");
    let mut w = RecordingWriter::new(Vec::new(), &rec.header).expect("writer");
    assert!(rec.replay(|e| w.put(e).expect("put")).is_empty());
    let (lz4, _) = w.finish().expect("finish");
    assert_eq!(flags_of_chunks(&lz4), vec![FLAG_LZ4]);
    let path = dir.path().join("one.rdmt");
    std::fs::write(&path, &lz4).expect("write");
    let done = repack_file(&path).expect("repack");
    let packed = std::fs::read(&path).expect("read");
    assert!(matches!(done, Repacked::Done { .. }), "{done:?}");
    assert_eq!(flags_of_chunks(&packed), vec![FLAG_ZSTD]);
    assert!(
        packed.len() * 10 < lz4.len() * 9,
        "zstd saves at least a tenth: {} -> {}",
        lz4.len(),
        packed.len()
    );
    assert_eq!(printed(packed), printed(lz4));
}

#[test]
fn a_damaged_zstd_chunk_is_named_and_skipped_and_the_others_replay() {
    let rec = Recording::from_bytes(fixture("lab-loss.rdmt")).expect("opens");
    // Two zstd chunks: the recording's entries written twice, a chunk each.
    let mut w = RecordingWriter::new(Vec::new(), &rec.header).expect("writer");
    w.pack_for_storage(3).expect("zstd");
    for _ in 0..2 {
        assert!(rec.replay(|e| w.put(e).expect("put")).is_empty());
        w.flush_chunk().expect("flush");
    }
    let (good, _) = w.finish().expect("finish");
    assert_eq!(flags_of_chunks(&good), vec![FLAG_ZSTD, FLAG_ZSTD]);
    let first = Recording::from_bytes(good.clone())
        .expect("opens")
        .body_offset();
    let problems = |bytes: Vec<u8>| {
        let rec = Recording::from_bytes(bytes).expect("opens");
        let mut events = 0;
        let p = rec
            .replay(|e| events += usize::from(matches!(e, rdmatrace::recording::Entry::Event(_))));
        (p, events)
    };
    let (none, all) = problems(good.clone());
    assert!(none.is_empty() && all > 0);
    // (what, byte of the first chunk, flipped bits): the frame's descriptor, the flags (2 ->
    // 3), the raw length the header claims.
    let cases = [
        ("frame", CHUNK_HEADER_LEN + 4, 0xff),
        ("flags", 4, 1),
        ("raw_len", 8, 1),
    ];
    for (what, at, bits) in cases {
        let mut b = good.clone();
        b[first + at] ^= bits;
        // The CRC covers the stored bytes: recomputed, so only the frame itself is wrong.
        let stored = u32::from_le_bytes(b[first + 12..first + 16].try_into().unwrap()) as usize;
        let crc = crc32fast::hash(&b[first + CHUNK_HEADER_LEN..first + CHUNK_HEADER_LEN + stored]);
        b[first + 20..first + 24].copy_from_slice(&crc.to_le_bytes());
        let (p, events) = problems(b);
        assert_eq!(events * 2, all, "{what}: the second chunk replays whole");
        assert!(
            matches!(&p[..], [ChunkProblem::Decompress { offset, .. }] if *offset == first),
            "{what}: {p:?}"
        );
        eprintln!("{what}: {}", p[0]);
    }
}

#[test]
fn a_packed_file_over_a_mib_replays_from_disk_as_from_memory() {
    // Files over 1 MiB are decompressed on a reader thread: zstd chunks there too. Symbol
    // entries with pseudo-random names keep the packed file over 1 MiB.
    let rec = Recording::from_bytes(fixture("lab-verbs.rdmt")).expect("opens");
    let mut w = RecordingWriter::new(Vec::new(), &rec.header).expect("writer");
    w.pack_for_storage(3).expect("zstd");
    assert!(rec.replay(|e| w.put(e).expect("put")).is_empty());
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for i in 0..40_000u32 {
        let name: String = (0..48)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                char::from(b'a' + (x % 26) as u8)
            })
            .collect();
        w.symbol(i, x, &name).expect("symbol");
    }
    let (packed, _) = w.finish().expect("finish");
    assert!(packed.len() > 1 << 20, "{} bytes", packed.len());
    let flags = flags_of_chunks(&packed);
    assert!(
        flags.len() > 2 && flags.iter().all(|f| *f == FLAG_ZSTD),
        "{flags:?}"
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("big.rdmt");
    std::fs::write(&path, &packed).expect("write");
    let collect = |rec: &Recording| {
        let mut out = Vec::new();
        let problems = rec.replay(|e| out.push(format!("{e:?}")));
        assert!(problems.is_empty(), "{problems:?}");
        out
    };
    let from_disk = collect(&Recording::open(&path).expect("opens"));
    let in_memory = collect(&Recording::from_bytes(packed).expect("opens"));
    assert!(from_disk.len() > 40_000);
    assert_eq!(from_disk, in_memory);
}

#[test]
fn before_format_7_only_the_lz4_bit_of_a_chunks_flags_counts() {
    let rec = Recording::from_bytes(fixture("lab-loss.rdmt")).expect("opens");
    let (v6, ..) = rewrite(&rec, Vec::new(), 6, Packing::Keep).expect("rewrite v6");
    let first = Recording::from_bytes(v6.clone())
        .expect("opens")
        .body_offset();
    assert_eq!(flags_of_chunks(&v6)[0], FLAG_LZ4);
    let mut odd = v6.clone();
    odd[first + 4] = 3; // a bit a version 6 reader never read
    assert_eq!(printed(odd), printed(v6));
}
