//! The metric families of `rdmatrace serve` and their label sets: names, help texts and labels
//! are an interface (docs/metrics.md).

use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{counter::Counter, family::Family, gauge::Gauge},
    registry::Registry,
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

/// One of rdmatrace's eBPF programs, by name.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProgramLabels {
    pub program: String,
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
    /// Same labels as anomalies: kind, process, device.
    pub diagnoses: Family<AnomalyLabels, Counter>,
    pub events: Family<TypeLabels, Counter>,
    pub lost: Counter,
    pub incidents: Family<KindLabels, Counter>,
    pub series_dropped: Counter,
    /// Runs of each eBPF program the kernel skipped (live only; read from the kernel).
    pub missed_runs: Family<ProgramLabels, Counter>,
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
            "rdmatrace_diagnoses",
            "Faults named with their cause (docs/diagnosis.md), by kind, process and device, counted when found",
            f.diagnoses.clone(),
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
            "rdmatrace_program_runs_missed",
            "Runs of rdmatrace's eBPF programs the kernel skipped (hit while a BPF program or probe handler was already running on that CPU), by program: packets or calls missing from the traffic and byte totals, or events missing",
            f.missed_runs.clone(),
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
