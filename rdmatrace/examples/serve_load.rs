//! `serve` under load, for `cargo xtask bench`: synthetic records through the real pipeline
//! (stage, correlator, metrics sink) and the real endpoint, in this process.
//!
//! 1. Steady state: 1,000 processes holding 10,000 RTS QPs; each simulated second every QP
//!    reports traffic, every process TCP bytes, 100 retransmits, then the once-a-second refresh.
//!    CPU per simulated second, peak RSS, and the latency of scrapes at that size.
//! 2. Churn: a simulated day of one short-lived process a second, each in a pod of its own (a
//!    QP created and destroyed, TCP bytes, exit) with the default 5-minute grace: RSS and series
//!    by the hour.
//!
//! Prints one JSON object on stdout.

use std::{
    io::{Read as _, Write as _},
    sync::Arc,
    time::Instant,
};

use rdmatrace::{
    clock::ClockAnchor,
    correlate::filter::Filter,
    event::{Body, CompactString, QpState, QpTrafficDelta, Retransmit, TcpBytesDelta, Transport},
    exporter,
    sinks::metrics::{Families, Limits, MetricsSink},
    stage::Stage,
    testing::{modify, qp_info, record},
};

const PROCS: u32 = 1_000;
const QPS_PER_PROC: u32 = 10;
const STEADY_SECS: u64 = 30;
const SCRAPES: usize = 50;
const DAY_SECS: u64 = 86_400;

fn rss_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

fn cpu_ns() -> u64 {
    // SAFETY: clock_gettime with a valid clock id and a valid out pointer.
    unsafe {
        let mut ts = std::mem::zeroed::<libc::timespec>();
        libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts);
        ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
    }
}

const SEC: u64 = 1_000_000_000;

