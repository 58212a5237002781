//! Ingest storm on this host: `rdmatrace record -- rt-storm --mode tcp` (loopback connections
//! opened and reset as fast as the workers can, each a handful of traced TCP state changes),
//! the recorder's CPU time and peak RSS sampled from /proc while it runs; once with the default
//! ring buffer, once with the smallest.

use std::{
    path::PathBuf,
    process::{Command, Stdio},
    thread,
    time::{Duration, Instant},
};

use anyhow::Context as _;

use super::{count_records, out_dir, release_bin};

pub struct Storm {
    pub ringbuf: Option<u32>,
    /// Connections rt-storm made, and their rate.
    pub generated: u64,
    pub rate: f64,
    /// How long rt-storm ran, s.
    pub storm_secs: f64,
    /// `tcp_state` events in the recording, and what the recorder said was lost.
    pub delivered: u64,
    pub lost: u64,
    /// Recorder CPU (user + system) while running, ms; wall time, ms.
    pub cpu_ms: f64,
    pub wall_ms: f64,
    pub rss_kib: u64,
    pub file_bytes: u64,
    pub file_records: u64,
    /// Format version and preamble + header bytes of the recording.
    pub format: Option<u32>,
    pub header_bytes: Option<u64>,
    pub command: String,
}

/// (utime + stime in ms, VmHWM in KiB) of a live process.
pub(super) fn sample(pid: u32, tck: f64) -> Option<(f64, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the `(comm)`, which may hold spaces: state is field 3, utime 14, stime 15.
    let rest = stat.rsplit_once(')')?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let hwm = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())?;
    Some((ticks * 1000.0 / tck, hwm))
}

pub(super) fn clock_ticks() -> f64 {
    crate::cmd::output(Command::new("getconf").arg("CLK_TCK"))
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}

/// "rdmatrace: N events, M lost, recorded to ..." -> M.
fn lost_from(stderr: &str) -> Option<u64> {
    let line = stderr.lines().find(|l| l.contains(" lost, recorded to "))?;
    let before = line.split(" lost,").next()?;
    before.rsplit(' ').next()?.parse().ok()
}

fn one(secs: u32, ringbuf: Option<u32>) -> anyhow::Result<Storm> {
    let file: PathBuf = out_dir().join(format!("storm-{}.rdmt", ringbuf.unwrap_or(0)));
    let mut args: Vec<String> = vec![
        "record".into(),
        "--force".into(),
        "-o".into(),
        file.display().to_string(),
    ];
    if let Some(rb) = ringbuf {
        args.extend(["--ringbuf-size".into(), rb.to_string()]);
    }
    args.extend([
        "--".into(),
        release_bin("rt-storm").display().to_string(),
        "--mode".into(),
        "tcp".into(),
        "--secs".into(),
        secs.to_string(),
    ]);
    let command = format!("target/release/rdmatrace {}", args.join(" "))
        .replace(&crate::cmd::repo_root().display().to_string(), ".");
    eprintln!("bench: {command}");
    let tck = clock_ticks();
    let started = Instant::now();
    let mut child = Command::new(release_bin("rdmatrace"))
        .args(&args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("cannot start rdmatrace record")?;
    let mut last = (0.0, 0);
    while child.try_wait()?.is_none() {
        if let Some(s) = sample(child.id(), tck) {
            last = s;
        }
        thread::sleep(Duration::from_millis(50));
    }
    let wall_ms = started.elapsed().as_secs_f64() * 1000.0;
    let out = child.wait_with_output()?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    anyhow::ensure!(
        out.status.success(),
        "record -- rt-storm failed ({}):\n{stderr}",
        out.status
    );
    let storm_line = stdout
        .lines()
        .find(|l| l.starts_with("rt-storm: "))
        .context("rt-storm printed no summary")?;
    let nums: Vec<f64> = storm_line
        .split(|c: char| !(c.is_ascii_digit() || c == '.'))
        .filter_map(|w| w.parse().ok())
        .collect();
    let (generated, storm_secs, rate) = match nums[..] {
        [n, s, r, ..] => (n as u64, s, r),
        _ => anyhow::bail!("cannot parse {storm_line:?}"),
    };
    let delivered = count_records(&file, r#""type":"tcp_state""#)?;
    let layout = super::recording_layout(&file).ok();
    Ok(Storm {
        ringbuf,
        generated,
        rate,
        storm_secs,
        delivered,
        lost: lost_from(&stderr).context("the recorder did not say how many events were lost")?,
        cpu_ms: last.0,
        wall_ms,
        rss_kib: last.1,
        file_bytes: std::fs::metadata(&file)?.len(),
        file_records: count_records(&file, "")?,
        format: layout.map(|l| l.0),
        header_bytes: layout.map(|l| l.1),
        command,
    })
}

pub fn run(secs: u32) -> anyhow::Result<Vec<Storm>> {
    // record needs root (or CAP_BPF + CAP_PERFMON).
    let uid = crate::cmd::output(Command::new("id").arg("-u")).unwrap_or_default();
    if uid.trim() != "0" {
        eprintln!("bench: not root: the storm needs to load eBPF programs; skipped");
        return Ok(Vec::new());
    }
    // The smallest ring buffer rdmatrace accepts shows the loss accounting at work.
    Ok(vec![one(secs, None)?, one(secs, Some(4096))?])
}

#[cfg(test)]
mod tests {
    use super::lost_from;

    #[test]
    fn lost_count_is_read_from_the_recorder_summary() {
        let err = "Recording RDMA events... Hit Ctrl-C to end.\n\
                   rdmatrace: 120 events, 7 lost, recorded to /tmp/x.rdmt (900 bytes)\n";
        assert_eq!(lost_from(err), Some(7));
        assert_eq!(lost_from("nothing here"), None);
    }
}
