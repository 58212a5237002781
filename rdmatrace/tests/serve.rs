//! `rdmatrace serve`: the metrics endpoint over a recording (no privileges), checked over real
//! HTTP, by Prometheus' own `promtool`, and the flight recorder on recorded lab streams.

mod common;

use std::time::Duration;

use common::*;

const SYNTHETIC: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../tests/fixtures/synthetic-all-kinds.rdmt"
);
const DEADPEER: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../tests/fixtures/lab-deadpeer.rdmt"
);

const CONTAINER: &str = "3f2a1b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f708";
const POD: &str = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0";

/// Starts `serve --input FILE` on a free loopback port; its address.
fn serve(file: &str) -> (Running, String) {
    let r = start(
        &["serve", "--input", file, "--listen", "127.0.0.1:0"],
        Duration::from_secs(60),
    );
    let addr = served_addr(&r.ready_line);
    (r, addr)
}

/// The value of the sample whose line starts with `prefix` (name and labels).
fn sample(body: &str, prefix: &str) -> Option<f64> {
    body.lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

#[test]
fn serve_exposes_a_recordings_metrics_per_process_and_container() {
    let (server, addr) = serve(SYNTHETIC);
    assert!(addr.starts_with("127.0.0.1:"), "{addr}");
    let (status, head, body) = http(&addr, "GET", "/metrics", &[]);
    assert_eq!(status, 200, "{head}");
    assert!(head.contains("text/plain; version=0.0.4"), "{head}");
    for family in [
        "rdmatrace_process_verdict gauge",
        "rdmatrace_rdma_bytes_total counter",
        "rdmatrace_tcp_bytes_total counter",
        "rdmatrace_retransmits_total counter",
        // rdmatrace_qps has series only while QPs live (every QP here was destroyed): its
        // unit tests in sinks/metrics.rs and the lab check it live.
        "rdmatrace_anomalies_total counter",
        "rdmatrace_events_total counter",
        "rdmatrace_lost_events_total counter",
        "rdmatrace_incidents_total counter",
        "rdmatrace_up gauge",
    ] {
        assert!(
            body.contains(&format!("# TYPE {family}\n")),
            "no {family} in:\n{body}"
        );
    }
    let me = format!(r#"pid="4242",comm="trainer",container="{CONTAINER}",pod_uid="{POD}""#);
    let want = [
        (
            format!(r#"rdmatrace_process_verdict{{{me},verdict="rdma"}}"#),
            1.0,
        ),
        (
            format!(r#"rdmatrace_rdma_bytes_total{{{me},dev="rxe0",direction="tx"}}"#),
            4_194_304.0,
        ),
        (
            format!(r#"rdmatrace_rdma_bytes_total{{{me},dev="rxe0",direction="rx"}}"#),
            32_768.0,
        ),
        (
            format!(r#"rdmatrace_tcp_bytes_total{{{me},direction="tx"}}"#),
            2048.0,
        ),
        (
            format!(
                r#"rdmatrace_retransmits_total{{{me},dev="rxe0",transport="rxe",reason="retransmit_timer"}}"#
            ),
            1.0,
        ),
        (
            format!(r#"rdmatrace_anomalies_total{{kind="qp_err",{me},dev="rxe0"}}"#),
            1.0,
        ),
        (
            r#"rdmatrace_events_total{type="qp_modify"}"#.to_string(),
            4.0,
        ),
        ("rdmatrace_lost_events_total".to_string(), 3.0),
        (
            r#"rdmatrace_incidents_total{kind="qp_err"}"#.to_string(),
            0.0,
        ),
        ("rdmatrace_up".to_string(), 1.0),
    ];
    for (prefix, value) in want {
        assert_eq!(
            sample(&body, &format!("{prefix} ")),
            Some(value),
            "{prefix} in:\n{body}"
        );
    }
    // Nothing per QP: QPNs never become labels.
    assert!(!body.contains("qpn"), "{body}");

    let (status, head, om) = http(
        &addr,
        "GET",
        "/metrics",
        &[("Accept", "application/openmetrics-text; version=1.0.0")],
    );
    assert_eq!(status, 200);
    assert!(head.contains("application/openmetrics-text"), "{head}");
    assert!(om.ends_with("# EOF\n"), "{om}");
    assert_eq!(http(&addr, "GET", "/healthz", &[]).0, 200);
    assert_eq!(http(&addr, "GET", "/", &[]).0, 404);
    assert_eq!(http(&addr, "GET", "/metrics/x", &[]).0, 404);
    assert_eq!(http(&addr, "POST", "/metrics", &[]).0, 405);
    let done = server.stop();
    assert!(done.status.success(), "{}", done.stderr);
}

#[test]
fn serve_refuses_a_busy_port_before_loading_anything() {
    let busy = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = busy.local_addr().expect("addr").to_string();
    let out = run(&["serve", "--input", SYNTHETIC, "--listen", &addr]);
    assert!(!out.status.success());
    assert!(
        out.stderr.contains(&format!("cannot listen on {addr}")),
        "{}",
        out.stderr
    );
}

#[test]
#[ignore = "needs promtool (apt-get install prometheus): checks the exposition with Prometheus' own linter"]
fn promtool_accepts_the_exposition() {
    for file in [SYNTHETIC, DEADPEER] {
        let (server, addr) = serve(file);
        let (status, _, body) = http(&addr, "GET", "/metrics", &[]);
        assert_eq!(status, 200);
        server.stop();
        let mut child = std::process::Command::new("promtool")
            .args(["check", "metrics"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("run promtool");
        {
            use std::io::Write as _;
            let mut stdin = child.stdin.take().expect("stdin");
            stdin.write_all(body.as_bytes()).expect("feed promtool");
        }
        let out = child.wait_with_output().expect("promtool");
        assert!(
            out.status.success(),
            "promtool check metrics failed on {file}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

mod flight {
    use super::*;
    use prometheus_client::metrics::family::Family;
    use rdmatrace::{
        clock::ClockAnchor,
        correlate::filter::Filter,
        flight::{FlightConfig, FlightRecorder},
        recording::reader::Recording,
        stage::Stage,
    };

    fn dir_bytes(dir: &std::path::Path) -> u64 {
        std::fs::read_dir(dir)
            .expect("dir")
            .filter_map(Result::ok)
            .map(|e| e.metadata().map(|m| m.len()).unwrap_or(0))
            .sum()
    }

    /// Feeds `rec` into a flight recorder the way `serve` does, a tick per recorded second.
    fn fly(rec: &Recording, cfg: FlightConfig, repeat: usize) -> FlightRecorder {
        let incidents = Family::default();
        let fr = FlightRecorder::new(cfg.clone(), rec.header.clone(), incidents).expect("fr");
        let anchor = ClockAnchor::fixed(i128::from(rec.header.clone().clock_offset_ns));
        let mut stage = Stage::new(anchor, Filter::default(), fr);
        let mut n = 0;
        for _ in 0..repeat {
            rec.replay(|e| {
                stage.entry(e);
                n += 1;
                if n % 200 == 0 {
                    stage.tick();
                    assert!(
                        dir_bytes(&cfg.dir) <= cfg.max_disk,
                        "{} bytes on disk, cap {}",
                        dir_bytes(&cfg.dir),
                        cfg.max_disk
                    );
                }
            });
        }
        stage.finish().expect("finish")
    }

    #[test]
    fn a_qp_driven_to_err_leaves_one_incident_file_that_report_reads() {
        let dir = test_dir("flight");
        let rec = Recording::open(std::path::Path::new(DEADPEER)).expect("fixture");
        let cfg = FlightConfig {
            dir: dir.path().join("fr"),
            keep_ns: 60_000_000_000,
            after_ns: 5_000_000_000,
            max_disk: 64 << 20,
            burst: 100_000,
        };
        let fr = fly(&rec, cfg.clone(), 1);
        assert_eq!(fr.files.len(), 1, "{:?}", fr.files);
        let file = &fr.files[0];
        let name = file.file_name().and_then(|n| n.to_str()).expect("name");
        assert!(
            name.starts_with("incident-") && name.ends_with("Z-qp_err.rdmt"),
            "{name}"
        );
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(file).expect("file").permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        // Segments are gone at the end; only the incident stays.
        let left: Vec<_> = std::fs::read_dir(&cfg.dir)
            .expect("dir")
            .filter_map(Result::ok)
            .map(|e| e.file_name())
            .collect();
        assert_eq!(left.len(), 1, "{left:?}");
        let report = run(&["report", "--json", file.to_str().expect("utf8")]);
        assert!(report.status.success(), "{}", report.stderr);
        let v: serde_json::Value = serde_json::from_str(&report.stdout).expect("json");
        let full = run(&["report", "--json", DEADPEER]);
        let whole: serde_json::Value = serde_json::from_str(&full.stdout).expect("json");
        // The report of the incident names what fired it: the completion that put the QP in
        // ERR when its peer died.
        assert!(
            v["data"]["anomalies"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|a| a["detail"]
                    .as_str()
                    .is_some_and(|d| d.contains("RETRY_EXC_ERR"))),
            "{v}"
        );
        assert_eq!(v["data"]["anomalies"], whole["data"]["anomalies"]);
        // The incident holds the QPs the whole recording has (it is shorter than `keep`).
        assert_eq!(v["data"]["qps"], whole["data"]["qps"]);
    }

    #[test]
    fn the_disk_cap_holds_under_a_long_run() {
        let dir = test_dir("flight-cap");
        let rec = Recording::open(std::path::Path::new(DEADPEER)).expect("fixture");
        let size = std::fs::metadata(DEADPEER).expect("size").len();
        let cfg = FlightConfig {
            dir: dir.path().join("fr"),
            keep_ns: 3_600_000_000_000,
            after_ns: 1_000_000_000,
            // Less than a tenth of what goes through.
            max_disk: size * 2,
            burst: 1,
        };
        let fr = fly(&rec, cfg.clone(), 30);
        assert!(
            fr.segments_dropped + fr.incidents_dropped > 0,
            "the cap never bit"
        );
        assert!(dir_bytes(&cfg.dir) <= cfg.max_disk);
    }
}

/// The endpoint of an agent whose probes are not attached yet answers 503 "starting" (not a
/// refused connection, not a hang), then 200 once ready. Deterministic: the exporter alone.
#[test]
fn a_scrape_of_a_half_started_agent_gets_a_clear_503() {
    let (_, registry) = rdmatrace::sinks::metrics::Families::new();
    let ex = rdmatrace::exporter::start(
        "127.0.0.1:0".parse().expect("addr"),
        std::sync::Arc::new(registry),
    )
    .expect("listen");
    let addr = ex.addr.to_string();
    let (status, _, body) = try_http(&addr, "GET", "/metrics", &[]).expect("scrape");
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("starting"), "{body}");
    let (status, _, body) = try_http(&addr, "GET", "/healthz", &[]).expect("healthz");
    assert_eq!(status, 503, "{body}");
    ex.set_ready();
    let (status, _, body) = try_http(&addr, "GET", "/metrics", &[]).expect("scrape");
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("rdmatrace_lost_events_total"), "{body}");
}

/// The live agent: scrapes from its first moment get 503 "starting" or, once the probes are
/// attached, 200 with `rdmatrace_up 1` — never anything else; SIGTERM ends it cleanly. (Whether
/// a scrape lands inside the loading window depends on scheduling: the 503 itself is checked
/// deterministically above.)
#[test]
#[ignore = "needs root: serves live, with eBPF"]
fn root_a_starting_agent_answers_503_then_200_and_ends_cleanly() {
    use std::io::{BufRead as _, BufReader};
    // A fixed port picked free now: the scrapes must reach the agent before it says where.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    let addr = format!("127.0.0.1:{port}");
    let mut child = std::process::Command::new(bin())
        .args(["serve", "--listen", &addr])
        .stderr(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("serve");
    let mut seen = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok((status, _, body)) = try_http(&addr, "GET", "/metrics", &[]) {
            seen.push((status, body.clone()));
            if status == 200 {
                break;
            }
            assert_eq!(status, 503, "{body}");
            assert!(body.contains("starting"), "{body}");
        }
        assert!(
            std::time::Instant::now() < deadline,
            "never ready: {seen:?}"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    eprintln!(
        "{} scrape(s) landed while the probes loaded",
        seen.iter().filter(|(s, _)| *s == 503).count()
    );
    let body = &seen.last().expect("a 200").1;
    assert!(body.contains("\nrdmatrace_up 1\n"), "{body}");
    // SIGTERM ends it cleanly, and it said where it served.
    // SAFETY: kill(2) on our own child with a valid signal.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let status = child.wait().expect("wait");
    let mut err = String::new();
    for line in BufReader::new(child.stderr.take().expect("stderr")).lines() {
        err += &line.unwrap_or_default();
        err.push('\n');
    }
    assert!(status.success(), "{err}");
    assert!(
        err.contains(&format!("Serving metrics on http://{addr}/metrics")),
        "{err}"
    );
}
