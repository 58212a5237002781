//! The two-host lab: two VMs booted in parallel, `lab-a` and `lab-b`, each with one NIC and one
//! Soft-RoCE device `rxe0` on it, the two NICs joined by one virtual wire (a pair of UDP sockets
//! between the two qemu processes on loopback). The command runs on both with the host's
//! identity in its environment (see `xtask/lab/guest2.sh`) and a folder both see at the same
//! path, `$LAB_SHARED`. b's wall clock is set `LAB_CLOCK_OFFSET` seconds (default 2.5) off a's
//! at boot, so that every cross-host analysis has to align clocks.

use std::{
    fs,
    net::UdpSocket,
    process::{Command, Stdio},
    thread,
    time::Instant,
};

use anyhow::{bail, Context as _};

use super::{find_kernel, kvm_works, relay, vm_args, vng, LAB_TIMEOUT, VM_DIED};
use crate::cmd::repo_root;

/// b's clock offset from a's, in seconds, when `LAB_CLOCK_OFFSET` is not set.
pub const DEFAULT_CLOCK_OFFSET: &str = "2.5";

/// A free UDP port on loopback (taken by qemu right after; the lab is the only user).
fn free_udp_port() -> anyhow::Result<u16> {
    let s = UdpSocket::bind("127.0.0.1:0").context("cannot bind a UDP socket on loopback")?;
    Ok(s.local_addr()?.port())
}

/// Boots `lab-a` and `lab-b` on kernel `version` (see [`find_kernel`]) and runs `cmd` (bash,
/// from the repository root) on both; returns the worse of the two exit statuses.
pub fn run_two(version: Option<&str>, cmd: &str) -> anyhow::Result<i32> {
    let (kernel, ver) = find_kernel(version)?;
    let root = repo_root();
    let rwdir = root.join("target/lab");
    let run_dir = rwdir.join(format!("hosts-{}", std::process::id()));
    let shared = run_dir.join("shared");
    fs::create_dir_all(&shared).with_context(|| format!("cannot create {}", shared.display()))?;
    let kvm = kvm_works(&kernel, &ver, &rwdir);
    let file = run_dir.join("cmd.sh");
    fs::write(&file, format!("{cmd}\n"))
        .with_context(|| format!("cannot write {}", file.display()))?;
    let offset =
        std::env::var("LAB_CLOCK_OFFSET").unwrap_or_else(|_| DEFAULT_CLOCK_OFFSET.to_string());
    if offset.parse::<f64>().map_or(true, |o| !o.is_finite()) {
        bail!("LAB_CLOCK_OFFSET={offset}: not a number of seconds");
    }
    let ports = [free_udp_port()?, free_udp_port()?];
    let guest = root.join("xtask/lab/guest2.sh");
    eprintln!(
        "lab: booting lab-a and lab-b ({ver}) under {}, b's clock {offset} s off a's ...",
        if kvm { "KVM" } else { "TCG (no working KVM)" }
    );
    let started = Instant::now();
    let mut children = Vec::new();
    for (i, host) in ["a", "b"].into_iter().enumerate() {
        let (me, peer) = (ports[i], ports[1 - i]);
        let wire = format!(
            "-device virtio-net-pci,netdev=wire,mac=52:54:00:0e:00:0{} \
             -netdev socket,id=wire,udp=127.0.0.1:{peer},localaddr=127.0.0.1:{me}",
            i + 1
        );
        let exec = format!(
            "bash {} {} {host} {} {} {}",
            guest.display(),
            root.display(),
            file.display(),
            shared.display(),
            offset
        );
        let mut command = Command::new("timeout");
        command
            .arg("--foreground")
            .arg(LAB_TIMEOUT.as_secs().to_string())
            .arg(vng()?)
            .args(vm_args(&kernel, kvm, &rwdir))
            .args(["--cpus", "1", "--disable-microvm", "--name"])
            .arg(format!("lab-{host}"))
            .arg(format!("--qemu-opts={wire}"))
            .args(["-e", &exec])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let child = command.spawn().context("cannot start vng")?;
        children.push((host, child));
    }
    let waits: Vec<_> = children
        .into_iter()
        .map(|(host, mut child)| {
            thread::spawn(move || {
                let prefix = format!("{host}| ");
                let last = relay::relay(&mut child, &prefix, started);
                (host, last, child.wait())
            })
        })
        .collect();
    let mut worst = 0;
    let mut errors = Vec::new();
    for w in waits {
        let Ok((host, last, status)) = w.join() else {
            errors.push("a relay thread panicked".to_string());
            continue;
        };
        let status = match status {
            Ok(s) => s,
            Err(e) => {
                errors.push(format!("lab-{host}: vng did not finish: {e}"));
                continue;
            }
        };
        eprintln!(
            "lab-{host}: done in {:.1} s ({status})",
            started.elapsed().as_secs_f64()
        );
        match status.code() {
            Some(124) => errors.push(format!(
                "lab-{host}: the command timed out after {} s",
                LAB_TIMEOUT.as_secs()
            )),
            Some(VM_DIED) => {
                eprintln!(
                    "lab-{host}: the VM ended without the command's status (kernel panic or VM \
                     crash); last line relayed: {last}"
                );
                worst = VM_DIED;
            }
            Some(code) => worst = worst.max(code),
            None => errors.push(format!("lab-{host}: vng was killed: {status}")),
        }
    }
    if !errors.is_empty() {
        bail!("{}", errors.join("; "));
    }
    if worst == 0 {
        let _ = fs::remove_dir_all(&run_dir);
    }
    Ok(worst)
}
