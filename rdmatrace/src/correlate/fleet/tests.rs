//! Pairing, clock alignment and localization on hand-made reports (the lab tests check them
//! against real programs on two hosts).

use super::*;
use crate::correlate::analysis::handshakes::{self, NetEnd};
use crate::{
    correlate::analysis::{ProcReport, ProcStats, Verdict},
    event::QpKey,
};

const S: u64 = 1_000_000_000;

fn gid(last: u8) -> [u8; 16] {
    let mut g = [0u8; 16];
    g[10] = 0xff;
    g[11] = 0xff;
    g[12..].copy_from_slice(&[192, 0, 2, last]);
    g
}

/// An RC QP `qpn` on `rxe0` with GID `me`, told peer `peer_qpn` at `peer`; created at
/// `created` s, RTR at `rtr` s (monotonic).
fn qp(qpn: u32, me: u8, peer_qpn: u32, peer: u8, created: f64, rtr: f64) -> QpLife {
    let ns = |s: f64| (s * 1e9) as u64;
    QpLife {
        key: QpKey {
            dev: "rxe0".into(),
            qpn,
        },
        owner_pid: 100 + qpn,
        owner_comm: "ib_write_bw".into(),
        qp_type: 2,
        created_ns: ns(created),
        destroyed_ns: Some(ns(rtr + 5.0)),
        state: Some(crate::event::QpState::Rts),
        state_since_ns: ns(rtr),
        time_in: Default::default(),
        peer_qpn: Some(peer_qpn),
        peer_gid: Some(gid(peer)),
        sgid_index: Some(1),
        local_gid: Some(gid(me)),
        rtr_ns: Some(ns(rtr)),
        rts_ns: Some(ns(rtr)),
        err_ns: None,
        tx_bytes: 0,
        tx_packets: 0,
        rx_bytes: 0,
        rx_packets: 0,
        retransmits: 0,
        rnr_retransmits: 0,
        wc_errors: 0,
        failed_modifies: 0,
    }
}

/// Host `name` whose wall clock is `clock` s ahead of the truth, monotonic = truth - `boot`.
fn host(name: &str, clock: f64, boot: f64, qps: Vec<QpLife>) -> HostInput {
    HostInput {
        host: name.into(),
        clock_offset_ns: ((1000.0 + boot + clock) * 1e9) as i64,
        report: Report {
            qps,
            ..Default::default()
        },
    }
}

#[test]
fn ends_pair_by_gid_and_qpn_both_ways_and_a_stranger_stays_alone_with_why() {
    // a (192.0.2.1) QP 0x11 <-> b (192.0.2.2) QP 0x12; a's 0x13 talks to 192.0.2.9.
    let a = host(
        "lab-a",
        0.0,
        0.0,
        vec![
            qp(0x11, 1, 0x12, 2, 10.0, 10.2),
            qp(0x13, 1, 0x40, 9, 11.0, 11.1),
        ],
    );
    let b = host("lab-b", 2.5, 3.0, vec![qp(0x12, 2, 0x11, 1, 7.05, 7.15)]);
    let f = Fleet::build(vec![a, b]);
    assert_eq!(f.connections.len(), 2);
    let c1 = &f.connections[0];
    assert_eq!(
        c1.ends,
        vec![End { host: 0, qp: 0 }, End { host: 1, qp: 0 }]
    );
    let c2 = &f.connections[1];
    assert!(!c2.paired());
    let why = c2.unpaired.as_deref().unwrap_or_default();
    assert!(why.contains("192.0.2.9") && why.contains("0x40"), "{why}");
}

#[test]
fn a_clock_set_off_by_seconds_is_recovered_within_the_handshake_bounds() {
    // Truth: a creates at 10.00, b at 10.05; b RTR at 10.15, a RTR at 10.20. b's clock is
    // 2.5 s ahead, so the correction is -2.5 s.
    let a = host("lab-a", 0.0, 0.0, vec![qp(0x11, 1, 0x12, 2, 10.0, 10.2)]);
    let b = host("lab-b", 2.5, 3.0, vec![qp(0x12, 2, 0x11, 1, 7.05, 7.15)]);
    let f = Fleet::build(vec![a, b]);
    let c = &f.clocks[1];
    assert!(c.aligned);
    let err = (c.offset_ns + 2_500_000_000).unsigned_abs();
    assert!(err <= c.uncertainty_ns, "{c:?}");
    // The bound is half the two handshakes together: (10.20 - 10.00) + (10.15 - 10.05) = 0.3 s.
    assert_eq!(c.uncertainty_ns, 150_000_000, "{c:?}");
    assert_eq!(f.clocks[0].offset_ns, 0);
    // Aligned times of b's RTR come out at the truth (within the bound).
    let rtr_b = f.aligned(1, f.hosts[1].report.qps[0].rtr_ns.unwrap_or_default());
    let truth = (1010.15 * 1e9) as u64;
    assert!(
        rtr_b.abs_diff(truth) <= c.uncertainty_ns,
        "{rtr_b} vs {truth}"
    );
}

