//! Replays the fuzz corpus (`fuzz/corpus/<target>/`, grown by `cargo xtask fuzz`) through the
//! same entry points the fuzz targets call, on stable: an input that once crashed the reader or
//! the decoder and was fixed stays fixed without nightly.

use std::path::PathBuf;

use rdmatrace::fuzzing;

fn corpus(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/corpus")
        .join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let data = std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            (p, data)
        })
        .collect()
}

#[test]
fn recording_corpus_replays_without_panic() {
    let inputs = corpus("recording");
    assert!(!inputs.is_empty(), "the recording corpus is empty");
    let records: usize = inputs.iter().map(|(_, d)| fuzzing::recording(d)).sum();
    // The seeds are real lab recordings: some inputs must get as far as records.
    assert!(
        records > 0,
        "no input of the corpus replayed a single record"
    );
}

#[test]
fn chunk_corpus_replays_without_panic() {
    for (_, data) in corpus("chunk") {
        fuzzing::chunk(&data);
    }
}

#[test]
fn record_corpus_decodes_without_panic() {
    let inputs = corpus("record");
    let decoded = inputs.iter().filter(|(_, d)| fuzzing::record(d)).count();
    assert!(
        inputs.is_empty() || decoded > 0,
        "none of {} corpus records decoded: the corpus no longer reaches the decoder",
        inputs.len()
    );
}

#[test]
fn a_valid_chunk_wrapped_by_the_harness_replays_its_records() {
    // The harness itself must reach the entry parser: a raw chunk holding one lost entry.
    let mut payload = vec![2u8, 16, 0];
    payload.extend_from_slice(&7u64.to_le_bytes());
    payload.extend_from_slice(&3u64.to_le_bytes());
    let mut input = vec![0u8];
    input.extend_from_slice(&payload);
    assert_eq!(fuzzing::chunk(&input), 1);
    // The same bytes with a flipped tag are a bad entry: nothing replays, nothing panics.
    input[1] = 9;
    assert_eq!(fuzzing::chunk(&input), 0);
}

#[test]
fn the_zstd_seed_reaches_the_entry_parser() {
    // fuzz/corpus/chunk/zstd-lab-deadpeer: the chunk of tests/fixtures/lab-deadpeer.rdmt packed
    // for storage (`examples/rewrite --storage`), behind mode byte 3 (zstd) and its raw length.
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let seed = std::fs::read(format!("{root}/fuzz/corpus/chunk/zstd-lab-deadpeer")).expect("seed");
    let fixture =
        std::fs::read(format!("{root}/tests/fixtures/lab-deadpeer.rdmt")).expect("fixture");
    let n = fuzzing::chunk(&seed);
    assert!(n > 0);
    assert_eq!(n, fuzzing::recording(&fixture));
}
