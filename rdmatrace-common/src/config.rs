//! `CONFIG` map contents: kernel-side filter and the struct offsets / argument positions that user
//! space resolved from this kernel's BTF. Nothing here is hard-coded for one kernel version; a
//! field the kernel does not have is [`UNRESOLVED`](crate::limits::UNRESOLVED) and is not read.

/// Report every process.
pub const FILTER_ALL: u32 = 0;
/// Report only processes whose thread-group id is a key of the `TRACED` map.
pub const FILTER_TRACED: u32 = 1;
/// Report processes in `TRACED`, and add to it every process whose cgroup id is a key of the
/// `WANTED_CGROUPS` map when it is first seen (`--container`, `--pod`, `--cgroup`).
pub const FILTER_CGROUP: u32 = 2;

/// Byte offsets of the struct members the programs read, plus argument positions of the probed
/// functions. Every field is a `u32`; `UNRESOLVED` disables the read.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProbeConfig {
    /// [`FILTER_ALL`], [`FILTER_TRACED`] or [`FILTER_CGROUP`].
    pub filter_mode: u32,
    /// Non-zero: add the children of traced processes to `TRACED` as they fork.
    pub follow_forks: u32,

    // struct ib_qp
    pub qp_device: u32,
    pub qp_qp_num: u32,
    pub qp_qp_type: u32,
    // struct ib_device
    pub device_name: u32,
    // struct ib_qp_init_attr
    pub init_attr_qp_type: u32,
    // struct ib_qp_attr
    pub attr_qp_state: u32,
    pub attr_cur_qp_state: u32,
    pub attr_path_mtu: u32,
    pub attr_dest_qp_num: u32,
    pub attr_sq_psn: u32,
    pub attr_rq_psn: u32,
    pub attr_timeout: u32,
    pub attr_retry_cnt: u32,
    pub attr_rnr_retry: u32,
    pub attr_min_rnr_timer: u32,
    /// `ah_attr.grh.dgid`, summed through the nested structs.
    pub attr_dgid: u32,
    /// `ah_attr.grh.sgid_index`.
    pub attr_sgid_index: u32,
    // struct task_struct
    pub task_real_parent: u32,
    pub task_tgid: u32,
    pub task_exit_code: u32,

    // struct rxe_qp (rdma_rxe): the ib_qp inside it and the timers the probes are handed.
    pub rxe_qp_ibqp: u32,
    pub rxe_qp_retrans_timer: u32,
    pub rxe_qp_rnr_nak_timer: u32,
    // struct sock_common (through struct sock)
    pub sk_family: u32,
    pub sk_state: u32,
    pub sk_num: u32,
    pub sk_dport: u32,
    pub sk_daddr: u32,
    pub sk_rcv_saddr: u32,
    pub sk_v6_daddr: u32,
    pub sk_v6_rcv_saddr: u32,
    /// `struct sock.sk_protocol`.
    pub sk_protocol: u32,
    /// `sock_common.skc_hash`: the socket's hash of its addresses and ports, which picks its
    /// slot in `SOCK_SLOTS` (see [`crate::event::SockSlot`]).
    pub sk_hash: u32,

    // struct rdma_restrack_entry (every user-visible RDMA object embeds one as `res`)
    pub res_task: u32,
    pub res_type: u32,
    pub res_user: u32,
    pub res_id: u32,
    /// `task_struct.comm`.
    pub task_comm: u32,
    /// Per `enum rdma_restrack_type`: offset of `res` inside the object's struct.
    pub res_base: [u32; RES_TYPES],
    /// Per type: offset of the `struct ib_device *` inside the object's struct.
    pub res_device: [u32; RES_TYPES],
    // struct ib_cq / struct ib_mr details
    pub cq_cqe: u32,
    pub cq_comp_vector: u32,
    pub mr_lkey: u32,
    pub mr_rkey: u32,
    pub mr_length: u32,
    pub mr_iova: u32,
    // struct ib_event
    pub ev_device: u32,
    pub ev_element: u32,
    pub ev_event: u32,
    // rdma_cm: struct rdma_cm_event, struct rdma_cm_id, struct rdma_id_private
    pub cm_ev_event: u32,
    pub cm_ev_status: u32,
    pub cm_id_device: u32,
    pub cm_id_qp: u32,
    pub cm_id_src: u32,
    pub cm_id_dst: u32,
    pub cm_priv_id: u32,
    pub cm_priv_res: u32,

    // Argument positions (0-based) of the probed functions, from their BTF prototypes.
    /// `ib_create_qp_user(dev, pd, attr, ...)`: the `ib_device *`.
    pub create_arg_dev: u32,
    /// `ib_create_qp_user(...)`: the `ib_qp_init_attr *`.
    pub create_arg_attr: u32,
    /// `ib_modify_qp_with_udata(ib_qp, attr, attr_mask, udata)`.
    pub modify_arg_qp: u32,
    pub modify_arg_attr: u32,
    pub modify_arg_mask: u32,
    /// `ib_destroy_qp_user(qp, udata)`.
    pub destroy_arg_qp: u32,
    /// `ib_uverbs_{qp,cq,srq}_event_handler(event, context)`: the `ib_event *`.
    pub async_arg_event: u32,
    /// `ib_uverbs_event_handler(handler, event)`: the `ib_event *`.
    pub async_dev_arg_event: u32,
    /// `ucma_event_handler(cm_id, event)`.
    pub ucma_arg_id: u32,
    pub ucma_arg_event: u32,
    /// `rdma_id_private.qp_num`: the QPN a user-space QP announced in connect/accept.
    pub cm_priv_qp_num: u32,
    /// `rxe_xmit_packet(qp, pkt, skb)`: positions of the QP and the skb; `sk_buff.len`.
    pub xmit_arg_qp: u32,
    pub xmit_arg_skb: u32,
    pub skb_len: u32,

    // Completions: struct rxe_cq, union rxe_cqe (kernel `ib_wc` / user `ib_uverbs_wc`), and
    // `rxe_cq_post(cq, cqe, solicited)`; `ib_uverbs_comp_handler(cq, ctx)` needs only ib_cq.
    pub rxe_cq_ibcq: u32,
    pub rxe_cq_is_user: u32,
    pub wc_status: u32,
    pub wc_opcode: u32,
    pub wc_vendor_err: u32,
    pub wc_qp: u32,
    pub uwc_status: u32,
    pub uwc_opcode: u32,
    pub uwc_vendor_err: u32,
    pub uwc_qp_num: u32,
    pub cq_post_arg_cq: u32,
    pub cq_post_arg_cqe: u32,
    pub comp_arg_cq: u32,
    // rxe receive path: `rxe_resp_queue_pkt(qp, skb)` / `rxe_comp_queue_pkt(qp, skb)`.
    pub rcv_arg_qp: u32,
    pub rcv_arg_skb: u32,
    // MR access flags: the `access` argument of the drivers' reg_user_mr.
    pub rxe_mr_arg_access: u32,
    pub mlx5_mr_arg_access: u32,
    // mlx5_ib: `mlx5_ib_qp_event(mqp, type)`; the ib_qp is found from the embedded core QP.
    pub mlx5_qp_mqp: u32,
    pub mlx5_qp_ibqp: u32,
    pub mlx5_event_arg_qp: u32,
    pub mlx5_event_arg_type: u32,
    /// `__ib_unregister_device(ib_dev)`: a device is going away. Took the place of the
    /// trailing pad, so the size is unchanged.
    pub unreg_arg_dev: u32,
    /// `ib_umem_get(device, addr, size, access)`: the `ib_device *` and the size.
    pub umem_arg_dev: u32,
    pub umem_arg_size: u32,
    /// `task_struct.signal`, and `signal_struct.rlim[RLIMIT_MEMLOCK].rlim_cur` inside it.
    pub task_signal: u32,
    pub signal_rlim_memlock: u32,
    /// `task_struct.mm`, and `mm_struct.pinned_vm` (pages) inside it.
    pub task_mm: u32,
    pub mm_pinned_vm: u32,
    /// `ib_qp_init_attr.cap.{max_send_wr, max_recv_wr, max_send_sge, max_recv_sge,
    /// max_inline_data}`.
    pub init_cap: [u32; 5],
    /// `ib_device.attrs.{max_qp_wr, max_send_sge, max_recv_sge}`.
    pub dev_attr_caps: [u32; 3],
    /// `ib_cq.device`, `ib_pd.device`: the device of a CQ being created, of an SRQ's PD.
    pub cq_device: u32,
    pub pd_device: u32,
    /// `ib_cq_init_attr.cqe`; `ib_srq_init_attr.attr.{max_wr, max_sge}`.
    pub cq_attr_cqe: u32,
    pub srq_attr_max_wr: u32,
    pub srq_attr_max_sge: u32,
    /// `ib_device.attrs.{max_cqe, max_srq_wr, max_srq_sge}`.
    pub dev_attr_queue: [u32; 3],
    /// `ib_create_srq_user(pd, srq_init_attr, ...)` argument positions.
    pub srq_arg_pd: u32,
    pub srq_arg_attr: u32,
    /// `task_struct.nsproxy`, `nsproxy.mnt_ns`, `mnt_namespace.ns.inum`: the mount namespace
    /// of an exec'ing process, compared with `own_mnt_ns`, the inode number of rdmatrace's own
    /// (0: unknown). An exec in another one (a container) wakes the reader at once.
    pub task_nsproxy: u32,
    pub nsproxy_mnt_ns: u32,
    pub mnt_ns_inum: u32,
    pub own_mnt_ns: u32,
    /// Non-zero when the rxe per-packet programs may count in `QP_SLOTS` (see
    /// [`crate::event::QpSlot`]): set by user space once the slots are read (mapped) and the
    /// QP destroy probe, which frees a QP's slot, is attached. Zero: every packet goes through
    /// the `QP_TRAFFIC` hash, as before the slots.
    pub qp_slots: u32,
    /// Non-zero when the socket byte programs may count in `SOCK_SLOTS` (see
    /// [`crate::event::SockSlot`]): set by user space once the slots are read (mapped). Zero:
    /// every send and receive goes through the `TCP_BYTES` hash.
    pub sock_slots: u32,
    /// Which kprobes and raw tracepoints the BTF-typed programs (fentry, tp_btf) run in place
    /// of: [`TYPED_RXE_PACKETS`] (`rxe_xmit`, `rxe_recv` by `rxe_xmit_f`, `rxe_recv_f`),
    /// [`TYPED_RXE_CQ_POST`] (`rxe_cq_post` by `rxe_cq_post_f`), [`TYPED_SOCK`]
    /// (`tcp_send_bytes`, `tcp_recv_bytes` by `tcp_send_btf`, `tcp_recv_btf`). A program
    /// replaced by its typed twin counts nothing (it is detached too); a typed program whose
    /// bit is clear counts nothing.
    pub typed: u32,
    /// BTF ids of what the typed programs attach to: in `rdma_rxe`'s BTF (split over
    /// vmlinux's) the functions `rxe_xmit_packet`, `rxe_resp_queue_pkt`, `rxe_comp_queue_pkt`,
    /// `rxe_cq_post`; in vmlinux's the typedefs `btf_trace_sock_send_length`,
    /// `btf_trace_sock_recv_length`. Read by user space only.
    pub typed_ids: [u32; 6],
    /// Non-zero once user space has written this config. The programs are attached while the
    /// offsets are still being resolved (start-up runs both at once); until then the map holds
    /// zeros and every program returns at once, emitting nothing.
    pub ready: u32,
}

