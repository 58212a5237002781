//! `cargo xtask test`: every tier, loudly reporting any tier or test that could not run.
//!
//! - host: `cargo test --workspace` (unit, decode, golden, CLI), with its counts.
//! - cross (aarch64, build only): `cargo xtask cross`, the kernel programs and the release binary
//!   for aarch64-unknown-linux-gnu in `target/cross`; nothing of it runs (x86_64 is the tested
//!   architecture). Skipped with the reason when the machine cannot be set up for it.
//! - root, chromium: host tests that need what a machine may lack. `cargo test` cannot skip a
//!   test at run time, so they are `#[ignore = "needs ...: why"]` with a name prefix per need
//!   ([`NEEDS`]); they run here, by name, when this machine has what they need, and are listed
//!   as SKIPPED with the reason otherwise. Never counted as passed without running.
//! - lab: the `lab*` integration tests, run with `--ignored` inside the lab VM, where real RDMA
//!   programs run under the tracer: one boot per lab kernel (Debian backports' newest with
//!   rdma_rxe, and bookworm's 6.1), the same binaries on both.

use std::{
    collections::BTreeMap,
    io::{BufRead as _, BufReader},
    os::unix::fs::MetadataExt as _,
    path::Path,
    process::{Command, ExitCode, ExitStatus, Stdio},
};

use anyhow::Context as _;

use crate::{bootstrap, cmd, cross};

mod lab_tier;
use lab_tier::lab_tiers;

enum Tier {
    Passed(String),
    Failed(String),
    Skipped(String),
}

fn cargo() -> Command {
    let mut c = Command::new("cargo");
    c.current_dir(cmd::repo_root())
        .env("PATH", cmd::path_with_cargo_bin());
    c
}

/// What a host test may need besides a build.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Need {
    /// The lab VM: run by the lab tier, never on the host.
    Lab,
    Root,
    /// A host without an RDMA stack (where the degrade path can be seen).
    NoRdmaStack,
    Libibverbs,
    Chromium,
    /// Prometheus' `promtool` (and the `prometheus` server, same package).
    Promtool,
    /// DuckDB's Python package in the bootstrap's venv.
    Duckdb,
}

/// An ignored test's tier and needs, by the start of its name (the first match wins).
const NEEDS: &[(&str, &str, &[Need])] = &[
    ("lab_", "lab", &[Need::Lab]),
    ("root_nordma_", "root", &[Need::Root, Need::NoRdmaStack]),
    ("root_verbs_", "root", &[Need::Root, Need::Libibverbs]),
    ("root_", "root", &[Need::Root]),
    ("chromium_", "chromium", &[Need::Chromium]),
    ("promtool_", "promtool", &[Need::Promtool]),
    ("duckdb_", "duckdb", &[Need::Duckdb]),
    ("verbs_", "verbs", &[Need::Libibverbs]),
];

/// The tier and needs of the ignored test `name` (a unit test's path or an integration test's
/// name); `None` when its name follows no convention of [`NEEDS`].
fn needs_of(name: &str) -> Option<(&'static str, &'static [Need])> {
    let leaf = name.rsplit("::").next().unwrap_or(name);
    NEEDS
        .iter()
        .find(|(prefix, _, _)| leaf.starts_with(prefix))
        .map(|(_, tier, needs)| (*tier, *needs))
}

fn in_path(name: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(name).is_file()))
}

impl Need {
    /// Why this machine lacks it; `None` when it has it.
    fn missing(self) -> Option<String> {
        match self {
            Need::Lab => Some("runs in the lab VM (the lab tier)".into()),
            Need::Root => {
                let uid = std::fs::metadata("/proc/self").map(|m| m.uid());
                (!matches!(uid, Ok(0))).then(|| match uid {
                    Ok(uid) => format!("needs root, and this runs as uid {uid}"),
                    Err(e) => format!("needs root, and this cannot tell its uid: {e}"),
                })
            }
            Need::NoRdmaStack => Path::new("/sys/kernel/btf/ib_core").exists().then(|| {
                "needs a host without an RDMA stack, and this one has ib_core (the lab tier \
                 covers the other case)"
                    .into()
            }),
            Need::Libibverbs => {
                let dirs = [
                    "/usr/lib/x86_64-linux-gnu",
                    "/lib/x86_64-linux-gnu",
                    "/usr/lib64",
                    "/usr/lib",
                ];
                (!dirs
                    .iter()
                    .any(|d| Path::new(d).join("libibverbs.so.1").exists()))
                .then(|| "needs libibverbs.so.1 (apt-get install libibverbs1)".into())
            }
            Need::Chromium => (!["chromium", "chromium-browser", "google-chrome"]
                .iter()
                .any(|n| in_path(n)))
            .then(|| "needs chromium in PATH (apt-get install chromium)".into()),
            Need::Promtool => (!in_path("promtool"))
                .then(|| "needs promtool in PATH (apt-get install prometheus)".into()),
            Need::Duckdb => (!crate::bootstrap::duckdb_python().is_file()).then(|| {
                format!(
                    "needs DuckDB's Python package at {} (cargo xtask bootstrap)",
                    crate::bootstrap::duckdb_python().display()
                )
            }),
        }
    }
}

