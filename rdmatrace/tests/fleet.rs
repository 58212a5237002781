//! Several hosts in one report and one timeline, on two-host lab recordings made by
//! `cargo xtask fixtures` (tests/fixtures/two-host-NAME-{a,b}.rdmt: ib_write_bw from lab-a to
//! lab-b, b's clock set 2.5 s off a's; NAME is healthy, loss-a (3% loss on a's egress), loss-b
//! (20% on b's egress, one write in flight) or peer-dead (b's server killed with SIGKILL)).
//! Goldens of the text and JSON, and the facts the recordings were made to show.

mod common;

use common::*;
use serde_json::Value;

fn pair(name: &str) -> [String; 2] {
    ["a", "b"].map(|h| {
        format!(
            "{}/../tests/fixtures/two-host-{name}-{h}.rdmt",
            env!("CARGO_MANIFEST_DIR")
        )
    })
}

fn report(name: &str) -> Value {
    let [a, b] = pair(name);
    let out = run(&["report", &a, &b, "--json"]);
    assert!(out.status.success(), "{}", out.stderr);
    let v: Value = serde_json::from_str(out.stdout.trim()).expect("json");
    assert_eq!(v["type"], "fleet_report");
    v["data"].clone()
}

/// The one fault of `name`'s report: (kind, from, to).
fn only_fault(name: &str) -> (String, String, String) {
    let r = report(name);
    let f = r["faults"].as_array().expect("faults");
    assert_eq!(f.len(), 1, "{name}: {:#}", r["faults"]);
    let s = |k: &str| f[0][k].as_str().unwrap_or_default().to_string();
    (s("kind"), s("from_host"), s("to_host"))
}

#[test]
fn fleet_report_text_golden() {
    let [a, b] = pair("loss-a");
    let out = run(&["report", &a, &b]);
    assert!(out.status.success(), "{}", out.stderr);
    // The hosts' own sections follow the joined part.
    let joined = out.stdout.split("\n==== ").next().unwrap_or_default();
    insta::assert_snapshot!(joined);
}

#[test]
fn fleet_report_json_golden() {
    let mut r = report("peer-dead");
    // The hosts' own reports have goldens of their own.
    for h in r["hosts"].as_array_mut().expect("hosts") {
        h["report"] = Value::Null;
    }
    insta::assert_snapshot!(serde_json::to_string_pretty(&r).expect("pretty"));
}

#[test]
fn both_ends_are_paired_and_bs_clock_is_corrected_by_about_minus_two_and_a_half_seconds() {
    for name in ["healthy", "loss-a", "loss-b", "peer-dead"] {
        let r = report(name);
        let conns = r["connections"].as_array().expect("connections");
        // The RC connection, and the TCP connection ib_write_bw exchanged QPNs over.
        assert_eq!(conns.len(), 2, "{name}: {r:#}");
        let ends = conns[0]["ends"].as_array().expect("ends");
        assert_eq!(conns[0]["transport"], "RC", "{name}");
        assert_eq!(conns[0]["paired"], true, "{name}");
        assert_eq!(ends[0]["host"], "lab-a");
        assert_eq!(ends[1]["host"], "lab-b");
        assert_eq!(ends[0]["peer_qpn"], ends[1]["qpn"]);
        assert_eq!(ends[1]["peer_qpn"], ends[0]["qpn"]);
        let tcp = conns[1]["ends"].as_array().expect("ends");
        assert_eq!(conns[1]["transport"], "TCP", "{name}");
        assert_eq!(conns[1]["paired"], true, "{name}");
        assert_eq!(
            (&tcp[0]["host"], &tcp[1]["host"]),
            (&ends[0]["host"], &ends[1]["host"])
        );
        assert_eq!(
            (&tcp[0]["pid"], &tcp[1]["pid"]),
            (&ends[0]["pid"], &ends[1]["pid"])
        );
        assert_eq!(tcp[0]["remote"], "192.0.2.2:18515", "ib_write_bw's port");
        assert_eq!(tcp[1]["local"], "192.0.2.2:18515");
        assert_eq!(tcp[0]["local"], tcp[1]["remote"]);
        assert_eq!(
            (&tcp[0]["side"], &tcp[1]["side"]),
            (&"active".into(), &"passive".into())
        );
        let c = &r["hosts"][1]["clock"];
        let (off, unc) = (
            c["offset_ns"].as_i64().expect("offset"),
            c["uncertainty_ns"].as_i64().expect("bound"),
        );
        // The lab set b's clock 2.5 s ahead to within ~2 ms (its clock exchange's log).
        assert!(
            (off + 2_500_000_000).abs() <= unc + 5_000_000 && unc < 300_000_000,
            "{name}: {c}"
        );
    }
}

#[test]
fn a_healthy_run_has_no_fault() {
    let r = report("healthy");
    assert_eq!(r["faults"], serde_json::json!([]), "{r:#}");
}

