//! `rdmatrace doctor`: one screen on whether this host can be traced, and what each probe,
//! tracepoint and counter source needs. As root it loads and attaches for real (then detaches),
//! so the answer is the kernel's, not a guess.

use std::{path::Path, process::ExitCode};

use serde_json::{json, Value};

use crate::loader::{self, LoadOptions, ProbeState};

#[derive(Clone, Copy, PartialEq, Eq)]
enum Level {
    Ok,
    Off,
    Bad,
}

struct Check {
    level: Level,
    item: String,
    detail: String,
    remedy: Option<String>,
}

fn check(
    level: Level,
    item: impl Into<String>,
    detail: impl Into<String>,
    remedy: Option<&str>,
) -> Check {
    Check {
        level,
        item: item.into(),
        detail: detail.into(),
        remedy: remedy.map(String::from),
    }
}

fn read(path: &str) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
}

/// Effective capability bits of this process.
fn cap_eff() -> u64 {
    read("/proc/self/status")
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("CapEff:").map(|v| v.trim().to_string()))
        })
        .and_then(|hex| u64::from_str_radix(&hex, 16).ok())
        .unwrap_or(0)
}

fn host_checks() -> Vec<Check> {
    let mut c = Vec::new();
    c.push(check(
        Level::Ok,
        "kernel",
        read("/proc/sys/kernel/osrelease").unwrap_or_default(),
        None,
    ));
    let btf = Path::new("/sys/kernel/btf/vmlinux").exists();
    c.push(check(
        if btf { Level::Ok } else { Level::Bad },
        "BTF",
        if btf {
            "/sys/kernel/btf/vmlinux"
        } else {
            "missing"
        },
        (!btf).then_some(
            "a kernel built with CONFIG_DEBUG_INFO_BTF=y is required: offsets come from BTF",
        ),
    ));
    let caps = cap_eff();
    let (bpf, perfmon, sys_admin) = (
        caps & (1 << 39) != 0,
        caps & (1 << 38) != 0,
        caps & (1 << 21) != 0,
    );
    let privileged = sys_admin || (bpf && perfmon);
    c.push(check(
        if privileged { Level::Ok } else { Level::Bad },
        "privileges",
        format!("CAP_BPF {bpf}, CAP_PERFMON {perfmon}, CAP_SYS_ADMIN {sys_admin}"),
        (!privileged).then_some("run as root (or with CAP_BPF + CAP_PERFMON) to trace; replaying recordings needs nothing"),
    ));
    let kprobes = Path::new("/sys/bus/event_source/devices/kprobe").exists();
    c.push(check(
        if kprobes { Level::Ok } else { Level::Off },
        "kprobes",
        if kprobes {
            "perf kprobe PMU present"
        } else {
            "no kprobe PMU"
        },
        (!kprobes).then_some(
            "QP, object, async, CM and rxe probes need CONFIG_KPROBES; raw tracepoints still work",
        ),
    ));
    let tracefs = Path::new("/sys/kernel/tracing/events").exists();
    c.push(check(
        if tracefs { Level::Ok } else { Level::Off },
        "tracefs",
        if tracefs { "mounted" } else { "not mounted" },
        (!tracefs).then_some(
            "not needed: rdmatrace uses raw tracepoints and perf kprobes (it mounts nothing)",
        ),
    ));
    for m in [
        "ib_core",
        "ib_uverbs",
        "rdma_cm",
        "rdma_ucm",
        "rdma_rxe",
        "mlx5_ib",
    ] {
        let has = Path::new("/sys/kernel/btf").join(m).exists()
            || Path::new("/sys/module").join(m).exists();
        c.push(check(
            if has { Level::Ok } else { Level::Off },
            format!("module {m}"),
            if has { "loaded, BTF present" } else { "not loaded" },
            (!has).then_some(match m {
                "mlx5_ib" => "only on hosts with ConnectX NICs; their QPs are traced through ib_core either way",
                "rdma_rxe" => "Soft-RoCE only; `rdma link add` loads it (rdmatrace never loads modules)",
                _ => "the RDMA stack is not loaded on this kernel: nothing RDMA can be traced here",
            }),
        ));
    }
    let mut devices = 0;
    if let Ok(devs) = std::fs::read_dir("/sys/class/infiniband") {
        for d in devs.filter_map(Result::ok) {
            devices += 1;
            let name = d.file_name().to_string_lossy().into_owned();
            let Ok(ports) = std::fs::read_dir(d.path().join("ports")) else {
                continue;
            };
            for p in ports.filter_map(Result::ok) {
                let pp = p.path();
                let state = read(&pp.join("state").to_string_lossy()).unwrap_or_default();
                let layer = read(&pp.join("link_layer").to_string_lossy()).unwrap_or_default();
                let hw = pp.join("hw_counters").exists();
                let std_counters = pp.join("counters").exists();
                let active = state.contains("ACTIVE");
                c.push(check(
                    if active { Level::Ok } else { Level::Off },
                    format!("device {name} port {}", p.file_name().to_string_lossy()),
                    format!(
                        "{state}, {layer}, counters: {}{}",
                        if std_counters { "counters " } else { "" },
                        if hw { "hw_counters" } else { "" }
                    ),
                    (!active).then_some("port not ACTIVE: check the link / netdev under it"),
                ));
            }
        }
    }
    if devices == 0 {
        c.push(check(
            Level::Off,
            "RDMA devices",
            "none in /sys/class/infiniband",
            Some("no RDMA device: `cargo xtask lab` gives a Soft-RoCE one in a VM"),
        ));
    }
    c.extend(netlink_checks());
    c
}

