//! Timelines: recordings (one per host) as tracks over wall-clock time, for Perfetto or any
//! Chrome-JSON trace viewer. Pure: feed correlated records with [`TimelineBuilder::push`] and the
//! analysis' anomalies with [`TimelineBuilder::anomalies`], then [`TimelineBuilder::finish`] gives
//! a format-neutral [`Timeline`] that [`perfetto`] and [`chrome`] encode.
//!
//! Layout:
//! ```text
//! host virtme-ng                      (one per recording)
//! ├── lost events                     (instants, when the kernel dropped events)
//! └── ib_write_bw [368]               (one per process)
//!     ├── rxe0 QPN 0x11 RC            (QP state slices RESET/INIT/RTR/RTS/ERR; CM, async and
//!     │                                anomaly instants about this QP)
//!     ├── RDMA tx bytes/s             (counters, 1 s buckets aligned to UTC seconds)
//!     ├── retransmits/s
//!     └── TCP bytes/s
//! ```
//! Timestamps are UTC wall-clock ns (each recording's own clock anchor), so recordings of
//! several hosts line up on one time axis.

pub mod chrome;
pub mod flows;
pub mod perfetto;

use std::collections::BTreeMap;

use crate::{
    correlate::{analysis::Anomaly, Correlator, QpChange},
    event::{qp_type_name, AsyncElement, Body, QpKey, QpState, Record},
};

/// Width of a counter bucket: rates are per second.
pub const BUCKET_NS: u64 = 1_000_000_000;

/// A detail attached to a slice or an instant.
#[derive(Clone, Debug, PartialEq)]
pub enum Arg {
    Str(String),
    Int(i64),
    UInt(u64),
}

impl std::fmt::Display for Arg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Arg::Str(s) => f.write_str(s),
            Arg::Int(n) => write!(f, "{n}"),
            Arg::UInt(n) => write!(f, "{n}"),
        }
    }
}

pub type Args = Vec<(&'static str, Arg)>;

/// What a counter track counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CounterKind {
    RdmaTxBytes,
    Retransmits,
    TcpBytes,
}

impl CounterKind {
    pub const ALL: [CounterKind; 3] = [
        CounterKind::RdmaTxBytes,
        CounterKind::Retransmits,
        CounterKind::TcpBytes,
    ];

    pub fn name(self) -> &'static str {
        match self {
            CounterKind::RdmaTxBytes => "RDMA tx bytes/s",
            CounterKind::Retransmits => "retransmits/s",
            CounterKind::TcpBytes => "TCP bytes/s (tx+rx)",
        }
    }

    pub fn is_bytes(self) -> bool {
        !matches!(self, CounterKind::Retransmits)
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum TrackKind {
    Host,
    Process { pid: u32 },
    Qp { key: QpKey, qp_type: u32 },
    Counter(CounterKind),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Track {
    /// Unique in the timeline, never 0 (Perfetto's implicit global track).
    pub uuid: u64,
    pub parent: Option<u64>,
    pub name: String,
    pub kind: TrackKind,
    /// Index into [`Timeline::hosts`].
    pub host: usize,
    /// The process the track belongs to (0 for host tracks).
    pub pid: u32,
}

#[derive(Clone, Debug, PartialEq)]
pub enum What {
    /// A span `[wall_ns, wall_ns + dur_ns)` (QP states).
    Slice {
        name: String,
        dur_ns: u64,
    },
    Instant {
        name: String,
        /// `cm`, `async`, `anomaly`, `process`, `lost`.
        category: &'static str,
        args: Args,
    },
    Counter(f64),
    /// One end of a flow arrow (`id`), from the event that starts it to the one that
    /// `terminating` ends it: two ends of a connection's handshake on two hosts.
    Flow {
        name: String,
        id: u64,
        terminating: bool,
    },
}

#[derive(Clone, Debug, PartialEq)]
pub struct Event {
    /// UTC ns since the epoch.
    pub wall_ns: u64,
    pub track: u64,
    pub what: What,
}

/// Where a recording came from, and its clock anchor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostInfo {
    pub name: String,
    pub kernel: String,
    /// wall = monotonic + offset.
    pub clock_offset_ns: i64,
    /// (monotonic, wall) of the host's first record, for the clock snapshot.
    pub first: Option<(u64, u64)>,
    /// The correction applied to its clock to line it up with the other hosts, in words.
    pub clock_note: Option<String>,
}

/// Tracks in display order (parents before children) and events sorted by time.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Timeline {
    pub hosts: Vec<HostInfo>,
    pub tracks: Vec<Track>,
    pub events: Vec<Event>,
}

