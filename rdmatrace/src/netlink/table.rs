//! Turns successive snapshots of the QP resource table and of the per-QP counters into change
//! records: every row once at the start (QPs older than the trace), then rows that appeared,
//! changed or went; counters as deltas. Pure: snapshots in, records out.

use std::collections::HashMap;

use rdmatrace_common::{
    event::{
        qp_res_change, EventKind, QpCounterSample, QpIdent, QpResSample, COUNTER_NAME_LEN,
        COUNTER_QPNS,
    },
    limits::{COMM_LEN, DEV_NAME_LEN},
};

use super::nldev::{QpCounter, QpRow};
use crate::wire::{fixed, header};

/// The part of a row whose change is worth a record (PSNs move with traffic: not compared).
fn same_row(a: &QpRow, b: &QpRow) -> bool {
    (a.state, a.rqpn, a.pid, a.port) == (b.state, b.rqpn, b.pid, b.port)
}

fn res_sample(row: &QpRow, change: u32, ts_ns: u64, comm: &str) -> QpResSample {
    QpResSample {
        header: header(EventKind::QpRes, ts_ns, row.pid, fixed::<COMM_LEN>(comm)),
        qp: QpIdent {
            dev: fixed::<DEV_NAME_LEN>(&row.dev),
            qpn: row.lqpn,
            qp_type: u32::from(row.qp_type),
        },
        port: row.port,
        rqpn: row.rqpn.unwrap_or(u32::MAX),
        sq_psn: row.sq_psn,
        rq_psn: row.rq_psn.unwrap_or(u32::MAX),
        state: u32::from(row.state),
        change,
    }
}

/// The QP table as last seen, keyed by (device, QPN).
#[derive(Default)]
pub struct QpTable {
    rows: HashMap<(String, u32), QpRow>,
    primed: bool,
}

impl QpTable {
    /// Changes between the previous snapshot and `now`; `comm` names a row's owner (the
    /// kernel's name for kernel QPs is in the row itself).
    /// QPs in the table.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    pub fn diff(
        &mut self,
        now: Vec<QpRow>,
        ts_ns: u64,
        comm: &mut impl FnMut(&QpRow) -> String,
    ) -> Vec<QpResSample> {
        let mut out = Vec::new();
        let mut next = HashMap::with_capacity(now.len());
        for row in now {
            let key = (row.dev.clone(), row.lqpn);
            let change = match self.rows.remove(&key) {
                None if !self.primed => Some(qp_res_change::PRESENT),
                None => Some(qp_res_change::NEW),
                Some(old) if !same_row(&old, &row) => Some(qp_res_change::CHANGED),
                Some(_) => None,
            };
            if let Some(change) = change {
                out.push(res_sample(&row, change, ts_ns, &comm(&row)));
            }
            next.insert(key, row);
        }
        let mut gone: Vec<QpRow> = self.rows.drain().map(|(_, r)| r).collect();
        gone.sort_by(|a, b| (&a.dev, a.lqpn).cmp(&(&b.dev, b.lqpn)));
        for row in gone {
            out.push(res_sample(&row, qp_res_change::GONE, ts_ns, &comm(&row)));
        }
        self.rows = next;
        self.primed = true;
        out
    }
}

/// Per-QP counter values as last seen, keyed by (device, port, counter id, name).
#[derive(Default)]
pub struct CounterTable {
    values: HashMap<(String, u32, u32, String), u64>,
}

impl CounterTable {
    /// Counters that moved since the previous snapshot (a counter seen for the first time is
    /// reported from zero: it was allocated after the previous snapshot, or at our bind).
    pub fn diff(&mut self, now: &[QpCounter], ts_ns: u64) -> Vec<QpCounterSample> {
        let mut out = Vec::new();
        let mut next = HashMap::new();
        for c in now {
            let mut qpns = [0u32; COUNTER_QPNS];
            for (slot, q) in qpns.iter_mut().zip(&c.qpns) {
                *slot = *q;
            }
            for (name, value) in &c.values {
                let key = (c.dev.clone(), c.port, c.id, name.clone());
                let prev = self.values.get(&key).copied().unwrap_or(0);
                if *value != prev {
                    out.push(QpCounterSample {
                        header: header(EventKind::QpCounter, ts_ns, c.pid, [0; COMM_LEN]),
                        dev: fixed::<DEV_NAME_LEN>(&c.dev),
                        port: c.port,
                        counter_id: c.id,
                        qpns,
                        nqpns: c.qpns.len() as u32,
                        _pad: 0,
                        name: fixed::<COUNTER_NAME_LEN>(name),
                        value: *value,
                        delta: value.wrapping_sub(prev),
                    });
                }
                next.insert(key, *value);
            }
        }
        self.values = next;
        out
    }
}