/// What the test harnesses of one `cargo test` printed.
#[derive(Default, Debug)]
struct Outcome {
    /// Sums of the `test result:` lines.
    passed: usize,
    failed: usize,
    ignored: usize,
    /// Every test that ran: name -> passed.
    ran: BTreeMap<String, bool>,
    /// Every ignored test: (name, the reason of its `#[ignore = "..."]`).
    ignored_tests: Vec<(String, String)>,
}

impl Outcome {
    /// Reads one line of libtest's output.
    fn read(&mut self, line: &str) {
        if let Some(counts) = line.strip_prefix("test result: ") {
            // `ok. 70 passed; 0 failed; 3 ignored; 0 measured; 0 filtered out; finished in 0.19s`
            for part in counts.split(['.', ';']) {
                let mut words = part.split_whitespace();
                let (Some(Ok(n)), Some(what)) =
                    (words.next().map(str::parse::<usize>), words.next())
                else {
                    continue;
                };
                match what {
                    "passed" => self.passed += n,
                    "failed" => self.failed += n,
                    "ignored" => self.ignored += n,
                    _ => {}
                }
            }
            return;
        }
        let Some((name, result)) = line
            .strip_prefix("test ")
            .and_then(|rest| rest.rsplit_once(" ... "))
        else {
            return;
        };
        if let Some(reason) = result.strip_prefix("ignored") {
            let reason = reason.trim_start_matches(',').trim();
            self.ignored_tests
                .push((name.to_string(), reason.to_string()));
        } else if result == "ok" || result == "FAILED" {
            self.ran.insert(name.to_string(), result == "ok");
        }
    }

    fn counts(&self) -> String {
        format!(
            "{} passed, {} failed, {} ignored",
            self.passed, self.failed, self.ignored
        )
    }
}

/// Runs `cargo ARGS` (a `cargo test`), relaying its output, and reads what its tests printed.
fn cargo_test(args: &[&str]) -> anyhow::Result<(ExitStatus, Outcome)> {
    let mut child = cargo()
        .args(args)
        .stdout(Stdio::piped())
        .spawn()
        .context("cannot run cargo test")?;
    let mut out = BufReader::new(child.stdout.take().context("no stdout")?);
    let mut outcome = Outcome::default();
    let mut buf = Vec::new();
    loop {
        buf.clear();
        if out
            .read_until(b'\n', &mut buf)
            .context("reading cargo test")?
            == 0
        {
            break;
        }
        let line = String::from_utf8_lossy(&buf);
        let line = line.trim_end_matches(['\n', '\r']);
        println!("{line}");
        outcome.read(line);
    }
    let status = child.wait().context("waiting for cargo test")?;
    Ok((status, outcome))
}

const HOST_TEST: &[&str] = &[
    "test",
    "--workspace",
    "--exclude",
    "rdmatrace-ebpf",
    "--no-fail-fast",
];

/// Tests not run: (name, why).
type SkippedTests = Vec<(String, String)>;

