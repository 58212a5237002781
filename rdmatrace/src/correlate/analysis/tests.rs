use super::*;
use crate::correlate::Correlator;
use crate::event::{ModifyAttrs, QpInfo, QpTrafficDelta, Resource, TcpBytesDelta};
use crate::testing::{modify, qp_info, record as rec};

/// The analysis as the stage drives it: each record observed by the correlator first.
#[derive(Default)]
struct Analysis {
    state: Correlator,
    analyzer: Analyzer,
}

impl Analysis {
    fn push(&mut self, rec: &Record) {
        let mut rec = rec.clone();
        self.state.observe(&mut rec);
        self.analyzer.push(&rec, &self.state);
    }
    fn finish(self) -> Report {
        self.analyzer.finish()
    }
}

fn qp(qpn: u32) -> QpInfo {
    qp_info("rxe0", qpn)
}
fn to(qpn: u32, s: QpState) -> Body {
    modify("rxe0", qpn, s, 0)
}
fn ctx(pid: u32) -> Body {
    Body::Resource(Resource {
        added: true,
        res_type: ResType::Ctx,
        dev: "rxe0".into(),
        id: 1,
        owner_pid: pid,
        owner_comm: "app".into(),
        user: true,
        cq: None,
        mr: None,
    })
}
fn tcp(tx: u64) -> Body {
    Body::TcpBytes(TcpBytesDelta {
        tx_bytes: tx,
        rx_bytes: 0,
        tx_calls: tx / 65536 + 1,
        rx_calls: 0,
        peer: None,
    })
}
fn traffic(qpn: u32, pid: u32, bytes: u64) -> Body {
    Body::QpTraffic(QpTrafficDelta {
        qp: qp(qpn),
        tx_packets: bytes / 1024,
        tx_bytes: bytes,
        rx_packets: 0,
        rx_bytes: 0,
        owner_pid: pid,
        owner_comm: "app".into(),
    })
}
fn verdict_of(r: &Report, pid: u32) -> Verdict {
    r.processes
        .iter()
        .find(|p| p.stats.pid == pid)
        .map(|p| p.verdict)
        .expect("process in report")
}

#[test]
fn opened_rdma_but_moved_data_over_tcp_is_a_fallback() {
    let mut a = Analysis::default();
    a.push(&rec(1, "app", 1, ctx(1)));
    a.push(&rec(
        1,
        "app",
        2,
        Body::QpCreate {
            qp: qp(0x11),
            ret: 0,
        },
    ));
    a.push(&rec(1, "app", 3, to(0x11, QpState::Init)));
    a.push(&rec(1, "app", 4, tcp(50 << 20)));
    let r = a.finish();
    assert_eq!(verdict_of(&r, 1), Verdict::TcpFallback);
    let p = &r.processes[0];
    assert!(
        p.evidence.iter().any(|e| e.contains("0 reached RTR/RTS")),
        "{:?}",
        p.evidence
    );
    assert!(
        p.evidence.iter().any(|e| e.contains("50.0 MiB over TCP")),
        "{:?}",
        p.evidence
    );
}

#[test]
fn rdma_with_a_small_tcp_control_channel_is_rdma_and_big_tcp_makes_it_mixed() {
    let run = |tcp_bytes: u64| {
        let mut a = Analysis::default();
        a.push(&rec(
            1,
            "app",
            1,
            Body::QpCreate {
                qp: qp(0x11),
                ret: 0,
            },
        ));
        a.push(&rec(1, "app", 2, to(0x11, QpState::Init)));
        a.push(&rec(1, "app", 3, to(0x11, QpState::Rtr)));
        a.push(&rec(1, "app", 4, to(0x11, QpState::Rts)));
        a.push(&rec(0, "", 5, traffic(0x11, 1, 100 << 20)));
        a.push(&rec(1, "app", 6, tcp(tcp_bytes)));
        verdict_of(&a.finish(), 1)
    };
    assert_eq!(run(4096), Verdict::Rdma);
    assert_eq!(run(60 << 20), Verdict::Mixed);
}

