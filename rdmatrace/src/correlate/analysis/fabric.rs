//! `fabric_loss`: packets lost on the path, from the retransmissions they cost. RoCE without a
//! lossless fabric (PFC/ECN) repairs a lost packet by going back to it and resending
//! everything after (go-back-N), so loss shows as retransmissions on the sender's device (the
//! retransmit timer per QP; the requester's retry and NAK counters per port) and as
//! out-of-sequence requests at the receiver. Judged per device on the whole run.

use std::collections::BTreeMap;

use super::{blame::PortCounter, diagnosis::Diagnosis, qps::QpLife};
use crate::event::{CompactString, QpKey};

/// Fewest retransmission events that make a device's path lossy (a timer that fires once
/// under load is not a fabric).
pub const MIN_RETRANSMITS: u64 = 10;
/// Smallest share of the packets sent (in thousandths of a percent: 100 = 0.1 %).
pub const MIN_SHARE_MILLI_PCT: u64 = 100;

/// Port counters a sender's device counts its retries and sequence NAKs in (rxe, mlx5).
const SENDER_COUNTERS: &[&str] = &[
    "completer_retry_err",
    "rcvd_seq_err",
    "roce_adp_retrans",
    "local_ack_timeout_err",
    "packet_seq_err",
    "implied_nak_seq_err",
];
/// Of [`SENDER_COUNTERS`], those that count timer expiries (rather than NAKs): they include the
/// retries of the QPs left out.
const TIMER_COUNTERS: &[&str] = &[
    "completer_retry_err",
    "local_ack_timeout_err",
    "roce_adp_retrans",
];

/// Port counters a receiving device counts gaps and repeats in.
const RECEIVER_COUNTERS: &[&str] = &["out_of_seq_request", "out_of_sequence", "duplicate_request"];

/// One diagnosis per device whose QPs' packets were retransmitted beyond the thresholds; the
/// QPs diagnosed already (their retransmits belong to that fault) are left out, and so are the
/// timer counters of their devices.
pub fn fabric_loss(
    qps: &[QpLife],
    port_counters: &[PortCounter],
    errored: impl Fn(&QpKey) -> bool,
    end_wall_ns: u64,
    out: &mut Vec<Diagnosis>,
) {
    let mut by_dev: BTreeMap<&CompactString, Vec<&QpLife>> = BTreeMap::new();
    let mut explained: Vec<&CompactString> = Vec::new();
    for q in qps.iter().filter(|q| q.tx_packets > 0) {
        if errored(&q.key) {
            explained.push(&q.key.dev);
        } else {
            by_dev.entry(&q.key.dev).or_default().push(q);
        }
    }
    for (dev, mut sending) in by_dev {
        let packets: u64 = sending.iter().map(|q| q.tx_packets).sum();
        let timer: u64 = sending
            .iter()
            .map(|q| q.retransmits.saturating_sub(q.rnr_retransmits))
            .sum();
        let counted: Vec<&PortCounter> = port_counters
            .iter()
            .filter(|(d, _, n, _)| d == dev && SENDER_COUNTERS.contains(&n.as_str()))
            .filter(|(_, _, n, _)| {
                !(explained.contains(&dev) && TIMER_COUNTERS.contains(&n.as_str()))
            })
            .collect();
        let retries = timer + counted.iter().map(|c| c.3).sum::<u64>();
        if retries < MIN_RETRANSMITS
            || retries.saturating_mul(100_000) < packets.saturating_mul(MIN_SHARE_MILLI_PCT)
        {
            continue;
        }
        let share = retries as f64 * 100.0 / packets.max(1) as f64;
        let port = counted
            .first()
            .map(|c| c.1)
            .or_else(|| port_counters.iter().find(|c| c.0 == *dev).map(|c| c.1));
        let place = port.map_or_else(|| dev.to_string(), |p| format!("{dev} port {p}"));
        sending.sort_by_key(|q| std::cmp::Reverse((q.retransmits, q.tx_packets)));
        let mut evidence = vec![format!(
            "{retries} retransmission events against {packets} packets sent by the QPs on {dev} ({share:.2} %)"
        )];
        if timer > 0 {
            evidence.push(format!("{timer} retransmit timer expiries on its QPs"));
        }
        for (d, p, n, v) in &counted {
            evidence.push(format!("{d} port {p} {n} +{v}"));
        }
        for (d, p, n, v) in port_counters
            .iter()
            .filter(|(d, _, n, _)| d != dev && RECEIVER_COUNTERS.contains(&n.as_str()))
        {
            evidence.push(format!("receiver side: {d} port {p} {n} +{v}"));
        }
        for q in sending.iter().take(5) {
            evidence.push(format!(
                "pid {} ({}) QP {:#x}: {} packets sent, {} retransmit timer expiries",
                q.owner_pid,
                q.owner_comm,
                q.key.qpn,
                q.tx_packets,
                q.retransmits.saturating_sub(q.rnr_retransmits)
            ));
        }
        let top = sending[0];
        let others = sending
            .iter()
            .filter(|q| q.owner_pid != top.owner_pid)
            .map(|q| q.owner_pid)
            .collect::<std::collections::BTreeSet<_>>()
            .len();
        out.push(Diagnosis {
            kind: "fabric_loss",
            ts_ns: u64::MAX,
            wall_ns: end_wall_ns,
            pid: top.owner_pid,
            comm: top.owner_comm.clone(),
            dev: Some(dev.clone()),
            qpn: None,
            cause: format!(
                "packets sent from {place} are lost on the path: {share:.2} % of them cost a retransmission (go-back-N without a lossless fabric), suffered by pid {} ({}){}",
                top.owner_pid,
                top.owner_comm,
                if others > 0 {
                    format!(" and {others} other process(es)")
                } else {
                    String::new()
                }
            ),
            evidence,
            fix: "find the drops on the path: the netdev's and switch ports' error and discard \
                  counters (ethtool -S, the switch), PFC or ECN on the RoCE priority; out-of-\
                  sequence requests at the receiver mean requests were lost on the way there, \
                  duplicate requests that acknowledgements were lost on the way back"
                .into(),
            consequences: Vec::new(),
        });
    }
}
