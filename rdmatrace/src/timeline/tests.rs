use super::*;
use crate::event::{CmEvent, QpTrafficDelta, Retransmit, TcpBytesDelta, Transport};

/// The builder as the timeline sink drives it: each host's records observed by that host's
/// correlator first.
#[derive(Default)]
struct Builder {
    b: TimelineBuilder,
    states: Vec<crate::correlate::Correlator>,
}

impl Builder {
    fn host(&mut self, name: &str, kernel: &str, offset: i64) -> usize {
        self.states.push(crate::correlate::Correlator::new());
        self.b.host(name, kernel, offset)
    }
    fn push(&mut self, h: usize, rec: &Record) {
        let mut rec = rec.clone();
        self.states[h].observe(&mut rec);
        self.b.push(h, &rec, &self.states[h]);
    }
    fn anomalies(&mut self, h: usize, a: &[Anomaly]) {
        self.b.anomalies(h, a);
    }
    fn finish(self) -> Timeline {
        self.b.finish()
    }
}

const T0: u64 = 1_700_000_000_000_000_000;
const MONO0: u64 = 5_000_000_000;

fn rec(ms: u64, pid: u32, comm: &str, body: Body) -> Record {
    crate::testing::record_at(MONO0 + ms * 1_000_000, T0 + ms * 1_000_000, pid, comm, body)
}

use crate::testing::qp_info as qp;

fn modify(ms: u64, pid: u32, q: u32, state: QpState) -> Record {
    rec(ms, pid, "app", crate::testing::modify("rxe0", q, state, 0))
}

fn slices(tl: &Timeline, track: u64) -> Vec<(u64, String, u64)> {
    tl.events
        .iter()
        .filter(|e| e.track == track)
        .filter_map(|e| match &e.what {
            What::Slice { name, dur_ns } => Some((
                (e.wall_ns - T0) / 1_000_000,
                name.clone(),
                dur_ns / 1_000_000,
            )),
            _ => None,
        })
        .collect()
}

fn track_named<'a>(tl: &'a Timeline, name: &str) -> &'a Track {
    tl.tracks
        .iter()
        .find(|t| t.name == name)
        .unwrap_or_else(|| panic!("no track {name:?} in {:#?}", tl.tracks))
}

#[test]
fn qp_states_become_back_to_back_slices_until_destroy() {
    let mut b = Builder::default();
    let h = b.host("h1", "6.12", 0);
    b.push(
        h,
        &rec(
            0,
            10,
            "app",
            Body::QpCreate {
                qp: qp("rxe0", 0x11),
                ret: 0,
            },
        ),
    );
    b.push(h, &modify(5, 10, 0x11, QpState::Init));
    b.push(h, &modify(7, 10, 0x11, QpState::Rtr));
    b.push(h, &modify(9, 10, 0x11, QpState::Rts));
    b.push(
        h,
        &rec(
            1000,
            10,
            "app",
            Body::QpDestroy {
                qp: qp("rxe0", 0x11),
                ret: 0,
            },
        ),
    );
    b.push(
        h,
        &rec(
            2000,
            10,
            "app",
            Body::ProcessExit {
                ppid: 1,
                exit_code: 0,
            },
        ),
    );
    let tl = b.finish();
    let host = track_named(&tl, "host h1");
    let proc_ = track_named(&tl, "app [10]");
    let q = track_named(&tl, "rxe0 QPN 0x11 RC");
    assert_eq!(proc_.parent, Some(host.uuid));
    assert_eq!(q.parent, Some(proc_.uuid));
    assert_eq!(
        slices(&tl, q.uuid),
        vec![
            (0, "RESET".into(), 5),
            (5, "INIT".into(), 2),
            (7, "RTR".into(), 2),
            (9, "RTS".into(), 991)
        ]
    );
    assert_eq!(tl.hosts[0].first, Some((MONO0, T0)));
}

#[test]
fn open_qps_end_with_the_recording_and_unknown_qps_start_at_first_modify() {
    let mut b = Builder::default();
    let h = b.host("h1", "6.12", 0);
    // Created before the trace started: first seen in a modify.
    b.push(h, &modify(100, 10, 0x20, QpState::Err));
    b.push(h, &rec(400, 11, "other", Body::ProcessExec { ppid: 1 }));
    let tl = b.finish();
    let q = track_named(&tl, "rxe0 QPN 0x20 RC");
    assert_eq!(slices(&tl, q.uuid), vec![(100, "ERR".into(), 300)]);
}

