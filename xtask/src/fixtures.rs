//! `cargo xtask fixtures`: re-records the golden fixtures (`tests/fixtures/lab-*.rdmt`) in one
//! lab boot with today's probe set (`xtask/lab/fixtures.sh`: an ibv_rc_pingpong pair and a
//! refused modify, ib_write_bw and a TCP transfer under 5% loss, a dead peer, verbs stacks, RDMA beside a TCP fallback),
//! so the goldens show what rdmatrace records today. Then bless the goldens:
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
    eprintln!(
        "fixtures: re-recorded; the programs' own output is in {} (bless the goldens with \
         INSTA_UPDATE=always cargo test -p rdmatrace, then review the diff)",
        out.display()
    );
    Ok(())
}
