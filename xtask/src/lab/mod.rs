//! The Soft-RoCE lab: a Debian kernel with rdma_rxe booted under qemu by virtme-ng, the host's
//! root filesystem shared read-only, `target/lab` writable. KVM when it really works here, TCG
//! otherwise (decided by trying once per kernel, remembered in ~/.cache/rdmatrace). One VM with
//! two NICs on one wire, or two VMs ([`hosts`]) joined by a wire.

mod hosts;
mod relay;

pub use hosts::run_two;

use std::{
    fs,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{bail, Context as _};

use crate::cmd::{cache_dir, find_tool, repo_root};

/// Skips slow hardware probing under TCG (see shared lab notes).
const BLACKLIST: &str = "modprobe.blacklist=kvm,kvm_amd,kvm_intel,iTCO_wdt,iTCO_vendor_support,\
ahci,libahci,libata,sr_mod,cdrom,sg,i2c_i801,i2c_smbus,lpc_ich,pcspkr,i6300esb,aesni_intel,\
psmouse,evdev,button,serio_raw,joydev,intel_rapl_msr,intel_rapl_common,ghash_clmulni_intel,drm,\
bochs,qxl,virtio_gpu,floppy,parport_pc,ppdev,efi_pstore,qemu_fw_cfg,vmgenid,virtio_rng";

/// Longest a lab command may run before it is killed.
pub(super) const LAB_TIMEOUT: Duration = Duration::from_secs(40 * 60);

/// Kernels in /boot that ship the rdma_rxe module, oldest version first: `(vmlinuz, version)`.
pub fn rxe_kernels() -> anyhow::Result<Vec<(PathBuf, String)>> {
    let mut found: Vec<(PathBuf, String)> = fs::read_dir("/boot")
        .context("cannot list /boot")?
        .filter_map(Result::ok)
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let ver = name.strip_prefix("vmlinuz-")?.to_string();
            let rxe = Path::new("/lib/modules")
                .join(&ver)
                .join("kernel/drivers/infiniband/sw/rxe");
            rxe.exists().then(|| (e.path(), ver))
        })
        .collect();
    found.sort_by_key(|a| version_key(&a.1));
    Ok(found)
}

/// `6.1.0-57-amd64` -> [6, 1, 0, 57, ...]: numeric order (6.12 after 6.1, -57 after -9).
fn version_key(ver: &str) -> Vec<u64> {
    ver.split(|c: char| !c.is_ascii_digit())
        .filter_map(|n| n.parse().ok())
        .collect()
}

/// The /boot kernel the lab boots: `wanted` (a version, e.g. `6.1.0-57-amd64`), else
/// `RDMATRACE_LAB_KERNEL` when set, otherwise the newest that ships the rdma_rxe module.
pub fn find_kernel(wanted: Option<&str>) -> anyhow::Result<(PathBuf, String)> {
    let env = std::env::var("RDMATRACE_LAB_KERNEL").ok();
    let mut found = rxe_kernels()?;
    if let Some(v) = wanted.or(env.as_deref()) {
        let have: Vec<&str> = found.iter().map(|(_, ver)| ver.as_str()).collect();
        let pick = found.iter().find(|(_, ver)| *ver == v).cloned();
        return pick.with_context(|| {
            format!("lab kernel {v}: no such kernel with rdma_rxe in /boot (have {have:?})")
        });
    }
    found.pop().context(
        "no kernel with rdma_rxe in /boot (cargo xtask bootstrap --lab installs Debian's backports kernel)",
    )
}

pub(super) fn vng() -> anyhow::Result<PathBuf> {
    find_tool("vng").context("virtme-ng (vng) not found; cargo xtask bootstrap --lab installs it")
}

fn base_args(kernel: &Path, kvm: bool, rwdir: &Path) -> Vec<String> {
    let mut args = vm_args(kernel, kvm, rwdir);
    args.extend(["--network", "loop"].map(String::from));
    args
}

/// vng's arguments for a lab VM without its network.
pub(super) fn vm_args(kernel: &Path, kvm: bool, rwdir: &Path) -> Vec<String> {
    let mut args: Vec<String> = Vec::new();
    if !kvm {
        args.push("--disable-kvm".into());
    }
    args.extend(["-m", "2G", "--rwdir"].map(String::from));
    args.push(rwdir.display().to_string());
    args.push("-r".into());
    args.push(kernel.display().to_string());
    args.push("--append".into());
    args.push(BLACKLIST.into());
    args
}

