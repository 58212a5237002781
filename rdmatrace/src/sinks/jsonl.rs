//! JSON Lines: one `{"type": T, "data": {...}}` object per line. The schema is documented once,
//! in `docs/json.md`; `to_json` is the only place that builds it.

use std::io::{self, Write};

use serde_json::{json, Map, Value};

use crate::{
    clock::rfc3339,
    correlate::{cgroups::Place, Correlator},
    event::{access_names, qp_type_name, tcp_state_name, AsyncElement, Body, Record},
    format::gid_text,
    sinks::Sink,
};

pub struct JsonlSink<W: Write> {
    out: W,
}

impl<W: Write> JsonlSink<W> {
    pub fn new(out: W) -> Self {
        JsonlSink { out }
    }
}

fn opt<T: Into<Value>>(m: &mut Map<String, Value>, key: &str, v: Option<T>) {
    if let Some(v) = v {
        m.insert(key.to_string(), v.into());
    }
}

/// The `{"type", "data"}` envelope for one record.
/// `owner_pid`/`owner_comm`, null when the owner is not known.
fn owner(d: &mut Map<String, Value>, pid: u32, comm: &str) {
    let known = pid != 0;
    d.insert(
        "owner_pid".into(),
        if known { pid.into() } else { Value::Null },
    );
    d.insert(
        "owner_comm".into(),
        if known { comm.into() } else { Value::Null },
    );
}

/// `key`: frame names innermost first; `key_addrs`: their addresses as hex strings.
fn stack(d: &mut Map<String, Value>, key: &str, frames: &[crate::event::Frame]) {
    let names: Vec<Value> = frames.iter().map(|f| f.label().into()).collect();
    let addrs: Vec<Value> = frames
        .iter()
        .map(|f| format!("{:#x}", f.addr).into())
        .collect();
    d.insert(key.into(), names.into());
    d.insert(format!("{key}_addrs"), addrs.into());
}

/// `cgroup`, `container`, `pod_uid` of the process a record is about (its owner's when it
/// names one); each absent when not known or not there.
fn place(d: &mut Map<String, Value>, place: Option<&Place>) {
    if let Some(p) = place {
        d.insert("cgroup".into(), p.path.as_str().into());
        opt(d, "container", p.container());
        opt(d, "pod_uid", p.pod_uid());
    }
}

