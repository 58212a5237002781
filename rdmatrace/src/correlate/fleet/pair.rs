//! Pairing the two ends of each connection across hosts: a reliable or unreliable connected QP
//! (RC, UC) is told its peer's GID and QPN at RTR; its peer is the QP with that GID (its source
//! GID) and QPN whose own peer is this end. An end whose peer is in none of the recordings is
//! kept, unpaired, with why.

use std::collections::HashMap;

use super::HostInput;
use crate::{correlate::analysis::QpLife, format::gid_text};

/// QP types that have one peer: RC and UC.
const CONNECTED_TYPES: [u32; 2] = [2, 3];

/// One end: a QP life of one host.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct End {
    /// Index of the host (its recording) among the inputs.
    pub host: usize,
    /// Index of the QP life in that host's report.
    pub qp: usize,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Connection {
    /// `c1`, `c2`, ... in the order of the inputs and their QPs (stable for one set of
    /// recordings given in one order).
    pub id: String,
    /// Both ends when paired (the first is the one found first), else one.
    pub ends: Vec<End>,
    /// Why an end is alone.
    pub unpaired: Option<String>,
}

impl Connection {
    pub fn paired(&self) -> bool {
        self.ends.len() == 2
    }
}

fn connected_end(q: &QpLife) -> bool {
    CONNECTED_TYPES.contains(&q.qp_type) && q.peer_qpn.is_some()
}

/// Pairs the connected QPs of `hosts`.
pub fn pair(hosts: &[HostInput]) -> Vec<Connection> {
    // (source GID, QPN) -> ends.
    let mut by_addr: HashMap<([u8; 16], u32), Vec<End>> = HashMap::new();
    let mut gids: HashMap<[u8; 16], usize> = HashMap::new();
    for (h, input) in hosts.iter().enumerate() {
        for (i, q) in input.report.qps.iter().enumerate() {
            if let Some(g) = q.local_gid {
                gids.entry(g).or_insert(h);
                if connected_end(q) {
                    by_addr
                        .entry((g, q.key.qpn))
                        .or_default()
                        .push(End { host: h, qp: i });
                }
            }
        }
    }
    let qp = |e: &End| &hosts[e.host].report.qps[e.qp];
    let created = |e: &End| hosts[e.host].wall(qp(e).created_ns);
    let mut taken: Vec<Vec<bool>> = hosts
        .iter()
        .map(|h| vec![false; h.report.qps.len()])
        .collect();
    let mut out = Vec::new();
    for (h, input) in hosts.iter().enumerate() {
        for (i, q) in input.report.qps.iter().enumerate() {
            if taken[h][i] || !connected_end(q) {
                continue;
            }
            taken[h][i] = true;
            let me = End { host: h, qp: i };
            let peer = match (q.peer_gid, q.peer_qpn, q.local_gid) {
                (Some(pg), Some(pq), Some(lg)) => by_addr
                    .get(&(pg, pq))
                    .into_iter()
                    .flatten()
                    .filter(|e| **e != me && !taken[e.host][e.qp])
                    .filter(|e| {
                        let o = qp(e);
                        o.peer_qpn == Some(q.key.qpn) && o.peer_gid == Some(lg)
                    })
                    .min_by_key(|e| (created(e) - created(&me)).unsigned_abs())
                    .copied(),
                _ => None,
            };
            let (ends, unpaired) = match peer {
                Some(p) => {
                    taken[p.host][p.qp] = true;
                    (vec![me, p], None)
                }
                None => (vec![me], Some(why_alone(hosts, &gids, q))),
            };
            out.push(Connection {
                id: format!("c{}", out.len() + 1),
                ends,
                unpaired,
            });
        }
    }
    out
}

fn why_alone(hosts: &[HostInput], gids: &HashMap<[u8; 16], usize>, q: &QpLife) -> String {
    let qpn = q.peer_qpn.unwrap_or_default();
    let Some(pg) = q.peer_gid else {
        return format!(
            "its peer QP {qpn:#x} was given without a GID (no address vector captured)"
        );
    };
    if q.local_gid.is_none() {
        return format!(
            "its own GID is not known (no GID table of {} in the recording), so QP {qpn:#x} at \
             {} cannot name it as peer",
            q.key.dev,
            gid_text(&pg)
        );
    }
    match gids.get(&pg) {
        Some(h) => format!(
            "{} has GID {} but no QP {qpn:#x} connected back to this one in its recording \
             (created before the recording started, or not traced)",
            hosts[*h].host,
            gid_text(&pg)
        ),
        None => format!(
            "peer {} QP {qpn:#x} is on none of the hosts given (add that host's recording)",
            gid_text(&pg)
        ),
    }
}
