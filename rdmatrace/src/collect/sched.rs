//! Process lifecycle (see `rdmatrace-ebpf/src/probes/sched.rs`).

use rdmatrace_common::{config::ProbeConfig, limits::UNRESOLVED};

use super::{Area, Hook, ProbeSpec, Role};
use crate::btf::{offset_of, BtfError, KernelBtf};

pub const AREA: Area = Area {
    name: "process",
    rdma: false,
    probes: &[
        ProbeSpec {
            program: "process_fork",
            hook: Hook::RawTracepoint,
            target: "sched_process_fork",
            role: Role::Always,
        },
        ProbeSpec {
            program: "process_exec",
            hook: Hook::RawTracepoint,
            target: "sched_process_exec",
            role: Role::Always,
        },
        ProbeSpec {
            program: "process_exit",
            hook: Hook::RawTracepoint,
            target: "sched_process_exit",
            role: Role::Always,
        },
    ],
    resolve,
};

fn resolve(kbtf: &mut KernelBtf, cfg: &mut ProbeConfig) -> Result<Vec<String>, BtfError> {
    let btf = kbtf.vmlinux();
    let mut notes = Vec::new();
    let mut opt = |what: &str, r: Result<u32, BtfError>| match r {
        Ok(v) => v,
        Err(e) => {
            notes.push(format!("{what}: {e}"));
            UNRESOLVED
        }
    };
    cfg.task_real_parent = opt("parent pid", offset_of(btf, "task_struct", "real_parent"));
    cfg.task_tgid = opt("parent pid", offset_of(btf, "task_struct", "tgid"));
    cfg.task_exit_code = opt("exit code", offset_of(btf, "task_struct", "exit_code"));
    // Which execs wake the reader at once (those in another mount namespace); unresolved, every
    // exec does.
    cfg.task_nsproxy = offset_of(btf, "task_struct", "nsproxy").unwrap_or(UNRESOLVED);
    cfg.nsproxy_mnt_ns = offset_of(btf, "nsproxy", "mnt_ns").unwrap_or(UNRESOLVED);
    cfg.mnt_ns_inum = offset_of(btf, "mnt_namespace", "ns.inum").unwrap_or(UNRESOLVED);
    cfg.own_mnt_ns = std::fs::metadata("/proc/self/ns/mnt")
        .ok()
        .and_then(|m| u32::try_from(std::os::unix::fs::MetadataExt::ino(&m)).ok())
        .unwrap_or(0);
    Ok(notes)
}
