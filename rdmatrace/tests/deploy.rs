//! The deployment files in `deploy/` agree with the exporter and with each other: the
//! DaemonSet, the systemd unit and docs/deploy.md grant the same capabilities, the DaemonSet
//! mounts what the docs list, and the arguments the DaemonSet and the unit pass are ones `serve`
//! accepts. The metric names of the dashboard and the alerting rules against what `rdmatrace
//! serve` really exports: `deploy/metrics.rs`.

mod common;
#[path = "deploy/metrics.rs"]
mod metrics;

use std::{
    collections::BTreeSet,
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

use common::*;
use serde_json::Value;
use yaml_rust2::{Yaml, YamlLoader};

/// The capabilities `serve` is granted (docs/deploy.md, "Capabilities").
const CAPS: &[&str] = &[
    "CAP_BPF",
    "CAP_PERFMON",
    "CAP_NET_ADMIN",
    "CAP_SYS_RESOURCE",
    "CAP_SYS_PTRACE",
];

/// The metric names of the exporter's interface (docs/deploy.md, "The metrics").
const INTERFACE: &[&str] = &[
    "rdmatrace_process_verdict",
    "rdmatrace_rdma_bytes_total",
    "rdmatrace_tcp_bytes_total",
    "rdmatrace_retransmits_total",
    "rdmatrace_qps",
    "rdmatrace_anomalies_total",
    "rdmatrace_events_total",
    "rdmatrace_lost_events_total",
    "rdmatrace_incidents_total",
    "rdmatrace_series_dropped_total",
    "rdmatrace_up",
];

const PORT: &str = "9477";
const JOURNAL_DIR: &str = "/run/rdmatrace";
const FLIGHT_DIR: &str = "/var/lib/rdmatrace/flight-recorder";

/// The DaemonSet's mounts: (path on the host and in the pod, read-only).
const MOUNTS: &[(&str, bool)] = &[
    ("/sys/kernel/btf", true),
    ("/sys/fs/cgroup", true),
    (JOURNAL_DIR, false),
    (FLIGHT_DIR, false),
];

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn read(rel: &str) -> String {
    let path = repo().join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

/// The one YAML document of `rel`.
fn yaml(rel: &str) -> Yaml {
    let mut docs =
        YamlLoader::load_from_str(&read(rel)).unwrap_or_else(|e| panic!("{rel}: bad YAML: {e}"));
    assert_eq!(docs.len(), 1, "{rel}: one YAML document expected");
    docs.remove(0)
}

fn strs(y: &Yaml) -> Vec<&str> {
    y.as_vec()
        .map(|v| v.iter().filter_map(Yaml::as_str).collect())
        .unwrap_or_default()
}

fn set<'a>(items: impl IntoIterator<Item = &'a str>) -> BTreeSet<String> {
    items.into_iter().map(str::to_string).collect()
}

/// The pod template's spec and its one container.
fn daemonset() -> (Yaml, Yaml) {
    let doc = yaml("deploy/kubernetes/daemonset.yaml");
    assert_eq!(doc["kind"].as_str(), Some("DaemonSet"));
    assert_eq!(doc["metadata"]["name"].as_str(), Some("rdmatrace"));
    assert!(
        doc["metadata"]["namespace"].is_badvalue(),
        "the DaemonSet names no namespace (kubectl -n picks one)"
    );
    let spec = doc["spec"]["template"]["spec"].clone();
    let containers = spec["containers"].as_vec().expect("containers");
    assert_eq!(containers.len(), 1, "one container");
    let c = containers[0].clone();
    (spec, c)
}

/// The `Key=Value` lines of a systemd unit's `[section]` (a key may repeat).
fn unit_entries(text: &str, section: &str) -> Vec<(String, String)> {
    let mut current = String::new();
    let mut out = Vec::new();
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if line.starts_with('[') {
            current = line.trim_matches(|c| c == '[' || c == ']').to_string();
            continue;
        }
        if current == section {
            let (k, v) = line
                .split_once('=')
                .unwrap_or_else(|| panic!("bad unit line {line:?}"));
            out.push((k.trim().to_string(), v.trim().to_string()));
        }
    }
    out
}

