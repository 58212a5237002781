//! Host tier: the tool keeps its promises when things go wrong — no privileges, no BTF, a full
//! ring buffer, a signal to stop, a traced program that crashes. Root-only checks are ignored by
//! `cargo test` and run by `cargo xtask test` as root (`root_` names); the unprivileged message is
//! checked either way (as nobody when run as root).

mod common;

use std::{
    process::Command,
    thread::sleep,
    time::{Duration, Instant},
};

use common::*;
use serde_json::{json, Value};

fn signal(pid: u32, sig: i32) {
    // SAFETY: kill(2) on a child of this test with a valid signal number.
    let r = unsafe { libc::kill(pid as i32, sig) };
    assert_eq!(r, 0, "kill({pid}, {sig})");
}

/// Replays `file` as JSON; asserts the replay is clean (no damage reported).
fn replay_clean(file: &std::path::Path) -> Vec<Value> {
    let f = file.to_str().expect("utf8");
    let out = run(&["trace", "--input", f, "--json"]);
    assert!(out.status.success(), "replay failed: {}", out.stderr);
    assert!(
        out.stderr.trim().is_empty(),
        "a complete recording replays without warnings: {}",
        out.stderr
    );
    out.events()
}

#[test]
fn unprivileged_run_names_the_missing_capability_and_fails() {
    // In /tmp itself, not in a test_dir (mode 0700, root's when run as root): user nobody may
    // create files in /tmp, so a recorder that wrongly left one behind would be seen.
    let out_file =
        std::env::temp_dir().join(format!("rdmatrace-unpriv-{}.rdmt", std::process::id()));
    for args in [
        vec!["trace", "--duration", "1"],
        vec![
            "record",
            "-o",
            out_file.to_str().expect("utf8"),
            "--duration",
            "1",
        ],
    ] {
        let out = run_unprivileged(&args);
        let stderr = &out.stderr;
        assert!(
            !out.status.success(),
            "{args:?} must fail without privileges"
        );
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        for needed in ["CAP_BPF", "CAP_PERFMON", "root"] {
            assert!(
                stderr.contains(needed),
                "{args:?}: the message must name {needed}: {stderr}"
            );
        }
        assert!(
            stderr.lines().count() <= 3,
            "one clear message, not a dump: {stderr}"
        );
    }
    assert!(
        !out_file.exists(),
        "a recorder that cannot load leaves no empty file behind"
    );
}

#[test]
#[ignore = "needs root: the BTF is looked for when loading eBPF programs; `cargo xtask test` runs it as root"]
fn root_missing_btf_is_explained_with_the_path() {
    let out = run(&["trace", "--btf-dir", "/nonexistent-btf", "--duration", "1"]);
    assert!(!out.status.success(), "no BTF, no tracing: {}", out.stderr);
    assert!(
        out.stderr.contains("/nonexistent-btf/vmlinux"),
        "the message names the BTF file it needed: {}",
        out.stderr
    );
    assert!(
        out.stderr.contains("--btf-dir"),
        "the message names the option that points at BTF: {}",
        out.stderr
    );
    assert_eq!(
        out.stderr.matches("No such file").count(),
        1,
        "the cause is said once: {}",
        out.stderr
    );
}

/// Execs `/bin/true` `n` times (2 events each: exec, exit).
fn burst(n: usize) {
    for _ in 0..n {
        Command::new("/bin/true").status().expect("true");
    }
}

