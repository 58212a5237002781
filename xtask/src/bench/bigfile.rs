//! Replay memory: recordings far larger than memory should need — a real lab fixture's chunks
//! written again and again up to 256 MiB and 1 GiB — replayed by `rdmatrace trace --input`
//! (every record decoded and correlated, none printed: `--comm` matches no process), the peak
//! RSS sampled from /proc while it runs. Recordings are read as a stream, a few chunks at a
//! time (read and decompressed on a thread ahead of decoding), so the peak should not grow with
//! the file.

use std::{
    io::Write as _,
    process::{Command, Stdio},
    thread,
    time::{Duration, Instant},
};

use anyhow::Context as _;

use super::{out_dir, release_bin, storm};

/// The fixture whose chunks make the big file.
const FIXTURE: &str = "tests/fixtures/lab-loss.rdmt";
/// The files' sizes, at least.
const SIZES: [u64; 2] = [1 << 28, 1 << 30];

/// One replay of a big file.
pub struct Run {
    pub file_bytes: u64,
    pub events: u64,
    pub wall_ms: f64,
    pub rss_kib: u64,
    pub command: String,
}

pub struct BigReplay {
    pub runs: Vec<Run>,
}

/// Preamble + header length of a recording (`u32` LE at offset 12, plus 16).
fn body_offset(bytes: &[u8]) -> anyhow::Result<usize> {
    let len = bytes
        .get(12..16)
        .context("fixture shorter than a preamble")?;
    Ok(16 + u32::from_le_bytes([len[0], len[1], len[2], len[3]]) as usize)
}

/// Events in a recording (`report --json`'s count).
fn events_in(file: &std::path::Path) -> anyhow::Result<u64> {
    let out = Command::new(release_bin("rdmatrace"))
        .arg("report")
        .arg(file)
        .arg("--json")
        .output()
        .context("cannot run rdmatrace report")?;
    let json: serde_json::Value =
        serde_json::from_slice(&out.stdout).context("rdmatrace report --json")?;
    Ok(json["data"]["events"].as_u64().unwrap_or(0))
}

/// Replays `file` through `trace --input` printing nothing; (peak RSS KiB, wall ms).
fn replay(file: &std::path::Path) -> anyhow::Result<(u64, f64)> {
    let tck = storm::clock_ticks();
    let start = Instant::now();
    let mut child = Command::new(release_bin("rdmatrace"))
        .args(["trace", "--comm", "no-such-process", "--input"])
        .arg(file)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .context("cannot run rdmatrace report")?;
    let pid = child.id();
    let mut peak = 0;
    let out = child.stdout.take();
    let reader = thread::spawn(move || {
        let mut s = String::new();
        if let Some(mut o) = out {
            let _ = std::io::Read::read_to_string(&mut o, &mut s);
        }
        s
    });
    loop {
        if let Some((_, hwm)) = storm::sample(pid, tck) {
            peak = peak.max(hwm);
        }
        if child.try_wait()?.is_some() {
            break;
        }
        thread::sleep(Duration::from_millis(20));
    }
    let wall = start.elapsed().as_secs_f64() * 1e3;
    let _ = reader.join();
    Ok((peak, wall))
}

pub fn run() -> anyhow::Result<BigReplay> {
    let root = crate::cmd::repo_root();
    let fixture = std::fs::read(root.join(FIXTURE)).context(FIXTURE)?;
    let body = body_offset(&fixture)?;
    let per_copy = events_in(&root.join(FIXTURE))?;
    let mut runs = Vec::new();
    for size in SIZES {
        let path = out_dir().join("big.rdmt");
        let mut f = std::io::BufWriter::new(
            std::fs::File::create(&path)
                .with_context(|| format!("cannot create {}", path.display()))?,
        );
        f.write_all(&fixture)?;
        let mut written = fixture.len() as u64;
        let mut copies = 1;
        while written < size {
            f.write_all(&fixture[body..])?;
            written += (fixture.len() - body) as u64;
            copies += 1;
        }
        f.flush()?;
        drop(f);
        let (rss_kib, wall_ms) = replay(&path)?;
        let _ = std::fs::remove_file(&path);
        runs.push(Run {
            file_bytes: written,
            events: per_copy * copies,
            wall_ms,
            rss_kib,
            command: format!(
                "rdmatrace trace --comm no-such-process --input target/bench/big.rdmt \
                 ({FIXTURE}'s chunks x {copies})"
            ),
        });
    }
    Ok(BigReplay { runs })
}
