//! Lab tier, QPs: the lifecycle of real QPs as their programs print it, illegal transitions,
//! error completions when the peer dies, the QP table (QPs older than the trace, QPs the driver
//! put in ERR) and a path MTU above the port MTU. Ignored outside the lab VM (`cargo xtask test`
//! runs them there).

mod common;

use std::{
    process::{Command, Stdio},
    thread::sleep,
    time::{Duration, Instant},
};

use common::{lab::*, *};
use serde_json::{json, Value};

fn assert_lifecycle(events: &[Value], side: &str, pid: u32, dev: &str, qpn: u32, peer_qpn: u32) {
    // The verbs lifecycle only (the QP table's `qp_res` rows are checked elsewhere).
    let evs: Vec<&Value> = qp_events(events, pid, dev, qpn)
        .into_iter()
        .filter(|e| {
            e["type"]
                .as_str()
                .is_some_and(|t| t.starts_with("qp_") && t != "qp_res")
        })
        .collect();
    let summary: Vec<String> = evs
        .iter()
        .map(|e| {
            format!(
                "{} {}->{} ret {}",
                e["type"], e["data"]["cur_state"], e["data"]["new_state"], e["data"]["ret"]
            )
        })
        .collect();
    let ctx = format!("{side} pid {pid} {dev} qpn {qpn:#x}: {summary:#?}");
    assert!(!evs.is_empty(), "no events for {ctx}");
    assert_eq!(evs[0]["type"], "qp_create", "{ctx}");
    assert_eq!(evs[0]["data"]["ret"], 0, "{ctx}");
    assert_eq!(evs[0]["data"]["qp_type"], "RC", "{ctx}");
    assert_eq!(evs[0]["data"]["comm"], "ibv_rc_pingpong", "{ctx}");
    let modifies: Vec<&&Value> = evs.iter().filter(|e| e["type"] == "qp_modify").collect();
    let transitions: Vec<(String, String)> = modifies
        .iter()
        .map(|e| {
            (
                e["data"]["cur_state"].as_str().unwrap_or("?").to_string(),
                e["data"]["new_state"].as_str().unwrap_or("?").to_string(),
            )
        })
        .collect();
    let want: Vec<(String, String)> = [("RESET", "INIT"), ("INIT", "RTR"), ("RTR", "RTS")]
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    assert_eq!(transitions, want, "{ctx}");
    assert!(modifies.iter().all(|e| e["data"]["ret"] == 0), "{ctx}");
    let rtr = modifies[1];
    assert_eq!(
        rtr["data"]["dest_qpn"],
        json!(peer_qpn),
        "RTR dest_qpn: {ctx}"
    );
    assert_eq!(
        rtr["data"]["path_mtu"],
        json!(1024),
        "RTR path_mtu (ibv_rc_pingpong default): {ctx}"
    );
    let last = evs.last().expect("non-empty");
    assert_eq!(last["type"], "qp_destroy", "destroy at exit: {ctx}");
    assert_eq!(last["data"]["ret"], 0, "{ctx}");
}

#[test]
#[ignore = "lab: needs the Soft-RoCE VM; run through `cargo xtask test`"]
fn lab_rc_pingpong_lifecycle_matches_program_output() {
    in_lab();
    let all = start(&["trace", "--json"], READY_TIMEOUT);
    let only_rxe1 = start(&["trace", "--json", "--dev", "rxe1"], READY_TIMEOUT);
    let ((spid, sout), (cpid, cout)) = rc_pingpong();
    sleep(Duration::from_millis(500));
    let all = all.stop();
    let only_rxe1 = only_rxe1.stop();
    assert!(all.status.success(), "{}", all.stderr);
    assert!(
        !all.stderr.contains("qp probes off"),
        "QP probes must attach in the lab: {}",
        all.stderr
    );
    let (sqpn, cqpn) = (local_qpn(&sout), local_qpn(&cout));
    let events = all.events();
    assert_lifecycle(&events, "server", spid, "rxe1", sqpn, cqpn);
    assert_lifecycle(&events, "client", cpid, "rxe0", cqpn, sqpn);

    // The device filter keeps the server's QP and nothing of rxe0.
    let filtered = only_rxe1.events();
    assert!(
        filtered.iter().all(|e| e["data"]["dev"] == "rxe1"),
        "--dev rxe1 leaked: {filtered:#?}"
    );
    assert_lifecycle(&filtered, "server (--dev rxe1)", spid, "rxe1", sqpn, cqpn);
}

