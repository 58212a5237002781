//! Lab tier, diagnoses: real programs that really have a fault — a wrong dest QPN, GID indexes
//! that do not match, a receiver that never posts receives, a process in a mount namespace
//! without /dev/infiniband — each recorded, reported, and the diagnosis checked against what
//! the program printed (kind, process, device, QP); and a healthy pingpong that gets none.
//! Ignored outside the lab VM (`cargo xtask test` runs them there).

mod common;

use std::{
    process::{Child, Command, Stdio},
    thread::sleep,
    time::{Duration, Instant},
};

use common::{lab::*, *};
use serde_json::{json, Value};

/// Records while `work` runs, then returns `report --json`'s data and what `work` returned.
fn recorded<T>(name: &str, work: impl FnOnce() -> T) -> (Value, T) {
    let dir = test_dir(name);
    let file = dir.path().join(format!("{name}.rdmt"));
    let path = file.to_str().expect("utf8");
    let recorder = start(&["record", "-o", path], READY_TIMEOUT);
    let got = work();
    sleep(Duration::from_millis(1500));
    let rec = recorder.stop();
    assert!(rec.status.success(), "{}", rec.stderr);
    // Every probe area but mlx5 (no ConnectX in the lab) attaches, or has its stand-in (6.1's
    // TCP byte counts).
    for line in rec.stderr.lines().filter(|l| l.contains("probes off")) {
        assert!(
            line.starts_with("rdmatrace: mlx5 ") || line.contains("stands in"),
            "{}",
            rec.stderr
        );
    }
    let report = run(&["report", path, "--json"]);
    assert!(report.status.success(), "{}", report.stderr);
    let r: Value = serde_json::from_str(report.stdout.trim()).expect("report JSON");
    (r["data"].clone(), got)
}

fn diagnoses(data: &Value) -> Vec<Value> {
    data["diagnoses"].as_array().expect("diagnoses").clone()
}

/// Waits for `child` at most `secs`, killing it after; returns its output.
fn wait_killing(mut child: Child, secs: u64) -> String {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            break;
        }
        sleep(Duration::from_millis(100));
    }
    let _ = child.kill();
    text(&child.wait_with_output().expect("output"))
}

#[test]
#[ignore = "lab: needs the Soft-RoCE VM; run through `cargo xtask test`"]
fn lab_a_dest_qpn_that_does_not_exist_is_named_on_the_sending_qp() {
    in_lab();
    let (data, (pid, out, code)) = recorded("lab-dest-qpn", || {
        mover(&["--mib", "1", "--wrong-dest-qpn", "--retry-cnt", "1"], &[])
    });
    assert_eq!(code, Some(2), "the writes must fail: {out}");
    assert!(out.contains("sender connected to qpn 0x0fedc0"), "{out}");
    let (sdev, sqpn) = mover_qp(&out, "sender");
    let diags = diagnoses(&data);
    assert_eq!(diags.len(), 1, "{diags:#?}\n{out}");
    let d = &diags[0];
    assert_eq!(d["kind"], json!("dest_qpn_unknown"), "{d:#}");
    assert_eq!(
        (&d["pid"], &d["dev"], &d["qpn"]),
        (&json!(pid), &json!(sdev), &json!(sqpn)),
        "{d:#}"
    );
    assert!(
        d["cause"]
            .as_str()
            .unwrap_or_default()
            .contains("QPN 0xfedc0 on rxe1"),
        "{d:#}"
    );
}

