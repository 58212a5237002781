//! Host tier: the real binary on the host kernel (no RDMA stack here). As root it must start,
//! say which probes are off and why, and still trace process events; without privileges it must
//! say which privilege is missing. Root-only checks are ignored by `cargo test` and run by
//! `cargo xtask test` as root (`root_` names; `root_nordma_` also needs a host without an RDMA
//! stack, whose degrade path the lab tier covers otherwise).

mod common;

use std::{process::Command, time::Duration};

use common::*;
use serde_json::json;

#[test]
fn unprivileged_trace_explains_privileges() {
    let out = run_unprivileged(&["trace", "--duration", "1"]);
    assert!(!out.status.success(), "unprivileged trace must fail");
    assert!(
        out.stderr.contains("root") && out.stderr.contains("CAP_BPF"),
        "unprivileged error must name the missing privilege: {}",
        out.stderr
    );
}

#[test]
#[ignore = "needs root and a host without an RDMA stack (no /sys/kernel/btf/ib_core): traces with eBPF; `cargo xtask test` runs it when both hold"]
fn root_nordma_host_trace_degrades_without_rdma() {
    let tracer = start(&["trace", "--json"], Duration::from_secs(60));
    let status = Command::new("/bin/true").status().expect("run true");
    assert!(status.success());
    std::thread::sleep(Duration::from_millis(300));
    let done = tracer.stop();
    assert!(done.status.success(), "trace failed: {}", done.stderr);
    assert!(
        done.stderr.contains("qp probes off ("),
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
    // Units are taken (`-d 30s`, `-d 5m`); one it does not know is named with the known ones.
    let out = run(&["trace", "-d", "30x"]);
    assert!(!out.status.success());
    assert!(
        out.stderr.contains("unknown unit") && out.stderr.contains("ms, s, m, h or d"),
        "{}",
        out.stderr
    );
    let out = run(&["trace", "--ringbuf-size", "5000"]);
    assert!(!out.status.success());
    assert!(out.stderr.contains("power of two"), "{}", out.stderr);
}

#[test]
#[ignore = "needs root: records with eBPF; `cargo xtask test` runs it as root"]
fn root_record_a_command_then_replay_it_without_root() {
    let dir = test_dir("record-cmd");
    let file = dir.path().join("cmd.rdmt");
    let f = file.to_str().expect("utf8");
    let out = run(&[
        "record",
        "-o",
        f,
        "--",
        "/bin/sh",
        "-c",
        "/bin/true; exit 3",
    ]);
    assert_eq!(
        out.status.code(),
        Some(3),
        "record exits with the command's status: {}",
        out.stderr
    );
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(&file)
        .expect("recording")
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o600);
    let replay = run(&["trace", "--input", f, "--json"]);
    assert!(replay.status.success(), "{}", replay.stderr);
    let events = replay.events();
    // Only the command and its descendants: sh, then true.
    let execs: Vec<&str> = select(&events, "process_exec", &[])
        .iter()
        .filter_map(|e| e["data"]["comm"].as_str())
        .collect();
    assert_eq!(execs, ["sh", "true"], "{events:#?}");
    let exits = select(&events, "process_exit", &[("comm", json!("sh"))]);
    assert_eq!(exits.len(), 1);
    assert_eq!(
        exits[0]["data"]["exit_code"],
        json!(3 << 8),
        "wait status of exit(3)"
    );
}

#[test]
#[ignore = "needs root: records with eBPF; `cargo xtask test` runs it as root"]
fn root_a_recorder_killed_with_sigkill_leaves_a_replayable_file() {
    let dir = test_dir("record-kill");
    let file = dir.path().join("killed.rdmt");
    let f = file.to_str().expect("utf8");
    let rec = start(&["record", "-o", f], Duration::from_secs(60));
    for _ in 0..5 {
        Command::new("/bin/true").status().expect("true");
    }
    // The recorder flushes a chunk every second.
    std::thread::sleep(Duration::from_millis(2500));
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(rec.pid() as i32, libc::SIGKILL) };
    let _ = rec.wait();
    let replay = run(&["trace", "--input", f, "--json", "--comm", "true"]);
    assert!(replay.status.success(), "{}", replay.stderr);
    let execs = select(&replay.events(), "process_exec", &[]).len();
    assert!(
        execs >= 5,
        "the 5 execs before the kill were flushed: got {execs}"
    );
}

