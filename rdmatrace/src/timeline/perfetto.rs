//! Perfetto's native trace format: a `Trace` of `TracePacket`s carrying `TrackDescriptor`s and
//! `TrackEvent`s (the "synthetic TrackEvent" recipe of Perfetto's docs). The messages below are
//! the small subset of perfetto/protos/perfetto/trace/*.proto that we write, declared with
//! prost's derive (no protoc at build time); tags are the public schema's field numbers. Enum
//! fields are plain `int32` on the wire, so they are declared as such with named constants.
//!
//! Clock: every packet is stamped with UTC (`BUILTIN_CLOCK_REALTIME`), and one `ClockSnapshot` per
//! recording (host) makes REALTIME the trace's primary clock and records that host's
//! CLOCK_MONOTONIC reading at the same instant (as a clock private to the host's packet
//! sequence), so recordings of several hosts line up and the kernel timestamps stay recoverable.

use super::{Arg, Timeline, TrackKind, What};

#[derive(Clone, PartialEq, prost::Message)]
pub struct Trace {
    #[prost(message, repeated, tag = "1")]
    pub packet: Vec<TracePacket>,
}

/// Only one of `clock_snapshot`, `track_event`, `track_descriptor` is set (a oneof upstream; a
/// oneof is ordinary optional fields on the wire).
#[derive(Clone, PartialEq, prost::Message)]
pub struct TracePacket {
    #[prost(uint64, optional, tag = "8")]
    pub timestamp: Option<u64>,
    #[prost(uint32, optional, tag = "58")]
    pub timestamp_clock_id: Option<u32>,
    #[prost(uint32, optional, tag = "10")]
    pub trusted_packet_sequence_id: Option<u32>,
    #[prost(uint32, optional, tag = "13")]
    pub sequence_flags: Option<u32>,
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
    /// `BuiltinClock`.
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
    /// `ChildTracksOrdering`.
    #[prost(int32, optional, tag = "11")]
    pub child_ordering: Option<i32>,
    #[prost(int32, optional, tag = "12")]
    pub sibling_order_rank: Option<i32>,
    #[prost(string, optional, tag = "14")]
    pub description: Option<String>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct CounterDescriptor {
    #[prost(string, optional, tag = "6")]
    pub unit_name: Option<String>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct TrackEvent {
    #[prost(string, repeated, tag = "22")]
    pub categories: Vec<String>,
    #[prost(string, optional, tag = "23")]
    pub name: Option<String>,
    /// `TrackEvent.Type`.
    #[prost(int32, optional, tag = "9")]
    pub r#type: Option<i32>,
    #[prost(uint64, optional, tag = "11")]
    pub track_uuid: Option<u64>,
    #[prost(double, optional, tag = "44")]
    pub double_counter_value: Option<f64>,
    #[prost(message, repeated, tag = "4")]
    pub debug_annotations: Vec<DebugAnnotation>,
    #[prost(fixed64, repeated, tag = "47")]
    pub flow_ids: Vec<u64>,
    #[prost(fixed64, repeated, tag = "48")]
    pub terminating_flow_ids: Vec<u64>,
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

/// `BuiltinClock` / `ClockSnapshot.Clock.BuiltinClocks`.
pub const CLOCK_REALTIME: u32 = 1;
/// First id of the sequence-scoped (producer-defined) clocks: the host's CLOCK_MONOTONIC.
pub const CLOCK_HOST_MONOTONIC: u32 = 64;
/// `TracePacket.SequenceFlags.SEQ_INCREMENTAL_STATE_CLEARED`.
pub const SEQ_INCREMENTAL_STATE_CLEARED: u32 = 1;
/// `TrackEvent.Type`.
pub const TYPE_SLICE_BEGIN: i32 = 1;
pub const TYPE_SLICE_END: i32 = 2;
pub const TYPE_INSTANT: i32 = 3;
pub const TYPE_COUNTER: i32 = 4;
/// `TrackDescriptor.ChildTracksOrdering.EXPLICIT`: children by `sibling_order_rank`.
pub const ORDERING_EXPLICIT: i32 = 3;

fn annotation(name: &str, value: &Arg) -> DebugAnnotation {
    let mut a = DebugAnnotation {
        name: Some(name.to_string()),
        ..DebugAnnotation::default()
    };
    match value {
        Arg::Str(s) => a.string_value = Some(s.clone()),
        Arg::Int(n) => a.int_value = Some(*n),
        Arg::UInt(n) => a.uint_value = Some(*n),
    }
    a
}

/// The timeline as a Perfetto `Trace` message.
pub fn trace(tl: &Timeline) -> Trace {
    let mut packets = Vec::new();
    let seq = |host: usize| u32::try_from(host + 1).unwrap_or(u32::MAX);
    // Per sequence: the clock snapshot first (clears incremental state), then the tracks.
    for (hi, host) in tl.hosts.iter().enumerate() {
        let (mono, wall) = host.first.unwrap_or((0, 0));
        packets.push(TracePacket {
            timestamp: Some(wall),
            timestamp_clock_id: Some(CLOCK_REALTIME),
            trusted_packet_sequence_id: Some(seq(hi)),
            sequence_flags: Some(SEQ_INCREMENTAL_STATE_CLEARED),
            clock_snapshot: Some(ClockSnapshot {
                clocks: vec![
                    Clock {
                        clock_id: Some(CLOCK_REALTIME),
                        timestamp: Some(wall),
                    },
                    Clock {
                        clock_id: Some(CLOCK_HOST_MONOTONIC),
                        timestamp: Some(mono),
                    },
                ],
                primary_trace_clock: Some(CLOCK_REALTIME as i32),
            }),
            ..TracePacket::default()
        });
        let mut rank: std::collections::HashMap<Option<u64>, i32> = Default::default();
        for t in tl.tracks.iter().filter(|t| t.host == hi) {
            let r = rank.entry(t.parent).or_default();
            let sibling_order_rank = Some(*r);
            *r += 1;
            let (counter, child_ordering, description) = match &t.kind {
                TrackKind::Counter(k) => (
                    Some(CounterDescriptor {
                        unit_name: Some(if k.is_bytes() { "bytes/s" } else { "1/s" }.into()),
                    }),
                    None,
                    Some(format!(
                        "{} per second, in 1 s buckets aligned to UTC seconds",
                        k.name()
                    )),
                ),
                TrackKind::Host => (
                    None,
                    Some(ORDERING_EXPLICIT),
                    Some(format!(
                        "recording of {} (kernel {})",
                        host.name, host.kernel
                    )),
                ),
                TrackKind::Process { .. } => (None, Some(ORDERING_EXPLICIT), None),
                TrackKind::Qp { .. } => (
                    None,
                    None,
                    Some("QP states as slices; CM, async and anomaly events as instants".into()),
                ),
            };
            packets.push(TracePacket {
                timestamp: Some(wall),
                timestamp_clock_id: Some(CLOCK_REALTIME),
                trusted_packet_sequence_id: Some(seq(hi)),
                track_descriptor: Some(TrackDescriptor {
                    uuid: Some(t.uuid),
                    name: Some(t.name.clone()),
                    parent_uuid: t.parent,
                    counter,
                    child_ordering,
                    sibling_order_rank,
                    description,
                }),
                ..TracePacket::default()
            });
        }
    }
    // Events in time order; on equal times, emission order (a slice's end before the next
    // slice's begin on the same track, a zero-length slice's begin before its end).
    let mut timed: Vec<(u64, usize, TracePacket)> = Vec::new();
    for e in &tl.events {
        let host = tl.track(e.track).map_or(0, |t| t.host);
        let packet = |ts: u64, ev: TrackEvent| TracePacket {
            timestamp: Some(ts),
            timestamp_clock_id: Some(CLOCK_REALTIME),
            trusted_packet_sequence_id: Some(seq(host)),
            track_event: Some(ev),
            ..TracePacket::default()
        };
        let base = TrackEvent {
            track_uuid: Some(e.track),
            ..TrackEvent::default()
        };
        match &e.what {
            What::Slice { name, dur_ns } => {
                let n = timed.len();
                timed.push((
                    e.wall_ns,
                    n,
                    packet(
                        e.wall_ns,
                        TrackEvent {
                            categories: vec!["qp_state".into()],
                            name: Some(name.clone()),
                            r#type: Some(TYPE_SLICE_BEGIN),
                            ..base.clone()
                        },
                    ),
                ));
                let end = e.wall_ns.saturating_add(*dur_ns);
                timed.push((
                    end,
                    n + 1,
                    packet(
                        end,
                        TrackEvent {
                            r#type: Some(TYPE_SLICE_END),
                            ..base
                        },
                    ),
                ));
            }
            What::Instant {
                name,
                category,
                args,
            } => {
                let n = timed.len();
                timed.push((
                    e.wall_ns,
                    n,
                    packet(
                        e.wall_ns,
                        TrackEvent {
                            categories: vec![(*category).to_string()],
                            name: Some(name.clone()),
                            r#type: Some(TYPE_INSTANT),
                            debug_annotations: args.iter().map(|(k, v)| annotation(k, v)).collect(),
                            ..base
                        },
                    ),
                ));
            }
            What::Flow {
                name,
                id,
                terminating,
            } => {
                let n = timed.len();
                let (flow_ids, terminating_flow_ids) = if *terminating {
                    (Vec::new(), vec![*id])
                } else {
                    (vec![*id], Vec::new())
                };
                timed.push((
                    e.wall_ns,
                    n,
                    packet(
                        e.wall_ns,
                        TrackEvent {
                            categories: vec!["handshake".into()],
                            name: Some(name.clone()),
                            r#type: Some(TYPE_INSTANT),
                            flow_ids,
                            terminating_flow_ids,
                            ..base
                        },
                    ),
                ));
            }
            What::Counter(v) => {
                let n = timed.len();
                timed.push((
                    e.wall_ns,
                    n,
                    packet(
                        e.wall_ns,
                        TrackEvent {
                            r#type: Some(TYPE_COUNTER),
                            double_counter_value: Some(*v),
                            ..base
                        },
                    ),
                ));
            }
        }
    }
    timed.sort_by_key(|(ts, n, _)| (*ts, *n));
    packets.extend(timed.into_iter().map(|(_, _, p)| p));
    Trace { packet: packets }
}

/// The serialized trace (a `.perfetto-trace` / `.pftrace` file).
pub fn encode(tl: &Timeline) -> Vec<u8> {
    prost::Message::encode_to_vec(&trace(tl))
}