/// Whether KVM boots this kernel here. /dev/kvm may exist yet crash stock kernels (a software
/// nested-virtualization module), so the only test is to try.
pub(super) fn kvm_works(kernel: &Path, ver: &str, rwdir: &Path) -> bool {
    if !Path::new("/dev/kvm").exists() {
        return false;
    }
    let memo = cache_dir().join(format!("kvm-{ver}"));
    if let Ok(s) = fs::read_to_string(&memo) {
        return s.trim() == "ok";
    }
    eprintln!(
        "lab: trying KVM once for {ver} (remembered in {})",
        memo.display()
    );
    let Ok(vng) = vng() else { return false };
    let out = Command::new("timeout")
        .arg("120")
        .arg(vng)
        .args(base_args(kernel, true, rwdir))
        .args(["-e", "echo rdmatrace-kvm-ok"])
        .stdin(Stdio::null())
        .output();
    let ok = out.is_ok_and(|o| {
        o.status.success() && String::from_utf8_lossy(&o.stdout).contains("rdmatrace-kvm-ok")
    });
    let _ = fs::create_dir_all(cache_dir());
    let _ = fs::write(&memo, if ok { "ok\n" } else { "broken\n" });
    eprintln!(
        "lab: KVM {}",
        if ok {
            "works"
        } else {
            "does not work here; using TCG"
        }
    );
    ok
}

/// Whether the lab boots kernel `version` under KVM here, as decided (and remembered) by the
/// last boot of that kernel: `None` when it has not been tried yet.
pub fn used_kvm(version: &str) -> Option<bool> {
    let memo = cache_dir().join(format!("kvm-{version}"));
    fs::read_to_string(memo).ok().map(|s| s.trim() == "ok")
}

/// vng's status when the guest ended without reporting the command's (a kernel panic, a VM
/// crash): not a test failure.
pub const VM_DIED: i32 = 255;

/// Boots the lab and runs `cmd` (bash, from the repo root) inside; returns its exit status.
/// Without `cmd`, an interactive shell.
pub fn run(cmd: Option<&str>) -> anyhow::Result<i32> {
    run_on(None, cmd)
}

/// [`run`] on the kernel `version` (see [`find_kernel`]).
pub fn run_on(version: Option<&str>, cmd: Option<&str>) -> anyhow::Result<i32> {
    let (kernel, ver) = find_kernel(version)?;
    let root = repo_root();
    let rwdir = root.join("target/lab");
    fs::create_dir_all(&rwdir).with_context(|| format!("cannot create {}", rwdir.display()))?;
    let kvm = kvm_works(&kernel, &ver, &rwdir);
    let guest = root.join("xtask/lab/guest.sh");
    let mut exec = format!("bash {} {}", guest.display(), root.display());
    if let Some(cmd) = cmd {
        let file = rwdir.join(format!("cmd-{}.sh", std::process::id()));
        fs::write(&file, format!("{cmd}\n"))
            .with_context(|| format!("cannot write {}", file.display()))?;
        exec += &format!(" {}", file.display());
    }
    eprintln!(
        "lab: booting {ver} under {} ...",
        if kvm { "KVM" } else { "TCG (no working KVM)" }
    );
    let started = Instant::now();
    let mut command = Command::new("timeout");
    command
        .arg("--foreground")
        .arg(LAB_TIMEOUT.as_secs().to_string())
        .arg(vng()?)
        .args(base_args(&kernel, kvm, &rwdir))
        .args(["-e", &exec]);
    if cmd.is_none() {
        let status = command.status().context("cannot start vng")?;
        return Ok(status.code().unwrap_or(1));
    }
    // qemu reopens fds 1 and 2 separately: pipe both and relay, never share one file.
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("cannot start vng")?;
    let last = relay::relay(&mut child, "", started);
    let status = child.wait().context("vng did not finish")?;
    eprintln!(
        "lab: done in {:.1} s ({status})",
        started.elapsed().as_secs_f64()
    );
    if status.code() == Some(VM_DIED) {
        eprintln!(
            "lab: the VM ended without the command's status (kernel panic or VM crash); last \
             line relayed: {last}"
        );
    }
    match status.code() {
        Some(124) => bail!(
            "the lab command timed out after {} s",
            LAB_TIMEOUT.as_secs()
        ),
        Some(code) => Ok(code),
        None => bail!("vng was killed: {status}"),
    }
}
