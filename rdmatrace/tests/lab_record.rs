//! Lab tier, recording and its readers on real traffic: a recorder killed with SIGKILL, `top`
//! while a workload moves data, and the verbs and CPU flamegraphs of a recorded workload. Ignored
//! outside the lab VM (`cargo xtask test` runs them there).

mod common;

use std::{thread::sleep, time::Duration};

use common::{lab::*, *};
use serde_json::json;

#[test]
#[ignore = "lab: needs the Soft-RoCE VM; run through `cargo xtask test`"]
fn lab_recorder_killed_with_sigkill_leaves_a_replayable_file() {
    in_lab();
    let dir = test_dir("lab-killed");
    let file = dir.path().join("killed.rdmt");
    let path = file.to_str().expect("utf8");
    let recorder = start(&["record", "-o", path], READY_TIMEOUT);
    let ((spid, sout), _) = rc_pingpong();
    sleep(Duration::from_secs(3)); // chunks are flushed at least once a second
    let _ = recorder.kill9();
    let meta = std::fs::metadata(&file).expect("recording exists");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    let replay = run(&["trace", "--input", path, "--json"]);
    assert!(replay.status.success(), "{}", replay.stderr);
    let events = replay.events();
    let sqpn = local_qpn(&sout);
    let created = select(
        &events,
        "qp_create",
        &[
            ("dev", json!("rxe1")),
            ("qpn", json!(sqpn)),
            ("pid", json!(spid)),
        ],
    );
    assert_eq!(
        created.len(),
        1,
        "server QP in the replay: {}",
        replay.stderr
    );
}

#[test]
#[ignore = "lab: needs the Soft-RoCE VM; run through `cargo xtask test`"]
fn lab_top_shows_the_moving_process_and_its_qps_with_rates() {
    in_lab();
    let top = start(&["top", "--batch", "--delay", "1"], READY_TIMEOUT);
    let (pid, out, code) = mover(&["--mib", "48", "--linger-secs", "3"], &[]);
    assert_eq!(code, Some(0), "{out}");
    let done = top.stop();
    let (sdev, sqpn) = mover_qp(&out, "sender");
    let frames: Vec<&str> = done.stdout.split("rdmatrace top - ").skip(1).collect();
    assert!(
        frames.len() >= 2,
        "frames: {}\n{}",
        frames.len(),
        done.stderr
    );
    let qp_row = format!("{sdev:<8} {sqpn:#08x} RC  RTS");
    // A frame while it moved: its process row says rdma, its sender QP is RTS and sends.
    let busy = frames.iter().find(|f| {
        f.lines()
            .any(|l| l.starts_with(&format!("{pid:<7} rt-mover")) && l.contains("rdma"))
            && f.lines()
                .any(|l| l.contains(&qp_row) && !l.contains("tx        0 B/s"))
    });
    assert!(
        busy.is_some(),
        "no frame shows {pid} moving on {qp_row}:\n{}",
        done.stdout
    );
}

/// Folded lines `stack count` of `flamegraph FILE --kind KIND --folded`.
fn folded(file: &str, kind: &str) -> Vec<(Vec<String>, u64)> {
    let out = run(&["flamegraph", file, "--kind", kind, "--folded", "-o", "-"]);
    assert!(out.status.success(), "{}", out.stderr);
    out.stdout
        .lines()
        .map(|l| {
            let (stack, n) = l.rsplit_once(' ').expect("stack count");
            (
                stack.split(';').map(String::from).collect(),
                n.parse().expect("count"),
            )
        })
        .collect()
}

#[test]
#[ignore = "lab: needs the Soft-RoCE VM; run through `cargo xtask test`"]
fn lab_verbs_flamegraph_names_the_workload_code_that_creates_and_modifies_qps() {
    in_lab();
    let dir = test_dir("lab-verbs");
    let file = dir.path().join("verbs.rdmt");
    let path = file.to_str().expect("utf8");
    let mover = workload("rt-mover");
    let rec = run(&[
        "record",
        "--cpu-profile",
        "-o",
        path,
        "--",
        mover.to_str().expect("utf8"),
        "--mib",
        "2",
        // Frames are named from a live process's maps (README): the mover lives on a second
        // after its transfer, as a job does, so a tracer that lags behind under emulation
        // still finds it.
        "--linger-secs",
        "1",
    ]);
    assert!(
        rec.status.success(),
        "record -- rt-mover: {:?}\n{}{}",
        rec.status,
        rec.stdout,
        rec.stderr
    );
    // rt-mover prints its pid and the two QPs it created (sender and receiver).
    let pid: u32 = rec
        .stdout
        .split("pid ")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no pid in {}", rec.stdout));
    let me = format!("rt-mover [{pid}]");
    let stacks = folded(path, "verbs");
    let calls = |func: &str| -> Vec<&(Vec<String>, u64)> {
        stacks
            .iter()
            .filter(|(s, _)| s[0] == me && s.last().map(String::as_str) == Some(func))
            .collect()
    };
    let creates = calls("ibv_create_qp");
    assert_eq!(
        creates.iter().map(|(_, n)| n).sum::<u64>(),
        2,
        "rt-mover creates a sender and a receiver QP: {stacks:#?}"
    );
    // The frame right above the call is the workload's own function (its return address is
    // taken at the probe, so it is there even without frame pointers).
    for (s, _) in &creates {
        assert_eq!(
            s[s.len() - 2],
            "rdmatrace_workloads::Verbs::create_rc_qp_with",
            "{s:?}"
        );
    }
    // INIT, RTR and RTS for each QP, each from the workload's own QP code.
    let modifies = calls("ibv_modify_qp");
    assert_eq!(
        modifies.iter().map(|(_, n)| n).sum::<u64>(),
        6,
        "{stacks:#?}"
    );
    for (s, _) in &modifies {
        let caller = s[s.len() - 2].as_str();
        assert!(
            caller.starts_with("rdmatrace_workloads::Qp::"),
            "modify from {caller}: {s:?}"
        );
    }
    let mrs: u64 = calls("ibv_reg_mr").iter().map(|(_, n)| n).sum();
    assert_eq!(mrs, 2, "source and target buffers: {stacks:#?}");
    // The kernel saw as many QPs created by that process.
    let replay = run(&["trace", "--input", path, "--json"]);
    let kernel_creates = select(&replay.events(), "qp_create", &[("pid", json!(pid))]).len();
    assert_eq!(kernel_creates, 2, "{}", replay.stderr);
    // The CPU profile holds samples of the workload, with names.
    let samples = folded(path, "cpu");
    let mine: u64 = samples
        .iter()
        .filter(|(s, _)| s[0] == me)
        .map(|(_, n)| n)
        .sum();
    assert!(mine > 0, "no CPU sample of {me}: {samples:#?}");
    assert!(
        samples
            .iter()
            .all(|(s, _)| !s[0].starts_with("rdmatrace [")),
        "the recorder sampled itself"
    );
}
