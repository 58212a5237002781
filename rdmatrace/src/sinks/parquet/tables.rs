//! The tables of the joined analysis: `hosts`, `processes`, `qps`, `connections`,
//! `retransmits` and `faults` (docs/parquet.md has their columns).

use std::{io, path::Path, sync::Arc};

use arrow_array::{ArrayRef, BooleanArray, Int32Array, Int64Array};
use arrow_schema::{DataType, Field};

use super::{strings, times, u32s, u64s, utc, TableFile};
use crate::{
    correlate::fleet::{End, Fleet},
    event::qp_type_name,
    format::gid_text,
    sinks::fleet::shifted,
};

fn f(name: &str, t: DataType, null: bool) -> Field {
    Field::new(name, t, null)
}

fn s(name: &str) -> Field {
    f(name, DataType::Utf8, false)
}

fn s_null(name: &str) -> Field {
    f(name, DataType::Utf8, true)
}

fn n64(name: &str) -> Field {
    f(name, DataType::UInt64, false)
}

fn bools(v: impl IntoIterator<Item = Option<bool>>) -> ArrayRef {
    Arc::new(v.into_iter().collect::<BooleanArray>())
}

fn i64s(v: impl IntoIterator<Item = Option<i64>>) -> ArrayRef {
    Arc::new(v.into_iter().collect::<Int64Array>())
}

fn i32s(v: impl IntoIterator<Item = Option<i32>>) -> ArrayRef {
    Arc::new(v.into_iter().collect::<Int32Array>())
}

fn table(dir: &Path, name: &str, fields: Vec<Field>, columns: Vec<ArrayRef>) -> io::Result<()> {
    let mut t = TableFile::create(dir, name, fields)?;
    t.write(columns)?;
    t.close()
}

/// Writes every table but `events` into `dir`.
pub fn write(dir: &Path, fleet: &Fleet, kernels: &[String]) -> io::Result<()> {
    hosts(dir, fleet, kernels)?;
    processes(dir, fleet)?;
    qps(dir, fleet)?;
    connections(dir, fleet)?;
    retransmits(dir, fleet)?;
    faults(dir, fleet)
}

fn hosts(dir: &Path, fl: &Fleet, kernels: &[String]) -> io::Result<()> {
    let hs: Vec<_> = fl
        .hosts
        .iter()
        .zip(&fl.clocks)
        .map(|(h, c)| (h, c, shifted(&h.report, c.offset_ns)))
        .collect();
    table(
        dir,
        "hosts",
        vec![
            s("host"),
            s("kernel"),
            f("clock_offset_ns", DataType::Int64, false),
            n64("clock_uncertainty_ns"),
            f("clock_aligned", DataType::Boolean, false),
            s("clock_basis"),
            f("start", utc(), false),
            f("end", utc(), false),
            n64("events"),
            n64("lost"),
        ],
        vec![
            strings(hs.iter().map(|(h, ..)| Some(h.host.as_str()))),
            strings(kernels.iter().map(|k| Some(k.as_str()))),
            i64s(hs.iter().map(|(_, c, _)| Some(c.offset_ns))),
            u64s(hs.iter().map(|(_, c, _)| Some(c.uncertainty_ns))),
            bools(hs.iter().map(|(_, c, _)| Some(c.aligned))),
            strings(hs.iter().map(|(_, c, _)| Some(c.basis.as_str()))),
            times(hs.iter().map(|(.., r)| Some(r.first_wall_ns))),
            times(hs.iter().map(|(.., r)| Some(r.last_wall_ns))),
            u64s(hs.iter().map(|(.., r)| Some(r.events))),
            u64s(hs.iter().map(|(.., r)| Some(r.lost))),
        ],
    )
}