#[test]
#[ignore = "lab: needs the Soft-RoCE VM; run through `cargo xtask test`"]
fn lab_gid_indexes_that_do_not_match_are_gid_mismatch() {
    in_lab();
    // Our mover: the receiver is told the sender's link-local GID (index 0) while the sender
    // sends from its IPv4 one (index 1).
    let (data, (pid, out, _)) = recorded("lab-gid-mover", || {
        mover(
            &["--mib", "1", "--peer-gid-index", "0", "--retry-cnt", "1"],
            &[],
        )
    });
    let ends = [mover_qp(&out, "sender"), mover_qp(&out, "receiver")];
    let diags = diagnoses(&data);
    assert_eq!(diags.len(), 1, "{diags:#?}\n{out}");
    let d = &diags[0];
    assert_eq!(
        (&d["kind"], &d["pid"]),
        (&json!("gid_mismatch"), &json!(pid)),
        "{d:#}"
    );
    assert!(
        ends.iter()
            .any(|(dev, qpn)| d["dev"] == json!(dev) && d["qpn"] == json!(qpn)),
        "names one of {ends:?}: {d:#}"
    );

    // ibv_rc_pingpong with -g 0 on one side and -g 1 on the other.
    let (data, (server, client)) = recorded("lab-gid-pingpong", || {
        let server = Command::new("ibv_rc_pingpong")
            .args(["-d", "rxe1", "-g", "0", "-n", "5"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start ibv_rc_pingpong server");
        let spid = server.id();
        let deadline = Instant::now() + Duration::from_secs(20);
        let client = loop {
            let c = Command::new("ibv_rc_pingpong")
                .args(["-d", "rxe0", "-g", "1", "-n", "5", "192.0.2.2"])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("start ibv_rc_pingpong client");
            let cpid = c.id();
            let t = wait_killing(c, 20);
            if !t.contains("Couldn't connect") || Instant::now() > deadline {
                break (cpid, t);
            }
            sleep(Duration::from_millis(300));
        };
        ((spid, wait_killing(server, 20)), client)
    });
    let ends = [
        (server.0, "rxe1", local_qpn(&server.1)),
        (client.0, "rxe0", local_qpn(&client.1)),
    ];
    let diags = diagnoses(&data);
    let mismatches: Vec<&Value> = diags
        .iter()
        .filter(|d| d["kind"] == json!("gid_mismatch"))
        .collect();
    assert!(!mismatches.is_empty(), "{diags:#?}\n{server:?}\n{client:?}");
    for d in &mismatches {
        assert!(
            ends.iter().any(|(pid, dev, qpn)| d["pid"] == json!(pid)
                && d["dev"] == json!(dev)
                && d["qpn"] == json!(qpn)),
            "names one of {ends:?}: {d:#}"
        );
        assert_eq!(d["comm"], json!("ibv_rc_pingpong"), "{d:#}");
    }
}

#[test]
#[ignore = "lab: needs the Soft-RoCE VM; run through `cargo xtask test`"]
fn lab_rnr_names_the_receiver_that_posted_no_receives() {
    in_lab();
    let (data, (pid, out, code)) = recorded("lab-rnr", || {
        mover(
            &["--mib", "1", "--send-without-recv", "--rnr-retry", "1"],
            &[],
        )
    });
    assert_eq!(code, Some(2), "the sends must fail: {out}");
    assert!(out.contains("RNR retry counter exceeded"), "{out}");
    let (sdev, sqpn) = mover_qp(&out, "sender");
    let diags = diagnoses(&data);
    assert_eq!(diags.len(), 1, "{diags:#?}\n{out}");
    let d = &diags[0];
    assert_eq!(d["kind"], json!("rnr"), "{d:#}");
    assert_eq!(
        (&d["pid"], &d["dev"], &d["qpn"]),
        (&json!(pid), &json!(sdev), &json!(sqpn)),
        "{d:#}"
    );
    assert!(
        d["cause"]
            .as_str()
            .unwrap_or_default()
            .contains(&format!("receiver pid {pid} (rt-mover)")),
        "{d:#}"
    );
    assert!(
        d["evidence"]
            .to_string()
            .contains(&format!("rnr_retry 1 on QP {sqpn:#x}")),
        "{d:#}"
    );
    // The receiver's RNR delay, as rt-mover set it at RTR (12 = 0.64 ms).
    let (_, rqpn) = mover_qp(&out, "receiver");
    assert!(
        d["evidence"].to_string().contains(&format!(
            "min_rnr_timer 12 (640.0 µs) on the receiving QP {rqpn:#x}"
        )),
        "{d:#}"
    );
}

#[test]
#[ignore = "lab: needs the Soft-RoCE VM; run through `cargo xtask test`"]
fn lab_a_process_whose_namespace_has_no_rdma_device_is_no_rdma_device() {
    in_lab();
    // A mount namespace whose /dev/infiniband is empty, as a container without the device.
    let script = format!(
        "mount -t tmpfs none /dev/infiniband && exec {} --any-device --from 192.0.2.1 --to 192.0.2.2 --mib 4",
        workload("rt-fallback").display()
    );
    let (data, out) = recorded("lab-no-device", || {
        text(
            &Command::new("unshare")
                .args(["-m", "sh", "-c", &script])
                .output()
                .expect("run rt-fallback in a namespace"),
        )
    });
    assert!(out.contains("no rdma device"), "{out}");
    let pid: u32 = out
        .split_whitespace()
        .skip_while(|w| *w != "pid")
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no pid in {out}"));
    let procs = data["processes"].as_array().expect("processes");
    let p = procs
        .iter()
        .find(|p| p["pid"] == json!(pid))
        .unwrap_or_else(|| panic!("pid {pid} not in {procs:#?}"));
    assert_eq!(p["verdict"], json!("tcp_fallback"), "{p:#}");
    let diags = diagnoses(&data);
    let d = diags
        .iter()
        .find(|d| d["kind"] == json!("no_rdma_device"))
        .unwrap_or_else(|| panic!("no no_rdma_device: {diags:#?}"));
    assert_eq!(
        (&d["pid"], &d["comm"]),
        (&json!(pid), &json!("rt-fallback")),
        "{d:#}"
    );
    assert_eq!(diags.len(), 1, "{diags:#?}");
}

#[test]
#[ignore = "lab: needs the Soft-RoCE VM; run through `cargo xtask test`"]
fn lab_a_healthy_pingpong_and_its_teardown_get_no_diagnosis() {
    in_lab();
    let (data, ((spid, sout), (cpid, cout))) = recorded("lab-healthy", rc_pingpong);
    assert!(sout.contains("iters in"), "{sout}");
    assert!(cout.contains("iters in"), "{cout}");
    let procs = data["processes"].as_array().expect("processes");
    for pid in [spid, cpid] {
        assert!(
            procs
                .iter()
                .any(|p| p["pid"] == json!(pid) && p["verdict"] == json!("rdma")),
            "pid {pid}: {procs:#?}"
        );
    }
    assert_eq!(diagnoses(&data), Vec::<Value>::new());
}

#[test]
#[ignore = "lab: needs the Soft-RoCE VM; run through `cargo xtask test`"]
fn lab_a_healthy_qperf_run_and_its_teardown_get_no_diagnosis() {
    in_lab();
    // qperf over RDMA CM (its own GID choice fails on RoCE v2 without it): bandwidth and
    // latency tests, each connected and torn down; the server stays until killed. Its teardowns
    // move QPs to ERR and flush: anomalies, not faults.
    let (data, (spid, cpid, out)) = recorded("lab-qperf", || {
        let server = Command::new("qperf")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("qperf server");
        let spid = server.id();
        let (cpid, out) = client_until_ok(
            "qperf",
            &[
                "-cm1",
                "-t",
                "2",
                "192.0.2.2",
                "rc_bw",
                "rc_lat",
                "rc_rdma_write_bw",
            ],
            |o| o.contains("rc_rdma_write_bw") && o.contains("bw  ="),
        );
        let _ = wait_killing(server, 0);
        (spid, cpid, out)
    });
    assert!(out.contains("latency"), "{out}");
    let procs = data["processes"].as_array().expect("processes");
    let rdma = |p: &&Value| p["verdict"] == json!("rdma") && p["comm"] == json!("qperf");
    assert!(
        procs.iter().any(|p| rdma(&p) && p["pid"] == json!(cpid)),
        "the client {cpid}: {procs:#?}"
    );
    // The server serves each test from a child of its own.
    assert!(
        procs
            .iter()
            .any(|p| rdma(&p) && p["pid"] != json!(cpid) && p["pid"] != json!(spid)),
        "a server child of {spid}: {procs:#?}"
    );
    assert_eq!(diagnoses(&data), Vec::<Value>::new(), "{out}");
}

#[test]
#[ignore = "lab: needs the Soft-RoCE VM; run through `cargo xtask test`"]
fn lab_a_destination_nobody_answers_for_is_unreachable() {
    in_lab();
    // The sender's dest GID is 192.0.2.99's: no host has it, and the kernel's neighbour lookup
    // at RTR (ARP for a RoCE v2 GID) times out.
    let (data, (pid, out, code)) = recorded("lab-unreachable", || {
        mover(&["--mib", "1", "--dest-addr", "192.0.2.99"], &[])
    });
    assert_eq!(code, Some(1), "RTR must fail: {out}");
    assert!(out.contains("modify to RTR: errno 110"), "{out}");
    let (sdev, sqpn) = mover_qp(&out, "sender");
    let diags = diagnoses(&data);
    assert_eq!(diags.len(), 1, "{diags:#?}\n{out}");
    let d = &diags[0];
    assert_eq!(d["kind"], json!("unreachable"), "{d:#}");
    assert_eq!(
        (&d["pid"], &d["dev"], &d["qpn"]),
        (&json!(pid), &json!(sdev), &json!(sqpn)),
        "{d:#}"
    );
    assert!(
        d["cause"].to_string().contains("dest GID 192.0.2.99"),
        "{d:#}"
    );
    assert!(d["evidence"].to_string().contains("ETIMEDOUT"), "{d:#}");
}

#[test]
#[ignore = "lab: needs the Soft-RoCE VM; run through `cargo xtask test`"]
fn lab_a_receive_buffer_shorter_than_the_message_is_the_receivers_local_error() {
    in_lab();
    // SENDs of 64 KiB into receive buffers of 32 KiB: the receiver's completion is a local
    // error; the sender hears of it as a remote operation error (rxe's NAK; a remote
    // invalid request on other drivers), its consequence.
    // (A write from outside the sender's MR would be a local protection error, but rxe on
    // 6.12 reports only the flushes for it.)
    let (data, (pid, out, code)) = recorded("lab-local-error", || {
        mover(&["--mib", "1", "--short-recv"], &[])
    });
    assert_eq!(code, Some(2), "the send must fail: {out}");
    assert!(out.contains("status 11"), "REM_OP_ERR at the sender: {out}");
    let (rdev, rqpn) = mover_qp(&out, "receiver");
    let (sdev, sqpn) = mover_qp(&out, "sender");
    let diags = diagnoses(&data);
    assert_eq!(diags.len(), 1, "{diags:#?}\n{out}");
    let d = &diags[0];
    assert_eq!(d["kind"], json!("local_error"), "{d:#}");
    assert_eq!(
        (&d["pid"], &d["dev"], &d["qpn"]),
        (&json!(pid), &json!(rdev), &json!(rqpn)),
        "{d:#}"
    );
    // rxe reports the short receive as a local QP operation error (LOC_LEN_ERR elsewhere).
    assert!(d["evidence"].to_string().contains("LOC_QP_OP_ERR"), "{d:#}");
    assert!(
        d["consequences"].to_string().contains(&format!(
            "the sending QP {sqpn:#x} on {sdev} of pid {pid} (rt-mover) failed with REM_OP_ERR"
        )),
        "{d:#}"
    );
}

#[test]
#[ignore = "lab: needs the Soft-RoCE VM; run through `cargo xtask test`"]
fn lab_a_registration_over_the_memlock_limit_is_mr_reg_failed_with_the_limit() {
    in_lab();
    // 8 KiB of locked memory and no CAP_IPC_LOCK (root would not be limited): the mover's
    // first buffer larger than two pages cannot be pinned. prlimit and setpriv exec, so the
    // child's pid is the mover's.
    let (data, (pid, out)) = recorded("lab-memlock", || {
        let c = Command::new("prlimit")
            .args([
                "--memlock=8192:8192",
                "setpriv",
                "--bounding-set",
                "-ipc_lock",
            ])
            .arg(workload("rt-mover"))
            .args(["--mib", "1"])
            .args(rxe_chunk_args())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start rt-mover under prlimit");
        (c.id(), wait_killing(c, 60))
    });
    // "ibv_reg_mr of 65536 bytes on rxe0 failed: Cannot allocate memory"
    let failed = out
        .lines()
        .find(|l| l.contains("ibv_reg_mr of"))
        .unwrap_or_else(|| panic!("the registration must fail: {out}"));
    assert!(failed.contains("Cannot allocate memory"), "{failed}");
    let words: Vec<&str> = failed.split_whitespace().collect();
    let at = words.iter().position(|w| *w == "of").expect("of");
    let (size, dev) = (words[at + 1], words[at + 4]);
    let diags = diagnoses(&data);
    assert_eq!(diags.len(), 1, "{diags:#?}\n{out}");
    let d = &diags[0];
    assert_eq!(d["kind"], json!("mr_reg_failed"), "{d:#}");
    assert_eq!(
        (&d["pid"], &d["comm"], &d["dev"]),
        (&json!(pid), &json!("rt-mover"), &json!(dev)),
        "{d:#}"
    );
    let cause = d["cause"].as_str().unwrap_or_default();
    assert!(
        cause.contains("over its locked-memory limit (RLIMIT_MEMLOCK 8.0 KiB)"),
        "{d:#}"
    );
    assert!(
        d["evidence"]
            .to_string()
            .contains(&format!("({size} bytes)")),
        "the evidence names the size the program asked for: {d:#}"
    );
}

#[test]
#[ignore = "lab: needs the Soft-RoCE VM; run through `cargo xtask test`"]
fn lab_a_qp_deeper_than_the_device_allows_is_create_failed_with_the_limit() {
    in_lab();
    let (data, (pid, out, code)) = recorded("lab-create", || {
        mover(&["--mib", "1", "--sq-depth", "4194304"], &[])
    });
    assert_ne!(code, Some(0), "{out}");
    // "ibv_create_qp of depth 4194304 on rxe0 failed: Invalid argument"
    assert!(
        out.contains("ibv_create_qp of depth 4194304 on rxe0 failed"),
        "{out}"
    );
    let diags = diagnoses(&data);
    assert_eq!(diags.len(), 1, "{diags:#?}\n{out}");
    let d = &diags[0];
    assert_eq!(d["kind"], json!("create_failed"), "{d:#}");
    assert_eq!(
        (&d["pid"], &d["comm"], &d["dev"]),
        (&json!(pid), &json!("rt-mover"), &json!("rxe0")),
        "{d:#}"
    );
    // rxe's limit as the kernel has it (ibv_devinfo -v prints the same).
    let devinfo = Command::new("ibv_devinfo")
        .args(["-v", "-d", "rxe0"])
        .output()
        .expect("ibv_devinfo");
    let max_qp_wr = text(&devinfo)
        .lines()
        .find_map(|l| l.trim().strip_prefix("max_qp_wr:"))
        .map(|v| v.trim().to_string())
        .expect("max_qp_wr in ibv_devinfo -v");
    assert!(
        d["cause"].as_str().unwrap_or_default().contains(&format!(
            "max_send_wr 4194304 above rxe0's max_qp_wr {max_qp_wr}"
        )),
        "{d:#}"
    );
}

/// A device limit as `ibv_devinfo -v` prints it (what the kernel's device attrs say).
/// A port-1 hardware counter of `dev`, read from sysfs (0 when absent).
fn hw_counter(dev: &str, name: &str) -> u64 {
    std::fs::read_to_string(format!(
        "/sys/class/infiniband/{dev}/ports/1/hw_counters/{name}"
    ))
    .ok()
    .and_then(|s| s.trim().parse().ok())
    .unwrap_or(0)
}

fn devinfo_limit(dev: &str, name: &str) -> String {
    let devinfo = Command::new("ibv_devinfo")
        .args(["-v", "-d", dev])
        .output()
        .expect("ibv_devinfo");
    text(&devinfo)
        .lines()
        .find_map(|l| l.trim().strip_prefix(&format!("{name}:")))
        .map(|v| v.trim().to_string())
        .unwrap_or_else(|| panic!("no {name} in ibv_devinfo -v -d {dev}"))
}

#[test]
#[ignore = "lab: needs the Soft-RoCE VM; run through `cargo xtask test`"]
fn lab_a_cq_or_srq_larger_than_the_device_allows_is_create_failed_with_the_limit() {
    in_lab();
    for (flag, dev, what, limit) in [
        ("--cq-depth", "rxe0", "entries", "max_cqe"),
        ("--srq-depth", "rxe1", "max_wr", "max_srq_wr"),
    ] {
        let (data, (pid, out, code)) = recorded("lab-create-queue", || {
            mover(&["--mib", "1", flag, "4194304"], &[])
        });
        assert_eq!(code, Some(1), "{out}");
        let diags = diagnoses(&data);
        assert_eq!(diags.len(), 1, "{flag}: {diags:#?}\n{out}");
        let d = &diags[0];
        assert_eq!(d["kind"], json!("create_failed"), "{d:#}");
        assert_eq!(
            (&d["pid"], &d["comm"], &d["dev"]),
            (&json!(pid), &json!("rt-mover"), &json!(dev)),
            "{d:#}"
        );
        let max = devinfo_limit(dev, limit);
        assert!(
            d["cause"]
                .as_str()
                .unwrap_or_default()
                .contains(&format!("{what} 4194304 above {dev}'s {limit} {max}")),
            "{d:#}"
        );
    }
}

#[test]
#[ignore = "lab: needs the Soft-RoCE VM; run through `cargo xtask test`"]
fn lab_a_local_ack_timeout_below_the_round_trip_is_timeout_too_small() {
    in_lab();
    // timeout 1 = 8.2 µs, which rxe rounds up to one jiffy (4 ms at the lab kernels' HZ=250):
    // below the round trip, as rxe1's ACKs are held 5 ms on their way (netem delay on its
    // NIC; the emulated path alone was sometimes faster than a jiffy), so the sender's timer
    // fires while the ACKs are on their way and the receiver gets requests it already has.
    // Nothing is lost. Writes of one packet each: rxe
    // on 6.12 has been seen failing a retransmitted multi-packet write with a remote invalid
    // request error (an error chain, another diagnosis).
    let args = |t| ["--mib", "16", "--timeout", t, "--chunk-kib", "1"];
    // The scenario's premise, by the kernel's own counters (sysfs, not the tracer): the
    // sender's timer fired at least MIN_EXPIRIES times (rxe0's completer_retry_err) and nothing
    // was lost (no out-of-sequence request, no sequence NAK on either device). The timing of
    // the emulated path decides both: a run without them is run again (at most 3 times).
    let loss = || {
        ["rxe0", "rxe1"]
            .iter()
            .map(|d| hw_counter(d, "out_of_seq_request") + hw_counter(d, "rcvd_seq_err"))
            .sum::<u64>()
    };
    let late_acks = Loss::delay("LAB_NIC_B", 5);
    let mut attempt = 0;
    let (data, (pid, out, code), dups) = loop {
        attempt += 1;
        let (loss0, retries0) = (loss(), hw_counter("rxe0", "completer_retry_err"));
        let dups0 = hw_counter("rxe1", "duplicate_request");
        let run = recorded("lab-timeout", || mover(&args("1"), &[]));
        let (lost, retries) = (
            loss() - loss0,
            hw_counter("rxe0", "completer_retry_err") - retries0,
        );
        let dups = hw_counter("rxe1", "duplicate_request") - dups0;
        if lost == 0 && retries >= 3 {
            break (run.0, run.1, dups);
        }
        eprintln!(
            "attempt {attempt}: the premise did not hold (kernel: {lost} lost, {retries} timer \
             retries): run again"
        );
        assert!(attempt < 3, "3 runs and the premise never held");
    };
    drop(late_acks);
    assert_eq!(code, Some(0), "the transfer completes: {out}");
    let (sdev, sqpn) = mover_qp(&out, "sender");
    let diags = diagnoses(&data);
    assert_eq!(diags.len(), 1, "{diags:#?}\n{out}");
    let d = &diags[0];
    assert_eq!(d["kind"], json!("timeout_too_small"), "{d:#}");
    assert_eq!(
        (&d["pid"], &d["dev"], &d["qpn"]),
        (&json!(pid), &json!(sdev), &json!(sqpn)),
        "{d:#}"
    );
    let evidence = d["evidence"].to_string();
    assert!(
        evidence.contains(&format!("QP {sqpn:#x} on {sdev} set timeout 1")),
        "{d:#}"
    );
    // Receiver duplicates are evidence when the kernel counted them.
    assert_eq!(
        evidence.contains("duplicate_request"),
        dups > 0,
        "kernel: {dups} duplicate requests at rxe1: {d:#}"
    );
    // The same program with the common timeout (14, 67 ms) retransmits nothing here: the
    // diagnosis is about the value, not the path.
    let (data, (_, out, code)) = recorded("lab-timeout-14", || mover(&args("14"), &[]));
    assert_eq!(code, Some(0), "{out}");
    assert_eq!(diagnoses(&data), Vec::<Value>::new(), "{out}");
}
