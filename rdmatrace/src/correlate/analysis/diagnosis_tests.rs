//! Diagnoses from record sequences as real programs produce them.
use super::*;
use crate::correlate::Correlator;
use crate::event::{AsyncElement, AsyncEvent, ModifyAttrs, QpTrafficDelta, Resource, WcError};
use crate::testing::{qp_info, record as rec};

#[derive(Default)]
pub(super) struct Analysis {
    pub state: Correlator,
    analyzer: Analyzer,
}

impl Analysis {
    pub fn push(&mut self, pid: u32, comm: &str, ts: u64, body: Body) {
        let mut r = rec(pid, comm, ts, body);
        self.state.observe(&mut r);
        self.analyzer.push(&r, &self.state);
    }
    pub fn finish(self) -> Report {
        self.analyzer.finish()
    }
}

/// A modify of RC QP `qpn` on rxe0 to `to`, with extra attributes.
fn modify(qpn: u32, to: QpState, f: impl Fn(&mut ModifyAttrs)) -> Body {
    let mut attrs = ModifyAttrs {
        attr_mask: 1,
        new_state: Some(to),
        ..Default::default()
    };
    f(&mut attrs);
    Body::QpModify {
        qp: qp_info("rxe0", qpn),
        attrs,
        ret: 0,
    }
}

/// QP `qpn` of `pid`, connected to `peer`, in RTS.
fn connected(a: &mut Analysis, pid: u32, comm: &str, qpn: u32, peer: u32) {
    let create = Body::QpCreate {
        qp: qp_info("rxe0", qpn),
        ret: 0,
    };
    a.push(pid, comm, 1, create);
    a.push(pid, comm, 2, modify(qpn, QpState::Init, |_| {}));
    a.push(
        pid,
        comm,
        3,
        modify(qpn, QpState::Rtr, |m| m.dest_qpn = Some(peer)),
    );
    a.push(
        pid,
        comm,
        4,
        modify(qpn, QpState::Rts, |m| {
            m.timeout = Some(14);
            m.retry_cnt = Some(7);
            m.rnr_retry = Some(0);
        }),
    );
}

pub(super) fn wc(qpn: u32, pid: u32, comm: &str, status: &str) -> Body {
    Body::WcError(WcError {
        qp: qp_info("rxe0", qpn).key,
        cqn: 3,
        status: status.into(),
        vendor_err: 0,
        owner_pid: pid,
        owner_comm: comm.into(),
    })
}

pub(super) fn traffic(qpn: u32, pid: u32, tx: u64, rx: u64) -> Body {
    Body::QpTraffic(QpTrafficDelta {
        qp: qp_info("rxe0", qpn),
        tx_packets: tx,
        tx_bytes: tx * 1024,
        rx_packets: rx,
        rx_bytes: rx * 64,
        owner_pid: pid,
        owner_comm: "x".into(),
    })
}

#[test]
fn rnr_names_the_receiver_and_lists_the_flushes_under_it() {
    let mut a = Analysis::default();
    connected(&mut a, 7, "sender", 0x11, 0x12);
    connected(&mut a, 8, "receiver", 0x12, 0x11);
    a.push(
        8,
        "receiver",
        5,
        modify(0x12, QpState::Rts, |m| m.min_rnr_timer = Some(12)),
    );
    a.push(0, "", 10, wc(0x11, 7, "sender", "RNR_RETRY_EXC_ERR"));
    for ts in 11..16 {
        a.push(0, "", ts, wc(0x11, 7, "sender", "WR_FLUSH_ERR"));
    }
    let r = a.finish();
    assert_eq!(r.diagnoses.len(), 1, "{:#?}", r.diagnoses);
    let d = &r.diagnoses[0];
    assert_eq!((d.kind, d.pid, d.qpn), ("rnr", 7, Some(0x11)));
    assert!(d.cause.contains("receiver pid 8 (receiver)"), "{}", d.cause);
    assert!(
        d.evidence.iter().any(|e| e == "rnr_retry 0 on QP 0x11"),
        "{:?}",
        d.evidence
    );
    assert!(
        d.evidence.iter().any(|e| e
            == "min_rnr_timer 12 (640.0 µs) on the receiving QP 0x12: the sender waited that long between retries"),
        "{:?}",
        d.evidence
    );
    assert_eq!(d.consequences, ["5 work request(s) flushed (WR_FLUSH_ERR)"]);
}

