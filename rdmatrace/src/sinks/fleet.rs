//! `report A.rdmt B.rdmt ...`: several hosts' recordings as one report. Each recording is
//! analysed alone ([`AnalysisSink`]), then the hosts are joined (`correlate::fleet`): a
//! connection table with both ends, each host's clock correction, the faults localized to a
//! direction and a host, and each host's own report with its times on the common clock.

use std::io;

use serde_json::{json, Value};

use super::{
    report::{text as host_text, to_json as host_json, Source},
    Sink,
};
use crate::{
    clock::{hms_millis, rfc3339},
    correlate::{
        analysis::handshakes::NetEnd,
        analysis::{Analyzer, Report},
        fleet::{pair::NetRef, End, Fleet},
        Correlator,
    },
    event::{qp_type_name, Record},
    format::gid_text,
};

/// Analyses one recording and keeps the report (no output).
#[derive(Default)]
pub struct AnalysisSink {
    analyzer: Analyzer,
    pub report: Option<Report>,
}

impl Sink for AnalysisSink {
    fn record(&mut self, rec: &Record, state: &Correlator) -> io::Result<()> {
        self.analyzer.push(rec, state);
        Ok(())
    }

    fn finish(&mut self, _state: &Correlator) -> io::Result<()> {
        self.report = Some(std::mem::take(&mut self.analyzer).finish());
        Ok(())
    }
}

/// `report`'s wall times moved by `offset_ns` (onto the common clock).
pub fn shifted(r: &Report, offset_ns: i64) -> Report {
    let mv = |w: u64| w.saturating_add_signed(offset_ns);
    let mut r = r.clone();
    r.first_wall_ns = mv(r.first_wall_ns);
    r.last_wall_ns = mv(r.last_wall_ns);
    for a in &mut r.anomalies {
        a.wall_ns = mv(a.wall_ns);
    }
    for d in &mut r.diagnoses {
        d.wall_ns = mv(d.wall_ns);
    }
    r
}

fn state(f: &Fleet, e: &End) -> String {
    let q = f.qp(e);
    match (q.destroyed_ns, q.state) {
        (Some(_), Some(s)) => format!("{s}*"),
        (None, Some(s)) => s.to_string(),
        _ => "?".into(),
    }
}

fn end_json(f: &Fleet, e: &End) -> Value {
    let q = f.qp(e);
    let t = |ns: Option<u64>| ns.map(|n| rfc3339(f.aligned(e.host, n)));
    json!({
        "host": f.hosts[e.host].host,
        "dev": q.key.dev,
        "qpn": q.key.qpn,
        "pid": q.owner_pid,
        "comm": q.owner_comm,
        "type": qp_type_name(q.qp_type),
        "gid": q.local_gid.as_ref().map(gid_text),
        "peer_gid": q.peer_gid.as_ref().map(gid_text),
        "peer_qpn": q.peer_qpn,
        "state": q.state.map(|s| s.to_string()),
        "destroyed": t(q.destroyed_ns),
        "created": t(Some(q.created_ns)),
        "rtr": t(q.rtr_ns),
        "rts": t(q.rts_ns),
        "tx_bytes": q.tx_bytes,
        "tx_packets": q.tx_packets,
        "rx_bytes": q.rx_bytes,
        "rx_packets": q.rx_packets,
        "retransmits": q.retransmits,
        "rnr_retransmits": q.rnr_retransmits,
        "wc_errors": q.wc_errors,
    })
}

/// A TCP end: (host, its socket).
fn socket<'a>(f: &'a Fleet, r: &NetRef) -> (&'a str, &'a NetEnd) {
    (
        f.hosts[r.0].host.as_str(),
        &f.hosts[r.0].report.net_ends[r.1],
    )
}

/// The last step a socket was seen in (`ESTABLISHED` for either side of the handshake).
fn socket_state(e: &NetEnd) -> &str {
    e.steps
        .iter()
        .max_by_key(|(_, t)| *t)
        .map_or("?", |(n, _)| match n.as_str() {
            "est_active" | "est_passive" => "ESTABLISHED",
            n => n,
        })
}

fn socket_json(f: &Fleet, r: &NetRef) -> Value {
    let (host, e) = socket(f, r);
    let t = |name: &str| e.step(name).map(|n| rfc3339(f.aligned(r.0, n)));
    json!({
        "host": host,
        "dev": null,
        "qpn": null,
        "pid": e.pid,
        "comm": e.comm,
        "type": "TCP",
        "local": e.local.to_string(),
        "remote": e.remote.to_string(),
        "state": socket_state(e),
        "established": t("est_active").or_else(|| t("est_passive")),
        "side": if e.step("est_active").is_some() { Some("active") }
                else if e.step("est_passive").is_some() { Some("passive") } else { None },
    })
}

