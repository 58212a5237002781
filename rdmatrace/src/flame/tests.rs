use super::*;
use crate::event::{QpInfo, QpKey, Retransmit, TcpTuple, Transport};

fn retx(owner: u32, comm: &str, qpn: Option<u32>, reason: &'static str) -> Record {
    Record {
        ts_ns: 1,
        wall_ns: 1,
        cpu: 0,
        pid: 0,
        tid: 0,
        comm: "swapper/1".into(),
        body: Body::Retransmit(Retransmit {
            transport: if qpn.is_some() {
                Transport::Rxe
            } else {
                Transport::Tcp
            },
            reason,
            qp: qpn.map(|qpn| QpInfo {
                key: QpKey {
                    dev: "rxe0".into(),
                    qpn,
                },
                qp_type: 2,
            }),
            tcp: qpn.is_none().then(|| TcpTuple {
                saddr: [192, 0, 2, 1].into(),
                sport: 5000,
                daddr: [192, 0, 2, 2].into(),
                dport: 80,
                state: 1,
            }),
            owner_pid: owner,
            owner_comm: comm.into(),
        }),
    }
}

#[test]
fn retransmits_fold_by_owner_target_and_reason() {
    let mut f = folder(Kind::Retransmits);
    for _ in 0..3 {
        f.push(&retx(10, "bw", Some(0x11), "retransmit_timer"));
    }
    f.push(&retx(10, "bw", Some(0x11), "rnr_nak_timer"));
    f.push(&retx(11, "py;thon", None, "tcp_retransmit_skb"));
    f.push(&retx(0, "", Some(0x12), "retransmit_timer"));
    let folded = f.finish();
    assert_eq!(
        folded.lines(),
        vec![
            "[unknown owner];rxe0;QPN 0x12;retransmit_timer 1",
            "bw [10];rxe0;QPN 0x11;retransmit_timer 3",
            "bw [10];rxe0;QPN 0x11;rnr_nak_timer 1",
            "py:thon [11];tcp;192.0.2.1:5000->192.0.2.2:80;tcp_retransmit_skb 1",
        ]
    );
    assert_eq!(folded.total(), 6);
}

#[test]
fn diff_lines_cover_both_sides() {
    let mut a = Folded::default();
    a.add(vec!["p".into(), "x".into()], 2);
    a.add(vec!["p".into(), "gone".into()], 1);
    let mut b = Folded::default();
    b.add(vec!["p".into(), "x".into()], 5);
    b.add(vec!["p".into(), "new".into()], 1);
    assert_eq!(
        Folded::diff_lines(&a, &b),
        vec!["p;gone 1 0", "p;new 0 1", "p;x 2 5"]
    );
}

#[test]
fn svg_is_deterministic_and_names_the_frames() {
    let mut f = Folded::default();
    f.add(
        vec![
            "bw [10]".into(),
            "rxe0".into(),
            "QPN 0x11".into(),
            "retransmit_timer".into(),
        ],
        7,
    );
    let a = svg::render(Kind::Retransmits, &f, None).expect("svg");
    let b = svg::render(Kind::Retransmits, &f, None).expect("svg");
    assert_eq!(a, b);
    let text = String::from_utf8(a).expect("utf8");
    assert!(text.contains("QPN 0x11") && text.contains("retransmit_timer"));
    assert!(matches!(
        svg::render(Kind::Verbs, &Folded::default(), None),
        Err(svg::RenderError::Empty { .. })
    ));
}