/// The JSON of `rec`; `at` is where its process runs, when known
/// ([`Correlator::place`]).
pub fn to_json(rec: &Record, at: Option<&Place>) -> Value {
    let mut d = Map::new();
    d.insert("ts_ns".into(), rec.ts_ns.into());
    d.insert("time".into(), rfc3339(rec.wall_ns).into());
    d.insert("pid".into(), rec.pid.into());
    d.insert("tid".into(), rec.tid.into());
    d.insert("comm".into(), rec.comm.as_str().into());
    place(&mut d, at);
    if let Some(qp) = rec.body.qp() {
        d.insert("dev".into(), qp.key.dev.as_str().into());
        d.insert("qpn".into(), qp.key.qpn.into());
        d.insert("qp_type".into(), qp_type_name(qp.qp_type).into());
    }
    match &rec.body {
        Body::QpCreate { ret, .. } | Body::QpDestroy { ret, .. } => {
            d.insert("ret".into(), (*ret).into());
        }
        Body::QpModify { attrs: a, ret, .. } => {
            d.insert("cur_state".into(), a.cur_state.map(|s| s.name()).into());
            d.insert("new_state".into(), a.new_state.map(|s| s.name()).into());
            d.insert("attr_mask".into(), a.attr_mask.into());
            opt(&mut d, "dest_qpn", a.dest_qpn);
            opt(&mut d, "path_mtu", a.path_mtu.map(crate::event::mtu_bytes));
            opt(&mut d, "sq_psn", a.sq_psn);
            opt(&mut d, "rq_psn", a.rq_psn);
            opt(&mut d, "timeout", a.timeout);
            opt(&mut d, "retry_cnt", a.retry_cnt);
            opt(&mut d, "rnr_retry", a.rnr_retry);
            opt(&mut d, "dgid", a.dgid.as_ref().map(gid_text));
            opt(&mut d, "sgid_index", a.sgid_index);
            opt(&mut d, "min_rnr_timer", a.min_rnr_timer);
            d.insert("ret".into(), (*ret).into());
        }
        Body::ProcessExec { ppid } => {
            d.insert("ppid".into(), (*ppid).into());
        }
        Body::ProcessCgroup { id } => {
            d.insert("cgroup_id".into(), (*id).into());
        }
        Body::ProcessExit { ppid, exit_code } => {
            d.insert("ppid".into(), (*ppid).into());
            d.insert("exit_code".into(), (*exit_code).into());
        }
        Body::Retransmit(r) => {
            d.insert("transport".into(), r.transport.name().into());
            d.insert("reason".into(), r.reason.into());
            owner(&mut d, r.owner_pid, &r.owner_comm);
            if let Some(t) = &r.tcp {
                d.insert("saddr".into(), t.saddr.to_string().into());
                d.insert("sport".into(), t.sport.into());
                d.insert("daddr".into(), t.daddr.to_string().into());
                d.insert("dport".into(), t.dport.into());
                d.insert("tcp_state".into(), t.state.into());
            }
        }
        Body::Resource(r) => {
            d.insert("dev".into(), r.dev.as_str().into());
            d.insert("object".into(), r.res_type.names().4.into());
            d.insert("id".into(), r.id.into());
            d.insert("owner_pid".into(), r.owner_pid.into());
            d.insert("owner_comm".into(), r.owner_comm.as_str().into());
            d.insert("user".into(), r.user.into());
            if let Some((cqe, vector)) = r.cq {
                d.insert("cqe".into(), cqe.into());
                d.insert("comp_vector".into(), vector.into());
            }
            if let Some(mr) = &r.mr {
                d.insert("lkey".into(), mr.lkey.into());
                d.insert("rkey".into(), mr.rkey.into());
                d.insert("length".into(), mr.length.into());
                d.insert("iova".into(), mr.iova.into());
                if let Some(access) = mr.access {
                    d.insert("access_flags".into(), access.into());
                    d.insert("access".into(), access_names(access).into());
                }
            }
        }
        Body::Async(a) => {
            d.insert("dev".into(), a.dev.as_str().into());
            d.insert("event".into(), a.event.as_str().into());
            match &a.element {
                AsyncElement::Qp(k) => d.insert("qpn".into(), k.qpn.into()),
                AsyncElement::Cq(id) => d.insert("cqn".into(), (*id).into()),
                AsyncElement::Srq(id) => d.insert("srqn".into(), (*id).into()),
                AsyncElement::Port(p) => d.insert("port".into(), (*p).into()),
            };
            d.insert("source".into(), a.source.into());
            d.insert(
                "owner_pid".into(),
                if a.owner_pid == 0 {
                    Value::Null
                } else {
                    a.owner_pid.into()
                },
            );
        }
        Body::Cm(c) => {
            d.insert("dev".into(), c.dev.as_str().into());
            d.insert("qpn".into(), c.qpn.into());
            d.insert("event".into(), c.event.as_str().into());
            d.insert("status".into(), c.status.into());
            d.insert("cm_id".into(), c.cm_id.into());
            d.insert("owner_pid".into(), c.owner_pid.into());
            d.insert("owner_comm".into(), c.owner_comm.as_str().into());
            d.insert("src".into(), c.src.map(|a| a.to_string()).into());
            d.insert("dst".into(), c.dst.map(|a| a.to_string()).into());
        }
        Body::TcpBytes(t) => {
            d.insert("tx_bytes".into(), t.tx_bytes.into());
            d.insert("rx_bytes".into(), t.rx_bytes.into());
            d.insert("tx_calls".into(), t.tx_calls.into());
            d.insert("rx_calls".into(), t.rx_calls.into());
            d.insert("peer".into(), t.peer.map(|a| a.to_string()).into());
        }
        Body::QpTraffic(t) => {
            d.insert("tx_packets".into(), t.tx_packets.into());
            d.insert("tx_bytes".into(), t.tx_bytes.into());
            d.insert("rx_packets".into(), t.rx_packets.into());
            d.insert("rx_bytes".into(), t.rx_bytes.into());
            owner(&mut d, t.owner_pid, &t.owner_comm);
        }
        Body::QpRes(r) => {
            d.insert("change".into(), r.change.name().into());
            d.insert("port".into(), r.port.into());
            d.insert("state".into(), r.state.map(|s| s.name()).into());
            d.insert("rqpn".into(), r.rqpn.into());
            d.insert("sq_psn".into(), r.sq_psn.into());
            d.insert("rq_psn".into(), r.rq_psn.into());
        }
        Body::QpCounter(c) => {
            d.insert("dev".into(), c.dev.as_str().into());
            d.insert("port".into(), c.port.into());
            d.insert("counter_id".into(), c.counter_id.into());
            d.insert("qpns".into(), c.qpns.clone().into());
            d.insert("nqpns".into(), c.nqpns.into());
            d.insert("name".into(), c.name.clone().into());
            d.insert("value".into(), c.value.into());
            d.insert("delta".into(), c.delta.into());
        }
        Body::Port(p) => {
            d.insert("dev".into(), p.dev.as_str().into());
            d.insert("port".into(), p.port.into());
            d.insert("state".into(), p.state.into());
            d.insert("active_mtu".into(), p.active_mtu.into());
            d.insert("link_layer".into(), p.link_layer.clone().into());
            d.insert("netdev".into(), p.netdev.clone().into());
            d.insert("netdev_mtu".into(), p.netdev_mtu.into());
        }
        Body::QueueCaps(c) => {
            let (depth_limit, sge_limit) = c.limit_names();
            d.insert("dev".into(), c.dev.as_str().into());
            d.insert("ret".into(), c.ret.into());
            d.insert("queue".into(), c.queue.into());
            d.insert("depth".into(), c.depth.into());
            d.insert(format!("dev_{depth_limit}"), c.dev_max_depth.into());
            if !sge_limit.is_empty() {
                d.insert("max_sge".into(), c.sge.into());
                d.insert(format!("dev_{sge_limit}"), c.dev_max_sge.into());
            }
        }
        Body::QpCaps(c) => {
            d.insert("dev".into(), c.dev.as_str().into());
            d.insert("ret".into(), c.ret.into());
            d.insert(
                "qp_type".into(),
                crate::event::qp_type_name(c.qp_type).into(),
            );
            for (k, v) in [
                ("max_send_wr", c.max_send_wr),
                ("max_recv_wr", c.max_recv_wr),
                ("max_send_sge", c.max_send_sge),
                ("max_recv_sge", c.max_recv_sge),
                ("max_inline_data", c.max_inline_data),
                ("dev_max_qp_wr", c.dev_max_qp_wr),
                ("dev_max_send_sge", c.dev_max_send_sge),
                ("dev_max_recv_sge", c.dev_max_recv_sge),
            ] {
                d.insert(k.into(), v.into());
            }
        }
        Body::UmemFailed(u) => {
            d.insert("dev".into(), u.dev.as_str().into());
            d.insert("ret".into(), u.ret.into());
            d.insert("size".into(), u.size.into());
            d.insert("memlock".into(), u.memlock.into());
            d.insert("pinned".into(), u.pinned.into());
        }
        Body::Gid(g) => {
            d.insert("dev".into(), g.dev.as_str().into());
            d.insert("port".into(), g.port.into());
            d.insert("index".into(), g.index.into());
            d.insert(
                "gid".into(),
                g.gid.map(|x| crate::format::gid_text(&x)).into(),
            );
            d.insert("gid_type".into(), g.gid_type.into());
            d.insert("netdev".into(), g.netdev.clone().into());
        }
        Body::Counter(c) => {
            d.insert("dev".into(), c.dev.as_str().into());
            d.insert("port".into(), c.port.into());
            d.insert(
                "source".into(),
                if c.hw { "hw_counters" } else { "counters" }.into(),
            );
            d.insert("name".into(), c.name.clone().into());
            d.insert("value".into(), c.value.into());
            d.insert("delta".into(), c.delta.into());
        }
        Body::TcpState(t) => {
            owner(&mut d, t.owner_pid, &t.owner_comm);
            d.insert("saddr".into(), t.tcp.saddr.to_string().into());
            d.insert("sport".into(), t.tcp.sport.into());
            d.insert("daddr".into(), t.tcp.daddr.to_string().into());
            d.insert("dport".into(), t.tcp.dport.into());
            d.insert("old_state".into(), tcp_state_name(t.old_state).into());
            d.insert("new_state".into(), tcp_state_name(t.tcp.state).into());
        }
        Body::WcError(w) => {
            d.insert("dev".into(), w.qp.dev.as_str().into());
            d.insert("qpn".into(), w.qp.qpn.into());
            d.insert("cqn".into(), w.cqn.into());
            d.insert("status".into(), w.status.as_str().into());
            d.insert("vendor_err".into(), w.vendor_err.into());
            owner(&mut d, w.owner_pid, &w.owner_comm);
        }
        Body::CqNotify(n) => {
            d.insert("dev".into(), n.dev.as_str().into());
            d.insert("cqn".into(), n.cqn.into());
            d.insert("notifications".into(), n.count.into());
            owner(&mut d, n.owner_pid, &n.owner_comm);
        }
        Body::VerbsCall(v) => {
            d.insert("func".into(), v.func.clone().into());
            stack(&mut d, "stack", &v.stack);
        }
        Body::CpuSample(c) => {
            stack(&mut d, "user_stack", &c.user);
            stack(&mut d, "kernel_stack", &c.kernel);
        }
        Body::Lost { count, cpu } => {
            d.insert("count".into(), (*count).into());
            // Only when known: recordings before version 3 stored totals over all CPUs.
            if let Some(cpu) = cpu {
                d.insert("cpu".into(), (*cpu).into());
            }
        }
    }
    json!({ "type": rec.body.type_name(), "data": Value::Object(d) })
}

impl<W: Write> Sink for JsonlSink<W> {
    fn record(&mut self, rec: &Record, state: &Correlator) -> io::Result<()> {
        serde_json::to_writer(&mut self.out, &to_json(rec, state.place(rec)))?;
        self.out.write_all(b"\n")?;
        self.out.flush()
    }

    fn finish(&mut self, _state: &Correlator) -> io::Result<()> {
        self.out.flush()
    }
}
