//! Two-host lab tier: both ends of real connections across two VMs (`cargo xtask lab --hosts
//! 2`), each host recording its own side, b's clock set seconds off a's. Every test runs on both
//! hosts at once (the same binary, the same order); a reads both recordings with
//! `report a.rdmt b.rdmt --json` and checks the connection table, the clock correction and
//! the faults against what the programs printed and what was done to the wire.

mod common;

use std::{
    process::{Child, Command, Stdio},
    thread::sleep,
    time::{Duration, Instant},
};

use common::{hosts::Host, lab::*, *};
use serde_json::Value;

/// The clock correction's bound the report must state at most (the handshakes of one
/// connection under TCG), and how far its estimate may be from the truth beyond it.
const CLOCK_BOUND_NS: i64 = 300_000_000;
const CLOCK_SLACK_NS: i64 = 10_000_000;

/// `report a.rdmt b.rdmt --json` of scenario `test` (on a).
fn fleet_report(h: &Host, test: &str) -> Value {
    let (a, b) = (h.recording(test, "a"), h.recording(test, "b"));
    let out = run(&[
        "report",
        a.to_str().expect("utf8"),
        b.to_str().expect("utf8"),
        "--json",
    ]);
    assert!(out.status.success(), "report: {}", out.stderr);
    let v: Value = serde_json::from_str(&out.stdout).expect("report JSON");
    assert_eq!(v["type"], "fleet_report", "{v}");
    v["data"].clone()
}

fn spawn(prog: &str, args: &[&str]) -> Child {
    Command::new(prog)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("start {prog}: {e}"))
}

fn output(c: Child) -> (bool, String) {
    let out = c.wait_with_output().expect("program output");
    (out.status.success(), text(&out))
}

/// The QPs of `dev` in state RTS and their owners' pids, as the kernel lists them (`rdma
/// resource show qp`, independently of the tracer).
fn rts_pids(dev: &str) -> Vec<u64> {
    let out = Command::new("rdma")
        .args(["-j", "resource", "show", "qp", "link", &format!("{dev}/1")])
        .output()
        .expect("run rdma resource show qp");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    v.as_array()
        .into_iter()
        .flatten()
        .filter(|q| q["state"] == "RTS")
        .filter_map(|q| q["pid"].as_u64())
        .collect()
}

/// Starts `prog ARGS` (a client) again until its QP on `dev` reaches RTS (its server may not
/// listen yet: then it exits first); returns it still running.
fn client_in_rts(dev: &str, prog: &str, args: &[&str]) -> Child {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let mut c = spawn(prog, args);
        let pid = u64::from(c.id());
        loop {
            if rts_pids(dev).contains(&pid) {
                return c;
            }
            if c.try_wait().expect("client status").is_some() {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{prog} {args:?} never reached RTS"
            );
            sleep(Duration::from_millis(100));
        }
        let (_, out) = output(c);
        assert!(
            Instant::now() < deadline,
            "{prog} {args:?} never reached RTS: {out}"
        );
        sleep(Duration::from_millis(700));
    }
}

/// ib_write_bw ARGS between the hosts: b serves, a connects. Returns (pid, output) of this
/// host's side; both sides publish theirs.
fn write_bw(h: &Host, test: &str, args: &[&str]) -> (u32, String) {
    let mut all = vec!["-d", &h.dev, "-x", &h.gid_index];
    all.extend_from_slice(args);
    let (pid, out) = if h.is_a() {
        h.get("b", &format!("{test}-server-up"));
        all.push(&h.peer_addr);
        client_until_ok("ib_write_bw", &all, |o| o.contains("local address"))
    } else {
        let server = spawn("ib_write_bw", &all);
        let pid = server.id();
        sleep(Duration::from_millis(500));
        h.put(&format!("{test}-server-up"), "1");
        let (ok, out) = output(server);
        assert!(ok, "ib_write_bw server: {out}");
        (pid, out)
    };
    h.put(&format!("{test}-pid"), &pid.to_string());
    h.put(&format!("{test}-qpn"), &local_qpn(&out).to_string());
    (pid, out)
}

