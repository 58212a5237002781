//! Diagnoses: a fault named with its cause, the evidence it rests on and what to change. Only the
//! first error of a chain is a cause: the flushed work requests and the errors that follow it on
//! the same QP are its consequences, listed under it. A QP its owner moved to ERR before any
//! error (a teardown) gets no diagnosis for its flushes. The kinds are an interface
//! (docs/diagnosis.md).

use std::collections::BTreeMap;

use rustc_hash::FxHashMap;

use super::{addressing::Addressing, qps::QpLife};
use crate::event::{CompactString, GidInfo, ModifyAttrs, QpKey, QpState, Record, WcError};

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diagnosis {
    pub kind: &'static str,
    pub ts_ns: u64,
    pub wall_ns: u64,
    pub pid: u32,
    pub comm: CompactString,
    pub dev: Option<CompactString>,
    pub qpn: Option<u32>,
    /// One sentence.
    pub cause: String,
    /// The records and figures it rests on.
    pub evidence: Vec<String>,
    /// What to change.
    pub fix: String,
    /// What followed from it (flushes, later errors, the QP's move to ERR).
    pub consequences: Vec<String>,
}

/// The QP attributes a diagnosis names, as last set by a modify.
#[derive(Clone, Copy, Default)]
struct Attrs {
    timeout: Option<u8>,
    retry_cnt: Option<u8>,
    rnr_retry: Option<u8>,
    min_rnr_timer: Option<u8>,
}

#[derive(Clone)]
struct FirstError {
    ts_ns: u64,
    wall_ns: u64,
    status: CompactString,
    cqn: u32,
    vendor_err: u32,
    pid: u32,
    comm: CompactString,
}

#[derive(Clone, Default)]
struct QpErrors {
    first: Option<FirstError>,
    flushed: u64,
    /// Later error completions that are not flushes, by status.
    later: BTreeMap<CompactString, u64>,
    /// The owner moved it to ERR before any error: a teardown, its flushes expected.
    torn_down: bool,
    /// The driver moved it to ERR (from which state).
    driver_err: Option<Option<QpState>>,
}

/// An MR as registered: its rkey, size and access flags (when the registration was seen).
#[derive(Clone, Copy, Debug)]
pub(super) struct MrSeen {
    rkey: u32,
    length: u64,
    access: Option<u32>,
}

impl FailedAv {
    /// The evidence line of the refusal: `modify INIT->RTR of QP 0x11 on rxe0 failed: ...`.
    fn refused(&self) -> String {
        format!(
            "modify {} of QP {:#x} on {} failed: {}",
            self.transition,
            self.key.qpn,
            self.key.dev,
            crate::format::errno_text(self.ret)
        )
    }
}

/// MRs kept per (device, process): the latest.
const MRS_KEPT: usize = 16;

/// A modify with an address vector that the kernel refused.
#[derive(Clone)]
struct FailedAv {
    ts_ns: u64,
    wall_ns: u64,
    pid: u32,
    comm: CompactString,
    key: QpKey,
    sgid_index: u32,
    dgid: [u8; 16],
    ret: i32,
    transition: String,
}

#[derive(Clone, Default)]
pub(super) struct Diagnoser {
    addressing: Addressing,
    failed_av: Vec<FailedAv>,
    attrs: FxHashMap<QpKey, Attrs>,
    errors: FxHashMap<QpKey, QpErrors>,
    /// (device, CQ id) -> (owner pid, comm, CQ entries).
    cqs: FxHashMap<(CompactString, u32), (u32, CompactString, Option<u32>)>,
    /// (device, owner pid) -> its last MRs registered there (a remote access error names the
    /// target's access flags).
    mrs: FxHashMap<(CompactString, u32), Vec<MrSeen>>,
    found: Vec<Diagnosis>,
    /// What [`Diagnoser::fresh`] returned already: `found` and `failed_av` up to these
    /// indexes, and the QPs whose chains were named.
    announced_found: usize,
    announced_av: usize,
    announced_qps: rustc_hash::FxHashSet<QpKey>,
}

/// Failed modifies with an address vector kept for the end (a program retrying in a loop).
const MAX_FAILED_AV: usize = 1000;

fn is_flush(status: &str) -> bool {
    status == "WR_FLUSH_ERR"
}

impl Diagnoser {
    /// Forgets per-QP memory of QPs no longer live (a long-running agent).
    /// Forgets the MRs of processes that are gone (a long-running agent).
    pub fn forget_procs(&mut self, gone: impl Fn(u32) -> bool) {
        self.mrs.retain(|(_, pid), _| !gone(*pid));
    }

    pub fn forget_qps(&mut self, live: impl Fn(&QpKey) -> bool) {
        self.attrs.retain(|k, _| live(k));
        self.errors.retain(|k, _| live(k));
        self.announced_qps.retain(|k| live(k));
    }

    /// Keeps the last `keep` diagnoses found from events (CQ overruns).
    pub fn trim(&mut self, keep: usize) {
        if self.found.len() > keep {
            let cut = self.found.len() - keep;
            self.found.drain(..cut);
            self.announced_found = self.announced_found.saturating_sub(cut);
        }
    }

