//! Lab tier, the agent: `rdmatrace serve` scraped every second by a real Prometheus server while
//! real RDMA programs run inside cgroups made like a Docker container and a Kubernetes pod; the
//! test asks Prometheus' HTTP API for each workload's verdict and retransmit series. The flight
//! recorder writes one incident file when a peer dies. Ignored outside the lab VM (`cargo xtask
//! test` runs it there).

mod common;

use std::{
    process::{Command, Stdio},
    thread::sleep,
    time::{Duration, Instant},
};

use common::{
    cgroup::{docker_path, pod_path, Cgroup, DOCKER_ID, POD_CONTAINER, POD_UID},
    lab::*,
    *,
};
use serde_json::Value;

const PROMETHEUS: &str = "127.0.0.1:19090";

/// Mounts the cgroup2 hierarchy if the VM has none (virtme-ng may boot without it).
fn cgroup2() {
    let mounts = std::fs::read_to_string("/proc/self/mounts").expect("mounts");
    if mounts
        .lines()
        .any(|l| l.split_whitespace().nth(2) == Some("cgroup2"))
    {
        return;
    }
    let st = Command::new("mount")
        .args(["-t", "cgroup2", "none", "/sys/fs/cgroup"])
        .status()
        .expect("mount");
    assert!(st.success(), "cannot mount cgroup2 in the lab VM");
}

/// Starts Prometheus scraping `target` every second; waits until it is ready.
fn prometheus(dir: &std::path::Path, target: &str) -> std::process::Child {
    let cfg = dir.join("prometheus.yml");
    std::fs::write(
        &cfg,
        format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n  \
             - job_name: rdmatrace\n    static_configs:\n      - targets: ['{target}']\n"
        ),
    )
    .expect("config");
    let log = std::fs::File::create(dir.join("prometheus.log")).expect("log");
    let child = Command::new("prometheus")
        .arg(format!("--config.file={}", cfg.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("data").display()
        ))
        .arg(format!("--web.listen-address={PROMETHEUS}"))
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("start prometheus (apt-get install prometheus)");
    let deadline = Instant::now() + Duration::from_secs(180);
    while http_ok("/-/ready").is_none() {
        assert!(
            Instant::now() < deadline,
            "prometheus not ready: {}",
            std::fs::read_to_string(dir.join("prometheus.log")).unwrap_or_default()
        );
        sleep(Duration::from_millis(500));
    }
    child
}

fn http_ok(path: &str) -> Option<String> {
    let (status, _, body) = try_http(PROMETHEUS, "GET", path, &[]).ok()?;
    (status == 200).then_some(body)
}

/// Prometheus' answer to an instant query: the result vector.
fn query(q: &str) -> Vec<Value> {
    let enc: String = q
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect();
    let body = http_ok(&format!("/api/v1/query?query={enc}")).unwrap_or_default();
    let v: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    v["data"]["result"].as_array().cloned().unwrap_or_default()
}

/// Polls `q` until `ok` accepts its result (scrapes every second, gauges refreshed every
/// second); the last result.
fn until(q: &str, ok: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let r = query(q);
        if ok(&r) {
            return r;
        }
        assert!(
            Instant::now() < deadline,
            "{q}: never as expected, last {r:?}"
        );
        sleep(Duration::from_secs(1));
    }
}

