//! Replay throughput: read + decompress + decode + correlate a large synthetic recording on one
//! core (what `trace --input`, `report`, `timeline` pay per event). `cargo xtask bench` runs
//! this and writes the figures into BENCHMARKS.md.

mod synthetic;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use rdmatrace::{
    clock::ClockAnchor,
    correlate::{filter::Filter, Correlator},
    decode::decode_into,
    event::Record,
    recording::{
        reader::Recording,
        repack::storage_level,
        writer::{rewrite, Packing},
        Entry,
    },
    replay,
    sinks::Each,
};

/// About a million events.
const JOBS: u32 = 4_400;

fn replay(c: &mut Criterion) {
    let (bytes, events) = synthetic::recording(JOBS);
    // Read by `cargo xtask bench` (bytes/event of this mix).
    println!(
        "synthetic recording: {events} events, {} bytes, {:.2} bytes/event",
        bytes.len(),
        bytes.len() as f64 / events as f64
    );
    if let Ok(rec) = Recording::from_bytes(bytes.clone()) {
        println!(
            "synthetic recording stream: {} bytes after the header",
            bytes.len() - rec.body_offset()
        );
    }
    let (v2, _) = synthetic::recording_in(JOBS, 2);
    println!(
        "  the same events in format version 2: {} bytes, {:.2} bytes/event",
        v2.len(),
        v2.len() as f64 / events as f64
    );
    // Entries already decompressed: decode + correlate alone.
    let len = bytes.len() as u64;
    let rec = match Recording::from_bytes(bytes) {
        Ok(r) => r,
        Err(e) => panic!("the synthetic recording does not open: {e}"),
    };
    // The same recording packed as `record` packs a finished one (merged zstd chunks).
    let packing = Packing::Storage {
        zstd_level: storage_level(len),
    };
    let packed = match rewrite(&rec, Vec::new(), rdmatrace::recording::VERSION, packing) {
        Ok((packed, _, problems)) if problems.is_empty() => packed,
        other => panic!("the synthetic recording does not pack: {:?}", other.err()),
    };
    println!(
        "  packed for storage: {} bytes, {:.2} bytes/event",
        packed.len(),
        packed.len() as f64 / events as f64
    );
    let packed = match Recording::from_bytes(packed) {
        Ok(r) => r,
        Err(e) => panic!("the packed recording does not open: {e}"),
    };
    let mut raw: Vec<Vec<u8>> = Vec::with_capacity(events as usize);
    let problems = rec.replay(|e| {
        if let Entry::Event(b) = e {
            raw.push(b.to_vec());
        }
    });
    assert!(problems.is_empty(), "{problems:?}");
    assert_eq!(raw.len() as u64, events);

    let mut group = c.benchmark_group("replay");
    group.throughput(Throughput::Elements(events));
    group.sample_size(10);
    // The recording as the recorder writes it, and as `record` leaves it (packed).
    for (name, rec) in [("file", &rec), ("file_packed", &packed)] {
        group.bench_function(name, |b| {
            b.iter(|| {
                let mut n = 0u64;
                let (_, seen) = replay::recording(
                    rec,
                    Filter::default(),
                    Each(|r: &Record| n += u64::from(r.pid != u32::MAX)),
                );
                assert_eq!(seen.undecodable, 0);
                assert_eq!(n, events);
                n
            })
        });
    }
    group.bench_function("decode_correlate", |b| {
        let anchor = ClockAnchor::fixed(0);
        b.iter(|| {
            let mut correlator = Correlator::new();
            let mut n = 0u64;
            // As the stage does: one record decoded into again and again.
            let mut r = Record::lost(0, None, 0, &anchor);
            for bytes in &raw {
                if decode_into(bytes, &anchor, &mut r).is_ok() {
                    correlator.observe(&mut r);
                    n += 1;
                }
            }
            assert_eq!(n, events);
            n
        })
    });
    group.finish();
}

criterion_group!(benches, replay);
criterion_main!(benches);
