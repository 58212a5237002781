//! Diagnoses: a fault named with its cause, the evidence it rests on and what to change. Only the
//! first error of a chain is a cause: the flushed work requests and the errors that follow it on
//! the same QP are its consequences, listed under it. A QP its owner moved to ERR before any
//! error (a teardown) gets no diagnosis for its flushes. The kinds are an interface
//! (docs/diagnosis.md).

use std::collections::BTreeMap;

use rustc_hash::FxHashMap;

use super::{
    addressing::{Addressing, Finding},
    qps::QpLife,
};
use crate::{
    event::{
        AsyncElement, AsyncEvent, CompactString, GidInfo, ModifyAttrs, QpCaps, QpKey, QpState,
        Record, ResType, Resource, UmemFailed, WcError,
    },
    format::gid_text,
};

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
    found: Vec<Diagnosis>,
}

/// Failed modifies with an address vector kept for the end (a program retrying in a loop).
const MAX_FAILED_AV: usize = 1000;

fn is_flush(status: &str) -> bool {
    status == "WR_FLUSH_ERR"
}

impl Diagnoser {
    /// Forgets per-QP memory of QPs no longer live (a long-running agent).
    pub fn forget_qps(&mut self, live: impl Fn(&QpKey) -> bool) {
        self.attrs.retain(|k, _| live(k));
        self.errors.retain(|k, _| live(k));
    }

    /// Keeps the last `keep` diagnoses found from events (CQ overruns).
    pub fn trim(&mut self, keep: usize) {
        if self.found.len() > keep {
            let cut = self.found.len() - keep;
            self.found.drain(..cut);
        }
    }