#[test]
fn more_connections_narrow_the_bound_and_a_lonely_host_is_said_unaligned() {
    let one = Fleet::build(vec![
        host("a", 0.0, 0.0, vec![qp(0x11, 1, 0x12, 2, 10.0, 10.4)]),
        host("b", -1.0, 0.0, vec![qp(0x12, 2, 0x11, 1, 10.1, 10.3)]),
    ]);
    let two = Fleet::build(vec![
        host(
            "a",
            0.0,
            0.0,
            vec![
                qp(0x11, 1, 0x12, 2, 10.0, 10.4),
                qp(0x15, 1, 0x16, 2, 20.0, 20.05),
            ],
        ),
        host(
            "b",
            -1.0,
            0.0,
            vec![
                qp(0x12, 2, 0x11, 1, 10.1, 10.3),
                qp(0x16, 2, 0x15, 1, 20.02, 20.04),
            ],
        ),
        host("c", 7.0, 0.0, vec![]),
    ]);
    assert!(two.clocks[1].uncertainty_ns < one.clocks[1].uncertainty_ns);
    // b's clock is 1 s behind: the correction is +1 s.
    let err = (two.clocks[1].offset_ns - 1_000_000_000).unsigned_abs();
    assert!(err <= two.clocks[1].uncertainty_ns, "{:?}", two.clocks[1]);
    assert!(!two.clocks[2].aligned);
    assert!(two.clocks[2].basis.contains("not aligned"));
}

fn counters(h: &mut HostInput, list: &[(&str, u64)]) {
    h.report.port_counters = list
        .iter()
        .map(|(n, v)| ("rxe0".into(), 1, n.to_string(), *v))
        .collect();
}

#[test]
fn requests_lost_on_the_way_out_and_acks_lost_on_the_way_back_point_opposite_ways() {
    let pair = || {
        let mut qa = qp(0x11, 1, 0x12, 2, 10.0, 10.2);
        qa.tx_packets = 10_000;
        (
            host("lab-a", 0.0, 0.0, vec![qa]),
            host("lab-b", 0.0, 0.0, vec![qp(0x12, 2, 0x11, 1, 10.05, 10.15)]),
        )
    };
    // Loss on a's egress: b sees gaps, a gets NAKs.
    let (mut a, mut b) = pair();
    counters(
        &mut a,
        &[("rcvd_seq_err", 250), ("completer_retry_err", 30)],
    );
    counters(&mut b, &[("out_of_seq_request", 300)]);
    let f = Fleet::build(vec![a, b]);
    assert_eq!(f.faults.len(), 1, "{:?}", f.faults);
    let x = &f.faults[0];
    assert_eq!(
        (x.kind, &*x.from_host, &*x.to_host),
        (PACKET_LOSS_KIND, "lab-a", "lab-b")
    );
    // Loss on b's egress: a's timer fires, b sees duplicates.
    let (mut a, mut b) = pair();
    a.report.qps[0].retransmits = 40;
    counters(&mut a, &[("completer_retry_err", 40)]);
    counters(
        &mut b,
        &[("duplicate_request", 40), ("out_of_seq_request", 2)],
    );
    let f = Fleet::build(vec![a, b]);
    assert_eq!(f.faults.len(), 1, "{:?}", f.faults);
    let x = &f.faults[0];
    assert_eq!(
        (x.kind, &*x.from_host, &*x.to_host),
        (PACKET_LOSS_KIND, "lab-b", "lab-a")
    );
    // A few of either (a real wire's noise) is no fault.
    let (mut a, mut b) = pair();
    counters(&mut a, &[("rcvd_seq_err", 3)]);
    counters(
        &mut b,
        &[("out_of_seq_request", 4), ("duplicate_request", 2)],
    );
    assert!(Fleet::build(vec![a, b]).faults.is_empty());
}

const PACKET_LOSS_KIND: &str = faults::PACKET_LOSS;

