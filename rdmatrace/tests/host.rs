//! Host tier: the real binary on the host kernel (no RDMA stack here). As root it must start,
//! say which probes are off and why, and still trace process events; without privileges it must
//! say which privilege is missing.

mod common;

use std::{process::Command, time::Duration};

use common::*;
use serde_json::json;

#[test]
fn host_trace_degrades_without_rdma_or_explains_privileges() {
    if !is_root() {
        let out = run(&["trace", "--duration", "1"]);
        assert!(!out.status.success(), "unprivileged trace must fail");
        assert!(
            out.stderr.contains("root") && out.stderr.contains("CAP_BPF"),
            "unprivileged error must name the missing privilege: {}",
            out.stderr
        );
        return;
    }
    if std::path::Path::new("/sys/kernel/btf/ib_core").exists() {
        eprintln!(
            "this host has an RDMA stack; the degrade path is covered by the lab tier instead"
        );
        return;
    }
    let tracer = start(&["trace", "--json"], Duration::from_secs(60));
    let status = Command::new("/bin/true").status().expect("run true");
    assert!(status.success());
    std::thread::sleep(Duration::from_millis(300));
    let done = tracer.stop();
    assert!(done.status.success(), "trace failed: {}", done.stderr);
    assert!(
        done.stderr.contains("qp probes off:"),
        "stderr: {}",
        done.stderr
    );
    assert!(
        done.stderr
            .contains("no RDMA probe point exists on this kernel"),
        "stderr: {}",
        done.stderr
    );
    let events = done.events();
    let execs = select(&events, "process_exec", &[("comm", json!("true"))]);
    assert!(
        !execs.is_empty(),
        "no process_exec for /bin/true in {} events",
        events.len()
    );
    let exits = select(
        &events,
        "process_exit",
        &[("comm", json!("true")), ("exit_code", json!(0))],
    );
    assert!(!exits.is_empty(), "no process_exit for /bin/true");
    assert_eq!(
        execs[0]["data"]["ppid"],
        json!(std::process::id()),
        "exec'd by this test"
    );
}

#[test]
fn bad_arguments_are_rejected_before_loading() {
    let out = run(&["trace", "--duration", "0"]);
    assert!(!out.status.success());
    assert!(out.stderr.contains("--duration"), "{}", out.stderr);
    let out = run(&["trace", "--ringbuf-size", "5000"]);
    assert!(!out.status.success());
    assert!(out.stderr.contains("power of two"), "{}", out.stderr);
}
