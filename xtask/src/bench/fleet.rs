//! Several hosts in one report: `rdmatrace report` over the synthetic recordings of 1, 4 and 16
//! hosts (`examples/fleet_synth.rs`: 1 M events each, 64 connected QPs per host, hosts in
//! pairs), its wall time and peak RSS sampled from /proc, and how they grow with the hosts.

use std::{
    fmt::Write as _,
    process::{Command, Stdio},
    thread,
    time::{Duration, Instant},
};

use anyhow::Context as _;

use super::{out_dir, release_bin, storm};

const HOSTS: [usize; 3] = [1, 4, 16];
const EVENTS: u64 = 1_000_000;
const QPS: u32 = 64;

pub struct Run {
    pub hosts: usize,
    pub events: u64,
    pub bytes: u64,
    pub wall_ms: f64,
    pub rss_kib: u64,
    pub command: String,
}

pub struct FleetBench {
    pub runs: Vec<Run>,
}

/// Runs `cmd` with its output discarded; (peak RSS KiB, wall ms).
pub(super) fn measure(cmd: &mut Command) -> anyhow::Result<(u64, f64)> {
    let tck = storm::clock_ticks();
    let start = Instant::now();
    let mut child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("cannot start the measured command")?;
    let pid = child.id();
    let mut peak = 0;
    loop {
        if let Some((_, hwm)) = storm::sample(pid, tck) {
            peak = peak.max(hwm);
        }
        if let Some(status) = child.try_wait()? {
            anyhow::ensure!(status.success(), "{cmd:?} failed: {status}");
            break;
        }
        thread::sleep(Duration::from_millis(20));
    }
    Ok((peak, start.elapsed().as_secs_f64() * 1e3))
}

pub fn run() -> anyhow::Result<FleetBench> {
    let mut runs = Vec::new();
    for hosts in HOSTS {
        let dir = out_dir().join(format!("fleet-{hosts}"));
        let _ = std::fs::remove_dir_all(&dir);
        let ok = Command::new(release_bin("examples/fleet_synth"))
            .arg(&dir)
            .args([hosts.to_string(), EVENTS.to_string(), QPS.to_string()])
            .status()
            .context("cannot run examples/fleet_synth")?
            .success();
        anyhow::ensure!(ok, "fleet_synth failed");
        let files: Vec<_> = (0..hosts)
            .map(|i| dir.join(format!("host-{i}.rdmt")))
            .collect();
        let bytes = files
            .iter()
            .map(|f| std::fs::metadata(f).map(|m| m.len()).unwrap_or(0))
            .sum();
        let (rss_kib, wall_ms) = measure(
            Command::new(release_bin("rdmatrace"))
                .arg("report")
                .args(&files)
                .arg("--json"),
        )?;
        let _ = std::fs::remove_dir_all(&dir);
        runs.push(Run {
            hosts,
            events: EVENTS * hosts as u64,
            bytes,
            wall_ms,
            rss_kib,
            command: format!(
                "fleet_synth target/bench/fleet-{hosts} {hosts} {EVENTS} {QPS} && rdmatrace \
                 report target/bench/fleet-{hosts}/host-*.rdmt --json"
            ),
        });
    }
    Ok(FleetBench { runs })
}

/// The BENCHMARKS.md section.
pub fn section(s: &mut String, fleet: Result<&FleetBench, &String>) {
    let _ = writeln!(s, "## Several hosts in one report\n");
    let b = match fleet {
        Ok(b) => b,
        Err(e) => {
            let _ = writeln!(s, "Not measured: {e}\n");
            return;
        }
    };
    let _ = writeln!(
        s,
        "`report` over synthetic recordings of {EVENTS} events per host ({QPS} connected QPs \
         each, hosts in pairs): every recording is replayed and analysed, then the hosts are \
         joined. Growth is against the 1-host row.\n\n\
         | hosts | events | files | wall | events/s | wall × | peak RSS | RSS × | command |\n\
         |---|---|---|---|---|---|---|---|---|"
    );
    let base = b.runs.first().map(|r| (r.wall_ms, r.rss_kib as f64));
    for r in &b.runs {
        let (wx, mx) = base.map_or((f64::NAN, f64::NAN), |(w, m)| {
            (r.wall_ms / w, r.rss_kib as f64 / m)
        });
        let _ = writeln!(
            s,
            "| {} | {} | {:.1} MiB | {:.2} s | {:.2} M | {:.1} | {:.1} MiB | {:.1} | `{}` |",
            r.hosts,
            r.events,
            r.bytes as f64 / (1u64 << 20) as f64,
            r.wall_ms / 1e3,
            r.events as f64 / (r.wall_ms / 1e3) / 1e6,
            wx,
            r.rss_kib as f64 / 1024.0,
            mx,
            r.command
        );
    }
    s.push('\n');
}
