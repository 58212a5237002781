//! Golden outputs of every sink, from recordings made in the lab by `cargo xtask fixtures`
//! (tests/fixtures/lab-pingpong.rdmt: an ibv_rc_pingpong pair on rxe0/rxe1, then rt-bad-modify
//! on rxe1; lab-loss.rdmt: ib_write_bw and a TCP transfer under 5% loss).
//! Replay needs no privileges. Bless changes with `INSTA_UPDATE=always cargo test` or
//! `cargo insta review`.

mod common;

use common::*;

const FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../tests/fixtures/lab-pingpong.rdmt"
);

#[test]
fn replay_text_golden() {
    let out = run(&["trace", "--input", FIXTURE]);
    assert!(out.status.success(), "{}", out.stderr);
    insta::assert_snapshot!(out.stdout);
}

#[test]
fn replay_jsonl_golden() {
    let out = run(&["trace", "--input", FIXTURE, "--json"]);
    assert!(out.status.success(), "{}", out.stderr);
    insta::assert_snapshot!(out.stdout);
}

#[test]
fn replay_filters_golden() {
    let out = run(&[
        "trace", "--input", FIXTURE, "--dev", "rxe1", "--qpn", "0x12",
    ]);
    assert!(out.status.success(), "{}", out.stderr);
    insta::assert_snapshot!(out.stdout);
    let lines: Vec<&str> = out.stdout.lines().skip(1).collect();
    assert_eq!(
        lines.len(),
        3,
        "create, failed modify, destroy of rt-bad-modify's QP"
    );
    assert!(lines
        .iter()
        .all(|l| l.contains("rt-bad-modify") && l.contains("rxe1")));
}

#[test]
fn every_text_line_fits_in_100_columns() {
    let out = run(&["trace", "--input", FIXTURE]);
    for line in out.stdout.lines() {
        assert!(
            line.chars().count() < 100,
            "{} columns: {line}",
            line.chars().count()
        );
    }
}

#[test]
fn jsonl_lines_are_typed_envelopes() {
    let out = run(&["trace", "--input", FIXTURE, "--json"]);
    // Every type the fixture holds is a documented one (docs/json.md).
    let doc = include_str!("../../docs/json.md");
    let known: Vec<&str> = doc
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|w| w.chars().all(|c| c.is_ascii_lowercase() || c == '_'))
        .collect();
    for v in out.events() {
        let obj = v.as_object().expect("object");
        assert_eq!(obj.len(), 2, "{v}");
        assert!(known.contains(&v["type"].as_str().unwrap_or("")), "{v}");
        assert!(
            v["data"]["ts_ns"].is_u64() && v["data"]["pid"].is_u64(),
            "{v}"
        );
    }
}

const LOSS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../tests/fixtures/lab-loss.rdmt"
);

/// ib_write_bw rxe0 -> rxe1 with 5% netem loss on rxe0's wire, then a TCP transfer over it.
#[test]
fn replay_loss_text_golden() {
    let out = run(&["trace", "--input", LOSS]);
    assert!(out.status.success(), "{}", out.stderr);
    insta::assert_snapshot!(out.stdout);
}

#[test]
fn replay_loss_jsonl_golden() {
    let out = run(&["trace", "--input", LOSS, "--json", "--comm", "ib_write_bw"]);
    assert!(out.status.success(), "{}", out.stderr);
    insta::assert_snapshot!(out.stdout);
}

#[test]
fn report_text_golden() {
    let out = run(&["report", LOSS]);
    assert!(out.status.success(), "{}", out.stderr);
    insta::assert_snapshot!(out.stdout);
}

#[test]
fn report_json_golden() {
    let out = run(&["report", LOSS, "--json"]);
    assert!(out.status.success(), "{}", out.stderr);
    let v: serde_json::Value = serde_json::from_str(out.stdout.trim()).expect("json");
    insta::assert_snapshot!(serde_json::to_string_pretty(&v).expect("pretty"));
    // Blame names the lossy sender's QP first among the RDMA rows (the TCP transfer beside it
    // has rows of its own).
    let blame = v["data"]["blame"].as_array().expect("blame");
    let first_rdma = blame
        .iter()
        .find(|b| b["transport"] == "rxe")
        .expect("an rxe blame row");
    assert_eq!(first_rdma["target"], "rxe0 QPN 0x11");
    assert_eq!(first_rdma["comm"], "ib_write_bw");
    // The port counters' estimate agrees with the per-QP counts rxe's probes made, on a real
    // recording under 5 % loss (the estimate counts every packet on the wire).
    for p in v["data"]["processes"]
        .as_array()
        .expect("processes")
        .iter()
        .filter(|p| p["comm"] == "ib_write_bw")
    {
        let est = &p["rdma_estimated"];
        // "... on its QPs (TX / RX packets)": what rxe's per-QP probes counted.
        let evidence = p["evidence"].to_string();
        let counted: Vec<u64> = evidence
            .split(" on its QPs (")
            .nth(1)
            .and_then(|s| s.split(" packets)").next())
            .map(|s| s.split(" / ").filter_map(|n| n.parse().ok()).collect())
            .unwrap_or_default();
        assert_eq!(counted.len(), 2, "{evidence}");
        for (dir, per_qp) in [("tx", counted[0]), ("rx", counted[1])] {
            let packets = est[format!("{dir}_packets")].as_u64().expect("packets");
            assert!(
                packets >= per_qp && packets <= per_qp + per_qp / 20 + 10,
                "{dir}: port {packets} vs per-QP {per_qp}: {p:#}"
            );
            assert_eq!(est[format!("{dir}_bytes")].as_u64(), Some(packets * 1024));
        }
    }
}

const DEADPEER: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../tests/fixtures/lab-deadpeer.rdmt"
);

/// rt-mover whose receiving QP is destroyed mid-transfer (recorded in the lab): one diagnosis,
/// the sender's, with the flushes after its first error as consequences.
#[test]
fn report_diagnoses_text_golden() {
    let out = run(&["report", DEADPEER]);
    assert!(out.status.success(), "{}", out.stderr);
    let from = out.stdout.find("DIAGNOSES").expect("a DIAGNOSES section");
    insta::assert_snapshot!(&out.stdout[from..]);
}

#[test]
fn report_diagnoses_json_golden() {
    let out = run(&["report", DEADPEER, "--json"]);
    assert!(out.status.success(), "{}", out.stderr);
    let v: serde_json::Value = serde_json::from_str(out.stdout.trim()).expect("json");
    let d = &v["data"]["diagnoses"];
    insta::assert_snapshot!(serde_json::to_string_pretty(d).expect("pretty"));
    assert_eq!(d.as_array().map(Vec::len), Some(1), "{d:#}");
    assert_eq!(d[0]["kind"], "peer_gone");
}

/// `verdict` ends with the diagnoses of the processes it judged.
#[test]
fn verdict_diagnoses_text_golden() {
    let out = run(&["verdict", "--input", DEADPEER]);
    assert!(
        out.status.success() || out.status.code() == Some(3),
        "{}",
        out.stderr
    );
    let from = out.stdout.find("DIAGNOSES").expect("a DIAGNOSES block");
    insta::assert_snapshot!(&out.stdout[from..]);
}
