//! Prometheus metrics (`rdmatrace serve`): counters updated from every record, gauges
//! (verdicts, QPs by state) from the analysis once a second. The metric names and labels are
//! an interface (docs/metrics.md). Cardinality is bounded: no per-QP labels, a process's series
//! are dropped a grace period after it exits, and `max_series` caps the per-process series
//! (what it refused is counted in `rdmatrace_series_dropped_total`).

use std::io;

use rustc_hash::{FxHashMap, FxHashSet};

use crate::{
    correlate::{
        analysis::{Analyzer, RETRANSMIT_COUNTERS},
        Correlator,
    },
    event::{Body, CompactString, QpKey, Record},
    sinks::Sink,
};

mod families;
pub use families::*;

/// One per-process series, to drop it when its process is gone.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
enum Series {
    Verdict(VerdictLabels),
    Rdma(RdmaBytesLabels),
    Tcp(TcpBytesLabels),
    Retx(RetransmitLabels),
    Qps(QpsLabels),
    Anomaly(AnomalyLabels),
    Diagnosis(AnomalyLabels),
}

/// Limits of a long-running agent.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// How long a gone process's series stay.
    pub grace_ns: u64,
    /// Most per-process series.
    pub max_series: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            grace_ns: 300_000_000_000,
            max_series: 50_000,
        }
    }
}

