use super::{filter::Filter, Correlator};
use crate::event::{Body, QpKey, QpState, Record};
use crate::testing::{modify, qp_info as qp, record as rec};

fn cur_state(r: &Record) -> Option<QpState> {
    match &r.body {
        Body::QpModify { attrs, .. } => attrs.cur_state,
        _ => None,
    }
}

#[test]
fn fills_the_state_a_modify_leaves_and_keeps_failed_ones_out() {
    let mut c = Correlator::new();
    c.observe(&mut rec(
        7,
        "app",
        1,
        Body::QpCreate {
            qp: qp("rxe0", 0x11),
            ret: 0,
        },
    ));
    let mut m = rec(7, "app", 2, modify("rxe0", 0x11, QpState::Init, 0));
    c.observe(&mut m);
    assert_eq!(cur_state(&m), Some(QpState::Reset));
    // A refused transition does not move the QP.
    let mut bad = rec(7, "app", 3, modify("rxe0", 0x11, QpState::Rts, -22));
    c.observe(&mut bad);
    assert_eq!(cur_state(&bad), Some(QpState::Init));
    let mut m = rec(7, "app", 4, modify("rxe0", 0x11, QpState::Rtr, 0));
    c.observe(&mut m);
    assert_eq!(cur_state(&m), Some(QpState::Init));
    let t = c
        .qp(&QpKey {
            dev: "rxe0".into(),
            qpn: 0x11,
        })
        .expect("tracked");
    assert_eq!(
        (t.state, t.owner_pid, t.since_ns),
        (Some(QpState::Rtr), 7, 4)
    );
}

#[test]
fn same_qpn_on_two_devices_are_two_qps() {
    let mut c = Correlator::new();
    c.observe(&mut rec(
        1,
        "a",
        1,
        Body::QpCreate {
            qp: qp("rxe0", 0x11),
            ret: 0,
        },
    ));
    c.observe(&mut rec(
        2,
        "b",
        2,
        Body::QpCreate {
            qp: qp("rxe1", 0x11),
            ret: 0,
        },
    ));
    c.observe(&mut rec(1, "a", 3, modify("rxe0", 0x11, QpState::Init, 0)));
    let mut m = rec(2, "b", 4, modify("rxe1", 0x11, QpState::Init, 0));
    c.observe(&mut m);
    assert_eq!(
        cur_state(&m),
        Some(QpState::Reset),
        "rxe1's QP did not move with rxe0's"
    );
    assert_eq!(
        c.qp(&QpKey {
            dev: "rxe1".into(),
            qpn: 0x11
        })
        .map(|t| t.owner_pid),
        Some(2)
    );
    c.observe(&mut rec(
        1,
        "a",
        5,
        Body::QpDestroy {
            qp: qp("rxe0", 0x11),
            ret: 0,
        },
    ));
    assert!(c
        .qp(&QpKey {
            dev: "rxe0".into(),
            qpn: 0x11
        })
        .is_none());
    assert!(c
        .qp(&QpKey {
            dev: "rxe1".into(),
            qpn: 0x11
        })
        .is_some());
}

#[test]
fn a_qp_older_than_the_trace_has_an_unknown_current_state() {
    let mut c = Correlator::new();
    let mut m = rec(1, "a", 1, modify("mlx5_0", 0x99, QpState::Err, 0));
    c.observe(&mut m);
    assert_eq!(cur_state(&m), None);
}

