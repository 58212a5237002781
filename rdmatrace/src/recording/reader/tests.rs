use super::*;
use crate::recording::writer::RecordingWriter;
use crate::recording::CHUNK_HEADER_LEN;

pub(super) fn header() -> Header {
    Header {
        tool: "rdmatrace test".into(),
        hostname: "h".into(),
        kernel: "k".into(),
        endian: "little".into(),
        clock_offset_ns: 5,
        probes: vec![],
        command: None,
    }
}

/// A recording with `chunks` chunks of `per_chunk` events each; event i is 40 bytes of i.
fn sample(chunks: usize, per_chunk: usize) -> (Vec<u8>, Vec<usize>) {
    sample_v(chunks, per_chunk, VERSION)
}

fn sample_v(chunks: usize, per_chunk: usize, version: u32) -> (Vec<u8>, Vec<usize>) {
    let mut w = RecordingWriter::with_version(Vec::new(), &header(), version).expect("writer");
    let mut chunk_starts = Vec::new();
    let mut n = 0u8;
    for _ in 0..chunks {
        chunk_starts.push(w.bytes_written as usize);
        for _ in 0..per_chunk {
            w.event(&[n; 40]).expect("event");
            n = n.wrapping_add(1);
        }
        w.lost(99, Some(1), 3).expect("lost");
        w.flush_chunk().expect("flush");
    }
    (w.finish().expect("finish").0, chunk_starts)
}

fn collect(rec: &Recording) -> (Vec<u8>, u64, Vec<ChunkProblem>) {
    let mut firsts = Vec::new();
    let mut lost = 0;
    let problems = rec.replay(|e| match e {
        Entry::Event(b) => firsts.push(b[0]),
        Entry::Lost { count, .. } => lost += count,
        Entry::Symbol { .. } | Entry::Cgroup { .. } | Entry::Env { .. } => {}
    });
    (firsts, lost, problems)
}

#[test]
fn round_trip_keeps_every_entry_in_order() {
    let (bytes, _) = sample(3, 10);
    let rec = Recording::from_bytes(bytes).expect("open");
    assert_eq!(rec.header, header());
    let (firsts, lost, problems) = collect(&rec);
    assert_eq!(firsts, (0..30).collect::<Vec<u8>>());
    assert_eq!(lost, 9);
    assert!(problems.is_empty(), "{problems:?}");
    // Chunk ends are seen where the writer cut: after each 10 events and their loss.
    let mut shape = String::new();
    rec.replay_chunks(|e| {
        shape.push(match e {
            Some(Entry::Event(_)) => 'e',
            Some(_) => 'l',
            None => '|',
        })
    });
    assert_eq!(shape, format!("{0}l|{0}l|{0}l|", "e".repeat(10)));
}

#[test]
fn truncation_anywhere_replays_every_complete_chunk_and_never_panics() {
    let (bytes, starts) = sample(3, 5);
    let body = starts[0];
    for cut in body..bytes.len() {
        let rec = Recording::from_bytes(bytes[..cut].to_vec()).expect("header intact");
        let (firsts, _, problems) = collect(&rec);
        let complete = starts
            .iter()
            .skip(1)
            .chain(std::iter::once(&bytes.len()))
            .filter(|&&end| end <= cut)
            .count();
        assert_eq!(firsts.len(), complete * 5, "cut at {cut}");
        let mid_chunk = !starts.contains(&cut);
        assert_eq!(
            problems.len(),
            usize::from(mid_chunk),
            "cut at {cut}: {problems:?}"
        );
        if mid_chunk {
            assert!(
                matches!(problems[0], ChunkProblem::Truncated { .. }),
                "cut at {cut}: {problems:?}"
            );
        }
    }
}

#[test]
fn a_corrupt_chunk_loses_only_itself() {
    let (mut bytes, starts) = sample(3, 5);
    bytes[starts[1] + CHUNK_HEADER_LEN + 3] ^= 0xff;
    let rec = Recording::from_bytes(bytes).expect("open");
    let (firsts, _, problems) = collect(&rec);
    assert_eq!(firsts, vec![0, 1, 2, 3, 4, 10, 11, 12, 13, 14]);
    assert_eq!(problems, vec![ChunkProblem::Checksum { offset: starts[1] }]);
    assert!(problems[0]
        .to_string()
        .contains(&format!("offset {}", starts[1])));
}

