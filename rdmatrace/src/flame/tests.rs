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

fn named(frames: &[(u64, Option<&str>)]) -> Vec<Frame> {
    frames
        .iter()
        .map(|(a, n)| Frame {
            addr: *a,
            name: n.map(Into::into),
        })
        .collect()
}

fn call(pid: u32, func: &str, stack: &[(u64, Option<&str>)]) -> Record {
    Record {
        ts_ns: 1,
        wall_ns: 1,
        cpu: 0,
        pid,
        tid: pid,
        comm: "rt-mover".into(),
        body: Body::VerbsCall(crate::event::VerbsCall {
            func: func.into(),
            stack: named(stack),
        }),
    }
}

#[test]
fn verbs_calls_fold_outermost_caller_first_with_the_call_last() {
    let mut f = folder(Kind::Verbs);
    let inner_to_outer = [(3, Some("open_qp")), (2, Some("setup")), (1, Some("main"))];
    f.push(&call(7, "ibv_create_qp", &inner_to_outer));
    f.push(&call(7, "ibv_create_qp", &inner_to_outer));
    f.push(&call(7, "ibv_modify_qp", &[(4, None), (1, Some("main"))]));
    // Other kinds do not fold here.
    f.push(&retx(10, "bw", Some(0x11), "retransmit_timer"));
    assert_eq!(
        f.finish().lines(),
        [
            "rt-mover [7];main;[unknown];ibv_modify_qp 1",
            "rt-mover [7];main;setup;open_qp;ibv_create_qp 2",
        ]
    );
}

#[test]
fn cpu_samples_fold_user_then_kernel_frames_marked_k() {
    let mut f = folder(Kind::Cpu);
    let sample = |user: &[(u64, Option<&str>)], kernel: &[(u64, Option<&str>)]| Record {
        body: Body::CpuSample(crate::event::CpuSample {
            user: named(user),
            kernel: named(kernel),
        }),
        ..call(9, "", &[])
    };
    let user = [(2, Some("poll_loop")), (1, Some("main"))];
    f.push(&sample(&user, &[]));
    f.push(&sample(&user, &[]));
    f.push(&sample(
        &[(5, Some("write")), (1, Some("main"))],
        &[(0xb, Some("tcp_sendmsg")), (0xa, Some("do_syscall_64"))],
    ));
    assert_eq!(
        f.finish().lines(),
        [
            "rt-mover [9];main;poll_loop 2",
            "rt-mover [9];main;write;do_syscall_64_[k];tcp_sendmsg_[k] 1",
        ]
    );
}

#[test]
fn cpu_samples_named_by_one_table_fold_alike_until_a_name_or_the_process_changes() {
    use crate::symbolize::{Symbols, KERNEL_PID};
    let mut t = Symbols::default();
    t.insert(9, 1, "main");
    t.insert(9, 2, "poll_loop");
    t.insert(10, 1, "main");
    t.insert(10, 2, "poll_loop");
    t.insert(KERNEL_PID, 0xa, "do_syscall_64");
    let sample = |pid: u32, comm: &str, t: &Symbols| {
        let mut r = Record {
            comm: comm.into(),
            body: Body::CpuSample(crate::event::CpuSample {
                user: vec![Frame::new(2), Frame::new(1)],
                kernel: vec![Frame::new(0xa)],
            }),
            ..call(pid, "", &[])
        };
        t.annotate(&mut r);
        r
    };
    let mut f = folder(Kind::Cpu);
    // Repeats of one stack (names shared with the table) count into one line.
    for _ in 0..3 {
        f.push(&sample(9, "trainer", &t));
    }
    // Another process with the same texts at the same addresses: its own line.
    f.push(&sample(10, "trainer", &t));
    // The same process under another name (exec): its own line.
    f.push(&sample(9, "loader", &t));
    // A name replaced at the same address: the new text, not the folded one.
    t.insert(9, 2, "poll_loop_v2");
    f.push(&sample(9, "trainer", &t));
    f.push(&sample(9, "trainer", &t));
    // Unnamed frames are one text however many addresses.
    let mut unnamed = sample(9, "trainer", &Symbols::default());
    f.push(&unnamed);
    if let Body::CpuSample(c) = &mut unnamed.body {
        c.user[0].addr = 3;
    }
    f.push(&unnamed);
    let folded = f.finish();
    assert_eq!(
        folded.lines(),
        [
            "loader [9];main;poll_loop;do_syscall_64_[k] 1",
            "trainer [10];main;poll_loop;do_syscall_64_[k] 1",
            "trainer [9];[unknown];[unknown];[unknown]_[k] 2",
            "trainer [9];main;poll_loop;do_syscall_64_[k] 3",
            "trainer [9];main;poll_loop_v2;do_syscall_64_[k] 2",
        ]
    );
    assert_eq!(folded.total(), 9);
}
