//! The diagnosis of one QP's chain of errors from its first error, its attributes, its peer
//! among the traced QPs and the addressing of both ends.

use super::{Attrs, Diagnosis, FirstError, MrSeen, QpErrors};
use crate::{
    correlate::analysis::{
        addressing::{Addressing, Finding},
        qps::QpLife,
    },
    event::{CompactString, QpKey, QpState},
    format::gid_text,
};

/// The peer end of `q` among the traced QPs: the QP whose number is `q`'s dest QPN and whose
/// dest QPN is `q`'s (both ends on this host, or both recorded).
pub(super) fn peer_of<'a>(q: &QpLife, qps: &'a [QpLife]) -> Option<&'a QpLife> {
    let want = q.peer_qpn?;
    qps.iter()
        .rev()
        .find(|p| p.key.qpn == want && p.peer_qpn == Some(q.key.qpn) && p.key != q.key)
}

fn ns_text(ns: u64) -> String {
    if ns >= 1_000_000_000 {
        format!("{:.2} s", ns as f64 / 1e9)
    } else if ns >= 1_000_000 {
        format!("{:.1} ms", ns as f64 / 1e6)
    } else {
        format!("{:.1} µs", ns as f64 / 1e3)
    }
}

/// The local ACK timeout an IB `timeout` value stands for (4.096 µs × 2^timeout; 0 = none).
pub(super) fn ack_timeout_text(t: u8) -> String {
    if t == 0 {
        "infinite".into()
    } else {
        ns_text(4096u64 << t.min(40))
    }
}

/// What a QP's diagnosis is judged against besides its own errors.
pub(super) struct Context<'a> {
    pub(super) qps: &'a [QpLife],
    pub(super) attrs: Attrs,
    pub(super) traffic_measured: bool,
    pub(super) addressing: &'a Addressing,
    /// Every QP's attributes (the peer's, for RNR).
    pub(super) all_attrs: &'a rustc_hash::FxHashMap<QpKey, Attrs>,
    /// MRs per (device, owner pid) (the target's, for a remote access error).
    pub(super) mrs: &'a rustc_hash::FxHashMap<(CompactString, u32), Vec<MrSeen>>,
}

/// The RNR NAK delay an IB `min_rnr_timer` code stands for (IBTA table; 0 = 655.36 ms).
fn min_rnr_text(t: u8) -> String {
    const US: [u32; 32] = [
        655_360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1280, 1920, 2560, 3840,
        5120, 7680, 10_240, 15_360, 20_480, 30_720, 40_960, 61_440, 81_920, 122_880, 163_840,
        245_760, 327_680, 491_520,
    ];
    ns_text(u64::from(US[usize::from(t & 31)]) * 1000)
}

