//! Soft-RoCE internals (see `rdmatrace-ebpf/src/probes/rxe.rs`).

use rdmatrace_common::config::ProbeConfig;

use super::{qp::resolve_ident, Area, Hook, ProbeSpec, Role};
use crate::btf::{module_func_id, offset_of, param_index, BtfError, KernelBtf};

pub const AREA: Area = Area {
    name: "rxe",
    rdma: true,
    probes: &[
        ProbeSpec {
            program: "rxe_retransmit_timer",
            hook: Hook::Kprobe,
            target: "retransmit_timer",
            role: Role::Always,
        },
        ProbeSpec {
            program: "rxe_rnr_nak_timer",
            hook: Hook::Kprobe,
            target: "rnr_nak_timer",
            role: Role::Always,
        },
        ProbeSpec {
            program: "rxe_xmit",
            hook: Hook::Kprobe,
            target: "rxe_xmit_packet",
            role: Role::Always,
        },
        ProbeSpec {
            program: "rxe_recv",
            hook: Hook::Kprobe,
            target: "rxe_resp_queue_pkt",
            role: Role::Always,
        },
        ProbeSpec {
            program: "rxe_recv",
            hook: Hook::Kprobe,
            target: "rxe_comp_queue_pkt",
            role: Role::Always,
        },
        ProbeSpec {
            program: "rxe_mr_access",
            hook: Hook::Kprobe,
            target: "rxe_reg_user_mr",
            role: Role::Always,
        },
    ],
    resolve,
};

fn resolve(kbtf: &mut KernelBtf, cfg: &mut ProbeConfig) -> Result<Vec<String>, BtfError> {
    resolve_ident(kbtf, cfg)?;
    let btf = kbtf.scope("rdma_rxe", "rxe_qp")?;
    cfg.rxe_qp_ibqp = offset_of(btf, "rxe_qp", "ibqp")?;
    cfg.rxe_qp_retrans_timer = offset_of(btf, "rxe_qp", "retrans_timer")?;
    cfg.rxe_qp_rnr_nak_timer = offset_of(btf, "rxe_qp", "rnr_nak_timer")?;
    cfg.xmit_arg_qp = param_index(btf, "rxe_xmit_packet", &["qp"])?;
    cfg.xmit_arg_skb = param_index(btf, "rxe_xmit_packet", &["skb"])?;
    let mut notes = Vec::new();
    match (
        param_index(btf, "rxe_resp_queue_pkt", &["qp"]),
        param_index(btf, "rxe_resp_queue_pkt", &["skb"]),
        param_index(btf, "rxe_comp_queue_pkt", &["qp"]),
        param_index(btf, "rxe_comp_queue_pkt", &["skb"]),
    ) {
        (Ok(qp), Ok(skb), Ok(qp2), Ok(skb2)) if (qp, skb) == (qp2, skb2) => {
            cfg.rcv_arg_qp = qp;
            cfg.rcv_arg_skb = skb;
        }
        _ => notes.push(
            "received packets not counted: rxe_{resp,comp}_queue_pkt(qp, skb) not found".into(),
        ),
    }
    match param_index(btf, "rxe_reg_user_mr", &["access", "access_flags"]) {
        Ok(i) => cfg.rxe_mr_arg_access = i,
        Err(e) => notes.push(format!("MR access flags not reported: {e}")),
    }
    // For the fentry programs (tried after the load; the kprobes stay when any is missing).
    let btf = kbtf.scope("rdma_rxe", "rxe_qp")?;
    let ids = [
        "rxe_xmit_packet",
        "rxe_resp_queue_pkt",
        "rxe_comp_queue_pkt",
    ]
    .map(|f| module_func_id(btf, f));
    if let [Ok(a), Ok(b), Ok(c)] = ids {
        cfg.typed_ids[..3].copy_from_slice(&[a, b, c]);
    }
    cfg.skb_len = offset_of(kbtf.vmlinux(), "sk_buff", "len")?;
    Ok(notes)
}