#[test]
fn filters_by_device_qpn_comm_and_never_hide_loss() {
    let f = Filter {
        dev: Some("rxe1".into()),
        qpn: Some(0x11),
        ..Default::default()
    };
    assert!(f.matches(
        &rec(
            1,
            "a",
            1,
            Body::QpCreate {
                qp: qp("rxe1", 0x11),
                ret: 0
            }
        ),
        None
    ));
    assert!(!f.matches(
        &rec(
            1,
            "a",
            1,
            Body::QpCreate {
                qp: qp("rxe0", 0x11),
                ret: 0
            }
        ),
        None
    ));
    assert!(!f.matches(
        &rec(
            1,
            "a",
            1,
            Body::QpCreate {
                qp: qp("rxe1", 0x12),
                ret: 0
            }
        ),
        None
    ));
    assert!(!f.matches(&rec(1, "a", 1, Body::ProcessExec { ppid: 1 }), None));
    assert!(f.matches(
        &rec(
            0,
            "",
            1,
            Body::Lost {
                count: 3,
                cpu: None
            }
        ),
        None
    ));
    let f = Filter {
        comm: Some("b".into()),
        pid: Some(2),
        ..Default::default()
    };
    assert!(f.matches(&rec(2, "b", 1, Body::ProcessExec { ppid: 1 }), None));
    assert!(!f.matches(&rec(3, "b", 1, Body::ProcessExec { ppid: 1 }), None));
}

#[test]
fn late_samples_of_a_destroyed_qp_keep_their_owner_until_the_qpn_is_reused() {
    use crate::event::QpTrafficDelta;
    let traffic = |dev: &str, qpn| {
        Body::QpTraffic(QpTrafficDelta {
            qp: qp(dev, qpn),
            tx_packets: 1,
            tx_bytes: 1,
            rx_packets: 0,
            rx_bytes: 0,
            owner_pid: 0,
            owner_comm: Default::default(),
        })
    };
    let mut c = Correlator::new();
    c.observe(&mut rec(
        7,
        "app",
        1,
        Body::QpCreate {
            qp: qp("rxe0", 0x11),
            ret: 0,
        },
    ));
    c.observe(&mut rec(
        7,
        "app",
        2,
        Body::QpDestroy {
            qp: qp("rxe0", 0x11),
            ret: 0,
        },
    ));
    let mut late = rec(0, "", 3, traffic("rxe0", 0x11));
    c.observe(&mut late);
    assert_eq!((late.subject_pid(), late.subject_comm()), (7, "app"));
    c.observe(&mut rec(
        8,
        "next",
        4,
        Body::QpCreate {
            qp: qp("rxe0", 0x11),
            ret: 0,
        },
    ));
    let mut reused = rec(0, "", 5, traffic("rxe0", 0x11));
    c.observe(&mut reused);
    assert_eq!(reused.subject_pid(), 8);
}

#[test]
fn destroyed_qps_are_forgotten_after_a_while_but_not_a_reused_key() {
    use crate::testing::{qp_info, record};
    let mut c = Correlator::new();
    let create = |qpn| Body::QpCreate {
        qp: qp_info("rxe0", qpn),
        ret: 0,
    };
    let destroy = |qpn| Body::QpDestroy {
        qp: qp_info("rxe0", qpn),
        ret: 0,
    };
    for (ts, body) in [
        (1, create(1)),
        (2, destroy(1)),
        (3, create(2)),
        (4, destroy(2)),
    ] {
        c.observe(&mut record(7, "a", ts, body));
    }
    assert_eq!(c.ended_qps(), 2);
    c.observe(&mut record(7, "a", 100, create(1)));
    c.observe(&mut record(7, "a", 101, destroy(1)));
    c.forget_ended(50);
    // QPN 2's end (at 4) is old; QPN 1's new end (at 101) is not.
    assert_eq!(c.ended_qps(), 1);
    assert!(c.owner(&qp_info("rxe0", 1).key).is_some());
}

