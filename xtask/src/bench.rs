//! `cargo xtask bench`: what rdmatrace costs, measured where it is paid, written to
//! BENCHMARKS.md with the machine, the kernel and the command that reproduces every figure.
//!
//! - replay: criterion bench of read + decode + correlate over a synthetic recording, and
//!   side by side with the previous release's (built from its source in the same run)
//! - size: bytes/event of real and synthetic recordings
//! - attach: `rdmatrace trace` from exec to ready on this host, and where the time went
//! - storm: a fork/exit storm on this host under `rdmatrace record` (delivered, lost, CPU, RSS)
//! - serve: the metrics agent's pipeline at 1,000 processes / 10,000 QPs, and a day of churn
//! - lab: perftest over Soft-RoCE, interleaved without a tracer / with rdmatrace / with
//!   bpftrace; attach time, peak RSS

mod attach;
mod bigfile;
mod fleet;
mod history;
mod hostcost;
mod lab;
mod progcost;
mod replay;
mod report;
mod scale;
mod serve;
mod sidebyside;
mod sizes;
mod storm;
mod tried;

use std::{path::PathBuf, process::Command};

use anyhow::Context as _;

use crate::{bootstrap, cmd};

pub struct BenchOptions {
    /// Rounds of the interleaved lab runs (each: none, rdmatrace, bpftrace).
    pub rounds: u32,
    pub storm_secs: u32,
    pub skip_lab: bool,
}

/// The command line that reproduces this run.
fn reproduce(o: &BenchOptions) -> String {
    let mut s = format!(
        "cargo xtask bench --rounds {} --storm-secs {}",
        o.rounds, o.storm_secs
    );
    if o.skip_lab {
        s += " --skip-lab";
    }
    s
}

pub fn out_dir() -> PathBuf {
    cmd::repo_root().join("target/bench")
}

pub fn release_bin(name: &str) -> PathBuf {
    cmd::repo_root().join("target/release").join(name)
}

pub fn run(o: &BenchOptions) -> anyhow::Result<()> {
    // First: the load average before anything of the bench ran.
    let machine = report::Machine::here();
    bootstrap::toolchain()?;
    bootstrap::workload_deps()?;
    bootstrap::bench()?;
    std::fs::create_dir_all(out_dir()).context("cannot create target/bench")?;
    // The measured binaries are release builds, with the example that re-encodes the committed
    // fixtures in the current format (recording size).
    cmd::run(
        Command::new("cargo")
            .current_dir(cmd::repo_root())
            .env("PATH", cmd::path_with_cargo_bin())
            .args([
                "build",
                "--release",
                "-p",
                "rdmatrace",
                "-p",
                "rdmatrace-workloads",
                "--bins",
                "--example",
                "rewrite",
                "--example",
                "serve_load",
                "--example",
                "fleet_synth",
                "--example",
                "scale_synth",
            ]),
    )?;
    eprintln!("\n== bench 1/3: replay throughput (criterion)");
    let replay = replay::run()?;
    eprintln!("\n== bench: replay side by side with the previous release");
    // A failure is reported in BENCHMARKS.md, not fatal to the other figures.
    let side = sidebyside::run().map_err(|e| format!("{e:#}"));
    eprintln!("\n== bench: attach time on this host");
    // A failure is reported in BENCHMARKS.md, not fatal to the other figures.
    let attach = attach::run(10).map_err(|e| format!("{e:#}"));
    eprintln!("\n== bench: socket hooks' cost per run on this host (native, side by side)");
    // A failure is reported in BENCHMARKS.md, not fatal to the other figures.
    let host_cost = hostcost::run().map_err(|e| format!("{e:#}"));
    eprintln!(
        "\n== bench 2/3: ingest storm on this host ({} s)",
        o.storm_secs
    );
    let storms = storm::run(o.storm_secs)?;
    eprintln!("\n== bench: replay of a 1 GiB recording (memory)");
    // A failure is reported in BENCHMARKS.md, not fatal to the other figures.
    let big = bigfile::run().map_err(|e| format!("{e:#}"));
    eprintln!("\n== bench: serve at 1,000 processes / 10,000 QPs, and a day of churn");
    // A failure is reported in BENCHMARKS.md, not fatal to the other figures.
    let serve = serve::run().map_err(|e| format!("{e:#}"));
    eprintln!("\n== bench: report over 1, 4 and 16 hosts' recordings");
    let fleet = fleet::run().map_err(|e| format!("{e:#}"));
    eprintln!("\n== bench: 1 M QPs in the correlator, a flamegraph of 1 M samples");
    let scale = scale::run().map_err(|e| format!("{e:#}"));
    let lab = if o.skip_lab {
        eprintln!("\n== bench 3/3: lab SKIPPED (--skip-lab)");
        None
    } else {
        eprintln!(
            "\n== bench 3/3: lab (perftest over Soft-RoCE, {} rounds)",
            o.rounds
        );
        // A failed lab is reported in BENCHMARKS.md, not fatal to the other figures.
        Some(lab::run(o.rounds).map_err(|e| format!("{e:#}")))
    };
    let load_after = report::loadavg();
    let inputs = report::Inputs {
        machine: &machine,
        reproduce: &reproduce(o),
        replay: &replay,
        side: side.as_ref(),
        storms: &storms,
        attach: attach.as_ref(),
        host_cost: host_cost.as_ref(),
        big: big.as_ref(),
        serve: serve.as_ref(),
        fleet: fleet.as_ref(),
        scale: scale.as_ref(),
        lab: lab.as_ref().map(|r| r.as_ref()),
        fixtures: &report::fixture_sizes()?,
        load_after: &load_after,
    };
    let figures = history::figures(&inputs);
    let previous = history::previous(&inputs);
    let mut md = report::markdown(&inputs);
    history::section(&mut md, &figures, previous.as_ref());
    history::append(&inputs, &figures)?;
    let path = cmd::repo_root().join("BENCHMARKS.md");
    std::fs::write(&path, md).with_context(|| format!("cannot write {}", path.display()))?;
    eprintln!("\nbench: wrote {}", path.display());
    Ok(())
}

/// Counts the records of a recording (`trace --input --json` lines, `lost` lines included) whose
/// JSON matches `filter` (a substring), with the release binary.
pub fn count_records(file: &std::path::Path, filter: &str) -> anyhow::Result<u64> {
    let out = Command::new(release_bin("rdmatrace"))
        .arg("trace")
        .arg("--input")
        .arg(file)
        .arg("--json")
        .output()
        .with_context(|| format!("cannot replay {}", file.display()))?;
    anyhow::ensure!(
        out.status.success(),
        "replaying {} failed: {}",
        file.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains(filter))
        .count() as u64)
}

/// (format version, preamble + header bytes) of a recording file.
pub fn recording_layout(file: &std::path::Path) -> anyhow::Result<(u32, u64)> {
    let mut pre = [0u8; 16];
    std::io::Read::read_exact(
        &mut std::fs::File::open(file)
            .with_context(|| format!("cannot open {}", file.display()))?,
        &mut pre,
    )
    .with_context(|| format!("{} has no recording preamble", file.display()))?;
    let word = |at: usize| u32::from_le_bytes([pre[at], pre[at + 1], pre[at + 2], pre[at + 3]]);
    Ok((word(8), 16 + u64::from(word(12))))
}

/// Median of `v` (mean of the middle two for an even count); `None` when empty.
pub fn median(v: &[f64]) -> Option<f64> {
    let mut v: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

#[cfg(test)]
mod tests {
    use super::median;

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median(&[f64::NAN]), None);
        assert_eq!(median(&[]), None);
    }
}
