//! Pairing the two ends of each connection across hosts: a reliable or unreliable connected QP
//! (RC, UC) is told its peer's GID and QPN at RTR; its peer is the QP with that GID (its source
//! GID) and QPN whose own peer is this end. An end whose peer is in none of the recordings is
//! kept, unpaired, with why. RDMA CM ids and TCP sockets pair by address and port (one end's
//! local is the other's remote): TCP connections join the table, CM pairs mark their QPs'
//! connection; both order events for the clocks.

use std::{
    collections::{HashMap, HashSet},
    net::{IpAddr, SocketAddr},
};

use super::HostInput;
use crate::{
    correlate::analysis::{handshakes::Kind, QpLife},
    format::gid_text,
};

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

/// A TCP or RDMA CM end: host index, index in that host's `net_ends`.
pub type NetRef = (usize, usize);

/// Two ends of a TCP connection or an RDMA CM connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NetPair {
    pub kind: Kind,
    pub ends: [NetRef; 2],
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Connection {
    /// `c1`, `c2`, ... in the order of the inputs and their QPs, then TCP connections (stable
    /// for one set of recordings given in one order).
    pub id: String,
    /// `RC`, `UC` or `TCP`.
    pub transport: &'static str,
    /// The QP ends (RC, UC): both when paired (the first is the one found first), else one.
    pub ends: Vec<End>,
    /// The socket ends (TCP): both when paired, else one.
    pub sockets: Vec<NetRef>,
    /// Why an end is alone.
    pub unpaired: Option<String>,
    /// RC: its QPs were connected through RDMA CM (a CM id of each end paired).
    pub via_cm: bool,
}

impl Connection {
    pub fn paired(&self) -> bool {
        self.ends.len() == 2 || self.sockets.len() == 2
    }

    /// Both QP ends of a paired RC/UC connection.
    pub fn qp_pair(&self) -> Option<(End, End)> {
        match self.ends.as_slice() {
            [a, b] => Some((*a, *b)),
            _ => None,
        }
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
                transport: if q.qp_type == 3 { "UC" } else { "RC" },
                ends,
                sockets: Vec::new(),
                unpaired,
                via_cm: false,
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

/// Pairs the TCP and RDMA CM ends of `hosts` (one end's local address is the other's remote,
/// and the other way round; the closest in time when an address pair was reused).
pub fn pair_net(hosts: &[HostInput]) -> Vec<NetPair> {
    let mut by_addr: HashMap<(bool, SocketAddr, SocketAddr), Vec<NetRef>> = HashMap::new();
    for (h, input) in hosts.iter().enumerate() {
        for (i, e) in input.report.net_ends.iter().enumerate() {
            by_addr
                .entry((e.kind == Kind::Tcp, e.local, e.remote))
                .or_default()
                .push((h, i));
        }
    }
    let first = |r: &NetRef| {
        let e = &hosts[r.0].report.net_ends[r.1];
        e.steps
            .iter()
            .map(|(_, t)| hosts[r.0].wall(*t))
            .min()
            .unwrap_or(0)
    };
    let mut taken: HashSet<NetRef> = HashSet::new();
    let mut out = Vec::new();
    for (h, input) in hosts.iter().enumerate() {
        for (i, e) in input.report.net_ends.iter().enumerate() {
            let me = (h, i);
            if taken.contains(&me) {
                continue;
            }
            let peer = by_addr
                .get(&(e.kind == Kind::Tcp, e.remote, e.local))
                .into_iter()
                .flatten()
                .filter(|r| **r != me && !taken.contains(*r))
                .min_by_key(|r| (first(r) - first(&me)).unsigned_abs())
                .copied();
            if let Some(p) = peer {
                taken.insert(me);
                taken.insert(p);
                out.push(NetPair {
                    kind: e.kind,
                    ends: [me, p],
                });
            }
        }
    }
    out
}

/// The addresses of each host: its GIDs' IPv4/IPv6 addresses and its sockets' local ones.
fn host_addrs(hosts: &[HostInput]) -> HashMap<IpAddr, usize> {
    let mut out = HashMap::new();
    for (h, input) in hosts.iter().enumerate() {
        for g in input.report.qps.iter().filter_map(|q| q.local_gid) {
            let v6 = std::net::Ipv6Addr::from(g);
            let ip = v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4);
            out.entry(ip).or_insert(h);
        }
        for e in &input.report.net_ends {
            if !e.local.ip().is_unspecified() && !e.local.ip().is_loopback() {
                out.entry(e.local.ip()).or_insert(h);
            }
        }
    }
    out
}

/// TCP connections for the table: the paired ones, and the ends whose peer address is one of
/// the given hosts' but whose socket is not in its recording. CM pairs mark the RC connection
/// of their QPs. Ids continue after `qp_conns`.
pub fn tcp_connections(
    hosts: &[HostInput],
    net: &[NetPair],
    qp_conns: &mut [Connection],
) -> Vec<Connection> {
    let mut out = Vec::new();
    let mut paired: HashSet<NetRef> = HashSet::new();
    let first_id = qp_conns.len() + 1;
    let next = |n: usize| format!("c{}", first_id + n);
    for p in net {
        paired.extend(p.ends);
        match p.kind {
            Kind::Tcp => out.push(Connection {
                id: next(out.len()),
                transport: "TCP",
                ends: Vec::new(),
                sockets: p.ends.to_vec(),
                unpaired: None,
                via_cm: false,
            }),
            Kind::Cm => {
                let qp_of = |r: NetRef| {
                    let e = &hosts[r.0].report.net_ends[r.1];
                    Some((r.0, e.dev.clone()?, e.qpn?))
                };
                for c in qp_conns.iter_mut() {
                    let has = |r: NetRef| {
                        qp_of(r).is_some_and(|(h, dev, qpn)| {
                            c.ends.iter().any(|e| {
                                let q = &hosts[e.host].report.qps[e.qp];
                                e.host == h && q.key.dev == dev && q.key.qpn == qpn
                            })
                        })
                    };
                    if has(p.ends[0]) || has(p.ends[1]) {
                        c.via_cm = true;
                    }
                }
            }
        }
    }
    let addrs = host_addrs(hosts);
    for (h, input) in hosts.iter().enumerate() {
        for (i, e) in input.report.net_ends.iter().enumerate() {
            if e.kind != Kind::Tcp || paired.contains(&(h, i)) {
                continue;
            }
            let Some(&ph) = addrs.get(&e.remote.ip()) else {
                continue;
            };
            if ph == h {
                continue;
            }
            out.push(Connection {
                id: next(out.len()),
                transport: "TCP",
                ends: Vec::new(),
                sockets: vec![(h, i)],
                unpaired: Some(format!(
                    "{} is {}'s address, but no socket {} -> {} is in its recording (opened \
                     before the recording started, or not traced)",
                    e.remote.ip(),
                    hosts[ph].host,
                    e.remote,
                    e.local
                )),
                via_cm: false,
            });
        }
    }
    out
}
