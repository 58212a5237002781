//! Anomalies: what went wrong, in time order, with the likely cause — failed creates and
//! modifies (illegal transitions, a path MTU above the port's), QPs moved to ERR (by their
//! owner or by the driver, with the error completion behind it), error completions, async
//! errors, CM failures, ports going down, devices removed, lost events, stuck QPs.

use std::collections::BTreeMap;

use rustc_hash::{FxHashMap, FxHashSet};

use crate::{
    event::{
        mtu_bytes, AsyncElement, AsyncEvent, CmEvent, CompactString, ModifyAttrs, PortInfo, QpKey,
        QpState, Record, WcError,
    },
    format::errno_text,
};

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Anomaly {
    pub ts_ns: u64,
    pub wall_ns: u64,
    pub pid: u32,
    pub comm: CompactString,
    pub dev: Option<CompactString>,
    pub qpn: Option<u32>,
    pub kind: &'static str,
    pub detail: String,
}

/// What an error completion usually means, for the reader of an anomaly.
fn wc_status_hint(status: &str) -> &'static str {
    match status {
        "RETRY_EXC_ERR" => {
            ": transport retries exhausted (peer unreachable, lossy path or dead peer QP)"
        }
        "RNR_RETRY_EXC_ERR" => ": receiver not ready too often (peer posts receives too slowly)",
        "REM_ACCESS_ERR" => ": the peer refused access (rkey, bounds or MR access flags)",
        "LOC_PROT_ERR" => ": local protection error (lkey or MR bounds)",
        "LOC_LEN_ERR" => ": message longer than the posted receive buffer",
        "REM_INV_REQ_ERR" => ": the peer found the request invalid (opcode, length or QP type)",
        "WR_FLUSH_ERR" => ": work request flushed because the QP is in ERR",
        "LOC_ACCESS_ERR" => ": local access error (MR access flags)",
        "REM_OP_ERR" => ": the peer could not complete the operation",
        _ => "",
    }
}

/// Whether `from -> to` is a transition the IB spec allows at all (ib_modify_qp_is_ok's table,
/// ignoring attribute requirements).
fn legal(from: QpState, to: QpState) -> bool {
    use QpState::*;
    matches!(
        (from, to),
        (_, Reset)
            | (_, Err)
            | (Reset, Init)
            | (Init, Init)
            | (Init, Rtr)
            | (Rtr, Rts)
            | (Rts, Rts)
            | (Rts, Sqd)
            | (Sqd, Rts)
            | (Sqd, Sqd)
            | (Sqe, Rts)
    )
}

#[derive(Clone, Default)]
pub(super) struct Anomalies {
    pub list: Vec<Anomaly>,
    /// Anomalies dropped from the front of `list` by [`Anomalies::trim`].
    pub dropped: usize,
    /// (QP, wc status) pairs already reported as an anomaly; repeats are only counted.
    wc_reported: FxHashSet<(QpKey, CompactString)>,
    /// First error completion status per QP (flushes only if nothing else), to say why a QP
    /// went to ERR.
    first_wc: FxHashMap<QpKey, CompactString>,
    /// Ports as last sampled, for MTU checks and port-down anomalies.
    ports: BTreeMap<(CompactString, u32), PortInfo>,
}

impl Anomalies {
    /// Keeps the last `keep` anomalies (a long-running agent counts the rest).
    pub fn trim(&mut self, keep: usize) {
        if self.list.len() > keep {
            let cut = self.list.len() - keep;
            self.list.drain(..cut);
            self.dropped += cut;
        }
    }

    /// Forgets per-QP memory of QPs no longer live (a long-running agent).
    pub fn forget_qps(&mut self, live: impl Fn(&QpKey) -> bool) {
        self.wc_reported.retain(|(k, _)| live(k));
        self.first_wc.retain(|k, _| live(k));
    }

