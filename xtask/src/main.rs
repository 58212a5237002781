//! Project automation: `cargo xtask <bootstrap|lab|test|demo|bench|fuzz|fixtures|cross>`.
//!
//! Everything a fresh machine needs is installed here, idempotently: a second run costs seconds
//! and says what it skipped.

mod bench;
mod bootstrap;
mod cmd;
mod cross;
mod demo;
mod fixtures;
mod fuzz;
mod lab;
mod test;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "xtask")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Install the eBPF toolchain (nightly rust-src, bpf-linker) and, with --lab, the lab's
    /// packages (qemu, backports kernel with rdma_rxe, rdma-core tools, virtme-ng).
    Bootstrap {
        #[arg(long)]
        lab: bool,
    },
    /// Boot the Soft-RoCE lab VM and run CMD inside (bash, cwd = repo root); a shell without CMD.
    /// With `--hosts 2`: two VMs, lab-a and lab-b, joined by a wire, CMD run on both.
    Lab {
        /// 1: one VM with two NICs on one wire; 2: two VMs (CMD required).
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=2))]
        hosts: u8,
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        cmd: Vec<String>,
    },
    /// Run every test tier: host (cargo test), the host tests that need root or a tool (run by
    /// name when this machine has it, else listed as skipped), cross (aarch64 build only) and
    /// lab (real RDMA programs under the tracer).
    Test {
        /// Fail instead of skipping when a tier cannot run: the lab, or host tests that need
        /// root or a tool this machine lacks (CI=true has the same effect).
        #[arg(long)]
        require_lab: bool,
        /// Only the host tier (the cross and lab tiers are reported as skipped).
        #[arg(long)]
        host_only: bool,
        /// The host and cross tiers, not the lab (reported as skipped): no VM is booted.
        #[arg(long, conflicts_with = "require_lab")]
        no_lab: bool,
    },
    /// The main job on the embedded default: boot the lab and trace a real ibv_rc_pingpong.
    Demo,
    /// Measure what rdmatrace costs (replay, recording size, ingest storm, lab overhead vs
    /// bpftrace) and write BENCHMARKS.md. Not part of `test`.
    Bench {
        /// Interleaved lab rounds (each: no tracer, rdmatrace, bpftrace).
        #[arg(long, default_value_t = 5)]
        rounds: u32,
        /// Length of the ingest storm on this host.
        #[arg(long, default_value_t = 10)]
        storm_secs: u32,
        /// Leave out the lab (perftest overhead, attach time).
        #[arg(long)]
        skip_lab: bool,
    },
    /// Re-record the golden fixtures (tests/fixtures/lab-*.rdmt) in one lab boot with today's
    /// probe set; then bless the goldens (INSTA_UPDATE=always cargo test -p rdmatrace).
    Fixtures,
    /// Fuzz the recording reader and the event decoder (nightly, cargo-fuzz); the corpus is
    /// kept in fuzz/corpus and replayed by the host tier.
    Fuzz {
        /// Total time, split evenly between the targets.
        #[arg(long, default_value_t = 600)]
        secs: u64,
    },
    /// Build the kernel programs and the release rdmatrace for aarch64-unknown-linux-gnu (Grace
    /// hosts) into target/cross, installing the target and the cross linker when missing; checks
    /// the result is an aarch64 ELF. Build only: x86_64 is the tested architecture.
    Cross {
        /// Build std from nightly's rust-src even when rustup has rust-std for the target (the
        /// fallback taken when rustup cannot fetch it).
        #[arg(long)]
        build_std: bool,
    },
}

fn run() -> anyhow::Result<ExitCode> {
    match Cli::parse().command {
        Command::Bootstrap { lab } => {
            bootstrap::toolchain()?;
            bootstrap::browser()?;
            if lab {
                bootstrap::lab()?;
                bootstrap::old_lab_kernel()?;
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Lab { hosts, cmd } => {
            bootstrap::lab()?;
            let cmd = (!cmd.is_empty()).then(|| cmd.join(" "));
            let status = match (hosts, cmd) {
                (1, cmd) => lab::run(cmd.as_deref())?,
                (_, Some(cmd)) => lab::run_two(None, &cmd)?,
                (_, None) => anyhow::bail!("lab --hosts 2 needs a command to run on both hosts"),
            };
            Ok(ExitCode::from(status.clamp(0, 255) as u8))
        }
        Command::Test {
            require_lab,
            host_only,
            no_lab,
        } => test::run(require_lab, host_only, no_lab),
        Command::Demo => demo::run(),
        Command::Fixtures => {
            fixtures::run()?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Fuzz { secs } => {
            fuzz::run(secs)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Cross { build_std } => {
            cross::main(build_std)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Bench {
            rounds,
            storm_secs,
            skip_lab,
        } => {
            bench::run(&bench::BenchOptions {
                rounds,
                storm_secs,
                skip_lab,
            })?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn main() -> ExitCode {
    match run() {
        Ok(code) => code,
        Err(e) => {
            eprintln!("xtask: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
