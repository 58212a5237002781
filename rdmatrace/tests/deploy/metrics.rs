//! The metric names of the deployment files and of the exporter agree: the dashboard and the
//! alerting rules use every name of the interface, and every name they use is one
//! `rdmatrace serve` really exports (read from its `/metrics` over HTTP).

use super::*;

/// Every `rdmatrace_[a-z_]+` name in a PromQL expression.
fn metric_names(expr: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = expr;
    while let Some(i) = rest.find("rdmatrace_") {
        let before = rest[..i].chars().next_back();
        let tail = &rest[i..];
        let len = tail
            .find(|c: char| !(c.is_ascii_lowercase() || c == '_'))
            .unwrap_or(tail.len());
        // A name starts a word: not the end of another identifier.
        if !before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':') {
            out.insert(tail[..len].to_string());
        }
        rest = &tail[len..];
    }
    out
}

/// Every PromQL expression of the dashboard: panel targets and template variable queries.
fn dashboard_exprs() -> Vec<String> {
    fn walk(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::Object(m) => {
                for (k, v) in m {
                    match (k.as_str(), v) {
                        ("expr" | "query" | "definition", Value::String(s)) => out.push(s.clone()),
                        _ => walk(v, out),
                    }
                }
            }
            Value::Array(a) => a.iter().for_each(|v| walk(v, out)),
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(&dashboard(), &mut out);
    out
}

fn dashboard() -> Value {
    let rel = "deploy/grafana/rdmatrace-dashboard.json";
    serde_json::from_str(&read(rel)).unwrap_or_else(|e| panic!("{rel}: bad JSON: {e}"))
}

/// `(alert name, expr)` of every rule.
fn alert_exprs() -> Vec<(String, String)> {
    let doc = yaml("deploy/prometheus/alerts.yml");
    let groups = doc["groups"].as_vec().expect("alerts.yml: groups");
    let mut out = Vec::new();
    for g in groups {
        for r in g["rules"].as_vec().expect("a group's rules") {
            let name = r["alert"]
                .as_str()
                .expect("every rule is an alert")
                .to_string();
            let expr = r["expr"]
                .as_str()
                .unwrap_or_else(|| panic!("{name}: no expr"));
            assert!(
                r["labels"]["severity"].as_str().is_some(),
                "{name}: no severity label"
            );
            assert!(
                r["annotations"]["summary"].as_str().is_some(),
                "{name}: no summary"
            );
            out.push((name, expr.to_string()));
        }
    }
    out
}

/// Metric names as a scraper stores them, from the `# TYPE` lines of an exposition: a counter
/// family of OpenMetrics text is named without its `_total`, which its samples carry.
fn families(body: &str, openmetrics: bool) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for line in body.lines() {
        let Some(rest) = line.strip_prefix("# TYPE ") else {
            continue;
        };
        let mut words = rest.split_whitespace();
        let (Some(name), Some(kind)) = (words.next(), words.next()) else {
            panic!("bad TYPE line {line:?}");
        };
        if openmetrics && kind == "counter" && !name.ends_with("_total") {
            out.insert(format!("{name}_total"));
        } else {
            out.insert(name.to_string());
        }
    }
    out
}

