//! `timeout_too_small` from record sequences as rxe produces them with a short local ACK timeout
//! (lab: timeouts 1, 4 and 8 gave 15-25 timer expiries per 16 MiB and duplicate requests at the
//! receiver, timeout 14 none).
use super::diagnosis_tests::{traffic, Analysis};
use super::fabric_tests::{counter, timer};
use super::*;
use crate::event::ModifyAttrs;
use crate::testing::qp_info;

/// QP `qpn` of `pid` on rxe0, in RTS with local ACK timeout `timeout`.
fn sender(a: &mut Analysis, pid: u32, qpn: u32, timeout: u8) {
    a.push(
        pid,
        "mover",
        1,
        Body::QpCreate {
            qp: qp_info("rxe0", qpn),
            ret: 0,
        },
    );
    let attrs = ModifyAttrs {
        attr_mask: 1,
        new_state: Some(QpState::Rts),
        timeout: Some(timeout),
        retry_cnt: Some(6),
        ..Default::default()
    };
    a.push(
        pid,
        "mover",
        2,
        Body::QpModify {
            qp: qp_info("rxe0", qpn),
            attrs,
            ret: 0,
        },
    );
}

/// A 16 MiB transfer whose timer fired 25 times, with what the port counters said.
fn run(timeout: u8, counters: &[(&str, &str, u64)]) -> Report {
    let mut a = Analysis::default();
    sender(&mut a, 7, 0x12, timeout);
    a.push(0, "", 5, traffic(0x12, 7, 17_068, 1_000));
    for ts in 6..31 {
        a.push(0, "", ts, timer(7, 0x12, "retransmit_timer"));
    }
    for (dev, name, delta) in counters {
        a.push(0, "", 40, counter(dev, name, *delta));
    }
    a.finish()
}

#[test]
fn timer_expiries_without_loss_under_a_short_timeout_are_timeout_too_small() {
    let r = run(
        1,
        &[
            ("rxe0", "completer_retry_err", 16),
            ("rxe1", "duplicate_request", 1055),
        ],
    );
    assert_eq!(r.diagnoses.len(), 1, "{:#?}", r.diagnoses);
    let d = &r.diagnoses[0];
    assert_eq!(
        (d.kind, d.pid, d.dev.as_deref(), d.qpn),
        ("timeout_too_small", 7, Some("rxe0"), Some(0x12))
    );
    assert!(
        d.cause.contains("local ACK timeout (8.2 µs)"),
        "{}",
        d.cause
    );
    assert!(d.cause.contains("fired 25 times"), "{}", d.cause);
    assert!(
        d.evidence.iter().any(|e| e
            == "receiver side: rxe1 port 1 duplicate_request +1055: the retransmitted requests had arrived"),
        "{:?}",
        d.evidence
    );
}

#[test]
fn the_same_expiries_under_a_long_timeout_are_lost_acknowledgements() {
    let r = run(
        14,
        &[
            ("rxe0", "completer_retry_err", 16),
            ("rxe1", "duplicate_request", 1055),
        ],
    );
    let kinds: Vec<&str> = r.diagnoses.iter().map(|d| d.kind).collect();
    assert_eq!(kinds, ["fabric_loss"], "{:#?}", r.diagnoses);
}

#[test]
fn a_short_timeout_with_requests_lost_is_not_named_for_them() {
    let r = run(
        1,
        &[
            ("rxe0", "completer_retry_err", 16),
            ("rxe1", "out_of_seq_request", 40),
            ("rxe1", "duplicate_request", 900),
        ],
    );
    let kinds: Vec<&str> = r.diagnoses.iter().map(|d| d.kind).collect();
    assert_eq!(kinds, ["fabric_loss"], "{:#?}", r.diagnoses);
}
