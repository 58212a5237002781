//! The post-mortem report (`rdmatrace report`) and verdict lines (`rdmatrace verdict`), as text
//! and as JSON: [`ReportSink`] and [`VerdictSink`] feed the analysis (`correlate::analysis`)
//! and render its report at the end.

use std::io::{self, Write};

use serde_json::{json, Value};

use crate::{
    clock::{hms_millis, rfc3339},
    correlate::{
        analysis::{Analyzer, Diagnosis, ProcReport, ProcStats, Report, Verdict},
        cgroups::Place,
        Correlator,
    },
    event::qp_type_name,
    event::Record,
    format::{gid_text, secs},
    sinks::Sink,
};

/// Where a report comes from.
#[derive(Clone, Debug, Default)]
pub struct Source {
    pub hostname: String,
    pub kernel: String,
}

/// `cgroup`, `container`, `pod_uid` of a process (each absent when not known or not there).
fn place_json(d: &mut serde_json::Map<String, Value>, place: Option<&Place>) {
    if let Some(p) = place {
        d.insert("cgroup".into(), p.path.as_str().into());
        if let Some(c) = p.container() {
            d.insert("container".into(), c.into());
        }
        if let Some(u) = p.pod_uid() {
            d.insert("pod_uid".into(), u.into());
        }
    }
}

/// `transport_env`: a process's transport variables, when any were read.
fn env_json(d: &mut serde_json::Map<String, Value>, env: &[(crate::event::CompactString, String)]) {
    if !env.is_empty() {
        let m: serde_json::Map<String, Value> = env
            .iter()
            .map(|(k, v)| (k.to_string(), Value::from(v.as_str())))
            .collect();
        d.insert("transport_env".into(), Value::Object(m));
    }
}

pub fn verdict_json(p: &ProcReport) -> Value {
    let mut d = json!({
        "pid": p.stats.pid,
        "comm": p.stats.comm,
        "verdict": p.verdict.name(),
        "evidence": p.evidence,
    });
    if let Value::Object(m) = &mut d {
        place_json(m, p.stats.place.as_deref());
        env_json(m, &p.stats.env);
    }
    json!({"type": "verdict", "data": d})
}

/// Whether any of `procs` runs in a container: then tables get a CONTAINER column.
pub fn any_container(procs: &[ProcReport]) -> bool {
    procs.iter().any(|p| short_container(p) != "-")
}

/// A process's container as `docker ps` shortens it, `-` when none.
pub fn short_container(p: &ProcReport) -> &str {
    p.stats
        .place
        .as_deref()
        .and_then(|pl| pl.placement.short_container())
        .unwrap_or("-")
}

/// The verdict table's header, with a CONTAINER column when `containers`.
pub fn verdict_header(containers: bool) -> &'static str {
    if containers {
        "PID     COMM            CONTAINER    VERDICT      EVIDENCE"
    } else {
        "PID     COMM            VERDICT      EVIDENCE"
    }
}

pub fn verdict_text(p: &ProcReport, containers: bool) -> String {
    let (mut s, indent) = if containers {
        (
            format!(
                "{:<7} {:<15} {:<12} {:<12} {}",
                p.stats.pid,
                p.stats.comm,
                short_container(p),
                p.verdict.name(),
                p.evidence.first().cloned().unwrap_or_default()
            ),
            49,
        )
    } else {
        (
            format!(
                "{:<7} {:<15} {:<12} {}",
                p.stats.pid,
                p.stats.comm,
                p.verdict.name(),
                p.evidence.first().cloned().unwrap_or_default()
            ),
            36,
        )
    };
    for e in p.evidence.iter().skip(1) {
        s += &format!("\n{:<indent$} {e}", "");
    }
    s
}

/// One verdict per container (processes outside containers: per cgroup), on the sum of its
/// processes' accounts.
pub struct GroupVerdict {
    /// The container id, else the cgroup path, else `-` (cgroup not known).
    pub key: String,
    pub place: Option<std::sync::Arc<Place>>,
    pub pids: Vec<u32>,
    pub comms: Vec<String>,
    pub verdict: Verdict,
    pub evidence: Vec<String>,
}