fn unit_value<'a>(entries: &'a [(String, String)], key: &str) -> Vec<&'a str> {
    entries
        .iter()
        .filter(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
        .collect()
}

/// The words of the Containerfile's last exec-form `ENTRYPOINT`.
fn entrypoint() -> Vec<String> {
    let text = read("deploy/Containerfile");
    let line = text
        .lines()
        .rfind(|l| l.starts_with("ENTRYPOINT "))
        .expect("deploy/Containerfile: an ENTRYPOINT");
    serde_json::from_str(line.trim_start_matches("ENTRYPOINT ").trim())
        .unwrap_or_else(|e| panic!("ENTRYPOINT is not in exec form (a JSON array): {e}: {line}"))
}

#[test]
fn daemonset_is_unprivileged_with_the_documented_capabilities_and_mounts() {
    let (spec, c) = daemonset();
    assert_eq!(spec["hostPID"].as_bool(), Some(true), "hostPID: true");
    assert_ne!(
        spec["hostNetwork"].as_bool(),
        Some(true),
        "the pod listens on 0.0.0.0: not in the host's network"
    );

    let sc = &c["securityContext"];
    assert_eq!(sc["privileged"].as_bool(), Some(false), "privileged: false");
    assert_eq!(sc["allowPrivilegeEscalation"].as_bool(), Some(false));
    assert_eq!(strs(&sc["capabilities"]["drop"]), ["ALL"], "drop ALL");
    let added = set(strs(&sc["capabilities"]["add"]));
    let want = set(CAPS.iter().map(|c| c.trim_start_matches("CAP_")));
    assert_eq!(added, want, "capabilities added");

    // Every documented mount, from the same host path, read-only but the two we write.
    let mounts = c["volumeMounts"].as_vec().expect("volumeMounts");
    let volumes = spec["volumes"].as_vec().expect("volumes");
    let mut seen = BTreeSet::new();
    for m in mounts {
        let path = m["mountPath"].as_str().expect("mountPath");
        let name = m["name"].as_str().expect("a mount's name");
        let Some(&(_, ro)) = MOUNTS.iter().find(|(p, _)| *p == path) else {
            panic!("{path} is mounted but not documented (MOUNTS, docs/deploy.md)");
        };
        assert_eq!(
            m["readOnly"].as_bool().unwrap_or(false),
            ro,
            "{path}: readOnly should be {ro}"
        );
        let vol = volumes
            .iter()
            .find(|v| v["name"].as_str() == Some(name))
            .unwrap_or_else(|| panic!("no volume {name}"));
        assert_eq!(
            vol["hostPath"]["path"].as_str(),
            Some(path),
            "{name}: the host's {path}"
        );
        seen.insert(path);
    }
    let documented: BTreeSet<&str> = MOUNTS.iter().map(|(p, _)| *p).collect();
    assert_eq!(seen, documented, "mounts");
    for not in ["/dev/infiniband", "/proc", "/sys/kernel/debug", "/sys"] {
        assert!(!seen.contains(not), "{not} must not be mounted");
    }

    // The metrics port, probed and announced to Prometheus.
    let ports = c["ports"].as_vec().expect("ports");
    assert!(
        ports.iter().any(|p| p["name"].as_str() == Some("metrics")
            && p["containerPort"]
                .as_i64()
                .map(|n| n.to_string())
                .as_deref()
                == Some(PORT)),
        "port {PORT} named metrics"
    );
    for probe in ["readinessProbe", "livenessProbe"] {
        assert_eq!(
            c[probe]["httpGet"]["path"].as_str(),
            Some("/healthz"),
            "{probe}"
        );
        assert_eq!(
            c[probe]["httpGet"]["port"].as_str(),
            Some("metrics"),
            "{probe}"
        );
    }
    assert_eq!(c["resources"]["limits"]["memory"].as_str(), Some("256Mi"));
    let annotations = {
        let doc = yaml("deploy/kubernetes/daemonset.yaml");
        doc["spec"]["template"]["metadata"]["annotations"].clone()
    };
    assert_eq!(annotations["prometheus.io/scrape"].as_str(), Some("true"));
    assert_eq!(annotations["prometheus.io/port"].as_str(), Some(PORT));
    assert_eq!(annotations["prometheus.io/path"].as_str(), Some("/metrics"));
    let tolerations = spec["tolerations"].as_vec().expect("tolerations");
    assert!(
        tolerations
            .iter()
            .any(|t| t["operator"].as_str() == Some("Exists") && t["key"].is_badvalue()),
        "tolerates every taint: runs on every node"
    );

    // The flight recorder writes where the rw mount is.
    let args = strs(&c["args"]);
    let dir = args
        .iter()
        .position(|a| *a == "--flight-recorder")
        .and_then(|i| args.get(i + 1));
    assert_eq!(dir, Some(&FLIGHT_DIR), "--flight-recorder {FLIGHT_DIR}");
}