#[test]
fn failed_modifies_do_not_change_state() {
    let mut b = Builder::default();
    let h = b.host("h1", "6.12", 0);
    b.push(
        h,
        &rec(
            0,
            10,
            "app",
            Body::QpCreate {
                qp: qp("rxe0", 1),
                ret: 0,
            },
        ),
    );
    let mut bad = modify(3, 10, 1, QpState::Rts);
    if let Body::QpModify { ret, .. } = &mut bad.body {
        *ret = -22;
    }
    b.push(h, &bad);
    b.push(
        h,
        &rec(
            10,
            10,
            "app",
            Body::QpDestroy {
                qp: qp("rxe0", 1),
                ret: 0,
            },
        ),
    );
    let tl = b.finish();
    let q = track_named(&tl, "rxe0 QPN 0x1 RC");
    assert_eq!(slices(&tl, q.uuid), vec![(0, "RESET".into(), 10)]);
}

#[test]
fn counters_are_per_second_rates_that_drop_to_zero() {
    let mut b = Builder::default();
    let h = b.host("h1", "6.12", 0);
    let traffic = |ms, bytes| {
        rec(
            ms,
            0,
            "",
            Body::QpTraffic(QpTrafficDelta {
                qp: qp("rxe0", 0x11),
                tx_packets: 1,
                tx_bytes: bytes,
                rx_packets: 0,
                rx_bytes: 0,
                owner_pid: 10,
                owner_comm: "app".into(),
            }),
        )
    };
    b.push(h, &traffic(100, 1000));
    b.push(h, &traffic(600, 500));
    b.push(h, &traffic(1100, 2000));
    b.push(h, &traffic(5100, 7));
    let retx = Retransmit {
        transport: Transport::Tcp,
        reason: "tcp_retransmit_skb",
        qp: None,
        tcp: None,
        owner_pid: 10,
        owner_comm: "app".into(),
    };
    b.push(h, &rec(200, 0, "swapper/0", Body::Retransmit(retx.clone())));
    b.push(h, &rec(300, 0, "swapper/0", Body::Retransmit(retx)));
    b.push(
        h,
        &rec(
            300,
            10,
            "app",
            Body::TcpBytes(TcpBytesDelta {
                tx_bytes: 10,
                rx_bytes: 5,
                tx_calls: 1,
                rx_calls: 1,
                peer: None,
            }),
        ),
    );
    let tl = b.finish();
    let values = |name: &str| -> Vec<(u64, f64)> {
        let t = track_named(&tl, name);
        tl.events
            .iter()
            .filter(|e| e.track == t.uuid)
            .map(|e| match e.what {
                What::Counter(v) => ((e.wall_ns - T0) / 1_000_000, v),
                _ => panic!("not a counter: {e:?}"),
            })
            .collect()
    };
    // T0 is a whole second, so buckets start at T0 + k s.
    assert_eq!(
        values("RDMA tx bytes/s"),
        vec![
            (0, 1500.0),
            (1000, 2000.0),
            (2000, 0.0),
            (5000, 7.0),
            (6000, 0.0)
        ]
    );
    assert_eq!(values("retransmits/s"), vec![(0, 2.0), (1000, 0.0)]);
    assert_eq!(values("TCP bytes/s (tx+rx)"), vec![(0, 15.0), (1000, 0.0)]);
    // Counters hang under the owner, not under the on-CPU swapper.
    assert!(tl.tracks.iter().all(|t| !t.name.contains("swapper")));
    assert_eq!(track_named(&tl, "retransmits/s").pid, 10);
}

