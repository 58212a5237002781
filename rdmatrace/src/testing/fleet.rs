//! Synthetic recordings of a fleet, for the multi-host bench and tests: host `i` of `n`
//! (`host-i`) has RC QPs connected to host `i ^ 1`'s (hosts in pairs; a last host alone
//! connects its QPs to each other), each with its GID table sampled, its QPs created and moved
//! to RTR/RTS as a real exchange would (the peer's QP exists first), then traffic samples and
//! retransmits until `events` records. Host `i`'s wall clock is [`skew_ns`]`(i)` off the truth.

use rdmatrace_common::event::{
    attr_mask, reason, transport, EventKind, GidSample, PortSample, QpCreateEvent, QpModifyEvent,
    QpTraffic, QpTrafficSample, RetransmitEvent, GID_TYPE_ROCE_V2,
};

use super::{name, qp, v4, zeroed, Gen};
use crate::recording::Header;

/// Host `i`'s clock error: ahead by up to ~3 s, different for every host.
pub fn skew_ns(i: usize) -> i64 {
    ((i as i64 * 7_919) % 6_000 - 3_000) * 1_000_000 + i as i64 * 137
}

/// Host `i`'s address (its GID is the IPv4-mapped form).
pub fn addr(i: usize) -> [u8; 4] {
    [10, (i >> 8) as u8, (i & 0xff) as u8, 1]
}

/// The QPN of QP `j` on host `i`.
pub fn qpn(i: usize, j: u32) -> u32 {
    0x100 + j * 2 + (i as u32 & 1)
}

/// The host `i`'s QPs talk to, and whether that host is itself.
fn peer(i: usize, n: usize) -> usize {
    if i ^ 1 < n {
        i ^ 1
    } else {
        i
    }
}

/// Host `i` of `n`: `qps` connected RC QPs, `events` records in all (at least the set-up).
pub fn host(i: usize, n: usize, qps: u32, events: u64) -> Vec<u8> {
    let header = Header {
        tool: "rdmatrace synthetic fleet".into(),
        hostname: format!("host-{i}"),
        kernel: "6.12.0-synthetic".into(),
        endian: "little".into(),
        // 2026-12-01T00:00:00Z at monotonic 0, plus this host's clock error.
        clock_offset_ns: 1_796_083_200_000_000_000 + skew_ns(i),
        probes: vec!["qp qp_create ib_core:ib_create_qp_user Attached".into()],
        command: None,
    };
    let mut g = Gen::new(&header, crate::recording::VERSION);
    let (pid, comm) = (1000 + i as u32, "trainer");
    let mut p: PortSample = zeroed();
    p.header = g.header(EventKind::Port, 0, "");
    p.dev = name("rxe0");
    p.port = 1;
    p.state = 4;
    p.active_mtu = 4096;
    p.netdev_mtu = 9000;
    p.link_layer = name("Ethernet");
    p.netdev = name("eth0");
    g.put(&p);
    let mut gid: GidSample = zeroed();
    gid.header = g.header(EventKind::Gid, 0, "");
    gid.dev = name("rxe0");
    gid.port = 1;
    gid.index = 1;
    gid.gid = v4(addr(i));
    gid.gid_type = GID_TYPE_ROCE_V2;
    gid.netdev = name("eth0");
    g.put(&gid);
    let other = peer(i, n);
    let alone = other == i;
    // QP j is created at 2 s + j ms (true time) on both hosts, RTR 300 µs later on the even
    // host and 400 µs on the odd one: each after its peer's create.
    for j in 0..qps {
        let (me, to) = if alone {
            (qpn(i, j), qpn(i, j ^ 1))
        } else {
            (qpn(i, j), qpn(other, j))
        };
        let t0 = 2_000_000_000 + u64::from(j) * 1_000_000;
        let ident = qp("rxe0", me, 2);
        g.ts = t0 - g.step_ns;
        let mut c: QpCreateEvent = zeroed();
        c.header = g.header(EventKind::QpCreate, pid, comm);
        c.qp = ident;
        g.put(&c);
        let rtr_after = if i & 1 == 0 { 300_000 } else { 400_000 };
        for (state, at) in [(1, 100_000), (2, rtr_after), (3, rtr_after + 50_000)] {
            g.ts = t0 + at - g.step_ns;
            let mut m: QpModifyEvent = zeroed();
            m.header = g.header(EventKind::QpModify, pid, comm);
            m.qp = ident;
            m.attr_mask = attr_mask::STATE;
            m.cur_state = state - 1;
            m.new_state = state;
            if state == 2 {
                m.attr_mask |= attr_mask::AV | attr_mask::DEST_QPN | attr_mask::PATH_MTU;
                m.dest_qpn = to;
                m.dgid = v4(addr(if alone { i } else { other }));
                m.path_mtu = 5;
                m.sgid_index = 1;
                m.av_flags = rdmatrace_common::event::AV_SGID_INDEX;
            }
            g.put(&m);
        }
    }
    // Traffic: a sample per QP in turn, a retransmit every 50 records, 1 µs apart.
    g.step_ns = 1_000;
    g.ts = 3_000_000_000;
    let mut written = u64::from(qps) * 4 + 2;
    let mut j = 0;
    while written < events && qps > 0 {
        let ident = qp("rxe0", qpn(i, j), 2);
        if written % 50 == 0 {
            let mut x: RetransmitEvent = zeroed();
            x.header = g.header(EventKind::Retransmit, 0, "ksoftirqd/0");
            x.qp = ident;
            x.transport = transport::RXE;
            x.reason = reason::RXE_RETRANSMIT_TIMER;
            g.put(&x);
        } else {
            let mut t: QpTrafficSample = zeroed();
            t.header = g.header(EventKind::QpTraffic, 0, "");
            t.traffic = QpTraffic {
                qp: ident,
                tx_packets: 16,
                tx_bytes: 16 * 4096,
                rx_packets: 1,
                rx_bytes: 64,
            };
            g.put(&t);
        }
        written += 1;
        j = (j + 1) % qps;
    }
    g.finish()
}