#[test]
#[ignore = "needs root: traces and records with eBPF; `cargo xtask test` runs it as root"]
fn root_a_full_ring_buffer_is_counted_shown_live_recorded_and_explained() {
    // A stopped reader cannot drain the smallest ring buffer (4 KiB, a few dozen events): every
    // event beyond that is dropped in the kernel and counted per CPU.
    let dir = test_dir("ringbuf");
    let file = dir.path().join("lossy.rdmt");
    let f = file.to_str().expect("utf8");
    let rec = start(
        &["record", "-o", f, "--ringbuf-size", "4096"],
        Duration::from_secs(60),
    );
    signal(rec.pid(), libc::SIGSTOP);
    burst(200);
    signal(rec.pid(), libc::SIGCONT);
    sleep(Duration::from_millis(2500)); // the next tick reports the loss
    let done = rec.stop();
    assert!(done.status.success(), "{}", done.stderr);
    let lost: u64 = done
        .stderr
        .lines()
        .find_map(|l| {
            l.split(" lost, recorded to ")
                .next()?
                .rsplit(' ')
                .next()?
                .parse()
                .ok()
        })
        .unwrap_or_else(|| panic!("no summary: {}", done.stderr));
    assert!(
        lost > 0,
        "200 execs into a stopped 4 KiB buffer must lose events"
    );
    assert!(
        done.stderr
            .contains("events lost: the ring buffer was full"),
        "loss is said while recording: {}",
        done.stderr
    );
    assert!(
        done.stderr.contains("(per CPU: cpu") && done.stderr.contains("--ringbuf-size"),
        "the exit message says where and what to do: {}",
        done.stderr
    );
    let events = replay_clean(&file);
    let lost_lines = select(&events, "lost", &[]);
    let recorded: u64 = lost_lines
        .iter()
        .filter_map(|e| e["data"]["count"].as_u64())
        .sum();
    assert_eq!(
        recorded, lost,
        "the recording stores every loss the kernel counted"
    );
    // Per CPU: each stored loss names its CPU, and they add up to the exit message's split.
    for l in &lost_lines {
        let cpu = l["data"]["cpu"]
            .as_u64()
            .unwrap_or_else(|| panic!("no cpu: {l}"));
        let n = l["data"]["count"].as_u64().unwrap_or(0);
        assert!(n > 0, "{l}");
        assert!(
            done.stderr.contains(&format!("cpu{cpu} ")),
            "cpu {cpu} is in the exit message too: {}",
            done.stderr
        );
    }

    // Live: the same loss appears in the output stream.
    let tracer = start(
        &["trace", "--json", "--ringbuf-size", "4096"],
        Duration::from_secs(60),
    );
    signal(tracer.pid(), libc::SIGSTOP);
    burst(200);
    signal(tracer.pid(), libc::SIGCONT);
    sleep(Duration::from_millis(2500));
    let done = tracer.stop();
    assert!(done.status.success(), "{}", done.stderr);
    let live_events = done.events();
    let live_lines = select(&live_events, "lost", &[]);
    let live: u64 = live_lines
        .iter()
        .filter_map(|e| e["data"]["count"].as_u64())
        .sum();
    assert!(
        live_lines.iter().all(|l| l["data"]["cpu"].is_u64()),
        "live lost lines name their CPU: {live_lines:?}"
    );
    assert!(live > 0, "live output shows the loss: {}", done.stderr);
    assert!(done.stderr.contains("--ringbuf-size"), "{}", done.stderr);
}

/// Whether our child `pid` has exited (a zombie until waited for) within `limit`.
fn becomes_zombie(pid: u32, limit: Duration) -> bool {
    let started = Instant::now();
    while started.elapsed() < limit {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        if stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'))
        {
            return true;
        }
        sleep(Duration::from_millis(20));
    }
    false
}

