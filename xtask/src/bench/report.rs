//! BENCHMARKS.md: targets next to measured figures, each with the command that reproduces it.

use std::{fmt::Write as _, process::Command};

pub use super::sizes::{fixture_sizes, lab_fresh_sizes, FixtureSize};
use super::{lab::LabResults, median, replay, replay::Replay, sizes::size_section, storm::Storm};
use crate::cmd;

pub struct Machine {
    pub date: String,
    pub cpu: String,
    pub cpus: usize,
    pub mem: String,
    pub kernel: String,
    pub rustc: String,
    /// /proc/loadavg's first three fields when the bench started.
    pub load_before: String,
    /// The commit measured and whether tracked files differed from it when the bench started.
    pub source: String,
}

/// The commit checked out and whether tracked files differ from it (untracked ones are left
/// out), as a phrase.
fn source() -> String {
    let git = |args: &[&str]| super::sidebyside::git(args).ok();
    match git(&["rev-parse", "--short=7", "HEAD"]) {
        Some(c) if !c.is_empty() => {
            match git(&["status", "--porcelain", "--untracked-files=no"]).map(|s| s.lines().count())
            {
                Some(0) => format!("commit `{c}`, no tracked file changed"),
                Some(1) => format!("commit `{c}` with 1 tracked file changed and not committed"),
                Some(n) => format!("commit `{c}` with {n} tracked files changed and not committed"),
                None => format!("commit `{c}` (whether files were changed could not be read)"),
            }
        }
        _ => "no commit (not a git checkout)".into(),
    }
}

/// /proc/loadavg's first three fields.
pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

impl Machine {
    pub fn here() -> Machine {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let first = |text: &str, key: &str| {
            text.lines()
                .find(|l| l.starts_with(key))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
                .unwrap_or_else(|| "?".into())
        };
        let out = |c: &mut Command| cmd::output(c).unwrap_or_default().trim().to_string();
        Machine {
            date: out(Command::new("date").args(["-u", "+%Y-%m-%d %H:%M UTC"])),
            cpu: first(&cpuinfo, "model name"),
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            mem: first(&meminfo, "MemTotal"),
            kernel: out(Command::new("uname").arg("-r")),
            rustc: out(Command::new("rustc").arg("--version")),
            load_before: loadavg(),
            source: source(),
        }
    }
}

pub struct Inputs<'a> {
    pub machine: &'a Machine,
    pub reproduce: &'a str,
    pub replay: &'a Replay,
    pub side: Result<&'a super::sidebyside::SideBySide, &'a String>,
    pub storms: &'a [Storm],
    pub attach: Result<&'a super::attach::Attach, &'a String>,
    pub host_cost: Result<&'a super::hostcost::HostCost, &'a String>,
    pub big: Result<&'a super::bigfile::BigReplay, &'a String>,
    pub fleet: Result<&'a super::fleet::FleetBench, &'a String>,
    pub scale: Result<&'a super::scale::Scale, &'a String>,
    pub serve: Result<&'a super::serve::ServeLoad, &'a String>,
    pub lab: Option<Result<&'a LabResults, &'a String>>,
    pub fixtures: &'a [FixtureSize],
    pub load_after: &'a str,
}

fn pct(ratio: f64) -> String {
    format!("{:+.1} %", (ratio - 1.0) * 100.0)
}

fn opt(v: Option<f64>, f: impl Fn(f64) -> String) -> String {
    v.map_or_else(|| "not measured".into(), f)
}

