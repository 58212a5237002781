//! Scale on synthetic input (`rdmatrace/examples/scale_synth.rs`): memory per QP with 1 M QPs
//! in the correlator, and `rdmatrace flamegraph` over a recording of 1 M CPU samples with stacks.

use std::{fmt::Write as _, process::Command};

use anyhow::Context as _;
use serde_json::Value;

use super::{fleet, median, out_dir, release_bin};

const QPS: u32 = 1_000_000;
const SAMPLES: u64 = 1_000_000;
const FLAME_RUNS: usize = 5;

pub struct Scale {
    pub qps: u32,
    pub held: u64,
    pub bytes_per_qp: f64,
    pub rss_after_kib: u64,
    pub qps_secs: f64,
    pub samples: u64,
    pub stacks_file_bytes: u64,
    /// Distinct stacks, as flamegraph reports them.
    pub distinct: Option<u64>,
    /// Wall ms of each flamegraph run, and the peak RSS (KiB) over them.
    pub flame_ms: Vec<f64>,
    pub flame_rss_kib: u64,
}

pub const QPS_COMMAND: &str = "target/release/examples/scale_synth qps 1000000";
pub const FLAME_COMMAND: &str = "target/release/examples/scale_synth stacks target/bench/stacks.rdmt 1000000 && rdmatrace flamegraph target/bench/stacks.rdmt --kind cpu -o target/bench/stacks.svg";

fn example() -> std::path::PathBuf {
    release_bin("examples/scale_synth")
}

pub fn run() -> anyhow::Result<Scale> {
    let out = Command::new(example())
        .args(["qps", &QPS.to_string()])
        .output()
        .context("cannot run scale_synth qps")?;
    anyhow::ensure!(
        out.status.success(),
        "scale_synth qps failed: {}",
        out.status
    );
    let v: Value = serde_json::from_slice(&out.stdout).context("scale_synth printed no JSON")?;
    let num = |k: &str| v[k].as_f64().with_context(|| format!("no {k} in {v}"));
    let file = out_dir().join("stacks.rdmt");
    let status = Command::new(example())
        .arg("stacks")
        .arg(&file)
        .arg(SAMPLES.to_string())
        .status()
        .context("cannot run scale_synth stacks")?;
    anyhow::ensure!(status.success(), "scale_synth stacks failed: {status}");
    let svg = out_dir().join("stacks.svg");
    let mut flame_ms = Vec::new();
    let mut rss = 0;
    let mut distinct = None;
    // One warm-up (page cache), then the timed runs.
    for i in 0..=FLAME_RUNS {
        let mut c = Command::new(release_bin("rdmatrace"));
        c.arg("flamegraph")
            .arg(&file)
            .args(["--kind", "cpu", "-o"])
            .arg(&svg);
        let (peak, ms) = fleet::measure(&mut c)?;
        if i > 0 {
            flame_ms.push(ms);
            rss = rss.max(peak);
        }
    }
    // "rdmatrace: wrote F (N stacks, M samples)"
    let said = Command::new(release_bin("rdmatrace"))
        .arg("flamegraph")
        .arg(&file)
        .args(["--kind", "cpu", "--folded", "-o"])
        .arg(out_dir().join("stacks.folded"))
        .output()
        .context("cannot run rdmatrace flamegraph")?;
    let text = String::from_utf8_lossy(&said.stderr);
    if let Some(rest) = text.split(" (").nth(1) {
        distinct = rest.split(' ').next().and_then(|n| n.parse().ok());
    }
    Ok(Scale {
        qps: QPS,
        held: num("held")? as u64,
        bytes_per_qp: num("bytes_per_qp")?,
        rss_after_kib: num("rss_after_kib")? as u64,
        qps_secs: num("secs")?,
        samples: SAMPLES,
        stacks_file_bytes: std::fs::metadata(&file).map(|m| m.len()).unwrap_or(0),
        distinct,
        flame_ms,
        flame_rss_kib: rss,
    })
}

