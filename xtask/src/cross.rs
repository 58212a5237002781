//! `cargo xtask cross`: the kernel programs and the release `rdmatrace` for
//! aarch64-unknown-linux-gnu (Grace hosts), and a check that the result is an aarch64 ELF.
//!
//! Build only: x86_64 is the tested architecture and nothing built here is run. The kernel
//! programs follow the target through aya-build (`--cfg bpf_target_arch="aarch64"`, from the
//! build script's target arch); `rdmatrace-ebpf/src/regs.rs` holds the per-architecture register
//! access. What is missing is installed first, idempotently: the target's standard library
//! (`rustup target add`, or, when rustup cannot fetch it, std built from nightly's rust-src) and
//! the cross linker (Debian's gcc-aarch64-linux-gnu, libc6-dev-arm64-cross). `zstd-sys` compiles
//! C for the target: `CC_`/`AR_` for the target point at the cross tools, so it does not pick
//! the host's gcc.
//!
//! The build goes to `target/cross` (`target/cross/build-std` on the fallback), so it never
//! invalidates the host builds in `target/debug` and `target/release`; the linker is set on the
//! cargo command only, not in a committed config that would reach other builds.

use std::{
    fmt,
    io::Read as _,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{bail, Context as _};

use crate::{
    bootstrap,
    cmd::{self, find_tool, output},
};

pub const TARGET: &str = "aarch64-unknown-linux-gnu";
const LINKER: &str = "aarch64-linux-gnu-gcc";
const AR: &str = "aarch64-linux-gnu-ar";
/// Debian packages of the cross linker and the target's C library (crt files, libc, libgcc_s).
const PACKAGES: &[&str] = &["gcc-aarch64-linux-gnu", "libc6-dev-arm64-cross"];
/// ELF `e_machine` values.
const EM_AARCH64: u16 = 183;
const EM_BPF: u16 = 247;
/// How long `rustup target add` may take before we give up on rustup and build std instead.
const RUSTUP_TIMEOUT: Duration = Duration::from_secs(180);

fn say(what: &str) {
    eprintln!("cross: {what}");
}

/// Why a cross build did not happen: the machine could not be set up (the tier is skipped), or
/// the build itself failed (a real failure).
pub enum Error {
    Setup(anyhow::Error),
    Build(anyhow::Error),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Setup(e) => write!(f, "cannot set up the aarch64 cross build: {e:#}"),
            Error::Build(e) => write!(f, "{e:#}"),
        }
    }
}

/// What a cross build produced.
pub struct Built {
    pub binary: PathBuf,
    pub bytes: u64,
    /// The kernel programs embedded in it (bpfel ELF), as aya-build left them.
    pub probes: PathBuf,
    pub probes_bytes: u64,
    pub elapsed: Duration,
}

/// How the target's standard library is had.
#[derive(Clone, Copy, PartialEq)]
enum Std {
    /// rust-std of the default toolchain (`rustup target add`).
    Prebuilt,
    /// Built by nightly cargo from rust-src (`-Z build-std`), when rustup cannot fetch rust-std.
    BuildStd,
}

/// Installs what is missing, builds, checks. `force_build_std` takes the rust-src fallback even
/// when rust-std could be had (to exercise that path).
pub fn run(force_build_std: bool) -> Result<Built, Error> {
    let std = if force_build_std {
        say("--build-std given: building std for the target from nightly's rust-src");
        Std::BuildStd
    } else {
        target_std().map_err(Error::Setup)?
    };
    linker().map_err(Error::Setup)?;
    build(std).map_err(Error::Build)
}