pub(super) fn diagnose(
    key: &QpKey,
    first: &FirstError,
    e: &QpErrors,
    life: Option<&QpLife>,
    ctx: &Context,
) -> Diagnosis {
    let (qps, attrs, traffic_measured) = (ctx.qps, ctx.attrs, ctx.traffic_measured);
    let qpn = key.qpn;
    let dev = &key.dev;
    let peer = life.and_then(|q| peer_of(q, qps));
    let peer_name = |p: &QpLife| {
        format!(
            "QP {:#x} on {} of pid {} ({})",
            p.key.qpn, p.key.dev, p.owner_pid, p.owner_comm
        )
    };
    let mut evidence = vec![format!(
        "first error completion {} on CQ#{} for QP {qpn:#x} on {dev}{}",
        first.status,
        first.cqn,
        if first.vendor_err != 0 {
            format!(" (vendor error {:#x})", first.vendor_err)
        } else {
            String::new()
        }
    )];
    if let Some(q) = life {
        let mut line = format!(
            "QP {qpn:#x} ({}) created by pid {} ({})",
            crate::event::qp_type_name(q.qp_type),
            q.owner_pid,
            q.owner_comm
        );
        if let Some(d) = q.peer_qpn {
            line += &format!(", dest QPN {d:#x}");
        }
        if let Some(g) = &q.peer_gid {
            line += &format!(", dest GID {}", gid_text(g));
        }
        evidence.push(line);
        if traffic_measured {
            evidence.push(format!(
                "{} packets sent, {} received, {} retransmits on this QP",
                q.tx_packets, q.rx_packets, q.retransmits
            ));
        }
    }
    let status = first.status.as_str();
    let (kind, cause, fix) = match status {
        "RNR_RETRY_EXC_ERR" => {
            let receiver = peer.map_or_else(
                || {
                    format!(
                        "the receiver (dest QPN {})",
                        life.and_then(|q| q.peer_qpn)
                            .map_or("?".into(), |d| format!("{d:#x}"))
                    )
                },
                |p| format!("receiver pid {} ({})", p.owner_pid, p.owner_comm),
            );
            if let Some(r) = attrs.rnr_retry {
                evidence.push(format!(
                    "rnr_retry {r} on QP {qpn:#x}{}",
                    if r == 7 { " (7 = retry forever)" } else { "" }
                ));
            }
            let peer_attrs = peer.and_then(|p| ctx.all_attrs.get(&p.key));
            if let (Some(p), Some(t)) = (peer, peer_attrs.and_then(|a| a.min_rnr_timer)) {
                evidence.push(format!(
                    "min_rnr_timer {t} ({}) on the receiving QP {:#x}: the sender waited that long between retries",
                    min_rnr_text(t),
                    p.key.qpn
                ));
            }
            (
                "rnr",
                format!(
                    "{receiver} did not post receive buffers in time: QP {qpn:#x} on {dev} hit RNR retry exceeded"
                ),
                "post receives before the peer sends (and enough of them), or raise rnr_retry \
                 (7 retries forever) on the sender and min_rnr_timer on the receiver"
                    .to_string(),
            )
        }
        "REM_ACCESS_ERR" => {
            // The target's MRs on its device, with their access when the registration was seen.
            let target_mrs: Vec<MrSeen> = peer
                .and_then(|p| ctx.mrs.get(&(p.key.dev.clone(), p.owner_pid)))
                .map(|l| l.iter().filter(|m| m.access.is_some()).copied().collect())
                .unwrap_or_default();
            const REMOTE: u32 = 0b1110; // REMOTE_WRITE | REMOTE_READ | REMOTE_ATOMIC
            let none_remote = !target_mrs.is_empty()
                && target_mrs
                    .iter()
                    .all(|m| m.access.unwrap_or(0) & REMOTE == 0);
            if let Some(p) = peer {
                evidence.push(format!("the target is {}", peer_name(p)));
                for m in target_mrs.iter().rev().take(4) {
                    evidence.push(format!(
                        "pid {} registered an MR on {} with rkey {:#x}, {} bytes, access {}",
                        p.owner_pid,
                        p.key.dev,
                        m.rkey,
                        m.length,
                        crate::event::access_names(m.access.unwrap_or(0))
                    ));
                }
            }
            (
                "remote_access",
                match peer.filter(|_| none_remote) {
                    Some(p) => format!(
                        "the peer refused QP {qpn:#x}'s RDMA access: pid {} ({}) registered its MRs on {} without remote access",
                        p.owner_pid, p.owner_comm, p.key.dev
                    ),
                    None => format!(
                        "the peer refused QP {qpn:#x}'s RDMA access: the rkey is not a valid key of the peer, the address is outside its MR, or the MR lacks remote access"
                    ),
                },
                "send the rkey and address of an MR the peer registered with \
                 IBV_ACCESS_REMOTE_WRITE/READ/ATOMIC as the operation needs, and keep it \
                 registered while the peer uses it"
                    .into(),
            )
        }
        "LOC_LEN_ERR" | "LOC_PROT_ERR" | "LOC_QP_OP_ERR" | "LOC_EEC_OP_ERR" | "LOC_ACCESS_ERR"
        | "MW_BIND_ERR" | "REM_INV_REQ_ERR" => {
            let what = match status {
                "LOC_LEN_ERR" => "a message longer than the receive buffer it had posted (or a send longer than the port allows)",
                "LOC_PROT_ERR" => "its lkey or address range is not in a registered MR of the QP's PD",
                "LOC_QP_OP_ERR" => "an operation the QP cannot execute (opcode or size invalid for it; rxe reports a message longer than the posted receive buffer so)",
                "LOC_ACCESS_ERR" => "a local MR without the access the operation needs",
                "REM_INV_REQ_ERR" => "the peer found the request invalid (longer than its receive buffer, or an opcode its QP does not allow)",
                "MW_BIND_ERR" => "a memory window bind the MR does not allow",
                _ => "a local QP operation error",
            };
            (
                "local_error",
                format!("QP {qpn:#x} on {dev} failed a work request: {what}"),
                "check the failing work request's sizes, keys and opcode against the MRs and \
                 the QP type (and the receive buffer sizes the peer posts)"
                    .into(),
            )
        }
        "RETRY_EXC_ERR" => {
            if let Some(t) = attrs.timeout {
                evidence.push(format!(
                    "timeout {t} (local ACK timeout {}), retry_cnt {}",
                    ack_timeout_text(t),
                    attrs.retry_cnt.map_or("?".into(), |r| r.to_string())
                ));
            }
            let acked = life.is_some_and(|q| q.rx_packets > 0);
            let gone = peer.filter(|p| {
                p.destroyed_ns.is_some_and(|t| t <= first.ts_ns) || p.state == Some(QpState::Err)
            });
            let addressing = || -> Option<(&'static str, Finding)> {
                let q = life?;
                if let Some(f) = peer.and_then(|p| ctx.addressing.pair(q, p)) {
                    return Some(("gid_mismatch", f));
                }
                if peer.is_none() {
                    let f = ctx.addressing.dest_qpn_unknown(q, qps, first.ts_ns)?;
                    return Some(("dest_qpn_unknown", f));
                }
                None
            };
            let found = if gone.is_none() { addressing() } else { None };
            if let Some((kind, f)) = found {
                evidence.extend(f.evidence);
                (kind, f.cause, f.fix)
            } else if traffic_measured && !acked {
                (
                    "unreachable",
                    format!(
                        "the destination of QP {qpn:#x} on {dev} never answered: retries exceeded with nothing ever acknowledged"
                    ),
                    "check the dest GID/QPN the QP was connected to, the route and neighbour \
                     for the dest address, and that the peer's QP reached RTR"
                        .into(),
                )
            } else if let Some(p) = gone {
                evidence.push(format!(
                    "the peer {} was {} before this error",
                    peer_name(p),
                    if p.destroyed_ns.is_some() {
                        "destroyed"
                    } else {
                        "in ERR"
                    }
                ));
                (
                    "peer_gone",
                    format!(
                        "the peer of QP {qpn:#x} on {dev} (pid {} {}) went away while QP {qpn:#x} still sent: retries exceeded",
                        p.owner_pid, p.owner_comm
                    ),
                    "end both sides together (a disconnect message or RDMA CM), or check why \
                     the peer process exited"
                        .into(),
                )
            } else {
                (
                    "retry_exceeded",
                    format!(
                        "QP {qpn:#x} on {dev} stopped being acknowledged: transport retries exceeded (the peer went away, its QP left RTS, or the path lost every packet)"
                    ),
                    "check the peer process and its QP state, and loss on the path (port \
                     counters, retransmits)"
                        .into(),
                )
            }
        }
        _ => (
            "completion_error",
            format!("QP {qpn:#x} on {dev} completed a work request with {status}"),
            "see the status in the verbs documentation (ibv_wc_status_str) and the QP's \
             evidence"
                .into(),
        ),
    };
    let mut consequences = Vec::new();
    if e.flushed > 0 {
        consequences.push(format!(
            "{} work request(s) flushed (WR_FLUSH_ERR)",
            e.flushed
        ));
    }
    for (s, n) in &e.later {
        consequences.push(format!("{n} later completion(s) {s}"));
    }
    if let Some(from) = e.driver_err {
        consequences.push(format!(
            "QP moved {}->ERR by the driver",
            from.map_or("?", |s| s.name())
        ));
    }
    Diagnosis {
        kind,
        ts_ns: first.ts_ns,
        wall_ns: first.wall_ns,
        pid: first.pid,
        comm: first.comm.clone(),
        dev: Some(dev.clone()),
        qpn: Some(qpn),
        cause,
        evidence,
        fix,
        consequences,
    }
}