#[test]
fn a_table_row_sampled_before_the_create_returned_is_the_same_qp_life() {
    use crate::event::{QpResRow, ResChange};
    let row = |pid: u32, ts: u64, state: QpState, change: ResChange| {
        rec(
            pid,
            "ib_write_bw",
            ts,
            Body::QpRes(QpResRow {
                qp: qp("rxe0", 0x11),
                port: 1,
                rqpn: None,
                sq_psn: 0,
                rq_psn: None,
                state: Some(state),
                change,
            }),
        )
    };
    let key = QpKey {
        dev: "rxe0".into(),
        qpn: 0x11,
    };
    let mut c = Correlator::new();
    // The sampler lists the QP from inside ib_create_qp_user, before its return probe fires.
    c.observe(&mut row(238, 1, QpState::Reset, ResChange::New));
    let life = c.life(&key);
    let create = Body::QpCreate {
        qp: qp("rxe0", 0x11),
        ret: 0,
    };
    c.observe(&mut rec(238, "ib_write_bw", 2, create.clone()));
    assert!(c.change().is_none(), "{:?}", c.change());
    assert_eq!(c.life(&key), life, "one life, not two");
    c.observe(&mut rec(
        238,
        "ib_write_bw",
        3,
        modify("rxe0", 0x11, QpState::Init, 0),
    ));
    assert_eq!(c.qp(&key).and_then(|t| t.state), Some(QpState::Init));
    // Another process's QP at that QPN (the first one's destroy missed) is a new life.
    c.observe(&mut rec(239, "other", 4, create));
    assert_ne!(c.life(&key), life);
}

#[test]
fn a_modify_older_than_the_table_sample_that_moved_its_qp_starts_from_the_state_before_it() {
    use crate::event::{QpResRow, ResChange};
    let row = |qpn: u32, ts: u64, state: QpState| {
        rec(
            646,
            "ibv_rc_pingpong",
            ts,
            Body::QpRes(QpResRow {
                qp: qp("rxe1", qpn),
                port: 1,
                rqpn: None,
                sq_psn: 0,
                rq_psn: None,
                state: Some(state),
                change: ResChange::Changed,
            }),
        )
    };
    let key = |qpn| QpKey {
        dev: "rxe1".into(),
        qpn,
    };
    let mut c = Correlator::new();
    let create = Body::QpCreate {
        qp: qp("rxe1", 0x26),
        ret: 0,
    };
    c.observe(&mut rec(646, "ibv_rc_pingpong", 1, create));
    let mut init = rec(
        646,
        "ibv_rc_pingpong",
        2,
        modify("rxe1", 0x26, QpState::Init, 0),
    );
    c.observe(&mut init);
    // The sample (read at a tick) already shows RTS; the RTR and RTS modifies, made before it,
    // are still in the ring buffer and come after it.
    c.observe(&mut row(0x26, 5, QpState::Rts));
    let mut rtr = rec(
        646,
        "ibv_rc_pingpong",
        3,
        modify("rxe1", 0x26, QpState::Rtr, 0),
    );
    c.observe(&mut rtr);
    assert_eq!(cur_state(&rtr), Some(QpState::Init));
    let mut rts = rec(
        646,
        "ibv_rc_pingpong",
        4,
        modify("rxe1", 0x26, QpState::Rts, 0),
    );
    c.observe(&mut rts);
    assert_eq!(cur_state(&rts), Some(QpState::Rtr));
    assert_eq!(c.qp(&key(0x26)).and_then(|t| t.state), Some(QpState::Rts));
    // A modify made after the sample starts from the QP's state.
    let mut sqd = rec(
        646,
        "ibv_rc_pingpong",
        6,
        modify("rxe1", 0x26, QpState::Sqd, 0),
    );
    c.observe(&mut sqd);
    assert_eq!(cur_state(&sqd), Some(QpState::Rts));
    // The driver's own move to ERR is taken from the table.
    c.observe(&mut row(0x26, 7, QpState::Err));
    assert_eq!(c.qp(&key(0x26)).and_then(|t| t.state), Some(QpState::Err));
    // A QP only the table knows follows the table.
    c.observe(&mut row(0x27, 8, QpState::Init));
    c.observe(&mut row(0x27, 9, QpState::Rts));
    assert_eq!(c.qp(&key(0x27)).and_then(|t| t.state), Some(QpState::Rts));
}