type QpGaugeKey = (u32, CompactString, &'static str);

/// Anomalies kept in memory for their context (all are counted).
const KEEP_ANOMALIES: usize = 1000;

#[derive(Default)]
struct ProcEntry {
    labels: Option<ProcLabels>,
    series: FxHashSet<Series>,
    /// Its verdict series now.
    verdict: Option<VerdictLabels>,
    /// Monotonic ns of its exit.
    exited_ns: Option<u64>,
}

pub struct MetricsSink {
    pub f: Families,
    limits: Limits,
    analyzer: Analyzer,
    procs: FxHashMap<u32, ProcEntry>,
    series: usize,
    anomalies_seen: usize,
    /// The latest monotonic ns seen.
    now_ns: u64,
    /// QP gauges set at the last refresh: (owner, device, state) -> (series, value).
    qp_gauges: FxHashMap<QpGaugeKey, (QpsLabels, i64)>,
    refreshes: u64,
}

impl MetricsSink {
    pub fn new(f: Families, limits: Limits) -> MetricsSink {
        MetricsSink {
            f,
            limits,
            analyzer: Analyzer::new(),
            procs: FxHashMap::default(),
            series: 0,
            anomalies_seen: 0,
            now_ns: 0,
            qp_gauges: FxHashMap::default(),
            refreshes: 0,
        }
    }

    /// Per-process series now.
    pub fn series(&self) -> usize {
        self.series
    }

    /// Processes tracked now (with series or an account).
    pub fn processes(&self) -> usize {
        self.procs.len().max(self.analyzer.processes())
    }

    /// The labels of process `pid` (named `comm` when the correlator does not know better).
    fn labels(&mut self, pid: u32, comm: &str, state: &Correlator) -> ProcLabels {
        let place = state.place_of(pid);
        let comm = state.comm(pid).unwrap_or(comm).to_string();
        let fresh = ProcLabels {
            pid: if pid == 0 {
                String::new()
            } else {
                pid.to_string()
            },
            comm,
            container: place
                .and_then(|p| p.container())
                .unwrap_or_default()
                .to_string(),
            pod_uid: place
                .and_then(|p| p.pod_uid())
                .unwrap_or_default()
                .to_string(),
        };
        let e = self.procs.entry(pid).or_default();
        if e.labels.as_ref() != Some(&fresh) {
            e.labels = Some(fresh.clone());
        }
        fresh
    }

    /// Whether `s` (of process `pid`) may exist: it does, or the cap allows one more.
    fn admit(&mut self, pid: u32, s: Series) -> bool {
        let e = self.procs.entry(pid).or_default();
        if e.series.contains(&s) {
            return true;
        }
        if self.series >= self.limits.max_series {
            self.f.series_dropped.inc();
            return false;
        }
        e.series.insert(s);
        self.series += 1;
        true
    }

    fn count(&mut self, pid: u32, comm: &str, state: &Correlator, what: Count) {
        let proc = self.labels(pid, comm, state);
        match what {
            Count::Rdma { dev, tx, rx } => {
                for (direction, n) in [("tx", tx), ("rx", rx)] {
                    let l = RdmaBytesLabels {
                        proc: proc.clone(),
                        dev: dev.to_string(),
                        direction: direction.into(),
                    };
                    if n > 0 && self.admit(pid, Series::Rdma(l.clone())) {
                        self.f.rdma_bytes.get_or_create(&l).inc_by(n);
                    }
                }
            }
            Count::Tcp { tx, rx } => {
                for (direction, n) in [("tx", tx), ("rx", rx)] {
                    let l = TcpBytesLabels {
                        proc: proc.clone(),
                        direction: direction.into(),
                    };
                    if n > 0 && self.admit(pid, Series::Tcp(l.clone())) {
                        self.f.tcp_bytes.get_or_create(&l).inc_by(n);
                    }
                }
            }
            Count::Retx {
                dev,
                transport,
                reason,
                n,
            } => {
                let l = RetransmitLabels {
                    proc,
                    dev: dev.to_string(),
                    transport: transport.into(),
                    reason: reason.into(),
                };
                if self.admit(pid, Series::Retx(l.clone())) {
                    self.f.retransmits.get_or_create(&l).inc_by(n);
                }
            }
            Count::Anomaly { kind, dev } => {
                let l = AnomalyLabels {
                    kind: kind.into(),
                    proc,
                    dev: dev.to_string(),
                };
                if self.admit(pid, Series::Anomaly(l.clone())) {
                    self.f.anomalies.get_or_create(&l).inc();
                }
            }
            Count::Diagnosis { kind, dev } => {
                let l = AnomalyLabels {
                    kind: kind.into(),
                    proc,
                    dev: dev.to_string(),
                };
                if self.admit(pid, Series::Diagnosis(l.clone())) {
                    self.f.diagnoses.get_or_create(&l).inc();
                }
            }
        }
    }

    /// Verdicts and QP gauges from the analysis, then drops what is gone. Only what changed
    /// since the last refresh is touched (an agent with thousands of processes and QPs does
    /// this once a second).
    pub fn refresh(&mut self, state: &Correlator) {
        self.refresh_verdicts(state);
        self.refresh_qps(state);
        for (pid, comm, kind, dev) in self.analyzer.fresh_diagnoses() {
            let dev = dev.as_deref().unwrap_or_default().to_string();
            self.count(pid, &comm, state, Count::Diagnosis { kind, dev: &dev });
        }
        self.prune();
        self.f.processes.set(self.procs.len() as i64);
    }

    fn refresh_verdicts(&mut self, state: &Correlator) {
        let mut changed: Vec<(u32, CompactString, &'static str)> = Vec::new();
        for (p, v) in self.analyzer.verdict_kinds() {
            let same = self
                .procs
                .get(&p.pid)
                .and_then(|e| e.verdict.as_ref())
                .is_some_and(|l| l.verdict == v.name() && current(&l.proc, p.pid, &p.comm, state));
            if !same {
                changed.push((p.pid, p.comm.clone(), v.name()));
            }
        }
        for (pid, comm, verdict) in changed {
            let want = VerdictLabels {
                proc: self.labels(pid, &comm, state),
                verdict: verdict.into(),
            };
            if let Some(old) = self.procs.get_mut(&pid).and_then(|e| e.verdict.take()) {
                self.f.verdict.remove(&old);
                self.drop_series(pid, &Series::Verdict(old));
            }
            if self.admit(pid, Series::Verdict(want.clone())) {
                self.f.verdict.get_or_create(&want).set(1);
                if let Some(e) = self.procs.get_mut(&pid) {
                    e.verdict = Some(want);
                }
            }
        }
    }

    fn refresh_qps(&mut self, state: &Correlator) {
        let mut counts: FxHashMap<QpGaugeKey, i64> = FxHashMap::default();
        for q in self.analyzer.live_qps() {
            let st = q.state.map_or("unknown", |s| s.name());
            *counts
                .entry((q.owner_pid, q.key.dev.clone(), st))
                .or_default() += 1;
        }
        let gone: Vec<QpGaugeKey> = self
            .qp_gauges
            .keys()
            .filter(|k| !counts.contains_key(*k))
            .cloned()
            .collect();
        for k in gone {
            if let Some((l, _)) = self.qp_gauges.remove(&k) {
                self.f.qps.remove(&l);
                self.drop_series(k.0, &Series::Qps(l));
            }
        }
        for (k, n) in counts {
            let (pid, dev, st) = &k;
            if let Some((l, old)) = self.qp_gauges.get_mut(&k) {
                if current(&l.proc, *pid, "", state) {
                    if *old != n {
                        *old = n;
                        self.f.qps.get_or_create(l).set(n);
                    }
                    continue;
                }
            }
            // New, or its process's labels changed: the series under its current labels.
            if let Some((l, _)) = self.qp_gauges.remove(&k) {
                self.f.qps.remove(&l);
                self.drop_series(*pid, &Series::Qps(l));
            }
            let l = QpsLabels {
                proc: self.labels(*pid, "", state),
                dev: dev.to_string(),
                state: (*st).into(),
            };
            if self.admit(*pid, Series::Qps(l.clone())) {
                self.f.qps.get_or_create(&l).set(n);
                self.qp_gauges.insert(k, (l, n));
            }
        }
    }

    fn drop_series(&mut self, pid: u32, s: &Series) {
        if let Some(e) = self.procs.get_mut(&pid) {
            if e.series.remove(s) {
                self.series -= 1;
            }
        }
    }

    /// Drops the series and accounts of processes gone longer than the grace period.
    fn prune(&mut self) {
        let cutoff = self.now_ns.saturating_sub(self.limits.grace_ns);
        let gone: FxHashSet<u32> = self
            .procs
            .iter()
            .filter(|(_, e)| e.exited_ns.is_some_and(|t| t < cutoff))
            .map(|(pid, _)| *pid)
            .collect();
        for pid in &gone {
            if let Some(e) = self.procs.remove(pid) {
                self.series -= e.series.len();
                for s in e.series {
                    match s {
                        Series::Verdict(l) => self.f.verdict.remove(&l),
                        Series::Rdma(l) => self.f.rdma_bytes.remove(&l),
                        Series::Tcp(l) => self.f.tcp_bytes.remove(&l),
                        Series::Retx(l) => self.f.retransmits.remove(&l),
                        Series::Qps(l) => {
                            self.qp_gauges.retain(|_, (g, _)| *g != l);
                            self.f.qps.remove(&l)
                        }
                        Series::Anomaly(l) => self.f.anomalies.remove(&l),
                        Series::Diagnosis(l) => self.f.diagnoses.remove(&l),
                    };
                }
            }
        }
        // The analysis is pruned when processes went, and once a minute for destroyed QPs.
        self.refreshes += 1;
        if !gone.is_empty() || self.refreshes.is_multiple_of(60) {
            self.analyzer
                .prune(|pid| gone.contains(&pid), cutoff, KEEP_ANOMALIES);
        }
    }
}

/// Whether `l` is what [`MetricsSink::labels`] gives process `pid` (named `comm` when the
/// correlator does not know better) now, without allocating.
fn current(l: &ProcLabels, pid: u32, comm: &str, state: &Correlator) -> bool {
    let place = state.place_of(pid);
    l.comm == state.comm(pid).unwrap_or(comm)
        && l.container == place.and_then(|p| p.container()).unwrap_or_default()
        && l.pod_uid == place.and_then(|p| p.pod_uid()).unwrap_or_default()
}

enum Count<'a> {
    Rdma {
        dev: &'a str,
        tx: u64,
        rx: u64,
    },
    Tcp {
        tx: u64,
        rx: u64,
    },
    Retx {
        dev: &'a str,
        transport: &'a str,
        reason: &'a str,
        n: u64,
    },
    Anomaly {
        kind: &'a str,
        dev: &'a str,
    },
    Diagnosis {
        kind: &'a str,
        dev: &'a str,
    },
}

impl Sink for MetricsSink {
    fn record(&mut self, rec: &Record, state: &Correlator) -> io::Result<()> {
        self.now_ns = self.now_ns.max(rec.ts_ns);
        self.f
            .events
            .get_or_create(&TypeLabels {
                r#type: rec.body.type_name().into(),
            })
            .inc();
        self.analyzer.push(rec, state);
        match &rec.body {
            Body::Lost { count, .. } => {
                self.f.lost.inc_by(*count);
            }
            Body::QpTraffic(t) if t.owner_pid != 0 => {
                let what = Count::Rdma {
                    dev: &t.qp.key.dev,
                    tx: t.tx_bytes,
                    rx: t.rx_bytes,
                };
                self.count(t.owner_pid, &t.owner_comm, state, what);
            }
            Body::TcpBytes(t) => {
                let what = Count::Tcp {
                    tx: t.tx_bytes,
                    rx: t.rx_bytes,
                };
                self.count(rec.pid, &rec.comm, state, what);
            }
            Body::Retransmit(r) => {
                let dev = r.qp.as_ref().map_or("", |q| q.key.dev.as_str());
                let what = Count::Retx {
                    dev,
                    transport: r.transport.name(),
                    reason: r.reason,
                    n: 1,
                };
                self.count(r.owner_pid, &r.owner_comm, state, what);
            }
            Body::QpCounter(c) if RETRANSMIT_COUNTERS.contains(&c.name.as_str()) && c.delta > 0 => {
                let owner = c.qpns.first().and_then(|q| {
                    state.owner(&QpKey {
                        dev: c.dev.clone(),
                        qpn: *q,
                    })
                });
                let (pid, comm) = match (rec.pid, owner) {
                    (0, Some((p, c))) => (p, c.to_string()),
                    (p, _) => (p, rec.comm.to_string()),
                };
                let what = Count::Retx {
                    dev: &c.dev,
                    transport: "counter",
                    reason: &c.name,
                    n: c.delta,
                };
                self.count(pid, &comm, state, what);
            }
            Body::ProcessExit { .. } => {
                self.procs.entry(rec.pid).or_default().exited_ns = Some(rec.ts_ns);
            }
            Body::ProcessExec { .. } | Body::ProcessCgroup { .. } => {
                // A reused pid is a new process: it is not gone.
                if let Some(e) = self.procs.get_mut(&rec.pid) {
                    e.exited_ns = None;
                }
            }
            _ => {}
        }
        // Anomalies are rare: nothing to copy on almost every record.
        if self.analyzer.anomalies_total() == self.anomalies_seen {
            return Ok(());
        }
        let fresh: Vec<(u32, String, &'static str, String)> = self
            .analyzer
            .anomalies_since(self.anomalies_seen)
            .iter()
            .map(|a| {
                (
                    a.pid,
                    a.comm.to_string(),
                    a.kind,
                    a.dev.as_deref().unwrap_or_default().to_string(),
                )
            })
            .collect();
        self.anomalies_seen = self.analyzer.anomalies_total();
        for (pid, comm, kind, dev) in fresh {
            self.count(pid, &comm, state, Count::Anomaly { kind, dev: &dev });
        }
        Ok(())
    }

    /// Verdicts and QP gauges once a second.
    fn tick(&mut self, state: &Correlator) -> io::Result<()> {
        self.refresh(state);
        Ok(())
    }

    /// The gauges as the records left them (a replayed recording is served as it ends).
    fn finish(&mut self, state: &Correlator) -> io::Result<()> {
        self.refresh(state);
        Ok(())
    }
}

#[cfg(test)]
mod tests;
