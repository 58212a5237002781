//! Control-path verbs calls (see `rdmatrace-ebpf/src/probes/verbs.rs`): uprobes on exported
//! libibverbs/librdmacm functions, one program told which function by the attach cookie. Never
//! a per-work-request call (`ibv_post_send`, `ibv_poll_cq`): those run at packet rates.
//! On by default: a uprobe costs a few microseconds per call and these calls are rare.

use rdmatrace_common::{config::ProbeConfig, event::verbs_func as f};

use super::{Area, Hook, ProbeSpec, Role};
use crate::btf::{BtfError, KernelBtf};

const IBVERBS: &str = "libibverbs.so.1";
const RDMACM: &str = "librdmacm.so.1";

const fn ibv(symbol: &'static str, id: u32) -> ProbeSpec {
    ProbeSpec {
        program: "verbs_call",
        hook: Hook::Uprobe {
            lib: IBVERBS,
            cookie: id as u64,
        },
        target: symbol,
        role: Role::Always,
    }
}

const fn cm(symbol: &'static str, id: u32) -> ProbeSpec {
    ProbeSpec {
        program: "verbs_call",
        hook: Hook::Uprobe {
            lib: RDMACM,
            cookie: id as u64,
        },
        target: symbol,
        role: Role::Always,
    }
}

pub const AREA: Area = Area {
    name: "verbs",
    rdma: false,
    probes: &[
        ibv("ibv_get_device_list", f::IBV_GET_DEVICE_LIST),
        ibv("ibv_open_device", f::IBV_OPEN_DEVICE),
        ibv("ibv_alloc_pd", f::IBV_ALLOC_PD),
        ibv("ibv_create_cq", f::IBV_CREATE_CQ),
        ibv("ibv_create_qp", f::IBV_CREATE_QP),
        ibv("ibv_modify_qp", f::IBV_MODIFY_QP),
        ibv("ibv_destroy_qp", f::IBV_DESTROY_QP),
        // ibv_reg_mr, ibv_reg_mr_iova and the header's inline all jump here.
        ibv("ibv_reg_mr_iova2", f::IBV_REG_MR),
        ibv("ibv_dereg_mr", f::IBV_DEREG_MR),
        cm("rdma_create_id", f::RDMA_CREATE_ID),
        cm("rdma_resolve_addr", f::RDMA_RESOLVE_ADDR),
        cm("rdma_resolve_route", f::RDMA_RESOLVE_ROUTE),
        cm("rdma_create_qp", f::RDMA_CREATE_QP),
        cm("rdma_connect", f::RDMA_CONNECT),
        cm("rdma_listen", f::RDMA_LISTEN),
        cm("rdma_accept", f::RDMA_ACCEPT),
        cm("rdma_disconnect", f::RDMA_DISCONNECT),
    ],
    resolve,
};

/// User-space probes need nothing from the kernel's BTF.
fn resolve(_: &mut KernelBtf, _: &mut ProbeConfig) -> Result<Vec<String>, BtfError> {
    Ok(Vec::new())
}