#[test]
fn cm_and_anomaly_instants_land_on_the_qp_track() {
    let mut b = Builder::default();
    let h = b.host("h1", "6.12", 0);
    b.push(
        h,
        &rec(
            0,
            10,
            "app",
            Body::QpCreate {
                qp: qp("rxe0", 0x11),
                ret: 0,
            },
        ),
    );
    b.push(
        h,
        &rec(
            1,
            10,
            "app",
            Body::Cm(CmEvent {
                dev: "rxe0".into(),
                qpn: 0x11,
                event: "ESTABLISHED".into(),
                status: 0,
                cm_id: 3,
                owner_pid: 10,
                owner_comm: "app".into(),
                src: None,
                dst: None,
            }),
        ),
    );
    b.push(
        h,
        &rec(
            2,
            0,
            "",
            Body::Lost {
                count: 4,
                cpu: None,
            },
        ),
    );
    b.anomalies(
        h,
        &[Anomaly {
            ts_ns: MONO0 + 3_000_000,
            wall_ns: T0 + 3_000_000,
            pid: 10,
            comm: "app".into(),
            dev: Some("rxe0".into()),
            qpn: Some(0x11),
            kind: "qp_modify_failed",
            detail: "RESET->RTS: EINVAL".into(),
        }],
    );
    let tl = b.finish();
    let q = track_named(&tl, "rxe0 QPN 0x11 RC");
    let names: Vec<(&str, &str)> = tl
        .events
        .iter()
        .filter(|e| e.track == q.uuid)
        .filter_map(|e| match &e.what {
            What::Instant { name, category, .. } => Some((name.as_str(), *category)),
            _ => None,
        })
        .collect();
    assert_eq!(
        names,
        vec![("CM ESTABLISHED", "cm"), ("qp_modify_failed", "anomaly")]
    );
    let host = track_named(&tl, "host h1");
    assert!(tl.events.iter().any(|e| e.track == host.uuid
        && matches!(&e.what, What::Instant { name, .. } if name == "lost 4 events")));
}

#[test]
fn hosts_get_their_own_trees_and_unique_uuids() {
    let mut b = Builder::default();
    let a = b.host("a", "6.12", 0);
    let c = b.host("b", "6.12", 0);
    b.push(
        a,
        &rec(
            0,
            10,
            "app",
            Body::QpCreate {
                qp: qp("rxe0", 0x11),
                ret: 0,
            },
        ),
    );
    b.push(
        c,
        &rec(
            1,
            10,
            "app",
            Body::QpCreate {
                qp: qp("rxe0", 0x11),
                ret: 0,
            },
        ),
    );
    let tl = b.finish();
    let mut uuids: Vec<u64> = tl.tracks.iter().map(|t| t.uuid).collect();
    uuids.sort_unstable();
    uuids.dedup();
    assert_eq!(uuids.len(), tl.tracks.len());
    assert!(uuids[0] > 0);
    assert_eq!(tl.tracks.iter().filter(|t| t.name == "app [10]").count(), 2);
    let json = chrome::to_json(&tl);
    let pids: std::collections::BTreeSet<u64> = json["traceEvents"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["ph"] == "X")
        .filter_map(|e| e["pid"].as_u64())
        .collect();
    assert_eq!(
        pids.into_iter().collect::<Vec<_>>(),
        vec![10, (1 << 22) | 10]
    );
}

#[test]
fn perfetto_slices_nest_in_order_on_equal_timestamps() {
    let mut b = Builder::default();
    let h = b.host("h1", "6.12", 0);
    b.push(
        h,
        &rec(
            0,
            10,
            "app",
            Body::QpCreate {
                qp: qp("rxe0", 1),
                ret: 0,
            },
        ),
    );
    // Zero-length INIT, then RTR at the same instant.
    b.push(h, &modify(5, 10, 1, QpState::Init));
    b.push(h, &modify(5, 10, 1, QpState::Rtr));
    b.push(
        h,
        &rec(
            9,
            10,
            "app",
            Body::QpDestroy {
                qp: qp("rxe0", 1),
                ret: 0,
            },
        ),
    );
    let tl = b.finish();
    let trace = perfetto::trace(&tl);
    let seq: Vec<(u64, i32, Option<String>)> = trace
        .packet
        .iter()
        .filter_map(|p| {
            let e = p.track_event.as_ref()?;
            Some(((p.timestamp? - T0) / 1_000_000, e.r#type?, e.name.clone()))
        })
        .collect();
    let b = perfetto::TYPE_SLICE_BEGIN;
    let e = perfetto::TYPE_SLICE_END;
    assert_eq!(
        seq,
        vec![
            (0, b, Some("RESET".into())),
            (5, e, None),
            (5, b, Some("INIT".into())),
            (5, e, None),
            (5, b, Some("RTR".into())),
            (9, e, None),
        ]
    );
    // Every packet is on a sequence and stamped with the realtime clock.
    assert!(trace
        .packet
        .iter()
        .all(|p| p.trusted_packet_sequence_id == Some(1)
            && p.timestamp_clock_id == Some(perfetto::CLOCK_REALTIME)));
}