#[test]
fn a_peer_killed_while_the_other_end_retries_is_named_the_side_at_fault() {
    let mut qa = qp(0x11, 1, 0x12, 2, 10.0, 10.2);
    qa.retransmits = 500;
    qa.destroyed_ns = Some(130 * S);
    let qb = qp(0x12, 2, 0x11, 1, 10.05, 10.15);
    let mut b = host("lab-b", 0.0, 0.0, vec![qb]);
    b.report.processes.push(ProcReport {
        stats: ProcStats {
            pid: 0x12 + 100,
            comm: "ib_write_bw".into(),
            exit_code: Some(9),
            exit_ns: Some(15 * S),
            ..Default::default()
        },
        verdict: Verdict::Rdma,
        evidence: vec![],
    });
    let f = Fleet::build(vec![host("lab-a", 0.0, 0.0, vec![qa]), b]);
    let dead: Vec<&Fault> = f
        .faults
        .iter()
        .filter(|x| x.kind == faults::PEER_DEAD)
        .collect();
    assert_eq!(dead.len(), 1, "{:?}", f.faults);
    assert_eq!((&*dead[0].from_host, &*dead[0].to_host), ("lab-a", "lab-b"));
    assert!(
        dead[0].evidence[0].contains("signal 9"),
        "{:?}",
        dead[0].evidence
    );
}

fn net(kind: handshakes::Kind, local: &str, remote: &str, steps: &[(&str, f64)]) -> NetEnd {
    NetEnd {
        kind,
        local: local.parse().expect("addr"),
        remote: remote.parse().expect("addr"),
        pid: 7,
        comm: "prog".into(),
        dev: None,
        qpn: None,
        steps: steps
            .iter()
            .map(|(n, t)| (n.to_string(), (t * 1e9) as u64))
            .collect(),
    }
}

#[test]
fn rdma_cm_and_tcp_handshakes_alone_bound_the_clock_on_both_sides() {
    use handshakes::Kind::{Cm, Tcp};
    // Truth: b's clock 3 s behind a's (correction +3 s). One-way delay 1 ms.
    // CM: b active (ROUTE_RESOLVED 10.000, REP received 10.012), a passive (REQ received
    // 10.001, RTU received 10.013).
    let mut a = host("a", 0.0, 0.0, vec![]);
    let mut b = host("b", -3.0, 0.0, vec![]);
    a.report.net_ends.push(net(
        Cm,
        "192.0.2.1:7174",
        "192.0.2.2:5000",
        &[("CONNECT_REQUEST", 10.001), ("ESTABLISHED", 10.013)],
    ));
    b.report.net_ends.push(net(
        Cm,
        "192.0.2.2:5000",
        "192.0.2.1:7174",
        &[("ROUTE_RESOLVED", 10.000), ("CONNECT_RESPONSE", 10.012)],
    ));
    let f = Fleet::build(vec![a.clone(), b.clone()]);
    let c = &f.clocks[1];
    assert!(c.aligned, "{c:?}");
    assert!(
        (c.offset_ns - 3_000_000_000).unsigned_abs() <= c.uncertainty_ns,
        "{c:?}"
    );
    assert!(c.uncertainty_ns <= 6_000_000, "{c:?}");
    assert!(c.basis.contains("1 RDMA CM"), "{c:?}");
    // TCP alone: a connects (ESTABLISHED 20.000), b accepts (20.001); a closes first
    // (FIN_WAIT1 21.000), b sees the FIN (CLOSE_WAIT 21.001), a gets its ACK (FIN_WAIT2 21.002).
    a.report.net_ends = vec![net(
        Tcp,
        "192.0.2.1:40000",
        "192.0.2.2:18515",
        &[
            ("est_active", 20.0),
            ("FIN_WAIT1", 21.0),
            ("FIN_WAIT2", 21.002),
        ],
    )];
    b.report.net_ends = vec![net(
        Tcp,
        "192.0.2.2:18515",
        "192.0.2.1:40000",
        &[("est_passive", 20.001), ("CLOSE_WAIT", 21.001)],
    )];
    let f = Fleet::build(vec![a.clone(), b.clone()]);
    let c = &f.clocks[1];
    assert!(
        (c.offset_ns - 3_000_000_000).unsigned_abs() <= c.uncertainty_ns,
        "{c:?}"
    );
    assert!(c.uncertainty_ns <= 2_000_000, "{c:?}");
    assert_eq!(f.connections.len(), 1);
    assert_eq!(f.connections[0].transport, "TCP");
    assert!(f.connections[0].paired());
    // The handshake alone bounds one side only: not aligned, and said so.
    a.report.net_ends[0].steps.truncate(1);
    b.report.net_ends[0].steps.truncate(1);
    let f = Fleet::build(vec![a, b]);
    assert!(!f.clocks[1].aligned);
    assert!(
        f.clocks[1].basis.contains("one side only"),
        "{:?}",
        f.clocks[1]
    );
}