fn side_by_side(s: &mut String, side: Result<&super::sidebyside::SideBySide, &String>) {
    let _ = writeln!(
        s,
        "### Side by side with the previous release
"
    );
    let sb = match side {
        Ok(sb) => sb,
        Err(e) => {
            let _ = writeln!(s, "Not measured: {e}\n");
            return;
        }
    };
    let _ = writeln!(
        s,
        "The previous release is commit `{}` ({}), the last before this one that wrote these \
         figures: `cargo xtask bench` unpacks its source (`git archive`) into \
         target/bench/previous-release, builds its replay bench next to today's and runs the two \
         in turn, {} times each (previous, today, previous, ...); each replays its own synthetic \
         mix. Medians over the runs; the ratio is taken pair by pair.\n",
        sb.commit, sb.date, sb.pairs
    );
    let _ = writeln!(
        s,
        "| what | previous release | today | today / previous |\n|---|---|---|---|"
    );
    for r in &sb.rows {
        let what = match r.name {
            "file" => "`Replay::run`",
            _ => "decode + correlate",
        };
        let _ = writeln!(
            s,
            "| {what} | {:.2} M events/s | {:.2} M events/s | {:.2}× |",
            r.previous / 1e6,
            r.today / 1e6,
            r.ratio
        );
    }
    s.push('\n');
}

fn replay_section(s: &mut String, r: &Replay) {
    let _ = writeln!(s, "## Replay throughput (one core)\n");
    let _ = writeln!(
        s,
        "Reproduce: `{}`. A synthetic recording written with the real `RecordingWriter` \
         (`rdmatrace/benches/synthetic/`): {} events of jobs that open rxe0, create and connect \
         4 QPs, then mostly rxe retransmits, per-QP traffic and TCP samples, TCP states, CQ \
         notifications, error completions, async and CM events, and exit. Median of 10 passes \
         (95 % CI in brackets).\n",
        replay::COMMAND,
        r.events
    );
    let _ = writeln!(s, "| what | target | measured |\n|---|---|---|");
    let mut short = false;
    for (name, ns, lo, hi) in &r.results {
        let (what, target) = match *name {
            "file" => ("`Replay::run`: chunk CRC + LZ4 + decode + correlate", 10e6),
            "file_packed" => (
                "`Replay::run` of the same recording packed for storage (merged zstd chunks, as `record` leaves it)",
                10e6,
            ),
            _ => ("decode + correlate (entries already in memory)", 15e6),
        };
        let rate = r.events_per_sec(*ns);
        short |= rate < target;
        let met = if rate >= target { "met" } else { "**not met**" };
        let _ = writeln!(
            s,
            "| {what} | ≥ {:.0} M events/s | {:.2} M events/s [{:.2} – {:.2}] ({met}) |",
            target / 1e6,
            rate / 1e6,
            r.events_per_sec(*hi) / 1e6,
            r.events_per_sec(*lo) / 1e6,
        );
    }
    s.push('\n');
    if short {
        super::tried::section(s, "replay", "replay throughput");
    }
}

fn storm_section(s: &mut String, storms: &[Storm]) {
    let _ = writeln!(s, "## Ingest storm (this host)\n");
    if storms.is_empty() {
        let _ = writeln!(
            s,
            "Not measured: the bench did not run as root (loading eBPF needs it).\n"
        );
        return;
    }
    let _ = writeln!(
        s,
        "Target: 0 lost at 2 M events/s. `rt-storm --mode tcp` (tests/workloads) opens \
         loopback TCP connections and resets them, one worker per CPU; each connection is about \
         7 `tcp_state` events (raw tracepoint `inet_sock_set_state`, both ends). It is the fastest \
         traced hook this host offers: it has no RDMA stack, a fork/exit storm reached only \
         ~1 k events/s here, and the TCP byte counters aggregate in the kernel instead of \
         emitting events. The rate reached is far below 2 M events/s, so the target rate \
         itself is **not measured here**. `record -- CMD` traces only the storm (filtered in \
         the kernel). Recorder CPU and peak RSS are sampled from /proc/PID/stat and \
         /proc/PID/status (VmHWM) every 50 ms while it runs (whole run, attach included).\n"
    );
    let _ = writeln!(
        s,
        "| ring buffer | connections (per s) | events delivered | lost | events/s (delivered+lost, over the storm's run) | recorder CPU | peak RSS | reproduce |\n|---|---|---|---|---|---|---|---|"
    );
    for st in storms {
        let _ = writeln!(
            s,
            "| {} | {} ({:.0}/s) | {} | {} | {:.0} | {:.0} ms in {:.1} s ({:.1} % of a core) | {:.1} MiB | `{}` |",
            st.ringbuf
                .map_or("4 MiB (default)".to_string(), |b| format!("{b} B")),
            st.generated,
            st.rate,
            st.delivered,
            st.lost,
            (st.delivered + st.lost) as f64 / st.storm_secs,
            st.cpu_ms,
            st.wall_ms / 1000.0,
            st.cpu_ms / st.wall_ms * 100.0,
            st.rss_kib as f64 / 1024.0,
            st.command
        );
    }
    s.push('\n');
}