#[test]
fn garbage_between_chunks_is_skipped_and_reported() {
    let (bytes, starts) = sample(2, 2);
    let mut spliced = bytes[..starts[1]].to_vec();
    spliced.extend_from_slice(b"xxxxxxx");
    spliced.extend_from_slice(&bytes[starts[1]..]);
    let rec = Recording::from_bytes(spliced).expect("open");
    let (firsts, _, problems) = collect(&rec);
    assert_eq!(firsts, vec![0, 1, 2, 3]);
    assert_eq!(
        problems,
        vec![ChunkProblem::Garbage {
            offset: starts[1],
            skipped: 7
        }]
    );
}

#[test]
fn whole_file_errors_name_offset_and_expectation() {
    let err = Recording::from_bytes(b"PK\x03\x04 definitely a zip file".to_vec())
        .err()
        .expect("error");
    assert!(
        err.to_string().contains("offset 0") && err.to_string().contains("RDMATRC"),
        "{err}"
    );
    let (mut bytes, _) = sample(1, 1);
    bytes[8] = 9;
    let err = Recording::from_bytes(bytes.clone()).err().expect("error");
    assert!(err.to_string().contains("version 9"), "{err}");
    let err = Recording::from_bytes(bytes[..20].to_vec())
        .err()
        .expect("error");
    assert!(
        matches!(
            err,
            ReadError::Version { .. } | ReadError::ShortHeader { .. }
        ),
        "{err}"
    );
    let err = Recording::from_bytes(Vec::new()).err().expect("error");
    assert!(
        err.to_string().contains("truncated") || err.to_string().contains("offset 0"),
        "{err}"
    );
}

#[test]
fn symbol_entries_round_trip_in_order_with_events() {
    let mut w = RecordingWriter::new(Vec::new(), &header()).expect("writer");
    w.symbol(42, 0x7f00_1234, "rt_mover::main").expect("symbol");
    w.event(&[7; 40]).expect("event");
    w.symbol(0, 0xffff_ffff_8100_0000, "do_syscall_64;x")
        .expect("symbol");
    // Longer than any entry may be: cut, still valid UTF-8.
    let long = "é".repeat(5000);
    w.symbol(42, 1, &long).expect("long symbol");
    w.cgroup(4711, "/kubepods.slice/x.scope").expect("cgroup");
    w.env(42, "NCCL_IB_DISABLE", "1").expect("env");
    let bytes = w.finish().expect("finish").0;
    let rec = Recording::from_bytes(bytes).expect("open");
    let mut seen = Vec::new();
    let problems = rec.replay(|e| match e {
        Entry::Event(b) => seen.push(format!("event {}", b[0])),
        Entry::Symbol { pid, addr, name } => {
            seen.push(format!("{pid} {addr:#x} {}", &name[..name.len().min(20)]));
        }
        Entry::Cgroup { id, path } => seen.push(format!("cgroup {id} {path}")),
        Entry::Env { pid, name, value } => seen.push(format!("env {pid} {name}={value}")),
        Entry::Lost { .. } => {}
    });
    assert!(problems.is_empty(), "{problems:?}");
    assert_eq!(
        seen,
        [
            "42 0x7f001234 rt_mover::main",
            "event 7",
            "0 0xffffffff81000000 do_syscall_64;x",
            "42 0x1 éééééééééé",
            "cgroup 4711 /kubepods.slice/x.scope",
            "env 42 NCCL_IB_DISABLE=1",
        ]
    );
}

#[test]
fn cgroup_entries_are_version_4_and_damage_an_older_file() {
    // A version-3 writer has no place for them: it leaves them out.
    let mut w = RecordingWriter::with_version(Vec::new(), &header(), 3).expect("writer");
    w.cgroup(1, "/a").expect("cgroup");
    w.event(&[7; 40]).expect("event");
    let bytes = w.finish().expect("finish").0;
    let rec = Recording::from_bytes(bytes).expect("open");
    let (firsts, _, problems) = collect(&rec);
    assert_eq!((firsts, problems.len()), (vec![7], 0));
    // A version-3 file that holds one anyway is damaged there, and says which tag (written
    // as version 5, whose header dictionary is version 3's).
    let mut w = RecordingWriter::with_version(Vec::new(), &header(), 5).expect("writer");
    w.cgroup(1, "/a").expect("cgroup");
    let mut bytes = w.finish().expect("finish").0;
    bytes[8..12].copy_from_slice(&3u32.to_le_bytes());
    let rec = Recording::from_bytes(bytes).expect("open");
    let (_, _, problems) = collect(&rec);
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(
        format!("{:?}", problems[0]).contains("unknown entry tag 6"),
        "{problems:?}"
    );
}