#[test]
#[ignore = "lab: needs the Soft-RoCE VM; run through `cargo xtask test`"]
fn lab_illegal_transition_reports_negative_errno() {
    in_lab();
    let tracer = start(
        &["trace", "--json", "--comm", "rt-bad-modify"],
        READY_TIMEOUT,
    );
    let out = Command::new(workload("rt-bad-modify"))
        .args(["--dev", "rxe0"])
        .output()
        .expect("run rt-bad-modify");
    let done = tracer.stop();
    let printed = text(&out);
    assert!(out.status.success(), "{printed}");
    // rt-bad-modify: pid P dev D qpn 0xN RESET->RTS errno E
    let words: Vec<&str> = printed.split_whitespace().collect();
    let after = |k: &str| {
        words
            .iter()
            .position(|w| *w == k)
            .map(|i| words[i + 1])
            .unwrap_or_else(|| panic!("no {k} in {printed}"))
    };
    let pid: u32 = after("pid").parse().expect("pid");
    let dev = after("dev");
    let qpn = u32::from_str_radix(after("qpn").trim_start_matches("0x"), 16).expect("qpn");
    let errno: i32 = after("errno").parse().expect("errno");
    assert_eq!(errno, libc::EINVAL, "{printed}");

    let events = done.events();
    let evs = qp_events(&events, pid, dev, qpn);
    let bad: Vec<&&Value> = evs.iter().filter(|e| e["type"] == "qp_modify").collect();
    assert_eq!(bad.len(), 1, "{evs:#?}");
    assert_eq!(bad[0]["data"]["cur_state"], "RESET", "{evs:#?}");
    assert_eq!(bad[0]["data"]["new_state"], "RTS", "{evs:#?}");
    assert_eq!(bad[0]["data"]["ret"], json!(-errno), "{evs:#?}");
    assert_eq!(
        evs.first().map(|e| &e["type"]),
        Some(&json!("qp_create")),
        "{evs:#?}"
    );
    assert_eq!(
        evs.last().map(|e| &e["type"]),
        Some(&json!("qp_destroy")),
        "{evs:#?}"
    );
    // The comm filter kept only this program.
    assert!(
        events
            .iter()
            .all(|e| e["data"]["comm"] == "rt-bad-modify" || e["type"] == "lost"),
        "{events:#?}"
    );
}

#[test]
#[ignore = "lab: needs the Soft-RoCE VM; run through `cargo xtask test`"]
fn lab_dead_peer_error_completions_and_completion_events_match_the_program() {
    in_lab();
    let tracer = start(&["trace", "--json"], READY_TIMEOUT);
    // Waits on a completion channel; the receiving QP is destroyed after 4 MiB, so the
    // sender's writes exhaust their single transport retry.
    let (pid, printed, code) = mover(
        &[
            "--mib",
            "64",
            "--events",
            "--retry-cnt",
            "1",
            "--kill-peer-after-mib",
            "4",
        ],
        &[],
    );
    assert_eq!(
        code,
        Some(2),
        "the program must see an error completion: {printed}"
    );
    let (dev, qpn) = mover_qp(&printed, "sender");
    sleep(Duration::from_millis(2500)); // a sample tick for the notification counts
    let done = tracer.stop();
    let events = done.events();

    // The program prints "wc error status 12 (transport retry counter exceeded) qpn 0x...".
    let status_num: u32 = printed
        .split("wc error status ")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no error status in: {printed}"));
    assert_eq!(status_num, 12, "{printed}");
    let errors = select(
        &events,
        "wc_error",
        &[("dev", json!(dev)), ("qpn", json!(qpn))],
    );
    assert!(
        errors
            .iter()
            .any(|e| e["data"]["status"] == json!("RETRY_EXC_ERR")),
        "program saw status 12 on {dev} {qpn:#x}; tracer: {errors:#?}\n{}",
        done.stderr
    );
    assert!(
        errors.iter().all(|e| e["data"]["owner_pid"] == json!(pid)),
        "{errors:#?}"
    );
    // Completion-channel notifications of the sender's CQ, owned by the program.
    let notified: u64 = select(&events, "cq_event", &[("owner_pid", json!(pid))])
        .iter()
        .map(|e| e["data"]["notifications"].as_u64().unwrap_or(0))
        .sum();
    assert!(notified > 0, "no cq_event for the --events sender");
    // Its MRs: the source buffer for local access only, the target also for remote writes.
    let access: Vec<String> = select(&events, "mr_reg", &[("owner_pid", json!(pid))])
        .iter()
        .map(|e| e["data"]["access"].as_str().unwrap_or("").to_string())
        .collect();
    assert!(
        access.contains(&"LOCAL_WRITE".to_string())
            && access.contains(&"LOCAL_WRITE|REMOTE_WRITE".to_string()),
        "{access:?}"
    );
}

