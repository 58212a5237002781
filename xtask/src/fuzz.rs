//! `cargo xtask fuzz [--secs N]`: the cargo-fuzz targets in `fuzz/` (recording file, chunk
//! payload, single record), N seconds split evenly between them, on nightly. Installs
//! cargo-fuzz once. The corpus stays in `fuzz/corpus/<target>/` (minimized after the run, so it
//! can be committed) and the host test `tests/fuzz_corpus.rs` replays it without nightly.

use std::process::Command;

use anyhow::Context as _;

use crate::cmd;

pub const TARGETS: [&str; 3] = ["recording", "chunk", "record"];

fn cargo_fuzz_present() -> bool {
    cmd::output(
        Command::new("cargo")
            .env("PATH", cmd::path_with_cargo_bin())
            .args(["fuzz", "--version"]),
    )
    .is_some()
}

fn install() -> anyhow::Result<()> {
    if cargo_fuzz_present() {
        eprintln!("fuzz: cargo-fuzz present (skipped)");
        return Ok(());
    }
    eprintln!("fuzz: installing cargo-fuzz");
    cmd::run(
        Command::new("cargo")
            .env("PATH", cmd::path_with_cargo_bin())
            .args(["install", "--locked", "cargo-fuzz"]),
    )
}

fn cargo_fuzz(args: &[&str]) -> Command {
    let mut c = Command::new("cargo");
    c.current_dir(cmd::repo_root())
        .env("PATH", cmd::path_with_cargo_bin())
        // The fuzzed code is user space only: no eBPF build under the sanitizer flags.
        .env("AYA_BUILD_SKIP", "1")
        .args(["+nightly", "fuzz"])
        .args(args);
    c
}

pub fn run(secs: u64) -> anyhow::Result<()> {
    crate::bootstrap::toolchain()?;
    install()?;
    let each = (secs / TARGETS.len() as u64).max(1);
    for target in TARGETS {
        let corpus = cmd::repo_root().join("fuzz/corpus").join(target);
        std::fs::create_dir_all(&corpus)
            .with_context(|| format!("cannot create {}", corpus.display()))?;
        eprintln!("fuzz: {target} for {each} s");
        cmd::run(&mut cargo_fuzz(&[
            "run",
            target,
            "--",
            &format!("-max_total_time={each}"),
            "-max_len=65536",
            "-timeout=10",
        ]))
        .with_context(|| format!("fuzz target {target} failed (see fuzz/artifacts/{target}/)"))?;
        // Keep the corpus small enough to commit: only inputs that add coverage.
        cmd::run(&mut cargo_fuzz(&["cmin", target]))?;
    }
    Ok(())
}