pub fn section(s: &mut String, r: Result<&Scale, &String>) {
    let _ = writeln!(s, "## Scale (synthetic)\n");
    let r = match r {
        Ok(r) => r,
        Err(e) => {
            let _ = writeln!(s, "Not measured: {e}\n");
            return;
        }
    };
    let met = |ok: bool| if ok { "met" } else { "**not met**" };
    let _ = writeln!(
        s,
        "`rdmatrace/examples/scale_synth.rs`. QPs: {} RC QPs of 1,000 processes, each created, \
         brought to RTS and given one traffic sample, through the real correlator; memory per QP \
         is the growth of the process's RSS divided by the QPs. Flamegraph: a recording of {} CPU \
         samples with named stacks (200 processes of 100 code paths each, user stacks 4-12 deep, \
         kernel stacks 0-6 deep, skewed toward hot paths; {} distinct stacks, {:.1} MiB), \
         rendered to SVG by `rdmatrace flamegraph`, wall time from exec to exit ({} runs after a \
         warm-up; the file is read and decompressed on a second thread ahead of decoding).\n",
        r.qps,
        r.samples,
        r.distinct.map_or_else(|| "?".into(), |d| d.to_string()),
        r.stacks_file_bytes as f64 / 1048576.0,
        r.flame_ms.len()
    );
    let _ = writeln!(
        s,
        "| metric | target | measured | reproduce |\n|---|---|---|---|"
    );
    let _ = writeln!(
        s,
        "| memory per QP in the correlator ({} of {} held; RSS {:.1} MiB; {:.2} s) | ≤ 512 B | {:.0} B ({}) | `{QPS_COMMAND}` |",
        r.held,
        r.qps,
        r.rss_after_kib as f64 / 1024.0,
        r.qps_secs,
        r.bytes_per_qp,
        met(r.bytes_per_qp <= 512.0)
    );
    let m = median(&r.flame_ms).unwrap_or(f64::NAN);
    let flame_met = m < 1000.0;
    let (lo, hi) = r
        .flame_ms
        .iter()
        .fold((f64::MAX, 0f64), |(a, b), &x| (a.min(x), b.max(x)));
    let _ = writeln!(
        s,
        "| flamegraph of 1 M samples: median (min – max), peak RSS | < 1 s | {:.2} s ({:.2} – {:.2}), {:.1} MiB ({}) | `{FLAME_COMMAND}` |",
        m / 1e3,
        lo / 1e3,
        hi / 1e3,
        r.flame_rss_kib as f64 / 1024.0,
        met(flame_met)
    );
    s.push('\n');
    if !flame_met {
        super::tried::section(s, "flamegraph", "flamegraph of 1 M samples");
    }
}

/// The lab's 10,000 QPs (`xtask/lab/manyqp.sh`, part of the lab bench).
pub fn lab_qps(s: &mut String, lab: Option<Result<&super::lab::LabResults, &String>>) {
    let _ = writeln!(s, "### 10,000 QPs held in the lab\n");
    let lab = match lab {
        Some(Ok(l)) => l,
        Some(Err(e)) => {
            let _ = writeln!(s, "Not measured: the lab failed ({e}).\n");
            return;
        }
        None => {
            let _ = writeln!(s, "Not measured: the lab was skipped (--skip-lab).\n");
            return;
        }
    };
    let one = |m: &str| lab.values(m, "rdmatrace").first().copied();
    let Some(cpu) = one("manyqp_cpu_ms_per_s") else {
        let _ = writeln!(
            s,
            "Not measured: the lab bench printed no figures for it (see its log).\n"
        );
        return;
    };
    let show = |v: Option<f64>| v.map_or_else(|| "?".into(), |v| format!("{v:.0}"));
    let _ = writeln!(
        s,
        "`rt-manyqp --qps 10000` (tests/workloads) creates 10,000 RC QPs on rxe0 (depth 1, to \
         INIT) and holds them while `rdmatrace record` runs (all default probes; its QP-table \
         sampler reads the device's QPs over rdma netlink once a second, less often when a read \
         takes long: it keeps to 10 % of a core). Measured 5 s after the \
         last QP, over 20 s with all of them held, in the same boot as the rounds above (TCG: \
         inflated). Reproduce: `bash xtask/lab/manyqp.sh target/release/rdmatrace target/release \
         OUT 10000` in the lab.\n"
    );
    let _ = writeln!(s, "| metric | measured |\n|---|---|");
    let _ = writeln!(
        s,
        "| QPs held (`rdma resource show qp link rxe0`) / their creates in the recording | {} / {} |",
        show(one("manyqp_held")),
        show(one("manyqp_recorded_creates"))
    );
    let _ = writeln!(
        s,
        "| time to create them under the recorder | {} ms |",
        show(one("manyqp_create_ms"))
    );
    let _ = writeln!(
        s,
        "| recorder CPU with them held | {cpu:.0} ms per second ({:.0} % of a core) |",
        cpu / 10.0
    );
    let _ = writeln!(
        s,
        "| recorder RSS with them held / peak (VmHWM) | {:.1} MiB / {:.1} MiB |\n",
        one("manyqp_rss_kib").unwrap_or(f64::NAN) / 1024.0,
        one("manyqp_hwm_kib").unwrap_or(f64::NAN) / 1024.0
    );
}
