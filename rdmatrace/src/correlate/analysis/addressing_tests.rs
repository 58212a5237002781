//! `gid_mismatch` and `dest_qpn_unknown` from record sequences as a host with two Soft-RoCE
//! devices produces them (GID tables as rxe fills them: index 0 the link-local IPv6 address,
//! index 1 the IPv4-mapped one, both RoCE v2).
use super::diagnosis_tests::{traffic, wc, Analysis};
use super::*;
use crate::event::{GidInfo, ModifyAttrs, QpResRow, ResChange};
use crate::testing::qp_info;

const A_V4: [u8; 16] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 0, 2, 1];
const B_V4: [u8; 16] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 0, 2, 2];
const A_V6: [u8; 16] = [
    0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x50, 0x54, 0, 0xff, 0xfe, 0, 0, 1,
];
const B_V6: [u8; 16] = [
    0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x50, 0x54, 0, 0xff, 0xfe, 0, 0, 2,
];

fn gid(dev: &str, index: u32, gid: [u8; 16]) -> Body {
    Body::Gid(GidInfo {
        dev: dev.into(),
        port: 1,
        index,
        gid: Some(gid),
        gid_type: "RoCE v2",
        netdev: String::new(),
    })
}

fn tables(a: &mut Analysis) {
    a.push(0, "", 1, gid("rxe0", 0, A_V6));
    a.push(0, "", 1, gid("rxe0", 1, A_V4));
    a.push(0, "", 1, gid("rxe1", 0, B_V6));
    a.push(0, "", 1, gid("rxe1", 1, B_V4));
}

fn table_row(dev: &str, qpn: u32) -> Body {
    Body::QpRes(QpResRow {
        qp: qp_info(dev, qpn),
        port: 1,
        rqpn: None,
        sq_psn: 0,
        rq_psn: None,
        state: Some(QpState::Rts),
        change: ResChange::Present,
    })
}

fn modify_on(dev: &str, qpn: u32, to: QpState, ret: i32, f: impl Fn(&mut ModifyAttrs)) -> Body {
    let mut attrs = ModifyAttrs {
        attr_mask: 1,
        new_state: Some(to),
        ..Default::default()
    };
    f(&mut attrs);
    Body::QpModify {
        qp: qp_info(dev, qpn),
        attrs,
        ret,
    }
}

/// QP `qpn` of `pid` on `dev`, connected to `peer` at `dgid` from source GID index `sgid`.
fn connect(a: &mut Analysis, pid: u32, dev: &str, qpn: u32, peer: u32, dgid: [u8; 16], sgid: u32) {
    let create = Body::QpCreate {
        qp: qp_info(dev, qpn),
        ret: 0,
    };
    a.push(pid, "rt", 2, create);
    a.push(pid, "rt", 3, modify_on(dev, qpn, QpState::Init, 0, |_| {}));
    let rtr = modify_on(dev, qpn, QpState::Rtr, 0, |m| {
        m.dest_qpn = Some(peer);
        m.dgid = Some(dgid);
        m.sgid_index = Some(sgid);
    });
    a.push(pid, "rt", 4, rtr);
    a.push(pid, "rt", 5, modify_on(dev, qpn, QpState::Rts, 0, |_| {}));
}

fn retries_exceeded(a: &mut Analysis) {
    a.push(0, "", 6, traffic(0x11, 7, 40, 0));
    a.push(0, "", 9, wc(0x11, 7, "rt", "RETRY_EXC_ERR"));
}

#[test]
fn a_dest_qpn_that_does_not_exist_on_this_host_is_named() {
    let mut a = Analysis::default();
    tables(&mut a);
    a.push(0, "", 1, table_row("rxe1", 0x12));
    connect(&mut a, 8, "rxe1", 0x12, 0x11, A_V4, 1);
    connect(&mut a, 7, "rxe0", 0x11, 0x999, B_V4, 1);
    retries_exceeded(&mut a);
    let r = a.finish();
    assert_eq!(r.diagnoses.len(), 1, "{:#?}", r.diagnoses);
    let d = &r.diagnoses[0];
    assert_eq!((d.kind, d.pid, d.qpn), ("dest_qpn_unknown", 7, Some(0x11)));
    assert!(d.cause.contains("QPN 0x999 on rxe1"), "{}", d.cause);
    assert!(
        d.evidence
            .iter()
            .any(|e| e == "dest GID 192.0.2.2 is rxe1 port 1 index 1 on this host"),
        "{:?}",
        d.evidence
    );
}

#[test]
fn without_the_qp_table_a_missing_dest_qpn_is_not_claimed() {
    // QPs older than the trace are only known from the table: without it, stay unreachable.
    let mut a = Analysis::default();
    tables(&mut a);
    connect(&mut a, 7, "rxe0", 0x11, 0x999, B_V4, 1);
    retries_exceeded(&mut a);
    let r = a.finish();
    assert_eq!(r.diagnoses.len(), 1, "{:#?}", r.diagnoses);
    assert_eq!(r.diagnoses[0].kind, "unreachable");
}

