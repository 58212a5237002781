//! Retransmit blame: retransmits counted per owning process and target (a QP for RDMA, a
//! 4-tuple for TCP, a bound q-counter), and per-port counters that speak of retransmission
//! (per-port-only evidence, when no per-QP source exists).

use std::collections::BTreeMap;

use rustc_hash::FxHashMap;

use crate::event::{CompactString, CounterDelta, QpCounterDelta, Retransmit};

/// Counters that count retransmission-related trouble (rxe and mlx5 names).
pub const RETRANSMIT_COUNTERS: &[&str] = &[
    "duplicate_request",
    "out_of_seq_request",
    "rcvd_seq_err",
    "rcvd_rnr_err",
    "send_rnr_err",
    "completer_retry_err",
    "retry_exceeded_err",
    "retry_rnr_exceeded_err",
    "out_of_sequence",
    "packet_seq_err",
    "implied_nak_seq_err",
    "local_ack_timeout_err",
    "rnr_nak_retry_err",
    "req_transport_retries_exceeded",
    "req_rnr_retries_exceeded",
    "roce_adp_retrans",
    "roce_adp_retrans_to",
    "roce_slow_restart",
];

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlameRow {
    pub pid: u32,
    pub comm: CompactString,
    pub transport: &'static str,
    /// `rxe0 QPN 0x11` or `192.0.2.1:5000->192.0.2.2:80`.
    pub target: String,
    pub count: u64,
    pub reasons: Vec<String>,
}

/// A per-port counter total: (device, port, counter name, sum of deltas).
pub type PortCounter = (CompactString, u32, String, u64);

/// (owner pid, transport, target): one blame row.
type BlameKey = (u32, &'static str, String);

#[derive(Clone, Default)]
pub(super) struct Blame {
    rows: FxHashMap<BlameKey, (CompactString, u64, Vec<String>)>,
    port_counters: BTreeMap<(CompactString, u32, String), u64>,
}

impl Blame {
    /// Forgets the rows of processes that are gone.
    pub fn forget(&mut self, gone: &impl Fn(u32) -> bool) {
        self.rows.retain(|(pid, ..), _| !gone(*pid));
    }

    fn add(
        &mut self,
        pid: u32,
        comm: CompactString,
        transport: &'static str,
        target: String,
        n: u64,
        reason: &str,
    ) {
        let e = self
            .rows
            .entry((pid, transport, target))
            .or_insert_with(|| (comm, 0, Vec::new()));
        e.1 += n;
        if !e.2.iter().any(|x| x == reason) {
            e.2.push(reason.to_string());
        }
    }

    /// One retransmit (owner already filled in by the correlator); whether it was RDMA.
    pub fn retransmit(&mut self, r: &Retransmit) -> bool {
        let (target, is_rdma) = match (&r.qp, &r.tcp) {
            (Some(qp), _) => (format!("{} QPN {:#x}", qp.key.dev, qp.key.qpn), true),
            (_, Some(t)) => (
                format!("{}:{}->{}:{}", t.saddr, t.sport, t.daddr, t.dport),
                false,
            ),
            _ => ("?".into(), false),
        };
        self.add(
            r.owner_pid,
            r.owner_comm.clone(),
            r.transport.name(),
            target,
            1,
            r.reason,
        );
        is_rdma
    }

    /// A bound q-counter's retransmission delta, blamed on `(pid, comm)`.
    pub fn qp_counter(&mut self, c: &QpCounterDelta, pid: u32, comm: CompactString) {
        let target = match c.qpns.as_slice() {
            [q] if c.nqpns == 1 => format!("{} QPN {q:#x}", c.dev),
            qs => format!(
                "{} counter #{} (QPN {})",
                c.dev,
                c.counter_id,
                qs.iter()
                    .map(|q| format!("{q:#x}"))
                    .collect::<Vec<_>>()
                    .join(",")
            ),
        };
        self.add(pid, comm, "qp_counter", target, c.delta, &c.name);
    }

    /// A per-port counter delta.
    pub fn port_counter(&mut self, c: &CounterDelta) {
        *self
            .port_counters
            .entry((c.dev.clone(), c.port, c.name.clone()))
            .or_default() += c.delta;
    }

    /// Rows by count, most first; per-port totals that are not zero.
    pub fn finish(self) -> (Vec<BlameRow>, Vec<PortCounter>) {
        let mut rows: Vec<BlameRow> = self
            .rows
            .into_iter()
            .map(
                |((pid, transport, target), (comm, count, reasons))| BlameRow {
                    pid,
                    comm,
                    transport,
                    target,
                    count,
                    reasons,
                },
            )
            .collect();
        rows.sort_by(|a, b| b.count.cmp(&a.count).then(a.target.cmp(&b.target)));
        let ports = self
            .port_counters
            .into_iter()
            .filter(|(_, v)| *v > 0)
            .map(|((d, p, n), v)| (d, p, n, v))
            .collect();
        (rows, ports)
    }
}
