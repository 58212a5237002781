//! Verdicts without per-QP traffic: RDMA bytes estimated from port counters.
use super::diagnosis_tests::{traffic, Analysis};
use super::*;
use crate::event::{CounterDelta, ModifyAttrs, PortInfo, TcpBytesDelta};
use crate::testing::qp_info;

const S: u64 = 1_000_000_000;

fn counter(name: &str, delta: u64) -> Body {
    Body::Counter(CounterDelta {
        dev: "rxe0".into(),
        port: 1,
        hw: true,
        name: name.into(),
        value: 1_000_000 + delta,
        delta,
    })
}

/// The first sample: the port and its traffic counters, unchanged.
fn announce(a: &mut Analysis, ts: u64) {
    a.push(
        0,
        "",
        ts,
        Body::Port(PortInfo {
            dev: "rxe0".into(),
            port: 1,
            state: "ACTIVE",
            active_mtu: Some(1024),
            netdev_mtu: Some(1500),
            link_layer: "Ethernet".into(),
            netdev: "eth1".into(),
        }),
    );
    a.push(0, "", ts, counter("sent_pkts", 0));
    a.push(0, "", ts, counter("rcvd_pkts", 0));
}

/// RC QP `qpn` of `pid` created at `ts` and in RTS a millisecond later.
fn connect(a: &mut Analysis, pid: u32, comm: &str, qpn: u32, ts: u64) {
    let qp = qp_info("rxe0", qpn);
    a.push(pid, comm, ts, Body::QpCreate { qp, ret: 0 });
    for (i, to) in [QpState::Init, QpState::Rtr, QpState::Rts]
        .into_iter()
        .enumerate()
    {
        let attrs = ModifyAttrs {
            attr_mask: 1,
            new_state: Some(to),
            ..Default::default()
        };
        let body = Body::QpModify {
            qp: qp_info("rxe0", qpn),
            attrs,
            ret: 0,
        };
        a.push(pid, comm, ts + (i as u64 + 1) * 300_000, body);
    }
}

fn destroy(a: &mut Analysis, pid: u32, comm: &str, qpn: u32, ts: u64) {
    let qp = qp_info("rxe0", qpn);
    a.push(pid, comm, ts, Body::QpDestroy { qp, ret: 0 });
}

fn tcp(a: &mut Analysis, pid: u32, comm: &str, ts: u64, bytes: u64) {
    let body = Body::TcpBytes(TcpBytesDelta {
        tx_bytes: bytes,
        rx_bytes: 0,
        tx_calls: bytes >> 16,
        rx_calls: 0,
        peer: None,
    });
    a.push(pid, comm, ts, body);
}

fn proc_of(r: &Report, pid: u32) -> &ProcReport {
    r.processes
        .iter()
        .find(|p| p.stats.pid == pid)
        .unwrap_or_else(|| panic!("no process {pid}: {:#?}", r.processes))
}

#[test]
fn port_packets_make_an_rdma_verdict_and_a_connected_qp_that_moved_none_falls_back() {
    let mut a = Analysis::default();
    announce(&mut a, S);
    connect(&mut a, 7, "mover", 0x11, 2 * S);
    a.push(0, "", 3 * S, counter("sent_pkts", 16_400));
    a.push(0, "", 3 * S, counter("rcvd_pkts", 900));
    destroy(&mut a, 7, "mover", 0x11, 3 * S + 1);
    // Long after: a QP connected, and its data over TCP; the port counters do not move.
    connect(&mut a, 8, "fallback", 0x12, 20 * S);
    tcp(&mut a, 8, "fallback", 21 * S, 8 << 20);
    destroy(&mut a, 8, "fallback", 0x12, 22 * S);
    let r = a.finish();
    let mover = proc_of(&r, 7);
    assert_eq!(mover.verdict, Verdict::Rdma, "{:?}", mover.evidence);
    let e = mover.stats.rdma_estimate.expect("estimate");
    assert_eq!(
        (
            e.tx_packets,
            e.tx_bytes,
            e.rx_packets,
            e.from_packets,
            e.shared
        ),
        (16_400, 16_400 * 1024, 900, true, false)
    );
    assert!(
        mover.evidence.iter().any(|l| l
            == "about 16.0 MiB sent and 900.0 KiB received on its QPs (16400 / 900 packets), \
                estimated: the port's packet counters times its MTU (an upper bound)"),
        "{:?}",
        mover.evidence
    );
    let fb = proc_of(&r, 8);
    assert_eq!(fb.verdict, Verdict::TcpFallback, "{:?}", fb.evidence);
    assert_eq!(
        fb.stats.rdma_estimate.map(|e| (e.tx_bytes, e.from_packets)),
        Some((0, true))
    );
}

