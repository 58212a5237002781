//! `cargo xtask test`: every tier, loudly reporting any tier that could not run.
//!
//! - host: `cargo test --workspace` (unit, decode, golden, CLI; root-only checks adapt to privileges)
//! - cross (aarch64, build only): `cargo xtask cross`, the kernel programs and the release binary
//!   for aarch64-unknown-linux-gnu in `target/cross`; nothing of it runs (x86_64 is the tested
//!   architecture). Skipped with the reason when the machine cannot be set up for it.
//! - lab: the `lab*` integration tests, run with `--ignored` inside the lab VM, where real RDMA
//!   programs run under the tracer: one boot per lab kernel (Debian backports' newest with
//!   rdma_rxe, and bookworm's 6.1), the same binaries on both.

use std::{
    path::PathBuf,
    process::{Command, ExitCode, Stdio},
};

use anyhow::Context as _;

use crate::{bootstrap, cmd, cross, lab};

enum Tier {
    Passed,
    Failed(String),
    Skipped(String),
}

fn cargo() -> Command {
    let mut c = Command::new("cargo");
    c.current_dir(cmd::repo_root())
        .env("PATH", cmd::path_with_cargo_bin());
    c
}

/// Builds the `lab*` test binaries and returns their paths.
fn lab_test_binaries() -> anyhow::Result<Vec<PathBuf>> {
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
            bins.push(PathBuf::from(exe));
        }
    }
    anyhow::ensure!(!bins.is_empty(), "no lab* test binaries were built");
    Ok(bins)
}

/// The lab tier on each lab kernel: the newest with rdma_rxe (Debian backports) and bookworm's
/// 6.1, one boot each, the same binaries. `(kernel, result)`.
fn lab_tiers() -> Vec<(String, Tier)> {
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
    let script = match lab_script() {
        Ok(s) => s,
        Err(e) => return vec![("lab".into(), Tier::Failed(format!("{e:#}")))],
    };
    kernels
        .into_iter()
        .map(|ver| {
            eprintln!("\n== lab tests on {ver}");
            let tier = match lab::run_on(Some(&ver), Some(&script)) {
                Ok(0) => Tier::Passed,
                Ok(code) => Tier::Failed(format!("lab tests exited with {code}")),
                Err(e) => Tier::Failed(format!("{e:#}")),
            };
            (format!("lab {ver}"), tier)
        })
        .collect()
}

/// Builds the tracer, the workloads and the lab test binaries; the script that runs them.
fn lab_script() -> anyhow::Result<String> {
    cmd::run(cargo().args(["build", "-p", "rdmatrace", "-p", "rdmatrace-workloads"]))?;
    let bins = lab_test_binaries()?;
    let workloads = cmd::repo_root().join("target/debug");
    let mut script = String::from("set -u\nstatus=0\n");
    for bin in &bins {
        script += &format!(
            "echo '== lab tests: {name}'\nRDMATRACE_WORKLOADS={w} {b} --ignored --test-threads=1 || status=1\n",
            name = bin.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
            w = workloads.display(),
            b = bin.display()
        );
    }
    script += "exit $status\n";
    Ok(script)
}

const CROSS: &str = "cross (aarch64, build only)";

/// The cross tier: builds for aarch64 (installing what is missing), runs nothing.
fn cross_tier() -> Tier {
    match cross::run(false) {
        Ok(built) => {
            eprintln!(
                "cross: {} ({} bytes, ELF aarch64) built in {:.1} s",
                built.binary.display(),
                built.bytes,
                built.elapsed.as_secs_f64()
            );
            Tier::Passed
        }
        Err(e @ cross::Error::Setup(_)) => Tier::Skipped(e.to_string()),
        Err(e @ cross::Error::Build(_)) => Tier::Failed(e.to_string()),
    }
}

pub fn run(require_lab: bool, host_only: bool, no_lab: bool) -> anyhow::Result<ExitCode> {
    let require_lab = require_lab || std::env::var("CI").is_ok_and(|v| v == "true");
    bootstrap::toolchain()?;
    bootstrap::workload_deps()?;
    bootstrap::browser()?;

    eprintln!("\n== tier 1/3: host (cargo test --workspace)");
    let host = match cargo()
        .args(["test", "--workspace", "--exclude", "rdmatrace-ebpf"])
        .status()
    {
        Ok(s) if s.success() => Tier::Passed,
        Ok(s) => Tier::Failed(format!("cargo test: {s}")),
        Err(e) => Tier::Failed(format!("cannot run cargo test: {e}")),
    };

    eprintln!("\n== tier 2/3: {CROSS} (target/cross)");
    let cross = if host_only {
        Tier::Skipped("--host-only was given".into())
    } else {
        cross_tier()
    };

    eprintln!("\n== tier 3/3: lab (real RDMA programs on Soft-RoCE in a VM, on each lab kernel)");
    let mut tiers = vec![("host".to_string(), host), (CROSS.to_string(), cross)];
    if host_only {
        tiers.push(("lab".into(), Tier::Skipped("--host-only was given".into())));
    } else if no_lab {
        tiers.push(("lab".into(), Tier::Skipped("--no-lab was given".into())));
    } else {
        tiers.extend(lab_tiers());
    }

    let mut ok = true;
    eprintln!("\n== summary");
    for (name, tier) in &tiers {
        match tier {
            Tier::Passed => eprintln!("  {name:<5} passed"),
            Tier::Failed(why) => {
                ok = false;
                eprintln!("  {name:<5} FAILED: {why}");
            }
            Tier::Skipped(why) => {
                eprintln!("  {name:<5} SKIPPED (not run!): {why}");
                eprintln!("  ************ the {name} tier did not run; its tests prove nothing here ************");
                // --require-lab is about the lab; a cross build that could not be set up (no
                // apt, no rustup target) is reported loudly but does not fail the run.
                if require_lab && name.starts_with("lab") {
                    ok = false;
                    eprintln!("  {name:<5} is required here (--require-lab or CI=true): failing");
                }
            }
        }
    }
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