fn processes(dir: &Path, fl: &Fleet) -> io::Result<()> {
    let rows: Vec<_> = fl
        .hosts
        .iter()
        .flat_map(|h| h.report.processes.iter().map(move |p| (h.host.as_str(), p)))
        .collect();
    let place = |p: &crate::correlate::analysis::ProcReport| p.stats.place.clone();
    table(
        dir,
        "processes",
        vec![
            s("host"),
            f("pid", DataType::UInt32, false),
            s("comm"),
            s("verdict"),
            s_null("container"),
            s_null("cgroup"),
            n64("qps_created"),
            n64("rdma_tx_bytes"),
            n64("rdma_rx_bytes"),
            n64("tcp_tx_bytes"),
            n64("tcp_rx_bytes"),
            n64("retransmits_rdma"),
            n64("retransmits_tcp"),
            n64("wc_errors"),
            f("exit_status", DataType::Int32, true),
            s("evidence"),
        ],
        vec![
            strings(rows.iter().map(|(h, _)| Some(*h))),
            u32s(rows.iter().map(|(_, p)| Some(p.stats.pid))),
            strings(rows.iter().map(|(_, p)| Some(p.stats.comm.as_str()))),
            strings(rows.iter().map(|(_, p)| Some(p.verdict.name()))),
            Arc::new(
                rows.iter()
                    .map(|(_, p)| place(p).and_then(|pl| pl.container().map(str::to_string)))
                    .collect::<arrow_array::StringArray>(),
            ),
            Arc::new(
                rows.iter()
                    .map(|(_, p)| place(p).map(|pl| pl.path.to_string()))
                    .collect::<arrow_array::StringArray>(),
            ),
            u64s(rows.iter().map(|(_, p)| Some(p.stats.qps_created))),
            u64s(rows.iter().map(|(_, p)| Some(p.stats.rdma_tx_bytes))),
            u64s(rows.iter().map(|(_, p)| Some(p.stats.rdma_rx_bytes))),
            u64s(rows.iter().map(|(_, p)| Some(p.stats.tcp_tx_bytes))),
            u64s(rows.iter().map(|(_, p)| Some(p.stats.tcp_rx_bytes))),
            u64s(rows.iter().map(|(_, p)| Some(p.stats.retrans_rdma))),
            u64s(rows.iter().map(|(_, p)| Some(p.stats.retrans_tcp))),
            u64s(rows.iter().map(|(_, p)| Some(p.stats.wc_errors))),
            i32s(rows.iter().map(|(_, p)| p.stats.exit_code)),
            Arc::new(
                rows.iter()
                    .map(|(_, p)| Some(p.evidence.join("\n")))
                    .collect::<arrow_array::StringArray>(),
            ),
        ],
    )
}

/// Every QP life, with its connection's id when it is an end of one.
fn qps(dir: &Path, fl: &Fleet) -> io::Result<()> {
    let mut rows = Vec::new();
    for (h, host) in fl.hosts.iter().enumerate() {
        for i in 0..host.report.qps.len() {
            let e = End { host: h, qp: i };
            let conn = fl
                .connections
                .iter()
                .find(|c| c.ends.contains(&e))
                .map(|c| c.id.as_str());
            rows.push((e, conn));
        }
    }
    let q = |e: &End| fl.qp(e);
    let t = |e: &End, ns: Option<u64>| ns.map(|n| fl.aligned(e.host, n));
    let gid = |g: Option<[u8; 16]>| g.map(|g| gid_text(&g));
    table(
        dir,
        "qps",
        vec![
            s("host"),
            s("dev"),
            f("qpn", DataType::UInt32, false),
            f("pid", DataType::UInt32, false),
            s("comm"),
            s("type"),
            s_null("state"),
            s_null("connection"),
            f("created", utc(), false),
            f("rtr", utc(), true),
            f("rts", utc(), true),
            f("destroyed", utc(), true),
            s_null("gid"),
            s_null("peer_gid"),
            f("peer_qpn", DataType::UInt32, true),
            n64("tx_bytes"),
            n64("tx_packets"),
            n64("rx_bytes"),
            n64("rx_packets"),
            n64("retransmits"),
            n64("rnr_retransmits"),
            n64("wc_errors"),
        ],
        vec![
            strings(
                rows.iter()
                    .map(|(e, _)| Some(fl.hosts[e.host].host.as_str())),
            ),
            strings(rows.iter().map(|(e, _)| Some(q(e).key.dev.as_str()))),
            u32s(rows.iter().map(|(e, _)| Some(q(e).key.qpn))),
            u32s(rows.iter().map(|(e, _)| Some(q(e).owner_pid))),
            strings(rows.iter().map(|(e, _)| Some(q(e).owner_comm.as_str()))),
            Arc::new(
                rows.iter()
                    .map(|(e, _)| Some(qp_type_name(q(e).qp_type)))
                    .collect::<arrow_array::StringArray>(),
            ),
            strings(rows.iter().map(|(e, _)| q(e).state.map(|s| s.name()))),
            strings(rows.iter().map(|(_, c)| *c)),
            times(rows.iter().map(|(e, _)| t(e, Some(q(e).created_ns)))),
            times(rows.iter().map(|(e, _)| t(e, q(e).rtr_ns))),
            times(rows.iter().map(|(e, _)| t(e, q(e).rts_ns))),
            times(rows.iter().map(|(e, _)| t(e, q(e).destroyed_ns))),
            Arc::new(
                rows.iter()
                    .map(|(e, _)| gid(q(e).local_gid))
                    .collect::<arrow_array::StringArray>(),
            ),
            Arc::new(
                rows.iter()
                    .map(|(e, _)| gid(q(e).peer_gid))
                    .collect::<arrow_array::StringArray>(),
            ),
            u32s(rows.iter().map(|(e, _)| q(e).peer_qpn)),
            u64s(rows.iter().map(|(e, _)| Some(q(e).tx_bytes))),
            u64s(rows.iter().map(|(e, _)| Some(q(e).tx_packets))),
            u64s(rows.iter().map(|(e, _)| Some(q(e).rx_bytes))),
            u64s(rows.iter().map(|(e, _)| Some(q(e).rx_packets))),
            u64s(rows.iter().map(|(e, _)| Some(q(e).retransmits))),
            u64s(rows.iter().map(|(e, _)| Some(q(e).rnr_retransmits))),
            u64s(rows.iter().map(|(e, _)| Some(q(e).wc_errors))),
        ],
    )
}

