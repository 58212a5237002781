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

use std::collections::BTreeSet;

use super::{
    nldev::{self, Device, QpRow},
    NetlinkError, RdmaNetlink,
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

/// What we changed, to undo it.
pub struct Binder {
    ports: Vec<(Device, u32, PortPlan)>,
    /// (device index, port, counter id, QPN) bound by us in manual mode.
    manual: BTreeSet<(u32, u32, u32, u32)>,
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
        let mut b = Binder {
            ports: Vec::new(),
            manual: BTreeSet::new(),
            notes: Vec::new(),
        };
        for dev in nl.devices()? {
            let rows = nl.qps(&dev).unwrap_or_default();
            for port in 1..=dev.ports.max(1) {
                let plan = match nl.counter_mode(&dev, port) {
                    Ok((nldev::COUNTER_MODE_NONE, _)) => {
                        let existing: Vec<&QpRow> = rows
                            .iter()
                            .filter(|r| bindable(r) && (r.port == port || r.port == 0))
                            .collect();
                        if existing.is_empty() {
                            match nl.set_auto_mode(
                                &dev,
                                port,
                                nldev::COUNTER_MASK_PID | nldev::COUNTER_MASK_QP_TYPE,
                            ) {
                                Ok(()) => {
                                    b.notes.push(format!(
                                        "bound per-QP counters on {}/{port}: auto mode, one \
                                         counter per process and QP type (undone at exit)",
                                        dev.name
                                    ));
                                    PortPlan::Auto
                                }
                                Err(e) => {
                                    b.notes.push(format!(
                                        "per-QP counters off on {}/{port}: {e}",
                                        dev.name
                                    ));
                                    PortPlan::LeftAlone
                                }
                            }
                        } else {
                            b.notes.push(format!(
                                "binding per-QP counters on {}/{port}: manual mode, one counter \
                                 per QP ({} existing QPs; undone at exit)",
                                dev.name,
                                existing.len()
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

    /// Binds QPs (rows of the QP table) on ports in manual mode that are not bound yet.
    pub fn bind_new(&mut self, nl: &mut RdmaNetlink, rows: &[QpRow]) {
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
            if self
                .manual
                .iter()
                .any(|&(d, p, _, q)| d == dev.index && p == port && q == row.lqpn)
            {
                continue;
            }
            match nl.bind_manual(&dev, port, row.lqpn) {
                Ok(id) => {
                    self.manual.insert((dev.index, port, id, row.lqpn));
                }
                // The QP may be gone already, or bound by someone else: note once, go on.
                Err(e) => self.notes.push(format!("cannot bind a counter: {e}")),
            }
        }
    }

    /// Undoes everything `start` and `bind_new` did; returns what could not be undone.
    pub fn finish(self, nl: &mut RdmaNetlink) -> Vec<String> {
        let mut problems = Vec::new();
        for (dev, port, plan) in &self.ports {
            if *plan != PortPlan::Auto {
                continue;
            }
            if let Err(e) = nl.set_auto_mode(dev, *port, 0) {
                problems.push(format!(
                    "cannot turn auto mode off on {}/{port}: {e}",
                    dev.name
                ));
                continue;
            }
            // Counters auto mode bound stay until unbound (the port is now in manual mode).
            for c in nl.qp_counters(dev).unwrap_or_default() {
                if c.port != *port {
                    continue;
                }
                for qpn in c.qpns {
                    if let Err(e) = nl.unbind(dev, *port, c.id, qpn) {
                        if e.errno() != Some(libc::ENOENT) {
                            problems.push(e.to_string());
                        }
                    }
                }
            }
        }
        for &(index, port, id, qpn) in &self.manual {
            let Some((dev, ..)) = self.ports.iter().find(|(d, ..)| d.index == index) else {
                continue;
            };
            if let Err(e) = nl.unbind(dev, port, id, qpn) {
                // A destroyed QP took its binding with it.
                if e.errno() != Some(libc::ENOENT) {
                    problems.push(e.to_string());
                }
            }
        }
        problems
    }
}
