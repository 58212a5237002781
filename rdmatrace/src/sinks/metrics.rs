//! Prometheus metrics (`rdmatrace serve`): counters updated from every record, gauges
//! (verdicts, QPs by state) from the analysis once a second. The metric names and labels are
//! an interface (docs/metrics.md). Cardinality is bounded: no per-QP labels, a process's series
//! are dropped a grace period after it exits, and `max_series` caps the per-process series
//! (what it refused is counted in `rdmatrace_series_dropped_total`).

use std::{collections::BTreeMap, io};

use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{counter::Counter, family::Family, gauge::Gauge},
    registry::Registry,
};
use rustc_hash::{FxHashMap, FxHashSet};

use crate::{
    correlate::{
        analysis::{Analyzer, RETRANSMIT_COUNTERS},
        Correlator,
    },
    event::{Body, QpKey, Record},
    sinks::Sink,
};

/// Who a per-process series is about.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProcLabels {
    pub pid: String,
    pub comm: String,
    pub container: String,
    pub pod_uid: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct VerdictLabels {
    #[prometheus(flatten)]
    pub proc: ProcLabels,
    pub verdict: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RdmaBytesLabels {
    #[prometheus(flatten)]
    pub proc: ProcLabels,
    pub dev: String,
    pub direction: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TcpBytesLabels {
    #[prometheus(flatten)]
    pub proc: ProcLabels,
    pub direction: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RetransmitLabels {
    #[prometheus(flatten)]
    pub proc: ProcLabels,
    pub dev: String,
    pub transport: String,
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QpsLabels {
    #[prometheus(flatten)]
    pub proc: ProcLabels,
    pub dev: String,
    pub state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AnomalyLabels {
    pub kind: String,
    #[prometheus(flatten)]
    pub proc: ProcLabels,
    pub dev: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TypeLabels {
    pub r#type: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    pub kind: String,
}

/// Incident kinds of the flight recorder (the `kind` label of `rdmatrace_incidents_total`,
/// and the end of incident file names).
pub const INCIDENT_KINDS: [&str; 5] = [
    "qp_err",
    "async_fatal",
    "port_down",
    "device_removed",
    "retransmit_burst",
];

/// One per-process series, to drop it when its process is gone.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
enum Series {
    Verdict(VerdictLabels),
    Rdma(RdmaBytesLabels),
    Tcp(TcpBytesLabels),
    Retx(RetransmitLabels),
    Qps(QpsLabels),
    Anomaly(AnomalyLabels),
}

/// The metric families (cheap handles: clones share the values).
#[derive(Clone, Default)]
pub struct Families {
    pub verdict: Family<VerdictLabels, Gauge>,
    pub rdma_bytes: Family<RdmaBytesLabels, Counter>,
    pub tcp_bytes: Family<TcpBytesLabels, Counter>,
    pub retransmits: Family<RetransmitLabels, Counter>,
    pub qps: Family<QpsLabels, Gauge>,
    pub anomalies: Family<AnomalyLabels, Counter>,
    pub events: Family<TypeLabels, Counter>,
    pub lost: Counter,
    pub incidents: Family<KindLabels, Counter>,
    pub series_dropped: Counter,
    pub up: Gauge,
    pub processes: Gauge,
}

impl Families {
    /// The families and a registry that encodes them.
    pub fn new() -> (Families, Registry) {
        let f = Families::default();
        let mut r = Registry::default();
        r.register(
            "rdmatrace_process_verdict",
            "Current verdict of each traced process (1 on the series of its verdict): rdma, tcp_fallback, tcp, mixed, idle or unknown",
            f.verdict.clone(),
        );
        r.register(
            "rdmatrace_rdma_bytes",
            "Bytes a process's QPs sent (tx) and received (rx) on an RDMA device",
            f.rdma_bytes.clone(),
        );
        r.register(
            "rdmatrace_tcp_bytes",
            "Bytes a process sent (tx) and received (rx) over TCP",
            f.tcp_bytes.clone(),
        );
        r.register(
            "rdmatrace_retransmits",
            "Retransmissions blamed on a process (its QP or socket), by device, transport and reason",
            f.retransmits.clone(),
        );
        r.register(
            "rdmatrace_qps",
            "Live QPs of a process by device and state",
            f.qps.clone(),
        );
        r.register(
            "rdmatrace_anomalies",
            "Anomalies found (failed modifies, QPs moved to ERR, error completions, port down...), by kind",
            f.anomalies.clone(),
        );
        r.register(
            "rdmatrace_events",
            "Records seen, by type",
            f.events.clone(),
        );
        r.register(
            "rdmatrace_lost_events",
            "Events the kernel dropped because the ring buffer was full",
            f.lost.clone(),
        );
        r.register(
            "rdmatrace_incidents",
            "Incident files the flight recorder wrote, by the kind of anomaly that triggered them",
            f.incidents.clone(),
        );
        // Every kind is there from the start (at 0), so dashboards and alerts find them.
        for k in INCIDENT_KINDS {
            let _ = f.incidents.get_or_create(&KindLabels { kind: k.into() });
        }
        r.register(
            "rdmatrace_series_dropped",
            "Per-process series not created because --max-series was reached",
            f.series_dropped.clone(),
        );
        r.register(
            "rdmatrace_up",
            "1 once the probes are attached and records flow",
            f.up.clone(),
        );
        r.register(
            "rdmatrace_processes",
            "Processes with per-process series",
            f.processes.clone(),
        );
        (f, r)
    }
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

/// Anomalies kept in memory for their context (all are counted).
const KEEP_ANOMALIES: usize = 1000;

#[derive(Default)]
struct ProcEntry {
    labels: Option<ProcLabels>,
    series: FxHashSet<Series>,
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
    /// QP gauge series set at the last refresh.
    qp_series: FxHashSet<QpsLabels>,
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
            qp_series: FxHashSet::default(),
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
        }
    }

    /// Verdicts and QP gauges from the analysis, then drops what is gone.
    pub fn refresh(&mut self, state: &Correlator) {
        let verdicts = self.analyzer.verdicts();
        for p in &verdicts {
            let proc = self.labels(p.stats.pid, &p.stats.comm, state);
            let want = VerdictLabels {
                proc,
                verdict: p.verdict.name().into(),
            };
            let old: Vec<VerdictLabels> = self
                .procs
                .get(&p.stats.pid)
                .into_iter()
                .flat_map(|e| e.series.iter())
                .filter_map(|s| match s {
                    Series::Verdict(v) if *v != want => Some(v.clone()),
                    _ => None,
                })
                .collect();
            for v in old {
                self.f.verdict.remove(&v);
                self.drop_series(p.stats.pid, &Series::Verdict(v));
            }
            if self.admit(p.stats.pid, Series::Verdict(want.clone())) {
                self.f.verdict.get_or_create(&want).set(1);
            }
        }
        let mut counts: BTreeMap<(u32, String, String), i64> = BTreeMap::new();
        for q in self.analyzer.live_qps() {
            let state_name = q.state.map_or("unknown", |s| s.name());
            *counts
                .entry((q.owner_pid, q.key.dev.to_string(), state_name.to_string()))
                .or_default() += 1;
        }
        let mut now = FxHashSet::default();
        for ((pid, dev, st), n) in counts {
            let proc = self.labels(pid, "", state);
            let l = QpsLabels {
                proc,
                dev,
                state: st,
            };
            if self.admit(pid, Series::Qps(l.clone())) {
                self.f.qps.get_or_create(&l).set(n);
                now.insert(l);
            }
        }
        for gone in self.qp_series.difference(&now).cloned().collect::<Vec<_>>() {
            self.f.qps.remove(&gone);
            if let Ok(pid) = gone.proc.pid.parse::<u32>() {
                self.drop_series(pid, &Series::Qps(gone));
            }
        }
        self.qp_series = now;
        self.prune();
        self.f.processes.set(self.procs.len() as i64);
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
                            self.qp_series.remove(&l);
                            self.f.qps.remove(&l)
                        }
                        Series::Anomaly(l) => self.f.anomalies.remove(&l),
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