#[test]
fn a_teardown_that_flushes_is_not_a_fault() {
    let mut a = Analysis::default();
    connected(&mut a, 7, "qperf", 0x11, 0x12);
    a.push(7, "qperf", 10, modify(0x11, QpState::Err, |_| {}));
    for ts in 11..14 {
        a.push(0, "", ts, wc(0x11, 7, "qperf", "WR_FLUSH_ERR"));
    }
    let r = a.finish();
    assert!(r.diagnoses.is_empty(), "{:#?}", r.diagnoses);
}

#[test]
fn a_cq_overrun_is_the_cq_owners_not_the_kernel_workers() {
    let mut a = Analysis::default();
    let cq = Body::Resource(Resource {
        added: true,
        res_type: ResType::Cq,
        dev: "rxe0".into(),
        id: 5,
        owner_pid: 9,
        owner_comm: "poller".into(),
        user: true,
        cq: Some((16, 0)),
        mr: None,
    });
    a.push(9, "poller", 1, cq);
    let ev = Body::Async(AsyncEvent {
        dev: "rxe0".into(),
        event: "CQ_ERR".into(),
        element: AsyncElement::Cq(5),
        source: "uverbs",
        owner_pid: 0,
        owner_comm: Default::default(),
    });
    a.push(31, "kworker/0:1", 2, ev);
    let r = a.finish();
    assert_eq!(r.diagnoses.len(), 1, "{:#?}", r.diagnoses);
    let d = &r.diagnoses[0];
    assert_eq!(
        (d.kind, d.pid, d.comm.as_str()),
        ("cq_overrun", 9, "poller")
    );
    assert!(d.cause.contains("CQ#5 of 16 entries"), "{}", d.cause);
    // The raw anomaly names the owner too.
    let a = r
        .anomalies
        .iter()
        .find(|x| x.kind == "async_error")
        .expect("async_error anomaly");
    assert_eq!((a.pid, a.comm.as_str()), (9, "poller"));
}

#[test]
fn retries_exceeded_is_unreachable_without_any_answer_and_peer_gone_after_the_peer_ended() {
    // Nothing ever came back.
    let mut a = Analysis::default();
    connected(&mut a, 7, "client", 0x11, 0x99);
    a.push(0, "", 5, traffic(0x11, 7, 8, 0));
    a.push(0, "", 9, wc(0x11, 7, "client", "RETRY_EXC_ERR"));
    let r = a.finish();
    assert_eq!(r.diagnoses.len(), 1, "{:#?}", r.diagnoses);
    assert_eq!(r.diagnoses[0].kind, "unreachable");
    assert!(r.diagnoses[0]
        .evidence
        .iter()
        .any(|e| e.contains("local ACK timeout 67.1 ms") && e.contains("retry_cnt 7")));

    // Traffic flowed both ways, then the peer destroyed its QP.
    let mut a = Analysis::default();
    connected(&mut a, 7, "client", 0x11, 0x12);
    connected(&mut a, 8, "server", 0x12, 0x11);
    a.push(0, "", 5, traffic(0x11, 7, 100, 100));
    let destroy = Body::QpDestroy {
        qp: qp_info("rxe0", 0x12),
        ret: 0,
    };
    a.push(8, "server", 6, destroy);
    a.push(0, "", 9, wc(0x11, 7, "client", "RETRY_EXC_ERR"));
    let r = a.finish();
    assert_eq!(r.diagnoses.len(), 1, "{:#?}", r.diagnoses);
    let d = &r.diagnoses[0];
    assert_eq!((d.kind, d.pid), ("peer_gone", 7));
    assert!(d.cause.contains("pid 8 server"), "{}", d.cause);
}

