//! Per-program cost of the socket hooks on this host, at native speed: the lab's per-probe
//! figures come from a kernel emulated by TCG, where one program's time per run moves up to ~2×
//! with where it was loaded; this host's kernel runs `sock_send_length` / `sock_recv_length`
//! natively. Each pass attaches, side by side, rdmatrace (`record`), bpftrace's equivalent
//! program (the lab's twin: a count per process and hook) and two empty bpftrace programs on
//! the two tracepoints (the floor: their mean), then makes a loopback TCP storm of one-byte
//! sends and receives, and reads each program's run time and run count from the kernel's own
//! accounting (`kernel.bpf_stats_enabled=1`). Each tracer's programs are the ones that appeared
//! while it started (tracers start one at a time), so no owner needs naming. The order the
//! tracers attach in is reversed every other pass. What the bench changes on the host (the
//! statistics switch, tracefs mounted for bpftrace's tracepoints) is said and undone.

use std::{
    collections::BTreeSet,
    io::{BufRead as _, BufReader, Read as _},
    path::Path,
    process::{Child, Command, Stdio},
    thread,
    time::{Duration, Instant},
};

use anyhow::{bail, Context as _};

use super::release_bin;

/// The socket hooks, as bpftrace names its programs on them (15 characters) and as rdmatrace's
/// program names end.
pub const HOOKS: [(&str, &str, &str); 2] = [
    ("sock_send_length", "sock_send_lengt", "tcp_send_"),
    ("sock_recv_length", "sock_recv_lengt", "tcp_recv_"),
];

/// Passes, and one-byte send/receive pairs per pass.
pub const PASSES: u32 = 5;
pub const CALLS: u32 = 100_000;

const TWIN: &str = "BEGIN { printf(\"Tracing\\n\"); } \
    tracepoint:sock:sock_send_length, tracepoint:sock:sock_recv_length { @sock[pid, probe] = count(); }";
const EMPTY: &str = "BEGIN { printf(\"Tracing\\n\"); } \
    tracepoint:sock:sock_send_length, tracepoint:sock:sock_recv_length { }";

const STORM: &str = "import socket, sys
lst = socket.socket(); lst.bind(('127.0.0.1', 0)); lst.listen(1)
c = socket.create_connection(lst.getsockname()); s, _ = lst.accept()
for _ in range(int(sys.argv[1])):
    c.sendall(b'x'); s.recv(1)
";

/// One hook in one pass: ns per run of each program, and rdmatrace's runs.
#[derive(Clone, Debug, PartialEq)]
pub struct HookPass {
    pub hook: &'static str,
    pub rdmatrace: f64,
    pub twin: f64,
    pub empty: [f64; 2],
    pub runs: u64,
}

impl HookPass {
    /// The floor: the mean of the two empty programs.
    pub fn floor(&self) -> f64 {
        (self.empty[0] + self.empty[1]) / 2.0
    }
}

pub struct HostCost {
    /// Per pass, per hook.
    pub passes: Vec<Vec<HookPass>>,
    /// rdmatrace's program type on the hooks (`tracing`: tp_btf; `raw_tracepoint`).
    pub kind: String,
    /// What was changed on the host for the run, and undone.
    pub changed: Vec<String>,
    pub kernel: String,
}

/// Undoes what the run changed, on every exit path.
struct Undo {
    stats_before: Option<String>,
    mounted: bool,
}

impl Drop for Undo {
    fn drop(&mut self) {
        if let Some(v) = &self.stats_before {
            let _ = std::fs::write(STATS, v);
        }
        if self.mounted {
            let _ = Command::new("umount").arg(TRACEFS).status();
        }
    }
}

const STATS: &str = "/proc/sys/kernel/bpf_stats_enabled";
const TRACEFS: &str = "/sys/kernel/tracing";

/// A loaded program: (id, name, type, run_time_ns, run_cnt).
type Prog = (u64, String, String, u64, u64);

/// Every loaded program.
fn programs() -> anyhow::Result<Vec<Prog>> {
    let out = Command::new("bpftool")
        .args(["-j", "prog", "show"])
        .output()
        .context("cannot run bpftool")?;
    let v: serde_json::Value =
        serde_json::from_slice(&out.stdout).context("bpftool prog show: not JSON")?;
    Ok(v.as_array()
        .map(|a| {
            a.iter()
                .map(|p| {
                    let s = |k: &str| p[k].as_str().unwrap_or("").to_string();
                    let n = |k: &str| p[k].as_u64().unwrap_or(0);
                    (
                        n("id"),
                        s("name"),
                        s("type"),
                        n("run_time_ns"),
                        n("run_cnt"),
                    )
                })
                .collect()
        })
        .unwrap_or_default())
}

