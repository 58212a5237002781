//! Gauges, churn and the series cap of the metrics sink.
use prometheus_client::{encoding::prometheus_text::encode, registry::Registry};

use super::*;
use crate::{
    event::{QpState, TcpBytesDelta},
    testing::{modify, qp_info, record},
};

fn feed(sink: &mut MetricsSink, state: &mut Correlator, mut rec: Record) {
    state.observe(&mut rec);
    sink.record(&rec, state).expect("record");
}

fn text(r: &Registry) -> String {
    let mut s = String::new();
    encode(&mut s, r).expect("encode");
    s
}

#[test]
fn qp_gauges_follow_live_qps_by_state() {
    let (f, reg) = Families::new();
    let mut sink = MetricsSink::new(f, Limits::default());
    let mut st = Correlator::new();
    let create = Body::QpCreate {
        qp: qp_info("rxe0", 0x11),
        ret: 0,
    };
    feed(&mut sink, &mut st, record(7, "bench", 1, create));
    feed(
        &mut sink,
        &mut st,
        record(7, "bench", 2, modify("rxe0", 0x11, QpState::Init, 0)),
    );
    feed(
        &mut sink,
        &mut st,
        record(7, "bench", 3, modify("rxe0", 0x11, QpState::Rtr, 0)),
    );
    feed(
        &mut sink,
        &mut st,
        record(7, "bench", 4, modify("rxe0", 0x11, QpState::Rts, 0)),
    );
    sink.refresh(&st);
    let t = text(&reg);
    assert!(
        t.contains(r#"rdmatrace_qps{pid="7",comm="bench",container="",pod_uid="",dev="rxe0",state="RTS"} 1"#),
        "{t}"
    );
    let destroy = Body::QpDestroy {
        qp: qp_info("rxe0", 0x11),
        ret: 0,
    };
    feed(&mut sink, &mut st, record(7, "bench", 5, destroy));
    sink.refresh(&st);
    assert!(!text(&reg).contains("rdmatrace_qps{"), "{}", text(&reg));
}

#[test]
fn a_changed_verdict_or_name_replaces_the_series_and_nothing_else_is_touched() {
    let (f, reg) = Families::new();
    let mut sink = MetricsSink::new(f, Limits::default());
    let mut st = Correlator::new();
    let tcp = |n| {
        Body::TcpBytes(TcpBytesDelta {
            tx_bytes: n,
            rx_bytes: 0,
            tx_calls: 1,
            rx_calls: 0,
            peer: None,
        })
    };
    // TCP only: tcp; once it also created a QP that never connected: tcp_fallback.
    feed(&mut sink, &mut st, record(9, "loader", 1, tcp(64 << 20)));
    let create = |qpn| Body::QpCreate {
        qp: qp_info("rxe0", qpn),
        ret: 0,
    };
    feed(&mut sink, &mut st, record(8, "job", 1, create(0x21)));
    sink.refresh(&st);
    let t = text(&reg);
    let v9 = |v: &str| {
        format!(
            r#"rdmatrace_process_verdict{{pid="9",comm="loader",container="",pod_uid="",verdict="{v}"}} 1"#
        )
    };
    assert!(t.contains(&v9("tcp")), "{t}");
    let before = sink.series();
    // Nothing changed: a refresh keeps every series as it was.
    sink.refresh(&st);
    assert_eq!(sink.series(), before);
    assert_eq!(text(&reg), t);
    feed(&mut sink, &mut st, record(9, "loader", 2, create(0x22)));
    sink.refresh(&st);
    let t = text(&reg);
    assert!(t.contains(&v9("tcp_fallback")), "{t}");
    assert!(!t.contains(&v9("tcp")), "{t}");
    // The QP owner renames itself (exec): its verdict and QP gauge move to the new name.
    feed(&mut sink, &mut st, record(8, "job2", 3, tcp(1)));
    sink.refresh(&st);
    let t = text(&reg);
    assert!(t.contains(r#"rdmatrace_qps{pid="8",comm="job2",container="",pod_uid="",dev="rxe0",state="RESET"} 1"#), "{t}");
    assert!(!t.contains(r#"rdmatrace_qps{pid="8",comm="job","#), "{t}");
    assert!(
        t.contains(r#"rdmatrace_process_verdict{pid="8",comm="job2""#),
        "{t}"
    );
    assert!(
        !t.contains(r#"rdmatrace_process_verdict{pid="8",comm="job","#),
        "{t}"
    );
}

fn churn(sink: &mut MetricsSink, st: &mut Correlator, pid: u32, at: u64) {
    let tcp = Body::TcpBytes(TcpBytesDelta {
        tx_bytes: 2 << 20,
        rx_bytes: 1,
        tx_calls: 1,
        rx_calls: 1,
        peer: None,
    });
    feed(sink, st, record(pid, "loader", at, tcp));
    let exit = Body::ProcessExit {
        ppid: 1,
        exit_code: 0,
    };
    feed(sink, st, record(pid, "loader", at + 1, exit));
}

#[test]
fn a_day_of_process_churn_keeps_series_and_memory_bounded() {
    let (f, reg) = Families::new();
    let limits = Limits {
        grace_ns: 60_000_000_000,
        max_series: 100_000,
    };
    let mut sink = MetricsSink::new(f, limits);
    let mut st = Correlator::new();
    // 10,000 short-lived processes, one a second, each moving TCP data; a refresh a second
    // (`cargo xtask bench` runs a whole day).
    let mut most = 0;
    for i in 0..10_000u64 {
        let at = i * 1_000_000_000;
        churn(&mut sink, &mut st, 1000 + (i % 30_000) as u32, at);
        sink.refresh(&st);
        most = most.max(sink.series());
    }
    // Within the grace period: about 60 processes, 3 series each (tx, rx, verdict).
    assert!(most <= 62 * 3, "series grew to {most}");
    assert!(
        sink.processes() <= 62,
        "{} processes kept",
        sink.processes()
    );
    assert!(text(&reg).lines().count() < 500);
}

#[test]
fn max_series_caps_the_series_and_counts_what_it_refused() {
    let (f, reg) = Families::new();
    let limits = Limits {
        grace_ns: u64::MAX / 2,
        max_series: 10,
    };
    let mut sink = MetricsSink::new(f, limits);
    let mut st = Correlator::new();
    for pid in 1..=20 {
        churn(&mut sink, &mut st, pid, u64::from(pid));
    }
    sink.refresh(&st);
    assert_eq!(sink.series(), 10);
    let t = text(&reg);
    let dropped = t
        .lines()
        .find_map(|l| l.strip_prefix("rdmatrace_series_dropped_total "))
        .and_then(|v| v.parse::<u64>().ok())
        .expect("dropped counter");
    assert!(dropped >= 30, "{t}");
}

#[test]
fn diagnoses_are_counted_once_when_found_live() {
    let (f, reg) = Families::new();
    let mut sink = MetricsSink::new(f, Limits::default());
    let mut st = Correlator::new();
    let create = Body::QpCreate {
        qp: qp_info("rxe0", 0x11),
        ret: 0,
    };
    feed(&mut sink, &mut st, record(7, "trainer", 1, create));
    for (ts, s) in [(2, QpState::Init), (3, QpState::Rtr), (4, QpState::Rts)] {
        feed(
            &mut sink,
            &mut st,
            record(7, "trainer", ts, modify("rxe0", 0x11, s, 0)),
        );
    }
    let wc = |status: &str| {
        Body::WcError(crate::event::WcError {
            qp: qp_info("rxe0", 0x11).key,
            cqn: 3,
            status: status.into(),
            vendor_err: 0,
            owner_pid: 7,
            owner_comm: "trainer".into(),
        })
    };
    feed(&mut sink, &mut st, record(0, "", 5, wc("REM_ACCESS_ERR")));
    sink.refresh(&st);
    // Its flushes and later refreshes do not count it again.
    feed(&mut sink, &mut st, record(0, "", 6, wc("WR_FLUSH_ERR")));
    sink.refresh(&st);
    sink.refresh(&st);
    let t = text(&reg);
    assert!(
        t.contains(r#"rdmatrace_diagnoses_total{kind="remote_access",pid="7",comm="trainer",container="",pod_uid="",dev="rxe0"} 1"#),
        "{t}"
    );
    assert_eq!(t.matches("rdmatrace_diagnoses_total{").count(), 1, "{t}");
}
