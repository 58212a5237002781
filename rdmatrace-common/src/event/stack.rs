//! Stack-bearing records (kinds 20-29): control-path verbs calls with the caller's user stack,
//! and on-CPU samples with user and kernel stacks.

use super::EventHeader;

/// Frames kept per stack (user or kernel). Deeper stacks are cut at the outermost frames.
pub const STACK_DEPTH: usize = 32;

/// The verbs calls rdmatrace probes, by [`VerbsCallEvent::func`] (the attach cookie).
/// Control path only: never a per-work-request call such as `ibv_post_send` or `ibv_poll_cq`.
pub mod verbs_func {
    pub const IBV_GET_DEVICE_LIST: u32 = 1;
    pub const IBV_OPEN_DEVICE: u32 = 2;
    pub const IBV_ALLOC_PD: u32 = 3;
    pub const IBV_CREATE_CQ: u32 = 4;
    pub const IBV_CREATE_QP: u32 = 5;
    pub const IBV_MODIFY_QP: u32 = 6;
    pub const IBV_DESTROY_QP: u32 = 7;
    /// Probed at `ibv_reg_mr_iova2`, where `ibv_reg_mr`, `ibv_reg_mr_iova` and the header's
    /// inline `ibv_reg_mr` all end up: one registration is one call.
    pub const IBV_REG_MR: u32 = 8;
    pub const IBV_DEREG_MR: u32 = 9;
    pub const RDMA_CREATE_ID: u32 = 10;
    pub const RDMA_RESOLVE_ADDR: u32 = 11;
    pub const RDMA_RESOLVE_ROUTE: u32 = 12;
    pub const RDMA_CREATE_QP: u32 = 13;
    pub const RDMA_CONNECT: u32 = 14;
    pub const RDMA_LISTEN: u32 = 15;
    pub const RDMA_ACCEPT: u32 = 16;
    pub const RDMA_DISCONNECT: u32 = 17;

    /// (id, name shown in output).
    pub const NAMES: [(u32, &str); 17] = [
        (IBV_GET_DEVICE_LIST, "ibv_get_device_list"),
        (IBV_OPEN_DEVICE, "ibv_open_device"),
        (IBV_ALLOC_PD, "ibv_alloc_pd"),
        (IBV_CREATE_CQ, "ibv_create_cq"),
        (IBV_CREATE_QP, "ibv_create_qp"),
        (IBV_MODIFY_QP, "ibv_modify_qp"),
        (IBV_DESTROY_QP, "ibv_destroy_qp"),
        (IBV_REG_MR, "ibv_reg_mr"),
        (IBV_DEREG_MR, "ibv_dereg_mr"),
        (RDMA_CREATE_ID, "rdma_create_id"),
        (RDMA_RESOLVE_ADDR, "rdma_resolve_addr"),
        (RDMA_RESOLVE_ROUTE, "rdma_resolve_route"),
        (RDMA_CREATE_QP, "rdma_create_qp"),
        (RDMA_CONNECT, "rdma_connect"),
        (RDMA_LISTEN, "rdma_listen"),
        (RDMA_ACCEPT, "rdma_accept"),
        (RDMA_DISCONNECT, "rdma_disconnect"),
    ];

    pub fn name(id: u32) -> Option<&'static str> {
        let mut i = 0;
        while i < NAMES.len() {
            if NAMES[i].0 == id {
                return Some(NAMES[i].1);
            }
            i += 1;
        }
        None
    }
}

/// A control-path verbs call (uprobe at the function's entry) and the caller's user stack.
/// Sized once (fixed depth, explicit length) so the kernel writes it straight into the ring
/// buffer.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VerbsCallEvent {
    pub header: EventHeader,
    /// One of [`verbs_func`].
    pub func: u32,
    /// Valid entries of `ips`, innermost first: `ips[0]` is the probed function's entry,
    /// `ips[1]` the return address into its caller, then the frame-pointer chain.
    pub frames: u32,
    pub ips: [u64; STACK_DEPTH],
}
const _: () = assert!(core::mem::size_of::<VerbsCallEvent>() == 40 + 8 + 8 * STACK_DEPTH);

/// One on-CPU sample (perf event, software CPU clock) of a traced process.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CpuSampleEvent {
    pub header: EventHeader,
    /// Valid entries of `user_ips` / `kernel_ips`, innermost first (0: none, e.g. a sample
    /// taken in user mode has no kernel stack).
    pub user_frames: u32,
    pub kernel_frames: u32,
    pub user_ips: [u64; STACK_DEPTH],
    pub kernel_ips: [u64; STACK_DEPTH],
}
const _: () = assert!(core::mem::size_of::<CpuSampleEvent>() == 40 + 8 + 16 * STACK_DEPTH);
