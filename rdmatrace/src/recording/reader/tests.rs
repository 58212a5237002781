use super::*;
use crate::recording::writer::RecordingWriter;

fn header() -> Header {
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
    let mut w = RecordingWriter::new(Vec::new(), &header()).expect("writer");
    let mut chunk_starts = Vec::new();
    let mut n = 0u8;
    for _ in 0..chunks {
        chunk_starts.push(w.bytes_written as usize);
        for _ in 0..per_chunk {
            w.event(&[n; 40]).expect("event");
            n = n.wrapping_add(1);
        }
        w.lost(99, 3).expect("lost");
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
        Entry::Symbol { .. } => {}
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
    let bytes = w.finish().expect("finish").0;
    let rec = Recording::from_bytes(bytes).expect("open");
    let mut seen = Vec::new();
    let problems = rec.replay(|e| match e {
        Entry::Event(b) => seen.push(format!("event {}", b[0])),
        Entry::Symbol { pid, addr, name } => {
            seen.push(format!("{pid} {addr:#x} {}", &name[..name.len().min(20)]));
        }
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
        ]
    );
}

#[test]
fn version_1_files_still_read() {
    let (mut bytes, _) = sample(1, 3);
    bytes[8..12].copy_from_slice(&1u32.to_le_bytes());
    let rec = Recording::from_bytes(bytes).expect("version 1 opens");
    let (firsts, _, problems) = collect(&rec);
    assert_eq!(firsts, [0, 1, 2]);
    assert!(problems.is_empty(), "{problems:?}");
}