impl Timeline {
    pub fn track(&self, uuid: u64) -> Option<&Track> {
        self.tracks.iter().find(|t| t.uuid == uuid)
    }
}

#[derive(Default)]
struct QpAcc {
    qp_type: u32,
    /// (start wall, state); a slice ends where the next begins, or at `ends`.
    states: Vec<(u64, QpState)>,
    /// Set when the QP was destroyed (or its slice otherwise closed) at this wall time.
    closed_at: Option<u64>,
    /// Closed spans of earlier lives of the same (device, QPN) in this process.
    done: Vec<(u64, u64, QpState)>,
    instants: Vec<(u64, What)>,
}

impl QpAcc {
    fn close(&mut self, wall: u64) {
        let states = std::mem::take(&mut self.states);
        for (i, (start, state)) in states.iter().enumerate() {
            let end = states.get(i + 1).map_or(wall, |n| n.0);
            self.done.push((*start, end.max(*start), *state));
        }
        self.closed_at = Some(wall);
    }

    fn enter(&mut self, wall: u64, state: QpState) {
        if self.states.last().map(|s| s.1) != Some(state) {
            self.closed_at = None;
            self.states.push((wall, state));
        }
    }
}

#[derive(Default)]
struct ProcAcc {
    comm: String,
    qps: BTreeMap<QpKey, QpAcc>,
    instants: Vec<(u64, What)>,
    /// kind -> bucket (wall / BUCKET_NS) -> sum.
    counters: BTreeMap<CounterKind, BTreeMap<u64, u64>>,
}

impl ProcAcc {
    fn count(&mut self, kind: CounterKind, wall: u64, n: u64) {
        *self
            .counters
            .entry(kind)
            .or_default()
            .entry(wall / BUCKET_NS)
            .or_default() += n;
    }
}

struct HostAcc {
    info: HostInfo,
    procs: BTreeMap<u32, ProcAcc>,
    instants: Vec<(u64, What)>,
    last_wall: u64,
}

#[derive(Default)]
pub struct TimelineBuilder {
    hosts: Vec<HostAcc>,
}

fn instant(name: impl Into<String>, category: &'static str, args: Args) -> What {
    What::Instant {
        name: name.into(),
        category,
        args,
    }
}

fn s(v: impl Into<String>) -> Arg {
    Arg::Str(v.into())
}

impl TimelineBuilder {
    pub fn new() -> TimelineBuilder {
        TimelineBuilder::default()
    }

    /// Starts a host (one recording); returns its index for [`TimelineBuilder::push`].
    pub fn host(&mut self, name: &str, kernel: &str, clock_offset_ns: i64) -> usize {
        self.hosts.push(HostAcc {
            info: HostInfo {
                name: name.to_string(),
                kernel: kernel.to_string(),
                clock_offset_ns,
                first: None,
                clock_note: None,
            },
            procs: BTreeMap::new(),
            instants: Vec::new(),
            last_wall: 0,
        });
        self.hosts.len() - 1
    }

    /// Says how host `host`'s clock was corrected (shown on its track).
    pub fn clock_note(&mut self, host: usize, note: String) {
        if let Some(h) = self.hosts.get_mut(host) {
            h.info.clock_note = Some(note);
        }
    }