#[test]
fn containerfile_serves_on_the_pod_address_and_builds_like_bootstrap() {
    let listen = format!("0.0.0.0:{PORT}");
    assert_eq!(
        entrypoint(),
        ["rdmatrace", "serve", "--listen", listen.as_str()]
    );
    let text = read("deploy/Containerfile");
    let last_from = text
        .lines()
        .rfind(|l| l.starts_with("FROM "))
        .expect("FROM");
    assert!(last_from.contains("debian:bookworm-slim"), "{last_from}");
    assert!(text.contains(&format!("EXPOSE {PORT}")));
    assert!(
        text.contains("rust-src"),
        "the builder installs nightly rust-src"
    );
    // The bpf-linker the image builds is the one bootstrap installs.
    let version_in = |text: &str, prefix: &str| -> String {
        text.lines()
            .find_map(|l| l.trim().strip_prefix(prefix))
            .unwrap_or_else(|| panic!("no line starting {prefix:?}"))
            .trim_matches(|c: char| c == '"' || c == ';' || c.is_whitespace())
            .to_string()
    };
    let bootstrap = read("xtask/src/bootstrap.rs");
    assert_eq!(
        version_in(&text, "ARG BPF_LINKER_VERSION="),
        version_in(&bootstrap, "const BPF_LINKER_VERSION: &str =")
    );
}

#[test]
fn systemd_unit_serves_on_loopback_with_the_same_capabilities() {
    let text = read("deploy/systemd/rdmatrace.service");
    let service = unit_entries(&text, "Service");
    let exec = unit_value(&service, "ExecStart");
    assert_eq!(exec.len(), 1, "one ExecStart");
    let words: Vec<&str> = exec[0].split_whitespace().collect();
    assert!(words[0].ends_with("/rdmatrace"), "{}", exec[0]);
    assert_eq!(words.get(1), Some(&"serve"), "{}", exec[0]);
    assert!(
        exec[0].contains(&format!("--listen 127.0.0.1:{PORT}")),
        "loopback: {}",
        exec[0]
    );
    for key in ["CapabilityBoundingSet", "AmbientCapabilities"] {
        let v = unit_value(&service, key);
        assert_eq!(v.len(), 1, "one {key}");
        assert_eq!(
            set(v[0].split_whitespace()),
            set(CAPS.iter().copied()),
            "{key}"
        );
    }
    assert_eq!(unit_value(&service, "ProtectSystem"), ["strict"]);
    assert_eq!(unit_value(&service, "Restart"), ["on-failure"]);
    let rw: BTreeSet<&str> = unit_value(&service, "ReadWritePaths")
        .iter()
        .flat_map(|v| v.split_whitespace())
        .collect();
    for dir in [JOURNAL_DIR, FLIGHT_DIR] {
        assert!(rw.contains(dir), "ReadWritePaths has {dir}: {rw:?}");
    }
    let flight = words
        .iter()
        .position(|a| *a == "--flight-recorder")
        .and_then(|i| words.get(i + 1));
    assert_eq!(flight, Some(&FLIGHT_DIR));
}

