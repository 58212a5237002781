//! Per-QP statistic counters, bound only on request (`--bind-qp-counters`) and unbound at exit,
//! so the host is left as it was.
//!
//! The kernel allows one of two modes per port (drivers/infiniband/core/counters.c): *auto*
//! (each new QP gets a counter shared by QPs of the same process and type; refused with EBUSY
//! while any counter is bound) or *manual* (a QP is bound by number; refused in auto mode).
//! So: a port with no user QP yet goes to auto mode (exact from a QP's first packet); a port
//! that already has QPs gets each of them bound manually, and QPs that appear later are bound
//! manually as the QP table shows them. A port whose mode someone else set is left alone (its
//! counters are still read).
//!
//! Every change is undone, whatever the way out: the end of the live loop (its end, SIGINT,
//! SIGTERM, SIGHUP) calls [`Binder::finish`]; an error return drops the sampler, whose `Drop`
//! does the same; a panic (the build aborts) runs the hook of [`recover::undo_on_panic`]; and a
//! run that gets no chance at all (SIGKILL, or a signal before the live loop watches signals)
//! leaves its [`journal`] under `/run/rdmatrace`, undone by the next run.

use std::path::Path;

use super::{
    journal::{self, Bound, Change, JournalFile, PortChange, PortOutcome},
    nldev::{self, Device, QpRow},
    recover, NetlinkError, RdmaNetlink,
};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PortPlan {
    /// We set auto mode; undo by turning it off and unbinding what it bound.
    Auto,
    /// We bind QPs one by one; undo by unbinding them.
    Manual,
    /// Configured by someone else (or unsupported): only read.
    LeftAlone,
}

/// What we changed, to undo it: every change is written to the journal (under
/// [`journal::DIR`]) before it is made, so a run that dies without [`Binder::finish`] is undone
/// by the next one.
pub struct Binder {
    ports: Vec<(Device, u32, PortPlan)>,
    /// `None`: no journal could be kept, so nothing is bound.
    journal: Option<JournalFile>,
    /// Announcements and refusals, for the user.
    pub notes: Vec<String>,
}

/// A user QP worth a counter: owned by a process, not a kernel consumer, past RESET.
fn bindable(row: &QpRow) -> bool {
    row.pid != 0 && row.state != 0
}

impl Binder {
    /// Decides and applies the plan for every port of every device.
    pub fn start(nl: &mut RdmaNetlink) -> Result<Binder, NetlinkError> {
        Binder::start_in(nl, Path::new(journal::DIR))
    }

    /// [`Binder::start`] with the journal in `dir`.
    fn start_in(nl: &mut RdmaNetlink, dir: &Path) -> Result<Binder, NetlinkError> {
        let mut b = Binder {
            ports: Vec::new(),
            journal: None,
            notes: Vec::new(),
        };
        let devices = nl.devices()?;
        match JournalFile::for_this_process(dir) {
            Ok(j) => b.journal = Some(j),
            Err(e) => {
                b.notes.push(format!(
                    "per-QP counters not bound: no undo journal ({e}); without it a run killed \
                     with -9 would leave them bound"
                ));
                return Ok(b);
            }
        }
        recover::undo_on_panic(dir.to_path_buf());
        for dev in devices {
            let rows = nl.qps(&dev).unwrap_or_default();
            for port in 1..=dev.ports.max(1) {
                let plan = match nl.counter_mode(&dev, port) {
                    Ok((nldev::COUNTER_MODE_NONE, prev_mask)) => {
                        let existing = rows
                            .iter()
                            .filter(|r| bindable(r) && (r.port == port || r.port == 0))
                            .count();
                        if existing == 0 {
                            b.set_auto(nl, &dev, port, prev_mask)
                        } else {
                            b.notes.push(format!(
                                "binding per-QP counters on {}/{port}: manual mode, one counter \
                                 per QP ({existing} existing QPs; undone at exit)",
                                dev.name
                            ));
                            PortPlan::Manual
                        }
                    }
                    Ok((mode, mask)) => {
                        b.notes.push(format!(
                            "per-QP counters on {}/{port} already configured (mode {mode}, mask \
                             {mask:#x}): left as they are, read only",
                            dev.name
                        ));
                        PortPlan::LeftAlone
                    }
                    Err(e) => {
                        b.notes
                            .push(format!("per-QP counters off on {}/{port}: {e}", dev.name));
                        PortPlan::LeftAlone
                    }
                };
                b.ports.push((dev.clone(), port, plan));
            }
            let manual_rows: Vec<QpRow> = rows.into_iter().filter(bindable).collect();
            b.bind_new(nl, &manual_rows);
        }
        Ok(b)
    }