fn lab_section(s: &mut String, lab: Option<Result<&LabResults, &String>>, reproduce: &str) {
    let _ = writeln!(s, "## Overhead on real RDMA traffic (Soft-RoCE lab)\n");
    let lab = match lab {
        None => {
            let _ = writeln!(s, "Not measured in this run (`--skip-lab`).\n");
            return;
        }
        Some(Err(why)) => {
            let _ = writeln!(
                s,
                "Not measured: the lab run failed (`{reproduce}`):\n\n```\n{why}\n```\n"
            );
            return;
        }
        Some(Ok(lab)) => lab,
    };
    let _ = writeln!(
        s,
        "Reproduce: `{reproduce}` (script: `xtask/lab/bench.sh`). One boot of the lab \
         (kernel {}, {}; other builds shared this 2-core host). \
         `ib_write_bw -s 65536 -n 500` and `ib_send_lat -s 2 -n 1000` (perftest, RC, gid \
         index 1) from rxe0 (192.0.2.1) to rxe1 (192.0.2.2) over the lab's wire, {} rounds; each \
         round runs no tracer, `rdmatrace record` (all default probes) and an equivalent \
         bpftrace script (the kernel functions and tracepoints of rdmatrace's kprobes and \
         tracepoints, not its verbs uprobes; per-packet hooks counted in maps, the rest \
         printed) in a rotating order, both run from copies in the guest's memory (bpftrace \
         with the shared libraries it loads: the lab's root filesystem is the host's, over 9p \
         without a page cache); attach time is from the tracer's start to its ready line, \
         read by the script without starting a process (a `grep`, `sleep` or `date` costs \
         70-90 ms under TCG); under each tracer, once perftest is done, a control-path \
         churn follows (`rt-manyqp`: 200 QPs created and brought to INIT, 200 more CQs \
         created and 200 one-page MRs registered, all then freed; 200 processes run; 200 \
         loopback TCP connections), for the per-program costs below. \
         Overhead = median over rounds of (with tracer / without, same round) − 1.\n",
        lab.kernel,
        match lab.kvm {
            Some(true) => "qemu with **KVM**",
            Some(false) =>
                "qemu **TCG**: KVM did not work here, so the guest is emulated and every \
                           figure is inflated and noisy",
            None => "qemu (whether KVM was used is not known)",
        },
        lab.rounds
    );
    let _ = writeln!(
        s,
        "| metric | target | rdmatrace | bpftrace |\n|---|---|---|---|"
    );
    // The median change, and the rounds left out of it (see the raw figures).
    let ratio = |m: &str, t: &str| {
        let v = opt(median(&lab.pair_ratios(m, t)), pct);
        match lab.rounds_left_out(m, t)[..] {
            [] => v,
            ref out => format!(
                "{v} (round{} {} left out: no measurement)",
                if out.len() == 1 { "" } else { "s" },
                out.iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    };
    let _ = writeln!(
        s,
        "| bandwidth change (ib_write_bw BW average) | ≥ −1 % | {} | {} |",
        ratio("bw_mbps", "rdmatrace"),
        ratio("bw_mbps", "bpftrace")
    );
    let _ = writeln!(
        s,
        "| p50 latency change (ib_send_lat t_typical) | ≤ +2 % | {} | {} |",
        ratio("lat_p50_us", "rdmatrace"),
        ratio("lat_p50_us", "bpftrace")
    );
    let ms = |t: &str| median(&lab.values("attach_ms", t));
    let _ = writeln!(
        s,
        "| attach time, start to ready line (median) | < 300 ms on the host (section above) | {} | {} |",
        opt(ms("rdmatrace"), |v| format!("{v:.0} ms")),
        opt(ms("bpftrace"), |v| format!("{v:.0} ms"))
    );
    // The ratio per round (same boot, same probes), then its median.
    let ratios: Vec<f64> = (1..=lab.rounds)
        .filter_map(|round| {
            let b = lab.value("attach_ms", "bpftrace", round)?;
            let r = lab.value("attach_ms", "rdmatrace", round)?;
            (r > 0.0).then(|| b / r)
        })
        .collect();
    let ratio = median(&ratios);
    let _ = writeln!(
        s,
        "| attach: bpftrace time / rdmatrace time (median of rounds) | ≥ 10× | {} | — |",
        opt(ratio, |v| format!(
            "{v:.1}× ({})",
            if v >= 10.0 { "met" } else { "**not met**" }
        ))
    );
    let rss = |t: &str| {
        lab.values("rss_kib", t)
            .into_iter()
            .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.max(v))))
    };
    let _ = writeln!(
        s,
        "| peak RSS (VmHWM, max over rounds) | < 64 MiB | {} | {} |",
        opt(rss("rdmatrace"), |v| format!(
            "{:.1} MiB ({})",
            v / 1024.0,
            if v < 64.0 * 1024.0 {
                "met"
            } else {
                "**not met**"
            }
        )),
        opt(rss("bpftrace"), |v| format!("{:.1} MiB", v / 1024.0))
    );
    let cpu = |t: &str| median(&lab.values("cpu_ms", t));
    let _ = writeln!(
        s,
        "| tracer CPU per round: attach and perftest (median) | — | {} | {} |",
        opt(cpu("rdmatrace"), |v| format!("{v:.0} ms")),
        opt(cpu("bpftrace"), |v| format!("{v:.0} ms"))
    );
    // How much the baseline alone moved: a target finer than that cannot be resolved here.
    let spread = |m: &str| {
        let v: Vec<f64> = lab
            .values(m, "none")
            .into_iter()
            .filter(|x| x.is_finite() && *x > 0.0)
            .collect();
        let (lo, hi) = v
            .iter()
            .fold((f64::MAX, 0.0f64), |(lo, hi), x| (lo.min(*x), hi.max(*x)));
        (v.len() > 1).then(|| hi / lo)
    };
    if let (Some(bw), Some(lat)) = (spread("bw_mbps"), spread("lat_p50_us")) {
        let _ = writeln!(
            s,
            "\n**Resolution:** without any tracer, bandwidth varied {bw:.2}× and p50 latency \
             {lat:.2}× between rounds (min to max). A target finer than that spread cannot be \
             resolved in this lab on a shared host{}: overhead rows within it say nothing about \
             the targets either way. Attach times compare best as the ratio of both tools on the \
             same probes in the same boot.",
            if lab.kvm == Some(false) {
                " (emulated by TCG: a KVM or bare-metal RDMA host is needed to measure them)"
            } else {
                ""
            }
        );
    }
    let _ = writeln!(
        s,
        "\nRaw figures per round (MB/s; µs; `inf` or 0 = perftest printed that: not a \
         measurement, so that round is left out of the change rows above, of both tracers when \
         it is the figure without a tracer; `-` = missing):\n"
    );
    let _ = writeln!(
        s,
        "| round | BW none | BW rdmatrace | BW bpftrace | p50 none | p50 rdmatrace | p50 bpftrace |\n|---|---|---|---|---|---|---|"
    );
    let get = |m: &str, t: &str, round: u32| {
        lab.value(m, t, round)
            .map_or("-".to_string(), |v| format!("{v}"))
    };
    for i in 1..=lab.rounds {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} |",
            i,
            get("bw_mbps", "none", i),
            get("bw_mbps", "rdmatrace", i),
            get("bw_mbps", "bpftrace", i),
            get("lat_p50_us", "none", i),
            get("lat_p50_us", "rdmatrace", i),
            get("lat_p50_us", "bpftrace", i),
        );
    }
    s.push('\n');
    if lab.startup.is_empty() {
        let _ = writeln!(
            s,
            "Where rdmatrace's start-up went in this boot: not known (the lab left no \
             `rdmatrace doctor --json` output).\n"
        );
    } else {
        let _ = writeln!(
            s,
            "Where one rdmatrace start-up went in this boot (`rdmatrace doctor --json` before \
             the rounds, its `start-up:` items; what `record` does after loading, and the \
             process's own start, are not in it):\n"
        );
        super::attach::phase_table(s, &lab.startup);
    }
    if ratio.is_some_and(|r| r < 10.0) {
        super::tried::section(s, "lab-attach", "attach ratio");
    }
    super::progcost::section(s, lab);
}

