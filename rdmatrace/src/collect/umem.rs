//! Failed registrations of user memory (see `rdmatrace-ebpf/src/probes/umem.rs`): `ib_umem_get`
//! is ib_uverbs's (umem.c) and every driver's user MRs go through it.

use rdmatrace_common::config::ProbeConfig;

use super::{qp::resolve_ident, Area, Hook, ProbeSpec, Role};
use crate::btf::{offset_of, param_index, struct_size, BtfError, KernelBtf};

pub const AREA: Area = Area {
    name: "umem",
    rdma: true,
    probes: &[
        ProbeSpec {
            program: "umem_get_enter",
            hook: Hook::Kprobe,
            target: "ib_umem_get",
            role: Role::Always,
        },
        ProbeSpec {
            program: "umem_get_exit",
            hook: Hook::Kretprobe,
            target: "ib_umem_get",
            role: Role::Always,
        },
    ],
    resolve,
};

/// `RLIMIT_MEMLOCK` in `signal_struct.rlim[]` (asm-generic/resource.h, every architecture
/// this tool builds for).
const RLIMIT_MEMLOCK: u32 = 8;

fn resolve(kbtf: &mut KernelBtf, cfg: &mut ProbeConfig) -> Result<Vec<String>, BtfError> {
    resolve_ident(kbtf, cfg)?;
    let btf = kbtf.scope("ib_uverbs", "ib_umem")?;
    cfg.umem_arg_dev = param_index(btf, "ib_umem_get", &["device", "ibdev", "dev"])?;
    cfg.umem_arg_size = param_index(btf, "ib_umem_get", &["size", "length"])?;
    let vmlinux = kbtf.vmlinux();
    let mut notes = Vec::new();
    match (
        offset_of(vmlinux, "task_struct", "signal"),
        offset_of(vmlinux, "signal_struct", "rlim"),
        struct_size(vmlinux, "rlimit"),
    ) {
        (Ok(signal), Ok(rlim), Ok(size)) => {
            cfg.task_signal = signal;
            cfg.signal_rlim_memlock = rlim + RLIMIT_MEMLOCK * size;
        }
        (Err(e), ..) | (_, Err(e), _) | (.., Err(e)) => notes.push(format!(
            "the locked-memory limit of failed registrations not read: {e}"
        )),
    }
    match (
        offset_of(vmlinux, "task_struct", "mm"),
        offset_of(vmlinux, "mm_struct", "pinned_vm"),
    ) {
        (Ok(mm), Ok(pinned)) => {
            cfg.task_mm = mm;
            cfg.mm_pinned_vm = pinned;
        }
        (Err(e), _) | (_, Err(e)) => notes.push(format!(
            "pinned memory of failed registrations not read: {e}"
        )),
    }
    Ok(notes)
}
