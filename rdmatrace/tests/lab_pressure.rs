//! Lab tier, a tracer left on for a long time: what months of `serve` can pile up in its maps
//! (entries of calls whose return the kernel missed, `rdmatrace::pending`), applied at once. Ignored outside the lab VM (`cargo xtask test` runs them there).

mod common;

use std::{
    io::Write as _,
    process::Command,
    thread::sleep,
    time::{Duration, Instant},
};

use common::{lab::*, *};
use serde_json::{json, Value};

/// The ids of the maps process `pid` holds, from its fdinfo (`map_id:` lines).
fn map_ids(pid: u32) -> Vec<u32> {
    let mut ids = Vec::new();
    let fds = std::fs::read_dir(format!("/proc/{pid}/fdinfo")).expect("fdinfo");
    for fd in fds.flatten() {
        let info = std::fs::read_to_string(fd.path()).unwrap_or_default();
        if let Some(id) = info
            .lines()
            .find_map(|l| l.strip_prefix("map_id:"))
            .and_then(|v| v.trim().parse().ok())
        {
            ids.push(id);
        }
    }
    ids
}

/// `bpftool map show id ID` as JSON.
fn map_info(id: u32) -> Value {
    let out = Command::new("bpftool")
        .args(["-j", "map", "show", "id", &id.to_string()])
        .output()
        .expect("bpftool (installed by `cargo xtask bootstrap`)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("bpftool JSON")
}

/// How many entries map `id` holds (`bpftool map dump` ends with "Found N elements").
fn entries(id: u32) -> u64 {
    let out = Command::new("bpftool")
        .args(["map", "dump", "id", &id.to_string()])
        .output()
        .expect("bpftool");
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find_map(|l| {
            l.strip_prefix("Found ")?
                .strip_suffix(" elements")?
                .parse()
                .ok()
        })
        .unwrap_or_else(|| panic!("bpftool map dump id {id}: {text:.300}"))
}

/// Fills map `name` of the tracer `pid` to its capacity with entries of tasks that do not
/// exist (pid_tgid 0xffffffff_0000NNNN): what returns never seen (missed kretprobes) leave
/// behind. Returns the map's id.
fn fill_with_stale_entries(pid: u32, name: &str) -> u32 {
    let (id, info) = map_ids(pid)
        .into_iter()
        .map(|id| (id, map_info(id)))
        .find(|(_, m)| m["name"] == name)
        .unwrap_or_else(|| panic!("tracer {pid} holds no map {name}"));
    let (max, value_len) = (
        info["max_entries"].as_u64().expect("max_entries"),
        info["bytes_value"].as_u64().expect("bytes_value"),
    );
    let hex = |bytes: &[u8]| {
        bytes
            .iter()
            .map(|b| format!("{b:#04x}"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let value = hex(&vec![0u8; value_len as usize]);
    let dir = test_dir("lab-pressure");
    let batch = dir.path().join(format!("{name}.batch"));
    let mut f = std::fs::File::create(&batch).expect("batch file");
    for i in 0..max {
        let key = 0xffff_ffff_0000_0000u64 | i;
        writeln!(
            f,
            "map update id {id} key {} value {value}",
            hex(&key.to_ne_bytes())
        )
        .expect("write");
    }
    drop(f);
    let out = Command::new("bpftool")
        .args(["batch", "file"])
        .arg(&batch)
        .output()
        .expect("bpftool batch");
    assert!(
        out.status.success(),
        "bpftool batch: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Every update of the batch succeeded: `max` stale entries were written, as many as the map
    // holds. The tracer's sweep (every 5 s) may already have begun removing them (under TCG a
    // batch takes seconds), so the count read now can be lower: the caller waits until none is
    // left, then checks that QP calls are traced again.
    eprintln!(
        "{name}: {max} stale entries written, {} left now",
        entries(id)
    );
    id
}

#[test]
#[ignore = "lab: needs the Soft-RoCE VM; run through `cargo xtask test`"]
fn lab_entries_of_tasks_that_are_gone_are_swept_and_qp_calls_are_traced_again() {
    in_lab();
    let tracer = start(&["trace", "--json"], READY_TIMEOUT);
    let maps: Vec<(&str, u32)> = ["PENDING_CREATE", "PENDING_MODIFY", "PENDING_DESTROY"]
        .into_iter()
        .map(|name| (name, fill_with_stale_entries(tracer.pid(), name)))
        .collect();
    // The sweep runs every 5 s; under TCG give it a few periods.
    let deadline = Instant::now() + Duration::from_secs(30);
    for (name, id) in &maps {
        while entries(*id) > 0 {
            assert!(
                Instant::now() < deadline,
                "{name}: {} stale entries left",
                entries(*id)
            );
            sleep(Duration::from_millis(500));
        }
    }
    let ((spid, sout), (cpid, cout)) = rc_pingpong();
    let done = tracer.stop();
    assert!(done.status.success(), "{}", done.stderr);
    let events = done.events();
    for (side, pid, dev, out) in [
        ("server", spid, "rxe1", &sout),
        ("client", cpid, "rxe0", &cout),
    ] {
        let qpn = local_qpn(out);
        let want = [
            ("dev", json!(dev)),
            ("qpn", json!(qpn)),
            ("pid", json!(pid)),
        ];
        let created = select(&events, "qp_create", &want);
        let modified = select(&events, "qp_modify", &want);
        let destroyed = select(&events, "qp_destroy", &want);
        assert_eq!(created.len(), 1, "{side}: the QP's creation: {created:#?}");
        let states: Vec<&str> = modified
            .iter()
            .filter_map(|e| e["data"]["new_state"].as_str())
            .collect();
        assert_eq!(states, ["INIT", "RTR", "RTS"], "{side}: its modifies");
        assert_eq!(destroyed.len(), 1, "{side}: its destruction");
    }
}