/// Is rust-std for the target in the default toolchain? Otherwise try `rustup target add` once,
/// then fall back to building std from nightly's rust-src (installed by bootstrap).
fn target_std() -> anyhow::Result<Std> {
    let installed =
        output(Command::new("rustup").args(["target", "list", "--installed"])).unwrap_or_default();
    if installed.lines().any(|l| l.trim() == TARGET) {
        say(&format!("rust-std for {TARGET} present (skipped)"));
        return Ok(Std::Prebuilt);
    }
    say(&format!(
        "installing rust-std for {TARGET} (rustup target add)"
    ));
    let why = match run_with_timeout(
        Command::new("rustup").args(["target", "add", TARGET]),
        RUSTUP_TIMEOUT,
    ) {
        Ok(()) => return Ok(Std::Prebuilt),
        Err(e) => e,
    };
    let src = output(Command::new("rustup").args([
        "component",
        "list",
        "--installed",
        "--toolchain",
        "nightly",
    ]))
    .unwrap_or_default();
    if !src.lines().any(|l| l.starts_with("rust-src")) {
        bail!("rustup target add failed ({why:#}) and nightly has no rust-src to build std from");
    }
    say(&format!(
        "rustup target add failed ({why:#}): building std for {TARGET} from nightly's rust-src instead"
    ));
    Ok(Std::BuildStd)
}

