//! Replies built the way the kernel lays them out (nested tables of entries), parsed back.

use super::{
    attr::{AttrWriter, Attrs},
    nldev::{self, attr, QpCounter, QpRow, Reply},
    table::{CounterTable, QpTable},
};
use rdmatrace_common::event::qp_res_change;

/// One `nlmsghdr` + attributes, as a reply datagram part.
fn message(kind: u16, flags: u16, body: &AttrWriter) -> Vec<u8> {
    let mut m = nldev::request(0, flags, 7, body);
    m[4..6].copy_from_slice(&kind.to_ne_bytes());
    m
}

fn qp_dump(dev_index: u32, dev: &str, qps: &[(u32, Option<u32>, u8, u32)]) -> AttrWriter {
    let mut w = AttrWriter::default();
    w.u32(attr::DEV_INDEX, dev_index).str(attr::DEV_NAME, dev);
    w.nest(attr::RES_QP, |t| {
        for &(lqpn, rqpn, state, pid) in qps {
            t.nest(attr::RES_QP_ENTRY, |e| {
                e.u32(attr::PORT_INDEX, 1).u32(attr::RES_LQPN, lqpn);
                if let Some(r) = rqpn {
                    e.u32(attr::RES_RQPN, r).u32(attr::RES_RQ_PSN, 0x55);
                }
                e.u32(attr::RES_SQ_PSN, 0x66)
                    .put(attr::RES_TYPE, &[2])
                    .put(attr::RES_STATE, &[state]);
                if pid == 0 {
                    e.str(attr::RES_KERN_NAME, "ib_core");
                } else {
                    e.u32(attr::RES_PID, pid);
                }
            });
        }
    });
    w
}

#[test]
fn attributes_round_trip_with_padding_and_nesting() {
    let mut w = AttrWriter::default();
    w.str(attr::DEV_NAME, "rxe0")
        .u32(attr::DEV_INDEX, 3)
        .nest(attr::RES_QP, |n| {
            n.u64(attr::STAT_HWCOUNTER_ENTRY_VALUE, 1 << 40);
        });
    let got: Vec<_> = Attrs::new(&w.buf).collect::<Result<_, _>>().expect("parse");
    assert_eq!(got.len(), 3);
    assert_eq!(got[0].str(), "rxe0");
    assert_eq!(got[1].u32().expect("u32"), 3);
    // The nested flag is stripped from the type.
    assert_eq!(got[2].kind, attr::RES_QP);
    let inner: Vec<_> = got[2].nested().collect::<Result<_, _>>().expect("nested");
    assert_eq!(inner[0].u64().expect("u64"), 1 << 40);
}

#[test]
fn a_truncated_attribute_is_an_error_not_a_panic() {
    let mut w = AttrWriter::default();
    w.u32(attr::DEV_INDEX, 3).str(attr::DEV_NAME, "mlx5_0");
    for cut in 1..w.buf.len() {
        let _ = Attrs::new(&w.buf[..cut]).collect::<Vec<_>>();
    }
    let bad = [200u8, 0, 1, 0, 0, 0, 0, 0];
    assert!(Attrs::new(&bad).next().expect("one").is_err());
    assert!(nldev::parse_qps(&bad).is_err());
}

#[test]
fn qp_table_dump_parses_user_and_kernel_qps() {
    let body = qp_dump(1, "rxe0", &[(0x11, Some(0x12), 3, 4242), (1, None, 3, 0)]);
    let msg = message(
        nldev::msg_type(nldev::cmd::RES_QP_GET),
        nldev::NLM_F_MULTI,
        &body,
    );
    let mut datagram = msg.clone();
    datagram.extend(message(3, 0, &AttrWriter::default()));
    let replies = nldev::replies(&datagram).expect("framing");
    assert_eq!(replies.len(), 2);
    assert_eq!(replies[1], Reply::Done);
    let Reply::Data(data) = replies[0] else {
        panic!("expected data, got {:?}", replies[0]);
    };
    let rows = nldev::parse_qps(data).expect("rows");
    assert_eq!(
        rows[0],
        QpRow {
            dev: "rxe0".into(),
            port: 1,
            lqpn: 0x11,
            rqpn: Some(0x12),
            sq_psn: 0x66,
            rq_psn: Some(0x55),
            qp_type: 2,
            state: 3,
            pid: 4242,
            kern_name: String::new(),
        }
    );
    assert_eq!(
        (rows[1].pid, rows[1].kern_name.as_str(), rows[1].rqpn),
        (0, "ib_core", None)
    );
}