#[test]
#[ignore = "lab: needs the Soft-RoCE VM; run through `cargo xtask test`"]
fn lab_qp_table_names_qps_older_than_the_trace_and_qps_the_driver_put_in_err() {
    in_lab();
    // A: moves its data before the recorder starts, then holds its QPs in RTS.
    let mut old = Command::new(workload("rt-mover"))
        .args(["--mib", "4", "--linger-secs", "300"])
        .args(rxe_chunk_args())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start rt-mover A");
    let old_pid = old.id();
    let mut a_out = String::new();
    {
        use std::io::BufRead as _;
        let mut lines = std::io::BufReader::new(old.stdout.take().expect("stdout")).lines();
        for line in lines.by_ref() {
            let line = line.expect("rt-mover A output");
            a_out += &line;
            a_out += "\n";
            if line.contains("moved") {
                break;
            }
        }
    }
    assert!(a_out.contains("moved"), "A did not finish moving: {a_out}");
    let dir = test_dir("lab-qp-table");
    let file = dir.path().join("qp-table.rdmt");
    let path = file.to_str().expect("utf8");
    let recorder = start(&["record", "-o", path], READY_TIMEOUT);
    // B: its peer QP dies, its single retry runs out, rxe moves its QP to ERR (no modify from
    // the program); it keeps the broken QP a few seconds, as a hung job would.
    let (b_pid, b_out, code) = mover(
        &[
            "--mib",
            "64",
            "--retry-cnt",
            "1",
            "--kill-peer-after-mib",
            "4",
            "--linger-secs",
            "3",
        ],
        &[],
    );
    assert_eq!(code, Some(2), "B must see an error completion: {b_out}");
    sleep(Duration::from_millis(1500));
    let rec = recorder.stop();
    let _ = old.kill();
    let _ = old.wait();
    assert!(rec.status.success(), "{}", rec.stderr);

    let replay = run(&["trace", "--input", path, "--json"]);
    assert!(replay.status.success(), "{}", replay.stderr);
    let events = replay.events();
    // A's QPs, as the program printed them, with its PID, RTS and each other as remote QPN.
    let (sdev, sqpn) = mover_qp(&a_out, "sender");
    let (rdev, rqpn) = mover_qp(&a_out, "receiver");
    for (dev, qpn, peer) in [(&sdev, sqpn, rqpn), (&rdev, rqpn, sqpn)] {
        let rows = select(
            &events,
            "qp_res",
            &[
                ("dev", json!(dev)),
                ("qpn", json!(qpn)),
                ("pid", json!(old_pid)),
            ],
        );
        let present = rows
            .iter()
            .find(|e| e["data"]["change"] == json!("present"))
            .unwrap_or_else(|| panic!("no present row for A's {dev} {qpn:#x}: {rows:#?}"));
        assert_eq!(present["data"]["state"], json!("RTS"), "{present}");
        assert_eq!(present["data"]["rqpn"], json!(peer), "{present}");
        assert_eq!(present["data"]["comm"], json!("rt-mover"), "{present}");
    }
    // B's sender went to ERR without a modify from B: only the QP table can tell.
    let (bdev, bqpn) = mover_qp(&b_out, "sender");
    let to_err = select(
        &events,
        "qp_res",
        &[
            ("dev", json!(bdev)),
            ("qpn", json!(bqpn)),
            ("state", json!("ERR")),
        ],
    );
    assert!(
        to_err.iter().any(|e| e["data"]["pid"] == json!(b_pid)),
        "no ERR row for B's sender {bdev} {bqpn:#x}: {to_err:#?}"
    );
    let modified_to_err = select(
        &events,
        "qp_modify",
        &[
            ("dev", json!(bdev)),
            ("qpn", json!(bqpn)),
            ("new_state", json!("ERR")),
        ],
    );
    assert!(modified_to_err.is_empty(), "{modified_to_err:#?}");

    let report = run(&["report", path, "--json"]);
    assert!(report.status.success(), "{}", report.stderr);
    let r: Value = serde_json::from_str(report.stdout.trim()).expect("report JSON");
    let qps = r["data"]["qps"].as_array().expect("qps");
    assert!(
        qps.iter().any(|q| q["owner_pid"] == json!(old_pid)
            && q["qpn"] == json!(sqpn)
            && q["state"] == json!("RTS")),
        "A's QP (older than the recording) is in the QP table: {qps:#?}"
    );
    let anomalies = r["data"]["anomalies"].as_array().expect("anomalies");
    let err = anomalies
        .iter()
        .find(|a| a["kind"] == json!("qp_err") && a["qpn"] == json!(bqpn))
        .unwrap_or_else(|| panic!("no qp_err anomaly for B: {anomalies:#?}"));
    assert_eq!(err["pid"], json!(b_pid), "{err}");
    let detail = err["detail"].as_str().unwrap_or_default();
    assert!(
        detail.contains("by the driver") && detail.contains("RETRY_EXC_ERR"),
        "{detail}"
    );
    // One diagnosis: B's sender, whose peer QP went away first; A's healthy QPs get none.
    let diags = r["data"]["diagnoses"].as_array().expect("diagnoses");
    assert_eq!(diags.len(), 1, "{diags:#?}");
    let d = &diags[0];
    assert_eq!(d["kind"], json!("peer_gone"), "{d:#}");
    assert_eq!(d["pid"], json!(b_pid), "{d:#}");
    assert_eq!(d["qpn"], json!(bqpn), "{d:#}");
    let (_, b_rqpn) = mover_qp(&b_out, "receiver");
    let evidence = d["evidence"].to_string();
    assert!(
        evidence.contains(&format!("QP {b_rqpn:#x}")) && evidence.contains("destroyed"),
        "the evidence names the destroyed peer QP: {d:#}"
    );
}