    /// Adds one record of host `host`, after `state` (that host's correlator) observed it.
    pub fn push(&mut self, host: usize, rec: &Record, state: &Correlator) {
        let Some(h) = self.hosts.get_mut(host) else {
            return;
        };
        if h.info.first.is_none() {
            h.info.first = Some((rec.ts_ns, rec.wall_ns));
        }
        h.last_wall = h.last_wall.max(rec.wall_ns);
        let wall = rec.wall_ns;
        let pid = rec.subject_pid();
        if pid != 0 && !matches!(rec.body, Body::Lost { .. }) {
            let comm = rec.subject_comm();
            let p = h.procs.entry(pid).or_default();
            // The latest name wins: after exec a shell becomes the program it ran.
            if !comm.is_empty() {
                p.comm = comm.to_string();
            }
        }
        // QP slices follow the correlator's account of each QP's life.
        match state.change() {
            Some(QpChange::Born { key, state: st, .. }) => {
                if let (Some(owner), Some(st)) = (state.qp(key), st) {
                    if owner.owner_pid != 0 {
                        let p = h.procs.entry(owner.owner_pid).or_default();
                        if p.comm.is_empty() {
                            p.comm = owner.owner_comm.to_string();
                        }
                        let q = p.qps.entry(key.clone()).or_default();
                        q.qp_type = owner.qp_type;
                        if !q.states.is_empty() {
                            q.close(wall);
                        }
                        q.enter(wall, *st);
                    }
                }
            }
            Some(QpChange::State { key, to, .. }) => {
                if let Some(owner) = state.qp(key) {
                    let p = h.procs.entry(owner.owner_pid).or_default();
                    p.qps.entry(key.clone()).or_default().enter(wall, *to);
                }
            }
            Some(QpChange::Gone { key, .. }) => {
                if let Some((owner, _)) = state.owner(key) {
                    if let Some(q) = h.procs.get_mut(&owner).and_then(|p| p.qps.get_mut(key)) {
                        q.close(wall);
                    }
                }
            }
            None => {}
        }
        match &rec.body {
            Body::ProcessExec { ppid } => {
                let p = h.procs.entry(pid).or_default();
                p.instants.push((
                    wall,
                    instant("exec", "process", vec![("ppid", Arg::UInt((*ppid).into()))]),
                ));
            }
            Body::ProcessExit { exit_code, .. } => {
                let p = h.procs.entry(pid).or_default();
                p.instants.push((
                    wall,
                    instant(
                        "exit",
                        "process",
                        vec![
                            ("status", s(crate::format::exit_text(*exit_code))),
                            ("wait_status", Arg::Int((*exit_code).into())),
                        ],
                    ),
                ));
            }
            Body::Retransmit(_) if pid != 0 => {
                h.procs
                    .entry(pid)
                    .or_default()
                    .count(CounterKind::Retransmits, wall, 1);
            }
            Body::QpTraffic(t) if pid != 0 => {
                h.procs
                    .entry(pid)
                    .or_default()
                    .count(CounterKind::RdmaTxBytes, wall, t.tx_bytes);
            }
            Body::TcpBytes(t) if pid != 0 => {
                h.procs.entry(pid).or_default().count(
                    CounterKind::TcpBytes,
                    wall,
                    t.tx_bytes.saturating_add(t.rx_bytes),
                );
            }
            Body::Cm(c) if pid != 0 => {
                let mut args: Args = vec![
                    ("dev", s(c.dev.clone())),
                    ("cm_id", Arg::UInt(c.cm_id.into())),
                ];
                if c.qpn != 0 {
                    args.push(("qpn", s(format!("{:#x}", c.qpn))));
                }
                args.push(("status", Arg::Int(c.status.into())));
                if let Some(a) = c.src {
                    args.push(("src", s(a.to_string())));
                }
                if let Some(a) = c.dst {
                    args.push(("dst", s(a.to_string())));
                }
                let what = instant(format!("CM {}", c.event), "cm", args);
                let key = (c.qpn != 0).then(|| QpKey {
                    dev: c.dev.clone(),
                    qpn: c.qpn,
                });
                place(h, pid, key.as_ref(), wall, what);
            }
            Body::Async(a) if pid != 0 => {
                let (element, key) = match &a.element {
                    AsyncElement::Qp(k) => (format!("QPN {:#x}", k.qpn), Some(k)),
                    AsyncElement::Cq(n) => (format!("CQ {n}"), None),
                    AsyncElement::Srq(n) => (format!("SRQ {n}"), None),
                    AsyncElement::Port(n) => (format!("port {n}"), None),
                };
                let what = instant(
                    format!("async {}", a.event),
                    "async",
                    vec![("dev", s(a.dev.clone())), ("element", s(element))],
                );
                place(h, pid, key, wall, what);
            }
            Body::Lost { count, cpu } => {
                let mut args = vec![("count", Arg::UInt(*count))];
                if let Some(cpu) = cpu {
                    args.push(("cpu", Arg::UInt(u64::from(*cpu))));
                }
                h.instants
                    .push((wall, instant(format!("lost {count} events"), "lost", args)));
            }
            _ => {}
        }
    }

    /// Adds the analysis' anomalies of host `host` as instants (on the QP's track when known).
    pub fn anomalies(&mut self, host: usize, anomalies: &[Anomaly]) {
        let Some(h) = self.hosts.get_mut(host) else {
            return;
        };
        for a in anomalies {
            let mut args: Args = vec![("detail", s(a.detail.clone()))];
            if let Some(d) = &a.dev {
                args.push(("dev", s(d.clone())));
            }
            if let Some(q) = a.qpn {
                args.push(("qpn", s(format!("{q:#x}"))));
            }
            let key = match (&a.dev, a.qpn) {
                (Some(dev), Some(qpn)) => Some(QpKey {
                    dev: dev.clone(),
                    qpn,
                }),
                _ => None,
            };
            if a.pid != 0 && !a.comm.is_empty() {
                let p = h.procs.entry(a.pid).or_default();
                if p.comm.is_empty() {
                    p.comm = a.comm.to_string();
                }
            }
            let what = instant(a.kind, "anomaly", args);
            if a.pid == 0 {
                h.instants.push((a.wall_ns, what));
            } else {
                place(h, a.pid, key.as_ref(), a.wall_ns, what);
            }
        }
    }

