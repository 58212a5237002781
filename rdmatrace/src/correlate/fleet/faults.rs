//! Localizing each paired connection's trouble to a direction and a host, from both ends'
//! evidence. With RoCE's go-back-N:
//! - requests lost on the way out: the receiver sees requests out of sequence and NAKs them,
//!   the sender counts the NAKs (`packet_loss` from the sender to the receiver);
//! - responses or ACKs lost on the way back: the sender's retransmit timer fires and the
//!   receiver sees the same requests again (duplicates: `packet_loss` from the receiver to
//!   the sender);
//! - the receiver not ready (RNR NAKs: `rnr`), the peer process killed (`peer_dead`), an end's
//!   QP in error first (`qp_error`), a port leaving ACTIVE on one side (`port_down`).
//!
//! Receiver and NAK signals are the devices' port counters (rxe and mlx5 count them per port,
//! not per QP): with several connections on one device pair each is given them, and the
//! evidence says so. Retransmit timer expiries and RNR retries are per QP.

use super::{aligned, Connection, End, HostClock, HostInput};
use crate::{
    clock::rfc3339,
    correlate::analysis::{
        fabric::{MIN_RETRANSMITS, MIN_SHARE_MILLI_PCT},
        QpLife,
    },
    format::exit_text,
};

/// Fault kinds (a contract: docs/json.md).
pub const PACKET_LOSS: &str = "packet_loss";
pub const RNR: &str = "rnr";
pub const PEER_DEAD: &str = "peer_dead";
pub const QP_ERROR: &str = "qp_error";
pub const PORT_DOWN: &str = "port_down";

/// Counters a receiving device counts requests that arrived after a gap in.
const OUT_OF_SEQ: &[&str] = &["out_of_seq_request", "out_of_sequence"];
/// Counters a sending device counts sequence-error NAKs in.
const SEQ_NAKS: &[&str] = &["rcvd_seq_err", "packet_seq_err"];
/// Counters a receiving device counts repeated requests in.
const DUPLICATES: &[&str] = &["duplicate_request"];

/// How long an end must outlive its killed peer, or how many retries it must make, for the
/// death to be a fault rather than a teardown.
const OUTLIVED_NS: u64 = 1_000_000_000;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fault {
    pub kind: &'static str,
    /// The connection's id.
    pub connection: String,
    /// The direction packets were lost in, or from the healthy side to the side at fault.
    pub from_host: String,
    pub to_host: String,
    /// When, on the common clock (wall ns).
    pub wall_ns: u64,
    pub evidence: Vec<String>,
}

fn counter(h: &HostInput, dev: &str, names: &[&str]) -> (u64, Vec<String>) {
    let mut total = 0;
    let mut lines = Vec::new();
    for (d, port, name, delta) in &h.report.port_counters {
        if d == dev && names.contains(&name.as_str()) && *delta > 0 {
            total += delta;
            lines.push(format!("{}: {d} port {port} {name} +{delta}", h.host));
        }
    }
    (total, lines)
}

/// Whether `n` events against `packets` sent pass the fabric-loss thresholds.
fn significant(n: u64, packets: u64) -> bool {
    n >= MIN_RETRANSMITS && n.saturating_mul(100_000) >= packets.saturating_mul(MIN_SHARE_MILLI_PCT)
}

fn name(h: &HostInput, q: &QpLife) -> String {
    format!(
        "{}: {} QP {:#x} of pid {} ({})",
        h.host, q.key.dev, q.key.qpn, q.owner_pid, q.owner_comm
    )
}

/// Connections sharing `dev` of host `h` (a counter on it is theirs together).
fn sharing(hosts: &[HostInput], connections: &[Connection], h: usize, dev: &str) -> usize {
    connections
        .iter()
        .filter(|c| {
            c.paired()
                && c.ends
                    .iter()
                    .any(|e| e.host == h && hosts[h].report.qps[e.qp].key.dev == dev)
        })
        .count()
}

/// The faults of the paired connections, in time order.
pub fn localize(
    hosts: &[HostInput],
    clocks: &[HostClock],
    connections: &[Connection],
) -> Vec<Fault> {
    let mut out = Vec::new();
    for c in connections.iter() {
        let Some((x, y)) = c.qp_pair() else {
            continue;
        };
        let before = out.len();
        for (s, r) in [(x, y), (y, x)] {
            peer_dead(hosts, clocks, c, s, r, &mut out);
        }
        let dead = out.len() > before;
        for (s, r) in [(x, y), (y, x)] {
            loss(hosts, clocks, connections, c, s, r, &mut out);
            rnr(hosts, clocks, c, s, r, &mut out);
            port_down(hosts, clocks, c, s, r, &mut out);
        }
        if !dead {
            qp_error(hosts, clocks, c, &mut out);
        }
    }
    out.sort_by_key(|f| f.wall_ns);
    out
}

