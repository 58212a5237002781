//! `timeout_too_small`: a QP whose local ACK timeout is shorter than the round trip retransmits
//! requests that were not lost. Its retransmit timer fires while the acknowledgement is still
//! on its way; the receiver then sees the same requests twice (duplicate requests) and none
//! missing (no out-of-sequence requests, no sequence NAKs back to the sender). Judged on the
//! whole run, on the QPs that suffered no error (an error's retransmits belong to its chain).

use rustc_hash::FxHashSet;

use super::{chain::ack_timeout_text, Diagnoser, Diagnosis};
use crate::correlate::analysis::{blame::PortCounter, qps::QpLife};
use crate::event::QpKey;

/// Fewest timer expiries on a QP that make a pattern (one late ACK under load is not).
pub const MIN_EXPIRIES: u64 = 3;

/// Timeouts up to this value (4.096 µs × 2^12 = 16.8 ms) are short enough to be below a round
/// trip that includes a busy receiver; above it, expiries without loss are lost ACKs
/// (`fabric_loss`).
pub const SHORT_TIMEOUT: u8 = 12;

/// Counters that say a request was lost: gaps at a receiver, sequence NAKs at a sender.
const LOSS_COUNTERS: &[&str] = &[
    "out_of_seq_request",
    "out_of_sequence",
    "rcvd_seq_err",
    "packet_seq_err",
    "implied_nak_seq_err",
];

/// Counters of requests a receiver got twice.
const DUPLICATE_COUNTERS: &[&str] = &["duplicate_request"];

impl Diagnoser {
    /// One `timeout_too_small` per QP with a short timeout whose timer fired without loss;
    /// returns the QPs named (their retransmits are not fabric loss).
    pub fn short_timeouts(
        &self,
        qps: &[QpLife],
        port_counters: &[PortCounter],
        end_wall_ns: u64,
        out: &mut Vec<Diagnosis>,
    ) -> FxHashSet<QpKey> {
        let mut named = FxHashSet::default();
        let lost: u64 = port_counters
            .iter()
            .filter(|c| LOSS_COUNTERS.contains(&c.2.as_str()))
            .map(|c| c.3)
            .sum();
        if lost > 0 {
            return named;
        }
        let duplicates: Vec<String> = port_counters
            .iter()
            .filter(|c| DUPLICATE_COUNTERS.contains(&c.2.as_str()) && c.3 > 0)
            .map(|(d, p, n, v)| format!("{d} port {p} {n} +{v}"))
            .collect();
        for q in qps {
            let expiries = q.retransmits.saturating_sub(q.rnr_retransmits);
            let Some(t) = self.attrs.get(&q.key).and_then(|a| a.timeout) else {
                continue;
            };
            if expiries < MIN_EXPIRIES
                || t == 0
                || t > SHORT_TIMEOUT
                || self.errored(&q.key)
                || !named.insert(q.key.clone())
            {
                continue;
            }
            let mut evidence = vec![
                format!(
                    "QP {:#x} on {} set timeout {t}: a local ACK timeout of {}",
                    q.key.qpn,
                    q.key.dev,
                    ack_timeout_text(t)
                ),
                format!(
                    "{expiries} retransmit timer expiries against {} packets sent",
                    q.tx_packets
                ),
                "no request was lost: no out-of-sequence request at a receiver, no sequence \
                 NAK at a sender (port counters)"
                    .into(),
            ];
            evidence.extend(
                duplicates
                    .iter()
                    .map(|d| format!("receiver side: {d}: the retransmitted requests had arrived")),
            );
            out.push(Diagnosis {
                kind: "timeout_too_small",
                ts_ns: u64::MAX,
                wall_ns: end_wall_ns,
                pid: q.owner_pid,
                comm: q.owner_comm.clone(),
                dev: Some(q.key.dev.clone()),
                qpn: Some(q.key.qpn),
                cause: format!(
                    "pid {} ({}) QP {:#x} on {} retransmits requests that were not lost: its \
                     local ACK timeout ({}) is below the round trip, so its timer fired {expiries} \
                     times before the acknowledgement came",
                    q.owner_pid,
                    q.owner_comm,
                    q.key.qpn,
                    q.key.dev,
                    ack_timeout_text(t)
                ),
                evidence,
                fix: "raise the QP's timeout (ibv_modify_qp with IBV_QP_TIMEOUT at RTS; 14, 67 \
                      ms, is the common choice; NCCL_IB_TIMEOUT for NCCL, UCX_RC_TIMEOUT for UCX): \
                      every expiry resends all the requests after the unacknowledged one \
                      (go-back-N) and spends one of the QP's retry_cnt retries"
                    .into(),
                consequences: Vec::new(),
            });
        }
        named
    }
}
