//! Port counters read as causes, for devices whose data path the kernel never sees (mlx5 /
//! ConnectX and every hardware NIC): loss on the fabric (sequence errors, out-of-sequence
//! requests, ACK timeouts, corrupted packets) against the packets the port moved, congestion the
//! fabric signalled and the NIC handled (ECN marks, CNPs), receivers not ready (RNR) and
//! transport retries exhausted. Names are the kernel's (mlx5 `hw_counters`, IB `counters`).
//! Judged per port on the whole run; QP-level diagnoses of the same device take precedence.

use std::collections::BTreeMap;

use super::{diagnosis::Diagnosis, qps::QpLife};
use crate::event::CompactString;

/// Counter totals of a run: (device, port, counter name) -> sum of deltas.
pub type Totals = BTreeMap<(CompactString, u32, String), u64>;

/// Loss signals and what each says, in the order they are cited.
const LOSS: &[(&str, &str)] = &[
    ("out_of_sequence", "requests arrived out of sequence here: requests were lost on the way to this port"),
    ("packet_seq_err", "this port's requests were NAKed for a sequence error: they were lost on the way out"),
    ("implied_nak_seq_err", "responses showed a gap (implied NAK): packets were lost"),
    ("local_ack_timeout_err", "acknowledgements did not come back in time: requests or ACKs were lost (or the ACK timeout is shorter than the round trip)"),
    ("rx_icrc_encapsulated", "packets arrived with a bad ICRC: corrupted on the wire (cable, optic, port)"),
];
/// Congestion the fabric signalled (ECN) and the NIC reacted to (DCQCN).
const ECN: &[(&str, &str)] = &[
    ("np_ecn_marked_roce_packets", "ECN-marked packets received"),
    (
        "np_cnp_sent",
        "congestion notifications (CNP) sent back to senders",
    ),
    (
        "rp_cnp_handled",
        "congestion notifications handled: this port's senders slowed down",
    ),
];
/// Counters of packets moved, for the share.
const PACKETS: &[&str] = &["port_xmit_packets", "port_rcv_packets"];

fn total(t: &Totals, dev: &str, port: u32, names: &[&str]) -> u64 {
    t.iter()
        .filter(|((d, p, n), _)| d == dev && *p == port && names.contains(&n.as_str()))
        .map(|(_, v)| *v)
        .sum()
}

/// The owners of QPs on `dev` (most first), named as the processes that suffer a port's fault.
fn sufferers(qps: &[QpLife], dev: &str) -> Vec<(u32, CompactString)> {
    let mut count: BTreeMap<(u32, CompactString), u64> = BTreeMap::new();
    for q in qps.iter().filter(|q| q.key.dev == dev && q.owner_pid != 0) {
        *count
            .entry((q.owner_pid, q.owner_comm.clone()))
            .or_default() += 1;
    }
    let mut v: Vec<_> = count.into_iter().collect();
    v.sort_by_key(|(_, n)| std::cmp::Reverse(*n));
    v.into_iter().map(|(k, _)| k).collect()
}

