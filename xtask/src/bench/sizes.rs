//! The "Recording size" section of BENCHMARKS.md: the synthetic mix, the host storms, the lab's
//! fresh recordings and every committed fixture, as committed and packed for storage.

use std::{fmt::Write as _, process::Command};

use anyhow::Context as _;

use super::{count_records, lab::LabResults, replay, report::Inputs};
use crate::cmd;

/// One committed real recording: as committed, and re-encoded in the current format, packed
/// as `record` packs a finished recording.
pub struct FixtureSize {
    pub name: String,
    pub records: u64,
    /// (format version, file bytes, preamble + header bytes).
    pub committed: (u32, u64, u64),
    pub rewritten: Option<(u32, u64, u64)>,
}

/// Every committed real recording, with its re-encoding by `examples/rewrite --storage`
/// (release build).
pub fn fixture_sizes() -> anyhow::Result<Vec<FixtureSize>> {
    let dir = cmd::repo_root().join("tests/fixtures");
    let mut out = Vec::new();
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .with_context(|| format!("cannot list {}", dir.display()))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "rdmt"))
        .collect();
    files.sort();
    let rewrite = cmd::repo_root().join("target/release/examples/rewrite");
    for f in files {
        let name = f
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let layout = |p: &std::path::Path| -> anyhow::Result<(u32, u64, u64)> {
            let (version, header) = super::recording_layout(p)?;
            Ok((version, std::fs::metadata(p)?.len(), header))
        };
        let target = super::out_dir().join(format!("rewritten-{name}"));
        let rewritten = Command::new(&rewrite)
            .arg("--storage")
            .arg(&f)
            .arg(&target)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .and_then(|_| layout(&target).ok());
        out.push(FixtureSize {
            records: count_records(&f, "")?,
            committed: layout(&f)?,
            rewritten,
            name,
        });
    }
    Ok(out)
}

/// (name, records, bytes, (format, header bytes)).
pub type FreshSize = (String, u64, u64, Option<(u32, u64)>);

/// The lab's fresh recordings (`xtask/lab/sizes.sh`): (name, records, bytes, (format, header
/// bytes) of the file left in target/lab/bench).
pub fn lab_fresh_sizes(lab: &LabResults) -> Vec<FreshSize> {
    lab.series()
        .into_iter()
        .filter(|(m, _)| m == "size_events")
        .filter_map(|(_, name)| {
            let events = *lab.values("size_events", &name).first()? as u64;
            let bytes = *lab.values("size_bytes", &name).first()? as u64;
            let file = crate::cmd::repo_root()
                .join("target/lab/bench")
                .join(format!("size-{name}.rdmt"));
            let header = super::recording_layout(&file).ok();
            Some((name, events, bytes, header))
        })
        .collect()
}

/// `bytes / records`, one decimal.
fn per(bytes: u64, records: u64) -> String {
    format!("{:.1}", bytes as f64 / records.max(1) as f64)
}

