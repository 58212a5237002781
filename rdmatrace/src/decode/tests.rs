use rdmatrace_common::event::{
    attr_mask, EventHeader, EventKind, QpIdent, QpModifyEvent, AV_MIN_RNR_TIMER, AV_SGID_INDEX,
    MIN_RNR_TIMER_SHIFT, STATE_UNKNOWN,
};

use super::*;
use crate::event::QpState;

/// The record's bytes, as the ring buffer carries them.
fn bytes_of<T: aya::Pod>(v: &T) -> Vec<u8> {
    crate::testing::bytes_of(v).to_vec()
}

fn modify_event() -> QpModifyEvent {
    let dev = crate::testing::name("rxe0");
    let comm = crate::testing::name("app");
    QpModifyEvent {
        header: EventHeader {
            kind: EventKind::QpModify as u32,
            cpu: 1,
            ts_ns: 1000,
            pid: 42,
            tid: 43,
            comm,
        },
        qp: QpIdent {
            dev,
            qpn: 0x11,
            qp_type: 2,
        },
        ret: -22,
        attr_mask: attr_mask::STATE | attr_mask::DEST_QPN | attr_mask::PATH_MTU,
        cur_state: STATE_UNKNOWN,
        new_state: 2,
        path_mtu: 3,
        dest_qpn: 0x12,
        sq_psn: 7,
        rq_psn: 8,
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        av_flags: AV_SGID_INDEX,
        sgid_index: 3,
        dgid: [0; 16],
    }
}

#[test]
fn modify_fields_outside_the_mask_are_absent() {
    let rec = decode(&bytes_of(&modify_event()), &ClockAnchor::fixed(5)).expect("decode");
    assert_eq!(
        (rec.ts_ns, rec.wall_ns, rec.pid, rec.tid, rec.comm.as_str()),
        (1000, 1005, 42, 43, "app")
    );
    let Body::QpModify { qp, attrs, ret } = rec.body else {
        panic!("not a modify: {:?}", rec.body)
    };
    assert_eq!((qp.key.dev.as_str(), qp.key.qpn, ret), ("rxe0", 0x11, -22));
    assert_eq!(attrs.new_state, Some(QpState::Rtr));
    assert_eq!(attrs.cur_state, None, "CUR_STATE not in the mask");
    assert_eq!((attrs.dest_qpn, attrs.path_mtu), (Some(0x12), Some(3)));
    assert_eq!(
        (attrs.sq_psn, attrs.timeout, attrs.dgid, attrs.sgid_index),
        (None, None, None, None),
        "the source GID index goes with the address vector"
    );
    let mut ev = modify_event();
    ev.attr_mask |= attr_mask::AV;
    let rec = decode(&bytes_of(&ev), &ClockAnchor::fixed(5)).expect("decode");
    let Body::QpModify { attrs, .. } = rec.body else {
        panic!("not a modify")
    };
    assert_eq!((attrs.dgid, attrs.sgid_index), (Some([0; 16]), Some(3)));
    // Records made before the index was read: unknown, not index 0.
    ev.av_flags = 0;
    let rec = decode(&bytes_of(&ev), &ClockAnchor::fixed(5)).expect("decode");
    let Body::QpModify { attrs, .. } = rec.body else {
        panic!("not a modify")
    };
    assert_eq!(attrs.sgid_index, None);
    // min_rnr_timer rides in the flags' upper bits: with its mask bit and flag only.
    ev.av_flags = AV_SGID_INDEX | AV_MIN_RNR_TIMER | (31 << MIN_RNR_TIMER_SHIFT);
    let rec = decode(&bytes_of(&ev), &ClockAnchor::fixed(5)).expect("decode");
    let Body::QpModify { attrs, .. } = rec.body else {
        panic!("not a modify")
    };
    assert_eq!((attrs.sgid_index, attrs.min_rnr_timer), (Some(3), None));
    ev.attr_mask |= attr_mask::MIN_RNR_TIMER;
    let rec = decode(&bytes_of(&ev), &ClockAnchor::fixed(5)).expect("decode");
    let Body::QpModify { attrs, .. } = rec.body else {
        panic!("not a modify")
    };
    assert_eq!((attrs.sgid_index, attrs.min_rnr_timer), (Some(3), Some(31)));
}

#[test]
fn short_unknown_and_truncated_records_are_errors_not_panics() {
    let anchor = ClockAnchor::fixed(0);
    assert!(matches!(
        decode(&[1, 0, 0], &anchor),
        Err(DecodeError::ShortHeader { .. })
    ));
    let mut b = bytes_of(&modify_event());
    b[0] = 99;
    assert_eq!(
        decode(&b, &anchor),
        Err(DecodeError::UnknownKind { kind: 99 })
    );
    let b = bytes_of(&modify_event());
    for cut in 40..b.len() {
        assert!(
            matches!(decode(&b[..cut], &anchor), Err(DecodeError::Short { .. })),
            "cut {cut}"
        );
    }
}

