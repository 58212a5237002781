//! Lab tier, verdicts: RDMA, TCP fallback and plain TCP told apart live (`verdict`) and after
//! the fact (`report` of a recording of the same minutes). Ignored outside the lab VM
//! (`cargo xtask test` runs it there).

mod common;

use std::{
    process::{Command, Stdio},
    thread::sleep,
    time::Duration,
};

use common::{lab::*, *};
use serde_json::{json, Value};

fn verdicts(events: &[Value]) -> std::collections::HashMap<u64, (String, Value)> {
    events
        .iter()
        .filter(|e| e["type"] == "verdict")
        .map(|e| {
            (
                e["data"]["pid"].as_u64().unwrap_or(0),
                (
                    e["data"]["verdict"].as_str().unwrap_or("").to_string(),
                    e["data"]["evidence"].clone(),
                ),
            )
        })
        .collect()
}

#[test]
#[ignore = "lab: needs the Soft-RoCE VM; run through `cargo xtask test`"]
fn lab_verdicts_tell_rdma_from_tcp_fallback_and_plain_tcp() {
    in_lab();
    let dir = test_dir("lab-verdicts");
    let rec_file = dir.path().join("verdicts.rdmt");
    let recorder = start(
        &["record", "-o", rec_file.to_str().expect("utf8")],
        READY_TIMEOUT,
    );
    // Wait for the watcher's ready line: under TCG attaching takes 12-20 s, and a workload run
    // before it is attached gets no samples (an `idle` verdict).
    let watcher = start(&["verdict", "--json"], READY_TIMEOUT);

    // 1. RDMA: ib_write_bw, 64 KiB x 200 over RC, with perftest's small TCP control channel.
    let args = ["-x", "1", "-F", "-s", "65536", "-n", "200"];
    let server = Command::new("ib_write_bw")
        .args(["-d", "rxe1"])
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("server");
    let spid = server.id();
    let (cpid, _) = client_until_ok(
        "ib_write_bw",
        &[&["-d", "rxe0"][..], &args[..], &["192.0.2.2"]].concat(),
        |_| true,
    );
    let _ = server.wait_with_output();

    // 2. TCP fallback: opens rxe0, creates a QP, moves 8 MiB over TCP on the wire.
    let fb = Command::new(workload("rt-fallback"))
        .args([
            "--dev",
            "rxe0",
            "--from",
            "192.0.2.1",
            "--to",
            "192.0.2.2",
            "--mib",
            "8",
        ])
        .output()
        .expect("rt-fallback");
    let printed = text(&fb);
    assert!(fb.status.success(), "{printed}");
    let fb_pid = u64::from(printed_pid(&printed));

    // 2b. Our own mover, once over RC and once switched to TCP by its environment variable
    // (how NCCL_IB_DISABLE / UCX_TLS change a job's transport without touching its code).
    let (mv_rdma, out, code) = mover(&["--mib", "16"], &[]);
    assert_eq!(code, Some(0), "{out}");
    let (mv_tcp, out, code) = mover(&["--mib", "16"], &[("RT_TRANSPORT", "tcp")]);
    assert_eq!(code, Some(0), "{out}");

    // 3. Plain TCP: 4 MiB, never touches RDMA.
    let tcp = Command::new("python3")
        .args(["-c", "import socket,threading\ns=socket.socket()\ns.bind(('127.0.0.1',0))\ns.listen()\np=s.getsockname()[1]\ndef srv():\n c,_=s.accept()\n while c.recv(65536): pass\nt=threading.Thread(target=srv)\nt.start()\nk=socket.create_connection(('127.0.0.1',p))\nk.sendall(b'x'*4194304)\nk.close()\nt.join()"])
        .spawn()
        .expect("python3");
    let tcp_pid = u64::from(tcp.id());
    assert!(tcp.wait_with_output().expect("python3").status.success());
    sleep(Duration::from_millis(2500)); // a sample tick

    let out = watcher.stop();
    assert_eq!(
        out.status.code(),
        Some(3),
        "exit 3 = a process fell back to TCP; stderr: {}",
        out.stderr
    );
    let lines: Vec<Value> = out
        .stdout
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let v = verdicts(&lines);
    let get = |pid: u64| {
        v.get(&pid)
            .cloned()
            .unwrap_or_else(|| panic!("no verdict for {pid}: {v:#?}"))
    };
    assert_eq!(
        get(u64::from(cpid)).0,
        "rdma",
        "ib_write_bw client: {:?}",
        get(u64::from(cpid)).1
    );
    assert_eq!(
        get(u64::from(spid)).0,
        "rdma",
        "ib_write_bw server: {:?}",
        get(u64::from(spid)).1
    );
    let (fb_verdict, fb_evidence) = get(fb_pid);
    assert_eq!(fb_verdict, "tcp_fallback", "{fb_evidence}");
    assert!(
        fb_evidence.to_string().contains("8.0 MiB sent"),
        "{fb_evidence}"
    );
    assert_eq!(get(tcp_pid).0, "tcp", "{:?}", get(tcp_pid).1);
    let (verdict, evidence) = get(u64::from(mv_rdma));
    assert_eq!(verdict, "rdma", "rt-mover over RC: {evidence}");
    // 16 MiB of payload, plus headers and any retransmission.
    let sent: f64 = evidence
        .to_string()
        .split(" MiB sent")
        .next()
        .and_then(|s| s.rsplit(['"', ' ']).next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no MiB sent in {evidence}"));
    assert!((16.0..20.0).contains(&sent), "{evidence}");
    let (verdict, evidence) = get(u64::from(mv_tcp));
    assert_eq!(
        verdict, "tcp_fallback",
        "rt-mover RT_TRANSPORT=tcp: {evidence}"
    );

    // The post-mortem of a recording of the same minutes agrees, without privileges needed.
    let _ = recorder.stop();
    let report = run(&["report", rec_file.to_str().expect("utf8"), "--json"]);
    assert!(report.status.success(), "{}", report.stderr);
    let r: Value = serde_json::from_str(report.stdout.trim()).expect("report json");
    let procs = r["data"]["processes"].as_array().expect("processes");
    let verdict_of = |pid: u64| {
        procs
            .iter()
            .find(|p| p["pid"] == json!(pid))
            .map(|p| p["verdict"].clone())
    };
    assert_eq!(verdict_of(fb_pid), Some(json!("tcp_fallback")));
    assert_eq!(verdict_of(u64::from(cpid)), Some(json!("rdma")));
    assert_eq!(verdict_of(tcp_pid), Some(json!("tcp")));
    assert_eq!(verdict_of(u64::from(mv_rdma)), Some(json!("rdma")));
    assert_eq!(verdict_of(u64::from(mv_tcp)), Some(json!("tcp_fallback")));
    // Healthy programs: no diagnosis.
    assert_eq!(
        r["data"]["diagnoses"],
        json!([]),
        "{:#}",
        r["data"]["diagnoses"]
    );
}

#[test]
#[ignore = "lab: needs the Soft-RoCE VM; run through `cargo xtask test`"]
fn lab_a_transport_variable_that_turns_rdma_off_is_named_and_no_other_variable_is_kept() {
    in_lab();
    let dir = test_dir("lab-transport-env");
    let file = dir.path().join("env.rdmt");
    let path = file.to_str().expect("utf8");
    let recorder = start(&["record", "-o", path], READY_TIMEOUT);
    // Opens both devices and creates its QPs, then moves its data over TCP (RT_TRANSPORT is
    // the workload's own switch); NCCL_IB_DISABLE=1 is in its environment, as in a job that
    // was told not to use RDMA. A secret beside it must not be read into the recording.
    let secret = "rdmatrace-lab-secret-4711";
    // It lives on for a while after its transfer, as a job does: a process gone before the
    // tracer reads its first record has no variables to read.
    let (fb_pid, fb_out, code) = mover(
        &["--mib", "8", "--linger-secs", "3"],
        &[
            ("RT_TRANSPORT", "tcp"),
            ("NCCL_IB_DISABLE", "1"),
            ("RT_PRIVATE_TOKEN", secret),
        ],
    );
    assert_eq!(code, Some(0), "{fb_out}");
    // A healthy RDMA job naming its device: a transport variable that disables nothing.
    let (ok_pid, ok_out, code) = mover(&["--mib", "8"], &[("NCCL_IB_HCA", "rxe0")]);
    assert_eq!(code, Some(0), "{ok_out}");
    sleep(Duration::from_millis(2500));
    let rec = recorder.stop();
    assert!(rec.status.success(), "{}", rec.stderr);

    let report = run(&["report", path, "--json"]);
    assert!(report.status.success(), "{}", report.stderr);
    let r: Value = serde_json::from_str(report.stdout.trim()).expect("report JSON");
    let procs = r["data"]["processes"].as_array().expect("processes");
    let proc_of = |pid: u32| {
        procs
            .iter()
            .find(|p| p["pid"] == json!(pid))
            .unwrap_or_else(|| panic!("{pid} not in {procs:#?}"))
    };
    assert_eq!(proc_of(fb_pid)["verdict"], json!("tcp_fallback"));
    let first_records = |pid: u32| {
        let t = run(&["trace", "--input", path, "--json"]);
        t.stdout
            .lines()
            .filter(|l| l.contains(&format!("\"pid\":{pid},")))
            .take(4)
            .map(|l| l.chars().take(200).collect::<String>())
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert_eq!(
        proc_of(fb_pid)["transport_env"],
        json!({"NCCL_IB_DISABLE": "1"}),
        "{:#}\nits first records:\n{}",
        proc_of(fb_pid),
        first_records(fb_pid)
    );
    assert_eq!(proc_of(ok_pid)["verdict"], json!("rdma"));
    assert_eq!(
        proc_of(ok_pid)["transport_env"],
        json!({"NCCL_IB_HCA": "rxe0"})
    );
    let diags = r["data"]["diagnoses"].as_array().expect("diagnoses");
    assert_eq!(diags.len(), 1, "{diags:#?}");
    assert_eq!(diags[0]["kind"], json!("transport_disabled_by_env"));
    assert_eq!(diags[0]["pid"], json!(fb_pid));
    assert!(
        diags[0]["cause"]
            .as_str()
            .unwrap_or("")
            .contains("NCCL_IB_DISABLE=1"),
        "{:#}",
        diags[0]
    );

    // The recording holds allowlisted names only, and never the secret.
    let recording = rdmatrace::recording::reader::Recording::open(&file).expect("open");
    let mut names = Vec::new();
    let mut leaked = false;
    recording.replay(|e| match e {
        rdmatrace::recording::Entry::Env { name, value, .. } => {
            names.push(name.to_string());
            leaked |= value.contains(secret);
        }
        rdmatrace::recording::Entry::Event(b) => {
            leaked |= b.windows(secret.len()).any(|w| w == secret.as_bytes());
        }
        _ => {}
    });
    assert!(!leaked, "the secret reached the recording");
    assert!(
        names.iter().all(|n| rdmatrace::environ::allowed(n)),
        "{names:?}"
    );
    assert!(names.iter().any(|n| n == "NCCL_IB_DISABLE"), "{names:?}");
}

#[test]
#[ignore = "lab: needs the Soft-RoCE VM; run through `cargo xtask test`"]
fn lab_tcp_beside_an_rdma_job_is_side_traffic_unless_it_goes_to_the_qps_peers() {
    in_lab();
    let dir = test_dir("lab-side-tcp");
    let file = dir.path().join("side.rdmt");
    let path = file.to_str().expect("utf8");
    let recorder = start(&["record", "-o", path], READY_TIMEOUT);
    // 16 MiB over RDMA (rxe0 -> rxe1, peers 192.0.2.1/2) and 24 MiB over TCP at once: once to
    // another address (a checkpoint upload), once to the QPs' peer address.
    let side_args = |to: &'static str| ["--mib", "16", "--side-tcp-mib", "24", "--side-tcp-to", to];
    let (side_pid, side_out, code) = mover(&side_args("127.0.0.1"), &[]);
    assert_eq!(code, Some(0), "{side_out}");
    let (path_pid, path_out, code) = mover(&side_args("192.0.2.2"), &[]);
    assert_eq!(code, Some(0), "{path_out}");
    sleep(Duration::from_millis(2500)); // a sample tick
    let rec = recorder.stop();
    assert!(rec.status.success(), "{}", rec.stderr);
    let report = run(&["report", path, "--json"]);
    assert!(report.status.success(), "{}", report.stderr);
    let r: Value = serde_json::from_str(report.stdout.trim()).expect("report JSON");
    let procs = r["data"]["processes"].as_array().expect("processes");
    let proc_of = |pid: u32| {
        procs
            .iter()
            .find(|p| p["pid"] == json!(pid))
            .unwrap_or_else(|| panic!("{pid} not in {procs:#?}"))
    };
    let side = proc_of(side_pid);
    assert_eq!(side["verdict"], json!("rdma"), "{side:#}");
    // Sent and received by the same process: both ways count.
    assert!(
        side["tcp_side_bytes"].as_u64().unwrap_or(0) >= 48 << 20,
        "{side:#}"
    );
    assert!(
        side["evidence"]
            .to_string()
            .contains("to other peers than its QPs' (127.0.0.1)"),
        "{side:#}"
    );
    let on_path = proc_of(path_pid);
    assert_eq!(on_path["verdict"], json!("mixed"), "{on_path:#}");
    assert_eq!(on_path["tcp_side_bytes"], json!(0), "{on_path:#}");
}

#[test]
#[ignore = "lab: needs the Soft-RoCE VM; run through `cargo xtask test`"]
fn lab_without_rxe_traffic_probes_verdicts_come_from_port_counters_marked_estimated() {
    in_lab();
    // `--no-probe rxe` stands in for hardware: the driver's data path is not seen, so no
    // per-QP traffic; the port counters (rxe's sent_pkts/rcvd_pkts) are shared among the
    // processes with connected QPs.
    let dir = test_dir("lab-no-probe-rxe");
    let file = dir.path().join("estimated.rdmt");
    let path = file.to_str().expect("utf8");
    let recorder = start(&["record", "-o", path, "--no-probe", "rxe"], READY_TIMEOUT);
    let watcher = start(&["verdict", "--json", "--no-probe", "rxe"], READY_TIMEOUT);

    // 1. 16 MiB over RC.
    let (rdma_pid, out, code) = mover(&["--mib", "16"], &[]);
    assert_eq!(code, Some(0), "{out}");
    // Scenarios apart by more than a sample interval, so none shares another's packets.
    sleep(Duration::from_secs(4));
    // 2. QPs connected (RTR/RTS), and then 8 MiB over TCP to the QPs' peer address, nothing
    // over RDMA: zero packets on the port says it fell back (without the counters it would
    // be `mixed`, RDMA bytes unknown).
    let (fb_pid, out, code) = mover(
        &[
            "--mib",
            "0",
            "--side-tcp-mib",
            "8",
            "--side-tcp-to",
            "192.0.2.2",
        ],
        &[],
    );
    assert_eq!(code, Some(0), "{out}");
    sleep(Duration::from_secs(4));
    // 3. perftest, a program of its own, on both devices.
    let args = ["-x", "1", "-F", "-s", "65536", "-n", "200"];
    let server = Command::new("ib_write_bw")
        .args(["-d", "rxe1"])
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("server");
    let spid = server.id();
    let (cpid, _) = client_until_ok(
        "ib_write_bw",
        &[&["-d", "rxe0"][..], &args[..], &["192.0.2.2"]].concat(),
        |_| true,
    );
    let _ = server.wait_with_output();
    sleep(Duration::from_millis(2500)); // a sample tick

    let out = watcher.stop();
    assert!(
        out.stderr.contains("switched off (--no-probe)"),
        "the probes switched off are announced: {}",
        out.stderr
    );
    let lines: Vec<Value> = out
        .stdout
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let live = verdicts(&lines);
    let rec = recorder.stop();
    assert!(rec.status.success(), "{}", rec.stderr);
    let report = run(&["report", path, "--json"]);
    assert!(report.status.success(), "{}", report.stderr);
    let r: Value = serde_json::from_str(report.stdout.trim()).expect("report JSON");
    let procs = r["data"]["processes"].as_array().expect("processes");
    let proc_of = |pid: u32| {
        procs
            .iter()
            .find(|p| p["pid"] == json!(pid))
            .unwrap_or_else(|| panic!("{pid} not in {procs:#?}"))
    };
    for (pid, want, who) in [
        (rdma_pid, "rdma", "rt-mover 16 MiB"),
        (
            fb_pid,
            "tcp_fallback",
            "rt-mover over TCP with connected QPs",
        ),
        (cpid, "rdma", "ib_write_bw client"),
        (spid, "rdma", "ib_write_bw server"),
    ] {
        let p = proc_of(pid);
        assert_eq!(p["verdict"], json!(want), "{who}: {p:#}");
        let (live_verdict, live_evidence) = live
            .get(&u64::from(pid))
            .cloned()
            .unwrap_or_else(|| panic!("no live verdict for {who}: {live:#?}"));
        assert_eq!(live_verdict, want, "{who} live: {live_evidence}");
        // No per-QP traffic source: the bytes are the port's, marked as estimated.
        assert_eq!(p["rdma_tx_bytes"], json!(0), "{who}: {p:#}");
        let est = &p["rdma_estimated"];
        assert_eq!(est["from_packets"], json!(true), "{who}: {p:#}");
        let packets =
            est["tx_packets"].as_u64().unwrap_or(0) + est["rx_packets"].as_u64().unwrap_or(0);
        if want == "rdma" {
            assert!(
                p["evidence"]
                    .to_string()
                    .contains("estimated: the port's packet counters"),
                "{who}: {p:#}"
            );
        } else {
            assert_eq!(packets, 0, "{who}: {p:#}");
        }
    }
    // 16 MiB in 1024-byte packets (rxe's active MTU on a 1500-byte link), both sides' QPs in
    // one process.
    let mv = &proc_of(rdma_pid)["rdma_estimated"];
    assert!(mv["tx_packets"].as_u64().unwrap_or(0) >= 16 << 10, "{mv:#}");
    // The ib_write_bw client sent 200 x 64 KiB from rxe0; its server received them on rxe1.
    let client = &proc_of(cpid)["rdma_estimated"];
    assert!(
        client["tx_packets"].as_u64().unwrap_or(0) >= 200 * 64,
        "{client:#}"
    );
    let server = &proc_of(spid)["rdma_estimated"];
    assert!(
        server["rx_packets"].as_u64().unwrap_or(0) >= 200 * 64,
        "{server:#}"
    );
    assert_eq!(
        r["data"]["diagnoses"],
        json!([]),
        "{:#}",
        r["data"]["diagnoses"]
    );
}
