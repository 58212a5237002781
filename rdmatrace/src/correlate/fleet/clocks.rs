//! Aligning the hosts' clocks from the connections themselves. Each paired connection orders
//! some events of one end before events of the other (a message is received after it is
//! sent):
//!
//! - RC/UC QPs: an end reaches RTR only after its peer's QP exists (it was told the peer's QPN):
//!   `created(x) -> rtr(y)` and `created(y) -> rtr(x)`;
//! - RDMA CM: the passive side's CONNECT_REQUEST follows the active side's ROUTE_RESOLVED (the
//!   REQ is sent after it), the active side's CONNECT_RESPONSE follows it (the REP), and the
//!   passive side's ESTABLISHED follows that (the RTU);
//! - TCP: the passive end is ESTABLISHED after the active end (the handshake's last ACK); a
//!   FIN moves the peer to CLOSE_WAIT (or CLOSING) after the sender entered FIN_WAIT1, its ACK
//!   moves the sender to FIN_WAIT2 after that; the last FIN moves the sender of the first to
//!   TIME_WAIT after the peer entered LAST_ACK.
//!
//! With `d` the correction to add to host Y's clock to read host X's, `p` on X before `q` on Y
//! means `p <= q + d` (a lower bound on `d`), `p` on Y before `q` on X means `p + d <= q` (an
//! upper bound). All bounds between two hosts are combined (the highest lower, the lowest
//! upper); the estimate is the middle, ± half the width. Hosts are aligned to the first input
//! along the shortest chain of host pairs with both bounds; a host with none keeps its clock
//! and says so.

use std::collections::{BTreeMap, VecDeque};

use super::{pair::NetPair, Connection, HostInput};
use crate::correlate::analysis::handshakes::Kind;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostClock {
    /// ns to add to this host's wall clock to get the first host's.
    pub offset_ns: i64,
    /// ± ns around `offset_ns` (0 for the first host).
    pub uncertainty_ns: u64,
    /// Whether the offset was estimated (false: no connection links this host to the first).
    pub aligned: bool,
    /// How it was estimated, in words.
    pub basis: String,
}

/// Bounds on the correction of host `y`'s clock to host `x`'s (`x < y`).
#[derive(Clone, Debug, Default)]
struct Bounds {
    lo: Option<i128>,
    hi: Option<i128>,
    /// What contributed: connections by kind.
    qps: usize,
    cm: usize,
    tcp: usize,
}

impl Bounds {
    fn lower(&mut self, v: i128) {
        self.lo = Some(self.lo.map_or(v, |l| l.max(v)));
    }

    fn upper(&mut self, v: i128) {
        self.hi = Some(self.hi.map_or(v, |h| h.min(v)));
    }

    /// (middle, half width, whether the bounds crossed), when both are known.
    fn estimate(&self) -> Option<(i128, i128, bool)> {
        let (lo, hi) = (self.lo?, self.hi?);
        let (a, b) = (lo.min(hi), lo.max(hi));
        Some((a + (b - a) / 2, (b - a + 1) / 2, lo > hi))
    }

    fn reversed(&self) -> Bounds {
        Bounds {
            lo: self.hi.map(|h| -h),
            hi: self.lo.map(|l| -l),
            ..*self
        }
    }

    fn what(&self) -> String {
        let mut parts = Vec::new();
        for (n, what) in [(self.qps, "QP"), (self.cm, "RDMA CM"), (self.tcp, "TCP")] {
            if n > 0 {
                parts.push(format!("{n} {what}"));
            }
        }
        parts.join(", ")
    }
}

impl Copy for Bounds {}

/// `p` (on host `hp`, wall ns by its clock) happened before `q` (on `hq`).
fn before(pairs: &mut BTreeMap<(usize, usize), Bounds>, hp: usize, p: i128, hq: usize, q: i128) {
    if hp == hq {
        return;
    }
    let (x, y) = (hp.min(hq), hp.max(hq));
    let b = pairs.entry((x, y)).or_default();
    if hp == x {
        b.lower(p - q);
    } else {
        b.upper(q - p);
    }
}

/// Relations of a CM pair (active, passive) and of a TCP pair (either way round).
const CM_ORDER: &[(bool, &str, &str)] = &[
    // (first event on the active side?, first, then)
    (true, "ROUTE_RESOLVED", "CONNECT_REQUEST"),
    (false, "CONNECT_REQUEST", "CONNECT_RESPONSE"),
    (true, "CONNECT_RESPONSE", "ESTABLISHED"),
];
const TCP_ORDER: &[(&str, &str)] = &[
    ("est_active", "est_passive"),
    ("FIN_WAIT1", "CLOSE_WAIT"),
    ("FIN_WAIT1", "CLOSING"),
    ("CLOSE_WAIT", "FIN_WAIT2"),
    ("LAST_ACK", "TIME_WAIT"),
];

