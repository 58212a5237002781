//! `cargo xtask fixtures`: re-records the golden fixtures (`tests/fixtures/lab-*.rdmt`) in one
//! lab boot with today's probe set (`xtask/lab/fixtures.sh`: an ibv_rc_pingpong pair and a
//! refused modify, ib_write_bw and a TCP transfer under 5% loss, a dead peer, verbs stacks, RDMA beside a TCP fallback),
//! so the goldens show what rdmatrace records today; then, in one boot of the two-host lab
//! (`xtask/lab/fixtures2.sh`), both sides of four ib_write_bw runs across two hosts
//! (`tests/fixtures/two-host-*.rdmt`). Then bless the goldens:
//! `INSTA_UPDATE=always cargo test -p rdmatrace` and review the snapshot diff.

use std::{fs, process::Command};

use anyhow::{bail, Context as _};

use crate::{bootstrap, cmd, lab};

/// The fixtures the script records, in `tests/fixtures/`.
pub const FIXTURES: [&str; 5] = [
    "lab-pingpong",
    "lab-loss",
    "lab-deadpeer",
    "lab-verbs",
    "lab-verdicts",
];

pub fn run() -> anyhow::Result<()> {
    bootstrap::lab()?;
    let root = cmd::repo_root();
    cmd::run(
        Command::new("cargo")
            .current_dir(&root)
            .env("PATH", cmd::path_with_cargo_bin())
            .args(["build", "-p", "rdmatrace", "-p", "rdmatrace-workloads"]),
    )?;
    let out = root.join("target/lab/fixtures");
    let _ = fs::remove_dir_all(&out);
    let script = format!(
        "FIXTURES_OUT={out} RDMATRACE_BIN={bin} RDMATRACE_WORKLOADS={w} bash {script}",
        out = out.display(),
        bin = root.join("target/debug/rdmatrace").display(),
        w = root.join("target/debug").display(),
        script = root.join("xtask/lab/fixtures.sh").display(),
    );
    let status = lab::run(Some(&script))?;
    if status != 0 {
        bail!(
            "recording the fixtures failed in the lab (status {status}); logs in {}",
            out.display()
        );
    }
    for name in FIXTURES {
        let from = out.join(format!("{name}.rdmt"));
        let to = root.join(format!("tests/fixtures/{name}.rdmt"));
        fs::copy(&from, &to)
            .with_context(|| format!("cannot copy {} to {}", from.display(), to.display()))?;
        eprintln!(
            "fixtures: {} ({} bytes)",
            to.display(),
            fs::metadata(&to)?.len()
        );
    }
    two_hosts(&root)?;
    eprintln!(
        "fixtures: re-recorded; the programs' own output is in {} (bless the goldens with \
         INSTA_UPDATE=always cargo test -p rdmatrace, then review the diff)",
        out.display()
    );
    Ok(())
}

/// The scenarios `xtask/lab/fixtures2.sh` records on both hosts.
const TWO_HOST: [&str; 4] = ["healthy", "loss-a", "loss-b", "peer-dead"];

/// Records the two-host fixtures (a release build of the tracer: two emulated VMs share the
/// machine's cores).
fn two_hosts(root: &std::path::Path) -> anyhow::Result<()> {
    cmd::run(
        Command::new("cargo")
            .current_dir(root)
            .env("PATH", cmd::path_with_cargo_bin())
            .args([
                "build",
                "--release",
                "-p",
                "rdmatrace",
                "--bin",
                "rdmatrace",
            ]),
    )?;
    let out = root.join("target/lab/fixtures2");
    let _ = fs::remove_dir_all(&out);
    let script = format!(
        "FIXTURES_OUT={out} RDMATRACE_BIN={bin} bash {script}",
        out = out.display(),
        bin = root.join("target/release/rdmatrace").display(),
        script = root.join("xtask/lab/fixtures2.sh").display(),
    );
    let status = lab::run_two(None, &script)?;
    if status != 0 {
        bail!(
            "recording the two-host fixtures failed (status {status}); logs in {}",
            out.display()
        );
    }
    for name in TWO_HOST {
        for host in ["a", "b"] {
            let file = format!("two-host-{name}-{host}.rdmt");
            let to = root.join("tests/fixtures").join(&file);
            fs::copy(out.join(&file), &to)
                .with_context(|| format!("cannot copy {file} to {}", to.display()))?;
            eprintln!(
                "fixtures: {} ({} bytes)",
                to.display(),
                fs::metadata(&to)?.len()
            );
        }
    }
    Ok(())
}
