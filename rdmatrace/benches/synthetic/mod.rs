//! A large synthetic recording, written with the real [`RecordingWriter`]: jobs that open a
//! device, create and connect QPs, then mostly retransmit, sample traffic and talk TCP, and exit.
//! Shared by the replay benchmark (throughput) and its size report (bytes/event).

use rdmatrace::{
    recording::Header,
    testing::{name, zeroed, Gen},
};
use rdmatrace_common::event::{
    attr_mask, element, reason, transport, AsyncEvent, CmEvent, CqNotifySample, EventHeader,
    EventKind, ProcessEvent, QpCreateEvent, QpDestroyEvent, QpIdent, QpModifyEvent,
    QpTrafficSample, ResourceEvent, RetransmitEvent, TcpBytesSample, TcpStateEvent, WcErrorEvent,
};

/// The bench's clock: 1 us plus a little per CPU between records, CPUs in turn.
fn header(g: &mut Gen, kind: EventKind, pid: u32, comm: &str) -> EventHeader {
    g.step_ns = 1_000 + u64::from(g.cpu) * 7;
    g.cpu = (g.cpu + 1) % 8;
    g.header(kind, pid, comm)
}

fn qp(dev: &str, qpn: u32) -> QpIdent {
    rdmatrace::testing::qp(dev, qpn, 2)
}

