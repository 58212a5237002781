//! The lab tier of `cargo xtask test`: the `lab_*` test binaries run inside one lab boot per
//! lab kernel, against a release build of the tracer; the two-host tests ([`HOSTS_TESTS`]) in
//! one boot of the two-host lab on the newest kernel.

use std::{path::PathBuf, process::Stdio};

use anyhow::Context as _;

use super::{cargo, Tier};
use crate::{bootstrap, cmd, lab};

/// The test binary of the two-host lab (`cargo xtask lab --hosts 2`).
const HOSTS_TESTS: &str = "lab_hosts";

/// Builds the `lab*` test binaries and returns their paths: the one-host ones, and the
/// two-host one.
fn lab_test_binaries() -> anyhow::Result<(Vec<PathBuf>, PathBuf)> {
    let out = cargo()
        .args([
            "test",
            "--workspace",
            "--exclude",
            "rdmatrace-ebpf",
            "--no-run",
            "--message-format=json",
        ])
        .stderr(Stdio::inherit())
        .output()
        .context("cannot run cargo test --no-run")?;
    anyhow::ensure!(out.status.success(), "building the tests failed");
    let mut bins = Vec::new();
    let mut hosts = None;
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Ok(msg) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        let is_lab_test = msg["reason"] == "compiler-artifact"
            && msg["profile"]["test"] == true
            && msg["target"]["kind"]
                .as_array()
                .is_some_and(|k| k.iter().any(|k| k == "test"))
            && msg["target"]["name"]
                .as_str()
                .is_some_and(|n| n.starts_with("lab"));
        if let (true, Some(exe)) = (is_lab_test, msg["executable"].as_str()) {
            if msg["target"]["name"] == HOSTS_TESTS {
                hosts = Some(PathBuf::from(exe));
            } else {
                bins.push(PathBuf::from(exe));
            }
        }
    }
    anyhow::ensure!(!bins.is_empty(), "no lab* test binaries were built");
    // One order on every run: the lab's tests change shared state (devices, links, counters).
    bins.sort_by_key(|b| b.file_name().map(|n| n.to_os_string()));
    let hosts = hosts.with_context(|| format!("the {HOSTS_TESTS} test binary was not built"))?;
    Ok((bins, hosts))
}

/// The lab tier on each lab kernel: the newest with rdma_rxe (Debian backports) and bookworm's
/// 6.1, one boot each, the same binaries. `(kernel, result)`.
pub(super) fn lab_tiers() -> Vec<(String, Tier)> {
    let kernels = bootstrap::lab()
        .and_then(|()| lab::find_kernel(None))
        .and_then(|(_, newest)| Ok(vec![newest, bootstrap::old_lab_kernel()?]));
    let kernels = match kernels {
        Ok(k) => k,
        Err(e) => {
            return vec![(
                "lab".into(),
                Tier::Skipped(format!("the lab cannot run on this machine: {e:#}")),
            )]
        }
    };
    let newest = kernels.first().cloned().unwrap_or_default();
    let mut tiers: Vec<(String, Tier)> = kernels
        .into_iter()
        .map(|ver| {
            let skips: &[&str] = if ver == newest { &[] } else { OLD_KERNEL_SKIPS };
            let script = match lab_script(skips, false) {
                Ok(s) => s,
                Err(e) => return (format!("lab {ver}"), Tier::Failed(format!("{e:#}"))),
            };
            eprintln!("\n== lab tests on {ver}");
            let mut first = lab::run_on(Some(&ver), Some(&script));
            let mut again = "";
            // A guest that died (kernel panic, VM crash) is booted once more; the summary says
            // so. A test failure is never retried.
            if matches!(first, Ok(lab::VM_DIED)) {
                eprintln!("\n== lab tests on {ver}, second boot: the first VM died (exit 255)");
                first = lab::run_on(Some(&ver), Some(&script));
                again = " (on a second boot: the first VM died, exit 255)";
            }
            let subset = if skips.is_empty() {
                String::new()
            } else {
                format!(
                    " ({} tests that check the analysis, not a probe, run on the newest kernel only: {})",
                    skips.len(),
                    skips.join(", ")
                )
            };
            let tier = match first {
                Ok(0) => Tier::Passed(format!("every lab test binary passed{again}{subset}")),
                Ok(lab::VM_DIED) => Tier::Failed(format!(
                    "the VM died (exit 255: kernel panic or VM crash){again}"
                )),
                Ok(code) => Tier::Failed(format!("lab tests exited with {code}{again}")),
                Err(e) => Tier::Failed(format!("{e:#}{again}")),
            };
            (format!("lab {ver}"), tier)
        })
        .collect();
    tiers.push((format!("lab 2 hosts {newest}"), two_host_tier(&newest)));
    tiers
}

