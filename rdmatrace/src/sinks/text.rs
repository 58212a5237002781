//! bcc-style live lines, under 100 columns:
//! `TIME(UTC)    PID     COMM            DEV    QPN      EVENT   DETAILS`.

use std::io::{self, Write};

use crate::{
    clock::hms_millis,
    correlate::{cgroups::Place, Correlator},
    event::{
        access_names, mtu_bytes, qp_type_name, tcp_state_name, AsyncElement, Body, ModifyAttrs,
        Record,
    },
    format::{errno_text, exit_text, gid_text},
    sinks::Sink,
};

/// Widest a line may get; details are cut (with `+`) beyond it.
pub const MAX_COLUMNS: usize = 99;

pub struct TextSink<W: Write> {
    out: W,
}

impl<W: Write> TextSink<W> {
    pub fn new(out: W) -> Self {
        TextSink { out }
    }
}

pub const HEADER: &str = "TIME(UTC)    PID     COMM            DEV    QPN      EVENT   DETAILS";

fn state_name(s: Option<crate::event::QpState>) -> &'static str {
    s.map_or("?", |s| s.name())
}

fn modify_details(a: &ModifyAttrs, ret: i32) -> String {
    let mut d = match a.new_state {
        Some(new) => format!("{}->{}", state_name(a.cur_state), new),
        None => format!("{} (no state change)", state_name(a.cur_state)),
    };
    // The peer as `QPN@address` (dest QPN and dest GID), the first thing to check on RTR.
    let dst = a
        .dgid
        .as_ref()
        .filter(|g| g.iter().any(|&b| b != 0))
        .map(gid_text);
    match (a.dest_qpn, dst) {
        (Some(q), Some(g)) => d += &format!(" peer {q:#x}@{g}"),
        (Some(q), None) => d += &format!(" peer {q:#x}"),
        (None, Some(g)) => d += &format!(" peer @{g}"),
        (None, None) => {}
    }
    if let Some(m) = a.path_mtu {
        d += &format!(" mtu {}", mtu_bytes(m));
    }
    if let Some(t) = a.timeout {
        d += &format!(" to {t}");
    }
    if let Some(r) = a.retry_cnt {
        d += &format!(" retry {r}");
    }
    if let Some(r) = a.rnr_retry {
        d += &format!(" rnr {r}");
    }
    if ret != 0 {
        d = format!("FAILED {} {d}", errno_text(ret));
    }
    d
}

/// One output line (without newline) for `rec`.
pub fn line(rec: &Record) -> String {
    line_in(rec, None)
}

/// What a cgroup record says: the path, and the container and pod it names.
fn cgroup_details(id: u64, at: Option<&Place>) -> String {
    let Some(p) = at.filter(|p| p.id == id) else {
        return format!("id {id}");
    };
    let mut d = p.path.clone();
    if let (Some(c), Some(rt)) = (p.placement.short_container(), p.placement.runtime) {
        d += &format!(" container {c} ({rt})");
    } else if let Some(c) = p.placement.short_container() {
        d += &format!(" container {c}");
    }
    if let Some(uid) = p.pod_uid() {
        d += &format!(" pod {uid}");
    }
    d
}

