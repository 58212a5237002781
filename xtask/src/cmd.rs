//! Running commands with their output relayed, and small helpers around them.

use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use anyhow::{bail, Context as _};

/// Runs `cmd`, relaying its output; fails on a non-zero exit.
pub fn run(cmd: &mut Command) -> anyhow::Result<()> {
    let status = cmd
        .status()
        .with_context(|| format!("cannot start {cmd:?}"))?;
    if !status.success() {
        bail!("{cmd:?} failed: {status}");
    }
    Ok(())
}

/// Runs `cmd` and returns its stdout; `None` when it cannot start or fails.
pub fn output(cmd: &mut Command) -> Option<String> {
    let out = cmd.stderr(Stdio::null()).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The repository root (the parent of this crate).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

/// `$HOME/.cache/rdmatrace`: tools and decisions kept outside the target dir, so `cargo clean`
/// does not cost a rebuild of bpf-linker.
pub fn cache_dir() -> PathBuf {
    let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("/root"), PathBuf::from);
    home.join(".cache").join("rdmatrace")
}

/// Looks `name` up in PATH, then in the usual places a tool of ours may be installed to.
pub fn find_tool(name: &str) -> Option<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("/root"), PathBuf::from);
    dirs.push(home.join(".cargo/bin"));
    dirs.push(home.join(".local/bin"));
    dirs.push(PathBuf::from("/usr/local/bin"));
    if let Some(prefix) =
        output(Command::new("python3").args(["-c", "import sys; print(sys.prefix)"]))
    {
        dirs.push(Path::new(prefix.trim()).join("bin"));
    }
    dirs.into_iter().map(|d| d.join(name)).find(|p| p.is_file())
}

/// PATH with ~/.cargo/bin in front, for child cargo builds that need bpf-linker.
pub fn path_with_cargo_bin() -> std::ffi::OsString {
    let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("/root"), PathBuf::from);
    let mut dirs = vec![home.join(".cargo/bin")];
    if let Some(p) = std::env::var_os("PATH") {
        dirs.extend(std::env::split_paths(&p));
    }
    std::env::join_paths(dirs).unwrap_or_default()
}
