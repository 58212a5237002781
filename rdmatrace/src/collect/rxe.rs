//! Soft-RoCE internals (see `rdmatrace-ebpf/src/probes/rxe.rs`).

use rdmatrace_common::config::ProbeConfig;

use super::{qp::resolve_ident, Area, Hook, ProbeSpec};
use crate::loader::btf::{offset_of, param_index, BtfError, KernelBtf};

pub const AREA: Area = Area {
    name: "rxe",
    rdma: true,
    probes: &[
        ProbeSpec {
            program: "rxe_retransmit_timer",
            hook: Hook::Kprobe,
            target: "retransmit_timer",
        },
        ProbeSpec {
            program: "rxe_rnr_nak_timer",
            hook: Hook::Kprobe,
            target: "rnr_nak_timer",
        },
        ProbeSpec {
            program: "rxe_xmit",
            hook: Hook::Kprobe,
            target: "rxe_xmit_packet",
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
    cfg.skb_len = offset_of(kbtf.vmlinux(), "sk_buff", "len")?;
    Ok(Vec::new())
}