    /// Auto mode on a port in no mode: journaled first, then set.
    fn set_auto(
        &mut self,
        nl: &mut RdmaNetlink,
        dev: &Device,
        port: u32,
        prev_mask: u32,
    ) -> PortPlan {
        let Some(jf) = self.journal.as_mut() else {
            return PortPlan::LeftAlone;
        };
        let mask = nldev::COUNTER_MASK_PID | nldev::COUNTER_MASK_QP_TYPE;
        jf.journal.ports.push(PortChange {
            dev: dev.name.clone(),
            dev_index: dev.index,
            port,
            prev_mode: nldev::COUNTER_MODE_NONE,
            prev_mask,
            change: Change::Auto { mask },
        });
        if let Err(e) = jf.save() {
            jf.journal.ports.pop();
            self.notes
                .push(format!("per-QP counters off on {}/{port}: {e}", dev.name));
            return PortPlan::LeftAlone;
        }
        match nl.set_auto_mode(dev, port, mask) {
            Ok(()) => {
                self.notes.push(format!(
                    "bound per-QP counters on {}/{port}: auto mode, one counter per process and \
                     QP type (undone at exit)",
                    dev.name
                ));
                PortPlan::Auto
            }
            Err(e) => {
                jf.journal.ports.pop();
                // A stale entry would only be found already off by the undo.
                let _ = jf.save();
                self.notes
                    .push(format!("per-QP counters off on {}/{port}: {e}", dev.name));
                PortPlan::LeftAlone
            }
        }
    }

    /// Binds QPs (rows of the QP table) on ports in manual mode that are not bound yet; each
    /// bind is journaled before it is asked for.
    pub fn bind_new(&mut self, nl: &mut RdmaNetlink, rows: &[QpRow]) {
        let Some(jf) = self.journal.as_mut() else {
            return;
        };
        for row in rows.iter().filter(|r| bindable(r)) {
            let Some((dev, port)) = self
                .ports
                .iter()
                .find(|(d, p, plan)| {
                    d.name == row.dev
                        && *plan == PortPlan::Manual
                        && (row.port == 0 || row.port == *p)
                })
                .map(|(d, p, _)| (d.clone(), *p))
            else {
                continue;
            };
            if jf.journal.has_bound(dev.index, port, row.lqpn) {
                continue;
            }
            let qpn = row.lqpn;
            jf.journal
                .push_bound(&dev.name, dev.index, port, Bound { qpn, counter: None });
            if let Err(e) = jf.save() {
                jf.journal.settle_bound(dev.index, port, qpn, None);
                self.notes.push(format!("cannot bind a counter: {e}"));
                continue;
            }
            match nl.bind_manual(&dev, port, qpn) {
                Ok(id) => {
                    jf.journal.settle_bound(dev.index, port, qpn, Some(id));
                    // Unsaved, the entry still names the QP: the undo finds its counter by QPN.
                    if let Err(e) = jf.save() {
                        self.notes.push(e.to_string());
                    }
                }
                // The QP may be gone already, or bound by someone else: note once, go on.
                Err(e) => {
                    jf.journal.settle_bound(dev.index, port, qpn, None);
                    // Unsaved, the undo finds no counter holding the QP and does nothing.
                    let _ = jf.save();
                    self.notes.push(format!("cannot bind a counter: {e}"));
                }
            }
        }
    }

    /// Undoes everything `start` and `bind_new` did and removes the journal; returns what could
    /// not be undone (the journal is then kept, for the next run to retry).
    pub fn finish(self, nl: &mut RdmaNetlink) -> Vec<String> {
        let Some(mut jf) = self.journal else {
            return Vec::new();
        };
        if !jf.written {
            return Vec::new();
        }
        let report = recover::undo(nl, &jf.journal);
        let mut out = Vec::new();
        for (pc, outcome) in &report.outcomes {
            if let PortOutcome::ChangedSince { mode, mask } = outcome {
                out.push(format!(
                    "per-QP counters on {}/{} were reconfigured by someone else while we ran \
                     (mode {mode}, mask {mask:#x}): left as they are",
                    pc.dev, pc.port
                ));
            }
        }
        if report.problems.is_empty() {
            if let Err(e) = jf.remove() {
                out.push(e.to_string());
            }
        } else {
            out.extend(report.problems);
            out.push(format!(
                "the undo journal {} is kept: the next rdmatrace run will undo the rest",
                jf.path.display()
            ));
        }
        out
    }
}