#[test]
fn a_job_told_by_its_environment_not_to_use_rdma_is_diagnosed_and_nothing_else_is_kept() {
    let mut a = Analysis::default();
    // Opened the device, created a QP, then 8 MiB over TCP: what NCCL does with IB disabled.
    let ctx = Body::Resource(Resource {
        added: true,
        res_type: ResType::Ctx,
        dev: "rxe0".into(),
        id: 1,
        owner_pid: 7,
        owner_comm: "trainer".into(),
        user: true,
        cq: None,
        mr: None,
    });
    a.push(7, "trainer", 1, ctx);
    a.state.env_seen(7, "NCCL_IB_DISABLE", "1");
    let create = Body::QpCreate {
        qp: qp_info("rxe0", 0x11),
        ret: 0,
    };
    a.push(7, "trainer", 2, create);
    let tcp = Body::TcpBytes(crate::event::TcpBytesDelta {
        tx_bytes: 8 << 20,
        rx_bytes: 0,
        tx_calls: 128,
        rx_calls: 0,
        peer: None,
    });
    a.push(7, "trainer", 3, tcp);
    // A healthy neighbour with a transport variable that does not disable anything.
    a.state.env_seen(8, "NCCL_IB_HCA", "rxe0");
    let tcp = Body::TcpBytes(crate::event::TcpBytesDelta {
        tx_bytes: 8 << 20,
        rx_bytes: 0,
        tx_calls: 128,
        rx_calls: 0,
        peer: None,
    });
    a.push(8, "loader", 3, tcp);
    let r = a.finish();
    let p = r
        .processes
        .iter()
        .find(|p| p.stats.pid == 7)
        .expect("trainer");
    assert_eq!(p.verdict, Verdict::TcpFallback);
    assert!(
        p.evidence
            .iter()
            .any(|e| e == "environment: NCCL_IB_DISABLE=1"),
        "{:?}",
        p.evidence
    );
    assert_eq!(r.diagnoses.len(), 1, "{:#?}", r.diagnoses);
    let d = &r.diagnoses[0];
    assert_eq!((d.kind, d.pid), ("transport_disabled_by_env", 7));
    assert!(d.cause.contains("NCCL_IB_DISABLE=1"), "{}", d.cause);
    assert!(d.fix.contains("unset NCCL_IB_DISABLE"), "{}", d.fix);
}

fn tcp_8mib() -> Body {
    Body::TcpBytes(crate::event::TcpBytesDelta {
        tx_bytes: 8 << 20,
        rx_bytes: 0,
        tx_calls: 128,
        rx_calls: 0,
        peer: None,
    })
}

fn verbs(func: &str) -> Body {
    Body::VerbsCall(crate::event::VerbsCall {
        func: func.into(),
        stack: Vec::new(),
    })
}

#[test]
fn a_process_that_found_no_device_and_moved_data_over_tcp_is_no_rdma_device() {
    let mut a = Analysis::default();
    // Looked, found the list empty (a container without /dev/infiniband), used TCP.
    a.push(7, "trainer", 1, verbs("ibv_get_device_list"));
    a.push(7, "trainer", 2, tcp_8mib());
    // Looked, opened nothing either, but told by its environment to use TCP: that says why.
    a.state.env_seen(8, "NCCL_IB_DISABLE", "1");
    a.push(8, "told", 1, verbs("ibv_get_device_list"));
    a.push(8, "told", 2, tcp_8mib());
    // Never looked: plain TCP, nothing to diagnose.
    a.push(9, "loader", 2, tcp_8mib());
    let r = a.finish();
    let verdict = |pid| {
        r.processes
            .iter()
            .find(|p| p.stats.pid == pid)
            .map(|p| p.verdict)
    };
    assert_eq!(verdict(7), Some(Verdict::TcpFallback));
    assert_eq!(verdict(9), Some(Verdict::Tcp));
    let kinds: Vec<_> = r.diagnoses.iter().map(|d| (d.kind, d.pid)).collect();
    assert_eq!(
        kinds,
        [("transport_disabled_by_env", 8), ("no_rdma_device", 7)],
        "{:#?}",
        r.diagnoses
    );
    assert!(
        r.diagnoses[1]
            .evidence
            .iter()
            .any(|e| e == "looked for RDMA devices (1 ibv_get_device_list call(s)) and opened none"),
        "{:?}",
        r.diagnoses[1].evidence
    );
}

#[test]
fn a_registration_over_the_memlock_limit_is_mr_reg_failed_with_the_limit() {
    let mut a = Analysis::default();
    let failed = |ret, memlock| {
        Body::UmemFailed(crate::event::UmemFailed {
            dev: "rxe1".into(),
            ret,
            size: 16 << 20,
            memlock,
            pinned: Some(64 << 10),
        })
    };
    a.push(7, "trainer", 5, failed(-12, Some(64 << 10)));
    // Another errno, or no limit read: named by its errno, not blamed on the limit.
    a.push(8, "other", 6, failed(-14, None));
    let r = a.finish();
    let kinds: Vec<_> = r.diagnoses.iter().map(|d| (d.kind, d.pid)).collect();
    assert_eq!(kinds, [("mr_reg_failed", 7), ("mr_reg_failed", 8)]);
    let (d, e) = (&r.diagnoses[0], &r.diagnoses[1]);
    assert!(
        d.cause
            .contains("over its locked-memory limit (RLIMIT_MEMLOCK 64.0 KiB)"),
        "{}",
        d.cause
    );
    assert_eq!(d.dev.as_deref(), Some("rxe1"));
    assert_eq!(
        d.evidence,
        [
            "pinning 16.0 MiB (16777216 bytes) for a registration on rxe1 failed: -12 (ENOMEM)",
            "RLIMIT_MEMLOCK 64.0 KiB, 64.0 KiB already pinned"
        ]
    );
    assert!(d.fix.contains("ulimit -l"), "{}", d.fix);
    assert!(e.cause.ends_with("-14 (EFAULT)"), "{}", e.cause);
}

