//! Lab tier, connection manager: an rping pair's CM events and verbs objects, attributed to
//! each side. Ignored outside the lab VM (`cargo xtask test` runs it there).

mod common;

use std::{
    process::{Command, Stdio},
    thread::sleep,
    time::Duration,
};

use common::{lab::*, *};
use serde_json::{json, Value};

/// Runs an rping pair (server on 192.0.2.2) and returns (server pid, client pid).
fn rping_pair() -> (u32, u32) {
    let server = Command::new("rping")
        .args(["-s", "-a", "192.0.2.2", "-C", "3", "-v"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("rping server");
    let spid = server.id();
    let (cpid, _) = client_until_ok(
        "rping",
        &["-c", "-a", "192.0.2.2", "-C", "3", "-v"],
        |out| out.contains("ping data"),
    );
    let out = server.wait_with_output().expect("server");
    assert!(out.status.success(), "rping server: {}", text(&out));
    (spid, cpid)
}

fn cm_events_of(events: &[Value], pid: u32) -> Vec<String> {
    select(events, "cm_event", &[("owner_pid", json!(pid))])
        .iter()
        .filter_map(|e| e["data"]["event"].as_str().map(String::from))
        .collect()
}

#[test]
#[ignore = "lab: needs the Soft-RoCE VM; run through `cargo xtask test`"]
fn lab_rping_cm_events_and_objects_are_attributed_to_each_side() {
    in_lab();
    let tracer = start(&["trace", "--json"], READY_TIMEOUT);
    let (spid, cpid) = rping_pair();
    sleep(Duration::from_millis(500));
    let done = tracer.stop();
    assert!(
        !done.stderr.contains("cm probes off") && !done.stderr.contains("res probes off"),
        "{}",
        done.stderr
    );
    let events = done.events();

    let client = cm_events_of(&events, cpid);
    let server = cm_events_of(&events, spid);
    // With a user-space QP the active side gets CONNECT_RESPONSE from the kernel (librdmacm
    // then moves the QP and reports ESTABLISHED itself).
    for want in ["ADDR_RESOLVED", "ROUTE_RESOLVED", "CONNECT_RESPONSE"] {
        assert!(
            client.iter().any(|e| e == want),
            "client {cpid} lacks {want}: {client:?}"
        );
    }
    for want in ["CONNECT_REQUEST", "ESTABLISHED"] {
        assert!(
            server.iter().any(|e| e == want),
            "server {spid} lacks {want}: {server:?}"
        );
    }
    assert!(
        client.iter().chain(&server).any(|e| e == "DISCONNECTED"),
        "one side sees the disconnect: client {client:?} server {server:?}"
    );
    // The client's CONNECT_RESPONSE names its own QP, on rxe0, towards rping's port on 192.0.2.2.
    let est = select(
        &events,
        "cm_event",
        &[
            ("owner_pid", json!(cpid)),
            ("event", json!("CONNECT_RESPONSE")),
        ],
    );
    let est = &est[0]["data"];
    let client_qps = select(
        &events,
        "qp_create",
        &[("pid", json!(cpid)), ("ret", json!(0))],
    );
    assert_eq!(client_qps.len(), 1, "{client_qps:?}");
    assert_eq!(est["qpn"], client_qps[0]["data"]["qpn"], "{est}");
    assert_eq!(est["dev"], "rxe0", "{est}");
    assert_eq!(est["dst"], "192.0.2.2:7174", "{est}");
    // And the server's ESTABLISHED names the server's QP.
    let sest = select(
        &events,
        "cm_event",
        &[("owner_pid", json!(spid)), ("event", json!("ESTABLISHED"))],
    );
    let server_qps = select(
        &events,
        "qp_create",
        &[("pid", json!(spid)), ("ret", json!(0))],
    );
    assert_eq!(server_qps.len(), 1, "{server_qps:?}");
    assert_eq!(
        sest[0]["data"]["qpn"], server_qps[0]["data"]["qpn"],
        "{}",
        sest[0]
    );

    // Objects: each side opened a context, allocated PDs, a CQ and MRs, owned by itself, and
    // every object it added was removed by the time it exited.
    for (pid, dev) in [(cpid, "rxe0"), (spid, "rxe1")] {
        for ty in ["ctx_open", "pd_alloc", "cq_create", "mr_reg"] {
            let got = select(
                &events,
                ty,
                &[("owner_pid", json!(pid)), ("dev", json!(dev))],
            );
            assert!(!got.is_empty(), "{ty} of {pid} on {dev}");
        }
        let mut live: std::collections::HashMap<(String, u64), i32> = Default::default();
        for e in events
            .iter()
            .filter(|e| e["data"]["owner_pid"] == json!(pid) && e["data"]["object"].is_string())
        {
            let key = (
                e["data"]["object"].as_str().unwrap_or("").to_string(),
                e["data"]["id"].as_u64().unwrap_or(0),
            );
            let t = e["type"].as_str().unwrap_or("");
            let add = t.ends_with("_create")
                || t.ends_with("_alloc")
                || t.ends_with("_open")
                || t == "mr_reg";
            *live.entry(key).or_default() += if add { 1 } else { -1 };
        }
        let leaked: Vec<_> = live.iter().filter(|(_, n)| **n > 0).collect();
        assert!(
            leaked.is_empty(),
            "objects of {pid} never removed: {leaked:?}"
        );
    }
}