#[test]
#[ignore = "lab: needs the Soft-RoCE VM; run through `cargo xtask test`"]
fn lab_remote_access_error_is_diagnosed_on_the_writing_qp() {
    in_lab();
    let dir = test_dir("lab-remote-access");
    let file = dir.path().join("remote-access.rdmt");
    let path = file.to_str().expect("utf8");
    let recorder = start(&["record", "-o", path], READY_TIMEOUT);
    // The receiving buffer is registered without remote write: the first write is refused.
    let (pid, out, code) = mover(&["--mib", "4", "--no-remote-write"], &[]);
    sleep(Duration::from_millis(1500));
    let rec = recorder.stop();
    assert!(rec.status.success(), "{}", rec.stderr);
    assert_eq!(code, Some(2), "the write must fail: {out}");
    assert!(out.contains("remote access error"), "{out}");
    let (sdev, sqpn) = mover_qp(&out, "sender");
    let report = run(&["report", path, "--json"]);
    assert!(report.status.success(), "{}", report.stderr);
    let r: Value = serde_json::from_str(report.stdout.trim()).expect("report JSON");
    let diags = r["data"]["diagnoses"].as_array().expect("diagnoses");
    assert_eq!(diags.len(), 1, "{diags:#?}");
    let d = &diags[0];
    assert_eq!(d["kind"], json!("remote_access"), "{d:#}");
    assert_eq!(d["pid"], json!(pid), "{d:#}");
    assert_eq!(d["dev"], json!(sdev), "{d:#}");
    assert_eq!(d["qpn"], json!(sqpn), "{d:#}");
    assert!(
        d["evidence"].to_string().contains("REM_ACCESS_ERR"),
        "{d:#}"
    );
    // The target MR (the receiver's, same process) was registered without remote access.
    let (rdev, _) = mover_qp(&out, "receiver");
    assert!(
        d["cause"].to_string().contains(&format!(
            "pid {pid} (rt-mover) registered its MRs on {rdev} without remote access"
        )),
        "{d:#}"
    );
    assert!(
        d["evidence"].to_string().contains("access LOCAL_WRITE\""),
        "{d:#}"
    );
}

