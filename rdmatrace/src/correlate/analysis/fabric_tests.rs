//! `fabric_loss` from record sequences as rxe produces them under loss and without it.
use super::diagnosis_tests::{traffic, Analysis};
use super::*;
use crate::event::{CounterDelta, Retransmit, Transport};
use crate::testing::qp_info;

fn sender(a: &mut Analysis, pid: u32, qpn: u32) {
    let create = Body::QpCreate {
        qp: qp_info("rxe0", qpn),
        ret: 0,
    };
    a.push(pid, "mover", 1, create);
}

pub(super) fn timer(pid: u32, qpn: u32, reason: &'static str) -> Body {
    Body::Retransmit(Retransmit {
        transport: Transport::Rxe,
        reason,
        qp: Some(qp_info("rxe0", qpn)),
        tcp: None,
        owner_pid: pid,
        owner_comm: "mover".into(),
    })
}

pub(super) fn counter(dev: &str, name: &str, delta: u64) -> Body {
    Body::Counter(CounterDelta {
        dev: dev.into(),
        port: 1,
        hw: true,
        name: name.into(),
        value: delta,
        delta,
    })
}

#[test]
fn retransmissions_beyond_the_threshold_are_fabric_loss_on_the_senders_device() {
    let mut a = Analysis::default();
    sender(&mut a, 7, 0x11);
    sender(&mut a, 8, 0x12);
    a.push(0, "", 5, traffic(0x11, 7, 6000, 300));
    a.push(0, "", 5, traffic(0x12, 8, 500, 30));
    for ts in 6..13 {
        a.push(0, "", ts, timer(7, 0x11, "retransmit_timer"));
    }
    a.push(0, "", 14, counter("rxe0", "completer_retry_err", 60));
    a.push(0, "", 14, counter("rxe1", "out_of_seq_request", 58));
    let r = a.finish();
    assert_eq!(r.diagnoses.len(), 1, "{:#?}", r.diagnoses);
    let d = &r.diagnoses[0];
    assert_eq!(
        (d.kind, d.pid, d.dev.as_deref()),
        ("fabric_loss", 7, Some("rxe0"))
    );
    assert!(d.cause.contains("from rxe0 port 1"), "{}", d.cause);
    assert!(d.cause.contains("and 1 other process(es)"), "{}", d.cause);
    assert_eq!(
        d.evidence[0],
        "67 retransmission events against 6500 packets sent by the QPs on rxe0 (1.03 %)"
    );
    assert!(
        d.evidence
            .iter()
            .any(|e| e == "receiver side: rxe1 port 1 out_of_seq_request +58"),
        "{:?}",
        d.evidence
    );
}

#[test]
fn a_stray_timer_or_rnr_retries_are_not_fabric_loss() {
    let mut a = Analysis::default();
    sender(&mut a, 7, 0x11);
    a.push(0, "", 5, traffic(0x11, 7, 12800, 200));
    a.push(0, "", 6, timer(7, 0x11, "retransmit_timer"));
    // The receiver not ready: RNR NAK timer retries are not loss.
    for ts in 7..40 {
        a.push(0, "", ts, timer(7, 0x11, "rnr_nak_timer"));
    }
    let r = a.finish();
    assert!(r.diagnoses.is_empty(), "{:#?}", r.diagnoses);
}