/// The JSON document (docs/json.md, "Several hosts").
pub fn to_json(f: &Fleet, kernels: &[String]) -> Value {
    let hosts: Vec<Value> = f
        .hosts
        .iter()
        .zip(&f.clocks)
        .zip(kernels)
        .map(|((h, c), k)| {
            let src = Source {
                hostname: h.host.clone(),
                kernel: k.clone(),
            };
            json!({
                "host": h.host,
                "kernel": k,
                "clock": {
                    "offset_ns": c.offset_ns,
                    "uncertainty_ns": c.uncertainty_ns,
                    "aligned": c.aligned,
                    "basis": c.basis,
                },
                "report": host_json(&shifted(&h.report, c.offset_ns), &src)["data"],
            })
        })
        .collect();
    let connections: Vec<Value> = f
        .connections
        .iter()
        .map(|c| {
            let mut ends: Vec<Value> = c.ends.iter().map(|e| end_json(f, e)).collect();
            ends.extend(c.sockets.iter().map(|r| socket_json(f, r)));
            json!({
                "id": c.id,
                "transport": c.transport,
                "via_cm": c.via_cm,
                "paired": c.paired(),
                "ends": ends,
                "unpaired": c.unpaired,
            })
        })
        .collect();
    let faults: Vec<Value> = f
        .faults
        .iter()
        .map(|x| {
            json!({
                "kind": x.kind,
                "connection": x.connection,
                "from_host": x.from_host,
                "to_host": x.to_host,
                "time": rfc3339(x.wall_ns),
                "evidence": x.evidence,
            })
        })
        .collect();
    json!({"type": "fleet_report", "data": {
        "reference_host": f.hosts.first().map(|h| h.host.as_str()),
        "hosts": hosts,
        "connections": connections,
        "faults": faults,
    }})
}

fn end_line(f: &Fleet, e: &End) -> String {
    let q = f.qp(e);
    format!(
        "{:<12} {:<6} {:<8} {:<22} {:<4} {:<6} {:>12} {:>12} {:>6}",
        f.hosts[e.host].host,
        q.key.dev,
        format!("{:#x}", q.key.qpn),
        format!("{} {}", q.owner_pid, q.owner_comm),
        qp_type_name(q.qp_type),
        state(f, e),
        q.tx_bytes,
        q.rx_bytes,
        q.retransmits
    )
}

fn socket_line(f: &Fleet, r: &NetRef) -> String {
    let (host, e) = socket(f, r);
    let port = format!(":{}", e.local.port());
    let owner = format!("{} {}", e.pid, e.comm);
    format!(
        "{host:<12} {port:<15} {owner:<22} TCP  {} -> {} {}",
        e.local,
        e.remote,
        socket_state(e)
    )
}

fn secs_signed(ns: i64) -> String {
    format!("{:+.3} s", ns as f64 / 1e9)
}

/// The text report.
pub fn text(f: &Fleet, kernels: &[String]) -> String {
    let reference = f.hosts.first().map(|h| h.host.as_str()).unwrap_or("-");
    let mut o = format!(
        "rdmatrace report: {} hosts, times on {reference}'s clock\n\nCLOCKS\n",
        f.hosts.len()
    );
    for (h, c) in f.hosts.iter().zip(&f.clocks) {
        let fix = if !c.aligned {
            "not aligned".to_string()
        } else if c.uncertainty_ns == 0 && c.offset_ns == 0 {
            "reference".to_string()
        } else {
            format!(
                "{} ± {:.3} s",
                secs_signed(c.offset_ns),
                c.uncertainty_ns as f64 / 1e9
            )
        };
        o += &format!("{:<12} {:<24} {}\n", h.host, fix, c.basis);
    }
    o += "\nCONNECTIONS (* = destroyed; bytes and retransmits as each end counted them)\n";
    o += &format!(
        "ID    {:<12} {:<6} {:<8} {:<22} {:<4} {:<6} {:>12} {:>12} {:>6}\n",
        "HOST", "DEV", "QPN", "OWNER", "TYPE", "STATE", "TX BYTES", "RX BYTES", "RETX"
    );
    if f.connections.is_empty() {
        o += "(no connected QP in the recordings)\n";
    }
    for c in &f.connections {
        let lines = c
            .ends
            .iter()
            .map(|e| end_line(f, e))
            .chain(c.sockets.iter().map(|r| socket_line(f, r)));
        for (i, line) in lines.enumerate() {
            let id = if i == 0 { c.id.as_str() } else { "" };
            o += &format!("{id:<5} {line}\n");
        }
        if let Some(why) = &c.unpaired {
            o += &format!("      unpaired: {why}\n");
        }
    }
    o += "\nFAULTS (FROM -> TO: the direction packets were lost in, or healthy side -> side at \
          fault)\n";
    if f.faults.is_empty() {
        o += "(none)\n";
    }
    for x in &f.faults {
        o += &format!(
            "{} {} {} {} -> {}\n",
            hms_millis(x.wall_ns),
            x.kind,
            x.connection,
            x.from_host,
            x.to_host
        );
        for e in &x.evidence {
            o += &format!("  evidence: {e}\n");
        }
    }
    for ((h, c), k) in f.hosts.iter().zip(&f.clocks).zip(kernels) {
        let src = Source {
            hostname: h.host.clone(),
            kernel: k.clone(),
        };
        o += &format!("\n==== {} ====\n", h.host);
        o += &host_text(&shifted(&h.report, c.offset_ns), &src);
    }
    o
}
