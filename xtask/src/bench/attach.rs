//! Attach time on this host: `rdmatrace trace` from its exec to its ready line, with every probe
//! this host's kernel offers, several runs; and where one start-up spent its time, phase by
//! phase, and the kernel memory its maps hold, as `rdmatrace doctor --json` reports them.

use std::{
    fmt::Write as _,
    io::{BufRead as _, BufReader},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::Context as _;

use super::{median, release_bin};

/// The target of issue #14: ready in under this, on this host.
pub const TARGET_MS: f64 = 300.0;

/// The line `trace` prints once its probes are attached.
const READY: &str = "Tracing RDMA QP events";

pub struct Attach {
    pub runs: u32,
    /// Exec to ready line, per run.
    pub ready_ms: Vec<f64>,
    /// (phase, duration text) of one start-up (`doctor --json`'s `start-up:` items).
    pub phases: Vec<(String, String)>,
    pub attached: usize,
    pub off: usize,
    /// (all maps, the per-CPU ones) in bytes of kernel memory (`doctor`'s `kernel memory:
    /// maps`).
    pub maps_bytes: Option<(u64, u64)>,
}

/// The two figures of the doctor's `kernel memory: maps` detail: "B bytes (...) in N maps; P
/// bytes of them in per-CPU maps, ..."; `None` for any other text (an error).
fn maps_bytes(detail: &str) -> Option<(u64, u64)> {
    let (all, rest) = detail.split_once(" bytes (")?;
    let (_, rest) = rest.split_once("; ")?;
    let (per_cpu, _) = rest.split_once(" bytes of them in per-CPU maps")?;
    Some((all.parse().ok()?, per_cpu.parse().ok()?))
}

/// Exec to the ready line of one `trace` run, which then ends by itself.
fn once() -> anyhow::Result<f64> {
    let start = Instant::now();
    let mut child = Command::new(release_bin("rdmatrace"))
        .args(["trace", "--json", "--duration", "0.2"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("cannot run rdmatrace trace")?;
    let stderr = child.stderr.take().context("no stderr")?;
    let mut ready = None;
    let mut said = String::new();
    for line in BufReader::new(stderr).lines() {
        let line = line.unwrap_or_default();
        if ready.is_none() && line.contains(READY) {
            ready = Some(start.elapsed());
        }
        said.push_str(&line);
        said.push('\n');
    }
    let status = child.wait().context("cannot wait for rdmatrace trace")?;
    let ready = ready.with_context(|| format!("no ready line ({status}): {said}"))?;
    Ok(ready.as_secs_f64() * 1e3)
}

/// (phase, duration text) of `doctor --json`'s `start-up:` items.
pub fn phases(items: &[serde_json::Value]) -> Vec<(String, String)> {
    let text = |i: &serde_json::Value, k: &str| i[k].as_str().unwrap_or("").to_string();
    items
        .iter()
        .filter_map(|i| {
            let item = text(i, "item");
            item.strip_prefix("start-up: ")
                .map(|p| (p.to_string(), text(i, "detail")))
        })
        .collect()
}

/// Where rdmatrace's typed programs were attached (`doctor --json`'s `probe AREA/PROGRAM
/// (KIND TARGET)` items marked attached, KIND `fentry` or `tp_btf`): (kind, target), sorted.
pub fn typed_targets(items: &[serde_json::Value]) -> Vec<(String, String)> {
    let mut t: Vec<(String, String)> = items
        .iter()
        .filter(|i| i["detail"].as_str() == Some("attached"))
        .filter_map(|i| {
            let item = i["item"].as_str()?;
            let rest = item.strip_prefix("probe ")?;
            let (_, hook) = rest.split_once(" (")?;
            let (kind, target) = hook.trim_end_matches(')').split_once(' ')?;
            ["fentry", "tp_btf"]
                .contains(&kind)
                .then(|| (kind.to_string(), target.to_string()))
        })
        .collect();
    t.sort();
    t.dedup();
    t
}

/// The phase table of [`phases`].
pub fn phase_table(s: &mut String, phases: &[(String, String)]) {
    let _ = writeln!(s, "| phase | time |");
    let _ = writeln!(s, "|---|---|");
    for (p, d) in phases {
        let _ = writeln!(s, "| {p} | {d} |");
    }
    let _ = writeln!(s);
}

pub fn run(runs: u32) -> anyhow::Result<Attach> {
    // One warm-up: the first run after a build reads the binary and BTF from disk.
    once()?;
    let mut ready_ms = Vec::new();
    for _ in 0..runs {
        ready_ms.push(once()?);
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = Command::new(release_bin("rdmatrace"))
        .args(["doctor", "--json"])
        .output()
        .context("cannot run rdmatrace doctor")?;
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).context("doctor --json")?;
    let items = v["data"].as_array().cloned().unwrap_or_default();
    let text = |i: &serde_json::Value, k: &str| i[k].as_str().unwrap_or("").to_string();
    let phases = phases(&items);
    let maps_bytes = items
        .iter()
        .find(|i| text(i, "item") == "kernel memory: maps" && text(i, "status") == "ok")
        .and_then(|i| maps_bytes(&text(i, "detail")));
    let probes = items
        .iter()
        .filter(|i| text(i, "item").starts_with("probe "));
    let (mut attached, mut off) = (0, 0);
    for p in probes {
        if text(p, "detail") == "attached" {
            attached += 1;
        } else if text(p, "status") == "unavailable" {
            off += 1;
        }
    }
    Ok(Attach {
        runs,
        ready_ms,
        phases,
        attached,
        off,
        maps_bytes,
    })
}

pub fn section(s: &mut String, a: Result<&Attach, &String>) {
    let _ = writeln!(s, "## Attach time (this host)\n");
    let a = match a {
        Ok(a) => a,
        Err(e) => {
            let _ = writeln!(s, "Not measured: {e}\n");
            return;
        }
    };
    let med = median(&a.ready_ms);
    let min = a.ready_ms.iter().copied().fold(f64::INFINITY, f64::min);
    let max = a.ready_ms.iter().copied().fold(0.0, f64::max);
    let _ = writeln!(
        s,
        "Target: ready in under {TARGET_MS:.0} ms with every probe this host's kernel offers. \
         Reproduce: `target/release/rdmatrace trace --json --duration 0.2`, timed from its exec \
         to its ready line, {} runs after one warm-up. This host's kernel offers raw \
         tracepoints and uprobes but no kprobes: {} probes attached, {} off (as `rdmatrace doctor` \
         lists them).\n",
        a.runs, a.attached, a.off
    );
    let _ = writeln!(s, "| runs | median | min | max | target met |");
    let _ = writeln!(s, "|---|---|---|---|---|");
    let _ = writeln!(
        s,
        "| {} | {} | {:.0} ms | {:.0} ms | {} |\n",
        a.runs,
        med.map_or("not measured".into(), |m| format!("{m:.0} ms")),
        min,
        max,
        match med {
            Some(m) if m < TARGET_MS => "yes",
            Some(_) => "no",
            None => "not measured",
        }
    );
    if !a.phases.is_empty() {
        let _ = writeln!(
            s,
            "Where one start-up went (`rdmatrace doctor --json`, its `start-up:` items; the \
             doctor also loads the CPU-profile area):\n"
        );
        phase_table(s, &a.phases);
    }
    if let Some((all, per_cpu)) = a.maps_bytes {
        let _ = writeln!(
            s,
            "Kernel memory the loaded maps hold (`rdmatrace doctor`, its `kernel memory: maps` \
             item: the maps' memlock as this kernel accounts it, the figure `bpftool map show` \
             prints): {:.1} MiB, of which {} bytes in per-CPU maps (values kept once per \
             possible CPU).\n",
            all as f64 / 1048576.0,
            per_cpu
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_doctors_map_memory_detail_gives_both_figures() {
        assert_eq!(
            maps_bytes(
                "22164080 bytes (21.1 MiB) in 19 maps; 336 bytes of them in per-CPU maps, \
                 which grow with the CPU count"
            ),
            Some((22164080, 336))
        );
        assert_eq!(
            maps_bytes("cannot read /proc/self/fdinfo: No such file or directory (os error 2)"),
            None
        );
    }

    #[test]
    fn the_typed_targets_are_the_attached_fentry_and_tp_btf_probes() {
        let items: Vec<serde_json::Value> = [
            ("probe rxe/rxe_xmit_f (fentry rxe_xmit_packet)", "attached"),
            (
                "probe rxe/rxe_recv_f (fentry rxe_resp_queue_pkt)",
                "attached",
            ),
            (
                "probe rxe/rxe_recv_f (fentry rxe_comp_queue_pkt)",
                "attached",
            ),
            (
                "probe rxe/rxe_xmit (kprobe rxe_xmit_packet)",
                "fentry rxe_xmit_f counts in its place",
            ),
            (
                "probe qp/qp_create_enter (kprobe ib_create_qp_user)",
                "attached",
            ),
            (
                "probe rxe/other_f (fentry gone_function)",
                "off: no such function",
            ),
            (
                "probe tcp/tcp_send_btf (tp_btf sock_send_length)",
                "attached",
            ),
            (
                "probe tcp/tcp_state (raw_tp inet_sock_set_state)",
                "attached",
            ),
        ]
        .iter()
        .map(|(i, d)| serde_json::json!({"item": i, "detail": d}))
        .collect();
        let pairs = |v: &[(&str, &str)]| -> Vec<(String, String)> {
            v.iter()
                .map(|(k, t)| (k.to_string(), t.to_string()))
                .collect()
        };
        assert_eq!(
            typed_targets(&items),
            pairs(&[
                ("fentry", "rxe_comp_queue_pkt"),
                ("fentry", "rxe_resp_queue_pkt"),
                ("fentry", "rxe_xmit_packet"),
                ("tp_btf", "sock_send_length"),
            ])
        );
    }
}