#[test]
fn a_version_6_header_is_read_with_its_own_dictionary() {
    let (v6, _) = sample_v(1, 2, 6);
    let (v5, _) = sample_v(1, 2, 5);
    // Same chunks; only the header differs.
    assert_eq!(v6.len() - header_end(&v6), v5.len() - header_end(&v5));
    for bytes in [v6.clone(), v5] {
        let rec = Recording::from_bytes(bytes).expect("opens");
        assert_eq!(rec.header, header());
    }
    // A version-6 header relabelled as 5 is decompressed with the wrong dictionary: a clear
    // error, never a wrong header.
    let mut wrong = v6;
    wrong[8..12].copy_from_slice(&5u32.to_le_bytes());
    match Recording::from_bytes(wrong) {
        Ok(rec) => assert_ne!(rec.header, header()),
        Err(e) => assert!(e.to_string().contains("header"), "{e}"),
    }
}

fn header_end(bytes: &[u8]) -> usize {
    16 + u32::from_le_bytes(bytes[12..16].try_into().expect("4 bytes")) as usize
}

#[test]
fn versions_1_and_2_still_read() {
    for version in [1, 2] {
        let (bytes, _) = sample_v(2, 3, version);
        assert_eq!(bytes[8..12], version.to_le_bytes());
        let rec = Recording::from_bytes(bytes).expect("opens");
        assert_eq!((rec.version, &rec.header), (version, &header()));
        let (firsts, lost, problems) = collect(&rec);
        assert_eq!(firsts, [0, 1, 2, 3, 4, 5]);
        assert_eq!(lost, 6);
        assert!(problems.is_empty(), "{problems:?}");
    }
}

/// Records with a real-looking header: kind, cpu, ts, pid, tid, comm, then a body.
fn event(kind: u32, cpu: u32, ts: u64, pid: u32, comm: &str, body: &[u8]) -> Vec<u8> {
    let header = rdmatrace_common::event::EventHeader {
        kind,
        cpu,
        ts_ns: ts,
        pid,
        tid: pid,
        comm: crate::testing::name(comm),
    };
    [crate::testing::bytes_of(&header), body].concat()
}

#[test]
fn version_3_compacts_events_and_every_chunk_decodes_alone() {
    let mut events = Vec::new();
    for i in 0..40u64 {
        let mut body = vec![0u8; 80];
        body[..8].copy_from_slice(&(i * 3).to_le_bytes());
        // Out of order timestamps (per-CPU paths) and several tasks.
        let ts = 1_000_000 + i * 1000 - (i % 3) * 1500;
        events.push(event(
            6,
            (i % 4) as u32,
            ts,
            100 + (i % 3) as u32,
            "job",
            &body,
        ));
    }
    events.push(vec![9; 12]); // shorter than a header: stored as is
    let write = |version| {
        let mut w = RecordingWriter::with_version(Vec::new(), &header(), version).expect("writer");
        let mut starts = Vec::new();
        for (i, e) in events.iter().enumerate() {
            if i % 10 == 0 {
                w.flush_chunk().expect("flush");
                starts.push(w.bytes_written as usize);
            }
            w.event(e).expect("event");
        }
        (w.finish().expect("finish").0, starts)
    };
    let (v3, starts) = write(3);
    let (v2, _) = write(2);
    assert!(
        v3.len() * 3 < v2.len() * 2,
        "v3 {} bytes, v2 {}",
        v3.len(),
        v2.len()
    );
    let replayed = |bytes: Vec<u8>| {
        let rec = Recording::from_bytes(bytes).expect("open");
        let mut out = Vec::new();
        let problems = rec.replay(|e| {
            if let Entry::Event(b) = e {
                out.push(b.to_vec());
            }
        });
        (out, problems)
    };
    let (out, problems) = replayed(v3.clone());
    assert!(problems.is_empty(), "{problems:?}");
    assert_eq!(out, events);
    // Without its first chunk (or with it damaged), the others still rebuild exactly.
    let mut damaged = v3.clone();
    damaged[starts[0] + CHUNK_HEADER_LEN + 2] ^= 0xff;
    let (out, problems) = replayed(damaged);
    assert_eq!(problems, [ChunkProblem::Checksum { offset: starts[0] }]);
    assert_eq!(out, events[10..]);
}

