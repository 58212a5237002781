//! The bench's history: every run appends its figures to `BENCHMARKS.history.jsonl` (one JSON
//! object per run: date, machine, figures), committed beside BENCHMARKS.md, and BENCHMARKS.md
//! ends with every figure's change from the previous run on the same machine (same CPU model,
//! core count and memory). Figures are flattened to `section.name` keys with a unit.

use std::{collections::BTreeMap, fmt::Write as _, io::Write as _, path::PathBuf};

use anyhow::Context as _;
use serde_json::{json, Value};

use super::{median, report::Inputs};
use crate::cmd;

/// The history file (repo root).
pub fn path() -> PathBuf {
    cmd::repo_root().join("BENCHMARKS.history.jsonl")
}

/// One figure: value and unit (`M events/s`, `ms`, `MiB`, `B/event`, `x`, ...).
pub type Figures = BTreeMap<String, (f64, String)>;

fn put(f: &mut Figures, key: impl Into<String>, v: f64, unit: &str) {
    if v.is_finite() {
        f.insert(key.into(), (v, unit.to_string()));
    }
}

/// Every figure of this run.
pub fn figures(i: &Inputs<'_>) -> Figures {
    let mut f = Figures::new();
    for (name, ns, ..) in &i.replay.results {
        put(
            &mut f,
            format!("replay.{name}"),
            i.replay.events_per_sec(*ns) / 1e6,
            "M events/s",
        );
    }
    if let Ok(sb) = i.side {
        for r in &sb.rows {
            put(
                &mut f,
                format!("replay.{}.previous_release", r.name),
                r.previous / 1e6,
                "M events/s",
            );
            put(
                &mut f,
                format!("replay.{}.vs_previous", r.name),
                r.ratio,
                "x",
            );
        }
    }
    let r = i.replay;
    put(
        &mut f,
        "size.synthetic",
        r.bytes as f64 / r.events.max(1) as f64,
        "B/event",
    );
    if let Some(b) = r.packed_bytes {
        put(
            &mut f,
            "size.synthetic_packed",
            b as f64 / r.events.max(1) as f64,
            "B/event",
        );
    }
    for fx in i.fixtures {
        let (_, bytes, _) = fx.rewritten.unwrap_or(fx.committed);
        put(
            &mut f,
            format!("size.{}", fx.name),
            bytes as f64 / fx.records.max(1) as f64,
            "B/event",
        );
    }
    for s in i.storms {
        let rb = s.ringbuf.map_or("default".to_string(), |r| r.to_string());
        put(&mut f, format!("storm.{rb}.rate"), s.rate, "events/s");
        put(
            &mut f,
            format!("storm.{rb}.lost_pct"),
            s.lost as f64 * 100.0 / s.generated.max(1) as f64,
            "%",
        );
        put(
            &mut f,
            format!("storm.{rb}.cpu_pct"),
            s.cpu_ms * 100.0 / s.wall_ms.max(1.0),
            "% of a core",
        );
        put(
            &mut f,
            format!("storm.{rb}.rss"),
            s.rss_kib as f64 / 1024.0,
            "MiB",
        );
    }
    if let Ok(a) = i.attach {
        put(
            &mut f,
            "attach.host_ready_median",
            median(&a.ready_ms).unwrap_or(f64::NAN),
            "ms",
        );
        if let Some((all, per_cpu)) = a.maps_bytes {
            put(
                &mut f,
                "attach.maps_kernel_memory",
                all as f64 / 1048576.0,
                "MiB",
            );
            put(
                &mut f,
                "attach.maps_kernel_memory_per_cpu_maps",
                per_cpu as f64,
                "B",
            );
        }
    }
    if let Ok(h) = i.host_cost {
        for (hook, ..) in super::hostcost::HOOKS {
            if let Some((rt, twin, floor, _)) = super::hostcost::medians(h, hook) {
                put(&mut f, format!("host_prog.{hook}.rdmatrace"), rt, "ns/run");
                put(&mut f, format!("host_prog.{hook}.bpftrace"), twin, "ns/run");
                put(&mut f, format!("host_prog.{hook}.floor"), floor, "ns/run");
            }
            let ratio = median(&super::hostcost::ratios(h, hook)).unwrap_or(f64::NAN);
            put(&mut f, format!("host_prog.{hook}.vs_floor"), ratio, "x");
        }
    }
    if let Ok(b) = i.big {
        for r in &b.runs {
            let gib = format!("{:.2}GiB", r.file_bytes as f64 / (1u64 << 30) as f64);
            put(
                &mut f,
                format!("bigreplay.{gib}.rss"),
                r.rss_kib as f64 / 1024.0,
                "MiB",
            );
            put(
                &mut f,
                format!("bigreplay.{gib}.rate"),
                r.events as f64 / (r.wall_ms / 1e3) / 1e6,
                "M events/s",
            );
        }
    }
    if let Ok(sc) = i.scale {
        put(&mut f, "scale.bytes_per_qp", sc.bytes_per_qp, "B");
        put(
            &mut f,
            "scale.flamegraph_1M",
            super::median(&sc.flame_ms).unwrap_or(f64::NAN) / 1e3,
            "s",
        );
    }
    if let Ok(b) = i.fleet {
        for r in &b.runs {
            put(
                &mut f,
                format!("fleet.{}hosts.wall", r.hosts),
                r.wall_ms / 1e3,
                "s",
            );
            put(
                &mut f,
                format!("fleet.{}hosts.rss", r.hosts),
                r.rss_kib as f64 / 1024.0,
                "MiB",
            );
        }
    }
    if let Ok(s) = i.serve {
        flatten(&mut f, "serve", s.json());
    }
    if let Some(Ok(lab)) = i.lab {
        for (name, events, bytes, _) in super::report::lab_fresh_sizes(lab) {
            put(
                &mut f,
                format!("size.lab_fresh.{name}"),
                bytes as f64 / events.max(1) as f64,
                "B/event",
            );
        }
        for (metric, tool) in lab.series() {
            let v = median(&lab.measured(&metric, &tool)).unwrap_or(f64::NAN);
            put(&mut f, format!("lab.{metric}.{tool}"), v, "");
        }
    }
    f
}

