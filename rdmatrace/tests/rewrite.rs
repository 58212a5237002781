//! The lab recordings of formats 1 and 2 (tests/fixtures/old/, kept for this) re-encoded by today's writer (version 3)
//! replay to exactly the same output: every record, its JSON and its text line, and the same
//! header. Prints the sizes before and after (`cargo test --test rewrite -- --nocapture`).

use rdmatrace::{
    correlate::filter::Filter,
    event::Record,
    recording::{reader::Recording, writer::rewrite, VERSION},
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
        let (new, size, problems) = rewrite(&rec, Vec::new(), VERSION).expect("rewrite");
        assert!(problems.is_empty(), "{name}: {problems:?}");
        assert_eq!(size, new.len() as u64);
        let again = Recording::from_bytes(new.clone()).expect("rewritten opens");
        assert_eq!(again.version, VERSION);
        assert_eq!(again.header, rec.header, "{name}");
        assert_eq!(printed(new.clone()), records, "{name}");
        // Same events written the old way, chunked the same: the format's own gain.
        let (v2, ..) = rewrite(&rec, Vec::new(), 2).expect("rewrite v2");
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
    let (new, ..) = rewrite(&rec, Vec::new(), VERSION).expect("rewrite");
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
