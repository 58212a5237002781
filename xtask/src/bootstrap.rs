//! Idempotent installation of what the build, the tests and the lab need. Each step first checks,
//! and says whether it skipped or installed.

use std::{
    fs,
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use anyhow::{bail, Context as _};

use crate::cmd::{cache_dir, find_tool, output, run};

const BPF_LINKER_VERSION: &str = "0.13.0";
const NIGHTLY: &str = "nightly";

fn say(what: &str) {
    eprintln!("bootstrap: {what}");
}

/// nightly rust-src + bpf-linker built against nightly's own libLLVM.
pub fn toolchain() -> anyhow::Result<()> {
    rust_src()?;
    bpf_linker()?;
    Ok(())
}

fn nightly_sysroot() -> anyhow::Result<String> {
    let sysroot =
        output(Command::new("rustup").args(["run", NIGHTLY, "rustc", "--print", "sysroot"]))
            .context(
                "the nightly toolchain is missing (rustup run nightly rustc failed); \
             the eBPF programs need it",
            )?;
    Ok(sysroot.trim().to_string())
}

fn rust_src() -> anyhow::Result<()> {
    let installed = output(Command::new("rustup").args([
        "component",
        "list",
        "--installed",
        "--toolchain",
        NIGHTLY,
    ]))
    .unwrap_or_default();
    if installed.lines().any(|l| l.starts_with("rust-src")) {
        say("nightly rust-src present (skipped)");
        return Ok(());
    }
    say("installing nightly rust-src");
    run(Command::new("rustup").args(["component", "add", "rust-src", "--toolchain", NIGHTLY]))
}

fn bpf_linker() -> anyhow::Result<()> {
    if let Some(linker) = find_tool("bpf-linker") {
        let version = output(Command::new(&linker).arg("--version")).unwrap_or_default();
        if version.contains(BPF_LINKER_VERSION) {
            say(&format!(
                "bpf-linker {BPF_LINKER_VERSION} present at {} (skipped)",
                linker.display()
            ));
            return Ok(());
        }
    }
    // bpf-linker must use the same LLVM as nightly rustc; Debian has no LLVM of that version, so
    // link against the libLLVM shipped inside the nightly toolchain, with an rpath so it runs
    // outside `cargo +nightly`.
    let lib = Path::new(&nightly_sysroot()?).join("lib");
    let llvm = fs::read_dir(&lib)
        .with_context(|| format!("cannot list {}", lib.display()))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("libLLVM.so."))
        })
        .with_context(|| format!("no libLLVM.so.* in {}", lib.display()))?;
    let major = llvm
        .file_name()
        .map(|n| {
            n.to_string_lossy()
                .trim_start_matches("libLLVM.so.")
                .split('.')
                .next()
                .unwrap_or("")
                .to_string()
        })
        .unwrap_or_default();
    let prefix = cache_dir().join("llvm");
    fs::create_dir_all(prefix.join("lib"))?;
    let link = prefix.join("lib/libLLVM.so");
    let _ = fs::remove_file(&link);
    std::os::unix::fs::symlink(&llvm, &link)
        .with_context(|| format!("cannot link {} -> {}", link.display(), llvm.display()))?;
    say(&format!(
        "building bpf-linker {BPF_LINKER_VERSION} against {} (about 2 minutes)",
        llvm.display()
    ));
    run(Command::new("cargo")
        .args([
            "install",
            "bpf-linker",
            "--locked",
            "--version",
            BPF_LINKER_VERSION,
            "--no-default-features",
            "--features",
        ])
        .arg(format!("llvm-{major}"))
        .env("LLVM_PREFIX", &prefix)
        .env(
            "RUSTFLAGS",
            format!("-C link-arg=-Wl,-rpath,{}", lib.display()),
        ))
}

/// Debian packages the lab and the workloads need, `(package, suite)`; `None` = the default suite.
const PACKAGES: &[(&str, Option<&str>)] = &[
    ("qemu-system-x86", Some("bookworm-backports")),
    ("qemu-system-common", Some("bookworm-backports")),
    ("qemu-system-data", Some("bookworm-backports")),
    ("seabios", Some("bookworm-backports")),
    ("linux-image-amd64", Some("bookworm-backports")),
    ("rdma-core", None),
    ("ibverbs-providers", None),
    ("ibverbs-utils", None),
    ("rdmacm-utils", None),
    ("perftest", None),
    // qperf: a healthy RC client whose teardown flushes (a false-positive test of the diagnoses).
    ("qperf", None),
    ("iproute2", None),
    ("kmod", None),
    ("iputils-ping", None),
    // virtme-ng builds the guest's initramfs from a static busybox.
    ("busybox-static", None),
    ("libibverbs-dev", None),
    ("librdmacm-dev", None),
    ("libclang-dev", None),
    ("clang", None),
    ("pkg-config", None),
    // bpftool: the pressure test fills and counts the tracer's maps with it.
    ("bpftool", None),
];

const BACKPORTS: &str = "/etc/apt/sources.list.d/rdmatrace-bookworm-backports.sources";

pub(crate) fn installed(pkg: &str) -> bool {
    output(Command::new("dpkg-query").args(["-W", "-f=${Status}", pkg]))
        .is_some_and(|s| s.contains("install ok installed"))
}

/// Only for the build of the test workloads (rdma-sys needs libibverbs headers and libclang).
pub fn workload_deps() -> anyhow::Result<()> {
    apt(&PACKAGES[14..])
}

fn backports_configured() -> bool {
    let dirs = ["/etc/apt/sources.list.d", "/etc/apt/sources.list"];
    dirs.iter().any(|d| {
        let p = Path::new(d);
        let files: Vec<_> = if p.is_dir() {
            fs::read_dir(p)
                .into_iter()
                .flatten()
                .filter_map(Result::ok)
                .map(|e| e.path())
                .collect()
        } else {
            vec![p.to_path_buf()]
        };
        files
            .iter()
            .any(|f| fs::read_to_string(f).is_ok_and(|s| s.contains("bookworm-backports")))
    })
}