    pub fn modified(&mut self, key: &QpKey, a: &ModifyAttrs) {
        let e = self.attrs.entry(key.clone()).or_default();
        e.timeout = a.timeout.or(e.timeout);
        e.retry_cnt = a.retry_cnt.or(e.retry_cnt);
        e.rnr_retry = a.rnr_retry.or(e.rnr_retry);
        e.min_rnr_timer = a.min_rnr_timer.or(e.min_rnr_timer);
    }

    pub fn gid(&mut self, g: &GidInfo) {
        self.addressing.gid(g);
    }

    pub fn table_row(&mut self, dev: &CompactString) {
        self.addressing.table_row(dev);
    }

    /// A modify the kernel refused: kept when it carried an address vector (checked against
    /// the GID table at the end).
    pub fn modify_failed(&mut self, rec: &Record, key: &QpKey, a: &ModifyAttrs, ret: i32) {
        let (Some(sgid_index), Some(dgid)) = (a.sgid_index, a.dgid) else {
            return;
        };
        if self.failed_av.len() >= MAX_FAILED_AV {
            return;
        }
        self.failed_av.push(FailedAv {
            ts_ns: rec.ts_ns,
            wall_ns: rec.wall_ns,
            pid: rec.pid,
            comm: rec.comm.clone(),
            key: key.clone(),
            sgid_index,
            dgid,
            ret,
            transition: format!(
                "{}->{}",
                a.cur_state.map_or("?", |s| s.name()),
                a.new_state.map_or("?", |s| s.name())
            ),
        });
    }

    pub fn wc_error(&mut self, rec: &Record, w: &WcError) {
        let e = self.errors.entry(w.qp.clone()).or_default();
        if is_flush(&w.status) {
            e.flushed += 1;
            return;
        }
        if e.first.is_none() && !e.torn_down {
            e.first = Some(FirstError {
                ts_ns: rec.ts_ns,
                wall_ns: rec.wall_ns,
                status: w.status.clone(),
                cqn: w.cqn,
                vendor_err: w.vendor_err,
                pid: if w.owner_pid != 0 {
                    w.owner_pid
                } else {
                    rec.pid
                },
                comm: if w.owner_pid != 0 {
                    w.owner_comm.clone()
                } else {
                    rec.comm.clone()
                },
            });
        } else {
            *e.later.entry(w.status.clone()).or_default() += 1;
        }
    }

    pub fn moved_to_err(&mut self, key: &QpKey, from: Option<QpState>, by_driver: bool) {
        let e = self.errors.entry(key.clone()).or_default();
        if by_driver {
            e.driver_err = Some(from);
        } else if e.first.is_none() {
            e.torn_down = true;
        }
    }

    /// Whether the QP's chain of errors started with a real error (its retransmits belong to
    /// that fault).
    pub fn errored(&self, key: &QpKey) -> bool {
        self.errors.get(key).is_some_and(|e| e.first.is_some())
    }

    /// (pid, comm, kind, dev) of the diagnoses found since the last call, as known now: a
    /// live agent's question. A QP's chain is named once, when its first error is seen.
    pub fn fresh(
        &mut self,
        qps: &[QpLife],
        traffic_measured: bool,
    ) -> Vec<(u32, CompactString, &'static str, Option<CompactString>)> {
        let mut out: Vec<_> = self.found[self.announced_found.min(self.found.len())..]
            .iter()
            .map(|d| (d.pid, d.comm.clone(), d.kind, d.dev.clone()))
            .collect();
        self.announced_found = self.found.len();
        for f in &self.failed_av[self.announced_av.min(self.failed_av.len())..] {
            if self
                .addressing
                .failed_av(&f.key.dev, f.sgid_index, &f.dgid)
                .is_some()
            {
                out.push((
                    f.pid,
                    f.comm.clone(),
                    "gid_mismatch",
                    Some(f.key.dev.clone()),
                ));
            } else if let Some(d) = no_neighbour(f, self.addressing.knows(&f.key.dev)) {
                out.push((d.pid, d.comm, d.kind, d.dev));
            }
        }
        self.announced_av = self.failed_av.len();
        for (key, e) in &self.errors {
            let Some(first) = &e.first else { continue };
            if self.announced_qps.contains(key) || self.folded_into(key, first, qps).is_some() {
                continue;
            }
            let life = qps.iter().rev().find(|q| &q.key == key);
            let ctx = Context {
                qps,
                attrs: self.attrs.get(key).copied().unwrap_or_default(),
                traffic_measured,
                addressing: &self.addressing,
                all_attrs: &self.attrs,
                mrs: &self.mrs,
            };
            let d = diagnose(key, first, e, life, &ctx);
            out.push((d.pid, d.comm, d.kind, d.dev));
            self.announced_qps.insert(key.clone());
        }
        out
    }

    /// The diagnoses of the run: CQ overruns as they came, and one per QP whose chain of errors
    /// started with a real error (not a flush), in time order.
    /// The GID at `index` of `dev`'s table, when it was sampled.
    pub fn local_gid(&self, dev: &str, index: u32) -> Option<[u8; 16]> {
        self.addressing.gid_at(dev, index)
    }

