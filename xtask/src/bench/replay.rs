//! Replay throughput: runs the criterion bench `rdmatrace/benches/replay.rs` and reads its
//! medians back from criterion's estimates.

use std::process::{Command, Stdio};

use anyhow::Context as _;
use serde_json::Value;

use crate::cmd;

pub const COMMAND: &str = "cargo bench -p rdmatrace --bench replay -- --noplot";

pub struct Replay {
    pub events: u64,
    pub bytes: u64,
    /// Bytes after the preamble and header (chunks only).
    pub stream_bytes: Option<u64>,
    /// The same recording packed for storage (as `record` leaves a finished one): whole file.
    pub packed_bytes: Option<u64>,
    /// (benchmark name, median ns per pass over the whole recording, low, high of its 95% CI).
    pub results: Vec<(&'static str, f64, f64, f64)>,
}

impl Replay {
    pub fn events_per_sec(&self, ns: f64) -> f64 {
        self.events as f64 / (ns / 1e9)
    }
}

/// Criterion's median (ns per pass) of benchmark `replay/NAME` and its 95 % CI, from the
/// estimates under `home` (criterion's output folder).
pub fn estimate(home: &std::path::Path, name: &str) -> anyhow::Result<(f64, f64, f64)> {
    let path = home.join("replay").join(name).join("new/estimates.json");
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("cannot read {}", path.display()))?;
    let v: Value =
        serde_json::from_str(&text).with_context(|| format!("{} is not JSON", path.display()))?;
    let m = &v["median"];
    let num = |x: &Value| {
        x.as_f64()
            .with_context(|| format!("no median in {}", path.display()))
    };
    Ok((
        num(&m["point_estimate"])?,
        num(&m["confidence_interval"]["lower_bound"])?,
        num(&m["confidence_interval"]["upper_bound"])?,
    ))
}

pub fn run() -> anyhow::Result<Replay> {
    let out = Command::new("cargo")
        .current_dir(cmd::repo_root())
        .env("PATH", cmd::path_with_cargo_bin())
        .args([
            "bench",
            "-p",
            "rdmatrace",
            "--bench",
            "replay",
            "--",
            "--noplot",
        ])
        .stderr(Stdio::inherit())
        .output()
        .context("cannot run cargo bench")?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    print!("{stdout}");
    anyhow::ensure!(out.status.success(), "cargo bench failed: {}", out.status);
    // "synthetic recording: N events, B bytes, X bytes/event"
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("synthetic recording: "))
        .context("the bench did not describe its recording")?;
    let nums: Vec<u64> = line
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|w| w.parse().ok())
        .collect();
    let (events, bytes) = match nums[..] {
        [e, b, ..] => (e, b),
        _ => anyhow::bail!("cannot parse {line:?}"),
    };
    // "synthetic recording stream: S bytes after the header"
    let stream_bytes = stdout
        .lines()
        .find_map(|l| l.strip_prefix("synthetic recording stream: "))
        .and_then(|l| l.split(' ').next()?.parse().ok());
    // "  packed for storage: P bytes, ..."
    let packed_bytes = stdout
        .lines()
        .find_map(|l| l.trim_start().strip_prefix("packed for storage: "))
        .and_then(|l| l.split(' ').next()?.parse().ok());
    let mut results = Vec::new();
    for name in ["file", "file_packed", "decode_correlate"] {
        let (m, lo, hi) = estimate(&cmd::repo_root().join("target/criterion"), name)?;
        results.push((name, m, lo, hi));
    }
    Ok(Replay {
        events,
        bytes,
        stream_bytes,
        packed_bytes,
        results,
    })
}