/// Number of `enum rdma_restrack_type` values tracked (PD .. SRQ).
pub const RES_TYPES: usize = 8;
const _: () = assert!(core::mem::size_of::<ProbeConfig>() == 336 + 63 * 4);

/// [`ProbeConfig::typed`]: the rxe packets are counted by the fentry programs.
pub const TYPED_RXE_PACKETS: u32 = 1;
/// [`ProbeConfig::typed`]: the rxe completions are checked by the fentry program.
pub const TYPED_RXE_CQ_POST: u32 = 2;
/// [`ProbeConfig::typed`]: socket sends and receives are counted by the tp_btf programs.
pub const TYPED_SOCK: u32 = 4;

#[cfg(feature = "user")]
// SAFETY: #[repr(C)], only u32 fields, no implicit padding.
unsafe impl aya::Pod for ProbeConfig {}

impl ProbeConfig {
    /// Everything unresolved, no filter: the starting point user space fills from BTF (ready:
    /// it is what user space writes).
    pub const fn unresolved() -> ProbeConfig {
        use crate::limits::UNRESOLVED as U;
        ProbeConfig {
            filter_mode: FILTER_ALL,
            follow_forks: 0,
            qp_device: U,
            qp_qp_num: U,
            qp_qp_type: U,
            device_name: U,
            init_attr_qp_type: U,
            attr_qp_state: U,
            attr_cur_qp_state: U,
            attr_path_mtu: U,
            attr_dest_qp_num: U,
            attr_sq_psn: U,
            attr_rq_psn: U,
            attr_timeout: U,
            attr_retry_cnt: U,
            attr_rnr_retry: U,
            attr_min_rnr_timer: U,
            attr_dgid: U,
            attr_sgid_index: U,
            task_real_parent: U,
            task_tgid: U,
            task_exit_code: U,
            rxe_qp_ibqp: U,
            rxe_qp_retrans_timer: U,
            rxe_qp_rnr_nak_timer: U,
            sk_family: U,
            sk_state: U,
            sk_num: U,
            sk_dport: U,
            sk_daddr: U,
            sk_rcv_saddr: U,
            sk_v6_daddr: U,
            sk_v6_rcv_saddr: U,
            sk_protocol: U,
            sk_hash: U,
            res_task: U,
            res_type: U,
            res_user: U,
            res_id: U,
            task_comm: U,
            res_base: [U; RES_TYPES],
            res_device: [U; RES_TYPES],
            cq_cqe: U,
            cq_comp_vector: U,
            mr_lkey: U,
            mr_rkey: U,
            mr_length: U,
            mr_iova: U,
            ev_device: U,
            ev_element: U,
            ev_event: U,
            cm_ev_event: U,
            cm_ev_status: U,
            cm_id_device: U,
            cm_id_qp: U,
            cm_id_src: U,
            cm_id_dst: U,
            cm_priv_id: U,
            cm_priv_res: U,
            create_arg_dev: U,
            create_arg_attr: U,
            modify_arg_qp: U,
            modify_arg_attr: U,
            modify_arg_mask: U,
            destroy_arg_qp: U,
            async_arg_event: U,
            async_dev_arg_event: U,
            ucma_arg_id: U,
            ucma_arg_event: U,
            cm_priv_qp_num: U,
            xmit_arg_qp: U,
            xmit_arg_skb: U,
            skb_len: U,
            rxe_cq_ibcq: U,
            rxe_cq_is_user: U,
            wc_status: U,
            wc_opcode: U,
            wc_vendor_err: U,
            wc_qp: U,
            uwc_status: U,
            uwc_opcode: U,
            uwc_vendor_err: U,
            uwc_qp_num: U,
            cq_post_arg_cq: U,
            cq_post_arg_cqe: U,
            comp_arg_cq: U,
            rcv_arg_qp: U,
            rcv_arg_skb: U,
            rxe_mr_arg_access: U,
            mlx5_mr_arg_access: U,
            mlx5_qp_mqp: U,
            mlx5_qp_ibqp: U,
            mlx5_event_arg_qp: U,
            mlx5_event_arg_type: U,
            unreg_arg_dev: U,
            umem_arg_dev: U,
            umem_arg_size: U,
            task_signal: U,
            signal_rlim_memlock: U,
            task_mm: U,
            mm_pinned_vm: U,
            init_cap: [U; 5],
            dev_attr_caps: [U; 3],
            cq_device: U,
            pd_device: U,
            cq_attr_cqe: U,
            srq_attr_max_wr: U,
            srq_attr_max_sge: U,
            dev_attr_queue: [U; 3],
            srq_arg_pd: U,
            srq_arg_attr: U,
            task_nsproxy: U,
            nsproxy_mnt_ns: U,
            mnt_ns_inum: U,
            own_mnt_ns: 0,
            qp_slots: 0,
            sock_slots: 0,
            typed: 0,
            typed_ids: [U; 6],
            ready: 1,
        }
    }
}