/// An ib_write_bw pair with both ends in `cg`; (server pid, client pid).
fn write_bw(cg: &Cgroup, size: &str, iters: &str) -> (u32, u32) {
    let args = ["-x", "1", "-F", "-s", size, "-n", iters];
    let server = cg
        .command("ib_write_bw", &[&["-d", "rxe1"][..], &args[..]].concat())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("server");
    let spid = server.id();
    let client_args = [&["-d", "rxe0"][..], &args[..], &["192.0.2.2"]].concat();
    let deadline = Instant::now() + Duration::from_secs(60);
    let cpid = loop {
        sleep(Duration::from_millis(700));
        let c = cg
            .command("ib_write_bw", &client_args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("client");
        let pid = c.id();
        let out = c.wait_with_output().expect("client");
        if out.status.success() {
            break pid;
        }
        assert!(Instant::now() < deadline, "client: {}", text(&out));
    };
    let out = server.wait_with_output().expect("server");
    assert!(out.status.success(), "server: {}", text(&out));
    (spid, cpid)
}

#[test]
#[ignore = "lab: needs the Soft-RoCE VM; run through `cargo xtask test`"]
fn lab_serve_is_scraped_by_prometheus_with_container_and_pod_labels() {
    in_lab();
    cgroup2();
    let dir = test_dir("lab-serve");
    let fr = dir.path().join("flight");
    let docker = Cgroup::make(&docker_path());
    let pod = Cgroup::make(&pod_path());
    let server = start(
        &[
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--flight-recorder",
            fr.to_str().expect("utf8"),
            "--keep",
            "30s",
            "--after",
            "2s",
            // Only the dead peer makes an incident here (5% loss is not a burst).
            "--burst",
            "100000",
        ],
        READY_TIMEOUT,
    );
    let addr = served_addr(&server.ready_line);
    let mut prom = prometheus(dir.path(), &addr);
    until("up{job=\"rdmatrace\"}", |r| {
        r.iter().any(|s| s["value"][1] == "1")
    });

    // 1. An RDMA pair in the Docker container.
    let (d_server, d_client) = write_bw(&docker, "65536", "200");
    // 2. In the pod: a TCP fallback, then an RDMA pair on a lossy wire (retransmits).
    let fb = pod
        .command(
            workload("rt-fallback").to_str().expect("utf8"),
            &[
                "--dev",
                "rxe0",
                "--from",
                "192.0.2.1",
                "--to",
                "192.0.2.2",
                "--mib",
                "8",
            ],
        )
        .output()
        .expect("rt-fallback");
    assert!(fb.status.success(), "{}", text(&fb));
    let fb_pid = printed_pid(&text(&fb));
    {
        let _loss = Loss::on("LAB_NIC_A", 5);
        write_bw(&pod, "4096", "300");
    }
    // 3. A peer that dies mid-transfer (outside any container): an incident.
    let mover = Command::new(workload("rt-mover"))
        .args([
            "--mib",
            "64",
            "--events",
            "--retry-cnt",
            "1",
            "--kill-peer-after-mib",
            "4",
        ])
        .output()
        .expect("rt-mover");
    assert!(
        !mover.status.success(),
        "the mover must fail: {}",
        text(&mover)
    );

    // Prometheus has each workload's verdict with its container and pod.
    for (pid, verdict) in [(d_server, "rdma"), (d_client, "rdma")] {
        let r = until(
            &format!("rdmatrace_process_verdict{{pid=\"{pid}\"}} == 1"),
            |r| r.iter().any(|s| s["metric"]["verdict"] == verdict),
        );
        let m = &r[0]["metric"];
        assert_eq!(m["container"], DOCKER_ID, "{m}");
        // An empty label is no label to Prometheus.
        assert!(m.get("pod_uid").is_none(), "{m}");
        assert_eq!(m["comm"], "ib_write_bw", "{m}");
    }
    let r = until(
        &format!("rdmatrace_process_verdict{{pid=\"{fb_pid}\"}} == 1"),
        |r| r.iter().any(|s| s["metric"]["verdict"] == "tcp_fallback"),
    );
    assert_eq!(r[0]["metric"]["container"], POD_CONTAINER);
    assert_eq!(r[0]["metric"]["pod_uid"], POD_UID);
    // The pod's retransmits, by the pod label alone.
    let r = until(
        &format!(
            "sum by (container, pod_uid, transport) (rdmatrace_retransmits_total{{pod_uid=\"{POD_UID}\"}})"
        ),
        |r| r.iter().any(|s| s["metric"]["transport"] == "rxe"),
    );
    let rxe = r
        .iter()
        .find(|s| s["metric"]["transport"] == "rxe")
        .expect("rxe");
    assert_eq!(rxe["metric"]["container"], POD_CONTAINER);
    let n: f64 = rxe["value"][1]
        .as_str()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0);
    assert!(n > 0.0, "{rxe}");
    // The Docker container's clean wire retransmitted less (a timer may fire under TCG).
    let clean: f64 = query(&format!(
        "sum(rdmatrace_retransmits_total{{container=\"{DOCKER_ID}\",transport=\"rxe\"}})"
    ))
    .first()
    .and_then(|s| s["value"][1].as_str().and_then(|v| v.parse().ok()))
    .unwrap_or(0.0);
    assert!(n > clean, "pod {n} vs docker {clean} retransmits");
    // The incident, counted and written.
    until("rdmatrace_incidents_total{kind=\"qp_err\"} >= 1", |r| {
        !r.is_empty()
    });
    // The kernel's skipped-run counts, a series per program: the rxe transmit program's is
    // there (at 0 or more) on every lab kernel (its kprobe on 6.1, its fentry twin on 6.12).
    until(
        "rdmatrace_program_runs_missed_total{program=~\"rxe_xmit.*\"} >= 0",
        |r| !r.is_empty(),
    );

    // promtool accepts the live exposition.
    let (status, _, body) = http(&addr, "GET", "/metrics", &[]);
    assert_eq!(status, 200);
    let check = Command::new("sh")
        .arg("-c")
        .arg("promtool check metrics")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write as _;
            c.stdin.take().expect("stdin").write_all(body.as_bytes())?;
            c.wait_with_output()
        })
        .expect("promtool");
    assert!(check.status.success(), "promtool: {}", text(&check));

    let _ = prom.kill();
    let _ = prom.wait();
    let done = server.stop();
    assert!(done.status.success(), "{}", done.stderr);
    let incidents: Vec<_> = std::fs::read_dir(&fr)
        .expect("flight dir")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("incident-"))
        })
        .collect();
    assert_eq!(incidents.len(), 1, "{incidents:?}\n{}", done.stderr);
    let name = incidents[0].to_string_lossy().into_owned();
    assert!(name.ends_with("-qp_err.rdmt"), "{name}");
    let report = run(&["report", &name]);
    assert!(
        report.stdout.contains("RETRY_EXC_ERR") && report.stdout.contains("rt-mover"),
        "{}",
        report.stdout
    );
}