pub fn by_container(r: &Report, traffic_measured: bool) -> Vec<GroupVerdict> {
    let mut groups: std::collections::BTreeMap<String, (ProcStats, Vec<u32>, Vec<String>)> =
        Default::default();
    for p in &r.processes {
        let place = p.stats.place.as_deref();
        let key = match place {
            Some(pl) => pl.container().unwrap_or(&pl.path).to_string(),
            None => "-".to_string(),
        };
        let g = groups.entry(key).or_insert_with(|| {
            (
                ProcStats {
                    place: p.stats.place.clone(),
                    ..Default::default()
                },
                Vec::new(),
                Vec::new(),
            )
        });
        g.0.add(&p.stats);
        g.1.push(p.stats.pid);
        if !g.2.contains(&p.stats.comm.to_string()) {
            g.2.push(p.stats.comm.to_string());
        }
    }
    groups
        .into_iter()
        .map(|(key, (stats, pids, comms))| {
            let (verdict, evidence) =
                crate::correlate::analysis::verdict::verdict(&stats, traffic_measured);
            GroupVerdict {
                key,
                place: stats.place,
                pids,
                comms,
                verdict,
                evidence,
            }
        })
        .collect()
}

pub fn group_json(g: &GroupVerdict) -> Value {
    let mut d = json!({
        "pids": g.pids,
        "comms": g.comms,
        "verdict": g.verdict.name(),
        "evidence": g.evidence,
    });
    if let Value::Object(m) = &mut d {
        place_json(m, g.place.as_deref());
    }
    json!({"type": "container_verdict", "data": d})
}

pub const GROUP_HEADER: &str =
    "CONTAINER    POD                                  PIDS  VERDICT      EVIDENCE";

pub fn group_text(g: &GroupVerdict) -> String {
    let pl = g.place.as_deref();
    let name = match pl.and_then(|p| p.placement.short_container()) {
        Some(c) => c.to_string(),
        None => g.key.clone(),
    };
    let pod = pl.and_then(Place::pod_uid).unwrap_or("-");
    let mut s = format!(
        "{:<12} {:<36} {:<5} {:<12} {}",
        name,
        pod,
        g.pids.len(),
        g.verdict.name(),
        g.evidence.first().cloned().unwrap_or_default()
    );
    for e in g.evidence.iter().skip(1) {
        s += &format!("\n{:<69} {e}", "");
    }
    s
}