#[test]
fn version_3_stores_the_cpu_of_a_loss() {
    let mut w = RecordingWriter::new(Vec::new(), &header()).expect("writer");
    w.lost(5, Some(3), 7).expect("lost");
    w.lost(6, None, 2).expect("lost");
    let rec = Recording::from_bytes(w.finish().expect("finish").0).expect("open");
    let mut seen = Vec::new();
    rec.replay(|e| {
        if let Entry::Lost { ts_ns, count, cpu } = e {
            seen.push((ts_ns, count, cpu));
        }
    });
    assert_eq!(seen, [(5, 7, Some(3)), (6, 2, None)]);
    // A version 2 writer keeps the old entry: the CPU is not stored.
    let mut w = RecordingWriter::with_version(Vec::new(), &header(), 2).expect("writer");
    w.lost(5, Some(3), 7).expect("lost");
    let rec = Recording::from_bytes(w.finish().expect("finish").0).expect("open");
    rec.replay(|e| {
        assert_eq!(
            e,
            Entry::Lost {
                ts_ns: 5,
                count: 7,
                cpu: None
            }
        )
    });
}

#[test]
fn version_3_tags_in_an_older_file_are_damage() {
    let mut v3 = RecordingWriter::new(Vec::new(), &header()).expect("writer");
    v3.event(&event(1, 0, 5, 1, "a", &[1])).expect("event");
    v3.flush_chunk().expect("flush");
    let v3 = v3.finish().expect("finish").0;
    let v2_header = RecordingWriter::with_version(Vec::new(), &header(), 2)
        .expect("writer")
        .finish()
        .expect("finish")
        .0;
    let body = Recording::from_bytes(v3.clone()).expect("open").body;
    let mut spliced = v2_header.clone();
    spliced.extend_from_slice(&v3[body..]);
    let rec = Recording::from_bytes(spliced).expect("open");
    let (firsts, _, problems) = collect(&rec);
    assert!(firsts.is_empty());
    assert!(
        matches!(&problems[..], [ChunkProblem::BadEntry { why, .. }]
            if why.contains("unknown entry tag 4") && why.contains("version 2")),
        "{problems:?}"
    );
}

#[test]
fn the_header_dictionary_is_frozen() {
    // Version-3 files are compressed against it: changing it breaks every one of them.
    assert_eq!(
        (
            crate::recording::HEADER_DICT.len(),
            crc32fast::hash(crate::recording::HEADER_DICT)
        ),
        (2584, 2086934735)
    );
    // Version-6 files against this one.
    assert_eq!(
        (
            crate::recording::HEADER_DICT_6.len(),
            crc32fast::hash(crate::recording::HEADER_DICT_6)
        ),
        (3777, 17972543)
    );
}

#[test]
fn a_damaged_compressed_header_is_a_clear_error() {
    let (mut bytes, _) = sample(1, 1);
    bytes[20] ^= 0xff; // inside the LZ4 block of the header
    bytes[16..20].copy_from_slice(&(2u32 << 20).to_le_bytes());
    let err = Recording::from_bytes(bytes).err().expect("error");
    assert!(
        err.to_string().contains("header") && err.to_string().contains("limit"),
        "{err}"
    );
}