#[test]
fn a_device_unregistration_decodes_and_prints_as_such() {
    use rdmatrace_common::event::{async_source, element, AsyncEvent};
    let m = modify_event();
    let dev: [u8; 64] = crate::testing::name("rxe0");
    let ev = AsyncEvent {
        header: EventHeader {
            kind: EventKind::AsyncEvent as u32,
            ..m.header
        },
        qp: QpIdent {
            dev,
            qpn: 0,
            qp_type: 0,
        },
        event_type: async_source::DEVICE_UNREGISTER,
        element: element::PORT,
        element_id: 0,
        source: async_source::CORE,
    };
    let rec = decode(&bytes_of(&ev), &ClockAnchor::fixed(0)).expect("decode");
    let Body::Async(a) = &rec.body else {
        panic!("not an async event: {:?}", rec.body)
    };
    assert_eq!(
        (a.dev.as_str(), a.event.as_str(), a.source),
        ("rxe0", "DEVICE_UNREGISTER", "ib_core")
    );
    let line = crate::sinks::text::line(&rec);
    assert!(
        line.contains("DEVICE_UNREGISTER") && !line.contains("port"),
        "{line}"
    );
    // The same record from uverbs is an ordinary ib_event (type 1 = QP_FATAL).
    let uverbs = AsyncEvent {
        source: async_source::UVERBS,
        ..ev
    };
    let rec = decode(&bytes_of(&uverbs), &ClockAnchor::fixed(0)).expect("decode");
    let Body::Async(a) = &rec.body else {
        panic!("not an async event")
    };
    assert_eq!((a.event.as_str(), a.source), ("QP_FATAL", "uverbs"));
}

#[test]
fn c_str_stops_at_the_first_nul_at_every_position() {
    // Every length 0..=40 and every NUL position, against the plain byte scan.
    for len in 0..=40usize {
        for nul in 0..=len {
            let mut b: Vec<u8> = (0..len).map(|i| b'a' + (i % 26) as u8).collect();
            if nul < len {
                b[nul] = 0;
                // bytes after the NUL, NULs included, do not matter
                for x in b.iter_mut().skip(nul + 1).step_by(3) {
                    *x = 0;
                }
            }
            let want: String = b
                .iter()
                .take_while(|&&c| c != 0)
                .map(|&c| c as char)
                .collect();
            assert_eq!(c_str(&b), want, "len {len} nul {nul}");
        }
    }
    // 0x80..0xff bytes: the lossy path, and a 0x01 byte right before the NUL.
    assert_eq!(c_str(b"ab\x01\0cd"), "ab\u{1}");
    assert_eq!(c_str(b"\xffab\0"), "\u{fffd}ab");
    assert_eq!(c_str("mlx5_0é\0".as_bytes()), "mlx5_0é");
}

/// A CPU sample decoded into a record that held another one (the stage's reused record) has
/// exactly its own frames: none left over from a deeper stack, none named by the previous.
#[test]
fn a_sample_decoded_over_another_has_only_its_own_frames() {
    use rdmatrace_common::event::CpuSampleEvent;
    let sample = |pid: u32, user: &[u64], kernel: &[u64]| {
        let mut ev: CpuSampleEvent = crate::testing::zeroed();
        ev.header.kind = EventKind::CpuSample as u32;
        ev.header.pid = pid;
        ev.header.comm = crate::testing::name("app");
        ev.user_frames = user.len() as u32;
        ev.user_ips[..user.len()].copy_from_slice(user);
        ev.kernel_frames = kernel.len() as u32;
        ev.kernel_ips[..kernel.len()].copy_from_slice(kernel);
        bytes_of(&ev)
    };
    let anchor = ClockAnchor::fixed(0);
    let deep = sample(7, &[1, 2, 3, 4, 5], &[0xffff_0001, 0xffff_0002]);
    let shallow = sample(8, &[9, 8], &[]);
    let mut reused = Record::lost(0, None, 0, &anchor);
    decode_into(&deep, &anchor, &mut reused).expect("deep");
    if let Body::CpuSample(c) = &mut reused.body {
        c.user[0].name = Some("named_before".into());
    }
    decode_into(&shallow, &anchor, &mut reused).expect("shallow");
    let mut fresh = Record::lost(0, None, 0, &anchor);
    decode_into(&shallow, &anchor, &mut fresh).expect("fresh");
    assert_eq!(reused, fresh);
    let Body::CpuSample(c) = &reused.body else {
        panic!("not a sample: {:?}", reused.body)
    };
    assert_eq!(c.user, vec![Frame::new(9), Frame::new(8)]);
    assert!(c.kernel.is_empty());
    // And back to a deeper one, after a record of another kind.
    decode_into(&bytes_of(&modify_event()), &anchor, &mut reused).expect("modify");
    decode_into(&deep, &anchor, &mut reused).expect("deep again");
    let Body::CpuSample(c) = &reused.body else {
        panic!("not a sample: {:?}", reused.body)
    };
    assert_eq!(
        c.user.iter().map(|f| f.addr).collect::<Vec<_>>(),
        [1, 2, 3, 4, 5]
    );
    assert_eq!(c.kernel.len(), 2);
    assert!(c.user.iter().chain(&c.kernel).all(|f| f.name.is_none()));
}