pub(super) fn size_section(s: &mut String, i: &Inputs<'_>) {
    let _ = writeln!(s, "## Recording size\n");
    let _ = writeln!(
        s,
        "Target ≤ 24 bytes/event. Whole files (preamble, header, chunk headers) divided by their \
         records (`rdmatrace trace --input F --json | wc -l`, `lost` lines included); the last \
         column leaves the preamble and the JSON header out: the marginal cost of an event.\n"
    );
    let _ = writeln!(
        s,
        "| recording | format | records | bytes | bytes/event | bytes/event after the header | reproduce |\n|---|---|---|---|---|---|---|"
    );
    let r = i.replay;
    let _ = writeln!(
        s,
        "| synthetic mix (replay bench) | current | {} | {} | {} | {} | `{}` |",
        r.events,
        r.bytes,
        per(r.bytes, r.events),
        r.stream_bytes
            .map_or_else(|| "?".into(), |b| per(b, r.events)),
        replay::COMMAND
    );
    if let Some(b) = r.packed_bytes {
        let _ = writeln!(
            s,
            "| synthetic mix packed for storage (replay bench) | current | {} | {b} | {} | not measured | `{}` |",
            r.events,
            per(b, r.events),
            replay::COMMAND
        );
    }
    for st in i.storms {
        let _ = writeln!(
            s,
            "| TCP state storm, host{} | {} | {} | {} | {} | {} | `{}` |",
            st.ringbuf
                .map_or(String::new(), |b| format!(", ring buffer {b} B")),
            st.format.map_or_else(|| "?".into(), |v| format!("v{v}")),
            st.file_records,
            st.file_bytes,
            per(st.file_bytes, st.file_records),
            st.header_bytes.map_or_else(
                || "?".into(),
                |h| per(st.file_bytes.saturating_sub(h), st.file_records)
            ),
            st.command
        );
    }
    if let Some(Ok(lab)) = i.lab {
        let ev = lab.values("rec_events", "rdmatrace");
        let by = lab.values("rec_bytes", "rdmatrace");
        let (e, b): (f64, f64) = (ev.iter().sum(), by.iter().sum());
        if e > 0.0 {
            let _ = writeln!(
                s,
                "| lab: ib_write_bw + ib_send_lat + control-path churn under `record` ({} runs) | current | {e:.0} | {b:.0} | {:.1} | not measured | `{}` |",
                ev.len(),
                b / e,
                i.reproduce
            );
        }
        for (name, events, bytes, header) in lab_fresh_sizes(lab) {
            let _ = writeln!(
                s,
                "| lab, fresh: {name} under `record -- CMD` (today's probe set) | v{} | {events} | {bytes} | {} | {} | `bash xtask/lab/sizes.sh` (in the lab) |",
                header.map_or_else(|| "?".into(), |h| h.0.to_string()),
                per(bytes, events),
                header.map_or_else(|| "?".into(), |h| per(bytes - h.1.min(bytes), events)),
            );
        }
    }
    for f in i.fixtures {
        let (v, bytes, header) = f.committed;
        let what = if f.name.starts_with("lab-") {
            "real, lab"
        } else {
            "synthetic"
        };
        let _ = writeln!(
            s,
            "| tests/fixtures/{} ({what}, as committed) | v{v} | {} | {bytes} | {} | {} | `rdmatrace trace --input tests/fixtures/{} --json \\| wc -l` |",
            f.name,
            f.records,
            per(bytes, f.records),
            per(bytes - header.min(bytes), f.records),
            f.name
        );
        // A file the packing leaves as it is: no row.
        if let Some((v, bytes, header)) = f
            .rewritten
            .filter(|r| (r.0, r.1) != (f.committed.0, f.committed.1))
        {
            let _ = writeln!(
                s,
                "| tests/fixtures/{} re-encoded, packed for storage | v{v} | {} | {bytes} | {} | {} | `cargo run --release -p rdmatrace --example rewrite -- --storage tests/fixtures/{} out.rdmt` |",
                f.name,
                f.records,
                per(bytes, f.records),
                per(bytes - header.min(bytes), f.records),
                f.name
            );
        }
    }
    let _ = writeln!(
        s,
        "\nIn format version 3 (see `rdmatrace/src/recording/mod.rs`) an event's 40-byte \
         `EventHeader` is stored as a delta within its chunk — `kind` and `cpu` as varints, \
         `ts_ns` as a zigzag varint from the previous event, `pid`/`tid`/`comm` as an index into \
         the chunk's table of tasks — and the trailing zero bytes of its body are cut (their \
         count is stored, the reader rebuilds the exact record); the JSON header is LZ4 with a \
         frozen dictionary (a typical probe report). Chunks stay independently decodable. \
         The recorder writes an LZ4 chunk at least once a second; from format 7, `record` packs \
         a finished recording for storage (chunks merged up to 1 MiB, zstd at level 19 up to \
         64 KiB of recording, 12 up to 4 MiB, 9 up to 16 MiB, 3 above): the recordings `record` made above are \
         packed, and so are the re-encoded rows; the synthetic mix is written as the recorder \
         writes, LZ4, unpacked.\n"
    );
}