/// A file on disk is read as a stream of chunks and replays exactly as the same bytes in
/// memory: entries, damage, and a resync on the next chunk magic found across the scan's block
/// boundaries (garbage longer than a scan block, a magic straddling two blocks).
#[test]
fn a_file_streams_like_the_same_bytes_in_memory_even_when_damaged() {
    let (bytes, starts) = sample(6, 50);
    let mut damaged = bytes[..starts[2]].to_vec();
    // Garbage over several 64 KiB scan blocks, so long that the next magic starts 2 bytes before
    // a block boundary (the scan starts one byte in): found through the blocks' overlap.
    const GARBAGE: usize = 4 * 65536 - 1;
    damaged.extend((0..GARBAGE).map(|i| (i % 251) as u8 | 0x80));
    damaged.extend_from_slice(&bytes[starts[2]..starts[4]]);
    // A broken CRC, then an incomplete tail.
    let mut bad = bytes[starts[4]..starts[5]].to_vec();
    bad[CHUNK_HEADER_LEN] ^= 0xff;
    damaged.extend_from_slice(&bad);
    damaged.extend_from_slice(&bytes[starts[5]..bytes.len() - 7]);
    let dir = std::env::temp_dir().join(format!(
        "rdmatrace-stream-{}-{}",
        std::process::id(),
        line!()
    ));
    std::fs::create_dir_all(&dir).expect("tmp");
    for (name, data) in [("clean.rdmt", &bytes), ("damaged.rdmt", &damaged)] {
        let path = dir.join(name);
        std::fs::write(&path, data).expect("write");
        let from_file = collect(&Recording::open(&path).expect("open file"));
        let in_memory = collect(&Recording::from_bytes(data.clone()).expect("open bytes"));
        assert_eq!(from_file, in_memory, "{name}");
    }
    let (firsts, _, problems) = collect(&Recording::open(&dir.join("damaged.rdmt")).expect("open"));
    assert_eq!(
        firsts.len(),
        4 * 50,
        "chunks 0, 1, 2 and 3 replay: {problems:?}"
    );
    assert!(matches!(problems[0], ChunkProblem::Garbage { skipped, .. } if skipped == GARBAGE));
    assert!(matches!(problems[1], ChunkProblem::Checksum { .. }));
    assert!(matches!(problems[2], ChunkProblem::Truncated { .. }));
    let _ = std::fs::remove_dir_all(&dir);
}

/// A recording of `chunks` chunks of `per_chunk` events of 40 noisy bytes (LZ4 cannot shrink
/// them much), each chunk ending with a loss; and where each chunk starts.
fn noisy(chunks: usize, per_chunk: u32) -> (Vec<u8>, Vec<usize>) {
    let mut w = RecordingWriter::with_version(Vec::new(), &header(), VERSION).expect("writer");
    let mut starts = Vec::new();
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for _ in 0..chunks {
        starts.push(w.bytes_written as usize);
        for i in 0..per_chunk {
            let mut ev = [0u8; 40];
            ev[..4].copy_from_slice(&i.to_le_bytes());
            for b in &mut ev[4..] {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                *b = x as u8;
            }
            w.event(&ev).expect("event");
        }
        w.lost(7, Some(0), 1).expect("lost");
        w.flush_chunk().expect("flush");
    }
    (w.finish().expect("finish").0, starts)
}

/// Every event, the shape (`l` a loss, `|` a chunk end) and the problems of a replay.
fn everything(rec: &Recording) -> (Vec<Vec<u8>>, String, Vec<ChunkProblem>) {
    let mut events = Vec::new();
    let mut shape = String::new();
    let problems = rec.replay_chunks(|e| match e {
        Some(Entry::Event(b)) => events.push(b.to_vec()),
        Some(_) => shape.push('l'),
        None => shape.push('|'),
    });
    (events, shape, problems)
}

/// `bytes` with a broken CRC in chunk `crc`, 100,000 bytes of garbage before chunk `garbage`
/// and an incomplete tail.
fn damage(bytes: &[u8], starts: &[usize], crc: usize, garbage: usize) -> Vec<u8> {
    let mut damaged = bytes[..starts[garbage]].to_vec();
    damaged[starts[crc] + CHUNK_HEADER_LEN + 5] ^= 0x55;
    damaged.extend((0..100_000).map(|i| (i % 251) as u8 | 0x80));
    damaged.extend_from_slice(&bytes[starts[garbage]..bytes.len() - 11]);
    damaged
}