/// Runs `cmd` (output relayed); fails on a non-zero exit, or kills it after `limit`.
fn run_with_timeout(cmd: &mut Command, limit: Duration) -> anyhow::Result<()> {
    let mut child = cmd
        .spawn()
        .with_context(|| format!("cannot start {cmd:?}"))?;
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait()? {
            anyhow::ensure!(status.success(), "{cmd:?} failed: {status}");
            return Ok(());
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            bail!("{cmd:?} did not finish in {} s", limit.as_secs());
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The cross linker and the target's C library, from Debian's packages when missing.
fn linker() -> anyhow::Result<()> {
    let missing: Vec<&str> = PACKAGES
        .iter()
        .copied()
        .filter(|p| !bootstrap::installed(p))
        .collect();
    if missing.is_empty() {
        say(&format!(
            "{} present ({}) (skipped)",
            LINKER,
            PACKAGES.join(", ")
        ));
        return Ok(());
    }
    if !Path::new("/usr/bin/apt-get").exists() {
        if let Some(gcc) = find_tool(LINKER) {
            say(&format!(
                "no apt-get here: using {} as it is (its aarch64 C library is not checked)",
                gcc.display()
            ));
            return Ok(());
        }
        bail!("{LINKER} is missing and this machine has no apt-get to install it");
    }
    // A fresh machine's package lists may not know the cross packages yet: update them once.
    let known = |p: &str| output(Command::new("apt-cache").args(["show", "-q", p])).is_some();
    if !missing.iter().all(|p| known(p)) {
        say("apt does not know the cross packages yet: apt-get update");
        cmd::run(Command::new("apt-get").args(["update", "-q"]))?;
    }
    say(&format!("installing {}", missing.join(" ")));
    cmd::run(
        Command::new("apt-get")
            .args(["install", "-y", "-q", "--no-install-recommends"])
            .args(&missing)
            .env("DEBIAN_FRONTEND", "noninteractive"),
    )?;
    anyhow::ensure!(
        find_tool(LINKER).is_some(),
        "{} installed but {LINKER} is not in PATH",
        PACKAGES.join(" ")
    );
    Ok(())
}

/// Where a cross build goes: its own target dir, apart from the host builds.
fn target_dir(std: Std) -> PathBuf {
    let dir = cmd::repo_root().join("target/cross");
    match std {
        Std::Prebuilt => dir,
        Std::BuildStd => dir.join("build-std"),
    }
}

fn build(std: Std) -> anyhow::Result<Built> {
    let mut c = match std {
        Std::Prebuilt => Command::new("cargo"),
        Std::BuildStd => {
            let mut c = Command::new("rustup");
            c.args(["run", "nightly", "cargo"]);
            c
        }
    };
    c.current_dir(cmd::repo_root())
        .env("PATH", cmd::path_with_cargo_bin())
        // The embedded kernel programs are the point: never the empty stand-in.
        .env_remove("AYA_BUILD_SKIP")
        .args([
            "build",
            "--release",
            "-p",
            "rdmatrace",
            "--bin",
            "rdmatrace",
        ])
        .args(["--target", TARGET])
        .arg("--target-dir")
        .arg(target_dir(std))
        .arg("--message-format=json-render-diagnostics")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    if std == Std::BuildStd {
        // The release profile aborts on panic, so std is built with panic_abort.
        c.args(["-Z", "build-std=std,panic_abort"]);
    }
    let key = TARGET.replace('-', "_");
    let linker_var = format!("CARGO_TARGET_{}_LINKER", key.to_uppercase());
    for (var, tool) in [
        (linker_var, LINKER),
        (format!("CC_{key}"), LINKER),
        (format!("AR_{key}"), AR),
    ] {
        if std::env::var_os(&var).is_none() {
            c.env(var, tool);
        }
    }
    say(&format!("building rdmatrace (release) for {TARGET}: {c:?}"));
    let start = Instant::now();
    let out = c.output().with_context(|| format!("cannot start {c:?}"))?;
    let elapsed = start.elapsed();
    anyhow::ensure!(
        out.status.success(),
        "the aarch64 build failed: {}",
        out.status
    );

    let (mut binary, mut out_dir) = (None, None);
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Ok(msg) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        let is_ours = msg["package_id"]
            .as_str()
            .is_some_and(|id| id.contains("/rdmatrace#") || id.contains("rdmatrace "));
        if !is_ours {
            continue;
        }
        if msg["reason"] == "compiler-artifact" && msg["target"]["name"] == "rdmatrace" {
            if let Some(exe) = msg["executable"].as_str() {
                binary = Some(PathBuf::from(exe));
            }
        } else if msg["reason"] == "build-script-executed" {
            if let Some(dir) = msg["out_dir"].as_str() {
                out_dir = Some(PathBuf::from(dir));
            }
        }
    }
    let binary = binary.context("cargo reported no rdmatrace executable")?;
    let probes = out_dir
        .context("cargo reported no build-script run for rdmatrace")?
        .join("rdmatrace-probes");
    let bytes = check_elf(&binary, EM_AARCH64, "aarch64")?;
    let probes_bytes = check_elf(&probes, EM_BPF, "eBPF")?;
    Ok(Built {
        binary,
        bytes,
        probes,
        probes_bytes,
        elapsed,
    })
}

/// Checks that `path` is a 64-bit little-endian ELF for `machine`; returns its size.
fn check_elf(path: &Path, machine: u16, what: &str) -> anyhow::Result<u64> {
    let mut f =
        std::fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let mut head = [0u8; 20];
    f.read_exact(&mut head)
        .with_context(|| format!("{} is shorter than an ELF header", path.display()))?;
    anyhow::ensure!(
        &head[..4] == b"\x7fELF",
        "{} is not an ELF file",
        path.display()
    );
    // EI_CLASS 2 = 64-bit, EI_DATA 1 = little-endian; e_machine is the u16 at offset 18.
    anyhow::ensure!(
        head[4] == 2 && head[5] == 1,
        "{} is not a 64-bit little-endian ELF (class {}, data {})",
        path.display(),
        head[4],
        head[5]
    );
    let found = u16::from_le_bytes([head[18], head[19]]);
    anyhow::ensure!(
        found == machine,
        "{} is an ELF for machine {found}, not {what} ({machine})",
        path.display()
    );
    Ok(f.metadata()?.len())
}

/// `cargo xtask cross`: prints where the binary is, and its size.
pub fn main(force_build_std: bool) -> anyhow::Result<()> {
    bootstrap::toolchain()?;
    let built = run(force_build_std).map_err(|e| anyhow::anyhow!("{e}"))?;
    say(&format!(
        "built in {:.1} s: {} ({} bytes, ELF aarch64), embedding {} ({} bytes, ELF eBPF)",
        built.elapsed.as_secs_f64(),
        built.binary.display(),
        built.bytes,
        built.probes.display(),
        built.probes_bytes
    ));
    say("build only: x86_64 is the tested architecture; this binary was not run");
    Ok(())
}