#[test]
fn a_tcp_bootstrap_without_rdma_or_data_is_idle_not_tcp() {
    // Two MPI ranks on one host: shared memory for the data, 5 KiB of TCP to find each other.
    let mut a = Analysis::default();
    a.push(&rec(4, "rank0", 1, tcp(5 << 10)));
    a.push(&rec(5, "rank1", 1, tcp(5 << 10)));
    let r = a.finish();
    assert_eq!(verdict_of(&r, 4), Verdict::Idle);
    assert_eq!(verdict_of(&r, 5), Verdict::Idle);
    let p = r
        .processes
        .iter()
        .find(|p| p.stats.pid == 4)
        .expect("rank0");
    assert!(
        p.evidence
            .iter()
            .any(|e| e.contains("below the data threshold")),
        "{:?}",
        p.evidence
    );
}

#[test]
fn never_touching_rdma_is_tcp_and_a_qp_stuck_in_rtr_is_an_anomaly() {
    let mut a = Analysis::default();
    a.push(&rec(2, "curl", 1, tcp(5 << 20)));
    a.push(&rec(
        3,
        "app",
        10,
        Body::QpCreate {
            qp: qp(0x12),
            ret: 0,
        },
    ));
    a.push(&rec(3, "app", 20, to(0x12, QpState::Init)));
    a.push(&rec(3, "app", 30, to(0x12, QpState::Rtr)));
    a.push(&rec(
        0,
        "",
        30 + STUCK_NS + 1,
        Body::Lost {
            count: 0,
            cpu: None,
        },
    ));
    let r = a.finish();
    assert_eq!(verdict_of(&r, 2), Verdict::Tcp);
    let stuck: Vec<&Anomaly> = r
        .anomalies
        .iter()
        .filter(|x| x.kind == "qp_stuck")
        .collect();
    assert_eq!(stuck.len(), 1, "{:?}", r.anomalies);
    assert_eq!((stuck[0].pid, stuck[0].qpn), (3, Some(0x12)));
    assert!(stuck[0].detail.contains("RTR"));
}

#[test]
fn illegal_transitions_are_named_as_the_likely_cause() {
    let mut a = Analysis::default();
    a.push(&rec(
        1,
        "app",
        1,
        Body::QpCreate {
            qp: qp(0x11),
            ret: 0,
        },
    ));
    let bad = Body::QpModify {
        qp: qp(0x11),
        attrs: ModifyAttrs {
            attr_mask: 1,
            cur_state: Some(QpState::Reset),
            new_state: Some(QpState::Rts),
            ..Default::default()
        },
        ret: -22,
    };
    a.push(&rec(1, "app", 2, bad));
    let r = a.finish();
    let a = r
        .anomalies
        .iter()
        .find(|x| x.kind == "qp_modify_failed")
        .expect("anomaly");
    assert!(
        a.detail.contains("EINVAL") && a.detail.contains("illegal transition RESET->RTS"),
        "{}",
        a.detail
    );
}

fn created_qp(a: &mut Analysis, pid: u32, qpn: u32) {
    a.push(&rec(
        pid,
        "app",
        1,
        Body::QpCreate {
            qp: qp(qpn),
            ret: 0,
        },
    ));
}

fn rts_qp(a: &mut Analysis, pid: u32, qpn: u32) {
    created_qp(a, pid, qpn);
    for (t, s) in [(2, QpState::Init), (3, QpState::Rtr), (4, QpState::Rts)] {
        a.push(&rec(pid, "app", t, to(qpn, s)));
    }
}