/// Diagnoses from port counters, for ports whose device has no diagnosis of that kind yet.
pub fn interpret(totals: &Totals, qps: &[QpLife], end_wall_ns: u64, out: &mut Vec<Diagnosis>) {
    let ports: std::collections::BTreeSet<(CompactString, u32)> =
        totals.keys().map(|(d, p, _)| (d.clone(), *p)).collect();
    for (dev, port) in ports {
        let taken = |kind: &str| {
            out.iter()
                .any(|d| d.kind == kind && d.dev.as_deref() == Some(dev.as_str()))
        };
        // A QP of the device already has its error diagnosed: the port's count is that one.
        let qp_named = out
            .iter()
            .any(|d| d.qpn.is_some() && d.dev.as_deref() == Some(dev.as_str()));
        let who = sufferers(qps, &dev);
        let (pid, comm) = who
            .first()
            .cloned()
            .unwrap_or((0, CompactString::const_new("")));
        let others = if who.len() > 1 {
            format!(" and {} other process(es)", who.len() - 1)
        } else {
            String::new()
        };
        let mut found = Vec::new();
        let loss: u64 = LOSS
            .iter()
            .map(|(n, _)| total(totals, &dev, port, &[n]))
            .sum();
        let packets = total(totals, &dev, port, PACKETS);
        let enough = loss >= super::fabric::MIN_RETRANSMITS
            && (packets == 0
                || loss.saturating_mul(100_000)
                    >= packets.saturating_mul(super::fabric::MIN_SHARE_MILLI_PCT));
        if enough && !taken("fabric_loss") {
            let mut evidence = Vec::new();
            for (n, says) in LOSS {
                let v = total(totals, &dev, port, &[n]);
                if v > 0 {
                    evidence.push(format!("{dev} port {port} {n} +{v}: {says}"));
                }
            }
            if packets > 0 {
                evidence.push(format!(
                    "{packets} packets moved by the port ({:.3} % lost or late)",
                    loss as f64 * 100.0 / packets as f64
                ));
            }
            found.push((
                "fabric_loss",
                format!(
                    "packets through {dev} port {port} are lost on the fabric ({loss} loss signals), suffered by {}{others}",
                    if pid == 0 { "its QPs' owners".to_string() } else { format!("pid {pid} ({comm})") }
                ),
                evidence,
                "find the drops on the path: the netdev's and switch ports' error and discard \
                 counters (ethtool -S, the switch), PFC or ECN on the RoCE priority, the cable \
                 or optic when packets arrive corrupted"
                    .to_string(),
            ));
        }
        let cnps = total(totals, &dev, port, &["np_cnp_sent", "rp_cnp_handled"]);
        if cnps >= 1000 || (packets > 0 && cnps.saturating_mul(100) >= packets) {
            let evidence = ECN
                .iter()
                .filter_map(|(n, says)| {
                    let v = total(totals, &dev, port, &[n]);
                    (v > 0).then(|| format!("{dev} port {port} {n} +{v}: {says}"))
                })
                .collect();
            found.push((
                "congestion",
                format!(
                    "the fabric signalled congestion on {dev} port {port} and the NICs slowed down (ECN/DCQCN): bandwidth is shared, not lost"
                ),
                evidence,
                "spread the traffic (other paths, fewer flows into one port) or check the ECN \
                 marking thresholds of the switches; no packet was lost for this"
                    .to_string(),
            ));
        }
        for (kind, names, cause, fix) in [
            (
                "rnr",
                &["rnr_nak_retry_err", "req_rnr_retries_exceeded"][..],
                "a receiver did not post receive buffers in time: a QP on the port ran out of RNR retries",
                "post receives before the peer sends (and enough of them), or raise rnr_retry",
            ),
            (
                "retry_exceeded",
                &["req_transport_retries_exceeded"][..],
                "a QP on the port ran out of transport retries: the peer went away or the path lost every packet",
                "check the peer process and its QP state, and loss on the path",
            ),
        ] {
            let v = total(totals, &dev, port, names);
            if v > 0 && !taken(kind) && !qp_named {
                found.push((
                    kind,
                    format!("{dev} port {port}: {cause} ({v} times)"),
                    names
                        .iter()
                        .filter_map(|n| {
                            let v = total(totals, &dev, port, &[n]);
                            (v > 0).then(|| format!("{dev} port {port} {n} +{v}"))
                        })
                        .collect(),
                    fix.to_string(),
                ));
            }
        }
        for (kind, cause, evidence, fix) in found {
            out.push(Diagnosis {
                kind,
                ts_ns: u64::MAX,
                wall_ns: end_wall_ns,
                pid,
                comm: comm.clone(),
                dev: Some(dev.clone()),
                qpn: None,
                cause,
                evidence,
                fix,
                consequences: Vec::new(),
            });
        }
    }
}