fn big_section(s: &mut String, big: Result<&super::bigfile::BigReplay, &String>) {
    let _ = writeln!(s, "## Replay memory: a 1 GiB recording, read as a stream\n");
    match big {
        Ok(b) => {
            let _ = writeln!(
                s,
                "Peak RSS should not grow with the file: the same command on a file a quarter the \
                 size is the comparison.\n\n\
                 | file | events | wall | events/s | peak RSS | command |\n|---|---|---|---|---|---|"
            );
            for r in &b.runs {
                let _ = writeln!(
                    s,
                    "| {:.2} GiB | {} | {:.1} s | {:.2} M | {:.1} MiB | `{}` |",
                    r.file_bytes as f64 / (1u64 << 30) as f64,
                    r.events,
                    r.wall_ms / 1e3,
                    r.events as f64 / (r.wall_ms / 1e3) / 1e6,
                    r.rss_kib as f64 / 1024.0,
                    r.command
                );
            }
            s.push('\n');
        }
        Err(e) => {
            let _ = writeln!(s, "Not measured: {e}\n");
        }
    }
}

pub fn markdown(i: &Inputs<'_>) -> String {
    let m = i.machine;
    let mut s = String::new();
    let _ = writeln!(s, "# rdmatrace benchmarks\n");
    let _ = writeln!(
        s,
        "Written by `{}` on {} — {} × {} ({} RAM), host kernel {}, {}. Source measured: {} \
         when the run started. Measured binaries are release builds. Load average (1, 5, 15 min) before the run: {}; after it: {} (ratios \
         are taken side by side, medians reported). A target that is not met is reported as \
         measured, not rounded.\n",
        i.reproduce,
        m.date,
        m.cpus,
        m.cpu,
        m.mem,
        m.kernel,
        m.rustc,
        m.source,
        m.load_before,
        i.load_after
    );
    replay_section(&mut s, i.replay);
    side_by_side(&mut s, i.side);
    super::attach::section(&mut s, i.attach);
    super::hostcost::section(&mut s, i.host_cost);
    size_section(&mut s, i);
    storm_section(&mut s, i.storms);
    big_section(&mut s, i.big);
    super::fleet::section(&mut s, i.fleet);
    super::scale::section(&mut s, i.scale);
    super::scale::lab_qps(&mut s, i.lab);
    super::serve::section(&mut s, i.serve);
    lab_section(&mut s, i.lab, i.reproduce);
    s
}