#[test]
#[ignore = "lab: needs the Soft-RoCE VM; run through `cargo xtask test`"]
fn lab_path_mtu_above_the_port_mtu_is_named_as_the_cause() {
    in_lab();
    let dir = test_dir("lab-mtu");
    let file = dir.path().join("mtu.rdmt");
    let path = file.to_str().expect("utf8");
    let recorder = start(&["record", "-o", path], READY_TIMEOUT);
    // The lab's netdevs have MTU 1500, so rxe's active MTU is 1024. rxe accepts a 4096 path
    // MTU at RTR and then drops the large packets: the exchange fails (or the server waits
    // forever, hence the timeouts).
    let server = Command::new("timeout")
        .args([
            "40",
            "ibv_rc_pingpong",
            "-d",
            "rxe1",
            "-g",
            "1",
            "-m",
            "4096",
            "-n",
            "5",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start ibv_rc_pingpong server");
    let deadline = Instant::now() + Duration::from_secs(30);
    let client_out = loop {
        // Line-buffered: where the exchange hangs (6.1's rxe) the client is killed by the
        // timeout, and its QPN line must not die in a stdio buffer.
        let o = Command::new("timeout")
            .args([
                "30",
                "stdbuf",
                "-oL",
                "ibv_rc_pingpong",
                "-d",
                "rxe0",
                "-g",
                "1",
                "-m",
                "4096",
                "-n",
                "5",
                "192.0.2.2",
            ])
            .output()
            .expect("run ibv_rc_pingpong client");
        let t = text(&o);
        if !t.contains("Couldn't connect") || Instant::now() > deadline {
            break t;
        }
        sleep(Duration::from_millis(300));
    };
    let server_out = server.wait_with_output().expect("server output");
    let client_qpn = local_qpn(&client_out);
    sleep(Duration::from_millis(1200));
    let rec = recorder.stop();
    assert!(rec.status.success(), "{}", rec.stderr);
    let report = run(&["report", path, "--json"]);
    assert!(report.status.success(), "{}", report.stderr);
    let r: Value = serde_json::from_str(report.stdout.trim()).expect("report JSON");
    let anomalies = r["data"]["anomalies"].as_array().expect("anomalies");
    let client = anomalies
        .iter()
        .find(|a| {
            a["kind"] == json!("path_mtu")
                && a["dev"] == json!("rxe0")
                && a["qpn"] == json!(client_qpn)
        })
        .unwrap_or_else(|| {
            panic!(
                "no path_mtu anomaly for the client's QP {client_qpn:#x} (client: {client_out}, \
                 server: {}): {anomalies:#?}",
                text(&server_out)
            )
        });
    let detail = client["detail"].as_str().unwrap_or_default();
    assert!(
        detail.contains("path MTU 4096 above the active MTU of rxe0 port 1 (1024, from netdev"),
        "{detail}"
    );
    assert_eq!(client["dev"], json!("rxe0"), "{client}");
}

#[test]
#[ignore = "lab: needs the Soft-RoCE VM; run through `cargo xtask test`"]
fn lab_a_cq_overflow_is_diagnosed_on_the_cq_owner_not_a_kernel_worker() {
    in_lab();
    let dir = test_dir("lab-cq-overrun");
    let file = dir.path().join("cq-overrun.rdmt");
    let path = file.to_str().expect("utf8");
    let recorder = start(&["record", "-o", path], READY_TIMEOUT);
    // A CQ of one entry, 16 signaled writes, never polled.
    let (pid, out, code) = mover(&["--mib", "1", "--overflow-cq"], &[]);
    sleep(Duration::from_millis(1500));
    let rec = recorder.stop();
    assert!(rec.status.success(), "{}", rec.stderr);
    assert_eq!(code, Some(3), "{out}");
    let report = run(&["report", path, "--json"]);
    assert!(report.status.success(), "{}", report.stderr);
    let r: Value = serde_json::from_str(report.stdout.trim()).expect("report JSON");
    let diags = r["data"]["diagnoses"].as_array().expect("diagnoses");
    let d = diags
        .iter()
        .find(|d| d["kind"] == json!("cq_overrun"))
        .unwrap_or_else(|| panic!("no cq_overrun: {diags:#?}\n{out}"));
    assert_eq!(d["pid"], json!(pid), "{d:#}");
    assert_eq!(d["comm"], json!("rt-mover"), "{d:#}");
    let (sdev, _) = mover_qp(&out, "sender");
    assert_eq!(d["dev"], json!(sdev), "{d:#}");
}