/// Numeric leaves of `v` under `prefix`.
fn flatten(f: &mut Figures, prefix: &str, v: &Value) {
    match v {
        Value::Object(m) => {
            for (k, v) in m {
                flatten(f, &format!("{prefix}.{k}"), v);
            }
        }
        Value::Number(n) => put(f, prefix, n.as_f64().unwrap_or(f64::NAN), ""),
        _ => {}
    }
}

fn machine_key(i: &Inputs<'_>) -> String {
    let m = i.machine;
    format!("{} x {} ({})", m.cpus, m.cpu, m.mem)
}

/// The last run recorded for this machine: (date, figures).
pub fn previous(i: &Inputs<'_>) -> Option<(String, BTreeMap<String, f64>)> {
    let text = std::fs::read_to_string(path()).ok()?;
    let key = machine_key(i);
    text.lines()
        .rev()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| v["machine"] == key.as_str())
        .map(|v| {
            let figs = v["figures"]
                .as_object()
                .map(|m| {
                    m.iter()
                        .filter_map(|(k, v)| Some((k.clone(), v["value"].as_f64()?)))
                        .collect()
                })
                .unwrap_or_default();
            (v["date"].as_str().unwrap_or("?").to_string(), figs)
        })
}

/// Appends this run to the history.
pub fn append(i: &Inputs<'_>, figs: &Figures) -> anyhow::Result<()> {
    let figures: serde_json::Map<String, Value> = figs
        .iter()
        .map(|(k, (v, unit))| (k.clone(), json!({"value": v, "unit": unit})))
        .collect();
    let line = json!({
        "date": i.machine.date,
        "machine": machine_key(i),
        "kernel": i.machine.kernel,
        "command": i.reproduce,
        "load_before": i.machine.load_before,
        "source": i.machine.source,
        "load_after": i.load_after,
        "figures": figures,
    });
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path())
        .with_context(|| format!("cannot open {}", path().display()))?;
    writeln!(f, "{line}").with_context(|| format!("cannot write {}", path().display()))
}

/// The section: every figure with the previous run's value and the change.
pub fn section(s: &mut String, figs: &Figures, prev: Option<&(String, BTreeMap<String, f64>)>) {
    let _ = writeln!(s, "## Change from the previous run on this machine\n");
    let Some((date, old)) = prev else {
        let _ = writeln!(
            s,
            "No previous run of this machine is in `BENCHMARKS.history.jsonl`: this run's {} \
             figures are its first entry, the next run is compared with them.\n",
            figs.len()
        );
        return;
    };
    let _ = writeln!(
        s,
        "Against the run of {date} (`BENCHMARKS.history.jsonl`; both on this machine). Whether a \
         change is better depends on the figure (rates up, times and sizes down); noise between \
         runs on this shared 2-core host is several percent.\n\n\
         | figure | unit | previous | now | change |\n|---|---|---|---|---|"
    );
    for (k, (v, unit)) in figs {
        let (was, change) = match old.get(k) {
            Some(o) if *o != 0.0 => (
                format!("{o:.3}"),
                format!("{:+.1} %", (v / o - 1.0) * 100.0),
            ),
            Some(o) => (format!("{o:.3}"), "-".into()),
            None => ("-".into(), "new".into()),
        };
        let _ = writeln!(s, "| `{k}` | {unit} | {was} | {v:.3} | {change} |");
    }
    let gone: Vec<&String> = old.keys().filter(|k| !figs.contains_key(*k)).collect();
    if !gone.is_empty() {
        let _ = writeln!(
            s,
            "\nIn the previous run but not in this one: {}.",
            gone.iter()
                .map(|k| format!("`{k}`"))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    s.push('\n');
}