/// One tier of ignored host tests: its name, the tests to run, the skipped ones.
type Group = (&'static str, Vec<String>, SkippedTests);

/// The ignored host tests by tier, in [`NEEDS`] order; the lab's are left to the lab tier and
/// only counted.
struct Ignored {
    lab: usize,
    tiers: Vec<Group>,
}

fn group<'a>(tiers: &'a mut Vec<Group>, name: &'static str) -> &'a mut Group {
    let i = match tiers.iter().position(|(t, _, _)| *t == name) {
        Some(i) => i,
        None => {
            tiers.push((name, Vec::new(), Vec::new()));
            tiers.len() - 1
        }
    };
    &mut tiers[i]
}

fn sort_ignored(tests: &[(String, String)]) -> Ignored {
    let mut lab = 0;
    let mut tiers = Vec::new();
    for (name, reason) in tests {
        // A doc example marked `ignore` is an example, not a test with needs.
        if name.contains(" (line ") {
            continue;
        }
        let Some((tier, needs)) = needs_of(name) else {
            let why = format!("ignored, and its name says nothing of what it needs [{reason}]");
            group(&mut tiers, "other").2.push((name.clone(), why));
            continue;
        };
        if needs.contains(&Need::Lab) {
            lab += 1;
            continue;
        }
        let missing: Vec<String> = needs.iter().filter_map(|n| n.missing()).collect();
        let g = group(&mut tiers, tier);
        if missing.is_empty() {
            g.1.push(name.clone());
        } else {
            g.2.push((name.clone(), format!("{} [{reason}]", missing.join("; "))));
        }
    }
    tiers.sort_by_key(|(t, _, _)| {
        NEEDS
            .iter()
            .position(|(_, n, _)| n == t)
            .unwrap_or(NEEDS.len())
    });
    Ignored { lab, tiers }
}

/// Runs the ignored host tests whose needs are met, by exact name; one tier per need group.
/// `(tier name, result, skipped tests with why)`.
fn needs_tiers(ignored: &Ignored) -> Vec<(String, Tier, SkippedTests)> {
    let runnable: Vec<&str> = ignored
        .tiers
        .iter()
        .flat_map(|(_, run, _)| run.iter().map(String::as_str))
        .collect();
    let mut ran = Outcome::default();
    let mut error = None;
    if !runnable.is_empty() {
        // `--tests`: not the doc examples again.
        let mut args: Vec<&str> = HOST_TEST.to_vec();
        args.extend(["--tests", "--", "--ignored", "--exact"]);
        args.extend(&runnable);
        match cargo_test(&args) {
            Ok((status, outcome)) => {
                if !status.success() && outcome.failed == 0 {
                    error = Some(format!("cargo test: {status}"));
                }
                ran = outcome;
            }
            Err(e) => error = Some(format!("{e:#}")),
        }
    }
    ignored
        .tiers
        .iter()
        .map(|(tier, run, skipped)| {
            let passed = run
                .iter()
                .filter(|n| ran.ran.get(*n) == Some(&true))
                .count();
            let failed: Vec<&str> = run
                .iter()
                .filter(|n| ran.ran.get(*n) != Some(&true))
                .map(String::as_str)
                .collect();
            let total = run.len() + skipped.len();
            let result = if !failed.is_empty() {
                let why = error
                    .clone()
                    .map_or_else(String::new, |e| format!(" ({e})"));
                Tier::Failed(format!(
                    "{passed} of {total} passed; failed or did not run: {}{why}",
                    failed.join(", ")
                ))
            } else if !skipped.is_empty() {
                Tier::Skipped(format!(
                    "{passed} of {total} ran and passed; {} not run",
                    skipped.len()
                ))
            } else {
                Tier::Passed(format!("{passed} of {total} ran and passed"))
            };
            (tier.to_string(), result, skipped.clone())
        })
        .collect()
}

const CROSS: &str = "cross (aarch64, build only)";

/// The cross tier: builds for aarch64 (installing what is missing), runs nothing.
fn cross_tier() -> Tier {
    match cross::run(false) {
        Ok(built) => Tier::Passed(format!(
            "{} ({} bytes, ELF aarch64) built in {:.1} s",
            built.binary.display(),
            built.bytes,
            built.elapsed.as_secs_f64()
        )),
        Err(e @ cross::Error::Setup(_)) => Tier::Skipped(e.to_string()),
        Err(e @ cross::Error::Build(_)) => Tier::Failed(e.to_string()),
    }
}

pub fn run(require_lab: bool, host_only: bool, no_lab: bool) -> anyhow::Result<ExitCode> {
    let strict = require_lab || std::env::var("CI").is_ok_and(|v| v == "true");
    bootstrap::toolchain()?;
    bootstrap::workload_deps()?;
    bootstrap::browser()?;

    eprintln!("\n== tier 1/4: host (cargo test --workspace)");
    let (host, ignored) = match cargo_test(HOST_TEST) {
        Ok((status, out)) => {
            let ignored = sort_ignored(&out.ignored_tests);
            let needing: usize = ignored
                .tiers
                .iter()
                .map(|(_, run, skipped)| run.len() + skipped.len())
                .sum();
            let counts = format!(
                "{} (of the ignored: {} lab tests for the lab tier, {needing} that need root or \
                 a tool: next tier)",
                out.counts(),
                ignored.lab
            );
            let tier = if status.success() {
                Tier::Passed(counts)
            } else {
                Tier::Failed(format!("{counts}; cargo test: {status}"))
            };
            (tier, ignored)
        }
        Err(e) => (
            Tier::Failed(format!("{e:#}")),
            Ignored {
                lab: 0,
                tiers: Vec::new(),
            },
        ),
    };
    let mut tiers = vec![("host".to_string(), host, Vec::new())];

    eprintln!(
        "\n== tier 2/4: host tests that need root or a tool (ignored by cargo test), by name"
    );
    tiers.extend(needs_tiers(&ignored));

    eprintln!("\n== tier 3/4: {CROSS} (target/cross)");
    let cross = if host_only {
        Tier::Skipped("--host-only was given".into())
    } else {
        cross_tier()
    };
    tiers.push((CROSS.to_string(), cross, Vec::new()));

    eprintln!("\n== tier 4/4: lab (real RDMA programs on Soft-RoCE in a VM, on each lab kernel)");
    if host_only || no_lab {
        let why = if host_only { "--host-only" } else { "--no-lab" };
        tiers.push((
            "lab".into(),
            Tier::Skipped(format!("{why} was given")),
            Vec::new(),
        ));
    } else {
        tiers.extend(lab_tiers().into_iter().map(|(n, t)| (n, t, Vec::new())));
    }

    let mut ok = true;
    eprintln!("\n== summary");
    for (name, tier, skipped_tests) in &tiers {
        match tier {
            Tier::Passed(what) => eprintln!("  {name:<9} passed: {what}"),
            Tier::Failed(why) => {
                ok = false;
                eprintln!("  {name:<9} FAILED: {why}");
            }
            Tier::Skipped(why) => {
                eprintln!("  {name:<9} SKIPPED (not run!): {why}");
                for (test, why) in skipped_tests {
                    eprintln!("  {:<9}   SKIPPED (not run!) {test}: {why}", "");
                }
                eprintln!("  ************ tests of the {name} tier did not run; they prove nothing here ************");
                // A cross build the machine cannot be set up for (no apt, no rustup target) is
                // reported loudly but does not fail the run: nothing of it is tested anyway.
                if strict && name != CROSS {
                    ok = false;
                    eprintln!("  {name:<9} is required here (--require-lab or CI=true): failing");
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn libtest_lines_are_counted_and_ignored_tests_keep_their_reason() {
        let mut o = Outcome::default();
        for line in [
            "running 3 tests",
            "test root_x ... ignored, needs root: records with eBPF",
            "test lab_y ... ignored",
            "test a::tests::b ... ok",
            "test c ... FAILED",
            "test result: FAILED. 1 passed; 1 failed; 2 ignored; 0 measured; 0 filtered out; finished in 0.19s",
            "test result: ok. 7 passed; 0 failed; 0 ignored; 0 measured; 3 filtered out; finished in 1.00s",
        ] {
            o.read(line);
        }
        assert_eq!((o.passed, o.failed, o.ignored), (8, 1, 2));
        assert_eq!(
            o.ignored_tests,
            [
                (
                    "root_x".to_string(),
                    "needs root: records with eBPF".to_string()
                ),
                ("lab_y".to_string(), String::new())
            ]
        );
        assert_eq!(o.ran.get("a::tests::b"), Some(&true));
        assert_eq!(o.ran.get("c"), Some(&false));
    }

    #[test]
    fn needs_come_from_the_name_prefix_of_the_test_itself() {
        assert_eq!(needs_of("lab_rc_pingpong").map(|n| n.0), Some("lab"));
        assert_eq!(
            needs_of("root_nordma_doctor"),
            Some(("root", &[Need::Root, Need::NoRdmaStack][..]))
        );
        assert_eq!(
            needs_of("loader::tests::root_verbs_x"),
            Some(("root", &[Need::Root, Need::Libibverbs][..]))
        );
        assert_eq!(needs_of("root_x"), Some(("root", &[Need::Root][..])));
        assert_eq!(needs_of("chromium_draws").map(|n| n.0), Some("chromium"));
        assert_eq!(needs_of("a_root_in_the_middle"), None);
        // Lab tests are never runnable on the host; unknown ones are reported, not dropped.
        let sorted = sort_ignored(&[
            ("lab_a".into(), "lab: needs the VM".into()),
            ("mystery".into(), "why not".into()),
            ("src/lib.rs - f (line 3)".into(), String::new()),
        ]);
        assert_eq!(sorted.lab, 1);
        assert_eq!(sorted.tiers.len(), 1);
        let (tier, run, skipped) = &sorted.tiers[0];
        assert_eq!((*tier, run.len(), skipped.len()), ("other", 0, 1));
    }
}
