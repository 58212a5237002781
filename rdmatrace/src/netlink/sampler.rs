//! The netlink part of the periodic sampler: the QP resource table and the per-QP counters,
//! as change records of the ring-buffer wire format (see [`super::table`]).

use super::{
    binding::Binder,
    nldev::QpRow,
    table::{CounterTable, QpTable},
    NetlinkError, RdmaNetlink,
};
use crate::wire::pod_bytes;

pub struct NetlinkSampler {
    nl: RdmaNetlink,
    qps: QpTable,
    counters: CounterTable,
    binder: Option<Binder>,
    /// Problems since the last [`NetlinkSampler::take_warnings`], each said once.
    warnings: Vec<String>,
    said: std::collections::HashSet<String>,
    /// Monotonic ns before which [`NetlinkSampler::poll`] skips: a dump costs time that grows
    /// with the QPs (the kernel walks its table once per netlink message), so the sampler keeps
    /// to a budget of [`DUTY`] of one core.
    next_ns: u64,
    /// The interval said last (ms), to say it again only when it changes a lot.
    said_interval_ms: u64,
}

/// The share of a core the QP-table sampler may take: polls are spaced at least
/// 1 / DUTY times the last dump's duration apart.
pub const DUTY: f64 = 0.1;

fn comm_of(row: &QpRow) -> String {
    if row.pid == 0 {
        return row.kern_name.clone();
    }
    std::fs::read_to_string(format!("/proc/{}/comm", row.pid))
        .map(|s| s.trim_end().to_string())
        .unwrap_or_default()
}

impl NetlinkSampler {
    /// Opens the socket; with `bind`, binds per-QP counters (announced in
    /// [`NetlinkSampler::take_warnings`], undone by [`NetlinkSampler::finish`]).
    ///
    /// First, counter bindings left by a run that could not undo them (killed with -9) are
    /// undone, and said so in the warnings.
    pub fn open(bind: bool) -> Result<NetlinkSampler, NetlinkError> {
        let mut nl = RdmaNetlink::open()?;
        let recovered =
            super::recover::recover_dead_runs(&mut nl, std::path::Path::new(super::journal::DIR));
        let binder = if bind {
            Some(Binder::start(&mut nl)?)
        } else {
            None
        };
        let mut s = NetlinkSampler {
            nl,
            qps: QpTable::default(),
            counters: CounterTable::default(),
            binder,
            warnings: recovered,
            said: Default::default(),
            next_ns: 0,
            said_interval_ms: 0,
        };
        if let Some(b) = &mut s.binder {
            let notes = std::mem::take(&mut b.notes);
            s.warnings.extend(notes);
        }
        Ok(s)
    }

    fn warn(&mut self, w: String) {
        if self.said.insert(w.clone()) {
            self.warnings.push(w);
        }
    }

    pub fn take_warnings(&mut self) -> Vec<String> {
        std::mem::take(&mut self.warnings)
    }

    /// Records for what changed since the previous call.
    pub fn poll(&mut self, ts_ns: u64) -> Vec<Vec<u8>> {
        if ts_ns < self.next_ns {
            return Vec::new();
        }
        let started = std::time::Instant::now();
        let (out, qps) = self.poll_now(ts_ns);
        let took = started.elapsed();
        let gap_ns = (took.as_nanos() as f64 / DUTY) as u64;
        self.next_ns = ts_ns.saturating_add(gap_ns);
        let gap_ms = gap_ns / 1_000_000;
        // Said when the spacing first exceeds the once-a-second tick, then when it doubles.
        if gap_ms > 1_000 && gap_ms > self.said_interval_ms * 2 {
            self.said_interval_ms = gap_ms;
            self.warnings.push(format!(
                "QP table: {qps} QPs took {:.0} ms to read; sampled every {:.1} s from now on \
                 (kept under {:.0} % of a core; probes still see every QP change)",
                took.as_secs_f64() * 1e3,
                gap_ms as f64 / 1e3,
                DUTY * 100.0
            ));
        }
        out
    }

    /// [`NetlinkSampler::poll`] now, whatever the budget (the last sample of a trace); returns
    /// the records and the QPs the table holds.
    pub fn poll_now(&mut self, ts_ns: u64) -> (Vec<Vec<u8>>, usize) {
        let mut out = Vec::new();
        let devices = match self.nl.devices() {
            Ok(d) => d,
            Err(e) => {
                self.warn(format!("QP table not sampled: {e}"));
                return (out, 0);
            }
        };
        let mut rows = Vec::new();
        let mut counters = Vec::new();
        for dev in &devices {
            match self.nl.qps(dev) {
                Ok(r) => rows.extend(r),
                // A device removed between the two calls is not a problem.
                Err(e) if e.errno() == Some(libc::ENODEV) => {}
                Err(e) => self.warn(format!("QP table of {} not sampled: {e}", dev.name)),
            }
            match self.nl.qp_counters(dev) {
                Ok(c) => counters.extend(c),
                Err(e) if matches!(e.errno(), Some(libc::ENODEV | libc::EOPNOTSUPP)) => {}
                Err(e) => self.warn(format!("per-QP counters of {} not read: {e}", dev.name)),
            }
        }
        if let Some(b) = &mut self.binder {
            b.bind_new(&mut self.nl, &rows);
            let notes = std::mem::take(&mut b.notes);
            for n in notes {
                self.warn(n);
            }
        }
        for s in self.qps.diff(rows, ts_ns, &mut comm_of) {
            out.push(pod_bytes(&s));
        }
        for s in self.counters.diff(&counters, ts_ns) {
            out.push(pod_bytes(&s));
        }
        let qps = self.qps.len();
        (out, qps)
    }

    /// Undoes any binding; returns what could not be undone.
    pub fn finish(mut self) -> Vec<String> {
        match self.binder.take() {
            Some(b) => b.finish(&mut self.nl),
            None => Vec::new(),
        }
    }
}

impl Drop for NetlinkSampler {
    /// A command that ends by an error (a `?` after the sampler was made) never calls
    /// [`NetlinkSampler::finish`]: undo here, and say what could not be undone.
    fn drop(&mut self) {
        if let Some(b) = self.binder.take() {
            for p in b.finish(&mut self.nl) {
                eprintln!("rdmatrace: {p}");
            }
        }
    }
}