/// The connections of `r` that have an end on host `host` with QPN `qpn`.
fn connection<'a>(r: &'a Value, host: &str, qpn: u32) -> &'a Value {
    let found: Vec<&Value> = r["connections"]
        .as_array()
        .expect("connections")
        .iter()
        .filter(|c| {
            c["ends"].as_array().is_some_and(|e| {
                e.iter()
                    .any(|e| e["host"] == host && e["qpn"].as_u64() == Some(u64::from(qpn)))
            })
        })
        .collect();
    assert_eq!(
        found.len(),
        1,
        "one connection with {host} QP {qpn:#x}: {r:#}"
    );
    found[0]
}

/// Asserts the connection's ends are a's QP `qa` (pid `pa`) and b's `qb` (pid `pb`), paired.
fn assert_pair(c: &Value, (qa, pa): (u32, u32), (qb, pb): (u32, u32), comm: &str) {
    assert_eq!(c["paired"], true, "{c:#}");
    let ends = c["ends"].as_array().expect("ends");
    let end = |host: &str| {
        ends.iter()
            .find(|e| e["host"] == host)
            .unwrap_or_else(|| panic!("no end on {host}: {c:#}"))
    };
    let (a, b) = (end("lab-a"), end("lab-b"));
    assert_eq!(a["qpn"].as_u64(), Some(u64::from(qa)), "{c:#}");
    assert_eq!(b["qpn"].as_u64(), Some(u64::from(qb)), "{c:#}");
    assert_eq!(a["pid"].as_u64(), Some(u64::from(pa)), "{c:#}");
    assert_eq!(b["pid"].as_u64(), Some(u64::from(pb)), "{c:#}");
    assert_eq!(a["comm"], comm);
    assert_eq!(b["comm"], comm);
    assert_eq!(a["dev"], "rxe0");
    assert_eq!(a["peer_qpn"].as_u64(), Some(u64::from(qb)));
    assert_eq!(b["peer_qpn"].as_u64(), Some(u64::from(qa)));
}

fn faults<'a>(r: &'a Value, kind: &str) -> Vec<&'a Value> {
    r["faults"]
        .as_array()
        .expect("faults")
        .iter()
        .filter(|f| f["kind"] == kind)
        .collect()
}

/// The kernel's own count, on this host's device, of requests that arrived out of sequence and
/// of sequence-error NAKs received: read from sysfs, independently of the tracer.
fn wire_loss_counters(h: &Host) -> u64 {
    ["out_of_seq_request", "rcvd_seq_err"]
        .iter()
        .filter_map(|c| {
            std::fs::read_to_string(format!(
                "/sys/class/infiniband/{}/ports/1/hw_counters/{c}",
                h.dev
            ))
            .ok()?
            .trim()
            .parse::<u64>()
            .ok()
        })
        .sum()
}

/// Runs `scenario` on both hosts with each recording its side, then on a returns the report.
fn recorded(h: &Host, test: &str, scenario: impl FnOnce()) -> Option<Value> {
    let recorder = h.record(test);
    h.barrier(&format!("{test}-recording"));
    scenario();
    h.barrier(&format!("{test}-done"));
    h.stop(recorder);
    h.barrier(&format!("{test}-recorded"));
    h.is_a().then(|| fleet_report(h, test))
}