/// The hosts and QPs of ends `s` and `r`.
fn both(hosts: &[HostInput], s: End, r: End) -> (&HostInput, &HostInput, &QpLife, &QpLife) {
    let (hs, hr) = (&hosts[s.host], &hosts[r.host]);
    (hs, hr, &hs.report.qps[s.qp], &hr.report.qps[r.qp])
}

fn end_wall(hosts: &[HostInput], clocks: &[HostClock], e: End) -> u64 {
    let q = &hosts[e.host].report.qps[e.qp];
    aligned(
        hosts,
        clocks,
        e.host,
        q.destroyed_ns.unwrap_or(q.state_since_ns),
    )
}

/// Packets from `s` to `r` lost (requests: out-of-sequence at `r`, NAKs at `s`), and responses
/// from `r` to `s` lost (duplicates at `r`, `s`'s timer).
fn loss(
    hosts: &[HostInput],
    clocks: &[HostClock],
    connections: &[Connection],
    c: &Connection,
    s: End,
    r: End,
    out: &mut Vec<Fault>,
) {
    let (hs, hr, qs, qr) = both(hosts, s, r);
    if qs.tx_packets == 0 {
        return;
    }
    let shared = |h: usize, dev: &str| {
        let n = sharing(hosts, connections, h, dev);
        (n > 1).then(|| {
            format!(
                "{}: {dev}'s port counters are shared by {n} connections (not per QP)",
                hosts[h].host
            )
        })
    };
    let timer = qs.retransmits.saturating_sub(qs.rnr_retransmits);
    let (gaps, gap_lines) = counter(hr, &qr.key.dev, OUT_OF_SEQ);
    let (naks, nak_lines) = counter(hs, &qs.key.dev, SEQ_NAKS);
    let (dups, dup_lines) = counter(hr, &qr.key.dev, DUPLICATES);
    let sent = format!("{}: {} packets sent", name(hs, qs), qs.tx_packets);
    let when = end_wall(hosts, clocks, s);
    if significant(gaps.max(naks), qs.tx_packets) {
        let mut evidence = vec![
            format!(
                "requests from {} to {} were lost: {} arrived out of sequence at {} and {} \
                 sequence-error NAKs came back",
                hs.host, hr.host, gaps, hr.host, naks
            ),
            sent.clone(),
        ];
        evidence.extend(gap_lines);
        evidence.extend(nak_lines);
        if timer > 0 {
            evidence.push(format!(
                "{}: {timer} retransmit timer expiries",
                name(hs, qs)
            ));
        }
        evidence.extend(shared(r.host, &qr.key.dev));
        out.push(Fault {
            kind: PACKET_LOSS,
            connection: c.id.clone(),
            from_host: hs.host.clone(),
            to_host: hr.host.clone(),
            wall_ns: when,
            evidence,
        });
    }
    if significant(dups, qs.tx_packets) && dups > gaps {
        let mut evidence = vec![
            format!(
                "responses (ACKs) from {} to {} were lost: {} received {} requests it had \
                 already acknowledged, resent after {}'s retransmit timer fired {} times",
                hr.host, hs.host, hr.host, dups, hs.host, timer
            ),
            sent,
        ];
        evidence.extend(dup_lines);
        evidence.extend(shared(r.host, &qr.key.dev));
        out.push(Fault {
            kind: PACKET_LOSS,
            connection: c.id.clone(),
            from_host: hr.host.clone(),
            to_host: hs.host.clone(),
            wall_ns: when,
            evidence,
        });
    }
}

/// `s` retried on RNR NAKs from `r`: `r` posted receives too late.
fn rnr(
    hosts: &[HostInput],
    clocks: &[HostClock],
    c: &Connection,
    s: End,
    r: End,
    out: &mut Vec<Fault>,
) {
    let (hs, hr, qs, qr) = both(hosts, s, r);
    if qs.rnr_retransmits < MIN_RETRANSMITS {
        return;
    }
    out.push(Fault {
        kind: RNR,
        connection: c.id.clone(),
        from_host: hs.host.clone(),
        to_host: hr.host.clone(),
        wall_ns: end_wall(hosts, clocks, s),
        evidence: vec![
            format!(
                "{} was not ready: {} retried {} times on receiver-not-ready NAKs",
                name(hr, qr),
                name(hs, qs),
                qs.rnr_retransmits
            ),
            format!(
                "{}: post receives before the sender sends (or raise min_rnr_timer)",
                hr.host
            ),
        ],
    });
}

