//! Lab tier, devices and ports: a port going down and up, an rxe link deleted under the tracer,
//! doctor on the lab kernel, per-QP counter binding. These change the lab's shared state and put
//! it back. Ignored outside the lab VM (`cargo xtask test` runs them there).

mod common;

use std::{
    path::Path,
    process::{Command, Stdio},
    thread::sleep,
    time::Duration,
};

use common::{lab::*, *};
use serde_json::{json, Value};

#[test]
#[ignore = "lab: needs the Soft-RoCE VM; run through `cargo xtask test`"]
fn lab_port_down_and_up_reach_verbs_users_as_async_events() {
    in_lab();
    let nic = std::env::var("LAB_NIC_B").expect("LAB_NIC_B");
    // A verbs process with an open context on rxe1: a pingpong server waiting for a client.
    let mut server = Command::new("ibv_rc_pingpong")
        .args(["-d", "rxe1", "-g", "1", "-p", "18600"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("server");
    sleep(Duration::from_secs(2));
    let tracer = start(&["trace", "--json", "--dev", "rxe1"], READY_TIMEOUT);
    let link = |state: &str| {
        let st = Command::new("ip")
            .args(["link", "set", &nic, state])
            .status()
            .expect("ip");
        assert!(st.success());
        sleep(Duration::from_secs(2));
    };
    link("down");
    link("up");
    let _ = server.kill();
    let _ = server.wait();
    let done = tracer.stop();
    let events = done.events();
    let asyncs: Vec<(String, Value)> = select(&events, "async_event", &[("dev", json!("rxe1"))])
        .iter()
        .map(|e| {
            (
                e["data"]["event"].as_str().unwrap_or("").to_string(),
                e["data"]["port"].clone(),
            )
        })
        .collect();
    assert!(
        asyncs.contains(&("PORT_ERR".to_string(), json!(1))),
        "{asyncs:?} / {}",
        done.stderr
    );
    assert!(
        asyncs.contains(&("PORT_ACTIVE".to_string(), json!(1))),
        "{asyncs:?}"
    );
    let err = asyncs.iter().position(|(e, _)| e == "PORT_ERR");
    let active = asyncs.iter().rposition(|(e, _)| e == "PORT_ACTIVE");
    assert!(err < active, "down before up: {asyncs:?}");
}

/// Puts rxe0 back on NIC A (as the lab's setup made it) when dropped, so later tests have it.
struct Rxe0Back;

impl Drop for Rxe0Back {
    fn drop(&mut self) {
        if Path::new("/sys/class/infiniband/rxe0").exists() {
            return;
        }
        let nic = std::env::var("LAB_NIC_A").unwrap_or_default();
        let _ = Command::new("rdma")
            .args(["link", "add", "rxe0", "type", "rxe", "netdev", &nic])
            .status();
        // The IPv4-mapped RoCEv2 GID (index 1) appears asynchronously.
        for _ in 0..100 {
            let gid = std::fs::read_to_string("/sys/class/infiniband/rxe0/ports/1/gids/1")
                .unwrap_or_default();
            if gid.contains("ffff:c000:0201") {
                return;
            }
            sleep(Duration::from_millis(100));
        }
    }
}

#[test]
#[ignore = "lab: needs the Soft-RoCE VM; run through `cargo xtask test`"]
fn lab_rdma_link_delete_is_recorded_and_tracing_goes_on() {
    in_lab();
    let _back = Rxe0Back;
    let tracer = start(&["trace", "--json"], READY_TIMEOUT);
    // A verbs user with an open context on rxe0: a pingpong server waiting for a client.
    let mut server = Command::new("ibv_rc_pingpong")
        .args(["-d", "rxe0", "-g", "1", "-p", "18601"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("server");
    sleep(Duration::from_secs(2));
    // rxe cannot disassociate users: the delete may wait for the server to close the device.
    let mut delete = Command::new("rdma")
        .args(["link", "delete", "rxe0"])
        .spawn()
        .expect("rdma link delete");
    sleep(Duration::from_secs(2));
    let _ = server.kill();
    let _ = server.wait();
    let st = delete.wait().expect("rdma link delete");
    assert!(st.success(), "rdma link delete rxe0: {st}");
    assert!(!Path::new("/sys/class/infiniband/rxe0").exists());
    // The tracer is still at work after the device is gone.
    Command::new("/bin/true").status().expect("true");
    sleep(Duration::from_millis(1500));
    let done = tracer.stop();
    assert!(done.status.success(), "{}", done.stderr);
    let events = done.events();
    let gone = events.iter().position(|e| {
        e["type"] == "async_event"
            && e["data"]["event"] == "DEVICE_UNREGISTER"
            && e["data"]["dev"] == "rxe0"
            && e["data"]["source"] == "ib_core"
    });
    let Some(gone) = gone else {
        panic!(
            "no DEVICE_UNREGISTER for rxe0 in {} events; stderr: {}",
            events.len(),
            done.stderr
        );
    };
    let after = events[gone..]
        .iter()
        .any(|e| e["type"] == "process_exec" && e["data"]["comm"] == "true");
    assert!(after, "events after the removal are still traced");
}

/// Whether a doctor item is a raw tracepoint probe whose tracepoint this kernel does not have at
/// all (no tracefs event of that name, and doctor says so).
fn tracepoint_absent(item: &Value) -> bool {
    let (Some(what), Some(detail)) = (item["item"].as_str(), item["detail"].as_str()) else {
        return false;
    };
    let Some(name) = what
        .split("(raw_tp ")
        .nth(1)
        .and_then(|rest| rest.strip_suffix(')'))
    else {
        return false;
    };
    let in_tracefs = std::fs::read_dir("/sys/kernel/tracing/events")
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .any(|system| system.path().join(name).exists());
    !in_tracefs && detail.contains(&format!("this kernel has no tracepoint {name}"))
}

#[test]
#[ignore = "lab: needs the Soft-RoCE VM; run through `cargo xtask test`"]
fn lab_doctor_sees_every_rdma_probe_attach() {
    in_lab();
    // No ConnectX here, but the driver module loads: its probe points exist and must attach.
    let st = Command::new("modprobe")
        .arg("mlx5_ib")
        .status()
        .expect("modprobe");
    assert!(st.success(), "modprobe mlx5_ib");
    let out = run(&["doctor", "--json"]);
    assert!(out.status.success(), "{}", out.stderr);
    let v: Value = serde_json::from_str(out.stdout.trim()).expect("json");
    let items = v["data"].as_array().expect("items");
    let probes: Vec<&Value> = items
        .iter()
        .filter(|i| i["item"].as_str().is_some_and(|s| s.starts_with("probe ")))
        .collect();
    assert!(probes.len() >= 20, "{probes:#?}");
    // A tracepoint newer than the booted kernel (sock_send_length / sock_recv_length came with
    // Linux 6.3) is reported unavailable; every other probe must attach.
    let off: Vec<&&Value> = probes
        .iter()
        .filter(|i| i["status"] != "ok" && !tracepoint_absent(i))
        .collect();
    assert!(off.is_empty(), "probes off in the lab kernel: {off:#?}");
    // Per-process TCP bytes: the tracepoints (6.3+: their tp_btf programs, or the raw
    // tracepoints where tp_btf is refused) or their kretprobe fallback, exactly one of them
    // really attached on every lab kernel.
    for (tp, typed, ret) in [
        (
            "tcp/tcp_send_bytes ",
            "tcp/tcp_send_btf ",
            "tcp/tcp_send_bytes_ret ",
        ),
        (
            "tcp/tcp_recv_bytes ",
            "tcp/tcp_recv_btf ",
            "tcp/tcp_recv_bytes_ret ",
        ),
    ] {
        let find = |name: &str| {
            probes
                .iter()
                .find(|i| i["item"].as_str().is_some_and(|s| s.contains(name)))
        };
        let attached = |i: Option<&&Value>| i.is_some_and(|i| i["detail"] == "attached");
        let (tp, typed, ret) = (find(tp), find(typed), find(ret));
        assert!(tp.is_some() && ret.is_some(), "{tp:?} {ret:?}");
        let on = [tp, typed, ret]
            .into_iter()
            .filter(|&i| attached(i))
            .count();
        assert_eq!(on, 1, "{tp:?} {typed:?} {ret:?}");
    }
    for dev in ["device rxe0 port 1", "device rxe1 port 1"] {
        let d = items
            .iter()
            .find(|i| i["item"] == dev)
            .unwrap_or_else(|| panic!("{dev} missing"));
        assert_eq!(d["status"], "ok", "{d}");
    }
}

/// `rdma statistic qp mode` for one link, e.g. `link rxe0/1 mode qp auto off`.
fn counter_mode(link: &str) -> String {
    let o = Command::new("rdma")
        .args(["statistic", "qp", "mode"])
        .output()
        .expect("rdma statistic qp mode");
    text(&o)
        .lines()
        .find(|l| l.contains(&format!("link {link} ")))
        .unwrap_or_else(|| panic!("no {link} in: {}", text(&o)))
        .to_string()
}

#[test]
#[ignore = "lab: needs the Soft-RoCE VM; run through `cargo xtask test`"]
fn lab_counter_binding_is_announced_and_undone_at_exit() {
    in_lab();
    let before = counter_mode("rxe0/1");
    assert!(before.contains("off"), "lab starts unbound: {before}");
    let tracer = start(&["trace", "--bind-qp-counters"], READY_TIMEOUT);
    let during = counter_mode("rxe0/1");
    let done = tracer.stop();
    let after = counter_mode("rxe0/1");
    assert!(
        done.stderr
            .contains("bound per-QP counters on rxe0/1: auto mode"),
        "the change is announced: {}",
        done.stderr
    );
    assert!(!during.contains("off"), "auto mode while tracing: {during}");
    assert!(
        after.contains("off"),
        "undone at exit: {after}\n{}",
        done.stderr
    );
    let stale = binding_journals();
    assert!(stale.is_empty(), "journal removed at exit: {stale:?}");
    // Without the flag nothing changes.
    let plain = start(&["trace"], READY_TIMEOUT);
    let untouched = counter_mode("rxe0/1");
    let _ = plain.stop();
    assert!(untouched.contains("off"), "{untouched}");
}

/// Undo journals of counter binding under /run/rdmatrace (the lock file is not one).
fn binding_journals() -> Vec<String> {
    std::fs::read_dir("/run/rdmatrace")
        .map(|d| {
            d.filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("bindings-"))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
#[ignore = "lab: needs the Soft-RoCE VM; run through `cargo xtask test`"]
fn lab_counter_binding_left_by_kill_9_is_undone_by_the_next_run() {
    in_lab();
    for link in ["rxe0/1", "rxe1/1"] {
        let before = counter_mode(link);
        assert!(before.contains("off"), "lab starts unbound: {before}");
    }
    let tracer = start(&["trace", "--bind-qp-counters"], READY_TIMEOUT);
    let pid = tracer.pid();
    let during = counter_mode("rxe0/1");
    let journals = binding_journals();
    let killed = tracer.kill9();
    assert!(!during.contains("off"), "auto mode while tracing: {during}");
    assert!(
        journals
            .iter()
            .any(|n| n.starts_with(&format!("bindings-{pid}-"))),
        "a journal names the binding run {pid}: {journals:?}\n{}",
        killed.stderr
    );
    // The damage is real: nothing could undo it.
    let left = counter_mode("rxe0/1");
    assert!(!left.contains("off"), "SIGKILL leaves auto mode: {left}");
    // The next run, without the flag, undoes it and says so.
    let next = run(&["trace", "--duration", "1"]);
    assert!(next.status.success(), "{}", next.stderr);
    for (link, dev) in [("rxe0/1", "rxe0"), ("rxe1/1", "rxe1")] {
        let said = format!(
            "rdmatrace: undid a counter binding left by a killed run (pid {pid}): {dev} port 1 \
             auto mode off"
        );
        assert!(
            next.stderr.lines().any(|l| l.starts_with(&said)),
            "{said:?} in:\n{}",
            next.stderr
        );
        let after = counter_mode(link);
        assert!(after.contains("off"), "restored: {after}\n{}", next.stderr);
    }
    let stale = binding_journals();
    assert!(stale.is_empty(), "no stale journal: {stale:?}");
    // Once undone, it is not undone again.
    let again = run(&["trace", "--duration", "1"]);
    assert!(
        !again.stderr.contains("left by a killed run"),
        "{}",
        again.stderr
    );
}

#[test]
#[ignore = "lab: needs the Soft-RoCE VM; run through `cargo xtask test`"]
fn lab_counter_binding_is_undone_on_sighup() {
    in_lab();
    let before = counter_mode("rxe0/1");
    assert!(before.contains("off"), "lab starts unbound: {before}");
    let tracer = start(&["trace", "--bind-qp-counters"], READY_TIMEOUT);
    let during = counter_mode("rxe0/1");
    // SAFETY: kill(2) on our own child's pid with a valid signal number.
    unsafe { libc::kill(tracer.pid() as i32, libc::SIGHUP) };
    let done = tracer.wait();
    assert!(!during.contains("off"), "auto mode while tracing: {during}");
    assert!(
        done.status.success(),
        "SIGHUP ends the run cleanly: {}\n{}",
        done.status,
        done.stderr
    );
    let after = counter_mode("rxe0/1");
    assert!(
        after.contains("off"),
        "undone on SIGHUP: {after}\n{}",
        done.stderr
    );
    let stale = binding_journals();
    assert!(stale.is_empty(), "journal removed: {stale:?}");
}