#[test]
#[ignore = "needs root: traces with eBPF; `cargo xtask test` runs it as root"]
fn root_tcp_bytes_are_summed_per_sending_process() {
    tcp_bytes_summed(&[]);
}

#[test]
#[ignore = "needs root: traces with eBPF; `cargo xtask test` runs it as root"]
fn root_tcp_bytes_are_summed_by_the_raw_tracepoints_with_no_typed_probes() {
    let stderr = tcp_bytes_summed(&["--no-typed-probes"]);
    assert!(stderr.contains("typed probes off"), "{stderr}");
}

/// Traces loopback TCP transfers of known sizes with `trace --json` (and `extra` flags) and
/// checks each process's byte totals and peer; the tracer's stderr.
fn tcp_bytes_summed(extra: &[&str]) -> String {
    let mut args = vec!["trace", "--json", "--comm", "python3"];
    args.extend(extra);
    let tracer = start(&args, Duration::from_secs(60));
    // Loopback transfers inside one process, over IPv4 then IPv6 (where the host has it):
    // 300000 bytes each way through TCP each, with the peer address each time.
    let transfer = |family: &str, addr: &str| {
        let child = Command::new("python3")
            .args([
                "-c",
                &format!(
                    "import socket,threading\ns=socket.socket(socket.{family})\n\
                     s.bind(('{addr}',0))\ns.listen()\n\
                     p=s.getsockname()[1]\ndef srv():\n c,_=s.accept()\n while c.recv(65536): pass\n\
                     t=threading.Thread(target=srv)\nt.start()\nk=socket.create_connection(('{addr}',p))\n\
                     k.sendall(b'x'*300000)\nk.close()\nt.join()"
                ),
            ])
            .spawn()
            .expect("python3");
        let pid = child.id();
        let out = child.wait_with_output().expect("python3");
        out.status.success().then_some(pid)
    };
    let v4 = transfer("AF_INET", "127.0.0.1").expect("an IPv4 loopback transfer");
    let v6 = transfer("AF_INET6", "::1");
    std::thread::sleep(Duration::from_millis(1500));
    let done = tracer.stop();
    let events = done.events();
    for (pid, peer) in [(Some(v4), "127.0.0.1"), (v6, "::1")] {
        let Some(pid) = pid else {
            eprintln!("no IPv6 loopback here: the IPv6 peer is not checked");
            continue;
        };
        let samples = select(&events, "tcp_bytes", &[("pid", json!(pid))]);
        let sum = |k: &str| {
            samples
                .iter()
                .map(|e| e["data"][k].as_u64().unwrap_or(0))
                .sum::<u64>()
        };
        assert_eq!(sum("tx_bytes"), 300000, "{peer}: {samples:?}");
        assert_eq!(sum("rx_bytes"), 300000, "{peer}: {samples:?}");
        assert!(sum("tx_calls") >= 1 && sum("rx_calls") >= 1);
        for e in &samples {
            assert_eq!(e["data"]["peer"], json!(peer), "{e}");
        }
    }
    done.stderr.clone()
}

#[test]
#[ignore = "needs root: traces with eBPF; `cargo xtask test` runs it as root"]
fn root_tcp_bytes_of_more_process_peer_pairs_than_slots_are_each_counted() {
    // One process sends 1000 bytes to each of 1100 loopback addresses: more pairs than the
    // kernel programs' slots (SOCK_SLOTS, 1024), so many share a slot and go on in the hash
    // map. Every peer's total must be exact whichever way it was summed.
    const PEERS: u32 = 1100;
    let tracer = start(
        &["trace", "--json", "--comm", "python3"],
        Duration::from_secs(90),
    );
    let out = Command::new("python3")
        .args([
            "-c",
            &format!(
                "import socket,threading\ns=socket.socket()\ns.bind(('0.0.0.0',0))\n\
                 s.listen(4096)\np=s.getsockname()[1]\n\
                 def srv():\n for _ in range({PEERS}):\n  c,_=s.accept()\n  \
                 while c.recv(65536): pass\n  c.close()\n\
                 t=threading.Thread(target=srv)\nt.start()\n\
                 for i in range({PEERS}):\n k=socket.create_connection(\
                 ('127.0.%d.%d'%(1+i//250,1+i%250),p))\n k.sendall(b'x'*1000)\n k.close()\n\
                 t.join()"
            ),
        ])
        .output()
        .expect("python3");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::thread::sleep(Duration::from_millis(1500));
    let done = tracer.stop();
    let events = done.events();
    let mut sent: std::collections::HashMap<String, u64> = Default::default();
    for e in select(&events, "tcp_bytes", &[]) {
        let peer = e["data"]["peer"].as_str().unwrap_or("").to_string();
        *sent.entry(peer).or_default() += e["data"]["tx_bytes"].as_u64().unwrap_or(0);
    }
    for i in 0..PEERS {
        let peer = format!("127.0.{}.{}", 1 + i / 250, 1 + i % 250);
        assert_eq!(sent.get(&peer), Some(&1000), "{peer}: {:?}", sent.len());
    }
}