    /// An anomaly about `rec`'s subject.
    pub fn add(&mut self, rec: &Record, kind: &'static str, detail: String) {
        self.list.push(Anomaly {
            ts_ns: rec.ts_ns,
            wall_ns: rec.wall_ns,
            pid: rec.subject_pid(),
            comm: rec.subject_comm().into(),
            dev: rec.dev().map(CompactString::from),
            qpn: rec.qpn(),
            kind,
            detail,
        });
    }

    pub fn create_failed(&mut self, rec: &Record, ret: i32) {
        self.add(
            rec,
            "qp_create_failed",
            format!("QP create failed: {}", errno_text(ret)),
        );
    }

    /// A refused modify, with the likely cause.
    pub fn modify_failed(&mut self, rec: &Record, dev: &str, attrs: &ModifyAttrs, ret: i32) {
        let from = attrs.cur_state.map_or("?", |s| s.name());
        let to = attrs.new_state.map_or("(same)", |s| s.name());
        let likely = match (attrs.cur_state, attrs.new_state) {
            (Some(f), Some(t)) if !legal(f, t) => format!("illegal transition {f}->{t}"),
            (_, Some(QpState::Rtr)) => match self.mtu_too_big(dev, attrs.path_mtu) {
                Some(why) => why,
                None => "check path MTU against the port's active MTU, the GID index and the dest QPN/GID".into(),
            },
            (_, Some(QpState::Rts)) => "check timeout / retry_cnt / rnr_retry / SQ PSN".into(),
            _ => "attributes rejected by the driver".into(),
        };
        let d = format!(
            "modify {from}->{to} failed: {}; likely: {likely}",
            errno_text(ret)
        );
        self.add(rec, "qp_modify_failed", d);
    }

    /// An accepted modify whose path MTU cannot work: rxe takes a path MTU above the link's
    /// and then drops the large packets (the peer sees flushes and retries); most HW refuses it.
    pub fn modified(&mut self, rec: &Record, dev: &str, attrs: &ModifyAttrs) {
        if let Some(why) = self.mtu_too_big(dev, attrs.path_mtu) {
            let d = format!(
                "{why}: packets above the link MTU are dropped (expect retries, then errors)"
            );
            self.add(rec, "path_mtu", d);
        }
    }

    /// A QP moved to ERR: by its owner's modify, or by the driver (seen in the QP table).
    pub fn moved_to_err(
        &mut self,
        rec: &Record,
        key: &QpKey,
        from: Option<QpState>,
        by_driver: bool,
    ) {
        let wc = self
            .first_wc
            .get(key)
            .map(|s| format!(" after an error completion {s}"));
        let d = if by_driver {
            let why = wc.unwrap_or_else(|| " (transport or protocol error)".into());
            format!(
                "QP moved {}->ERR by the driver, not by its owner{why}",
                from.map_or("?", |s| s.name())
            )
        } else {
            format!(
                "QP moved to ERR by its owner (modify){}",
                wc.unwrap_or_default()
            )
        };
        self.add(rec, "qp_err", d);
    }

    /// An error completion: the first per (QP, status) is an anomaly; the first error of a QP
    /// (not a flush, unless only flushes came) is kept as the cause of its ERR.
    pub fn wc_error(&mut self, rec: &Record, w: &WcError) {
        let first = self
            .first_wc
            .entry(w.qp.clone())
            .or_insert_with(|| w.status.clone());
        if first == "WR_FLUSH_ERR" {
            *first = w.status.clone();
        }
        if self.wc_reported.insert((w.qp.clone(), w.status.clone())) {
            let d = format!(
                "completion {} on CQ#{}{}",
                w.status,
                w.cqn,
                wc_status_hint(&w.status)
            );
            self.add(rec, "wc_error", d);
        }
    }