fn apt(pkgs: &[(&str, Option<&str>)]) -> anyhow::Result<()> {
    let missing: Vec<String> = pkgs
        .iter()
        .filter(|(p, _)| !installed(p))
        .map(|(p, suite)| match suite {
            Some(s) => format!("{p}/{s}"),
            None => (*p).to_string(),
        })
        .collect();
    if missing.is_empty() {
        say(&format!("{} Debian packages present (skipped)", pkgs.len()));
        return Ok(());
    }
    if missing.iter().any(|p| p.contains("bookworm-backports")) && !backports_configured() {
        say(&format!("adding bookworm-backports ({BACKPORTS})"));
        fs::write(
            BACKPORTS,
            "Types: deb\nURIs: http://deb.debian.org/debian\nSuites: bookworm-backports\n\
             Components: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n",
        )
        .with_context(|| format!("cannot write {BACKPORTS} (run as root)"))?;
    }
    say(&format!("installing {}", missing.join(" ")));
    run(Command::new("apt-get").args(["update", "-q"]))?;
    // `pkg/suite` pins just these packages; `-t bookworm-backports` would upgrade half the system.
    run(Command::new("apt-get")
        .args(["install", "-y", "-q"])
        .args(&missing)
        .env("DEBIAN_FRONTEND", "noninteractive"))
}

/// What `cargo xtask bench` needs besides the lab: bpftrace (the peer it is compared with) and
/// bpftool (reads each program's run time and count, kernel.bpf_stats_enabled).
pub fn bench() -> anyhow::Result<()> {
    apt(&[("bpftrace", None), ("bpftool", None)])
}

/// Headless Chromium: the flamegraph test screenshots an SVG to see that frames are drawn.
/// Prometheus: `promtool` checks serve's exposition and the deploy rules, and the lab test
/// scrapes `serve` with a real Prometheus server (the lab guest sees the host's files).
const BROWSER_PACKAGES: &[(&str, Option<&str>)] = &[("chromium", None), ("prometheus", None)];

/// What the host test tier needs besides the toolchain (a browser for screenshot tests,
/// Prometheus and promtool).
pub fn browser() -> anyhow::Result<()> {
    apt(BROWSER_PACKAGES)?;
    duckdb()
}

/// The Python of the venv holding DuckDB (the export test queries Parquet tables with it).
pub fn duckdb_python() -> PathBuf {
    cache_dir().join("duckdb/bin/python")
}

/// DuckDB from PyPI in a venv of its own (`~/.cache/rdmatrace/duckdb`).
pub fn duckdb() -> anyhow::Result<()> {
    let py = duckdb_python();
    let has = |py: &Path| {
        Command::new(py)
            .args(["-c", "import duckdb"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if has(&py) {
        say("duckdb present (skipped)");
        return Ok(());
    }
    say("installing duckdb (PyPI) in a venv");
    let venv = cache_dir().join("duckdb");
    run(Command::new("python3").arg("-m").arg("venv").arg(&venv))?;
    run(Command::new(&py).args(["-m", "pip", "install", "-q", "duckdb"]))?;
    anyhow::ensure!(
        has(&py),
        "duckdb installed but {} cannot import it",
        py.display()
    );
    Ok(())
}

/// Everything `cargo xtask lab` needs.
pub fn lab() -> anyhow::Result<()> {
    if !Path::new("/usr/bin/apt-get").exists() {
        bail!("the lab is set up with Debian packages; this machine has no apt-get");
    }
    apt(PACKAGES)?;
    if find_tool("vng").is_some() {
        say("virtme-ng present (skipped)");
    } else {
        say("installing virtme-ng (PyPI)");
        run(Command::new("python3").args(["-m", "pip", "install", "-q", "virtme-ng"]))?;
    }
    Ok(())
}

/// The second lab kernel, bookworm's own 6.1 (the oldest kernel the tool is tested on): the
/// version of one in /boot, else the newest `linux-image-6.1.0-N-amd64` installed from apt.
pub fn old_lab_kernel() -> anyhow::Result<String> {
    let have = crate::lab::rxe_kernels()?;
    if let Some((_, ver)) = have.iter().rev().find(|(_, v)| v.starts_with("6.1.")) {
        say(&format!("lab kernel {ver} present (skipped)"));
        return Ok(ver.clone());
    }
    let list = output(Command::new("apt-cache").args([
        "search",
        "--names-only",
        r"^linux-image-6\.1\.0-[0-9]+-amd64$",
    ]))
    .unwrap_or_default();
    let abi = |pkg: &str| -> Option<u32> {
        pkg.strip_prefix("linux-image-6.1.0-")?
            .strip_suffix("-amd64")?
            .parse()
            .ok()
    };
    let newest = list
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter_map(|p| abi(p).map(|n| (n, p.to_string())))
        .max()
        .map(|(_, p)| p)
        .context("apt knows no linux-image-6.1.0-N-amd64 (is bookworm in the apt sources?)")?;
    say(&format!("installing {newest} (the second lab kernel)"));
    run(Command::new("apt-get")
        .args(["install", "-y", "-q", "--no-install-recommends", &newest])
        .env("DEBIAN_FRONTEND", "noninteractive"))?;
    let ver = newest.trim_start_matches("linux-image-").to_string();
    anyhow::ensure!(
        crate::lab::rxe_kernels()?.iter().any(|(_, v)| *v == ver),
        "{newest} installed but /boot/vmlinuz-{ver} with rdma_rxe is not there"
    );
    Ok(ver)
}