    pub fn finish(&self, qps: &[QpLife], traffic_measured: bool) -> Vec<Diagnosis> {
        let mut out = self.found.clone();
        for f in &self.failed_av {
            let Some(found) = self.addressing.failed_av(&f.key.dev, f.sgid_index, &f.dgid) else {
                out.extend(no_neighbour(f, self.addressing.knows(&f.key.dev)));
                continue;
            };
            let mut evidence = vec![f.refused()];
            evidence.extend(found.evidence);
            out.push(Diagnosis {
                kind: "gid_mismatch",
                ts_ns: f.ts_ns,
                wall_ns: f.wall_ns,
                pid: f.pid,
                comm: f.comm.clone(),
                dev: Some(f.key.dev.clone()),
                qpn: Some(f.key.qpn),
                cause: found.cause,
                evidence,
                fix: found.fix,
                consequences: vec![format!("QP {:#x} never reached RTR", f.key.qpn)],
            });
        }
        let mut chains: Vec<(QpKey, Diagnosis)> = Vec::new();
        let mut folded: Vec<(QpKey, String)> = Vec::new();
        for (key, e) in &self.errors {
            let Some(first) = &e.first else { continue };
            let life = qps.iter().rev().find(|q| &q.key == key);
            if let Some(receiver) = self.folded_into(key, first, qps) {
                let who = life.map_or(String::new(), |q| {
                    format!(" of pid {} ({})", q.owner_pid, q.owner_comm)
                });
                folded.push((
                    receiver,
                    format!(
                        "the sending QP {:#x} on {}{who} failed with {}: the receiver's NAK for this error",
                        key.qpn, key.dev, first.status
                    ),
                ));
                continue;
            }
            let attrs = self.attrs.get(key).copied().unwrap_or_default();
            let ctx = Context {
                qps,
                attrs,
                traffic_measured,
                addressing: &self.addressing,
                all_attrs: &self.attrs,
                mrs: &self.mrs,
            };
            chains.push((key.clone(), diagnose(key, first, e, life, &ctx)));
        }
        for (receiver, line) in folded {
            if let Some((_, d)) = chains.iter_mut().find(|(k, _)| *k == receiver) {
                d.consequences.push(line);
            }
        }
        out.extend(chains.into_iter().map(|(_, d)| d));
        out.sort_by_key(|d| d.ts_ns);
        out
    }
}

impl Diagnoser {
    /// A sender's remote invalid request or remote operation error is its peer's error seen
    /// from the other end (the peer's NAK): when the traced peer QP failed first-hand (a
    /// receive too short, an opcode it does not allow), the peer's key, whose diagnosis lists
    /// this one as a consequence.
    fn folded_into(&self, key: &QpKey, first: &FirstError, qps: &[QpLife]) -> Option<QpKey> {
        const NAKED: [&str; 2] = ["REM_INV_REQ_ERR", "REM_OP_ERR"];
        if !NAKED.contains(&first.status.as_str()) {
            return None;
        }
        let life = qps.iter().rev().find(|q| &q.key == key)?;
        let peer = chain::peer_of(life, qps)?;
        let theirs = self.errors.get(&peer.key)?.first.as_ref()?;
        (!NAKED.contains(&theirs.status.as_str()) && !is_flush(&theirs.status))
            .then(|| peer.key.clone())
    }
}

/// A refused modify whose address could not be resolved: the kernel looks up the dest GID's
/// neighbour (ARP/ND) when a RoCE QP moves to RTR, and fails the modify when none answers.
fn no_neighbour(f: &FailedAv, gids_known: bool) -> Option<Diagnosis> {
    // ETIMEDOUT (no ARP/ND answer), EHOSTUNREACH, ENETUNREACH, EADDRNOTAVAIL.
    if ![-110, -113, -101, -99].contains(&f.ret) {
        return None;
    }
    let addr = crate::format::gid_text(&f.dgid);
    Some(Diagnosis {
        kind: "unreachable",
        ts_ns: f.ts_ns,
        wall_ns: f.wall_ns,
        pid: f.pid,
        comm: f.comm.clone(),
        dev: Some(f.key.dev.clone()),
        qpn: Some(f.key.qpn),
        cause: format!(
            "the destination of QP {:#x} on {} is unreachable: no route or neighbour for its dest \
             GID {addr}, so the kernel refused the modify {}",
            f.key.qpn, f.key.dev, f.transition
        ),
        evidence: vec![
            f.refused(),
            format!(
                "dest GID {addr}, source GID index {}{}",
                f.sgid_index,
                if gids_known {
                    ": consistent with the port's GID table"
                } else {
                    " (the GID table was not read)"
                }
            ),
        ],
        fix: format!(
            "check the peer address the program was given ({addr}: a stale or wrong out-of-band \
             exchange?), that the peer host is up, and the route and neighbour to it (ip route \
             get, ip neigh) from the RDMA device's netdev"
        ),
        consequences: vec![format!("QP {:#x} never reached RTR", f.key.qpn)],
    })
}

mod chain;
mod resources;
mod timeout;

use chain::{diagnose, Context};