pub fn text(r: &Report, src: &Source) -> String {
    let mut o = String::new();
    let per_cpu: Vec<String> = r
        .lost_per_cpu
        .iter()
        .map(|(cpu, n)| format!("cpu{cpu} {n}"))
        .collect();
    let per_cpu = if per_cpu.is_empty() {
        String::new()
    } else {
        format!(" (per CPU: {})", per_cpu.join(", "))
    };
    o += &format!(
        "rdmatrace report: host {} (kernel {})\n{} .. {} ({}), {} events, {} lost{per_cpu}\n",
        src.hostname,
        src.kernel,
        rfc3339(r.first_wall_ns),
        rfc3339(r.last_wall_ns),
        secs(r.last_wall_ns.saturating_sub(r.first_wall_ns)),
        r.events,
        r.lost
    );
    let containers = any_container(&r.processes);
    o += &format!("\nPROCESSES\n{}\n", verdict_header(containers));
    if r.processes.is_empty() {
        o += "(no process used RDMA or TCP)\n";
    }
    for p in &r.processes {
        o += &verdict_text(p, containers);
        o.push('\n');
    }
    o += "\nQPS\nDEV    QPN      OWNER                 TYPE STATE   PEER                  TX         RETX  TIME IN STATES\n";
    for q in &r.qps {
        let peer = match (
            q.peer_qpn,
            q.peer_gid.as_ref().filter(|g| g.iter().any(|&b| b != 0)),
        ) {
            (Some(n), Some(g)) => format!("{n:#x}@{}", gid_text(g)),
            (Some(n), None) => format!("{n:#x}"),
            _ => "-".into(),
        };
        let state = match (q.destroyed_ns, q.state) {
            (Some(_), Some(s)) => format!("{s}*"),
            (None, Some(s)) => s.to_string(),
            _ => "?".into(),
        };
        let times: Vec<String> = q
            .time_in
            .iter()
            .map(|(s, ns)| format!("{s} {}", secs(*ns)))
            .collect();
        o += &format!(
            "{:<6} {:<8} {:<21} {:<4} {:<7} {:<21} {:<10} {:<5} {}\n",
            q.key.dev,
            format!("{:#x}", q.key.qpn),
            format!("{} {}", q.owner_pid, q.owner_comm),
            qp_type_name(q.qp_type),
            state,
            peer,
            q.tx_bytes,
            q.retransmits,
            times.join(", ")
        );
    }
    o += "(* = destroyed; STATE is the last state)\n";
    o += "\nRETRANSMIT BLAME (most first)\nCOUNT  PID     COMM            TRANSPORT TARGET                          REASONS\n";
    if r.blame.is_empty() {
        o += "(no retransmits seen)\n";
    }
    for b in &r.blame {
        o += &format!(
            "{:<6} {:<7} {:<15} {:<9} {:<31} {}\n",
            b.count,
            b.pid,
            b.comm,
            b.transport,
            b.target,
            b.reasons.join(", ")
        );
    }
    if !r.port_counters.is_empty() {
        o += "\nPORT COUNTERS (retransmission-related; attribution is per port only, not per QP)\n";
        for (dev, port, name, delta) in &r.port_counters {
            o += &format!("{dev} port {port} {name} +{delta}\n");
        }
    }
    o += "\nDIAGNOSES (UTC, in time order; docs/diagnosis.md)\n";
    if r.diagnoses.is_empty() {
        o += "(none)\n";
    }
    o += &diagnoses_text(&r.diagnoses);
    o += "\nANOMALIES (UTC, in time order)\n";
    if r.anomalies.is_empty() {
        o += "(none)\n";
    }
    for a in &r.anomalies {
        let at = match (&a.dev, a.qpn) {
            (Some(d), Some(q)) => format!("{d} {q:#x}"),
            (Some(d), None) => d.to_string(),
            _ => "-".into(),
        };
        o += &format!(
            "{} {:<7} {:<15} {:<14} {:<16} {}\n",
            hms_millis(a.wall_ns),
            a.pid,
            a.comm,
            at,
            a.kind,
            a.detail
        );
    }
    o
}

/// The lines of each diagnosis: a head line, then its cause, evidence, fix and consequences.
pub fn diagnoses_text(diagnoses: &[Diagnosis]) -> String {
    let mut o = String::new();
    for d in diagnoses {
        let at = match (&d.dev, d.qpn) {
            (Some(dev), Some(q)) => format!(" {dev} QP {q:#x}"),
            (Some(dev), None) => format!(" {dev}"),
            _ => String::new(),
        };
        o += &format!(
            "{} {} pid {} ({}){at}\n  cause: {}\n",
            hms_millis(d.wall_ns),
            d.kind,
            d.pid,
            d.comm,
            d.cause
        );
        for e in &d.evidence {
            o += &format!("  evidence: {e}\n");
        }
        o += &format!("  fix: {}\n", d.fix);
        for c in &d.consequences {
            o += &format!("  then: {c}\n");
        }
    }
    o
}

/// One diagnosis as JSON (`report --json`'s `diagnoses` items; `verdict --format json`'s
/// `diagnosis` lines).
pub fn diagnosis_json(d: &Diagnosis) -> Value {
    json!({
        "time": rfc3339(d.wall_ns), "kind": d.kind, "pid": d.pid, "comm": d.comm,
        "dev": d.dev, "qpn": d.qpn, "cause": d.cause, "evidence": d.evidence, "fix": d.fix,
        "consequences": d.consequences,
    })
}