    pub fn modified(&mut self, key: &QpKey, a: &ModifyAttrs) {
        let e = self.attrs.entry(key.clone()).or_default();
        e.timeout = a.timeout.or(e.timeout);
        e.retry_cnt = a.retry_cnt.or(e.retry_cnt);
        e.rnr_retry = a.rnr_retry.or(e.rnr_retry);
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

    pub fn resource(&mut self, r: &Resource) {
        if r.res_type != ResType::Cq {
            return;
        }
        let key = (r.dev.clone(), r.id);
        if r.added {
            let cqe = r.cq.map(|(cqe, _)| cqe);
            self.cqs
                .insert(key, (r.owner_pid, r.owner_comm.clone(), cqe));
        } else {
            self.cqs.remove(&key);
        }
    }

    /// A CQ error event: the CQ overflowed. Named after the CQ's owner (the event itself is
    /// delivered from a kernel worker).
    pub fn async_event(&mut self, rec: &Record, a: &AsyncEvent) {
        let (AsyncElement::Cq(id), "CQ_ERR") = (&a.element, a.event.as_str()) else {
            return;
        };
        let owner = self.cqs.get(&(a.dev.clone(), *id)).cloned();
        let (pid, comm, cqe) = match owner {
            Some((pid, comm, cqe)) if pid != 0 => (pid, comm, cqe),
            _ if a.owner_pid != 0 => (a.owner_pid, a.owner_comm.clone(), None),
            _ => (rec.pid, rec.comm.clone(), None),
        };
        let size = cqe.map_or_else(String::new, |n| format!(" of {n} entries"));
        let mut evidence = vec![format!("async event CQ_ERR on {} CQ#{id}", a.dev)];
        if let Some(n) = cqe {
            evidence.push(format!(
                "CQ#{id} was created with {n} entries by pid {pid} ({comm})"
            ));
        }
        self.found.push(Diagnosis {
            kind: "cq_overrun",
            ts_ns: rec.ts_ns,
            wall_ns: rec.wall_ns,
            pid,
            comm,
            dev: Some(a.dev.clone()),
            qpn: None,
            cause: format!(
                "CQ#{id}{size} on {} overflowed: completions arrived faster than pid {pid} polled them",
                a.dev
            ),
            evidence,
            fix: "poll the CQ more often, or create it with room for every outstanding work \
                  request of the QPs that share it (send + receive queue depths)"
                .into(),
            consequences: vec!["the CQ is in error: its QPs' completions are lost".into()],
        });
    }

    /// Whether the QP's chain of errors started with a real error (its retransmits belong to
    /// that fault).
    pub fn errored(&self, key: &QpKey) -> bool {
        self.errors.get(key).is_some_and(|e| e.first.is_some())
    }

    /// `create_failed`: a refused QP creation, with the capacity asked above the device's.
    pub fn qp_caps(&mut self, rec: &Record, c: &QpCaps) {
        let dev = if c.dev.is_empty() {
            "?"
        } else {
            c.dev.as_str()
        };
        let over: Vec<String> = [
            ("max_send_wr", c.max_send_wr, "max_qp_wr", c.dev_max_qp_wr),
            ("max_recv_wr", c.max_recv_wr, "max_qp_wr", c.dev_max_qp_wr),
            (
                "max_send_sge",
                c.max_send_sge,
                "max_send_sge",
                c.dev_max_send_sge,
            ),
            (
                "max_recv_sge",
                c.max_recv_sge,
                "max_recv_sge",
                c.dev_max_recv_sge,
            ),
        ]
        .into_iter()
        .filter(|&(_, asked, _, max)| max != 0 && asked > max)
        .map(|(a, asked, m, max)| format!("{a} {asked} above {dev}'s {m} {max}"))
        .collect();
        let qp_type = crate::event::qp_type_name(c.qp_type);
        let errno = crate::format::errno_text(c.ret);
        let evidence = vec![
            format!("create of a {qp_type} QP on {dev} failed: {errno}"),
            format!(
                "asked: max_send_wr {}, max_recv_wr {}, max_send_sge {}, max_recv_sge {}, max_inline_data {}",
                c.max_send_wr, c.max_recv_wr, c.max_send_sge, c.max_recv_sge, c.max_inline_data
            ),
            format!(
                "{dev} allows: max_qp_wr {}, max_send_sge {}, max_recv_sge {}",
                c.dev_max_qp_wr, c.dev_max_send_sge, c.dev_max_recv_sge
            ),
        ];
        let (cause, fix) = if over.is_empty() {
            (
                format!(
                    "pid {} ({}) could not create a {qp_type} QP on {dev}: {errno}; no capacity asked is above the device's limits",
                    rec.pid, rec.comm
                ),
                "check the other limits (`ibv_devinfo -v`: max_qp, max_inline_data, the QP \
                 type's support) and the process's resources"
                    .to_string(),
            )
        } else {
            (
                format!(
                    "pid {} ({}) could not create a {qp_type} QP on {dev}: {}",
                    rec.pid,
                    rec.comm,
                    over.join(", ")
                ),
                format!(
                    "ask for no more than the device allows (`ibv_devinfo -v` on {dev} lists \
                     max_qp_wr and max_sge), or spread the work over more QPs"
                ),
            )
        };
        self.found.push(Diagnosis {
            kind: "create_failed",
            ts_ns: rec.ts_ns,
            wall_ns: rec.wall_ns,
            pid: rec.pid,
            comm: rec.comm.clone(),
            dev: (!c.dev.is_empty()).then(|| c.dev.clone()),
            qpn: None,
            cause,
            evidence,
            fix,
            consequences: vec!["the creation returned an error to the program".into()],
        });
    }

    /// `mr_reg_failed`: user memory of a registration could not be pinned.
    pub fn umem_failed(&mut self, rec: &Record, u: &UmemFailed) {
        use crate::format::{errno_text, size};
        let dev = if u.dev.is_empty() {
            "?"
        } else {
            u.dev.as_str()
        };
        let mut evidence = vec![format!(
            "pinning {} ({} bytes) for a registration on {dev} failed: {}",
            size(u.size),
            u.size,
            errno_text(u.ret)
        )];
        let over_limit = match (u.memlock, u.pinned) {
            (Some(limit), pinned) => {
                evidence.push(format!(
                    "RLIMIT_MEMLOCK {}{}",
                    size(limit),
                    pinned.map_or_else(String::new, |p| format!(", {} already pinned", size(p)))
                ));
                u.ret == -12 && u.size.saturating_add(pinned.unwrap_or(0)) > limit
            }
            (None, _) => false,
        };
        let (cause, fix) = if over_limit {
            (
                format!(
                    "pid {} ({}) could not register {} on {dev}: it is over its locked-memory limit (RLIMIT_MEMLOCK {})",
                    rec.pid,
                    rec.comm,
                    size(u.size),
                    size(u.memlock.unwrap_or(0))
                ),
                "raise the locked-memory limit of the process (`ulimit -l unlimited`, systemd \
                 LimitMEMLOCK=infinity, docker --ulimit memlock=-1, the pod's runtime limits) \
                 or register less memory; processes with CAP_IPC_LOCK are not limited"
                    .to_string(),
            )
        } else {
            (
                format!(
                    "pid {} ({}) could not register {} on {dev}: {}",
                    rec.pid,
                    rec.comm,
                    size(u.size),
                    errno_text(u.ret)
                ),
                "check the buffer (mapped, not larger than the device's max MR size) and the \
                 access flags against the device's capabilities (`ibv_devinfo -v`)"
                    .to_string(),
            )
        };
        self.found.push(Diagnosis {
            kind: "mr_reg_failed",
            ts_ns: rec.ts_ns,
            wall_ns: rec.wall_ns,
            pid: rec.pid,
            comm: rec.comm.clone(),
            dev: (!u.dev.is_empty()).then(|| u.dev.clone()),
            qpn: None,
            cause,
            evidence,
            fix,
            consequences: vec!["the registration returned an error to the program".into()],
        });
    }

    /// The diagnoses of the run: CQ overruns as they came, and one per QP whose chain of errors
    /// started with a real error (not a flush), in time order.
    pub fn finish(&self, qps: &[QpLife], traffic_measured: bool) -> Vec<Diagnosis> {
        let mut out = self.found.clone();
        for f in &self.failed_av {
            let Some(found) = self.addressing.failed_av(&f.key.dev, f.sgid_index, &f.dgid) else {
                continue;
            };
            let mut evidence = vec![format!(
                "modify {} of QP {:#x} on {} failed: {}",
                f.transition,
                f.key.qpn,
                f.key.dev,
                crate::format::errno_text(f.ret)
            )];
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
        for (key, e) in &self.errors {
            let Some(first) = &e.first else { continue };
            let life = qps.iter().rev().find(|q| &q.key == key);
            let attrs = self.attrs.get(key).copied().unwrap_or_default();
            let ctx = Context {
                qps,
                attrs,
                traffic_measured,
                addressing: &self.addressing,
            };
            out.push(diagnose(key, first, e, life, &ctx));
        }
        out.sort_by_key(|d| d.ts_ns);
        out
    }
}

/// The peer end of `q` among the traced QPs: the QP whose number is `q`'s dest QPN and whose
/// dest QPN is `q`'s (both ends on this host, or both recorded).
fn peer_of<'a>(q: &QpLife, qps: &'a [QpLife]) -> Option<&'a QpLife> {
    let want = q.peer_qpn?;
    qps.iter()
        .rev()
        .find(|p| p.key.qpn == want && p.peer_qpn == Some(q.key.qpn) && p.key != q.key)
}