#[test]
fn a_refused_create_names_the_capacity_above_the_devices() {
    let mut a = Analysis::default();
    let caps = |send_wr, recv_sge| {
        Body::QpCaps(crate::event::QpCaps {
            dev: "rxe0".into(),
            ret: -22,
            qp_type: 2,
            max_send_wr: send_wr,
            max_recv_wr: 16,
            max_send_sge: 1,
            max_recv_sge: recv_sge,
            max_inline_data: 0,
            dev_max_qp_wr: 16384,
            dev_max_send_sge: 32,
            dev_max_recv_sge: 32,
        })
    };
    a.push(7, "trainer", 5, caps(100_000, 64));
    a.push(8, "other", 6, caps(16, 1));
    let r = a.finish();
    let kinds: Vec<_> = r.diagnoses.iter().map(|d| (d.kind, d.pid)).collect();
    assert_eq!(kinds, [("create_failed", 7), ("create_failed", 8)]);
    assert!(
        r.diagnoses[0].cause.ends_with(
            "max_send_wr 100000 above rxe0's max_qp_wr 16384, max_recv_sge 64 above rxe0's max_recv_sge 32"
        ),
        "{}",
        r.diagnoses[0].cause
    );
    assert!(
        r.diagnoses[1]
            .cause
            .ends_with("-22 (EINVAL); no capacity asked is above the device's limits"),
        "{}",
        r.diagnoses[1].cause
    );
}

#[test]
fn a_refused_cq_or_srq_names_the_depth_above_the_devices() {
    let mut a = Analysis::default();
    let caps = |queue, depth, sge, max_sge| {
        Body::QueueCaps(crate::event::QueueCaps {
            dev: "rxe0".into(),
            ret: -22,
            queue,
            depth,
            sge,
            dev_max_depth: 32767,
            dev_max_sge: max_sge,
        })
    };
    a.push(7, "trainer", 5, caps("CQ", 1 << 20, 0, 0));
    a.push(8, "server", 6, caps("SRQ", 1 << 20, 64, 27));
    let r = a.finish();
    let kinds: Vec<_> = r.diagnoses.iter().map(|d| (d.kind, d.pid)).collect();
    assert_eq!(kinds, [("create_failed", 7), ("create_failed", 8)]);
    assert!(
        r.diagnoses[0]
            .cause
            .ends_with("could not create a CQ on rxe0: entries 1048576 above rxe0's max_cqe 32767"),
        "{}",
        r.diagnoses[0].cause
    );
    assert!(
        r.diagnoses[1].cause.ends_with(
            "could not create a SRQ on rxe0: max_wr 1048576 above rxe0's max_srq_wr 32767, max_sge 64 above rxe0's max_srq_sge 27"
        ),
        "{}",
        r.diagnoses[1].cause
    );
    assert_eq!(
        r.diagnoses[0].fix,
        "ask for no more than the device allows (`ibv_devinfo -v` on rxe0 lists max_cqe), or \
         spread the work over more CQs"
    );
    assert_eq!(
        r.diagnoses[1].fix,
        "ask for no more than the device allows (`ibv_devinfo -v` on rxe0 lists max_srq_wr and \
         max_srq_sge), or spread the work over more SRQs"
    );
    // Nothing asked above the device's limits: the other limits are named instead.
    let mut a = Analysis::default();
    a.push(9, "trainer", 7, caps("CQ", 64, 0, 0));
    let r = a.finish();
    assert_eq!(
        r.diagnoses[0].fix,
        "check the other limits (`ibv_devinfo -v`: max_cq, max_srq, the completion vector) and \
         the process's locked-memory limit"
    );
}