/// The rdma netlink sources: the QP resource table and per-QP counter modes (read only).
fn netlink_checks() -> Vec<Check> {
    use crate::netlink::{nldev, RdmaNetlink};
    let mut c = Vec::new();
    let devices = RdmaNetlink::open().and_then(|mut nl| {
        let devs = nl.devices()?;
        Ok((nl, devs))
    });
    let (mut nl, devs) = match devices {
        Ok(x) => x,
        Err(e) => {
            c.push(check(
                Level::Off,
                "rdma netlink",
                e.to_string(),
                Some("no QP resource table: QPs older than a trace keep an unknown owner"),
            ));
            return c;
        }
    };
    c.push(check(
        Level::Ok,
        "rdma netlink QP table",
        format!("readable ({} devices); sampled every second", devs.len()),
        None,
    ));
    for d in &devs {
        for port in 1..=d.ports.max(1) {
            let item = format!("per-QP counters {}/{port}", d.name);
            match nl.counter_mode(d, port) {
                Ok((nldev::COUNTER_MODE_NONE, _)) => c.push(check(
                    Level::Off,
                    item,
                    "not bound (mode none)",
                    Some("`--bind-qp-counters` binds them for a trace and unbinds at exit (drivers with q-counters, e.g. mlx5)"),
                )),
                Ok((mode, mask)) => c.push(check(
                    Level::Ok,
                    item,
                    format!(
                        "{} mode, mask {mask:#x}: read every second",
                        if mode == nldev::COUNTER_MODE_AUTO { "auto" } else { "manual" }
                    ),
                    None,
                )),
                Err(e) => c.push(check(Level::Off, item, e.to_string(), None)),
            }
        }
    }
    c
}

fn probe_checks() -> Vec<Check> {
    let mut c = Vec::new();
    // The CPU profile is opt-in for recording; the doctor says whether it would work.
    let opts = LoadOptions {
        cpu_hz: Some(crate::collect::profile::DEFAULT_HZ),
        ..LoadOptions::default()
    };
    match loader::load(&opts, loader::all_areas()) {
        Ok(tracer) => {
            for p in &tracer.report.probes {
                let item = format!(
                    "probe {}/{} ({} {})",
                    p.area, p.spec.program, p.spec.hook, p.spec.target
                );
                match &p.state {
                    ProbeState::Attached => c.push(check(Level::Ok, item, "attached", None)),
                    ProbeState::Off(why) => c.push(check(Level::Off, item, why.clone(), None)),
                    ProbeState::Standby(why) => c.push(check(Level::Ok, item, why.clone(), None)),
                }
            }
            for n in &tracer.report.notes {
                c.push(check(Level::Off, "detail", n.clone(), None));
            }
            for (phase, d) in &tracer.report.timings {
                let ms = format!("{:.1} ms", d.as_secs_f64() * 1e3);
                c.push(check(Level::Ok, format!("start-up: {phase}"), ms, None));
            }
            match loader::memory::of_this_process() {
                Ok(m) => c.push(check(
                    Level::Ok,
                    "kernel memory: maps",
                    format!(
                        "{} bytes ({:.1} MiB) in {} maps; {} bytes of them in per-CPU maps, \
                         which grow with the CPU count",
                        m.bytes,
                        m.bytes as f64 / 1048576.0,
                        m.maps,
                        m.per_cpu_bytes
                    ),
                    None,
                )),
                Err(e) => c.push(check(
                    Level::Off,
                    "kernel memory: maps",
                    format!("cannot read /proc/self/fdinfo: {e}"),
                    None,
                )),
            }
        }
        Err(e) => c.push(check(
            Level::Bad,
            "probes",
            format!("{e:#}"),
            Some("see the privileges and BTF lines above"),
        )),
    }
    c
}

pub fn run(json_out: bool) -> anyhow::Result<ExitCode> {
    let mut checks = host_checks();
    checks.extend(probe_checks());
    if json_out {
        let items: Vec<Value> = checks
            .iter()
            .map(|c| {
                let status = match c.level {
                    Level::Ok => "ok",
                    Level::Off => "unavailable",
                    Level::Bad => "error",
                };
                json!({"item": c.item, "status": status, "detail": c.detail, "remedy": c.remedy})
            })
            .collect();
        println!("{}", json!({"type": "doctor", "data": items}));
    } else {
        for c in &checks {
            let mark = match c.level {
                Level::Ok => "ok ",
                Level::Off => "-- ",
                Level::Bad => "!! ",
            };
            println!("{mark} {:<44} {}", c.item, c.detail);
            if let Some(r) = &c.remedy {
                println!("    {:<44} -> {r}", "");
            }
        }
    }
    let bad = checks.iter().any(|c| c.level == Level::Bad);
    Ok(if bad {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}
