//! Aligning the hosts' clocks from the connections themselves. An end cannot reach RTR before
//! its peer's QP exists (it is told the peer's QPN), so for paired ends `x` on host X and `y`
//! on host Y, with `d` the correction to add to Y's clock:
//!
//! ```text
//! created(x) <= rtr(y) + d   and   created(y) + d <= rtr(x)
//! ```
//!
//! Every paired connection bounds `d` this way; the bounds of all connections between two hosts
//! are intersected, and the estimate is the middle of what is left, ± half its width. Hosts
//! are aligned to the first input along the shortest chain of host pairs that share a
//! connection; a host that shares none keeps its own clock and says so.

use std::collections::{BTreeMap, VecDeque};

use super::{Connection, HostInput};

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

/// Bounds `[lo, hi]` on the correction of host `b`'s clock to host `a`'s, from `n` connections.
#[derive(Clone, Copy, Debug)]
struct Bounds {
    lo: i128,
    hi: i128,
    n: usize,
    /// Whether some connection's bounds did not overlap the others' (clocks stepped during
    /// the recordings, or a wrong pairing): then the widest consistent reading is kept.
    conflict: bool,
}

impl Bounds {
    fn add(&mut self, lo: i128, hi: i128) {
        let (nlo, nhi) = (self.lo.max(lo), self.hi.min(hi));
        if nlo <= nhi {
            (self.lo, self.hi) = (nlo, nhi);
        } else {
            self.conflict = true;
        }
        self.n += 1;
    }

    fn reversed(self) -> Bounds {
        Bounds {
            lo: -self.hi,
            hi: -self.lo,
            ..self
        }
    }

    fn mid(&self) -> i128 {
        self.lo + (self.hi - self.lo) / 2
    }

    fn half(&self) -> i128 {
        (self.hi - self.lo + 1) / 2
    }
}

/// One clock per host (same order as `hosts`).
pub fn align(hosts: &[HostInput], connections: &[Connection]) -> Vec<HostClock> {
    let mut pairs: BTreeMap<(usize, usize), Bounds> = BTreeMap::new();
    for c in connections.iter().filter(|c| c.paired()) {
        let (mut x, mut y) = (c.ends[0], c.ends[1]);
        if x.host == y.host {
            continue;
        }
        if x.host > y.host {
            std::mem::swap(&mut x, &mut y);
        }
        let (hx, hy) = (&hosts[x.host], &hosts[y.host]);
        let (qx, qy) = (&hx.report.qps[x.qp], &hy.report.qps[y.qp]);
        let (Some(rx), Some(ry)) = (qx.rtr_ns, qy.rtr_ns) else {
            continue;
        };
        let lo = hx.wall(qx.created_ns) - hy.wall(ry);
        let hi = hx.wall(rx) - hy.wall(qy.created_ns);
        if lo > hi {
            continue;
        }
        pairs
            .entry((x.host, y.host))
            .and_modify(|b| b.add(lo, hi))
            .or_insert(Bounds {
                lo,
                hi,
                n: 1,
                conflict: false,
            });
    }
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
    // (offset, uncertainty) accumulate along the chain from host 0.
    let mut queue = VecDeque::from([(0usize, 0i128, 0i128)]);
    while let Some((h, off, unc)) = queue.pop_front() {
        for (&(a, b), bounds) in &pairs {
            let (other, rel) = match (a == h, b == h) {
                // Correction of b to a: b's clock + d = a's clock.
                (true, false) => (b, *bounds),
                (false, true) => (a, bounds.reversed()),
                _ => continue,
            };
            if clocks[other].is_some() {
                continue;
            }
            let o = off + rel.mid();
            let u = unc + rel.half();
            let via = if h == 0 {
                String::new()
            } else {
                format!(" (via {})", hosts[h].host)
            };
            let conflict = if rel.conflict {
                "; some connections' bounds disagreed (a clock step, or a QPN reused) and were left out"
            } else {
                ""
            };
            clocks[other] = Some(HostClock {
                offset_ns: o.clamp(i64::MIN.into(), i64::MAX.into()) as i64,
                uncertainty_ns: u.clamp(0, u64::MAX.into()) as u64,
                aligned: true,
                basis: format!(
                    "{} handshake(s) with {}{via} (an end reaches RTR after its peer's QP \
                     exists){conflict}",
                    rel.n, hosts[h].host
                ),
            });
            queue.push_back((other, o, u));
        }
    }
    clocks
        .into_iter()
        .map(|c| {
            c.unwrap_or_else(|| HostClock {
                offset_ns: 0,
                uncertainty_ns: 0,
                aligned: false,
                basis: "not aligned: no connection paired with the other hosts; times are this \
                        host's own clock"
                    .into(),
            })
        })
        .collect()
}