    pub fn finish(self) -> Timeline {
        let mut tl = Timeline::default();
        let mut next_uuid = 1u64;
        let mut uuid = || {
            let u = next_uuid;
            next_uuid += 1;
            u
        };
        for (hi, mut h) in self.hosts.into_iter().enumerate() {
            let end = h.last_wall;
            let host_uuid = uuid();
            tl.tracks.push(Track {
                uuid: host_uuid,
                parent: None,
                name: match &h.info.clock_note {
                    Some(n) => format!("host {} ({n})", h.info.name),
                    None => format!("host {}", h.info.name),
                },
                kind: TrackKind::Host,
                host: hi,
                pid: 0,
            });
            for (wall, what) in std::mem::take(&mut h.instants) {
                tl.events.push(Event {
                    wall_ns: wall,
                    track: host_uuid,
                    what,
                });
            }
            for (pid, p) in std::mem::take(&mut h.procs) {
                let proc_uuid = uuid();
                let comm = if p.comm.is_empty() { "?" } else { &p.comm };
                tl.tracks.push(Track {
                    uuid: proc_uuid,
                    parent: Some(host_uuid),
                    name: format!("{comm} [{pid}]"),
                    kind: TrackKind::Process { pid },
                    host: hi,
                    pid,
                });
                for (wall, what) in p.instants {
                    tl.events.push(Event {
                        wall_ns: wall,
                        track: proc_uuid,
                        what,
                    });
                }
                for (key, mut q) in p.qps {
                    let qp_uuid = uuid();
                    tl.tracks.push(Track {
                        uuid: qp_uuid,
                        parent: Some(proc_uuid),
                        name: format!("{} QPN {:#x} {}", key.dev, key.qpn, qp_type_name(q.qp_type)),
                        kind: TrackKind::Qp {
                            key: key.clone(),
                            qp_type: q.qp_type,
                        },
                        host: hi,
                        pid,
                    });
                    if !q.states.is_empty() {
                        q.close(end);
                    }
                    for (start, stop, state) in q.done {
                        tl.events.push(Event {
                            wall_ns: start,
                            track: qp_uuid,
                            what: What::Slice {
                                name: state.name().to_string(),
                                dur_ns: stop - start,
                            },
                        });
                    }
                    for (wall, what) in q.instants {
                        tl.events.push(Event {
                            wall_ns: wall,
                            track: qp_uuid,
                            what,
                        });
                    }
                }
                for kind in CounterKind::ALL {
                    let Some(buckets) = p.counters.get(&kind) else {
                        continue;
                    };
                    let counter_uuid = uuid();
                    tl.tracks.push(Track {
                        uuid: counter_uuid,
                        parent: Some(proc_uuid),
                        name: kind.name().to_string(),
                        kind: TrackKind::Counter(kind),
                        host: hi,
                        pid,
                    });
                    counter_events(&mut tl.events, counter_uuid, buckets);
                }
            }
            tl.hosts.push(h.info);
        }
        // Stable: equal times keep track order, so a parent's events precede its children's.
        tl.events.sort_by_key(|e| e.wall_ns);
        tl
    }
}

/// A step function: each active bucket's rate at its start, and 0 where activity stops (quiet
/// stretches cost nothing however long).
fn counter_events(out: &mut Vec<Event>, track: u64, buckets: &BTreeMap<u64, u64>) {
    let per_sec = 1_000_000_000.0 / BUCKET_NS as f64;
    for (&b, &v) in buckets {
        out.push(Event {
            wall_ns: b * BUCKET_NS,
            track,
            what: What::Counter(v as f64 * per_sec),
        });
        if !buckets.contains_key(&(b + 1)) {
            out.push(Event {
                wall_ns: (b + 1) * BUCKET_NS,
                track,
                what: What::Counter(0.0),
            });
        }
    }
}

/// Puts an instant on the QP's track under `pid` when that track exists, else on the process.
fn place(h: &mut HostAcc, pid: u32, key: Option<&QpKey>, wall: u64, what: What) {
    let p = h.procs.entry(pid).or_default();
    match key.and_then(|k| p.qps.get_mut(k)) {
        Some(q) => q.instants.push((wall, what)),
        None => p.instants.push((wall, what)),
    }
}

#[cfg(test)]
mod tests;