#[test]
fn tcp_to_other_peers_than_its_qps_does_not_make_an_rdma_job_mixed() {
    let run = |tcp_peer: Option<[u8; 4]>| {
        let mut a = Analysis::default();
        let create = Body::QpCreate {
            qp: qp_info("rxe0", 0x11),
            ret: 0,
        };
        a.push(7, "trainer", 1, create);
        let peer_gid = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 0, 2, 2];
        let to_peer = modify(0x11, QpState::Rtr, |m| {
            m.dest_qpn = Some(0x12);
            m.dgid = Some(peer_gid);
        });
        a.push(7, "trainer", 2, to_peer);
        a.push(7, "trainer", 3, modify(0x11, QpState::Rts, |_| {}));
        a.push(0, "", 4, traffic(0x11, 7, 16 * 1024, 100));
        let tcp = Body::TcpBytes(crate::event::TcpBytesDelta {
            tx_bytes: 24 << 20,
            rx_bytes: 0,
            tx_calls: 400,
            rx_calls: 0,
            peer: tcp_peer.map(std::net::IpAddr::from),
        });
        a.push(7, "trainer", 5, tcp);
        let r = a.finish();
        r.processes
            .into_iter()
            .find(|p| p.stats.pid == 7)
            .expect("trainer")
    };
    // A checkpoint upload to another host beside the job: side traffic.
    let p = run(Some([10, 1, 2, 3]));
    assert_eq!(p.verdict, Verdict::Rdma, "{:?}", p.evidence);
    assert!(
        p.evidence.iter().any(|e| e
            == "24.0 MiB of it to other peers than its QPs' (10.1.2.3): side traffic, not its transport"),
        "{:?}",
        p.evidence
    );
    // The same bytes to its QP's peer, or to a peer not known: the transport is mixed.
    assert_eq!(run(Some([192, 0, 2, 2])).verdict, Verdict::Mixed);
    assert_eq!(run(None).verdict, Verdict::Mixed);
}

#[test]
fn a_receive_too_short_is_the_receivers_local_error_and_the_senders_nak_its_consequence() {
    // REM_OP_ERR is rxe's NAK for it; REM_INV_REQ_ERR other drivers'.
    for nak in ["REM_OP_ERR", "REM_INV_REQ_ERR"] {
        let mut a = Analysis::default();
        connected(&mut a, 7, "mover", 0x11, 0x12);
        connected(&mut a, 7, "mover", 0x12, 0x11);
        // The sender hears of it second: the receiver's NAK.
        a.push(0, "", 10, wc(0x12, 7, "mover", "LOC_LEN_ERR"));
        a.push(0, "", 11, wc(0x11, 7, "mover", nak));
        a.push(0, "", 12, wc(0x12, 7, "mover", "WR_FLUSH_ERR"));
        let r = a.finish();
        assert_eq!(r.diagnoses.len(), 1, "{:#?}", r.diagnoses);
        let d = &r.diagnoses[0];
        assert_eq!((d.kind, d.qpn), ("local_error", Some(0x12)));
        let want = format!(
            "the sending QP 0x11 on rxe0 of pid 7 (mover) failed with {nak}: the receiver's NAK for this error"
        );
        assert!(d.consequences.contains(&want), "{:?}", d.consequences);
    }
    // Alone (the receiver not traced), the sender's error is its own diagnosis.
    let mut a = Analysis::default();
    connected(&mut a, 7, "mover", 0x11, 0x12);
    a.push(0, "", 11, wc(0x11, 7, "mover", "REM_INV_REQ_ERR"));
    let r = a.finish();
    assert_eq!(r.diagnoses.len(), 1, "{:#?}", r.diagnoses);
    assert_eq!(
        (r.diagnoses[0].kind, r.diagnoses[0].qpn),
        ("local_error", Some(0x11))
    );
}

#[test]
fn a_remote_access_error_names_the_targets_mrs_and_their_access() {
    let mr = |access: u32| {
        Body::Resource(Resource {
            added: true,
            res_type: ResType::Mr,
            dev: "rxe0".into(),
            id: 4,
            owner_pid: 8,
            owner_comm: "receiver".into(),
            user: true,
            cq: None,
            mr: Some(crate::event::MrInfo {
                lkey: 0x1234,
                rkey: 0x1234,
                length: 65536,
                iova: 0,
                access: Some(access),
            }),
        })
    };
    for (access, without) in [(1, true), (1 | 2, false)] {
        let mut a = Analysis::default();
        connected(&mut a, 7, "sender", 0x11, 0x12);
        connected(&mut a, 8, "receiver", 0x12, 0x11);
        a.push(8, "receiver", 5, mr(access));
        a.push(0, "", 10, wc(0x11, 7, "sender", "REM_ACCESS_ERR"));
        let r = a.finish();
        let d = &r.diagnoses[0];
        assert_eq!((d.kind, d.qpn), ("remote_access", Some(0x11)));
        assert_eq!(
            d.cause
                .contains("pid 8 (receiver) registered its MRs on rxe0 without remote access"),
            without,
            "{}",
            d.cause
        );
        assert!(
            d.evidence.iter().any(|e| e.starts_with(
                "pid 8 registered an MR on rxe0 with rkey 0x1234, 65536 bytes, access LOCAL_WRITE"
            )),
            "{:?}",
            d.evidence
        );
    }
}
