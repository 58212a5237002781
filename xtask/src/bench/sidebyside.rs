//! Replay side by side with the previous release: the source of the commit that wrote the
//! previous figures (the last commit before HEAD that changed `BENCHMARKS.history.jsonl`) is
//! exported, its replay bench built next to today's, and the two bench binaries run in turn
//! (A B A B ...) so that drift of this shared machine hits both alike; each build measures its own
//! synthetic mix.

use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use anyhow::Context as _;
use serde_json::Value;

use super::median;
use crate::cmd;

/// Pairs of runs (previous, today).
const PAIRS: usize = 3;

pub struct SideBySide {
    /// The previous release's commit (short) and its date.
    pub commit: String,
    pub date: String,
    pub pairs: usize,
    /// Per benchmark ("file", "decode_correlate"): medians over the pairs of the previous
    /// build's and today's events/s, and the median of today / previous taken pair by pair.
    pub rows: Vec<Row>,
}

pub struct Row {
    pub name: &'static str,
    pub previous: f64,
    pub today: f64,
    pub ratio: f64,
}

/// `git ARGS` in the repository root: its output, trimmed.
pub(super) fn git(args: &[&str]) -> anyhow::Result<String> {
    let out = Command::new("git")
        .current_dir(cmd::repo_root())
        .args(args)
        .stderr(Stdio::inherit())
        .output()
        .context("cannot run git")?;
    anyhow::ensure!(out.status.success(), "git {args:?} failed: {}", out.status);
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// The bench executable of the `replay` bench of the workspace at `dir`, built (release) into
/// `target_dir`; the previous release's without its kernel programs (replay loads none). The
/// previous release has a target directory of its own: in a shared one, cargo takes its
/// artifacts for today's (the same workspace layout gives them the same names) and they
/// replace each other.
fn build(dir: &Path, target_dir: &Path, skip_probes: bool) -> anyhow::Result<PathBuf> {
    let mut c = Command::new("cargo");
    if skip_probes {
        c.env("AYA_BUILD_SKIP", "1");
    }
    let out = c
        .current_dir(dir)
        .env("PATH", cmd::path_with_cargo_bin())
        .env("CARGO_TARGET_DIR", target_dir)
        .args([
            "bench",
            "-p",
            "rdmatrace",
            "--bench",
            "replay",
            "--no-run",
            "--message-format=json",
        ])
        .stderr(Stdio::inherit())
        .output()
        .context("cannot run cargo bench --no-run")?;
    anyhow::ensure!(
        out.status.success(),
        "building the replay bench in {} failed: {}",
        dir.display(),
        out.status
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["target"]["name"] == "replay")
        .find_map(|v| v["executable"].as_str().map(PathBuf::from))
        .context("cargo named no replay bench executable")
}

/// Events/s per benchmark.
type Rates = Vec<(&'static str, f64)>;

/// One run of a bench executable: events/s per benchmark (criterion's median).
fn measure(exe: &Path, home: &Path) -> anyhow::Result<Rates> {
    let _ = std::fs::remove_dir_all(home);
    let out = Command::new(exe)
        .current_dir(cmd::repo_root().join("rdmatrace"))
        .env("CRITERION_HOME", home)
        // The benchmarks both releases have (today's also replays a packed recording).
        .args(["--bench", "--noplot", "^replay/(file|decode_correlate)$"])
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| format!("cannot run {}", exe.display()))?;
    anyhow::ensure!(out.status.success(), "{} failed", exe.display());
    let stdout = String::from_utf8_lossy(&out.stdout);
    let events: f64 = stdout
        .lines()
        .find_map(|l| l.strip_prefix("synthetic recording: "))
        .and_then(|l| l.split(' ').next()?.parse().ok())
        .context("the bench did not say how many events it replays")?;
    let mut rates = Vec::new();
    for name in ["file", "decode_correlate"] {
        // A bench of the previous release may lack a benchmark: it is left out.
        if let Ok((ns, ..)) = super::replay::estimate(home, name) {
            rates.push((name, events / (ns / 1e9)));
        }
    }
    Ok(rates)
}

pub fn run() -> anyhow::Result<SideBySide> {
    let commit = git(&[
        "log",
        "-1",
        "--format=%H",
        "HEAD^",
        "--",
        "BENCHMARKS.history.jsonl",
    ])?;
    anyhow::ensure!(
        !commit.is_empty(),
        "no earlier commit changed BENCHMARKS.history.jsonl: there is no previous release to compare with"
    );
    let date = git(&["log", "-1", "--format=%cd", "--date=short", &commit])?;
    let out = super::out_dir();
    let src = out.join("previous-release");
    // Unpacked once per commit (a new unpack would make cargo rebuild it).
    let marker = src.join(".rdmatrace-bench-commit");
    if std::fs::read_to_string(&marker).ok().as_deref() != Some(commit.as_str()) {
        let _ = std::fs::remove_dir_all(&src);
        std::fs::create_dir_all(&src)
            .with_context(|| format!("cannot create {}", src.display()))?;
        let archive = Command::new("git")
            .current_dir(cmd::repo_root())
            .args(["archive", "--format=tar", &commit])
            .stdout(Stdio::piped())
            .spawn()
            .context("cannot run git archive")?;
        let status = Command::new("tar")
            .current_dir(&src)
            .arg("-x")
            .stdin(archive.stdout.context("git archive has no output")?)
            .status()
            .context("cannot run tar")?;
        anyhow::ensure!(status.success(), "tar could not unpack {commit}");
        std::fs::write(&marker, &commit)
            .with_context(|| format!("cannot write {}", marker.display()))?;
    }
    eprintln!(
        "bench: previous release {commit} ({date}) in {}",
        src.display()
    );
    let previous = build(&src, &out.join("previous-release-target"), true)?;
    let today = build(&cmd::repo_root(), &cmd::repo_root().join("target"), false)?;
    let mut runs: Vec<(Rates, Rates)> = Vec::new();
    for i in 0..PAIRS {
        eprintln!("bench: side by side, pair {}/{PAIRS}", i + 1);
        let p = measure(&previous, &out.join(format!("criterion-previous-{i}")))?;
        let t = measure(&today, &out.join(format!("criterion-today-{i}")))?;
        runs.push((p, t));
    }
    let mut rows = Vec::new();
    for name in ["file", "decode_correlate"] {
        let get = |v: &[(&str, f64)]| v.iter().find(|(n, _)| *n == name).map(|(_, r)| *r);
        let pairs: Vec<(f64, f64)> = runs
            .iter()
            .filter_map(|(p, t)| Some((get(p)?, get(t)?)))
            .collect();
        if pairs.is_empty() {
            continue;
        }
        rows.push(Row {
            name,
            previous: median(&pairs.iter().map(|p| p.0).collect::<Vec<_>>()).unwrap_or(f64::NAN),
            today: median(&pairs.iter().map(|p| p.1).collect::<Vec<_>>()).unwrap_or(f64::NAN),
            ratio: median(&pairs.iter().map(|p| p.1 / p.0).collect::<Vec<_>>()).unwrap_or(f64::NAN),
        });
    }
    Ok(SideBySide {
        commit: commit.chars().take(7).collect(),
        date,
        pairs: PAIRS,
        rows,
    })
}