#[test]
fn dashboard_and_alerts_use_every_name_of_the_interface() {
    let d = dashboard();
    let schema = d["schemaVersion"].as_u64().expect("schemaVersion");
    assert!((36..=41).contains(&schema), "schemaVersion {schema}");
    assert!(
        d["__inputs"]
            .as_array()
            .is_some_and(|i| i.iter().any(|i| i["name"] == "DS_PROMETHEUS")),
        "a DS_PROMETHEUS datasource input"
    );
    let vars: BTreeSet<&str> = d["templating"]["list"]
        .as_array()
        .expect("templating")
        .iter()
        .filter_map(|v| v["name"].as_str())
        .collect();
    for v in ["node", "container", "pod"] {
        assert!(vars.contains(v), "template variable {v}");
    }
    let panels = d["panels"].as_array().expect("panels");
    for p in panels.iter().filter(|p| p["type"] != "row") {
        assert_eq!(
            p["datasource"]["uid"], "${DS_PROMETHEUS}",
            "panel {} uses the input datasource",
            p["title"]
        );
        assert!(
            p["targets"].as_array().is_some_and(|t| !t.is_empty()),
            "panel {} has queries",
            p["title"]
        );
    }

    let mut used = BTreeSet::new();
    for e in dashboard_exprs() {
        used.extend(metric_names(&e));
    }
    for (_, e) in alert_exprs() {
        used.extend(metric_names(&e));
    }
    let missing: Vec<&&str> = INTERFACE.iter().filter(|n| !used.contains(**n)).collect();
    assert!(
        missing.is_empty(),
        "not used by the dashboard nor the alerts: {missing:?}"
    );
    // The TCP-fallback alert the docs promise.
    assert!(
        alert_exprs()
            .iter()
            .any(|(_, e)| e.contains(r#"rdmatrace_process_verdict{verdict="tcp_fallback"} == 1"#)),
        "a TCP fallback alert"
    );
}

/// Names `serve` exports only when it traces live (read from the kernel, not from records), so
/// a replayed recording has none: the lab's serve test finds them through Prometheus
/// (`lab_serve.rs`).
const LIVE_ONLY: &[&str] = &["rdmatrace_program_runs_missed_total"];

#[test]
fn every_metric_the_dashboard_and_alerts_use_is_served() {
    // The synthetic fixture (every kind of record, a process in a pod) and a recording with a
    // QP alive at its end: the names of both, per way of asking.
    let dir = test_dir("deploy");
    let live = dir.path().join("live-qp.rdmt");
    std::fs::write(&live, live_qp_recording()).expect("write the live-QP recording");
    let (mut served, healthz) =
        served_names(&repo().join("tests/fixtures/synthetic-all-kinds.rdmt"));
    assert_eq!(healthz, 200, "/healthz");
    let (more, _) = served_names(&live);
    for ((what, names), (_, more)) in served.iter_mut().zip(more) {
        assert!(
            more.contains("rdmatrace_qps"),
            "{what}: no rdmatrace_qps while a QP lives: {more:?}"
        );
        names.extend(more);
    }

    let mut used: Vec<(String, String)> = Vec::new();
    for e in dashboard_exprs() {
        for n in metric_names(&e) {
            used.push((n, format!("dashboard: {e}")));
        }
    }
    for (alert, e) in alert_exprs() {
        for n in metric_names(&e) {
            used.push((n, format!("alert {alert}")));
        }
    }
    assert!(!used.is_empty());
    for (what, names) in &served {
        let unknown: Vec<String> = used
            .iter()
            .filter(|(n, _)| !names.contains(n) && !LIVE_ONLY.contains(&n.as_str()))
            .map(|(n, w)| format!("{n} ({w})"))
            .collect();
        assert!(
            unknown.is_empty(),
            "not served ({what}):\n  {}\nserved: {names:?}",
            unknown.join("\n  ")
        );
        let missing: Vec<&&str> = INTERFACE.iter().filter(|n| !names.contains(**n)).collect();
        assert!(
            missing.is_empty(),
            "the interface names {missing:?}, not served ({what}): {names:?}"
        );
    }
}

/// A recording whose one QP is still alive (in RTS) at its end. `rdmatrace_qps` has series
/// only while QPs live, and an exposition leaves out a family without series: every QP of the
/// committed fixtures is destroyed by their end, so this one shows the family.
fn live_qp_recording() -> Vec<u8> {
    use rdmatrace::testing::{qp, synthetic_header, zeroed, Gen};
    use rdmatrace_common::event::{
        attr_mask, EventKind, ProcessEvent, QpCreateEvent, QpModifyEvent, STATE_UNKNOWN,
    };
    let mut g = Gen::new(&synthetic_header(), rdmatrace::recording::VERSION);
    let (pid, comm) = (4343, "server");
    let mut ev: ProcessEvent = zeroed();
    ev.header = g.header(EventKind::ProcessExec, pid, comm);
    ev.ppid = 1;
    g.put(&ev);
    let mut c: QpCreateEvent = zeroed();
    c.header = g.header(EventKind::QpCreate, pid, comm);
    c.qp = qp("rxe0", 0x21, 2);
    g.put(&c);
    let mut cur = STATE_UNKNOWN;
    for state in [1, 2, 3] {
        // INIT, RTR, RTS
        let mut m: QpModifyEvent = zeroed();
        m.header = g.header(EventKind::QpModify, pid, comm);
        m.qp = c.qp;
        m.attr_mask = attr_mask::STATE;
        m.cur_state = cur;
        m.new_state = state;
        g.put(&m);
        cur = state;
    }
    g.finish()
}

/// The metric names `serve --input FILE` exposes, asked as Prometheus asks (OpenMetrics
/// first) and as plain text 0.0.4: `(what, names)` for each; and whether `/healthz` said 200.
fn served_names(file: &Path) -> (Vec<(&'static str, BTreeSet<String>)>, u16) {
    let file = file.to_str().expect("a UTF-8 path");
    let server = start(
        &["serve", "--input", file, "--listen", "127.0.0.1:0"],
        Duration::from_secs(60),
    );
    let addr = served_addr(&server.ready_line);
    let prometheus_accept = "application/openmetrics-text;version=1.0.0;q=0.5,\
                             application/openmetrics-text;version=0.0.1;q=0.4,\
                             text/plain;version=0.0.4;q=0.3,*/*;q=0.2";
    let mut served = Vec::new();
    for (what, accept) in [
        ("text 0.0.4", "text/plain;version=0.0.4"),
        ("Prometheus's Accept", prometheus_accept),
    ] {
        let (status, head, body) = http(&addr, "GET", "/metrics", &[("Accept", accept)]);
        assert_eq!(status, 200, "{what}: {head}");
        let openmetrics = head
            .to_ascii_lowercase()
            .contains("content-type: application/openmetrics-text");
        served.push((what, families(&body, openmetrics)));
    }
    // What the DaemonSet's probes ask.
    let (healthz, _, _) = http(&addr, "GET", "/healthz", &[]);
    let done = server.stop();
    assert!(
        done.status.success(),
        "serve --input {file} ended with {} on SIGINT:\n{}",
        done.status,
        done.stderr
    );
    (served, healthz)
}
