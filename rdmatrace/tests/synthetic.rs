//! The synthetic fixture (`tests/fixtures/synthetic-all-kinds.rdmt`): one record of every kind
//! the probes and samplers write, so every output shows every kind (text, JSON Lines, report).
//! The file is made by `rdmatrace::testing::all_kinds`; bless it and the goldens with
//! `INSTA_UPDATE=always cargo test -p rdmatrace --test synthetic`.

mod common;

use common::*;

const FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../tests/fixtures/synthetic-all-kinds.rdmt"
);

fn blessing() -> bool {
    std::env::var("INSTA_UPDATE").is_ok_and(|v| v == "always")
}

/// The fixture's path; when blessing, rewritten first from the generator (atomically: the
/// tests run in parallel).
fn fixture() -> &'static str {
    if blessing() {
        let tmp = format!("{FIXTURE}.{:?}.tmp", std::thread::current().id());
        std::fs::write(&tmp, rdmatrace::testing::all_kinds()).expect("write the fixture");
        std::fs::rename(&tmp, FIXTURE).expect("rename the fixture");
    }
    FIXTURE
}

#[test]
fn the_committed_fixture_is_what_the_generator_makes() {
    let made = rdmatrace::testing::all_kinds();
    fixture();
    let committed = std::fs::read(FIXTURE).expect("fixture (bless with INSTA_UPDATE=always)");
    assert!(
        committed == made,
        "tests/fixtures/synthetic-all-kinds.rdmt is stale: bless with INSTA_UPDATE=always"
    );
}

#[test]
fn every_kind_is_in_the_fixture_and_prints_in_both_formats() {
    let out = run(&["trace", "--input", fixture(), "--json"]);
    assert!(out.status.success(), "{}", out.stderr);
    let types: std::collections::BTreeSet<String> = out
        .events()
        .iter()
        .filter_map(|v| v["type"].as_str().map(String::from))
        .collect();
    for t in [
        "process_cgroup",
        "process_exec",
        "process_exit",
        "port",
        "ctx_open",
        "mr_reg",
        "verbs_call",
        "qp_create",
        "qp_modify",
        "qp_destroy",
        "cm_event",
        "qp_traffic",
        "retransmit",
        "tcp_state",
        "tcp_bytes",
        "counter",
        "qp_counter",
        "cq_event",
        "wc_error",
        "qp_res",
        "async_event",
        "cpu_sample",
        "lost",
    ] {
        assert!(types.contains(t), "no {t} record in {types:?}");
    }
    insta::assert_snapshot!("synthetic_jsonl", out.stdout);
    let text = run(&["trace", "--input", FIXTURE]);
    assert!(text.status.success(), "{}", text.stderr);
    assert!(text.stdout.lines().all(|l| l.chars().count() < 100));
    insta::assert_snapshot!("synthetic_text", text.stdout);
}

#[test]
fn report_of_every_kind_golden() {
    let out = run(&["report", fixture()]);
    assert!(out.status.success(), "{}", out.stderr);
    insta::assert_snapshot!("synthetic_report_text", out.stdout);
    let out = run(&["report", FIXTURE, "--json"]);
    assert!(out.status.success(), "{}", out.stderr);
    let v: serde_json::Value = serde_json::from_str(out.stdout.trim()).expect("json");
    insta::assert_snapshot!(
        "synthetic_report_json",
        serde_json::to_string_pretty(&v).expect("pretty")
    );
}
