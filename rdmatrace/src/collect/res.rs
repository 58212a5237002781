//! RDMA objects through the resource tracker (see `rdmatrace-ebpf/src/probes/res.rs`).

use rdmatrace_common::{config::ProbeConfig, limits::UNRESOLVED};

use super::{qp::resolve_ident, Area, Hook, ProbeSpec, Role};
use crate::btf::{offset_of, BtfError, KernelBtf};

pub const AREA: Area = Area {
    name: "res",
    rdma: true,
    probes: &[
        ProbeSpec {
            program: "res_add_enter",
            hook: Hook::Kprobe,
            target: "rdma_restrack_add",
            role: Role::Always,
        },
        ProbeSpec {
            program: "res_add_exit",
            hook: Hook::Kretprobe,
            target: "rdma_restrack_add",
            role: Role::Always,
        },
        ProbeSpec {
            program: "res_del",
            hook: Hook::Kprobe,
            target: "rdma_restrack_del",
            role: Role::Always,
        },
        // Stable kernels with the split delete (e.g. Debian's 6.1): CQ and PD destroys call
        // rdma_restrack_begin_del / _commit_del instead; commit is the object really gone.
        ProbeSpec {
            program: "res_del",
            hook: Hook::Kprobe,
            target: "rdma_restrack_commit_del",
            role: Role::WherePresent,
        },
    ],
    resolve,
};

/// `enum rdma_restrack_type` index -> (module, struct, path of its `struct ib_device *`).
/// QP (2) is left out: QPs have their own events.
const OBJECTS: [(usize, &str, &str, &str); 7] = [
    (0, "ib_core", "ib_pd", "device"),
    (1, "ib_core", "ib_cq", "device"),
    (3, "rdma_cm", "rdma_id_private", "id.device"),
    (4, "ib_core", "ib_mr", "device"),
    (5, "ib_core", "ib_ucontext", "device"),
    (6, "ib_core", "rdma_counter", "device"),
    (7, "ib_core", "ib_srq", "device"),
];

/// Tracker-entry and owner fields, plus where each object type keeps its entry and device.
/// Shared by every area that reads objects through their tracker entry (res, async, cm).
pub fn resolve_tracker(
    kbtf: &mut KernelBtf,
    cfg: &mut ProbeConfig,
    notes: &mut Vec<String>,
) -> Result<(), BtfError> {
    resolve_ident(kbtf, cfg)?;
    let vmlinux = kbtf.vmlinux();
    cfg.task_tgid = offset_of(vmlinux, "task_struct", "tgid")?;
    cfg.task_comm = offset_of(vmlinux, "task_struct", "comm")?;
    let btf = kbtf.scope("ib_core", "ib_qp")?;
    cfg.res_task = offset_of(btf, "rdma_restrack_entry", "task")?;
    cfg.res_type = offset_of(btf, "rdma_restrack_entry", "type")?;
    cfg.res_user = offset_of(btf, "rdma_restrack_entry", "user")?;
    cfg.res_id = offset_of(btf, "rdma_restrack_entry", "id")?;
    for (t, module, ty, dev) in OBJECTS {
        let found = kbtf
            .scope(module, ty)
            .and_then(|btf| Ok((offset_of(btf, ty, "res")?, offset_of(btf, ty, dev)?)));
        match found {
            Ok((res, dev)) => {
                cfg.res_base[t] = res;
                cfg.res_device[t] = dev;
            }
            Err(e) => {
                cfg.res_base[t] = UNRESOLVED;
                notes.push(format!("{ty} objects not reported: {e}"));
            }
        }
    }
    Ok(())
}

fn resolve(kbtf: &mut KernelBtf, cfg: &mut ProbeConfig) -> Result<Vec<String>, BtfError> {
    let mut notes = Vec::new();
    resolve_tracker(kbtf, cfg, &mut notes)?;
    let btf = kbtf.scope("ib_core", "ib_qp")?;
    cfg.cq_cqe = offset_of(btf, "ib_cq", "cqe")?;
    cfg.cq_comp_vector = offset_of(btf, "ib_cq", "comp_vector")?;
    cfg.mr_lkey = offset_of(btf, "ib_mr", "lkey")?;
    cfg.mr_rkey = offset_of(btf, "ib_mr", "rkey")?;
    cfg.mr_length = offset_of(btf, "ib_mr", "length")?;
    cfg.mr_iova = offset_of(btf, "ib_mr", "iova")?;
    Ok(notes)
}
