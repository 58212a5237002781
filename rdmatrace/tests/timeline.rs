//! `rdmatrace timeline` on the committed lab recordings: golden Chrome JSON, and the Perfetto file
//! decoded with this file's own prost mirror of Perfetto's trace.proto (field numbers from the
//! public schema; written separately from the encoder so a wrong tag there fails here).
//! Bless with `INSTA_UPDATE=always cargo test --test timeline`.

mod common;

use std::collections::BTreeMap;

use common::*;

const PINGPONG: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../tests/fixtures/lab-pingpong.rdmt"
);
const LOSS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../tests/fixtures/lab-loss.rdmt"
);

/// perfetto.protos.* as read back (only what the checks look at).
mod pb {
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Trace {
        #[prost(message, repeated, tag = "1")]
        pub packet: Vec<TracePacket>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct TracePacket {
        #[prost(uint64, optional, tag = "8")]
        pub timestamp: Option<u64>,
        #[prost(uint32, optional, tag = "58")]
        pub timestamp_clock_id: Option<u32>,
        #[prost(uint32, optional, tag = "10")]
        pub trusted_packet_sequence_id: Option<u32>,
        #[prost(message, optional, tag = "6")]
        pub clock_snapshot: Option<ClockSnapshot>,
        #[prost(message, optional, tag = "11")]
        pub track_event: Option<TrackEvent>,
        #[prost(message, optional, tag = "60")]
        pub track_descriptor: Option<TrackDescriptor>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ClockSnapshot {
        #[prost(message, repeated, tag = "1")]
        pub clocks: Vec<Clock>,
        #[prost(int32, optional, tag = "2")]
        pub primary_trace_clock: Option<i32>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Clock {
        #[prost(uint32, optional, tag = "1")]
        pub clock_id: Option<u32>,
        #[prost(uint64, optional, tag = "2")]
        pub timestamp: Option<u64>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct TrackDescriptor {
        #[prost(uint64, optional, tag = "1")]
        pub uuid: Option<u64>,
        #[prost(string, optional, tag = "2")]
        pub name: Option<String>,
        #[prost(uint64, optional, tag = "5")]
        pub parent_uuid: Option<u64>,
        #[prost(message, optional, tag = "8")]
        pub counter: Option<CounterDescriptor>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct CounterDescriptor {
        #[prost(string, optional, tag = "6")]
        pub unit_name: Option<String>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct TrackEvent {
        #[prost(int32, optional, tag = "9")]
        pub r#type: Option<i32>,
        #[prost(uint64, optional, tag = "11")]
        pub track_uuid: Option<u64>,
        #[prost(string, optional, tag = "23")]
        pub name: Option<String>,
        #[prost(string, repeated, tag = "22")]
        pub categories: Vec<String>,
        #[prost(double, optional, tag = "44")]
        pub double_counter_value: Option<f64>,
        #[prost(message, repeated, tag = "4")]
        pub debug_annotations: Vec<DebugAnnotation>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct DebugAnnotation {
        #[prost(string, optional, tag = "10")]
        pub name: Option<String>,
        #[prost(uint64, optional, tag = "3")]
        pub uint_value: Option<u64>,
        #[prost(int64, optional, tag = "4")]
        pub int_value: Option<i64>,
        #[prost(string, optional, tag = "6")]
        pub string_value: Option<String>,
    }
}

fn perfetto(files: &[&str]) -> pb::Trace {
    // A directory of this call's own: tests run in parallel, each with its own trace file.
    let dir = test_dir("timeline");
    let out = dir.path().join(format!("t{}.pftrace", files.len()));
    let out_s = out.to_string_lossy().into_owned();
    let mut args = vec!["timeline"];
    args.extend_from_slice(files);
    args.extend_from_slice(&["-o", &out_s]);
    let r = run(&args);
    assert!(r.status.success(), "{}", r.stderr);
    let bytes = std::fs::read(&out).expect("read trace");
    prost::Message::decode(bytes.as_slice()).expect("a Perfetto Trace message")
}

/// The decoded trace as text: the track tree, then every event with its time relative to the
/// first packet (so the golden file does not depend on the wall clock... it would not anyway:
/// the fixtures are fixed; relative times are just easier to read).
fn render(trace: &pb::Trace) -> String {
    let t0 = trace
        .packet
        .iter()
        .filter_map(|p| p.timestamp)
        .min()
        .unwrap_or(0);
    let mut tracks: BTreeMap<u64, (Option<u64>, String)> = BTreeMap::new();
    let mut out = String::new();
    for p in &trace.packet {
        if let Some(c) = &p.clock_snapshot {
            let clocks: Vec<String> = c
                .clocks
                .iter()
                .map(|c| format!("{}={}", c.clock_id.unwrap_or(0), c.timestamp.unwrap_or(0)))
                .collect();
            out += &format!(
                "clock snapshot seq {} primary {} [{}]\n",
                p.trusted_packet_sequence_id.unwrap_or(0),
                c.primary_trace_clock.unwrap_or(0),
                clocks.join(", ")
            );
        }
        if let Some(d) = &p.track_descriptor {
            let mut name = d.name.clone().unwrap_or_default();
            if let Some(c) = &d.counter {
                name += &format!(" (counter, {})", c.unit_name.clone().unwrap_or_default());
            }
            tracks.insert(d.uuid.unwrap_or(0), (d.parent_uuid, name));
        }
    }
    fn path(tracks: &BTreeMap<u64, (Option<u64>, String)>, uuid: u64) -> String {
        match tracks.get(&uuid) {
            Some((Some(parent), name)) => format!("{} / {name}", path(tracks, *parent)),
            Some((None, name)) => name.clone(),
            None => format!("<unknown track {uuid}>"),
        }
    }
    out += "TRACKS\n";
    for uuid in tracks.keys() {
        out += &format!("{uuid:>3} {}\n", path(&tracks, *uuid));
    }
    out += "EVENTS (ms after the first packet)\n";
    for p in &trace.packet {
        let Some(e) = &p.track_event else { continue };
        let ts = p.timestamp.unwrap_or(0).saturating_sub(t0) as f64 / 1e6;
        let kind = match e.r#type {
            Some(1) => "begin",
            Some(2) => "end",
            Some(3) => "instant",
            Some(4) => "counter",
            _ => "?",
        };
        let mut line = format!(
            "{ts:>10.3} {:>3} {kind:<7} {}",
            e.track_uuid.unwrap_or(0),
            e.name.clone().unwrap_or_default()
        );
        if let Some(v) = e.double_counter_value {
            line += &format!("{v}");
        }
        for a in &e.debug_annotations {
            let v = a
                .string_value
                .clone()
                .or(a.uint_value.map(|n| n.to_string()))
                .or(a.int_value.map(|n| n.to_string()))
                .unwrap_or_default();
            line += &format!(" {}={v}", a.name.clone().unwrap_or_default());
        }
        out += line.trim_end();
        out += "\n";
    }
    out
}

fn track_names(trace: &pb::Trace) -> Vec<String> {
    trace
        .packet
        .iter()
        .filter_map(|p| p.track_descriptor.as_ref()?.name.clone())
        .collect()
}

/// Slice names on the track called `name`, in order.
fn slices_on(trace: &pb::Trace, name: &str) -> Vec<String> {
    let uuids: Vec<u64> = trace
        .packet
        .iter()
        .filter_map(|p| p.track_descriptor.as_ref())
        .filter(|d| d.name.as_deref() == Some(name))
        .filter_map(|d| d.uuid)
        .collect();
    trace
        .packet
        .iter()
        .filter_map(|p| p.track_event.as_ref())
        .filter(|e| e.r#type == Some(1) && e.track_uuid.is_some_and(|u| uuids.contains(&u)))
        .filter_map(|e| e.name.clone())
        .collect()
}

#[test]
fn perfetto_loss_decodes_with_tracks_slices_and_counters() {
    let trace = perfetto(&[LOSS]);
    let names = track_names(&trace);
    // Both ib_write_bw processes (client and server) have a track.
    let perftest = names
        .iter()
        .filter(|n| n.starts_with("ib_write_bw ["))
        .count();
    assert_eq!(perftest, 2, "{names:?}");
    for want in [
        "host virtme-ng",
        "rxe0 QPN 0x11 RC",
        "rxe1 QPN 0x11 RC",
        "retransmits/s",
    ] {
        assert!(
            names.iter().any(|n| n == want),
            "no track {want:?} in {names:?}"
        );
    }
    assert_eq!(
        slices_on(&trace, "rxe0 QPN 0x11 RC"),
        ["RESET", "INIT", "RTR", "RTS"]
    );
    // Every event is on a declared track, on a sequence, in UTC.
    let declared: Vec<u64> = trace
        .packet
        .iter()
        .filter_map(|p| p.track_descriptor.as_ref()?.uuid)
        .collect();
    for p in &trace.packet {
        assert!(p.trusted_packet_sequence_id.is_some());
        assert_eq!(p.timestamp_clock_id, Some(1), "REALTIME");
        if let Some(e) = &p.track_event {
            assert!(declared.contains(&e.track_uuid.unwrap_or(0)), "{e:?}");
        }
    }
    // Begins and ends pair up per track.
    let mut depth: BTreeMap<u64, i64> = BTreeMap::new();
    for e in trace.packet.iter().filter_map(|p| p.track_event.as_ref()) {
        let d = depth.entry(e.track_uuid.unwrap_or(0)).or_default();
        match e.r#type {
            Some(1) => *d += 1,
            Some(2) => *d -= 1,
            _ => {}
        }
        assert!((0..=1).contains(d), "state slices never overlap: {e:?}");
    }
    assert!(depth.values().all(|d| *d == 0), "{depth:?}");
    insta::assert_snapshot!(render(&trace));
}

#[test]
fn perfetto_pingpong_golden() {
    let trace = perfetto(&[PINGPONG]);
    let text = render(&trace);
    assert!(
        text.contains("qp_modify_failed"),
        "anomaly instant:\n{text}"
    );
    insta::assert_snapshot!(text);
}

#[test]
fn two_hosts_share_one_utc_axis() {
    let trace = perfetto(&[PINGPONG, LOSS]);
    let snapshots: Vec<_> = trace
        .packet
        .iter()
        .filter(|p| p.clock_snapshot.is_some())
        .map(|p| p.trusted_packet_sequence_id)
        .collect();
    assert_eq!(snapshots, [Some(1), Some(2)]);
    let hosts = track_names(&trace)
        .into_iter()
        .filter(|n| n.starts_with("host "))
        .count();
    assert_eq!(hosts, 2);
    let ts: Vec<u64> = trace
        .packet
        .iter()
        .filter(|p| p.track_event.is_some())
        .filter_map(|p| p.timestamp)
        .collect();
    assert!(ts.windows(2).all(|w| w[0] <= w[1]), "events in time order");
}

#[test]
fn chrome_json_golden() {
    for (name, file) in [("pingpong", PINGPONG), ("loss", LOSS)] {
        let out = run(&["timeline", file, "-o", "-", "--format", "json"]);
        assert!(out.status.success(), "{}", out.stderr);
        let v: serde_json::Value = serde_json::from_str(&out.stdout).expect("json");
        let events = v["traceEvents"].as_array().expect("traceEvents");
        assert!(events.iter().any(|e| e["ph"] == "X" && e["name"] == "RTS"));
        insta::assert_snapshot!(
            format!("chrome_json_{name}"),
            serde_json::to_string_pretty(&v).expect("pretty")
        );
    }
}

#[test]
fn missing_input_fails_with_the_path() {
    let out = run(&["timeline", "/nonexistent.rdmt", "-o", "-"]);
    assert!(!out.status.success());
    assert!(out.stderr.contains("/nonexistent.rdmt"), "{}", out.stderr);
}
