//! Chrome's trace-event JSON (`chrome://tracing`, Perfetto's legacy importer, speedscope...).
//!
//! The format has processes and threads, not a free track tree, so: each traced process is a
//! JSON process, each of its QPs a JSON thread, host-level instants go to a process named after
//! the host. JSON pids are `host_index << 22 | pid` (pids are below 2^22 on Linux), so several
//! hosts' processes never merge. `ts`/`dur` are µs of UTC wall clock since the Unix epoch.

use std::collections::HashMap;

use serde_json::{json, Map, Value};

use super::{Arg, Timeline, TrackKind, What};

fn json_pid(host: usize, pid: u32) -> u64 {
    ((host as u64) << 22) | u64::from(pid)
}

fn micros(ns: u64) -> Value {
    json!((ns / 1000) as f64 + (ns % 1000) as f64 / 1000.0)
}

fn arg_value(a: &Arg) -> Value {
    match a {
        Arg::Str(s) => json!(s),
        Arg::Int(n) => json!(n),
        Arg::UInt(n) => json!(n),
    }
}

/// The timeline as one JSON object (`{"traceEvents": [...], ...}`).
pub fn to_json(tl: &Timeline) -> Value {
    let mut events = Vec::new();
    // track uuid -> (json pid, json tid).
    let mut ids: HashMap<u64, (u64, u64)> = HashMap::new();
    let mut next_tid: HashMap<u64, u64> = HashMap::new();
    let mut sort_index = 0u64;
    for t in &tl.tracks {
        let pid = json_pid(t.host, t.pid);
        match &t.kind {
            TrackKind::Host | TrackKind::Process { .. } => {
                ids.insert(t.uuid, (pid, 0));
                let name = match (&t.kind, tl.hosts.len() > 1) {
                    (TrackKind::Process { .. }, true) => {
                        let host = tl.hosts.get(t.host).map_or("?", |h| h.name.as_str());
                        format!("{} @{host}", t.name)
                    }
                    _ => t.name.clone(),
                };
                events.push(
                    json!({"ph": "M", "name": "process_name", "pid": pid, "tid": 0,
                                   "args": {"name": name}}),
                );
                events.push(
                    json!({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0,
                                   "args": {"sort_index": sort_index}}),
                );
                sort_index += 1;
            }
            TrackKind::Qp { .. } => {
                let tid = next_tid.entry(pid).or_insert(0);
                *tid += 1;
                ids.insert(t.uuid, (pid, *tid));
                events.push(
                    json!({"ph": "M", "name": "thread_name", "pid": pid, "tid": *tid,
                                   "args": {"name": t.name}}),
                );
                events.push(
                    json!({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": *tid,
                                   "args": {"sort_index": *tid}}),
                );
            }
            TrackKind::Counter(_) => {
                ids.insert(t.uuid, (pid, 0));
            }
        }
    }
    for e in &tl.events {
        let Some(&(pid, tid)) = ids.get(&e.track) else {
            continue;
        };
        let ts = micros(e.wall_ns);
        events.push(match &e.what {
            What::Slice { name, dur_ns } => json!({
                "ph": "X", "cat": "qp_state", "name": name, "ts": ts, "dur": micros(*dur_ns),
                "pid": pid, "tid": tid,
            }),
            What::Instant {
                name,
                category,
                args,
            } => {
                let args: Map<String, Value> = args
                    .iter()
                    .map(|(k, v)| ((*k).to_string(), arg_value(v)))
                    .collect();
                json!({
                    "ph": "i", "s": if tid == 0 { "p" } else { "t" }, "cat": category,
                    "name": name, "ts": ts, "pid": pid, "tid": tid, "args": args,
                })
            }
            What::Flow {
                name,
                id,
                terminating,
            } => json!({
                "ph": if *terminating { "f" } else { "s" }, "bp": "e", "cat": "handshake",
                "id": id, "name": name, "ts": ts, "pid": pid, "tid": tid,
            }),
            What::Counter(v) => {
                let name = tl.track(e.track).map_or("", |t| t.name.as_str());
                json!({"ph": "C", "name": name, "ts": ts, "pid": pid, "tid": 0,
                       "args": {"value": v}})
            }
        });
    }
    let hosts: Vec<Value> = tl
        .hosts
        .iter()
        .map(|h| {
            let mut v =
                json!({"name": h.name, "kernel": h.kernel, "clock_offset_ns": h.clock_offset_ns});
            if let Some(n) = &h.clock_note {
                v["clock_note"] = json!(n);
            }
            v
        })
        .collect();
    json!({
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {
            "tool": "rdmatrace",
            "clock": "UTC wall clock, microseconds since the Unix epoch",
            "hosts": hosts,
        },
    })
}