fn ids() -> anyhow::Result<BTreeSet<u64>> {
    Ok(programs()?.into_iter().map(|p| p.0).collect())
}

/// A tracer started and ready (its ready line on stdout or stderr), with the programs it
/// loaded.
struct Tracer {
    child: Child,
    ids: BTreeSet<u64>,
}

fn start(name: &str, cmd: &mut Command, ready: &str) -> anyhow::Result<Tracer> {
    let before = ids()?;
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("cannot start {name}"))?;
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    for out in [
        child
            .stdout
            .take()
            .map(|o| Box::new(o) as Box<dyn std::io::Read + Send>),
        child
            .stderr
            .take()
            .map(|e| Box::new(e) as Box<dyn std::io::Read + Send>),
    ]
    .into_iter()
    .flatten()
    {
        let tx = tx.clone();
        thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                if tx.send(line.unwrap_or_default()).is_err() {
                    break;
                }
            }
        });
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut said = String::new();
    loop {
        match rx.recv_timeout(Duration::from_millis(200)) {
            Ok(line) if line.contains(ready) => break,
            Ok(line) => {
                said.push_str(&line);
                said.push('\n');
            }
            Err(_) if Instant::now() > deadline || child.try_wait().ok().flatten().is_some() => {
                let _ = child.kill();
                let _ = child.wait();
                bail!("{name} was not ready: {said}");
            }
            Err(_) => {}
        }
    }
    // The rest of its output is drained by the threads until it ends.
    thread::spawn(move || while rx.recv().is_ok() {});
    let ids = ids()?.difference(&before).copied().collect();
    Ok(Tracer { child, ids })
}

fn stop(t: &mut Tracer) {
    // A child of ours, not yet waited for: its pid is still its own.
    let _ = Command::new("kill")
        .args(["-INT", &t.child.id().to_string()])
        .status();
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if t.child.try_wait().ok().flatten().is_some() {
            return;
        }
        thread::sleep(Duration::from_millis(50));
    }
    let _ = t.child.kill();
    let _ = t.child.wait();
}

/// ns per run of `tracer`'s program on `hook` (summed if several), and its runs.
fn cost(progs: &[Prog], t: &Tracer, matches: impl Fn(&str) -> bool) -> Option<(f64, u64)> {
    let (ns, runs) = progs
        .iter()
        .filter(|p| t.ids.contains(&p.0) && matches(&p.1))
        .fold((0u64, 0u64), |(ns, runs), p| (ns + p.3, runs + p.4));
    (runs > 0).then(|| (ns as f64 / runs as f64, runs))
}

fn pass(n: u32, out: &Path) -> anyhow::Result<(Vec<HookPass>, String)> {
    let rec = out.join("hostcost.rdmt");
    let mut order: Vec<(&str, Command, &str)> = vec![
        (
            "rdmatrace",
            Command::new(release_bin("rdmatrace")),
            "Hit Ctrl-C",
        ),
        ("twin", Command::new("bpftrace"), "Tracing"),
        ("empty", Command::new("bpftrace"), "Tracing"),
        ("empty2", Command::new("bpftrace"), "Tracing"),
    ];
    order[0].1.args(["record", "--force", "-o"]).arg(&rec);
    order[1].1.args(["-e", TWIN]);
    order[2].1.args(["-e", EMPTY]);
    order[3].1.args(["-e", EMPTY]);
    if n.is_multiple_of(2) {
        order.reverse();
    }
    let mut started: Vec<(&str, Tracer)> = Vec::new();
    let mut result = Ok(());
    for (name, mut cmd, ready) in order {
        match start(name, &mut cmd, ready) {
            Ok(t) => started.push((name, t)),
            Err(e) => {
                result = Err(e);
                break;
            }
        }
    }
    let measured = result.and_then(|()| {
        let status = Command::new("python3")
            .args(["-c", STORM, &CALLS.to_string()])
            .status()
            .context("cannot run the loopback storm")?;
        if !status.success() {
            bail!("the loopback storm failed: {status}");
        }
        programs()
    });
    for (_, t) in &mut started {
        stop(t);
    }
    let progs = measured?;
    let of = |name: &str| started.iter().find(|(n, _)| *n == name).map(|(_, t)| t);
    let (rt, twin, e1, e2) = match (of("rdmatrace"), of("twin"), of("empty"), of("empty2")) {
        (Some(a), Some(b), Some(c), Some(d)) => (a, b, c, d),
        _ => bail!("a tracer did not start"),
    };
    let kind = progs
        .iter()
        .find(|p| rt.ids.contains(&p.0) && p.1.starts_with("tcp_send_") && p.4 > 0)
        .map(|p| p.2.clone())
        .unwrap_or_default();
    let mut hooks = Vec::new();
    for (hook, bt, ours) in HOOKS {
        let theirs = |p: &str| p == bt;
        let (r, runs) = cost(&progs, rt, |p| p.starts_with(ours))
            .with_context(|| format!("rdmatrace's program on {hook} did not run"))?;
        let c = |t: &Tracer| {
            cost(&progs, t, theirs)
                .map(|c| c.0)
                .with_context(|| format!("a bpftrace program on {hook} did not run"))
        };
        hooks.push(HookPass {
            hook,
            rdmatrace: r,
            twin: c(twin)?,
            empty: [c(e1)?, c(e2)?],
            runs,
        });
    }
    Ok((hooks, kind))
}

