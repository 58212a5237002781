//! mlx5_ib (see `rdmatrace-ebpf/src/probes/mlx5.rs`). Off, with the reason, where the module is
//! not loaded. The `mlx5:*` tracepoints of mlx5_core cover firmware commands, eswitch and
//! flow steering, not the RDMA control path, so they are not used.

use rdmatrace_common::config::ProbeConfig;

use super::{qp::resolve_ident, Area, Hook, ProbeSpec, Role};
use crate::btf::{offset_of, param_index, BtfError, KernelBtf};

pub const AREA: Area = Area {
    name: "mlx5",
    rdma: true,
    probes: &[
        ProbeSpec {
            program: "mlx5_qp_event",
            hook: Hook::Kprobe,
            target: "mlx5_ib_qp_event",
            role: Role::Always,
        },
        ProbeSpec {
            program: "mlx5_mr_access",
            hook: Hook::Kprobe,
            target: "mlx5_ib_reg_user_mr",
            role: Role::Always,
        },
    ],
    resolve,
};

fn resolve(kbtf: &mut KernelBtf, cfg: &mut ProbeConfig) -> Result<Vec<String>, BtfError> {
    resolve_ident(kbtf, cfg)?;
    let btf = kbtf.scope("mlx5_ib", "mlx5_ib_qp")?;
    cfg.mlx5_qp_ibqp = offset_of(btf, "mlx5_ib_qp", "ibqp")?;
    cfg.mlx5_qp_mqp = offset_of(btf, "mlx5_ib_qp", "trans_qp.base.mqp")?;
    cfg.mlx5_event_arg_qp = param_index(btf, "mlx5_ib_qp_event", &["qp", "mqp"])?;
    cfg.mlx5_event_arg_type = param_index(btf, "mlx5_ib_qp_event", &["type", "event_type"])?;
    cfg.mlx5_mr_arg_access = param_index(btf, "mlx5_ib_reg_user_mr", &["access_flags", "access"])?;
    Ok(Vec::new())
}
