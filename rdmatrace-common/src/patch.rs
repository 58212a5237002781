//! Offsets the fentry programs load at, set in their instructions at load time. A tracing
//! program may load a field of a typed kernel pointer directly (no `bpf_probe_read_kernel`
//! call), but only at an offset the verifier sees as a constant; the offsets come from BTF at
//! load time, so the programs are built with these placeholders as the offsets of their loads,
//! and user space writes the resolved offset into every load (`BPF_LDX`) whose offset is a
//! placeholder before loading them. The values are ones no real load of these programs uses.

/// `ctx + ARG_SKB`: the `struct sk_buff *` argument (8 x its position).
pub const ARG_SKB: i16 = 0x5a02;
/// `skb + SKB_LEN`: `sk_buff.len`.
pub const SKB_LEN: i16 = 0x5a04;

/// `ctx + ARG_CQE`: the `struct rxe_cqe *` argument of `rxe_cq_post` (8 x its position).
pub const ARG_CQE: i16 = 0x5a06;
/// `cqe + CQE_STATUS`: the completion's status (the same offset in both of its layouts).
pub const CQE_STATUS: i16 = 0x5a08;

/// The placeholders of the packet programs (`rxe_xmit_f`, `rxe_recv_f`).
pub const PACKET: [i16; 2] = [ARG_SKB, SKB_LEN];
/// The placeholders of the completion program (`rxe_cq_post_f`).
pub const CQ_POST: [i16; 2] = [ARG_CQE, CQE_STATUS];
/// Every placeholder, for user space to check that each was found and set.
pub const ALL: [i16; 4] = [ARG_SKB, SKB_LEN, ARG_CQE, CQE_STATUS];