#[test]
#[ignore = "two-host lab: run through `cargo xtask test` (lab --hosts 2)"]
fn lab_hosts_1_ib_write_bw_ends_paired_and_the_clock_offset_recovered() {
    in_lab();
    let h = Host::here();
    let test = "write-bw";
    let mut mine = (0, String::new());
    let before = wire_loss_counters(&h);
    let report = recorded(&h, test, || {
        mine = write_bw(&h, test, &["-s", "4096", "-n", "2000"])
    });
    // Whether the emulated wire (a UDP socket pair between the two qemu processes) lost
    // packets, by the kernel's counters: under a loaded host it can, and then the run is not
    // healthy and the report must say so.
    let lost_here = wire_loss_counters(&h).saturating_sub(before);
    h.put(&format!("{test}-wire-loss"), &lost_here.to_string());
    let truth = h.measured_clock_correction();
    h.barrier(&format!("{test}-clock"));
    let (Some(r), Some((truth, truth_bound))) = (report, truth) else {
        return;
    };
    let (qa, pa) = (local_qpn(&mine.1), mine.0);
    let qb: u32 = h.get("b", &format!("{test}-qpn")).parse().expect("qpn");
    let pb: u32 = h.get("b", &format!("{test}-pid")).parse().expect("pid");
    assert_pair(
        connection(&r, "lab-a", qa),
        (qa, pa),
        (qb, pb),
        "ib_write_bw",
    );
    let clock = &r["hosts"][1]["clock"];
    assert_eq!(r["hosts"][1]["host"], "lab-b");
    assert_eq!(clock["aligned"], true, "{clock}");
    let (est, bound) = (
        clock["offset_ns"].as_i64().expect("offset"),
        clock["uncertainty_ns"].as_i64().expect("uncertainty"),
    );
    eprintln!(
        "clock: lab set b {:+.3} s off a; measured correction {truth} ns (±{truth_bound}); \
         report {est} ns ± {bound}",
        h.clock_offset
    );
    assert!(bound <= CLOCK_BOUND_NS, "stated bound too wide: {clock}");
    assert!(
        (est - truth).abs() <= bound + truth_bound + CLOCK_SLACK_NS,
        "correction {est} ± {bound} ns, truth {truth} ± {truth_bound} ns"
    );
    let lost_b: u64 = h
        .get("b", &format!("{test}-wire-loss"))
        .parse()
        .expect("b's loss counters");
    let faults = r["faults"].as_array().expect("faults");
    if lost_here + lost_b == 0 {
        assert!(
            faults.is_empty(),
            "a healthy run has no fault: {:#}",
            r["faults"]
        );
    } else {
        // A few losses may stay under packet_loss's thresholds; anything else is a defect.
        eprintln!(
            "the emulated wire lost packets during this run (kernel counters: lab-a +{lost_here}, \
             lab-b +{lost_b}): checking that the report names no fault but packet_loss"
        );
        assert!(
            faults.iter().all(|f| f["kind"] == "packet_loss"),
            "{:#}",
            r["faults"]
        );
    }
}

#[test]
#[ignore = "two-host lab: run through `cargo xtask test` (lab --hosts 2)"]
fn lab_hosts_2_rping_over_rdma_cm_paired() {
    in_lab();
    let h = Host::here();
    let test = "rping";
    let mut pid = 0;
    let report = recorded(&h, test, || {
        if h.is_a() {
            let server = spawn("rping", &["-s", "-a", &h.addr, "-v", "-C", "5"]);
            pid = server.id();
            h.put("rping-up", "1");
            let (ok, out) = output(server);
            assert!(ok, "rping server: {out}");
        } else {
            h.get("a", "rping-up");
            let peer = h.peer_addr.clone();
            let (p, out) = client_until_ok("rping", &["-c", "-a", &peer, "-v", "-C", "5"], |o| {
                o.contains("ping data")
            });
            assert!(out.contains("ping data"), "{out}");
            pid = p;
        }
        h.put("rping-pid", &pid.to_string());
    });
    let Some(r) = report else { return };
    let pb: u32 = h.get("b", "rping-pid").parse().expect("pid");
    let conns: Vec<&Value> = r["connections"]
        .as_array()
        .expect("connections")
        .iter()
        .filter(|c| {
            c["ends"]
                .as_array()
                .is_some_and(|e| e.iter().any(|e| e["comm"] == "rping"))
        })
        .collect();
    assert_eq!(conns.len(), 1, "one rping connection: {r:#}");
    let ends = conns[0]["ends"].as_array().expect("ends");
    let qpn = |host: &str| {
        ends.iter()
            .find(|e| e["host"] == host)
            .and_then(|e| e["qpn"].as_u64())
            .unwrap_or_else(|| panic!("no end on {host}: {r:#}")) as u32
    };
    assert_pair(conns[0], (qpn("lab-a"), pid), (qpn("lab-b"), pb), "rping");
    assert_eq!(
        conns[0]["via_cm"], true,
        "rping connects through RDMA CM: {r:#}"
    );
    let clock = &r["hosts"][1]["clock"];
    assert_eq!(clock["aligned"], true, "{clock}");
    assert!(
        clock["basis"]
            .as_str()
            .is_some_and(|b| b.contains("RDMA CM")),
        "{clock}"
    );
    assert!(
        r["faults"].as_array().is_some_and(Vec::is_empty),
        "rping's disconnect (flushes) is no fault: {:#}",
        r["faults"]
    );
}