/// Replays `data` from a file (framed ahead on a thread when the machine has more than one
/// CPU) and from memory (on the replaying thread): the same, and returned.
fn file_like_memory(name: &str, data: &[u8]) -> (Vec<Vec<u8>>, String, Vec<ChunkProblem>) {
    let dir = std::env::temp_dir().join(format!("rdmatrace-ahead-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp");
    let path = dir.join(name);
    std::fs::write(&path, data).expect("write");
    let file = Recording::open(&path).expect("open file");
    // The reader thread is what these tests are about (one CPU: the same path as memory).
    let parallel = std::thread::available_parallelism().is_ok_and(|n| n.get() > 1);
    assert_eq!(framer::worth_a_thread(&file.data, file.body), parallel);
    let memory = Recording::from_bytes(data.to_vec()).expect("open bytes");
    assert!(!framer::worth_a_thread(&memory.data, memory.body));
    let (from_file, in_memory) = (everything(&file), everything(&memory));
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(from_file.0.len(), in_memory.0.len(), "{name}");
    assert!(
        from_file == in_memory,
        "{name}: file and memory replays differ"
    );
    from_file
}

/// `noisy(chunks, per_chunk)` clean, then damaged (a broken CRC in chunk `crc`, garbage before
/// chunk `garbage`, an incomplete tail), replays from a file as from memory; the damaged one
/// loses those two chunks and the tail's, and names the three problems in file order.
fn damaged_file_replays_like_memory(
    chunks: usize,
    per_chunk: u32,
    min_bytes: usize,
    crc: usize,
    garbage: usize,
) {
    let (bytes, starts) = noisy(chunks, per_chunk);
    assert!(bytes.len() > min_bytes, "{} bytes", bytes.len());
    file_like_memory(&format!("clean-{chunks}.rdmt"), &bytes);
    let (events, shape, problems) = file_like_memory(
        &format!("damaged-{chunks}.rdmt"),
        &damage(&bytes, &starts, crc, garbage),
    );
    let kept = chunks - 2;
    assert_eq!(
        events.len(),
        kept * per_chunk as usize,
        "chunks {crc} and {} lost: {problems:?}",
        chunks - 1
    );
    assert_eq!(shape, "l|".repeat(kept));
    assert!(
        matches!(problems[0], ChunkProblem::Checksum { offset } if offset == starts[crc]),
        "{problems:?}"
    );
    assert!(
        matches!(problems[1], ChunkProblem::Garbage { skipped, .. } if skipped == 100_000),
        "{problems:?}"
    );
    assert!(
        matches!(problems[2], ChunkProblem::Truncated { .. }),
        "{problems:?}"
    );
    assert_eq!(problems.len(), 3, "{problems:?}");
}

/// A file large enough to be framed on a reader thread ahead of the replay replays exactly as
/// the same bytes in memory: every entry, every chunk end, every problem, in order.
#[test]
fn a_large_file_framed_ahead_replays_like_memory_even_when_damaged() {
    // 30 chunks of 2,000 events: over 2 MiB, a batch every few chunks.
    damaged_file_replays_like_memory(30, 2000, 2 << 20, 10, 20);
}

/// Thousands of small chunks (a recorder flushes one a second, small when little happens) are
/// handed over in batches: many chunks to a batch, batches cut by count, the same replay.
#[test]
fn many_small_chunks_framed_ahead_replay_like_memory() {
    damaged_file_replays_like_memory(3000, 10, 1 << 20, 1000, 2000);
}

/// A file that shrinks while it replays (read errors past its new end) ends the replay with
/// an I/O problem after every chunk read before, whether framed ahead on a thread or not.
#[test]
fn a_file_cut_short_during_the_replay_ends_with_an_io_problem() {
    let (bytes, starts) = noisy(20, 2000);
    let dir =
        std::env::temp_dir().join(format!("rdmatrace-cut-{}-{}", std::process::id(), line!()));
    std::fs::create_dir_all(&dir).expect("tmp");
    let path = dir.join("cut.rdmt");
    std::fs::write(&path, &bytes).expect("write");
    // Opened at full length, then cut inside chunk 12: reads past the cut fail.
    let rec = Recording::open(&path).expect("open");
    let parallel = std::thread::available_parallelism().is_ok_and(|n| n.get() > 1);
    assert_eq!(framer::worth_a_thread(&rec.data, rec.body), parallel);
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .and_then(|f| f.set_len((starts[12] + 100) as u64))
        .expect("cut");
    let mut events = 0;
    let problems = rec.replay(|e| {
        if let Entry::Event(_) = e {
            events += 1;
        }
    });
    assert_eq!(events, 12 * 2000, "{problems:?}");
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(
        matches!(problems[0], ChunkProblem::Io { .. }),
        "{problems:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