#[test]
fn a_counter_change_is_shared_by_connected_qp_time_in_the_interval() {
    let mut a = Analysis::default();
    announce(&mut a, S);
    connect(&mut a, 7, "a", 0x11, S);
    // 8 connects half-way through the next interval.
    connect(&mut a, 8, "b", 0x12, 3 * S / 2);
    a.push(0, "", 2 * S, counter("sent_pkts", 3000));
    let r = a.finish();
    let (a7, a8) = (
        proc_of(&r, 7).stats.rdma_estimate.expect("7"),
        proc_of(&r, 8).stats.rdma_estimate.expect("8"),
    );
    // 7 was connected for ~1 s of the interval, 8 for ~0.5 s.
    assert!((1990..=2010).contains(&a7.tx_packets), "{a7:?}");
    assert!((990..=1010).contains(&a8.tx_packets), "{a8:?}");
    assert!(a7.shared && a8.shared);
    assert!(proc_of(&r, 8).evidence.iter().any(
        |l| l.ends_with("shared by connected QP-time with other processes on the same device")
    ));
}

#[test]
fn byte_counters_are_preferred_to_packets_times_the_mtu() {
    let mut a = Analysis::default();
    a.push(
        0,
        "",
        S,
        Body::Counter(CounterDelta {
            dev: "rxe0".into(),
            port: 1,
            hw: false,
            name: "port_xmit_data".into(),
            value: 0,
            delta: 0,
        }),
    );
    a.push(0, "", S, counter("port_xmit_packets", 0));
    connect(&mut a, 7, "mover", 0x11, S);
    a.push(
        0,
        "",
        2 * S,
        Body::Counter(CounterDelta {
            dev: "rxe0".into(),
            port: 1,
            hw: false,
            name: "port_xmit_data".into(),
            value: 1 << 20,
            delta: 1 << 20,
        }),
    );
    a.push(0, "", 2 * S, counter("port_xmit_packets", 1100));
    let e = a.finish().processes[0]
        .stats
        .rdma_estimate
        .expect("estimate");
    assert_eq!(
        (e.tx_bytes, e.tx_packets, e.from_packets),
        (4 << 20, 1100, false)
    );
}

#[test]
fn without_sampled_counters_there_is_no_estimate_and_per_qp_traffic_wins() {
    // No counters: RDMA bytes unknown, TCP on the path makes it mixed (as before).
    let mut a = Analysis::default();
    connect(&mut a, 7, "mover", 0x11, S);
    tcp(&mut a, 7, "mover", 2 * S, 8 << 20);
    let r = a.finish();
    assert_eq!(proc_of(&r, 7).stats.rdma_estimate, None);
    assert_eq!(proc_of(&r, 7).verdict, Verdict::Mixed);
    // A per-QP source (rxe) is measured: the estimate is not used.
    let mut a = Analysis::default();
    announce(&mut a, S);
    connect(&mut a, 7, "mover", 0x11, S);
    a.push(0, "", 2 * S, traffic(0x11, 7, 0, 0));
    a.push(0, "", 2 * S, counter("sent_pkts", 5000));
    tcp(&mut a, 7, "mover", 2 * S, 8 << 20);
    let r = a.finish();
    assert_eq!(proc_of(&r, 7).verdict, Verdict::TcpFallback);
    assert!(!proc_of(&r, 7)
        .evidence
        .iter()
        .any(|l| l.contains("estimated")));
}
