//! RDMA CM events to user processes (see `rdmatrace-ebpf/src/probes/cm.rs`).

use rdmatrace_common::config::ProbeConfig;

use super::{res::resolve_tracker, Area, Hook, ProbeSpec, Role};
use crate::btf::{offset_of, param_index, BtfError, KernelBtf};

pub const AREA: Area = Area {
    name: "cm",
    rdma: true,
    probes: &[ProbeSpec {
        program: "cm_event",
        hook: Hook::Kprobe,
        target: "ucma_event_handler",
        role: Role::Always,
    }],
    resolve,
};

fn resolve(kbtf: &mut KernelBtf, cfg: &mut ProbeConfig) -> Result<Vec<String>, BtfError> {
    let mut notes = Vec::new();
    resolve_tracker(kbtf, cfg, &mut notes)?;
    let ucm = kbtf.scope("rdma_ucm", "ucma_context")?;
    cfg.ucma_arg_id = param_index(ucm, "ucma_event_handler", &["cm_id", "id"])?;
    cfg.ucma_arg_event = param_index(ucm, "ucma_event_handler", &["event", "ev"])?;
    cfg.cm_ev_event = offset_of(ucm, "rdma_cm_event", "event")?;
    cfg.cm_ev_status = offset_of(ucm, "rdma_cm_event", "status")?;
    cfg.cm_id_device = offset_of(ucm, "rdma_cm_id", "device")?;
    cfg.cm_id_qp = offset_of(ucm, "rdma_cm_id", "qp")?;
    cfg.cm_id_src = offset_of(ucm, "rdma_cm_id", "route.addr.src_addr")?;
    cfg.cm_id_dst = offset_of(ucm, "rdma_cm_id", "route.addr.dst_addr")?;
    let cm = kbtf.scope("rdma_cm", "rdma_id_private")?;
    cfg.cm_priv_id = offset_of(cm, "rdma_id_private", "id")?;
    cfg.cm_priv_res = offset_of(cm, "rdma_id_private", "res")?;
    cfg.cm_priv_qp_num = offset_of(cm, "rdma_id_private", "qp_num")?;
    Ok(notes)
}
