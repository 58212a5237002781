//! TCP retransmits with socket ownership (see `rdmatrace-ebpf/src/probes/tcp.rs`).

use rdmatrace_common::config::ProbeConfig;

use super::{Area, Hook, ProbeSpec, Role};
use crate::btf::{offset_of, tracepoint_id, BtfError, KernelBtf};

pub const AREA: Area = Area {
    name: "tcp",
    rdma: false,
    probes: &[
        ProbeSpec {
            program: "tcp_sendmsg_owner",
            hook: Hook::Kprobe,
            target: "tcp_sendmsg",
            role: Role::Always,
        },
        ProbeSpec {
            program: "tcp_state",
            hook: Hook::RawTracepoint,
            target: "inet_sock_set_state",
            role: Role::Always,
        },
        ProbeSpec {
            program: "tcp_retransmit",
            hook: Hook::RawTracepoint,
            target: "tcp_retransmit_skb",
            role: Role::Always,
        },
        ProbeSpec {
            program: "tcp_send_bytes",
            hook: Hook::RawTracepoint,
            target: "sock_send_length",
            role: Role::Always,
        },
        ProbeSpec {
            program: "tcp_recv_bytes",
            hook: Hook::RawTracepoint,
            target: "sock_recv_length",
            role: Role::Always,
        },
        // Before 6.3 (no sock_*_length tracepoints), where kprobes exist.
        ProbeSpec {
            program: "tcp_send_bytes_ret",
            hook: Hook::Kretprobe,
            target: "tcp_sendmsg",
            role: Role::InsteadOf("tcp_send_bytes"),
        },
        ProbeSpec {
            program: "tcp_recv_bytes_ret",
            hook: Hook::Kretprobe,
            target: "tcp_recvmsg",
            role: Role::InsteadOf("tcp_recv_bytes"),
        },
        // Their sockets, for the return probes (listed last: the return probes are what a
        // report names as standing in).
        ProbeSpec {
            program: "tcp_msg_sk",
            hook: Hook::Kprobe,
            target: "tcp_sendmsg",
            role: Role::InsteadOf("tcp_send_bytes"),
        },
        ProbeSpec {
            program: "tcp_msg_sk",
            hook: Hook::Kprobe,
            target: "tcp_recvmsg",
            role: Role::InsteadOf("tcp_recv_bytes"),
        },
    ],
    resolve,
};

fn resolve(kbtf: &mut KernelBtf, cfg: &mut ProbeConfig) -> Result<Vec<String>, BtfError> {
    let btf = kbtf.vmlinux();
    cfg.sk_family = offset_of(btf, "sock_common", "skc_family")?;
    cfg.sk_state = offset_of(btf, "sock_common", "skc_state")?;
    cfg.sk_num = offset_of(btf, "sock_common", "skc_num")?;
    cfg.sk_dport = offset_of(btf, "sock_common", "skc_dport")?;
    cfg.sk_daddr = offset_of(btf, "sock_common", "skc_daddr")?;
    cfg.sk_rcv_saddr = offset_of(btf, "sock_common", "skc_rcv_saddr")?;
    cfg.sk_hash = offset_of(btf, "sock_common", "skc_hash")?;
    cfg.sk_protocol = offset_of(btf, "sock", "sk_protocol")?;
    // `struct sock` starts with its `sock_common`; check rather than assume.
    let common = offset_of(btf, "sock", "__sk_common")?;
    let mut notes = Vec::new();
    for (field, name) in [
        (&mut cfg.sk_v6_daddr, "skc_v6_daddr"),
        (&mut cfg.sk_v6_rcv_saddr, "skc_v6_rcv_saddr"),
    ] {
        match offset_of(btf, "sock_common", name) {
            Ok(off) => *field = off + common,
            Err(e) => notes.push(format!("IPv6 addresses: {e}")),
        }
    }
    // For the tp_btf programs (tried after the load; the raw tracepoints stay without them).
    if let (Ok(send), Ok(recv)) = (
        tracepoint_id(btf, "sock_send_length"),
        tracepoint_id(btf, "sock_recv_length"),
    ) {
        cfg.typed_ids[4] = send;
        cfg.typed_ids[5] = recv;
    }
    for off in [
        &mut cfg.sk_family,
        &mut cfg.sk_state,
        &mut cfg.sk_num,
        &mut cfg.sk_dport,
        &mut cfg.sk_daddr,
        &mut cfg.sk_rcv_saddr,
        &mut cfg.sk_hash,
    ] {
        *off += common;
    }
    Ok(notes)
}
