//! Builders of kernel records and recordings for tests, benchmarks and fixtures: wire-format
//! records as the probes write them ([`zeroed`], [`bytes_of`], [`name`]), a recording
//! generator with a clock ([`Gen`]), and the synthetic fixture with one record of every kind
//! ([`all_kinds`]). Not an API.

use rdmatrace_common::event::{
    attr_mask, element, qp_res_change, reason, transport, verbs_func, AsyncEvent, CgroupEvent,
    CmEvent, CounterSample, CpuSampleEvent, CqNotify, CqNotifySample, EventHeader, EventKind,
    GidSample, Owner, PortSample, ProcessEvent, QpCounterSample, QpCreateEvent, QpDestroyEvent,
    QpIdent, QpModifyEvent, QpResSample, QpTraffic, QpTrafficSample, ResourceEvent,
    RetransmitEvent, TcpBytes, TcpBytesSample, TcpStateEvent, TcpTuple, UmemFailedEvent,
    VerbsCallEvent, WcErrorEvent, GID_TYPE_ROCE_V2, STATE_UNKNOWN,
};

use crate::recording::{writer::RecordingWriter, Header};

pub mod fleet;

/// An all-zero `T`.
pub fn zeroed<T: aya::Pod>() -> T {
    let bytes = vec![0u8; std::mem::size_of::<T>()];
    // SAFETY: `bytes` holds size_of::<T>() bytes and T is Pod (all-zero is a valid value);
    // read_unaligned copes with the Vec's alignment.
    unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast::<T>()) }
}

/// The bytes of a Pod value, as the ring buffer carries it.
pub fn bytes_of<T: aya::Pod>(v: &T) -> &[u8] {
    // SAFETY: T is Pod: every byte is initialised and may be viewed as u8 for its lifetime.
    unsafe { std::slice::from_raw_parts((v as *const T).cast::<u8>(), std::mem::size_of::<T>()) }
}

/// `s` NUL padded (and cut) into a fixed C string field.
pub fn name<const N: usize>(s: &str) -> [u8; N] {
    let mut out = [0u8; N];
    let n = s.len().min(N - 1);
    out[..n].copy_from_slice(&s.as_bytes()[..n]);
    out
}

/// An IPv4 address in an AF_INET address field (the first 4 bytes).
pub fn inet(a: [u8; 4]) -> [u8; 16] {
    let mut g = [0u8; 16];
    g[..4].copy_from_slice(&a);
    g
}

/// An IPv4 address as a GID (IPv4-mapped IPv6).
pub fn v4(a: [u8; 4]) -> [u8; 16] {
    let mut g = [0u8; 16];
    g[10] = 0xff;
    g[11] = 0xff;
    g[12..].copy_from_slice(&a);
    g
}

pub fn qp(dev: &str, qpn: u32, qp_type: u32) -> QpIdent {
    QpIdent {
        dev: name(dev),
        qpn,
        qp_type,
    }
}

/// A recording being written, with a monotonic clock that advances `step_ns` per record.
pub struct Gen {
    pub w: RecordingWriter<Vec<u8>>,
    pub ts: u64,
    pub step_ns: u64,
    pub cpu: u32,
}

impl Gen {
    pub fn new(header: &Header, version: u32) -> Gen {
        let w = RecordingWriter::with_version(Vec::new(), header, version)
            .unwrap_or_else(|e| panic!("a writer to memory: {e}"));
        Gen {
            w,
            ts: 1_000_000_000,
            step_ns: 1_000_000,
            cpu: 0,
        }
    }

    /// The header of the next record.
    pub fn header(&mut self, kind: EventKind, pid: u32, comm: &str) -> EventHeader {
        self.ts += self.step_ns;
        EventHeader {
            kind: kind as u32,
            cpu: self.cpu,
            ts_ns: self.ts,
            pid,
            tid: pid,
            comm: name(comm),
        }
    }

    pub fn put<T: aya::Pod>(&mut self, ev: &T) {
        if let Err(e) = self.w.event(bytes_of(ev)) {
            panic!("writing to memory failed: {e}");
        }
    }

    pub fn finish(self) -> Vec<u8> {
        match self.w.finish() {
            Ok((bytes, _)) => bytes,
            Err(e) => panic!("finishing in memory failed: {e}"),
        }
    }
}