#[test]
fn a_receive_only_rdma_side_is_rdma_not_idle() {
    // The target of RDMA writes sends only acks: its data arrives.
    let mut a = Analysis::default();
    rts_qp(&mut a, 7, 0x11);
    let mut t = traffic(0x11, 7, 0);
    if let Body::QpTraffic(d) = &mut t {
        d.rx_bytes = 64 << 20;
        d.rx_packets = 16384;
    }
    a.push(&rec(0, "", 5, t));
    let r = a.finish();
    assert_eq!(verdict_of(&r, 7), Verdict::Rdma);
    assert_eq!(r.qps[0].rx_bytes, 64 << 20);
}

#[test]
fn error_completions_are_one_anomaly_per_qp_and_status_and_all_counted() {
    use crate::event::WcError;
    let mut a = Analysis::default();
    rts_qp(&mut a, 7, 0x11);
    let wc = |status: &str| {
        Body::WcError(WcError {
            qp: qp(0x11).key,
            cqn: 3,
            status: status.into(),
            vendor_err: 0,
            owner_pid: 7,
            owner_comm: "app".into(),
        })
    };
    a.push(&rec(0, "", 10, wc("RETRY_EXC_ERR")));
    for ts in 11..20 {
        a.push(&rec(0, "", ts, wc("WR_FLUSH_ERR")));
    }
    let r = a.finish();
    let kinds: Vec<&str> = r
        .anomalies
        .iter()
        .filter(|x| x.kind == "wc_error")
        .map(|x| x.detail.as_str())
        .collect();
    assert_eq!(kinds.len(), 2, "{kinds:?}");
    assert!(kinds[0].contains("RETRY_EXC_ERR") && kinds[0].contains("retries exhausted"));
    assert_eq!(r.qps[0].wc_errors, 10);
    assert_eq!(
        r.anomalies
            .iter()
            .find(|x| x.kind == "wc_error")
            .map(|x| x.pid),
        Some(7)
    );
}

fn res_row(qpn: u32, state: QpState, change: crate::event::ResChange) -> Body {
    Body::QpRes(crate::event::QpResRow {
        qp: qp(qpn),
        port: 1,
        rqpn: Some(0x99),
        sq_psn: 0,
        rq_psn: Some(0),
        state: Some(state),
        change,
    })
}

#[test]
fn a_qp_older_than_the_trace_is_accounted_from_the_qp_table() {
    use crate::event::ResChange;
    let mut a = Analysis::default();
    a.push(&rec(
        7,
        "old",
        1,
        res_row(0x20, QpState::Rts, ResChange::Present),
    ));
    a.push(&rec(0, "", 2, traffic(0x20, 7, 4 << 20)));
    let r = a.finish();
    let q = r
        .qps
        .iter()
        .find(|q| q.key.qpn == 0x20)
        .expect("QP from the table");
    assert_eq!(
        (q.owner_pid, q.state, q.peer_qpn),
        (7, Some(QpState::Rts), Some(0x99))
    );
    assert_eq!(q.tx_bytes, 4 << 20);
    assert_eq!(verdict_of(&r, 7), Verdict::Rdma);
}

#[test]
fn a_driver_moving_a_qp_to_err_is_an_anomaly_with_the_completion_that_caused_it() {
    use crate::event::{ResChange, WcError};
    let mut a = Analysis::default();
    a.push(&rec(
        5,
        "mover",
        1,
        Body::QpCreate {
            qp: qp(0x11),
            ret: 0,
        },
    ));
    a.push(&rec(5, "mover", 2, to(0x11, QpState::Init)));
    a.push(&rec(5, "mover", 3, to(0x11, QpState::Rtr)));
    a.push(&rec(5, "mover", 4, to(0x11, QpState::Rts)));
    a.push(&rec(
        0,
        "",
        5,
        Body::WcError(WcError {
            qp: QpKey {
                dev: "rxe0".into(),
                qpn: 0x11,
            },
            cqn: 1,
            status: "RETRY_EXC_ERR".into(),
            vendor_err: 0,
            owner_pid: 5,
            owner_comm: "mover".into(),
        }),
    ));
    // The table agrees with the probes first (no anomaly), then shows ERR.
    a.push(&rec(
        5,
        "mover",
        6,
        res_row(0x11, QpState::Rts, ResChange::Present),
    ));
    a.push(&rec(
        5,
        "mover",
        7,
        res_row(0x11, QpState::Err, ResChange::Changed),
    ));
    let r = a.finish();
    let errs: Vec<&Anomaly> = r.anomalies.iter().filter(|x| x.kind == "qp_err").collect();
    assert_eq!(errs.len(), 1, "{:?}", r.anomalies);
    assert!(
        errs[0].detail.contains("RTS->ERR by the driver")
            && errs[0].detail.contains("RETRY_EXC_ERR"),
        "{}",
        errs[0].detail
    );
    assert_eq!(errs[0].pid, 5);
}