/// `r`'s process was killed while `s` still used the connection.
fn peer_dead(
    hosts: &[HostInput],
    clocks: &[HostClock],
    c: &Connection,
    s: End,
    r: End,
    out: &mut Vec<Fault>,
) {
    let (hs, hr, qs, qr) = both(hosts, s, r);
    let Some(p) = hr
        .report
        .processes
        .iter()
        .find(|p| p.stats.pid == qr.owner_pid)
    else {
        return;
    };
    let (Some(code), Some(exit_ns)) = (p.stats.exit_code, p.stats.exit_ns) else {
        return;
    };
    if code & 0x7f == 0 {
        return;
    }
    let died = aligned(hosts, clocks, r.host, exit_ns);
    let s_end = end_wall(hosts, clocks, s);
    let outlived = s_end.saturating_sub(died);
    let after = qs.retransmits + qs.wc_errors;
    if outlived < OUTLIVED_NS && after == 0 {
        return;
    }
    let mut evidence = vec![
        format!(
            "{}: pid {} ({}) ended by {} at {}, and its QP {:#x} with it",
            hr.host,
            qr.owner_pid,
            qr.owner_comm,
            exit_text(code),
            rfc3339(died),
            qr.key.qpn
        ),
        format!(
            "{} went on {:.1} s after (common clock): {} retransmit timer expiries, {} error \
             completions",
            name(hs, qs),
            outlived as f64 / 1e9,
            qs.retransmits,
            qs.wc_errors
        ),
    ];
    if qs.destroyed_ns.is_none() {
        evidence.push(format!(
            "{}: still open at the end of its recording",
            name(hs, qs)
        ));
    }
    out.push(Fault {
        kind: PEER_DEAD,
        connection: c.id.clone(),
        from_host: hs.host.clone(),
        to_host: hr.host.clone(),
        wall_ns: died,
        evidence,
    });
}

/// The end whose QP failed first-hand (its host diagnosed it: flushes at a teardown are not a
/// failure), earliest first when both did.
fn qp_error(hosts: &[HostInput], clocks: &[HostClock], c: &Connection, out: &mut Vec<Fault>) {
    let failed = |e: End| {
        let h = &hosts[e.host];
        let q = &h.report.qps[e.qp];
        let found: Vec<_> = h
            .report
            .diagnoses
            .iter()
            .filter(|d| {
                d.dev.as_deref() == Some(q.key.dev.as_str())
                    && d.qpn == Some(q.key.qpn)
                    && d.ts_ns >= q.created_ns
                    && q.destroyed_ns.is_none_or(|t| d.ts_ns <= t)
            })
            .collect();
        let first = found.iter().map(|d| d.ts_ns).min()?;
        Some((aligned(hosts, clocks, e.host, first), found))
    };
    let (a, b) = (c.ends[0], c.ends[1]);
    let (bad, good, (at, found)) = match (failed(a), failed(b)) {
        (Some(fa), Some(fb)) if fb.0 < fa.0 => (b, a, fb),
        (Some(fa), _) => (a, b, fa),
        (None, Some(fb)) => (b, a, fb),
        (None, None) => return,
    };
    let (hb, hg) = (&hosts[bad.host], &hosts[good.host]);
    let qb = &hb.report.qps[bad.qp];
    let mut evidence = vec![format!(
        "{} failed first ({} error completion(s); diagnosed on {})",
        name(hb, qb),
        qb.wc_errors,
        hb.host
    )];
    for d in found {
        evidence.push(format!("{}: {}: {}", hb.host, d.kind, d.cause));
    }
    out.push(Fault {
        kind: QP_ERROR,
        connection: c.id.clone(),
        from_host: hg.host.clone(),
        to_host: hb.host.clone(),
        wall_ns: at,
        evidence,
    });
}

/// `r`'s port left ACTIVE while the connection lived.
fn port_down(
    hosts: &[HostInput],
    clocks: &[HostClock],
    c: &Connection,
    s: End,
    r: End,
    out: &mut Vec<Fault>,
) {
    let (hs, hr) = (&hosts[s.host], &hosts[r.host]);
    let qr = &hr.report.qps[r.qp];
    let end = qr.destroyed_ns.unwrap_or(u64::MAX);
    for a in hr.report.anomalies.iter().filter(|a| {
        matches!(a.kind, "port_down" | "device_removed")
            && a.dev.as_deref() == Some(qr.key.dev.as_str())
            && a.ts_ns >= qr.created_ns
            && a.ts_ns <= end
    }) {
        out.push(Fault {
            kind: PORT_DOWN,
            connection: c.id.clone(),
            from_host: hs.host.clone(),
            to_host: hr.host.clone(),
            wall_ns: aligned(hosts, clocks, r.host, a.ts_ns),
            evidence: vec![
                format!("{}: {}", hr.host, a.detail),
                format!("{} lived across it", name(hr, qr)),
            ],
        });
    }
}