/// One row per connection end (`end` 0 or 1), as `report --json`'s `connections`: QP ends
/// with `dev` and `qpn`, TCP ends with `local` and `remote`.
fn connections(dir: &Path, fl: &Fleet) -> io::Result<()> {
    struct Row<'a> {
        c: &'a crate::correlate::fleet::Connection,
        end: u32,
        host: &'a str,
        dev: Option<&'a str>,
        qpn: Option<u32>,
        local: Option<String>,
        remote: Option<String>,
        pid: u32,
        comm: &'a str,
    }
    let mut rows = Vec::new();
    for c in &fl.connections {
        for (i, e) in c.ends.iter().enumerate() {
            let q = fl.qp(e);
            rows.push(Row {
                c,
                end: i as u32,
                host: &fl.hosts[e.host].host,
                dev: Some(q.key.dev.as_str()),
                qpn: Some(q.key.qpn),
                local: None,
                remote: None,
                pid: q.owner_pid,
                comm: q.owner_comm.as_str(),
            });
        }
        for (i, (h, n)) in c.sockets.iter().enumerate() {
            let e = &fl.hosts[*h].report.net_ends[*n];
            rows.push(Row {
                c,
                end: i as u32,
                host: &fl.hosts[*h].host,
                dev: None,
                qpn: None,
                local: Some(e.local.to_string()),
                remote: Some(e.remote.to_string()),
                pid: e.pid,
                comm: e.comm.as_str(),
            });
        }
    }
    table(
        dir,
        "connections",
        vec![
            s("connection"),
            s("transport"),
            f("end", DataType::UInt32, false),
            f("paired", DataType::Boolean, false),
            s_null("unpaired"),
            s("host"),
            s_null("dev"),
            f("qpn", DataType::UInt32, true),
            s_null("local"),
            s_null("remote"),
            f("pid", DataType::UInt32, false),
            s("comm"),
        ],
        vec![
            strings(rows.iter().map(|r| Some(r.c.id.as_str()))),
            strings(rows.iter().map(|r| Some(r.c.transport))),
            u32s(rows.iter().map(|r| Some(r.end))),
            bools(rows.iter().map(|r| Some(r.c.paired()))),
            strings(rows.iter().map(|r| r.c.unpaired.as_deref())),
            strings(rows.iter().map(|r| Some(r.host))),
            strings(rows.iter().map(|r| r.dev)),
            u32s(rows.iter().map(|r| r.qpn)),
            strings(rows.iter().map(|r| r.local.as_deref())),
            strings(rows.iter().map(|r| r.remote.as_deref())),
            u32s(rows.iter().map(|r| Some(r.pid))),
            strings(rows.iter().map(|r| Some(r.comm))),
        ],
    )
}

/// Retransmit blame, per host (as each host's report).
fn retransmits(dir: &Path, fl: &Fleet) -> io::Result<()> {
    let rows: Vec<_> = fl
        .hosts
        .iter()
        .flat_map(|h| h.report.blame.iter().map(move |b| (h.host.as_str(), b)))
        .collect();
    table(
        dir,
        "retransmits",
        vec![
            s("host"),
            f("pid", DataType::UInt32, false),
            s("comm"),
            s("transport"),
            s("target"),
            n64("count"),
            s("reasons"),
        ],
        vec![
            strings(rows.iter().map(|(h, _)| Some(*h))),
            u32s(rows.iter().map(|(_, b)| Some(b.pid))),
            strings(rows.iter().map(|(_, b)| Some(b.comm.as_str()))),
            strings(rows.iter().map(|(_, b)| Some(b.transport))),
            strings(rows.iter().map(|(_, b)| Some(b.target.as_str()))),
            u64s(rows.iter().map(|(_, b)| Some(b.count))),
            Arc::new(
                rows.iter()
                    .map(|(_, b)| Some(b.reasons.join(",")))
                    .collect::<arrow_array::StringArray>(),
            ),
        ],
    )
}

fn faults(dir: &Path, fl: &Fleet) -> io::Result<()> {
    let x = &fl.faults;
    table(
        dir,
        "faults",
        vec![
            s("kind"),
            s("connection"),
            s("from_host"),
            s("to_host"),
            f("time", utc(), false),
            s("evidence"),
        ],
        vec![
            strings(x.iter().map(|f| Some(f.kind))),
            strings(x.iter().map(|f| Some(f.connection.as_str()))),
            strings(x.iter().map(|f| Some(f.from_host.as_str()))),
            strings(x.iter().map(|f| Some(f.to_host.as_str()))),
            times(x.iter().map(|f| Some(f.wall_ns))),
            Arc::new(
                x.iter()
                    .map(|f| Some(f.evidence.join("\n")))
                    .collect::<arrow_array::StringArray>(),
            ),
        ],
    )
}