#[test]
fn per_qp_counters_blame_the_qp_owner() {
    use crate::event::QpCounterDelta;
    let mut a = Analysis::default();
    a.push(&rec(
        9,
        "app",
        1,
        Body::QpCreate {
            qp: qp(0x30),
            ret: 0,
        },
    ));
    let counter = |name: &str, delta| {
        Body::QpCounter(QpCounterDelta {
            dev: "rxe0".into(),
            port: 1,
            counter_id: 3,
            qpns: vec![0x30],
            nqpns: 1,
            name: name.into(),
            value: delta,
            delta,
        })
    };
    a.push(&rec(0, "", 2, counter("local_ack_timeout_err", 12)));
    a.push(&rec(0, "", 3, counter("rx_write_requests", 1000)));
    let r = a.finish();
    assert_eq!(r.blame.len(), 1, "{:?}", r.blame);
    let b = &r.blame[0];
    assert_eq!(
        (b.pid, b.transport, b.target.as_str(), b.count),
        (9, "qp_counter", "rxe0 QPN 0x30", 12)
    );
    assert_eq!(b.reasons, ["local_ack_timeout_err"]);
}

#[test]
fn a_failed_rtr_with_a_path_mtu_above_the_port_mtu_says_so() {
    let mut a = Analysis::default();
    a.push(&rec(
        0,
        "",
        1,
        Body::Port(crate::event::PortInfo {
            dev: "rxe0".into(),
            port: 1,
            state: "ACTIVE",
            active_mtu: Some(1024),
            netdev_mtu: Some(1500),
            link_layer: "Ethernet".into(),
            netdev: "eth1".into(),
        }),
    ));
    a.push(&rec(
        3,
        "app",
        2,
        Body::QpCreate {
            qp: qp(0x11),
            ret: 0,
        },
    ));
    a.push(&rec(
        3,
        "app",
        3,
        Body::QpModify {
            qp: qp(0x11),
            attrs: ModifyAttrs {
                attr_mask: 1 | (1 << 8),
                cur_state: Some(QpState::Init),
                new_state: Some(QpState::Rtr),
                path_mtu: Some(5),
                ..Default::default()
            },
            ret: -22,
        },
    ));
    // rxe accepts it instead: still unusable, and said so.
    a.push(&rec(
        3,
        "app",
        4,
        Body::QpModify {
            qp: qp(0x11),
            attrs: ModifyAttrs {
                attr_mask: 1 | (1 << 8),
                cur_state: Some(QpState::Init),
                new_state: Some(QpState::Rtr),
                path_mtu: Some(5),
                ..Default::default()
            },
            ret: 0,
        },
    ));
    let r = a.finish();
    let accepted = r
        .anomalies
        .iter()
        .find(|x| x.kind == "path_mtu")
        .expect("path_mtu anomaly");
    assert!(accepted
        .detail
        .contains("above the active MTU of rxe0 port 1 (1024"));
    let m = r
        .anomalies
        .iter()
        .find(|x| x.kind == "qp_modify_failed")
        .expect("anomaly");
    assert!(
        m.detail.contains(
            "path MTU 4096 above the active MTU of rxe0 port 1 (1024, from netdev eth1 MTU 1500)"
        ),
        "{}",
        m.detail
    );
}