/// Runs of one kind are decoded into the body the record holds already: the result must be
/// the same as a fresh decode, whatever the previous record held and whatever the correlator
/// wrote into it (an owner).
#[test]
fn decoding_into_a_reused_record_equals_a_fresh_decode() {
    use rdmatrace_common::event::{
        reason, transport, QpTrafficSample, RetransmitEvent, TcpBytesSample,
    };
    let t = crate::testing::name;
    let header = |kind: EventKind, pid: u32, comm: &str| EventHeader {
        kind: kind as u32,
        cpu: pid % 3,
        ts_ns: u64::from(pid) * 10,
        pid,
        tid: pid + 1,
        comm: t(comm),
    };
    let rxe = |pid: u32, dev: &str, qpn: u32, owner: (u32, &str)| {
        let mut r: RetransmitEvent = crate::testing::zeroed();
        r.header = header(EventKind::Retransmit, pid, "ksoftirqd/1");
        r.qp = crate::testing::qp(dev, qpn, 2);
        r.transport = transport::RXE;
        r.reason = reason::RXE_RNR_NAK_TIMER;
        (r.owner.pid, r.owner.comm) = (owner.0, t(owner.1));
        bytes_of(&r)
    };
    let tcp = |pid: u32| {
        let mut r: RetransmitEvent = crate::testing::zeroed();
        r.header = header(EventKind::Retransmit, pid, "swapper/0");
        r.transport = transport::TCP;
        r.reason = reason::TCP_RETRANSMIT_SKB;
        (r.owner.pid, r.owner.comm) = (77, t("iperf"));
        (r.tcp.family, r.tcp.sport, r.tcp.dport) = (2, 40000, 5201);
        r.tcp.daddr[..4].copy_from_slice(&[192, 0, 2, 9]);
        bytes_of(&r)
    };
    let traffic = |pid: u32, dev: &str, qpn: u32, packets: u64| {
        let mut s: QpTrafficSample = crate::testing::zeroed();
        s.header = header(EventKind::QpTraffic, pid, "");
        s.traffic.qp = crate::testing::qp(dev, qpn, 4);
        (s.traffic.tx_packets, s.traffic.rx_bytes) = (packets, packets * 4096);
        bytes_of(&s)
    };
    let tcp_bytes = |pid: u32, family: u16| {
        let mut s: TcpBytesSample = crate::testing::zeroed();
        s.header = header(EventKind::TcpBytes, pid, "app");
        (s.bytes.tx_bytes, s.bytes.rx_calls, s.bytes.family) = (100, 3, family);
        s.bytes.daddr[..4].copy_from_slice(&[192, 0, 2, 7]);
        bytes_of(&s)
    };
    let stream = [
        rxe(1, "rxe0", 17, (0, "")),
        rxe(2, "rxe0", 18, (0, "")),
        rxe(3, "mlx5_1", 18, (5, "owner")),
        tcp(4),
        rxe(5, "rxe0", 17, (0, "")),
        traffic(6, "rxe0", 17, 9),
        traffic(7, "rxe1", 17, 0),
        tcp_bytes(8, 2),
        tcp_bytes(9, 0),
        bytes_of(&modify_event()),
        tcp(10),
        tcp(11),
    ];
    let anchor = ClockAnchor::fixed(5);
    let mut rec = Record::lost(0, None, 0, &anchor);
    for (i, bytes) in stream.iter().enumerate() {
        decode_into(bytes, &anchor, &mut rec).expect("decode");
        let fresh = decode(bytes, &anchor).expect("decode");
        assert_eq!(rec, fresh, "record {i}");
        // What the correlator writes into owner-less records.
        match &mut rec.body {
            Body::Retransmit(r) => (r.owner_pid, r.owner_comm) = (999, "stale".into()),
            Body::QpTraffic(q) => (q.owner_pid, q.owner_comm) = (999, "stale".into()),
            _ => {}
        }
    }
}