    pub fn async_event(&mut self, rec: &Record, a: &AsyncEvent) {
        let bad = matches!(
            a.event.as_str(),
            "CQ_ERR"
                | "QP_FATAL"
                | "QP_REQ_ERR"
                | "QP_ACCESS_ERR"
                | "PATH_MIG_ERR"
                | "SRQ_ERR"
                | "DEVICE_FATAL"
                | "PORT_ERR"
                | "WQ_FATAL"
                | "DEVICE_UNREGISTER"
        );
        if !bad {
            return;
        }
        let what = match &a.element {
            AsyncElement::Qp(k) => format!("QP {:#x}", k.qpn),
            AsyncElement::Cq(id) => format!("CQ#{id} (overrun?)"),
            AsyncElement::Srq(id) => format!("SRQ#{id}"),
            AsyncElement::Port(_) if a.source == "ib_core" => {
                "(the device is going away: rdma link delete or driver removal)".to_string()
            }
            AsyncElement::Port(p) => format!("port {p}"),
        };
        self.add(
            rec,
            "async_error",
            format!("{} on {} {what}", a.event, a.dev),
        );
    }

    pub fn cm(&mut self, rec: &Record, c: &CmEvent) {
        let bad = matches!(
            c.event.as_str(),
            "ADDR_ERROR"
                | "ROUTE_ERROR"
                | "CONNECT_ERROR"
                | "UNREACHABLE"
                | "REJECTED"
                | "DISCONNECTED"
                | "DEVICE_REMOVAL"
        );
        if bad {
            let peer = c.dst.map(|d| format!(" to {d}")).unwrap_or_default();
            self.add(
                rec,
                "cm",
                format!("CM {}{peer} status {}", c.event, c.status),
            );
        }
    }

    /// A port sample: removals and ports leaving ACTIVE; remembered for MTU checks.
    pub fn port(&mut self, rec: &Record, p: &PortInfo) {
        let key = (p.dev.clone(), p.port);
        let was_active = self.ports.get(&key).is_some_and(|o| o.state == "ACTIVE");
        if p.state == "REMOVED" {
            let d = format!("device {} removed (port {} gone)", p.dev, p.port);
            self.add(rec, "device_removed", d);
        } else if was_active && p.state != "ACTIVE" {
            let d = format!("port {}/{} went {} (was ACTIVE)", p.dev, p.port, p.state);
            self.add(rec, "port_down", d);
        }
        self.ports.insert(key, p.clone());
    }

    pub fn lost(&mut self, rec: &Record, count: u64, cpu: Option<u32>) {
        let on = cpu.map(|c| format!(" on CPU {c}")).unwrap_or_default();
        self.add(
            rec,
            "lost_events",
            format!("{count} events dropped by the kernel{on} (ring buffer full)"),
        );
    }

    /// A QP destroyed after sitting in INIT or RTR longer than [`super::qps::STUCK_NS`].
    pub fn stuck_at_destroy(&mut self, rec: &Record, s: QpState, open_ns: u64) {
        if matches!(s, QpState::Init | QpState::Rtr) && open_ns > super::qps::STUCK_NS {
            let d = format!(
                "QP spent {:.1} s in {s} before it was destroyed",
                open_ns as f64 / 1e9
            );
            self.add(rec, "qp_stuck", d);
        }
    }

    /// Why a path MTU cannot work on `dev`: above the active MTU of every known port.
    fn mtu_too_big(&self, dev: &str, path_mtu: Option<u32>) -> Option<String> {
        let want = mtu_bytes(path_mtu?);
        let best = self
            .ports
            .values()
            .filter(|p| p.dev == dev && p.active_mtu.is_some())
            .max_by_key(|p| p.active_mtu)?;
        let active = best.active_mtu?;
        if want <= active {
            return None;
        }
        let under = match (best.netdev.as_str(), best.netdev_mtu) {
            ("", _) => String::new(),
            (n, Some(m)) => format!(", from netdev {n} MTU {m}"),
            (n, None) => format!(", netdev {n}"),
        };
        Some(format!(
            "path MTU {want} above the active MTU of {dev} port {} ({active}{under})",
            best.port
        ))
    }
}
