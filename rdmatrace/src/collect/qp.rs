//! QP lifecycle through ib_core (see `rdmatrace-ebpf/src/probes/qp.rs`).

use rdmatrace_common::{config::ProbeConfig, limits::UNRESOLVED};

use super::{Area, Hook, ProbeSpec, Role};
use crate::btf::{is_array, offset_of, param_index, BtfError, KernelBtf};

const CREATE: &str = "ib_create_qp_user";
const MODIFY: &str = "ib_modify_qp_with_udata";
const DESTROY: &str = "ib_destroy_qp_user";

pub const AREA: Area = Area {
    name: "qp",
    rdma: true,
    probes: &[
        ProbeSpec {
            program: "qp_create_enter",
            hook: Hook::Kprobe,
            target: CREATE,
            role: Role::Always,
        },
        ProbeSpec {
            program: "qp_create_exit",
            hook: Hook::Kretprobe,
            target: CREATE,
            role: Role::Always,
        },
        ProbeSpec {
            program: "qp_modify_enter",
            hook: Hook::Kprobe,
            target: MODIFY,
            role: Role::Always,
        },
        ProbeSpec {
            program: "qp_modify_exit",
            hook: Hook::Kretprobe,
            target: MODIFY,
            role: Role::Always,
        },
        ProbeSpec {
            program: "qp_destroy_enter",
            hook: Hook::Kprobe,
            target: DESTROY,
            role: Role::Always,
        },
        ProbeSpec {
            program: "qp_destroy_exit",
            hook: Hook::Kretprobe,
            target: DESTROY,
            role: Role::Always,
        },
    ],
    resolve,
};

/// The fields every QP-carrying event needs: which device, which QPN, which type. Shared by
/// the areas that read a `struct ib_qp` (qp, rxe).
pub fn resolve_ident(kbtf: &mut KernelBtf, cfg: &mut ProbeConfig) -> Result<(), BtfError> {
    let btf = kbtf.scope("ib_core", "ib_qp")?;
    cfg.qp_device = offset_of(btf, "ib_qp", "device")?;
    cfg.qp_qp_num = offset_of(btf, "ib_qp", "qp_num")?;
    cfg.qp_qp_type = offset_of(btf, "ib_qp", "qp_type")?;
    if !is_array(btf, "ib_device", "name")? {
        return Err(BtfError::NoMember {
            ty: "ib_device".into(),
            member: "name (as an inline char array)".into(),
        });
    }
    cfg.device_name = offset_of(btf, "ib_device", "name")?;
    Ok(())
}

fn resolve(kbtf: &mut KernelBtf, cfg: &mut ProbeConfig) -> Result<Vec<String>, BtfError> {
    resolve_ident(kbtf, cfg)?;
    let btf = kbtf.scope("ib_core", "ib_qp")?;
    cfg.modify_arg_qp = param_index(btf, MODIFY, &["ib_qp", "qp"])?;
    cfg.modify_arg_attr = param_index(btf, MODIFY, &["attr"])?;
    cfg.modify_arg_mask = param_index(btf, MODIFY, &["attr_mask"])?;
    cfg.destroy_arg_qp = param_index(btf, DESTROY, &["qp"])?;
    cfg.create_arg_dev = param_index(btf, CREATE, &["dev", "device"])?;

    // Optional: a missing one leaves that detail out of the events.
    let mut notes = Vec::new();
    let mut opt = |what: &str, r: Result<u32, BtfError>| match r {
        Ok(v) => v,
        Err(e) => {
            notes.push(format!("{what}: {e}"));
            UNRESOLVED
        }
    };
    cfg.create_arg_attr = opt(
        "create qp_type on failure",
        param_index(btf, CREATE, &["attr", "qp_init_attr"]),
    );
    cfg.init_attr_qp_type = opt(
        "create qp_type on failure",
        offset_of(btf, "ib_qp_init_attr", "qp_type"),
    );
    for (i, f) in [
        "max_send_wr",
        "max_recv_wr",
        "max_send_sge",
        "max_recv_sge",
        "max_inline_data",
    ]
    .into_iter()
    .enumerate()
    {
        cfg.init_cap[i] = opt(
            "capacities of a refused create",
            offset_of(btf, "ib_qp_init_attr", &format!("cap.{f}")),
        );
    }
    for (i, f) in ["max_qp_wr", "max_send_sge", "max_recv_sge"]
        .into_iter()
        .enumerate()
    {
        cfg.dev_attr_caps[i] = opt(
            "device limits of a refused create",
            offset_of(btf, "ib_device", &format!("attrs.{f}")),
        );
    }
    cfg.attr_qp_state = opt("modify new state", offset_of(btf, "ib_qp_attr", "qp_state"));
    cfg.attr_cur_qp_state = opt(
        "modify current state",
        offset_of(btf, "ib_qp_attr", "cur_qp_state"),
    );
    cfg.attr_path_mtu = opt("modify path MTU", offset_of(btf, "ib_qp_attr", "path_mtu"));
    cfg.attr_dest_qp_num = opt(
        "modify dest QPN",
        offset_of(btf, "ib_qp_attr", "dest_qp_num"),
    );
    cfg.attr_sq_psn = opt("modify SQ PSN", offset_of(btf, "ib_qp_attr", "sq_psn"));
    cfg.attr_rq_psn = opt("modify RQ PSN", offset_of(btf, "ib_qp_attr", "rq_psn"));
    cfg.attr_timeout = opt("modify timeout", offset_of(btf, "ib_qp_attr", "timeout"));
    cfg.attr_retry_cnt = opt(
        "modify retry_cnt",
        offset_of(btf, "ib_qp_attr", "retry_cnt"),
    );
    cfg.attr_rnr_retry = opt(
        "modify rnr_retry",
        offset_of(btf, "ib_qp_attr", "rnr_retry"),
    );
    cfg.attr_min_rnr_timer = opt(
        "modify min_rnr_timer",
        offset_of(btf, "ib_qp_attr", "min_rnr_timer"),
    );
    cfg.attr_dgid = opt(
        "modify dest GID",
        offset_of(btf, "ib_qp_attr", "ah_attr.grh.dgid"),
    );
    cfg.attr_sgid_index = opt(
        "modify source GID index",
        offset_of(btf, "ib_qp_attr", "ah_attr.grh.sgid_index"),
    );
    Ok(notes)
}
