//! Addressing faults of a connection: the GID tables of the traced host's ports (sampled from
//! sysfs) against the source GID index and dest GID a QP was given at RTR, and the dest QPN
//! against the QPs that existed on the device that owns the dest GID. Feeds the `gid_mismatch`
//! and `dest_qpn_unknown` diagnoses (docs/diagnosis.md).

use std::collections::BTreeMap;

use rustc_hash::FxHashSet;

use super::qps::QpLife;
use crate::{
    event::{CompactString, GidInfo},
    format::gid_text,
};

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GidEntry {
    pub gid: [u8; 16],
    pub gid_type: &'static str,
}

/// What a check found: the diagnosis's cause, evidence and fix.
pub struct Finding {
    pub cause: String,
    pub evidence: Vec<String>,
    pub fix: String,
}

/// The GID tables seen so far, and the devices whose QP table was read.
#[derive(Clone, Default)]
pub struct Addressing {
    gids: BTreeMap<(CompactString, u32, u32), GidEntry>,
    table_devs: FxHashSet<CompactString>,
}

fn is_v4(gid: &[u8; 16]) -> bool {
    std::net::Ipv6Addr::from(*gid).to_ipv4_mapped().is_some()
}

fn family(gid: &[u8; 16]) -> &'static str {
    if is_v4(gid) {
        "an IPv4 address"
    } else {
        "an IPv6 address"
    }
}

const FIX: &str = "use the same kind of GID on both ends: pick the source GID index whose \
                   address and RoCE version match what the peer was told (`show_gids` or \
                   `ibv_devinfo -v` list them; for RoCE v2 over IPv4 the ::ffff:a.b.c.d entry), \
                   and send that GID to the peer";

impl Addressing {
    pub fn gid(&mut self, g: &GidInfo) {
        let key = (g.dev.clone(), g.port, g.index);
        match g.gid {
            Some(gid) => {
                self.gids.insert(
                    key,
                    GidEntry {
                        gid,
                        gid_type: g.gid_type,
                    },
                );
            }
            None => {
                self.gids.remove(&key);
            }
        }
    }

    /// A QP table row of `dev` was seen: QPs older than the trace on it are known.
    pub fn table_row(&mut self, dev: &CompactString) {
        if !self.table_devs.contains(dev) {
            self.table_devs.insert(dev.clone());
        }
    }

    pub fn knows(&self, dev: &str) -> bool {
        self.gids.keys().any(|(d, ..)| d == dev)
    }

    /// The entry at `index` of `dev` (port 1 first: a QP's port is not captured).
    fn entry(&self, dev: &str, index: u32) -> Option<(u32, &GidEntry)> {
        self.gids
            .iter()
            .filter(|((d, _, i), _)| d == dev && *i == index)
            .map(|((_, p, _), e)| (*p, e))
            .min_by_key(|(p, _)| *p)
    }

    /// The GID at `index` of `dev` (port 1 first).
    pub fn gid_at(&self, dev: &str, index: u32) -> Option<[u8; 16]> {
        self.entry(dev, index).map(|(_, e)| e.gid)
    }

    /// The local device, port and index that own `gid`.
    fn owner(&self, gid: &[u8; 16]) -> Option<(&CompactString, u32, u32, &GidEntry)> {
        self.gids
            .iter()
            .find(|(_, e)| &e.gid == gid)
            .map(|((d, p, i), e)| (d, *p, *i, e))
    }

    fn indexes(&self, dev: &str) -> String {
        let list: Vec<String> = self
            .gids
            .iter()
            .filter(|((d, ..), _)| d == dev)
            .map(|((_, p, i), e)| format!("port {p} index {i} {} {}", gid_text(&e.gid), e.gid_type))
            .collect();
        list.join("; ")
    }