#[test]
#[ignore = "needs root: records with eBPF; `cargo xtask test` runs it as root"]
fn root_sigint_and_sigterm_leave_a_complete_flushed_recording() {
    let dir = test_dir("signals");
    for (name, sig) in [("int", libc::SIGINT), ("term", libc::SIGTERM)] {
        let file = dir.path().join(format!("sig{name}.rdmt"));
        let f = file.to_str().expect("utf8");
        let rec = start(
            &[
                "record",
                "-o",
                f,
                "--",
                "/bin/sh",
                "-c",
                "/bin/true; exec sleep 12",
            ],
            Duration::from_secs(60),
        );
        sleep(Duration::from_millis(700)); // well under the 1 s flush: only the exit path saves it
        let pid = rec.pid();
        signal(pid, sig);
        // The command keeps our stderr pipe open until it ends: watch the recorder itself.
        assert!(
            // Well before the command's own end (12 s), with room for a loaded machine.
            becomes_zombie(pid, Duration::from_secs(8)),
            "SIG{name} ends the recording, not the command's exit"
        );
        let done = rec.wait();
        assert!(done.status.success(), "SIG{name}: {}", done.stderr);
        assert!(
            done.stderr.contains(" 0 lost, recorded to "),
            "{}",
            done.stderr
        );
        let events = replay_clean(&file);
        let execs: Vec<&str> = select(&events, "process_exec", &[])
            .iter()
            .filter_map(|e| e["data"]["comm"].as_str())
            .collect();
        assert!(
            execs.contains(&"true") && execs.contains(&"sleep"),
            "SIG{name}: events before the signal were flushed at exit: {execs:?}"
        );
    }
}

#[test]
#[ignore = "needs root: records with eBPF; `cargo xtask test` runs it as root"]
fn root_a_traced_command_that_crashes_is_recorded_with_its_signal() {
    let dir = test_dir("crash");
    let file = dir.path().join("crash.rdmt");
    let f = file.to_str().expect("utf8");
    let out = run(&["record", "-o", f, "--", "/bin/sh", "-c", "kill -SEGV $$"]);
    assert_eq!(
        out.status.code(),
        Some(128 + libc::SIGSEGV),
        "record exits like a shell would for a SIGSEGV death: {}",
        out.stderr
    );
    let events = replay_clean(&file);
    let exits = select(&events, "process_exit", &[("comm", json!("sh"))]);
    assert_eq!(exits.len(), 1, "{events:#?}");
    let status = exits[0]["data"]["exit_code"].as_i64().expect("exit_code");
    assert_eq!(
        status & 0x7f,
        i64::from(libc::SIGSEGV),
        "wait status of a SIGSEGV death"
    );
}

#[test]
#[ignore = "needs root: records with eBPF; `cargo xtask test` runs it as root"]
fn root_a_clean_stop_packs_the_seconds_chunks_into_one_zstd_chunk() {
    use std::os::unix::fs::PermissionsExt;
    let dir = test_dir("repack");
    let file = dir.path().join("quiet.rdmt");
    let f = file.to_str().expect("utf8");
    // Three execs over ~2.6 s: the recorder writes a chunk in each second that had events.
    let out = run(&[
        "record",
        "-o",
        f,
        "--",
        "/bin/sh",
        "-c",
        "/bin/true; sleep 1.3; /bin/true; sleep 1.3; /bin/true",
    ]);
    assert!(out.status.success(), "{}", out.stderr);
    let size = std::fs::metadata(&file).expect("stat").len();
    assert!(
        out.stderr
            .contains(&format!("({size} bytes, packed for storage from ")),
        "the last line says the recording was packed, with the final size: {}",
        out.stderr
    );
    let rec = rdmatrace::recording::reader::Recording::open(&file).expect("opens");
    let mut chunks = 0;
    assert!(rec
        .replay_chunks(|e| chunks += usize::from(e.is_none()))
        .is_empty());
    assert_eq!(chunks, 1);
    let bytes = std::fs::read(&file).expect("read");
    let at = rec.body_offset();
    assert_eq!(
        bytes[at + 4..at + 8],
        rdmatrace::recording::FLAG_ZSTD.to_le_bytes(),
        "the chunk is a zstd frame"
    );
    let mode = std::fs::metadata(&file).expect("stat").permissions().mode();
    assert_eq!(mode & 0o7777, 0o600, "still private");
    assert!(!dir.path().join("quiet.rdmt.repack-tmp").exists());
    let events = replay_clean(&file);
    let trues = select(&events, "process_exec", &[("comm", json!("true"))]);
    assert_eq!(trues.len(), 3, "every second's events survive the merge");
}