#[test]
fn docs_grant_the_same_capabilities_and_name_the_port() {
    let doc = read("docs/deploy.md");
    // Rows `| `CAP_X` | yes/no | why |`.
    let mut granted = BTreeSet::new();
    let mut rows = 0;
    for line in doc.lines().filter(|l| l.starts_with("| `CAP_")) {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let cap = cells[1].trim_matches('`');
        rows += 1;
        match cells[2] {
            "yes" => {
                granted.insert(cap.to_string());
            }
            "no" => {}
            other => panic!("{cap}: granted is {other:?}, not yes or no"),
        }
        assert!(cells[3].len() > 20, "{cap}: say why");
    }
    assert!(rows >= CAPS.len());
    assert_eq!(
        granted,
        set(CAPS.iter().copied()),
        "docs/deploy.md capability table"
    );
    assert!(doc.contains(&format!("127.0.0.1:{PORT}")));
    for (path, _) in MOUNTS {
        assert!(
            doc.contains(&format!("`{path}`")),
            "docs/deploy.md names {path}"
        );
    }
    for name in INTERFACE {
        assert!(
            doc.contains(&format!("`{name}`")),
            "docs/deploy.md lists {name}"
        );
    }
}

/// `serve ARGS --help` exits 0 only when clap accepted every flag and value before `--help`.
fn assert_serve_accepts(args: &[&str], from: &str) {
    let mut all: Vec<&str> = args.to_vec();
    all.push("--help");
    let out = run(&all);
    assert!(
        out.status.success(),
        "{from}: `rdmatrace {}` is refused:\n{}",
        args.join(" "),
        out.stderr
    );
}

#[test]
fn serve_accepts_the_arguments_the_daemonset_and_the_unit_pass() {
    // The check itself: a flag serve lacks, or a bad value, is refused before --help.
    assert!(!run(&["serve", "--no-such-flag", "--help"]).status.success());
    assert!(!run(&["serve", "--max-disk", "lots", "--help"])
        .status
        .success());

    let entry = entrypoint();
    let (_, c) = daemonset();
    let mut pod: Vec<&str> = entry[1..].iter().map(String::as_str).collect();
    pod.extend(strs(&c["args"]));
    assert_serve_accepts(&pod, "the image's ENTRYPOINT + the DaemonSet's args");

    let text = read("deploy/systemd/rdmatrace.service");
    let service = unit_entries(&text, "Service");
    let exec = unit_value(&service, "ExecStart")[0];
    let words: Vec<&str> = exec.split_whitespace().skip(1).collect();
    assert_serve_accepts(&words, "the unit's ExecStart");
}

/// Runs `promtool CHECK rules FILE` (FILE under deploy/prometheus) and asserts it succeeds.
fn promtool_rules(check: &str, file: &str) {
    let path = repo().join("deploy/prometheus").join(file);
    let out = Command::new("promtool")
        .args([check, "rules"])
        .arg(&path)
        .output()
        .expect("run promtool");
    assert!(
        out.status.success(),
        "promtool {check} rules {}:\n{}{}",
        path.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
#[ignore = "needs promtool (apt-get install prometheus): checks the alerting rules with Prometheus' own checker"]
fn promtool_accepts_the_alert_rules() {
    promtool_rules("check", "alerts.yml");
}

#[test]
#[ignore = "needs promtool (apt-get install prometheus): runs the alerting rules' unit tests with Prometheus' own checker"]
fn promtool_fires_the_alerts_on_their_conditions() {
    promtool_rules("test", "alerts_test.yml");
}