#[test]
fn loss_on_each_egress_is_localized_to_its_direction() {
    let lost = |from: &str, to: &str| ("packet_loss".to_string(), from.into(), to.into());
    assert_eq!(only_fault("loss-a"), lost("lab-a", "lab-b"));
    assert_eq!(only_fault("loss-b"), lost("lab-b", "lab-a"));
}

#[test]
fn the_killed_peer_is_the_side_at_fault() {
    let (kind, from, to) = only_fault("peer-dead");
    assert_eq!(
        (kind.as_str(), from.as_str(), to.as_str()),
        ("peer_dead", "lab-a", "lab-b")
    );
}

#[test]
fn the_order_of_the_recordings_sets_the_reference_clock_not_the_result() {
    let [a, b] = pair("loss-b");
    let out = run(&["report", &b, &a, "--json"]);
    assert!(out.status.success(), "{}", out.stderr);
    let v: Value = serde_json::from_str(out.stdout.trim()).expect("json");
    let r = &v["data"];
    assert_eq!(r["reference_host"], "lab-b");
    let c = &r["hosts"][1]["clock"];
    let off = c["offset_ns"].as_i64().expect("offset");
    let unc = c["uncertainty_ns"].as_i64().expect("bound");
    assert!((off - 2_500_000_000).abs() <= unc + 5_000_000, "{c}");
    let f = &r["faults"][0];
    assert_eq!(
        (f["from_host"].as_str(), f["to_host"].as_str()),
        (Some("lab-b"), Some("lab-a"))
    );
}

#[test]
fn the_timeline_of_two_hosts_joins_the_handshake_and_states_the_correction() {
    let [a, b] = pair("healthy");
    let dir = test_dir("fleet-timeline");
    let out_path = dir.path().join("tl.json");
    let out = run(&[
        "timeline",
        &a,
        &b,
        "-o",
        out_path.to_str().expect("utf8"),
        "--format",
        "json",
    ]);
    assert!(out.status.success(), "{}", out.stderr);
    let v: Value =
        serde_json::from_slice(&std::fs::read(&out_path).expect("timeline")).expect("json");
    let events = v["traceEvents"].as_array().expect("events");
    let flows: Vec<&Value> = events.iter().filter(|e| e["cat"] == "handshake").collect();
    assert_eq!(flows.len(), 2, "{flows:?}");
    assert_eq!(flows[0]["id"], flows[1]["id"]);
    let phases: Vec<&str> = flows.iter().filter_map(|e| e["ph"].as_str()).collect();
    assert!(phases.contains(&"s") && phases.contains(&"f"), "{phases:?}");
    // On the common clock the two RTRs are within the handshake (not 2.5 s apart).
    let ts: Vec<f64> = flows.iter().filter_map(|e| e["ts"].as_f64()).collect();
    assert!((ts[0] - ts[1]).abs() < 300_000.0, "{ts:?} (µs)");
    let note = v["otherData"]["hosts"][1]["clock_note"]
        .as_str()
        .unwrap_or_default();
    assert!(
        note.starts_with("clock -2.4") || note.starts_with("clock -2.5"),
        "{v:#}"
    );
}

#[test]
fn a_synthetic_fleet_pairs_every_qp_and_recovers_each_hosts_clock_error() {
    use rdmatrace::testing::fleet::{host, skew_ns};
    let dir = test_dir("fleet-synth");
    let n = 5; // hosts 0-1 and 2-3 in pairs, host 4 alone (its QPs connected to each other)
    let files: Vec<String> = (0..n)
        .map(|i| {
            let p = dir.path().join(format!("host-{i}.rdmt"));
            std::fs::write(&p, host(i, n, 6, 400)).expect("write");
            p.display().to_string()
        })
        .collect();
    let mut args = vec!["report"];
    args.extend(files.iter().map(String::as_str));
    args.push("--json");
    let out = run(&args);
    assert!(out.status.success(), "{}", out.stderr);
    let v: Value = serde_json::from_str(out.stdout.trim()).expect("json");
    let r = &v["data"];
    let conns = r["connections"].as_array().expect("connections");
    // 6 QPs per host: 2 pairs of hosts x 6 connections, and 3 inside host 4.
    assert_eq!(conns.len(), 15, "{r:#}");
    assert!(conns.iter().all(|c| c["paired"] == true), "{r:#}");
    // host-1 pairs with host-0 (aligned); hosts 2-3 and 4 share no connection with host-0.
    let clock = |i: usize| &r["hosts"][i]["clock"];
    let c1 = clock(1);
    let want = skew_ns(0) - skew_ns(1);
    let got = c1["offset_ns"].as_i64().expect("offset");
    assert!(
        (got - want).abs() <= c1["uncertainty_ns"].as_i64().expect("bound"),
        "{c1}"
    );
    for i in 2..n {
        assert_eq!(clock(i)["aligned"], false, "{}", clock(i));
    }
}