    /// A modify with an address vector that failed: is the source GID the reason?
    pub fn failed_av(&self, dev: &str, sgid_index: u32, dgid: &[u8; 16]) -> Option<Finding> {
        if !self.knows(dev) {
            return None;
        }
        let Some((port, src)) = self.entry(dev, sgid_index) else {
            return Some(Finding {
                cause: format!(
                    "source GID index {sgid_index} does not exist on {dev}: the address vector names no source address"
                ),
                evidence: vec![format!("GID table of {dev}: {}", self.indexes(dev))],
                fix: FIX.into(),
            });
        };
        let mut evidence = vec![format!(
            "source GID index {sgid_index} on {dev} port {port} is {} ({})",
            gid_text(&src.gid),
            src.gid_type
        )];
        if is_v4(&src.gid) != is_v4(dgid) {
            evidence.push(format!("dest GID {}", gid_text(dgid)));
            return Some(Finding {
                cause: format!(
                    "the source GID (index {sgid_index}, {}) and the dest GID ({}) are of different kinds: the two ends picked GID indexes that do not match",
                    family(&src.gid),
                    family(dgid)
                ),
                evidence,
                fix: FIX.into(),
            });
        }
        let (odev, oport, oindex, other) = self.owner(dgid)?;
        (other.gid_type != src.gid_type).then(|| {
            evidence.push(format!(
                "dest GID {} is {odev} port {oport} index {oindex}, {}",
                gid_text(dgid),
                other.gid_type
            ));
            Finding {
                cause: format!(
                    "the two ends use different GID types ({} here, {} at the peer)",
                    src.gid_type, other.gid_type
                ),
                evidence,
                fix: FIX.into(),
            }
        })
    }

    /// Two connected QPs of this host: does each target the address the other sends from?
    pub fn pair(&self, q: &QpLife, peer: &QpLife) -> Option<Finding> {
        let (Some(qi), Some(pi)) = (q.sgid_index, peer.sgid_index) else {
            return None;
        };
        let (_, src) = self.entry(&q.key.dev, qi)?;
        let (_, psrc) = self.entry(&peer.key.dev, pi)?;
        let mut evidence = vec![
            format!(
                "QP {:#x} on {} sends from GID index {qi} = {} ({})",
                q.key.qpn,
                q.key.dev,
                gid_text(&src.gid),
                src.gid_type
            ),
            format!(
                "its peer QP {:#x} on {} sends from GID index {pi} = {} ({})",
                peer.key.qpn,
                peer.key.dev,
                gid_text(&psrc.gid),
                psrc.gid_type
            ),
        ];
        if src.gid_type != psrc.gid_type {
            return Some(Finding {
                cause: format!(
                    "the two ends use different GID types ({} and {}): their packets are not accepted",
                    src.gid_type, psrc.gid_type
                ),
                evidence,
                fix: FIX.into(),
            });
        }
        let targeted = peer.peer_gid?;
        (targeted != src.gid).then(|| {
            evidence.push(format!(
                "the peer expects packets from {}",
                gid_text(&targeted)
            ));
            Finding {
                cause: format!(
                    "the peer expects packets from {} but QP {:#x} sends from {}: the two ends exchanged GIDs of different indexes",
                    gid_text(&targeted),
                    q.key.qpn,
                    gid_text(&src.gid)
                ),
                evidence,
                fix: FIX.into(),
            }
        })
    }

    /// `q`'s dest GID is this host's and no QP with its dest QPN existed on the device that
    /// owns it (every QP traced or listed by the QP table) by `at_ns`.
    pub fn dest_qpn_unknown(&self, q: &QpLife, qps: &[QpLife], at_ns: u64) -> Option<Finding> {
        let dest = q.peer_qpn?;
        let dgid = q.peer_gid?;
        let (dev, port, index, _) = self.owner(&dgid)?;
        if !self.table_devs.contains(dev) {
            return None;
        }
        let existed = qps
            .iter()
            .any(|p| p.key.dev == *dev && p.key.qpn == dest && p.created_ns <= at_ns);
        (!existed).then(|| Finding {
            cause: format!(
                "QP {:#x} on {} was connected to QPN {dest:#x} on {dev}, which does not exist: its requests are dropped",
                q.key.qpn, q.key.dev
            ),
            evidence: vec![
                format!(
                    "dest GID {} is {dev} port {port} index {index} on this host",
                    gid_text(&dgid)
                ),
                format!(
                    "no QP {dest:#x} on {dev} was created during the trace or listed in its QP table"
                ),
            ],
            fix: "send the peer's QPN after the peer created its QP (and from the same run), \
                  and check the out-of-band exchange that carries it"
                .into(),
        })
    }
}