/// One job: a process with `qps` QPs on rxe0 and `body` events in its steady state.
fn job(g: &mut Gen, pid: u32, qps: u32, body: u32) {
    let comm = format!("job-{}", pid % 97);
    let mut ev: ProcessEvent = zeroed();
    ev.header = header(g, EventKind::ProcessExec, pid, &comm);
    ev.ppid = 1;
    g.put(&ev);
    for (res_type, id) in [(5u32, pid), (0, pid), (1, pid), (4, pid)] {
        let mut r: ResourceEvent = zeroed();
        r.header = header(g, EventKind::ResourceAdd, pid, &comm);
        r.dev = name("rxe0");
        r.res_type = res_type;
        r.res_id = id;
        r.owner_pid = pid;
        r.owner_comm = name(&comm);
        r.user = 1;
        r.cqe = 256;
        r.length = 1 << 20;
        r.access = 7;
        g.put(&r);
    }
    let base = (pid * 16) & 0xff_ffff;
    for q in 0..qps {
        let mut c: QpCreateEvent = zeroed();
        c.header = header(g, EventKind::QpCreate, pid, &comm);
        c.qp = qp("rxe0", base + q);
        g.put(&c);
        for (state, extra) in [
            (1u32, 0u32),
            (2, attr_mask::AV | attr_mask::DEST_QPN | attr_mask::PATH_MTU),
            (
                3,
                attr_mask::TIMEOUT | attr_mask::RETRY_CNT | attr_mask::SQ_PSN,
            ),
        ] {
            let mut m: QpModifyEvent = zeroed();
            m.header = header(g, EventKind::QpModify, pid, &comm);
            m.qp = qp("rxe0", base + q);
            m.attr_mask = attr_mask::STATE | extra;
            m.new_state = state;
            m.dest_qpn = base + q + 1;
            m.path_mtu = 3;
            m.timeout = 14;
            m.retry_cnt = 7;
            m.dgid = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 0, 2, 2];
            g.put(&m);
        }
    }
    for i in 0..body {
        let q = base + i % qps.max(1);
        match i % 20 {
            0..=7 => {
                let mut r: RetransmitEvent = zeroed();
                r.header = header(g, EventKind::Retransmit, 0, "ksoftirqd/1");
                r.qp = qp("rxe0", q);
                r.transport = transport::RXE;
                r.reason = reason::RXE_RETRANSMIT_TIMER;
                g.put(&r);
            }
            8..=11 => {
                let mut t: QpTrafficSample = zeroed();
                t.header = header(g, EventKind::QpTraffic, 0, "");
                t.traffic.qp = qp("rxe0", q);
                t.traffic.tx_packets = u64::from(i) * 3;
                t.traffic.tx_bytes = u64::from(i) * 3 * 4096;
                g.put(&t);
            }
            12 | 13 => {
                let mut t: TcpBytesSample = zeroed();
                t.header = header(g, EventKind::TcpBytes, pid, &comm);
                t.bytes.tx_bytes = u64::from(i) * 100;
                t.bytes.tx_calls = u64::from(i);
                g.put(&t);
            }
            14 => {
                let mut t: TcpStateEvent = zeroed();
                t.header = header(g, EventKind::TcpState, pid, &comm);
                t.tcp.family = 2;
                t.tcp.state = 1;
                t.tcp.sport = 40000 + (i % 1000) as u16;
                t.tcp.dport = 18515;
                t.tcp.saddr[..4].copy_from_slice(&[192, 0, 2, 1]);
                t.tcp.daddr[..4].copy_from_slice(&[192, 0, 2, 2]);
                t.oldstate = 2;
                g.put(&t);
            }
            15 => {
                let mut r: RetransmitEvent = zeroed();
                r.header = header(g, EventKind::Retransmit, 0, "swapper/0");
                r.transport = transport::TCP;
                r.reason = reason::TCP_RETRANSMIT_SKB;
                r.owner.pid = pid;
                r.owner.comm = name(&comm);
                r.tcp.family = 2;
                r.tcp.sport = 40000;
                r.tcp.dport = 18515;
                g.put(&r);
            }
            16 => {
                let mut c: CqNotifySample = zeroed();
                c.header = header(g, EventKind::CqNotify, 0, "");
                c.notify.dev = name("rxe0");
                c.notify.cqn = pid;
                c.notify.owner_pid = pid;
                c.notify.count = u64::from(i);
                g.put(&c);
            }
            17 => {
                let mut w: WcErrorEvent = zeroed();
                w.header = header(g, EventKind::WcError, pid, &comm);
                w.qp = qp("rxe0", q);
                w.status = 12;
                w.owner_pid = pid;
                g.put(&w);
            }
            18 => {
                let mut a: AsyncEvent = zeroed();
                a.header = header(g, EventKind::AsyncEvent, pid, &comm);
                a.qp = qp("rxe0", q);
                a.element = element::QP;
                a.event_type = 3;
                g.put(&a);
            }
            _ => {
                let mut c: CmEvent = zeroed();
                c.header = header(g, EventKind::CmEvent, pid, &comm);
                c.qp = qp("rxe0", q);
                c.event = 9;
                c.owner_pid = pid;
                c.src_family = 2;
                c.dst_family = 2;
                g.put(&c);
            }
        }
    }
    for q in 0..qps {
        let mut d: QpDestroyEvent = zeroed();
        d.header = header(g, EventKind::QpDestroy, pid, &comm);
        d.qp = qp("rxe0", base + q);
        g.put(&d);
    }
    let mut ev: ProcessEvent = zeroed();
    ev.header = header(g, EventKind::ProcessExit, pid, &comm);
    ev.ppid = 1;
    g.put(&ev);
}

/// A recording of `jobs` jobs (about 230 events each) and its event count.
pub fn recording(jobs: u32) -> (Vec<u8>, u64) {
    recording_in(jobs, rdmatrace::recording::VERSION)
}

/// The same recording in format `version` (size comparisons).
pub fn recording_in(jobs: u32, version: u32) -> (Vec<u8>, u64) {
    let header = Header {
        tool: "rdmatrace bench".into(),
        hostname: "bench".into(),
        kernel: "synthetic".into(),
        endian: "little".into(),
        clock_offset_ns: 1_700_000_000_000_000_000,
        probes: Vec::new(),
        command: None,
    };
    let mut g = Gen::new(&header, version);
    g.ts = 0;
    for j in 0..jobs {
        job(&mut g, 1000 + j, 4, 200);
        // The recorder flushes a chunk at least once a second; a job takes about that long.
        if j % 4 == 3 {
            if let Err(e) = g.w.flush_chunk() {
                panic!("writing to memory failed: {e}");
            }
        }
    }
    let events = g.w.events;
    (g.finish(), events)
}