/// [`line`], with `at`, where the record's process runs, when known.
pub fn line_in(rec: &Record, at: Option<&Place>) -> String {
    let dev = rec.dev().filter(|d| !d.is_empty()).unwrap_or("-");
    let qpn = rec
        .qpn()
        .map_or_else(|| "-".to_string(), |q| format!("{q:#08x}"));
    let (event, details) = match &rec.body {
        Body::QpCreate { qp, ret } => (
            "create",
            match ret {
                0 => qp_type_name(qp.qp_type),
                r => format!("FAILED {} {}", errno_text(*r), qp_type_name(qp.qp_type)),
            },
        ),
        Body::QpModify { attrs, ret, .. } => ("modify", modify_details(attrs, *ret)),
        Body::QpDestroy { ret, .. } => (
            "destroy",
            if *ret == 0 {
                String::new()
            } else {
                format!("FAILED {}", errno_text(*ret))
            },
        ),
        Body::ProcessExec { ppid } => ("exec", format!("ppid {ppid}")),
        Body::ProcessExit { exit_code, .. } => ("exit", exit_text(*exit_code)),
        Body::ProcessCgroup { id } => ("cgroup", cgroup_details(*id, at)),
        Body::Retransmit(r) => ("retrans", retransmit_details(r)),
        Body::Resource(r) => resource_line(r),
        Body::TcpBytes(t) => (
            "tcp",
            format!(
                "tx {} B / {} calls, rx {} B / {} calls{}",
                t.tx_bytes,
                t.tx_calls,
                t.rx_bytes,
                t.rx_calls,
                t.peer.map_or_else(String::new, |a| format!(" peer {a}"))
            ),
        ),
        Body::QpTraffic(t) => (
            "traffic",
            format!(
                "tx {} pkts {} B, rx {} pkts {} B",
                t.tx_packets, t.tx_bytes, t.rx_packets, t.rx_bytes
            ),
        ),
        Body::TcpState(t) => (
            "tcpstate",
            format!(
                "{} -> {} {}:{} -> {}:{}",
                tcp_state_name(t.old_state),
                tcp_state_name(t.tcp.state),
                t.tcp.saddr,
                t.tcp.sport,
                t.tcp.daddr,
                t.tcp.dport
            ),
        ),
        Body::WcError(w) => (
            "wc_err",
            format!("{} CQ#{} vendor_err {:#x}", w.status, w.cqn, w.vendor_err),
        ),
        Body::CqNotify(n) => (
            "cq_event",
            format!("CQ#{} {} notifications", n.cqn, n.count),
        ),
        Body::QpRes(r) => {
            let mut d = format!("{} {}", r.change.name(), r.state.map_or("?", |s| s.name()));
            if let Some(q) = r.rqpn {
                d += &format!(" rqpn {q:#x}");
            }
            ("qp_res", d)
        }
        Body::QpCounter(c) => (
            "qcounter",
            format!(
                "port {} #{} {} +{} = {}",
                c.port, c.counter_id, c.name, c.delta, c.value
            ),
        ),
        Body::Port(p) => {
            let mut d = format!("port {} {} {}", p.port, p.state, p.link_layer);
            if let Some(m) = p.active_mtu {
                d += &format!(" mtu {m}");
            }
            if !p.netdev.is_empty() {
                d += &format!(" {}", p.netdev);
                if let Some(m) = p.netdev_mtu {
                    d += &format!(" ({m})");
                }
            }
            ("port", d)
        }
        Body::QueueCaps(c) => (
            "caps",
            if c.queue == "CQ" {
                format!(
                    "CQ asked {} entries; device max_cqe {}",
                    c.depth, c.dev_max_depth
                )
            } else {
                format!(
                    "SRQ asked wr {} sge {}; device max wr {} sge {}",
                    c.depth, c.sge, c.dev_max_depth, c.dev_max_sge
                )
            },
        ),
        Body::QpCaps(c) => (
            "caps",
            format!(
                "asked wr {}/{} sge {}/{} inline {}; device max wr {} sge {}/{}",
                c.max_send_wr,
                c.max_recv_wr,
                c.max_send_sge,
                c.max_recv_sge,
                c.max_inline_data,
                c.dev_max_qp_wr,
                c.dev_max_send_sge,
                c.dev_max_recv_sge
            ),
        ),
        Body::UmemFailed(u) => (
            "mr_reg_failed",
            format!(
                "{} bytes: {}{}",
                u.size,
                crate::format::errno_text(u.ret),
                u.memlock.map_or_else(String::new, |m| format!(
                    " (RLIMIT_MEMLOCK {}, pinned {})",
                    crate::format::size(m),
                    u.pinned.map_or("?".into(), crate::format::size)
                ))
            ),
        ),
        Body::Gid(g) => (
            "gid",
            format!(
                "port {} index {} {} {}{}",
                g.port,
                g.index,
                g.gid
                    .map_or_else(|| "deleted".to_string(), |x| crate::format::gid_text(&x)),
                g.gid_type,
                if g.netdev.is_empty() {
                    String::new()
                } else {
                    format!(" {}", g.netdev)
                }
            ),
        ),
        Body::Counter(c) => (
            "counter",
            format!("port {} {} +{} = {}", c.port, c.name, c.delta, c.value),
        ),
        Body::Async(a) => (
            "async",
            match &a.element {
                AsyncElement::Qp(_) if a.source == "uverbs" => a.event.to_string(),
                AsyncElement::Port(_) if a.source == "ib_core" => a.event.to_string(),
                AsyncElement::Qp(_) => format!("{} ({})", a.event, a.source),
                AsyncElement::Cq(id) => format!("{} CQ#{id}", a.event),
                AsyncElement::Srq(id) => format!("{} SRQ#{id}", a.event),
                AsyncElement::Port(p) => format!("{} port {p}", a.event),
            },
        ),
        Body::Cm(c) => {
            let mut d = c.event.to_string();
            if c.status != 0 {
                d += &format!(" status {}", c.status);
            }
            if let (Some(s), Some(t)) = (c.src, c.dst) {
                d += &format!(" {s}->{t}");
            }
            ("cm", d)
        }
        Body::VerbsCall(v) => ("verbs", verbs_details(v)),
        Body::CpuSample(c) => (
            "sample",
            c.user
                .first()
                .or(c.kernel.first())
                .map_or_else(String::new, |f| f.label().to_string()),
        ),
        Body::Lost { count, cpu } => ("LOST", lost_details(*count, *cpu)),
    };
    let mut l = format!(
        "{:<12} {:<7} {:<15} {:<6} {:<8} {:<7} {}",
        hms_millis(rec.wall_ns),
        rec.subject_pid(),
        rec.subject_comm(),
        dev,
        qpn,
        event,
        details
    );
    let l_trim = l.trim_end().len();
    l.truncate(l_trim);
    if l.chars().count() > MAX_COLUMNS {
        let cut: String = l.chars().take(MAX_COLUMNS - 1).collect();
        l = cut + "+";
    }
    l
}