#[test]
fn a_peer_expecting_another_source_gid_is_gid_mismatch() {
    let mut a = Analysis::default();
    tables(&mut a);
    // The receiver was told the sender's link-local GID; the sender sends from its IPv4 one.
    connect(&mut a, 8, "rxe1", 0x12, 0x11, A_V6, 1);
    connect(&mut a, 7, "rxe0", 0x11, 0x12, B_V4, 1);
    retries_exceeded(&mut a);
    let r = a.finish();
    assert_eq!(r.diagnoses.len(), 1, "{:#?}", r.diagnoses);
    let d = &r.diagnoses[0];
    assert_eq!((d.kind, d.pid, d.qpn), ("gid_mismatch", 7, Some(0x11)));
    assert!(
        d.cause.contains("expects packets from fe80::"),
        "{}",
        d.cause
    );
    assert!(d.cause.contains("sends from 192.0.2.1"), "{}", d.cause);
}

#[test]
fn matching_gids_on_both_ends_are_not_a_mismatch() {
    let mut a = Analysis::default();
    tables(&mut a);
    a.push(0, "", 1, table_row("rxe1", 0x12));
    connect(&mut a, 8, "rxe1", 0x12, 0x11, A_V4, 1);
    connect(&mut a, 7, "rxe0", 0x11, 0x12, B_V4, 1);
    retries_exceeded(&mut a);
    let r = a.finish();
    assert_eq!(r.diagnoses.len(), 1, "{:#?}", r.diagnoses);
    assert_eq!(r.diagnoses[0].kind, "unreachable");
}

#[test]
fn a_refused_rtr_with_a_source_gid_of_another_kind_or_none_is_gid_mismatch() {
    let mut a = Analysis::default();
    tables(&mut a);
    let bad = |sgid: u32, dgid: [u8; 16]| {
        modify_on("rxe0", 0x11, QpState::Rtr, -22, move |m| {
            m.cur_state = Some(QpState::Init);
            m.dest_qpn = Some(0x12);
            m.dgid = Some(dgid);
            m.sgid_index = Some(sgid);
        })
    };
    a.push(7, "rt", 2, bad(0, B_V4));
    a.push(7, "rt", 3, bad(5, B_V4));
    // A refused RTR whose GIDs agree is not blamed on them.
    a.push(7, "rt", 4, bad(1, B_V4));
    let r = a.finish();
    let kinds: Vec<_> = r.diagnoses.iter().map(|d| (d.kind, d.ts_ns)).collect();
    assert_eq!(
        kinds,
        [("gid_mismatch", 2), ("gid_mismatch", 3)],
        "{:#?}",
        r.diagnoses
    );
    let (first, second) = (&r.diagnoses[0], &r.diagnoses[1]);
    assert!(
        first
            .cause
            .contains("(index 0, an IPv6 address) and the dest GID (an IPv4 address)"),
        "{}",
        first.cause
    );
    assert_eq!(
        first.evidence[0],
        "modify INIT->RTR of QP 0x11 on rxe0 failed: -22 (EINVAL)"
    );
    assert!(
        second.cause.contains("index 5 does not exist on rxe0"),
        "{}",
        second.cause
    );
}

#[test]
fn an_rtr_refused_for_want_of_a_neighbour_is_unreachable() {
    // The kernel resolves the dest GID's neighbour at RTR: nobody answers ARP for 192.0.2.99.
    const NOBODY: [u8; 16] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 0, 2, 99];
    for (ret, want) in [(-110, Some("unreachable")), (-22, None)] {
        let mut a = Analysis::default();
        tables(&mut a);
        let create = Body::QpCreate {
            qp: qp_info("rxe0", 0x11),
            ret: 0,
        };
        a.push(7, "mover", 2, create);
        a.push(
            7,
            "mover",
            2,
            modify_on("rxe0", 0x11, QpState::Init, 0, |_| {}),
        );
        let rtr = modify_on("rxe0", 0x11, QpState::Rtr, ret, |m| {
            m.dgid = Some(NOBODY);
            m.sgid_index = Some(1);
            m.dest_qpn = Some(0x12);
        });
        a.push(7, "mover", 3, rtr);
        let r = a.finish();
        let kinds: Vec<&str> = r.diagnoses.iter().map(|d| d.kind).collect();
        assert_eq!(kinds, want.into_iter().collect::<Vec<_>>(), "{ret}");
        if let Some(d) = r.diagnoses.first() {
            assert_eq!((d.pid, d.qpn), (7, Some(0x11)));
            assert!(d.cause.contains("dest GID 192.0.2.99"), "{}", d.cause);
            assert_eq!(
                d.evidence[0],
                "modify INIT->RTR of QP 0x11 on rxe0 failed: -110 (ETIMEDOUT)"
            );
        }
    }
}
