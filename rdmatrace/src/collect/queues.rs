//! Refused CQ and SRQ creations (see `rdmatrace-ebpf/src/probes/queues.rs`): SRQs through
//! ib_core's `ib_create_srq_user`, CQs at the drivers' `create_cq` ops (rxe, mlx5), since
//! ib_uverbs calls those directly.

use rdmatrace_common::config::ProbeConfig;

use super::{qp::resolve_ident, Area, Hook, ProbeSpec, Role};
use crate::btf::{offset_of, param_index, BtfError, KernelBtf};

const SRQ: &str = "ib_create_srq_user";

/// The drivers' `create_cq` ops probed (present only where the driver is loaded).
const CQ_OPS: [&str; 2] = ["rxe_create_cq", "mlx5_ib_create_cq"];

pub const AREA: Area = Area {
    name: "queues",
    rdma: true,
    probes: &[
        ProbeSpec {
            program: "srq_create_enter",
            hook: Hook::Kprobe,
            target: SRQ,
            role: Role::Always,
        },
        ProbeSpec {
            program: "srq_create_exit",
            hook: Hook::Kretprobe,
            target: SRQ,
            role: Role::Always,
        },
        ProbeSpec {
            program: "cq_create_enter",
            hook: Hook::Kprobe,
            target: CQ_OPS[0],
            role: Role::WherePresent,
        },
        ProbeSpec {
            program: "cq_create_exit",
            hook: Hook::Kretprobe,
            target: CQ_OPS[0],
            role: Role::WherePresent,
        },
        ProbeSpec {
            program: "cq_create_enter",
            hook: Hook::Kprobe,
            target: CQ_OPS[1],
            role: Role::WherePresent,
        },
        ProbeSpec {
            program: "cq_create_exit",
            hook: Hook::Kretprobe,
            target: CQ_OPS[1],
            role: Role::WherePresent,
        },
    ],
    resolve,
};

fn resolve(kbtf: &mut KernelBtf, cfg: &mut ProbeConfig) -> Result<Vec<String>, BtfError> {
    resolve_ident(kbtf, cfg)?;
    let btf = kbtf.scope("ib_core", "ib_qp")?;
    cfg.srq_arg_pd = param_index(btf, SRQ, &["pd"])?;
    cfg.srq_arg_attr = param_index(btf, SRQ, &["srq_init_attr", "init_attr", "attr"])?;
    cfg.cq_device = offset_of(btf, "ib_cq", "device")?;
    cfg.pd_device = offset_of(btf, "ib_pd", "device")?;
    cfg.cq_attr_cqe = offset_of(btf, "ib_cq_init_attr", "cqe")?;
    cfg.srq_attr_max_wr = offset_of(btf, "ib_srq_init_attr", "attr.max_wr")?;
    cfg.srq_attr_max_sge = offset_of(btf, "ib_srq_init_attr", "attr.max_sge")?;
    for (i, f) in ["max_cqe", "max_srq_wr", "max_srq_sge"]
        .into_iter()
        .enumerate()
    {
        cfg.dev_attr_queue[i] = offset_of(btf, "ib_device", &format!("attrs.{f}"))?;
    }
    Ok(Vec::new())
}