/// The header of the synthetic fixture.
pub fn synthetic_header() -> Header {
    Header {
        tool: "rdmatrace synthetic".into(),
        hostname: "synthetic".into(),
        kernel: "6.12.0-synthetic".into(),
        endian: "little".into(),
        // 2026-12-01T00:00:00Z at monotonic 0.
        clock_offset_ns: 1_796_083_200_000_000_000,
        probes: vec!["qp qp_create ib_core:ib_create_qp_user Attached".into()],
        command: Some(vec!["synthetic".into()]),
    }
}

/// `tests/fixtures/synthetic-all-kinds.rdmt`: one record of every kind the probes and
/// samplers write (both retransmit transports, a failed and a successful modify, a named
/// stack), plus a loss, symbol, cgroup and env entries — so every output is shown every kind.
/// The synthetic trainer's cgroup: a burstable pod's containerd container.
pub const SYNTHETIC_CGROUP: &str = "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod0f1e2d3c_4b5a_6978_8796_a5b4c3d2e1f0.slice/cri-containerd-3f2a1b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f708.scope";
/// Its cgroup id.
pub const SYNTHETIC_CGROUP_ID: u64 = 9001;

pub fn all_kinds() -> Vec<u8> {
    let mut g = Gen::new(&synthetic_header(), crate::recording::VERSION);
    let (pid, comm) = (4242, "trainer");
    // The trainer runs in a Kubernetes pod's containerd container.
    if let Err(e) = g.w.cgroup(SYNTHETIC_CGROUP_ID, SYNTHETIC_CGROUP) {
        panic!("{e}");
    }
    let mut cg: CgroupEvent = zeroed();
    cg.header = g.header(EventKind::ProcessCgroup, pid, comm);
    cg.cgroup_id = SYNTHETIC_CGROUP_ID;
    g.put(&cg);
    let mut ev: ProcessEvent = zeroed();
    ev.header = g.header(EventKind::ProcessExec, pid, comm);
    ev.ppid = 1;
    g.put(&ev);
    // Its transport variables, read after its exec (a choice that keeps RDMA on).
    if let Err(e) = g.w.env(pid, "UCX_TLS", "rc,sm,self") {
        panic!("{e}");
    }

    let mut p: PortSample = zeroed();
    p.header = g.header(EventKind::Port, 0, "");
    p.dev = name("rxe0");
    p.port = 1;
    p.state = 4;
    p.active_mtu = 1024;
    p.netdev_mtu = 1500;
    p.link_layer = name("Ethernet");
    p.netdev = name("eth1");
    g.put(&p);

    // Its GID table entry for RoCE v2 over IPv4.
    let mut gid: GidSample = zeroed();
    gid.header = g.header(EventKind::Gid, 0, "");
    gid.dev = name("rxe0");
    gid.port = 1;
    gid.index = 1;
    gid.gid = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 0, 2, 1];
    gid.gid_type = GID_TYPE_ROCE_V2;
    gid.netdev = name("eth1");
    g.put(&gid);

    // A registration the locked-memory limit refused.
    let mut u: UmemFailedEvent = zeroed();
    u.header = g.header(EventKind::UmemFailed, pid, comm);
    u.dev = name("rxe0");
    u.ret = -12;
    u.size = 16 << 20;
    u.memlock = 64 << 10;
    u.pinned_pages = 0;
    g.put(&u);

    let mut r: ResourceEvent = zeroed();
    r.header = g.header(EventKind::ResourceAdd, pid, comm);
    r.dev = name("rxe0");
    r.res_type = 5; // device context
    r.res_id = 1;
    r.owner_pid = pid;
    r.owner_comm = name(comm);
    r.user = 1;
    g.put(&r);
    let mut mr = r;
    mr.header = g.header(EventKind::ResourceAdd, pid, comm);
    mr.res_type = 4; // MR
    mr.res_id = 7;
    mr.lkey = 0x1234;
    mr.rkey = 0x5678;
    mr.length = 1 << 20;
    mr.iova = 0x7f00_0000_0000;
    mr.access = 1 | 2; // LOCAL_WRITE | REMOTE_WRITE
    g.put(&mr);

    let mut v: VerbsCallEvent = zeroed();
    v.header = g.header(EventKind::VerbsCall, pid, comm);
    v.func = verbs_func::IBV_CREATE_QP;
    v.frames = 3;
    v.ips[0] = 0x7f00_0000_1000;
    v.ips[1] = 0x5555_0000_2000;
    v.ips[2] = 0x5555_0000_3000;
    if let Err(e) = g.w.symbol(pid, 0x5555_0000_2000, "create_queue_pair") {
        panic!("{e}");
    }
    if let Err(e) = g.w.symbol(pid, 0x5555_0000_3000, "main") {
        panic!("{e}");
    }
    g.put(&v);

    let mut c: QpCreateEvent = zeroed();
    c.header = g.header(EventKind::QpCreate, pid, comm);
    c.qp = qp("rxe0", 0x11, 2);
    g.put(&c);
    let mut m: QpModifyEvent = zeroed();
    m.header = g.header(EventKind::QpModify, pid, comm);
    m.qp = c.qp;
    m.attr_mask = attr_mask::STATE;
    m.cur_state = STATE_UNKNOWN;
    m.new_state = 1; // INIT
    g.put(&m);
    let mut bad = m;
    bad.header = g.header(EventKind::QpModify, pid, comm);
    bad.new_state = 3; // RTS from INIT: refused
    bad.ret = -22;
    g.put(&bad);
    let mut rtr = m;
    rtr.header = g.header(EventKind::QpModify, pid, comm);
    rtr.attr_mask = attr_mask::STATE | attr_mask::AV | attr_mask::PATH_MTU | attr_mask::DEST_QPN;
    rtr.new_state = 2; // RTR
    rtr.path_mtu = 3;
    rtr.dest_qpn = 0x12;
    rtr.dgid = v4([192, 0, 2, 2]);
    g.put(&rtr);
    let mut rts = m;
    rts.header = g.header(EventKind::QpModify, pid, comm);
    rts.attr_mask = attr_mask::STATE | attr_mask::TIMEOUT | attr_mask::RETRY_CNT;
    rts.new_state = 3; // RTS
    rts.timeout = 14;
    rts.retry_cnt = 7;
    g.put(&rts);

    let mut cm: CmEvent = zeroed();
    cm.header = g.header(EventKind::CmEvent, pid, comm);
    cm.qp = c.qp;
    cm.event = 9; // ESTABLISHED
    cm.owner_pid = pid;
    cm.owner_comm = name(comm);
    cm.cm_id = 3;
    cm.src_family = 2;
    cm.dst_family = 2;
    cm.src_port = 40000;
    cm.dst_port = 7471;
    cm.src_addr = inet([192, 0, 2, 1]);
    cm.dst_addr = inet([192, 0, 2, 2]);
    g.put(&cm);

    let mut t: QpTrafficSample = zeroed();
    t.header = g.header(EventKind::QpTraffic, 0, "");
    t.traffic = QpTraffic {
        qp: c.qp,
        tx_packets: 1024,
        tx_bytes: 4 << 20,
        rx_packets: 512,
        rx_bytes: 32 << 10,
    };
    g.put(&t);

    let mut x: RetransmitEvent = zeroed();
    x.header = g.header(EventKind::Retransmit, 0, "ksoftirqd/0");
    x.qp = c.qp;
    x.transport = transport::RXE;
    x.reason = reason::RXE_RETRANSMIT_TIMER;
    g.put(&x);
    let tuple = TcpTuple {
        family: 2,
        state: 1,
        sport: 55000,
        dport: 5556,
        saddr: inet([192, 0, 2, 1]),
        daddr: inet([192, 0, 2, 2]),
    };
    let mut y: RetransmitEvent = zeroed();
    y.header = g.header(EventKind::Retransmit, 0, "swapper/1");
    y.transport = transport::TCP;
    y.reason = reason::TCP_RETRANSMIT_SKB;
    y.owner = Owner {
        pid,
        _pad: 0,
        comm: name(comm),
    };
    y.tcp = tuple;
    g.put(&y);

    let mut s: TcpStateEvent = zeroed();
    s.header = g.header(EventKind::TcpState, pid, comm);
    s.owner = y.owner;
    s.tcp = tuple;
    s.oldstate = 2; // SYN_SENT -> ESTABLISHED
    g.put(&s);
    let mut b: TcpBytesSample = zeroed();
    b.header = g.header(EventKind::TcpBytes, pid, comm);
    b.bytes = TcpBytes {
        tx_bytes: 2048,
        rx_bytes: 1024,
        tx_calls: 4,
        rx_calls: 2,
        comm: name(comm),
        // The peer of its QP: its control channel.
        daddr: inet([192, 0, 2, 2]),
        family: 2,
        _pad: [0; 6],
    };
    g.put(&b);

    let mut ctr: CounterSample = zeroed();
    ctr.header = g.header(EventKind::Counter, 0, "");
    ctr.dev = name("rxe0");
    ctr.port = 1;
    ctr.hw = 1;
    ctr.name = name("retry_exceeded_err");
    ctr.value = 3;
    ctr.delta = 1;
    g.put(&ctr);
    let mut qc: QpCounterSample = zeroed();
    qc.header = g.header(EventKind::QpCounter, pid, comm);
    qc.dev = name("rxe0");
    qc.port = 1;
    qc.counter_id = 2;
    qc.qpns[0] = 0x11;
    qc.nqpns = 1;
    qc.name = name("local_ack_timeout_err");
    qc.value = 5;
    qc.delta = 2;
    g.put(&qc);

    let mut n: CqNotifySample = zeroed();
    n.header = g.header(EventKind::CqNotify, 0, "");
    n.notify = CqNotify {
        dev: name("rxe0"),
        cqn: 4,
        owner_pid: pid,
        owner_comm: name(comm),
        count: 17,
    };
    g.put(&n);

    let mut w: WcErrorEvent = zeroed();
    w.header = g.header(EventKind::WcError, 0, "kworker/1:2");
    w.qp = c.qp;
    w.cqn = 4;
    w.status = 12; // RETRY_EXC_ERR
    w.owner_pid = pid;
    w.owner_comm = name(comm);
    g.put(&w);

    let mut q: QpResSample = zeroed();
    q.header = g.header(EventKind::QpRes, pid, comm);
    q.qp = c.qp;
    q.port = 1;
    q.rqpn = 0x12;
    q.sq_psn = 100;
    q.rq_psn = 200;
    q.state = 6; // ERR, moved by the driver
    q.change = qp_res_change::CHANGED;
    g.put(&q);

    let mut a: AsyncEvent = zeroed();
    a.header = g.header(EventKind::AsyncEvent, 0, "kworker/0:1");
    a.qp = c.qp;
    a.event_type = 1; // QP_FATAL
    a.element = element::QP;
    g.put(&a);

    let mut cpu: CpuSampleEvent = zeroed();
    cpu.header = g.header(EventKind::CpuSample, pid, comm);
    cpu.user_frames = 1;
    cpu.user_ips[0] = 0x5555_0000_3000;
    cpu.kernel_frames = 1;
    cpu.kernel_ips[0] = 0xffff_ffff_8100_1000;
    if let Err(e) = g.w.symbol(0, 0xffff_ffff_8100_1000, "tcp_sendmsg") {
        panic!("{e}");
    }
    g.put(&cpu);

    if let Err(e) = g.w.lost(g.ts + 1, Some(1), 3) {
        panic!("{e}");
    }
    let mut d: QpDestroyEvent = zeroed();
    d.header = g.header(EventKind::QpDestroy, pid, comm);
    d.qp = c.qp;
    g.put(&d);
    let mut del = r;
    del.header = g.header(EventKind::ResourceDel, pid, comm);
    g.put(&del);
    let mut exit: ProcessEvent = zeroed();
    exit.header = g.header(EventKind::ProcessExit, pid, comm);
    exit.exit_code = 1 << 8;
    g.put(&exit);
    g.finish()
}