fn with_place(mut v: Value, p: &ProcReport) -> Value {
    if let Value::Object(m) = &mut v {
        place_json(m, p.stats.place.as_deref());
        env_json(m, &p.stats.env);
    }
    v
}

pub fn to_json(r: &Report, src: &Source) -> Value {
    let mut v = json!({"type": "report", "data": {
        "host": src.hostname,
        "kernel": src.kernel,
        "start": rfc3339(r.first_wall_ns),
        "end": rfc3339(r.last_wall_ns),
        "events": r.events,
        "lost": r.lost,
        "processes": r.processes.iter().map(|p| with_place(json!({
            "pid": p.stats.pid,
            "comm": p.stats.comm,
            "verdict": p.verdict.name(),
            "evidence": p.evidence,
            "devices": p.stats.devices,
            "qps_created": p.stats.qps_created,
            "qps_rts": p.stats.qps_rts,
            "rdma_tx_bytes": p.stats.rdma_tx_bytes,
            "rdma_rx_bytes": p.stats.rdma_rx_bytes,
            "rdma_estimated": p.stats.rdma_estimate.map(|e| json!({
                "tx_bytes": e.tx_bytes,
                "rx_bytes": e.rx_bytes,
                "tx_packets": e.tx_packets,
                "rx_packets": e.rx_packets,
                "from_packets": e.from_packets,
                "shared": e.shared,
            })),
            "wc_errors": p.stats.wc_errors,
            "tcp_tx_bytes": p.stats.tcp_tx_bytes,
            "tcp_rx_bytes": p.stats.tcp_rx_bytes,
            "tcp_calls": p.stats.tcp_calls,
            "tcp_side_bytes": p.stats.tcp_side_bytes(),
            "retransmits_rdma": p.stats.retrans_rdma,
            "retransmits_tcp": p.stats.retrans_tcp,
            "exit_code": p.stats.exit_code,
        }), p)).collect::<Vec<_>>(),
        "qps": r.qps.iter().map(|q| json!({
            "dev": q.key.dev,
            "qpn": q.key.qpn,
            "owner_pid": q.owner_pid,
            "owner_comm": q.owner_comm,
            "qp_type": qp_type_name(q.qp_type),
            "state": q.state.map(|s| s.name()),
            "destroyed": q.destroyed_ns.is_some(),
            "peer_qpn": q.peer_qpn,
            "peer_gid": q.peer_gid.as_ref().map(gid_text),
            "tx_bytes": q.tx_bytes,
            "tx_packets": q.tx_packets,
            "rx_bytes": q.rx_bytes,
            "rx_packets": q.rx_packets,
            "retransmits": q.retransmits,
            "wc_errors": q.wc_errors,
            "failed_modifies": q.failed_modifies,
            "time_in_ns": q.time_in,
        })).collect::<Vec<_>>(),
        "blame": r.blame.iter().map(|b| json!({
            "pid": b.pid, "comm": b.comm, "transport": b.transport, "target": b.target,
            "count": b.count, "reasons": b.reasons,
        })).collect::<Vec<_>>(),
        "port_counters": r.port_counters.iter().map(|(d, p, n, v)| json!({"dev": d, "port": p, "name": n, "delta": v})).collect::<Vec<_>>(),
        "diagnoses": r.diagnoses.iter().map(diagnosis_json).collect::<Vec<_>>(),
        "anomalies": r.anomalies.iter().map(|a| json!({
            "time": rfc3339(a.wall_ns), "pid": a.pid, "comm": a.comm, "dev": a.dev, "qpn": a.qpn,
            "kind": a.kind, "detail": a.detail,
        })).collect::<Vec<_>>(),
    }});
    // Only when some CPU is known, so reports of older recordings keep their shape.
    if !r.lost_per_cpu.is_empty() {
        let per_cpu: serde_json::Map<String, Value> = r
            .lost_per_cpu
            .iter()
            .map(|(cpu, n)| (cpu.to_string(), (*n).into()))
            .collect();
        v["data"]["lost_per_cpu"] = Value::Object(per_cpu);
    }
    v
}