/// The two-host tests in one boot of the two-host lab (both VMs run the binary; each test
/// coordinates its two halves through the shared folder).
fn two_host_tier(ver: &str) -> Tier {
    let script = match lab_script(&[], true) {
        Ok(s) => s,
        Err(e) => return Tier::Failed(format!("{e:#}")),
    };
    eprintln!("\n== two-host lab tests on {ver}");
    match lab::run_two(Some(ver), &script) {
        Ok(0) => Tier::Passed(
            "every two-host test passed on both hosts (newest kernel only: the probes are the \
             one-host tiers'; this tier checks pairing, clocks and localization)"
                .into(),
        ),
        Ok(lab::VM_DIED) => Tier::Failed("a VM died (exit 255: kernel panic or VM crash)".into()),
        Ok(code) => Tier::Failed(format!("two-host lab tests exited with {code}")),
        Err(e) => Tier::Failed(format!("{e:#}")),
    }
}

/// Lab tests run on the newest lab kernel only: each checks a diagnosis from probes that other
/// tests already check on the older kernel too (6.1's probe paths: TCP byte counts before 6.3,
/// the umem, queue and modify offsets, 1 KiB rxe writes), so on 6.1 it would test the same
/// analysis twice. Keeps the whole suite under an hour.
const OLD_KERNEL_SKIPS: &[&str] = &[
    "lab_a_healthy_qperf_run_and_its_teardown_get_no_diagnosis",
    "lab_a_destination_nobody_answers_for_is_unreachable",
    "lab_a_receive_buffer_shorter_than_the_message_is_the_receivers_local_error",
    "lab_a_dest_qpn_that_does_not_exist_is_named_on_the_sending_qp",
    "lab_a_local_ack_timeout_below_the_round_trip_is_timeout_too_small",
    "lab_a_process_whose_namespace_has_no_rdma_device_is_no_rdma_device",
];

/// Builds the tracer, the workloads and the lab test binaries; the script that runs them (the
/// one-host binaries, or with `two_hosts` the two-host one). The tests run a release build of
/// the tracer (`RDMATRACE_BIN`): under emulation a debug build took ~30 s to attach against
/// ~10 s, and every lab test starts the tracer at least once.
fn lab_script(skips: &[&str], two_hosts: bool) -> anyhow::Result<String> {
    cmd::run(cargo().args(["build", "-p", "rdmatrace", "-p", "rdmatrace-workloads"]))?;
    cmd::run(cargo().args([
        "build",
        "--release",
        "-p",
        "rdmatrace",
        "--bin",
        "rdmatrace",
    ]))?;
    let (one_host, hosts) = lab_test_binaries()?;
    let bins = if two_hosts { vec![hosts] } else { one_host };
    let tracer = cmd::repo_root().join("target/release/rdmatrace");
    let workloads = cmd::repo_root().join("target/debug");
    let mut script = String::from("set -u\nstatus=0\n");
    for bin in &bins {
        script += &format!(
            "echo '== lab tests: {name}'\nRDMATRACE_BIN={t} RDMATRACE_WORKLOADS={w} {b} --ignored --test-threads=1{s} || status=1\n",
            s = skips.iter().map(|n| format!(" --skip {n}")).collect::<String>(),
            name = bin.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
            t = tracer.display(),
            w = workloads.display(),
            b = bin.display()
        );
    }
    script += "exit $status\n";
    Ok(script)
}