/// One clock per host (same order as `hosts`).
pub fn align(hosts: &[HostInput], connections: &[Connection], net: &[NetPair]) -> Vec<HostClock> {
    let mut pairs: BTreeMap<(usize, usize), Bounds> = BTreeMap::new();
    for (x, y) in connections.iter().filter_map(Connection::qp_pair) {
        let (hx, hy) = (&hosts[x.host], &hosts[y.host]);
        let (qx, qy) = (&hx.report.qps[x.qp], &hy.report.qps[y.qp]);
        let (Some(rx), Some(ry)) = (qx.rtr_ns, qy.rtr_ns) else {
            continue;
        };
        if x.host == y.host {
            continue;
        }
        before(
            &mut pairs,
            x.host,
            hx.wall(qx.created_ns),
            y.host,
            hy.wall(ry),
        );
        before(
            &mut pairs,
            y.host,
            hy.wall(qy.created_ns),
            x.host,
            hx.wall(rx),
        );
        let k = (x.host.min(y.host), x.host.max(y.host));
        pairs.entry(k).or_default().qps += 1;
    }
    for p in net {
        let [(ha, ia), (hb, ib)] = p.ends;
        if ha == hb {
            continue;
        }
        let (a, b) = (
            &hosts[ha].report.net_ends[ia],
            &hosts[hb].report.net_ends[ib],
        );
        let at = |h: usize, e: &crate::correlate::analysis::handshakes::NetEnd, s: &str| {
            e.step(s).map(|t| hosts[h].wall(t))
        };
        match p.kind {
            Kind::Cm => {
                // The active side resolved a route; the passive one got the request.
                let (act, pas) = if a.step("CONNECT_REQUEST").is_some() {
                    ((hb, b), (ha, a))
                } else {
                    ((ha, a), (hb, b))
                };
                for (active_first, first, then) in CM_ORDER {
                    let ((h1, e1), (h2, e2)) = if *active_first {
                        (act, pas)
                    } else {
                        (pas, act)
                    };
                    if let (Some(t1), Some(t2)) = (at(h1, e1, first), at(h2, e2, then)) {
                        before(&mut pairs, h1, t1, h2, t2);
                    }
                }
            }
            Kind::Tcp => {
                for ((h1, e1), (h2, e2)) in [((ha, a), (hb, b)), ((hb, b), (ha, a))] {
                    for (first, then) in TCP_ORDER {
                        if let (Some(t1), Some(t2)) = (at(h1, e1, first), at(h2, e2, then)) {
                            before(&mut pairs, h1, t1, h2, t2);
                        }
                    }
                }
            }
        }
        let b = pairs.entry((ha.min(hb), ha.max(hb))).or_default();
        match p.kind {
            Kind::Cm => b.cm += 1,
            Kind::Tcp => b.tcp += 1,
        }
    }
    chain(hosts, &pairs)
}

/// Aligns every host reachable from host 0 through pairs with both bounds.
fn chain(hosts: &[HostInput], pairs: &BTreeMap<(usize, usize), Bounds>) -> Vec<HostClock> {
    let mut clocks: Vec<Option<HostClock>> = vec![None; hosts.len()];
    if hosts.is_empty() {
        return Vec::new();
    }
    clocks[0] = Some(HostClock {
        offset_ns: 0,
        uncertainty_ns: 0,
        aligned: true,
        basis: "the first recording's clock".into(),
    });
    let mut queue = VecDeque::from([(0usize, 0i128, 0i128)]);
    while let Some((h, off, unc)) = queue.pop_front() {
        for (&(a, b), bounds) in pairs {
            let (other, rel) = match (a == h, b == h) {
                (true, false) => (b, *bounds),
                (false, true) => (a, bounds.reversed()),
                _ => continue,
            };
            if clocks[other].is_some() {
                continue;
            }
            let Some((mid, half, crossed)) = rel.estimate() else {
                continue;
            };
            let (o, u) = (off + mid, unc + half);
            let via = if h == 0 {
                String::new()
            } else {
                format!(" via {}", hosts[h].host)
            };
            let crossed = if crossed {
                "; the bounds crossed (a clock step during the recordings?): the gap is the bound"
            } else {
                ""
            };
            clocks[other] = Some(HostClock {
                offset_ns: o.clamp(i64::MIN.into(), i64::MAX.into()) as i64,
                uncertainty_ns: u.clamp(0, u64::MAX.into()) as u64,
                aligned: true,
                basis: format!(
                    "handshakes with {}{via}: {} connection(s){crossed}",
                    hosts[h].host,
                    rel.what()
                ),
            });
            queue.push_back((other, o, u));
        }
    }
    let one_sided = |i: usize| {
        pairs
            .iter()
            .any(|(&(a, b), p)| (a == i || b == i) && (p.lo.is_some() || p.hi.is_some()))
    };
    clocks
        .into_iter()
        .enumerate()
        .map(|(i, c)| {
            c.unwrap_or_else(|| HostClock {
                offset_ns: 0,
                uncertainty_ns: 0,
                aligned: false,
                basis: if one_sided(i) {
                    "not aligned: its connections with the other hosts bound the offset on one \
                     side only; times are this host's own clock"
                        .into()
                } else {
                    "not aligned: no connection paired with the other hosts; times are this \
                     host's own clock"
                        .into()
                },
            })
        })
        .collect()
}