/// A decoded record of `pid`/`comm` at monotonic `ts_ns` (wall time the same number).
pub fn record(pid: u32, comm: &str, ts_ns: u64, body: crate::event::Body) -> crate::event::Record {
    record_at(ts_ns, ts_ns, pid, comm, body)
}

/// A decoded record with its monotonic and wall times.
pub fn record_at(
    ts_ns: u64,
    wall_ns: u64,
    pid: u32,
    comm: &str,
    body: crate::event::Body,
) -> crate::event::Record {
    crate::event::Record {
        ts_ns,
        wall_ns,
        cpu: 0,
        pid,
        tid: pid,
        comm: comm.into(),
        body,
    }
}

/// An RC QP on `dev`.
pub fn qp_info(dev: &str, qpn: u32) -> crate::event::QpInfo {
    crate::event::QpInfo {
        key: crate::event::QpKey {
            dev: dev.into(),
            qpn,
        },
        qp_type: 2,
    }
}

/// A modify of an RC QP on `dev` to `to` (only the state in the mask), returning `ret`.
pub fn modify(dev: &str, qpn: u32, to: crate::event::QpState, ret: i32) -> crate::event::Body {
    crate::event::Body::QpModify {
        qp: qp_info(dev, qpn),
        attrs: crate::event::ModifyAttrs {
            attr_mask: attr_mask::STATE,
            new_state: Some(to),
            ..Default::default()
        },
        ret,
    }
}