/// `report`: the whole report of one recording, text or JSON, written at the end.
pub struct ReportSink<W: Write> {
    out: W,
    json: bool,
    src: Source,
    analyzer: Analyzer,
}

impl<W: Write> ReportSink<W> {
    pub fn new(out: W, json: bool, src: Source) -> ReportSink<W> {
        ReportSink {
            out,
            json,
            src,
            analyzer: Analyzer::new(),
        }
    }
}

impl<W: Write> Sink for ReportSink<W> {
    fn record(&mut self, rec: &Record, state: &Correlator) -> io::Result<()> {
        self.analyzer.push(rec, state);
        Ok(())
    }

    fn finish(&mut self, _state: &Correlator) -> io::Result<()> {
        let report = std::mem::take(&mut self.analyzer).finish();
        if self.json {
            writeln!(self.out, "{}", to_json(&report, &self.src))?;
        } else {
            write!(self.out, "{}", text(&report, &self.src))?;
        }
        self.out.flush()
    }
}

/// `verdict`: one verdict per process (only `pid`'s when given), text or JSON, at the end.
pub struct VerdictSink<W: Write> {
    out: W,
    json: bool,
    pid: Option<u32>,
    /// One verdict per container instead of per process.
    pub by_container: bool,
    analyzer: Analyzer,
    /// Whether a watched process fell back to TCP (known after `finish`).
    pub fallback: bool,
}

impl<W: Write> VerdictSink<W> {
    pub fn new(out: W, json: bool, pid: Option<u32>) -> VerdictSink<W> {
        VerdictSink {
            out,
            json,
            pid,
            by_container: false,
            analyzer: Analyzer::new(),
            fallback: false,
        }
    }
}

impl<W: Write> Sink for VerdictSink<W> {
    fn record(&mut self, rec: &Record, state: &Correlator) -> io::Result<()> {
        self.analyzer.push(rec, state);
        Ok(())
    }

    fn finish(&mut self, _state: &Correlator) -> io::Result<()> {
        let measured = self.analyzer.traffic_measured();
        let mut report = std::mem::take(&mut self.analyzer).finish();
        report
            .processes
            .retain(|p| self.pid.is_none_or(|pid| pid == p.stats.pid));
        if self.by_container {
            if !self.json {
                writeln!(self.out, "{GROUP_HEADER}")?;
            }
            for g in by_container(&report, measured) {
                self.fallback |= g.verdict == Verdict::TcpFallback;
                if self.json {
                    writeln!(self.out, "{}", group_json(&g))?;
                } else {
                    writeln!(self.out, "{}", group_text(&g))?;
                }
            }
            return self.out.flush();
        }
        let containers = any_container(&report.processes);
        if !self.json {
            writeln!(self.out, "{}", verdict_header(containers))?;
        }
        for p in &report.processes {
            self.fallback |= p.verdict == Verdict::TcpFallback;
            if self.json {
                writeln!(self.out, "{}", verdict_json(p))?;
            } else {
                writeln!(self.out, "{}", verdict_text(p, containers))?;
            }
        }
        // The faults of the judged processes, after their verdicts (only when there are any).
        let diagnoses: Vec<Diagnosis> = report
            .diagnoses
            .into_iter()
            .filter(|d| self.pid.is_none_or(|pid| pid == d.pid))
            .collect();
        if self.json {
            for d in &diagnoses {
                writeln!(
                    self.out,
                    "{}",
                    json!({"type": "diagnosis", "data": diagnosis_json(d)})
                )?;
            }
        } else if !diagnoses.is_empty() {
            write!(
                self.out,
                "\nDIAGNOSES (docs/diagnosis.md)\n{}",
                diagnoses_text(&diagnoses)
            )?;
        }
        self.out.flush()
    }
}