pub fn run() -> anyhow::Result<HostCost> {
    let uid = Command::new("id")
        .arg("-u")
        .output()
        .context("cannot run id")?;
    if String::from_utf8_lossy(&uid.stdout).trim() != "0" {
        bail!("needs root (bpf_stats, bpftrace)");
    }
    for tool in ["bpftool", "bpftrace", "python3"] {
        if Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .stdout(Stdio::null())
            .status()
            .map_or(true, |s| !s.success())
        {
            bail!("{tool} is missing");
        }
    }
    let btf = std::fs::read("/sys/kernel/btf/vmlinux").unwrap_or_default();
    if !btf
        .windows(b"btf_trace_sock_send_length".len())
        .any(|w| w == b"btf_trace_sock_send_length")
    {
        bail!("this host's kernel has no sock_send_length tracepoint (before 6.3)");
    }
    let mut changed = Vec::new();
    let mut undo = Undo {
        stats_before: None,
        mounted: false,
    };
    let before = std::fs::read_to_string(STATS).context("cannot read bpf_stats_enabled")?;
    if before.trim() != "1" {
        std::fs::write(STATS, "1").context("cannot set kernel.bpf_stats_enabled=1")?;
        undo.stats_before = Some(before.trim().to_string());
        changed.push(format!(
            "kernel.bpf_stats_enabled set to 1 for the run (was {}), then set back",
            before.trim()
        ));
    }
    if !Path::new(TRACEFS).join("events").exists() {
        let ok = Command::new("mount")
            .args(["-t", "tracefs", "nodev", TRACEFS])
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            bail!("tracefs is not mounted and could not be mounted at {TRACEFS}");
        }
        undo.mounted = true;
        changed.push(format!(
            "tracefs mounted at {TRACEFS} for bpftrace's tracepoints, then unmounted"
        ));
    }
    let out = super::out_dir();
    let mut passes = Vec::new();
    let mut kind = String::new();
    for n in 1..=PASSES {
        let (hooks, k) = pass(n, &out)?;
        eprintln!(
            "hostcost pass {n}: {}",
            hooks
                .iter()
                .map(|h| format!(
                    "{} {:.1} ns (twin {:.1}, empty {:.1}/{:.1})",
                    h.hook, h.rdmatrace, h.twin, h.empty[0], h.empty[1]
                ))
                .collect::<Vec<_>>()
                .join("; ")
        );
        passes.push(hooks);
        kind = k;
    }
    drop(undo);
    let mut kernel = String::new();
    if let Ok(mut f) = std::fs::File::open("/proc/sys/kernel/osrelease") {
        let _ = f.read_to_string(&mut kernel);
    }
    Ok(HostCost {
        passes,
        kind,
        changed,
        kernel: kernel.trim().to_string(),
    })
}

/// rdmatrace / floor of each pass on `hook`.
pub fn ratios(r: &HostCost, hook: &str) -> Vec<f64> {
    r.passes
        .iter()
        .flatten()
        .filter(|h| h.hook == hook && h.floor() > 0.0)
        .map(|h| h.rdmatrace / h.floor())
        .collect()
}

/// Medians over the passes of `hook`: (rdmatrace, twin, floor, runs) ns/run.
pub fn medians(r: &HostCost, hook: &str) -> Option<(f64, f64, f64, f64)> {
    let of = |f: fn(&HookPass) -> f64| {
        super::median(
            &r.passes
                .iter()
                .flatten()
                .filter(|h| h.hook == hook)
                .map(f)
                .collect::<Vec<_>>(),
        )
    };
    Some((
        of(|h| h.rdmatrace)?,
        of(|h| h.twin)?,
        of(HookPass::floor)?,
        of(|h| h.runs as f64)?,
    ))
}

/// How far the two identical empty programs differed: the largest ratio of the two over the
/// passes and hooks.
pub fn empty_spread(r: &HostCost) -> Option<f64> {
    r.passes
        .iter()
        .flatten()
        .filter(|h| h.empty[0] > 0.0 && h.empty[1] > 0.0)
        .map(|h| h.empty[0].max(h.empty[1]) / h.empty[0].min(h.empty[1]))
        .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.max(v))))
}

