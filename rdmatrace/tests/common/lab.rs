//! Helpers of the lab tests (`tests/lab_*.rs`): programs run in the lab VM (rdma-core's
//! examples, perftest, our rt-* workloads), what they print, and the lab's network.

use std::{
    process::{Command, Output, Stdio},
    thread::sleep,
    time::{Duration, Instant},
};

use serde_json::{json, Value};

use super::workload;

pub const READY_TIMEOUT: Duration = Duration::from_secs(180);

pub fn in_lab() {
    assert_eq!(
        std::env::var("RDMATRACE_LAB").as_deref(),
        Ok("1"),
        "lab tests run inside the lab VM: cargo xtask test"
    );
}

/// `local address:  LID 0x0000, QPN 0x000011, PSN ...` (rdma-core examples) or
/// `local address: LID 0000 QPN 0x0011 PSN ...` (perftest) -> 0x11.
pub fn local_qpn(output: &str) -> u32 {
    let line = output
        .lines()
        .find(|l| l.contains("local address"))
        .unwrap_or_else(|| panic!("no 'local address' line in:\n{output}"));
    let hex = line
        .split("QPN ")
        .nth(1)
        .and_then(|s| s.split([',', ' ']).next())
        .unwrap_or_else(|| panic!("no QPN in {line:?}"));
    u32::from_str_radix(hex.trim().trim_start_matches("0x"), 16).expect("QPN hex")
}

/// Runs a client until it succeeds and `ok` accepts its output (its server may not listen yet);
/// returns its pid and output.
pub fn client_until_ok(prog: &str, args: &[&str], ok: impl Fn(&str) -> bool) -> (u32, String) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        sleep(Duration::from_millis(700));
        let c = Command::new(prog)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("start {prog}: {e}"));
        let pid = c.id();
        let out = c.wait_with_output().expect("client output");
        let t = text(&out);
        if out.status.success() && ok(&t) {
            return (pid, t);
        }
        assert!(
            Instant::now() < deadline,
            "{prog} {args:?} never succeeded: {t}"
        );
    }
}

/// The pid a workload printed as `... pid N ...` (rt-fallback, rt-mover).
pub fn printed_pid(output: &str) -> u32 {
    output
        .split_whitespace()
        .skip_while(|w| *w != "pid")
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no 'pid N' in:\n{output}"))
}

pub fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Runs an ibv_rc_pingpong pair (server on rxe1, client on rxe0 -> 192.0.2.2) and returns
/// ((server pid, server output), (client pid, client output)).
pub fn rc_pingpong() -> ((u32, String), (u32, String)) {
    let server = Command::new("ibv_rc_pingpong")
        .args(["-d", "rxe1", "-g", "1", "-n", "20"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start ibv_rc_pingpong server");
    let server_pid = server.id();
    // The server prints nothing until it exits (stdout is a pipe): retry the client until the
    // server's TCP port accepts.
    let (client_pid, client_out) = client_until_ok(
        "ibv_rc_pingpong",
        &["-d", "rxe0", "-g", "1", "-n", "20", "192.0.2.2"],
        |_| true,
    );
    let server_out = server.wait_with_output().expect("server output");
    assert!(
        server_out.status.success(),
        "server failed: {}",
        text(&server_out)
    );
    ((server_pid, text(&server_out)), (client_pid, client_out))
}

/// Events about (dev, qpn) owned by pid, in time order.
pub fn qp_events<'a>(events: &'a [Value], pid: u32, dev: &str, qpn: u32) -> Vec<&'a Value> {
    let mut v: Vec<&Value> = events
        .iter()
        .filter(|e| {
            e["data"]["pid"] == json!(pid)
                && e["data"]["dev"] == json!(dev)
                && e["data"]["qpn"] == json!(qpn)
        })
        .collect();
    v.sort_by_key(|e| e["data"]["ts_ns"].as_u64());
    v
}

/// netem on a lab NIC (loss, or delay) for the life of the guard.
pub struct Loss {
    nic: String,
}

impl Loss {
    /// `percent` % of the packets leaving the NIC dropped.
    pub fn on(nic_var: &str, percent: u32) -> Loss {
        Loss::netem(nic_var, &["loss", &format!("{percent}%")])
    }

    /// Every packet leaving the NIC held `ms` milliseconds (nothing dropped).
    pub fn delay(nic_var: &str, ms: u32) -> Loss {
        Loss::netem(nic_var, &["delay", &format!("{ms}ms")])
    }

    fn netem(nic_var: &str, what: &[&str]) -> Loss {
        let nic = std::env::var(nic_var).unwrap_or_else(|_| panic!("{nic_var} not set by the lab"));
        let st = Command::new("tc")
            .args(["qdisc", "replace", "dev", &nic, "root", "netem"])
            .args(what)
            .status()
            .expect("tc");
        assert!(st.success(), "tc netem {what:?} on {nic}");
        Loss { nic }
    }
}

impl Drop for Loss {
    fn drop(&mut self) {
        let _ = Command::new("tc")
            .args(["qdisc", "del", "dev", &self.nic, "root"])
            .status();
    }
}

/// Runs our rt-mover workload with `args`; returns (pid, output, exit code).
/// Linux 6.1's rxe answers a retried multi-packet RDMA WRITE (its ACK lost or late) with a
/// NAK "invalid request": rt-mover's 64 KiB writes then fail with status 9 on that kernel even
/// without a tracer (tried in the lab: 3 of 3 runs under 5 % loss), while 1 KiB writes (one
/// packet each) pass. On 6.1 the movers write 1 KiB at a time; everything else is the same.
pub fn rxe_chunk_args() -> &'static [&'static str] {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    if release.starts_with("6.1.") {
        &["--chunk-kib", "1"]
    } else {
        &[]
    }
}

pub fn mover(args: &[&str], env: &[(&str, &str)]) -> (u32, String, Option<i32>) {
    let c = Command::new(workload("rt-mover"))
        .args(args)
        .args(rxe_chunk_args())
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start rt-mover");
    let pid = c.id();
    let out = c.wait_with_output().expect("rt-mover output");
    (pid, text(&out), out.status.code())
}

/// `sender rxe0 qpn 0x000011` in rt-mover's first line -> ("rxe0", 0x11); same for `receiver`.
pub fn mover_qp(out: &str, side: &str) -> (String, u32) {
    let words: Vec<&str> = out
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    let i = words
        .iter()
        .position(|w| *w == side)
        .unwrap_or_else(|| panic!("no {side} in {out}"));
    let qpn = u32::from_str_radix(words[i + 3].trim_start_matches("0x"), 16).expect("qpn");
    (words[i + 1].to_string(), qpn)
}
