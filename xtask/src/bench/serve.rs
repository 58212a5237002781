//! `rdmatrace serve` under load: the `serve_load` example (release build) pushes synthetic
//! records of 1,000 processes holding 10,000 QPs through the real pipeline (stage, correlator,
//! metrics sink) and scrapes the real endpoint; then a simulated day of process churn. What it
//! prints is turned into BENCHMARKS.md's serve section.

use std::{fmt::Write as _, process::Command};

use anyhow::Context as _;
use serde_json::Value;

use crate::cmd;

pub const COMMAND: &str = "cargo run --release -p rdmatrace --example serve_load";

/// What `serve_load` printed (one JSON object).
pub struct ServeLoad(Value);

pub fn run() -> anyhow::Result<ServeLoad> {
    let bin = cmd::repo_root().join("target/release/examples/serve_load");
    let out = Command::new(&bin)
        .output()
        .with_context(|| format!("cannot run {}", bin.display()))?;
    anyhow::ensure!(
        out.status.success(),
        "serve_load failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).context("serve_load printed no JSON")?;
    Ok(ServeLoad(v))
}

impl ServeLoad {
    pub fn json(&self) -> &Value {
        &self.0
    }

    fn u(&self, k: &str) -> u64 {
        self.0[k].as_u64().unwrap_or(0)
    }
    fn f(&self, k: &str) -> f64 {
        self.0[k].as_f64().unwrap_or(f64::NAN)
    }
}

fn mib(kib: u64) -> String {
    format!("{:.1} MiB", kib as f64 / 1024.0)
}

fn verdict(ok: bool) -> &'static str {
    if ok {
        "met"
    } else {
        "**not met**"
    }
}

pub fn section(s: &mut String, r: Result<&ServeLoad, &String>) {
    let _ = writeln!(s, "## `rdmatrace serve` at fleet size (synthetic)\n");
    let r = match r {
        Ok(r) => r,
        Err(e) => {
            let _ = writeln!(s, "Not measured: {e}\n");
            return;
        }
    };
    let _ = writeln!(
        s,
        "Reproduce: `{COMMAND}` (`rdmatrace/examples/serve_load.rs`). In one process, synthetic \
         records go through the real `Stage` (correlator) into the real metrics sink, and the \
         real endpoint is scraped over loopback. Steady state: {} processes holding {} QPs in \
         RTS; every simulated second each QP reports traffic, each process TCP bytes, 100 \
         retransmits are blamed, then the once-a-second refresh runs. No kernel is involved: \
         this is the agent's user-space cost, the part that grows with the fleet.\n",
        r.u("processes"),
        r.u("qps")
    );
    let secs = r.u("steady_secs").max(1);
    let scrape_max = r.f("scrape_ms_max");
    let peak = r.u("peak_rss_kib");
    let _ = writeln!(s, "| metric | target | measured |\n|---|---|---|");
    let _ = writeln!(
        s,
        "| CPU at steady state ({} records in {} simulated s, refreshes included) | — | {:.1} % of a core ({:.0} ns per record) |",
        r.u("steady_records"),
        secs,
        r.f("cpu_share_per_sec") * 100.0,
        r.u("steady_cpu_ns") as f64 / r.u("steady_records").max(1) as f64
    );
    let _ = writeln!(
        s,
        "| RSS: before the traffic / at steady state / peak (VmHWM) | < 128 MiB | {} / {} / {} ({}) |",
        mib(r.u("rss_before_kib")),
        mib(r.u("rss_steady_kib")),
        mib(peak),
        verdict(peak < 128 * 1024)
    );
    let _ = writeln!(
        s,
        "| scrape of /metrics, {} series, {} bytes: median / max of {} | < 50 ms | {:.1} ms / {:.1} ms ({}) |",
        r.u("series_steady"),
        r.u("scrape_bytes"),
        r.u("scrapes"),
        r.f("scrape_ms_median"),
        scrape_max,
        verdict(scrape_max < 50.0)
    );
    let _ = writeln!(
        s,
        "\n**Churn.** Then a simulated day ({} simulated s, ticked once a second as the agent \
         does) of one short-lived process a second, each in a Kubernetes pod cgroup of its own — it \
         creates a QP, sends 2 MiB over TCP, destroys the QP and exits — with the default 5-minute grace, the steady set still alive (idle). \
         {:.1} s of CPU for the day. RSS and per-process series at the end of each hour:\n",
        r.u("churn_secs"),
        r.u("churn_cpu_ns") as f64 / 1e9
    );
    let hours = r.0["churn_by_hour"].as_array().cloned().unwrap_or_default();
    let _ = writeln!(s, "| hour | RSS | series |\n|---|---|---|");
    for h in &hours {
        let _ = writeln!(
            s,
            "| {} | {} | {} |",
            h["hour"],
            mib(h["rss_kib"].as_u64().unwrap_or(0)),
            h["series"]
        );
    }
    let rss: Vec<u64> = hours.iter().filter_map(|h| h["rss_kib"].as_u64()).collect();
    if let (Some(first), Some(last)) = (rss.first(), rss.last()) {
        let half = &rss[rss.len() / 2..];
        let (lo, hi) = half
            .iter()
            .fold((u64::MAX, 0), |(lo, hi), v| (lo.min(*v), hi.max(*v)));
        let _ = writeln!(
            s,
            "\nRSS went from {} after the first hour to {} after the last; over the second half \
             of the day it stayed between {} and {}.\n",
            mib(*first),
            mib(*last),
            mib(lo),
            mib(hi)
        );
    }
}