#[test]
fn kernel_errors_come_back_as_negative_errno() {
    let mut err = AttrWriter::default();
    err.buf
        .extend_from_slice(&(-libc::EOPNOTSUPP).to_ne_bytes());
    let msg = message(2, 0, &err);
    let replies = nldev::replies(&msg).expect("framing");
    assert_eq!(replies, [Reply::Error(-libc::EOPNOTSUPP)]);
}

#[test]
fn counters_parse_with_their_qps_and_values() {
    let mut w = AttrWriter::default();
    w.u32(attr::DEV_INDEX, 0).str(attr::DEV_NAME, "mlx5_0");
    w.nest(attr::STAT_COUNTER, |t| {
        t.nest(attr::STAT_COUNTER_ENTRY, |e| {
            e.u32(attr::PORT_INDEX, 1)
                .u32(attr::STAT_COUNTER_ID, 4)
                .u32(attr::RES_PID, 77);
            e.nest(attr::STAT_HWCOUNTERS, |h| {
                for (n, v) in [("rx_write_requests", 9u64), ("local_ack_timeout_err", 3)] {
                    h.nest(attr::STAT_HWCOUNTER_ENTRY, |x| {
                        x.str(attr::STAT_HWCOUNTER_ENTRY_NAME, n)
                            .u64(attr::STAT_HWCOUNTER_ENTRY_VALUE, v);
                    });
                }
            });
            e.nest(attr::RES_QP, |q| {
                for qpn in [0x100, 0x101] {
                    q.nest(attr::RES_QP_ENTRY, |x| {
                        x.u32(attr::RES_LQPN, qpn);
                    });
                }
            });
        });
    });
    let got = nldev::parse_counters(&w.buf).expect("counters");
    assert_eq!(
        got,
        [QpCounter {
            dev: "mlx5_0".into(),
            port: 1,
            id: 4,
            pid: 77,
            qpns: vec![0x100, 0x101],
            values: vec![
                ("rx_write_requests".into(), 9),
                ("local_ack_timeout_err".into(), 3)
            ],
        }]
    );
}

fn row(lqpn: u32, state: u8, pid: u32) -> QpRow {
    QpRow {
        dev: "rxe0".into(),
        port: 1,
        lqpn,
        rqpn: None,
        sq_psn: 0,
        rq_psn: None,
        qp_type: 2,
        state,
        pid,
        kern_name: String::new(),
    }
}

#[test]
fn qp_table_changes_present_new_changed_gone() {
    let mut t = QpTable::default();
    let mut comm = |r: &QpRow| format!("p{}", r.pid);
    let first = t.diff(vec![row(0x11, 3, 10), row(1, 3, 0)], 5, &mut comm);
    let kinds: Vec<_> = first.iter().map(|s| (s.qp.qpn, s.change)).collect();
    assert!(kinds.contains(&(0x11, qp_res_change::PRESENT)));
    assert!(kinds.contains(&(1, qp_res_change::PRESENT)));
    assert_eq!(
        first
            .iter()
            .find(|s| s.qp.qpn == 0x11)
            .map(|s| s.header.pid),
        Some(10)
    );
    // Unchanged rows say nothing; PSN movement alone is not a change.
    let mut moved = row(0x11, 3, 10);
    moved.sq_psn = 999;
    assert!(t.diff(vec![moved, row(1, 3, 0)], 6, &mut comm).is_empty());
    // 0x11 goes to ERR (6), 0x12 appears, 1 goes away.
    let third = t.diff(vec![row(0x11, 6, 10), row(0x12, 1, 11)], 7, &mut comm);
    let got: Vec<_> = third
        .iter()
        .map(|s| (s.qp.qpn, s.state, s.change))
        .collect();
    assert_eq!(
        got,
        [
            (0x11, 6, qp_res_change::CHANGED),
            (0x12, 1, qp_res_change::NEW),
            (1, 3, qp_res_change::GONE)
        ]
    );
}

#[test]
fn counter_deltas_only_for_what_moved() {
    let mut t = CounterTable::default();
    let c = |v: u64| QpCounter {
        dev: "mlx5_0".into(),
        port: 1,
        id: 4,
        pid: 77,
        qpns: vec![0x100],
        values: vec![
            ("local_ack_timeout_err".into(), v),
            ("rx_read_requests".into(), 1),
        ],
    };
    let first = t.diff(&[c(3)], 1);
    assert_eq!(first.len(), 2, "a new counter reports from zero");
    assert!(t.diff(&[c(3)], 2).is_empty());
    let moved = t.diff(&[c(8)], 3);
    assert_eq!(moved.len(), 1);
    assert_eq!((moved[0].value, moved[0].delta, moved[0].nqpns), (8, 5, 1));
    assert_eq!(moved[0].qpns[0], 0x100);
    assert_eq!(moved[0].header.pid, 77);
}