/// `doctor --json`: its run and its items.
fn doctor() -> (Finished, Vec<serde_json::Value>) {
    let out = run(&["doctor", "--json"]);
    let v: serde_json::Value = serde_json::from_str(out.stdout.trim()).expect("one JSON object");
    assert_eq!(v["type"], "doctor");
    let items = v["data"].as_array().expect("items").clone();
    (out, items)
}

/// The first doctor item whose name starts with `name`.
fn doctor_item<'a>(items: &'a [serde_json::Value], name: &str) -> Option<&'a serde_json::Value> {
    items
        .iter()
        .find(|i| i["item"].as_str().is_some_and(|s| s.starts_with(name)))
}

#[test]
fn doctor_reports_every_probe_with_a_status_and_reason() {
    let (_, items) = doctor();
    let item = |name: &str| doctor_item(&items, name);
    assert!(item("kernel").is_some() && item("BTF").is_some() && item("privileges").is_some());
    for i in &items {
        let s = i["status"].as_str().unwrap_or("");
        assert!(["ok", "unavailable", "error"].contains(&s), "{i}");
        assert!(i["detail"].is_string(), "{i}");
    }
}

#[test]
#[ignore = "needs root and a host without an RDMA stack (no /sys/kernel/btf/ib_core): doctor attaches the probes; `cargo xtask test` runs it when both hold"]
fn root_nordma_doctor_attaches_process_probes_and_says_rdma_ones_are_unavailable() {
    let (out, items) = doctor();
    let item = |name: &str| doctor_item(&items, name);
    assert!(out.status.success(), "{}", out.stderr);
    assert_eq!(
        item("probe process/process_exec").map(|i| &i["status"]),
        Some(&json!("ok"))
    );
    // TCP bytes come from a tracepoint on this kernel (6.3+): its kretprobe fallback
    // stands by, and says why.
    let tp = item("probe tcp/tcp_send_bytes ").expect("tcp bytes probe listed");
    let fallback = item("probe tcp/tcp_send_bytes_ret").expect("fallback listed");
    if tp["status"] == "ok" {
        assert_eq!(fallback["status"], "ok", "{fallback}");
        assert!(
            fallback["detail"]
                .as_str()
                .is_some_and(|d| d.contains("not needed: sock_send_length")),
            "{fallback}"
        );
    }
    let qp = item("probe qp/qp_create_enter").expect("qp probe listed");
    assert_eq!(qp["status"], "unavailable");
    assert!(
        qp["detail"].as_str().unwrap_or("").contains("ib_core"),
        "{qp}"
    );
    // The maps' kernel memory (this host's kernel is 6.4 or later, which accounts a map's real
    // memory): at least the ring buffer, and almost none of it per CPU (the aggregate maps and
    // the slots are shared; only the one-slot loss counter is per CPU; each map counted once
    // though the sampler holds a descriptor of its own).
    let mem = item("kernel memory: maps").expect("kernel memory listed");
    let detail = mem["detail"].as_str().unwrap_or("");
    let numbers: Vec<u64> = detail
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|w| w.parse().ok())
        .collect();
    let (total, per_cpu) = (numbers[0], numbers[numbers.len() - 1]);
    assert!(total >= 4 << 20, "{mem}");
    assert!(per_cpu < total / 1000, "{mem}");
}
