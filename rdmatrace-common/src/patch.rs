//! Offsets the BTF-typed programs (fentry, tp_btf) load at, set in their instructions at load time. A tracing
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

/// `sk + SK_PROTOCOL`: `sock.sk_protocol`.
pub const SK_PROTOCOL: i16 = 0x5a0a;
/// `sk + SK_FAMILY`: `sock_common.skc_family`.
pub const SK_FAMILY: i16 = 0x5a0c;
/// `sk + SK_DADDR`: `sock_common.skc_daddr` (IPv4 peer).
pub const SK_DADDR: i16 = 0x5a0e;
/// `sk + SK_V6_DADDR`: the first 8 bytes of `sock_common.skc_v6_daddr` (IPv6 peer).
pub const SK_V6_DADDR: i16 = 0x5a20;
/// `sk + SK_V6_DADDR_HI`: its last 8 bytes.
pub const SK_V6_DADDR_HI: i16 = 0x5a40;
/// `sk + SK_HASH`: `sock_common.skc_hash` (the socket's slot).
pub const SK_HASH: i16 = 0x5a12;

/// The placeholders of the packet programs (`rxe_xmit_f`, `rxe_recv_f`).
pub const PACKET: [i16; 2] = [ARG_SKB, SKB_LEN];
/// The placeholders of the completion program (`rxe_cq_post_f`).
pub const CQ_POST: [i16; 2] = [ARG_CQE, CQE_STATUS];
/// The placeholders of the socket programs (`tcp_send_btf`, `tcp_recv_btf`).
pub const SOCK: [i16; 6] = [
    SK_PROTOCOL,
    SK_FAMILY,
    SK_DADDR,
    SK_V6_DADDR,
    SK_V6_DADDR_HI,
    SK_HASH,
];
/// Every placeholder, for user space to check that each was found and set.
pub const ALL: [i16; 10] = [
    ARG_SKB,
    SKB_LEN,
    ARG_CQE,
    CQE_STATUS,
    SK_PROTOCOL,
    SK_FAMILY,
    SK_DADDR,
    SK_V6_DADDR,
    SK_V6_DADDR_HI,
    SK_HASH,
];