fn scrape(addr: &str) -> (f64, usize) {
    let t = Instant::now();
    let mut s = std::net::TcpStream::connect(addr).expect("connect");
    s.write_all(
        format!("GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .expect("send");
    let mut body = Vec::new();
    s.read_to_end(&mut body).expect("read");
    (t.elapsed().as_secs_f64() * 1e3, body.len())
}

fn main() {
    let (families, registry) = Families::new();
    let registry = Arc::new(registry);
    let ex = exporter::start("127.0.0.1:0".parse().expect("addr"), registry).expect("listen");
    ex.set_ready();
    let addr = ex.addr.to_string();
    let sink = MetricsSink::new(families, Limits::default());
    let mut stage = Stage::new(ClockAnchor::fixed(0), Filter::default(), sink);

    // Set-up: processes and their RTS QPs.
    let mut ts = SEC;
    for p in 0..PROCS {
        let pid = 10_000 + p;
        for q in 0..QPS_PER_PROC {
            let qpn = 0x100 + p * QPS_PER_PROC + q;
            let create = Body::QpCreate {
                qp: qp_info("mlx5_0", qpn),
                ret: 0,
            };
            stage.push(record(pid, "trainer", ts, create));
            for to in [QpState::Init, QpState::Rtr, QpState::Rts] {
                stage.push(record(pid, "trainer", ts, modify("mlx5_0", qpn, to, 0)));
            }
        }
        ts += 1000;
    }
    stage.tick();

    // Steady state.
    let rss_before = rss_kib("VmRSS:");
    let cpu0 = cpu_ns();
    let mut records = 0u64;
    for s in 0..STEADY_SECS {
        ts = (2 + s) * SEC;
        for p in 0..PROCS {
            let pid = 10_000 + p;
            for q in 0..QPS_PER_PROC {
                let qpn = 0x100 + p * QPS_PER_PROC + q;
                let t = Body::QpTraffic(QpTrafficDelta {
                    qp: qp_info("mlx5_0", qpn),
                    tx_packets: 1000,
                    tx_bytes: 4 << 20,
                    rx_packets: 10,
                    rx_bytes: 640,
                    owner_pid: 0,
                    owner_comm: CompactString::default(),
                });
                stage.push(record(0, "", ts, t));
                records += 1;
            }
            let tcp = Body::TcpBytes(TcpBytesDelta {
                tx_bytes: 4096,
                rx_bytes: 4096,
                tx_calls: 2,
                rx_calls: 2,
                peer: None,
            });
            stage.push(record(pid, "trainer", ts, tcp));
            records += 1;
        }
        for r in 0..100u32 {
            let qpn = 0x100 + (r * 97) % (PROCS * QPS_PER_PROC);
            let retx = Body::Retransmit(Retransmit {
                transport: Transport::Rxe,
                reason: "retransmit_timer",
                qp: Some(qp_info("mlx5_0", qpn)),
                tcp: None,
                owner_pid: 0,
                owner_comm: CompactString::default(),
            });
            stage.push(record(0, "ksoftirqd/0", ts, retx));
            records += 1;
        }
        stage.tick();
    }
    let steady_cpu_ns = cpu_ns() - cpu0;
    let rss_steady = rss_kib("VmRSS:");
    let mut lat: Vec<f64> = Vec::new();
    let mut bytes = 0;
    for _ in 0..SCRAPES {
        let (ms, b) = scrape(&addr);
        lat.push(ms);
        bytes = b;
    }
    lat.sort_by(f64::total_cmp);
    let series_steady = stage_series(&mut stage);

    // Churn: a day of short-lived processes.
    let mut by_hour = Vec::new();
    let mut churn_pid = 100_000u32;
    let day0 = (3 + STEADY_SECS) * SEC;
    let churn_cpu0 = cpu_ns();
    for s in 0..DAY_SECS {
        ts = day0 + s * SEC;
        churn_pid = if churn_pid >= 4_000_000 {
            100_000
        } else {
            churn_pid + 1
        };
        let qpn = 0x100_000 + (s % 1_000_000) as u32;
        // Each in a container of its own pod, as a batch job's pods come and go.
        let cg = 1_000_000 + s;
        stage.cgroup(
            cg,
            &format!(
                "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{s:08x}_1111_2222_3333_444455556666.slice/cri-containerd-{s:064x}.scope"
            ),
        );
        stage.push(record(
            churn_pid,
            "loader",
            ts,
            Body::ProcessCgroup { id: cg },
        ));
        let create = Body::QpCreate {
            qp: qp_info("mlx5_1", qpn),
            ret: 0,
        };
        stage.push(record(churn_pid, "loader", ts, create));
        let tcp = Body::TcpBytes(TcpBytesDelta {
            tx_bytes: 2 << 20,
            rx_bytes: 0,
            tx_calls: 10,
            rx_calls: 0,
            peer: None,
        });
        stage.push(record(churn_pid, "loader", ts + 1, tcp));
        let destroy = Body::QpDestroy {
            qp: qp_info("mlx5_1", qpn),
            ret: 0,
        };
        stage.push(record(churn_pid, "loader", ts + 2, destroy));
        let exit = Body::ProcessExit {
            ppid: 1,
            exit_code: 0,
        };
        stage.push(record(churn_pid, "loader", ts + 3, exit));
        stage.tick();
        if (s + 1) % 3600 == 0 {
            by_hour.push(((s + 1) / 3600, rss_kib("VmRSS:"), stage_series(&mut stage)));
        }
    }
    let churn_cpu_ns = cpu_ns() - churn_cpu0;
    let hours: Vec<serde_json::Value> = by_hour
        .iter()
        .map(|(h, rss, series)| serde_json::json!({"hour": h, "rss_kib": rss, "series": series}))
        .collect();
    let out = serde_json::json!({
        "processes": PROCS,
        "qps": PROCS * QPS_PER_PROC,
        "steady_secs": STEADY_SECS,
        "steady_records": records,
        "steady_cpu_ns": steady_cpu_ns,
        "cpu_share_per_sec": steady_cpu_ns as f64 / (STEADY_SECS as f64 * 1e9),
        "rss_before_kib": rss_before,
        "rss_steady_kib": rss_steady,
        "peak_rss_kib": rss_kib("VmHWM:"),
        "series_steady": series_steady,
        "scrapes": SCRAPES,
        "scrape_ms_median": lat[lat.len() / 2],
        "scrape_ms_max": lat[lat.len() - 1],
        "scrape_bytes": bytes,
        "churn_secs": DAY_SECS,
        "churn_cpu_ns": churn_cpu_ns,
        "churn_by_hour": hours,
    });
    println!("{out}");
}

fn stage_series(stage: &mut Stage<MetricsSink>) -> usize {
    stage.sink_mut().series()
}