fn ns_text(ns: u64) -> String {
    if ns >= 1_000_000_000 {
        format!("{:.2} s", ns as f64 / 1e9)
    } else {
        format!("{:.1} ms", ns as f64 / 1e6)
    }
}

/// The local ACK timeout an IB `timeout` value stands for (4.096 µs × 2^timeout; 0 = none).
fn ack_timeout_text(t: u8) -> String {
    if t == 0 {
        "infinite".into()
    } else {
        ns_text(4096u64 << t.min(40))
    }
}

/// What a QP's diagnosis is judged against besides its own errors.
struct Context<'a> {
    qps: &'a [QpLife],
    attrs: Attrs,
    traffic_measured: bool,
    addressing: &'a Addressing,
}

fn diagnose(
    key: &QpKey,
    first: &FirstError,
    e: &QpErrors,
    life: Option<&QpLife>,
    ctx: &Context,
) -> Diagnosis {
    let (qps, attrs, traffic_measured) = (ctx.qps, ctx.attrs, ctx.traffic_measured);
    let qpn = key.qpn;
    let dev = &key.dev;
    let peer = life.and_then(|q| peer_of(q, qps));
    let peer_name = |p: &QpLife| {
        format!(
            "QP {:#x} on {} of pid {} ({})",
            p.key.qpn, p.key.dev, p.owner_pid, p.owner_comm
        )
    };
    let mut evidence = vec![format!(
        "first error completion {} on CQ#{} for QP {qpn:#x} on {dev}{}",
        first.status,
        first.cqn,
        if first.vendor_err != 0 {
            format!(" (vendor error {:#x})", first.vendor_err)
        } else {
            String::new()
        }
    )];
    if let Some(q) = life {
        let mut line = format!(
            "QP {qpn:#x} ({}) created by pid {} ({})",
            crate::event::qp_type_name(q.qp_type),
            q.owner_pid,
            q.owner_comm
        );
        if let Some(d) = q.peer_qpn {
            line += &format!(", dest QPN {d:#x}");
        }
        if let Some(g) = &q.peer_gid {
            line += &format!(", dest GID {}", gid_text(g));
        }
        evidence.push(line);
        if traffic_measured {
            evidence.push(format!(
                "{} packets sent, {} received, {} retransmits on this QP",
                q.tx_packets, q.rx_packets, q.retransmits
            ));
        }
    }
    let status = first.status.as_str();
    let (kind, cause, fix) = match status {
        "RNR_RETRY_EXC_ERR" => {
            let receiver = peer.map_or_else(
                || {
                    format!(
                        "the receiver (dest QPN {})",
                        life.and_then(|q| q.peer_qpn)
                            .map_or("?".into(), |d| format!("{d:#x}"))
                    )
                },
                |p| format!("receiver pid {} ({})", p.owner_pid, p.owner_comm),
            );
            if let Some(r) = attrs.rnr_retry {
                evidence.push(format!(
                    "rnr_retry {r} on QP {qpn:#x}{}",
                    if r == 7 { " (7 = retry forever)" } else { "" }
                ));
            }
            (
                "rnr",
                format!(
                    "{receiver} did not post receive buffers in time: QP {qpn:#x} on {dev} hit RNR retry exceeded"
                ),
                "post receives before the peer sends (and enough of them), or raise rnr_retry \
                 (7 retries forever) on the sender and min_rnr_timer on the receiver"
                    .to_string(),
            )
        }
        "REM_ACCESS_ERR" => {
            if let Some(p) = peer {
                evidence.push(format!("the target is {}", peer_name(p)));
            }
            (
                "remote_access",
                format!(
                    "the peer refused QP {qpn:#x}'s RDMA access: the rkey is not a valid key of the peer, the address is outside its MR, or the MR lacks remote access"
                ),
                "send the rkey and address of an MR the peer registered with \
                 IBV_ACCESS_REMOTE_WRITE/READ/ATOMIC as the operation needs, and keep it \
                 registered while the peer uses it"
                    .into(),
            )
        }
        "LOC_LEN_ERR" | "LOC_PROT_ERR" | "LOC_QP_OP_ERR" | "LOC_EEC_OP_ERR" | "LOC_ACCESS_ERR"
        | "MW_BIND_ERR" | "REM_INV_REQ_ERR" => {
            let what = match status {
                "LOC_LEN_ERR" => "a message longer than the posted receive buffer (or a send longer than the port's limits)",
                "LOC_PROT_ERR" => "a work request whose lkey or address range is not in a registered MR of the QP's PD",
                "LOC_QP_OP_ERR" => "a work request the QP cannot execute (opcode or size invalid for it)",
                "LOC_ACCESS_ERR" => "a local MR without the access the operation needs",
                "REM_INV_REQ_ERR" => "a request the peer found invalid (longer than its receive buffer, or an opcode its QP does not allow)",
                "MW_BIND_ERR" => "a memory window bind the MR does not allow",
                _ => "a local QP operation error",
            };
            (
                "local_error",
                format!("QP {qpn:#x} on {dev} posted {what}"),
                "check the failing work request's sizes, keys and opcode against the MRs and \
                 the QP type (and the receive buffer sizes the peer posts)"
                    .into(),
            )
        }
        "RETRY_EXC_ERR" => {
            if let Some(t) = attrs.timeout {
                evidence.push(format!(
                    "timeout {t} (local ACK timeout {}), retry_cnt {}",
                    ack_timeout_text(t),
                    attrs.retry_cnt.map_or("?".into(), |r| r.to_string())
                ));
            }
            let acked = life.is_some_and(|q| q.rx_packets > 0);
            let gone = peer.filter(|p| {
                p.destroyed_ns.is_some_and(|t| t <= first.ts_ns) || p.state == Some(QpState::Err)
            });
            let addressing = || -> Option<(&'static str, Finding)> {
                let q = life?;
                if let Some(f) = peer.and_then(|p| ctx.addressing.pair(q, p)) {
                    return Some(("gid_mismatch", f));
                }
                if peer.is_none() {
                    let f = ctx.addressing.dest_qpn_unknown(q, qps, first.ts_ns)?;
                    return Some(("dest_qpn_unknown", f));
                }
                None
            };
            let found = if gone.is_none() { addressing() } else { None };
            if let Some((kind, f)) = found {
                evidence.extend(f.evidence);
                (kind, f.cause, f.fix)
            } else if traffic_measured && !acked {
                (
                    "unreachable",
                    format!(
                        "the destination of QP {qpn:#x} on {dev} never answered: retries exceeded with nothing ever acknowledged"
                    ),
                    "check the dest GID/QPN the QP was connected to, the route and neighbour \
                     for the dest address, and that the peer's QP reached RTR"
                        .into(),
                )
            } else if let Some(p) = gone {
                evidence.push(format!(
                    "the peer {} was {} before this error",
                    peer_name(p),
                    if p.destroyed_ns.is_some() {
                        "destroyed"
                    } else {
                        "in ERR"
                    }
                ));
                (
                    "peer_gone",
                    format!(
                        "the peer of QP {qpn:#x} on {dev} (pid {} {}) went away while QP {qpn:#x} still sent: retries exceeded",
                        p.owner_pid, p.owner_comm
                    ),
                    "end both sides together (a disconnect message or RDMA CM), or check why \
                     the peer process exited"
                        .into(),
                )
            } else {
                (
                    "retry_exceeded",
                    format!(
                        "QP {qpn:#x} on {dev} stopped being acknowledged: transport retries exceeded (the peer went away, its QP left RTS, or the path lost every packet)"
                    ),
                    "check the peer process and its QP state, and loss on the path (port \
                     counters, retransmits)"
                        .into(),
                )
            }
        }
        _ => (
            "completion_error",
            format!("QP {qpn:#x} on {dev} completed a work request with {status}"),
            "see the status in the verbs documentation (ibv_wc_status_str) and the QP's \
             evidence"
                .into(),
        ),
    };
    let mut consequences = Vec::new();
    if e.flushed > 0 {
        consequences.push(format!(
            "{} work request(s) flushed (WR_FLUSH_ERR)",
            e.flushed
        ));
    }
    for (s, n) in &e.later {
        consequences.push(format!("{n} later completion(s) {s}"));
    }
    if let Some(from) = e.driver_err {
        consequences.push(format!(
            "QP moved {}->ERR by the driver",
            from.map_or("?", |s| s.name())
        ));
    }
    Diagnosis {
        kind,
        ts_ns: first.ts_ns,
        wall_ns: first.wall_ns,
        pid: first.pid,
        comm: first.comm.clone(),
        dev: Some(dev.clone()),
        qpn: Some(qpn),
        cause,
        evidence,
        fix,
        consequences,
    }
}
