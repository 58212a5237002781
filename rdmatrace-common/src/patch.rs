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

/// Every placeholder, for user space to check that each was found and set.
pub const ALL: [i16; 2] = [ARG_SKB, SKB_LEN];