#[test]
fn ports_going_down_and_devices_going_away_are_anomalies() {
    let port = |state: &'static str| {
        Body::Port(crate::event::PortInfo {
            dev: "rxe0".into(),
            port: 1,
            state,
            active_mtu: Some(1024),
            netdev_mtu: Some(1500),
            link_layer: "Ethernet".into(),
            netdev: "eth1".into(),
        })
    };
    let mut a = Analysis::default();
    a.push(&rec(0, "", 1, port("DOWN")));
    a.push(&rec(0, "", 2, port("ACTIVE")));
    a.push(&rec(0, "", 3, port("DOWN")));
    a.push(&rec(0, "", 4, port("REMOVED")));
    let kinds: Vec<(&str, String)> = a
        .finish()
        .anomalies
        .iter()
        .map(|x| (x.kind, x.detail.clone()))
        .collect();
    assert_eq!(
        kinds,
        [
            (
                "port_down",
                "port rxe0/1 went DOWN (was ACTIVE)".to_string()
            ),
            (
                "device_removed",
                "device rxe0 removed (port 1 gone)".to_string()
            )
        ],
        "a port first seen DOWN is not news; one that leaves ACTIVE is"
    );
}

#[test]
fn losses_are_totalled_per_cpu_when_the_cpu_is_known() {
    let mut a = Analysis::default();
    let lost = |count, cpu| Body::Lost { count, cpu };
    a.push(&rec(0, "", 10, lost(3, Some(1))));
    a.push(&rec(0, "", 20, lost(4, Some(0))));
    a.push(&rec(0, "", 30, lost(5, Some(1))));
    a.push(&rec(0, "", 40, lost(2, None)));
    let r = a.finish();
    assert_eq!(r.lost, 14);
    assert_eq!(r.lost_per_cpu, BTreeMap::from([(0, 4), (1, 8)]));
    let said: Vec<&str> = r
        .anomalies
        .iter()
        .filter(|x| x.kind == "lost_events")
        .map(|x| x.detail.as_str())
        .collect();
    assert_eq!(said.len(), 4);
    assert!(
        said[0].contains("3 events dropped") && said[0].contains("on CPU 1"),
        "{said:?}"
    );
    assert!(!said[3].contains("CPU"), "{said:?}");
}

#[test]
fn a_qp_whose_connecting_modify_was_missed_is_connected_by_the_table_or_its_traffic() {
    use crate::event::ResChange;
    // The kernel's QP table shows it in RTS: counted as reached, as a seen modify would be.
    let mut a = Analysis::default();
    created_qp(&mut a, 1, 0x11);
    a.push(&rec(
        1,
        "app",
        2,
        res_row(0x11, QpState::Rts, ResChange::Changed),
    ));
    let r = a.finish();
    assert_eq!(r.processes[0].stats.qps_rts, 1);
    // No transition seen at all, but packets counted on the QP: it was connected.
    let mut a = Analysis::default();
    created_qp(&mut a, 2, 0x12);
    a.push(&rec(0, "", 3, traffic(0x12, 2, 13 << 20)));
    let r = a.finish();
    assert_eq!(verdict_of(&r, 2), Verdict::Rdma);
    let p = &r.processes[0];
    assert!(
        p.evidence.iter().any(|e| e.contains("0 reached RTR/RTS"))
            && p.evidence.iter().any(|e| e.contains("was not seen")),
        "{:?}",
        p.evidence
    );
    // Neither: a created QP that never moved anything is idle.
    let mut a = Analysis::default();
    created_qp(&mut a, 3, 0x13);
    assert_eq!(verdict_of(&a.finish(), 3), Verdict::Idle);
}