/// The target: a per-packet hook within 2× of the empty program's cost.
pub const TARGET_RATIO: f64 = 2.0;

pub fn section(s: &mut String, r: Result<&HostCost, &String>) {
    use std::fmt::Write as _;
    let _ = writeln!(s, "### Socket hooks at native speed on this host\n");
    let r = match r {
        Ok(r) => r,
        Err(e) => {
            let _ = writeln!(s, "Not measured: {e}\n");
            return;
        }
    };
    let kind = match r.kind.as_str() {
        "tracing" => "tp_btf",
        "" => "?",
        k => k,
    };
    let _ = writeln!(
        s,
        "Reproduce: `cargo xtask bench` (as root). This host's kernel ({}) runs the socket hooks \
         natively, where the lab's emulated kernel moves a program's time per run with where it \
         was loaded. {} passes; each attaches side by side rdmatrace (`record`; its programs \
         here: {kind}), bpftrace's equivalent (a count per process and hook) and two empty \
         bpftrace programs on both tracepoints, then makes {} one-byte sends and as many \
         receives over loopback; time per run from the kernel's accounting (bpf_stats), each \
         tracer's programs being the ones that appeared while it started (one at a time, the \
         order reversed every other pass). The floor of a pass is the mean of the two empty \
         programs. Medians over the passes.\n",
        r.kernel, PASSES, CALLS
    );
    let _ = writeln!(
        s,
        "| hook | runs per pass | rdmatrace | bpftrace's equivalent | empty program (floor) | rdmatrace / floor (median of passes) | target | each pass |\n|---|---|---|---|---|---|---|---|"
    );
    for (hook, ..) in HOOKS {
        let Some((rt, twin, floor, runs)) = medians(r, hook) else {
            continue;
        };
        let each = ratios(r, hook);
        let ratio = super::median(&each).unwrap_or(f64::NAN);
        let _ = writeln!(
            s,
            "| `{hook}` | {runs:.0} | {rt:.1} ns | {twin:.1} ns | {floor:.1} ns | {ratio:.2}× | ≤ {TARGET_RATIO}× ({}) | {} |",
            if ratio <= TARGET_RATIO { "met" } else { "**not met**" },
            each.iter()
                .map(|v| format!("{v:.2}×"))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    if let Some(sp) = empty_spread(r) {
        let _ = writeln!(
            s,
            "\nThe two identical empty programs differed by up to {sp:.2}× (one hook, one pass)."
        );
    }
    for c in &r.changed {
        let _ = writeln!(s, "\nChanged on this host for the run: {c}.");
    }
    s.push('\n');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pass(hook: &'static str, rdmatrace: f64, empty: [f64; 2]) -> HookPass {
        HookPass {
            hook,
            rdmatrace,
            twin: 2.0 * rdmatrace,
            empty,
            runs: 100_000,
        }
    }

    #[test]
    fn the_floor_of_a_pass_is_the_mean_of_its_two_empty_programs_and_ratios_are_per_pass() {
        let r = HostCost {
            passes: vec![
                vec![
                    pass("sock_send_length", 60.0, [30.0, 30.0]),
                    pass("sock_recv_length", 90.0, [20.0, 40.0]),
                ],
                vec![
                    pass("sock_send_length", 45.0, [25.0, 35.0]),
                    pass("sock_recv_length", 60.0, [50.0, 50.0]),
                ],
                vec![pass("sock_send_length", 70.0, [35.0, 35.0])],
            ],
            kind: "tracing".into(),
            changed: vec![],
            kernel: "6.18".into(),
        };
        assert_eq!(ratios(&r, "sock_send_length"), [2.0, 1.5, 2.0]);
        assert_eq!(ratios(&r, "sock_recv_length"), [3.0, 1.2]);
        let (rt, twin, floor, runs) = medians(&r, "sock_send_length").expect("medians");
        assert_eq!((rt, twin, floor, runs), (60.0, 120.0, 30.0, 100_000.0));
        assert_eq!(empty_spread(&r), Some(2.0));
        let mut md = String::new();
        section(&mut md, Ok(&r));
        assert!(md.contains("| `sock_send_length` | 100000 | 60.0 ns | 120.0 ns | 30.0 ns | 2.00× | ≤ 2× (met) | 2.00×, 1.50×, 2.00× |"), "{md}");
        assert!(
            md.contains("| 2.10× | ≤ 2× (**not met**) | 3.00×, 1.20× |"),
            "{md}"
        );
        assert!(md.contains("programs here: tp_btf"), "{md}");
    }
}
