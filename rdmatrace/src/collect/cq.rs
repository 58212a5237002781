//! Completions (see `rdmatrace-ebpf/src/probes/cq.rs`): completion-channel notifications through
//! ib_uverbs (any driver), and Soft-RoCE's error completions.

use rdmatrace_common::config::ProbeConfig;

use super::{qp::resolve_ident, res::resolve_tracker, Area, Hook, ProbeSpec, Role};
use crate::btf::{module_func_id, offset_of, param_index, BtfError, KernelBtf};

pub const AREA: Area = Area {
    name: "cq",
    rdma: true,
    probes: &[ProbeSpec {
        program: "cq_comp",
        hook: Hook::Kprobe,
        target: "ib_uverbs_comp_handler",
        role: Role::Always,
    }],
    resolve,
};

/// rxe posts every completion through one function; errors are picked out in the kernel.
pub const RXE_AREA: Area = Area {
    name: "rxe_wc",
    rdma: true,
    probes: &[ProbeSpec {
        program: "rxe_cq_post",
        hook: Hook::Kprobe,
        target: "rxe_cq_post",
        role: Role::Always,
    }],
    resolve: resolve_rxe,
};

fn resolve(kbtf: &mut KernelBtf, cfg: &mut ProbeConfig) -> Result<Vec<String>, BtfError> {
    let mut notes = Vec::new();
    resolve_tracker(kbtf, cfg, &mut notes)?;
    let btf = kbtf.scope("ib_uverbs", "ib_uverbs_file")?;
    cfg.comp_arg_cq = param_index(btf, "ib_uverbs_comp_handler", &["cq"])?;
    Ok(notes)
}

fn resolve_rxe(kbtf: &mut KernelBtf, cfg: &mut ProbeConfig) -> Result<Vec<String>, BtfError> {
    let mut notes = Vec::new();
    resolve_ident(kbtf, cfg)?;
    resolve_tracker(kbtf, cfg, &mut notes)?;
    let btf = kbtf.scope("rdma_rxe", "rxe_cq")?;
    cfg.rxe_cq_ibcq = offset_of(btf, "rxe_cq", "ibcq")?;
    cfg.rxe_cq_is_user = offset_of(btf, "rxe_cq", "is_user")?;
    cfg.wc_status = offset_of(btf, "rxe_cqe", "ibwc.status")?;
    cfg.wc_opcode = offset_of(btf, "rxe_cqe", "ibwc.opcode")?;
    cfg.wc_vendor_err = offset_of(btf, "rxe_cqe", "ibwc.vendor_err")?;
    cfg.wc_qp = offset_of(btf, "rxe_cqe", "ibwc.qp")?;
    cfg.uwc_status = offset_of(btf, "rxe_cqe", "uibwc.status")?;
    cfg.uwc_opcode = offset_of(btf, "rxe_cqe", "uibwc.opcode")?;
    cfg.uwc_vendor_err = offset_of(btf, "rxe_cqe", "uibwc.vendor_err")?;
    cfg.uwc_qp_num = offset_of(btf, "rxe_cqe", "uibwc.qp_num")?;
    cfg.cq_post_arg_cq = param_index(btf, "rxe_cq_post", &["cq"])?;
    cfg.cq_post_arg_cqe = param_index(btf, "rxe_cq_post", &["cqe"])?;
    // For the fentry program (tried after the load; the kprobe stays when it is missing).
    if let Ok(id) = module_func_id(btf, "rxe_cq_post") {
        cfg.typed_ids[3] = id;
    }
    Ok(notes)
}