/// `rxe retransmit_timer`, `tcp 192.0.2.1:5001->192.0.2.2:80`.
/// What a `LOST` line says; with the CPU when known, kept as short as the line without it
/// (the details column is cut at 80 columns).
pub fn lost_details(count: u64, cpu: Option<u32>) -> String {
    match cpu {
        Some(cpu) => format!("{count} lost on CPU {cpu} (ring buffer full)"),
        None => format!("{count} events dropped (ring buffer full)"),
    }
}

fn retransmit_details(r: &crate::event::Retransmit) -> String {
    let mut d = match &r.tcp {
        Some(t) => format!("tcp {}:{}->{}:{}", t.saddr, t.sport, t.daddr, t.dport),
        None => format!("{} {}", r.transport.name(), r.reason),
    };
    // The PID/COMM columns show the owner; JSON also has the on-CPU task.
    if r.owner_pid == 0 {
        d += " (owner unknown)";
    }
    d
}

/// `ibv_create_qp <- caller <- its caller` (cut to the line width by the caller).
fn verbs_details(v: &crate::event::VerbsCall) -> String {
    let mut d = v.func.clone();
    for f in v.stack.iter().take(3) {
        d += " <- ";
        d += f.label();
    }
    d
}

fn resource_line(r: &crate::event::Resource) -> (&'static str, String) {
    let (_, _, add, del, label) = r.res_type.names();
    let mut d = format!("{label}#{}", r.id);
    if let Some((cqe, vector)) = r.cq {
        d += &format!(" cqe {cqe} vector {vector}");
    }
    if let Some(mr) = &r.mr {
        d += &format!(" {} B lkey {:#x} rkey {:#x}", mr.length, mr.lkey, mr.rkey);
        if let Some(access) = mr.access {
            d += &format!(" {}", access_names(access));
        }
    }
    (if r.added { add } else { del }, d)
}

impl<W: Write> Sink for TextSink<W> {
    fn start(&mut self) -> io::Result<()> {
        writeln!(self.out, "{HEADER}")?;
        self.out.flush()
    }

    fn record(&mut self, rec: &Record, state: &Correlator) -> io::Result<()> {
        writeln!(self.out, "{}", line_in(rec, state.place(rec)))?;
        self.out.flush()
    }

    fn finish(&mut self, _state: &Correlator) -> io::Result<()> {
        self.out.flush()
    }
}