/// Loss on `lossy`'s egress during an ib_write_bw from a to b: the fault names the direction.
fn loss_test(test: &str, lossy: &str, pct: u32, args: &[&str], from: &str, to: &str) {
    in_lab();
    let h = Host::here();
    let mut mine = (0, String::new());
    let report = recorded(&h, test, || {
        if h.name == lossy {
            h.loss(pct);
        }
        h.barrier(&format!("{test}-lossy"));
        mine = write_bw(&h, test, args);
        h.no_loss();
    });
    let Some(r) = report else { return };
    let qa = local_qpn(&mine.1);
    let qb: u32 = h.get("b", &format!("{test}-qpn")).parse().expect("qpn");
    let pb: u32 = h.get("b", &format!("{test}-pid")).parse().expect("pid");
    let c = connection(&r, "lab-a", qa);
    assert_pair(c, (qa, mine.0), (qb, pb), "ib_write_bw");
    let lost = faults(&r, "packet_loss");
    assert!(
        lost.iter()
            .any(|f| f["from_host"] == from && f["to_host"] == to && f["connection"] == c["id"]),
        "packet_loss from {from} to {to} on {}: {:#}",
        c["id"],
        r["faults"]
    );
    assert!(
        !lost.iter().any(|f| f["from_host"] == to),
        "no loss the other way: {:#}",
        r["faults"]
    );
}

#[test]
#[ignore = "two-host lab: run through `cargo xtask test` (lab --hosts 2)"]
fn lab_hosts_3_loss_on_a_egress_is_requests_lost_from_a_to_b() {
    loss_test(
        "loss-a",
        "a",
        3,
        &["-s", "4096", "-n", "3000"],
        "lab-a",
        "lab-b",
    );
}

#[test]
#[ignore = "two-host lab: run through `cargo xtask test` (lab --hosts 2)"]
fn lab_hosts_4_loss_on_b_egress_is_acks_lost_from_b_to_a() {
    // One write in flight at a time: each lost ACK costs a timer expiry and a duplicate.
    loss_test(
        "loss-b",
        "b",
        20,
        &["-s", "1024", "-n", "300", "-t", "1"],
        "lab-b",
        "lab-a",
    );
}

#[test]
#[ignore = "two-host lab: run through `cargo xtask test` (lab --hosts 2)"]
fn lab_hosts_5_peer_killed_with_sigkill_is_the_side_at_fault() {
    in_lab();
    let h = Host::here();
    let test = "peer-dead";
    let mut killed = 0;
    let report = recorded(&h, test, || {
        let mut args = vec!["-d", h.dev.as_str(), "-x", h.gid_index.as_str()];
        args.extend(["-s", "4096", "-n", "1000000"]);
        if h.is_a() {
            h.get("b", "dead-up");
            args.push(&h.peer_addr);
            let mut client = client_in_rts(&h.dev, "ib_write_bw", &args);
            // Traffic flows: the server may die now.
            sleep(Duration::from_secs(1));
            h.put("dead-running", &client.id().to_string());
            h.get("b", "dead-killed");
            // The client retries into the void; let it for a few seconds, then end it.
            sleep(Duration::from_secs(4));
            let _ = client.kill();
            let _ = client.wait();
        } else {
            let mut server = spawn("ib_write_bw", &args);
            killed = server.id();
            sleep(Duration::from_millis(500));
            h.put("dead-up", "1");
            h.get("a", "dead-running");
            sleep(Duration::from_secs(2));
            let _ = server.kill();
            let _ = server.wait();
            h.put("dead-killed", &killed.to_string());
        }
    });
    let Some(r) = report else { return };
    let pid: u64 = h.get("b", "dead-killed").parse().expect("pid");
    let dead = faults(&r, "peer_dead");
    assert_eq!(dead.len(), 1, "{:#}", r["faults"]);
    let f = dead[0];
    assert_eq!(
        (f["from_host"].as_str(), f["to_host"].as_str()),
        (Some("lab-a"), Some("lab-b"))
    );
    let c = r["connections"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["id"] == f["connection"]))
        .expect("the fault's connection");
    assert!(
        c["ends"].as_array().is_some_and(|e| e
            .iter()
            .any(|e| e["host"] == "lab-b" && e["pid"].as_u64() == Some(pid))),
        "{c:#}"
    );
    let ev = f["evidence"].to_string();
    assert!(
        ev.contains("signal 9") && ev.contains(&format!("pid {pid}")),
        "{ev}"
    );
}
