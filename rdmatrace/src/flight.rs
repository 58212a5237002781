//! The flight recorder of `rdmatrace serve --flight-recorder DIR`: every record goes to
//! rotating segment recordings in DIR; when an incident fires (a QP moved to ERR or an error
//! completion that moves it there, a fatal async
//! event, a port down, a device removed, a retransmit burst) the segments covering `keep`
//! before it and `after` after it are copied into `DIR/incident-<UTC>-<kind>.rdmt`, a normal
//! recording (`report`, `timeline`, `flamegraph` read it). Disk use stays under `max_disk`:
//! the oldest segments (then the oldest incidents) are deleted and counted. Files are 0600.

use std::{
    collections::VecDeque,
    fs::File,
    io,
    path::{Path, PathBuf},
};

use prometheus_client::metrics::{counter::Counter, family::Family};

use crate::{
    clock::rfc3339,
    correlate::{Correlator, QpChange},
    event::{AsyncElement, Body, QpState, Record},
    recording::{reader::Recording, writer::RecordingWriter, Header},
    sinks::{metrics::KindLabels, Sink},
};

#[derive(Clone, Debug)]
pub struct FlightConfig {
    pub dir: PathBuf,
    /// How much history before an incident it holds.
    pub keep_ns: u64,
    /// How long after the incident its file keeps collecting.
    pub after_ns: u64,
    /// Most bytes of segments and incident files in `dir`.
    pub max_disk: u64,
    /// Retransmits within one second that make a burst.
    pub burst: u64,
}

struct Segment {
    path: PathBuf,
    first_ns: u64,
    last_ns: u64,
    bytes: u64,
}

struct Pending {
    kind: &'static str,
    at_wall_ns: u64,
    from_ns: u64,
    until_ns: u64,
}

pub struct FlightRecorder {
    cfg: FlightConfig,
    header: Header,
    incidents: Family<KindLabels, Counter>,
    /// Closed segments, oldest first.
    closed: VecDeque<Segment>,
    current: Option<(RecordingWriter<File>, Segment)>,
    segment_ns: u64,
    seq: u64,
    /// Incident files written, oldest first, with their sizes.
    written: VecDeque<(PathBuf, u64)>,
    pending: Option<Pending>,
    /// When each kind last fired.
    last: std::collections::HashMap<&'static str, u64>,
    now_ns: u64,
    now_wall_ns: u64,
    /// Retransmits in the current one-second window, and its start.
    burst: (u64, u64),
    pub segments_dropped: u64,
    pub incidents_dropped: u64,
    /// Written incident files (tests, the final message).
    pub files: Vec<PathBuf>,
}

impl FlightRecorder {
    /// Makes `dir` (0700) if needed. Segments are a third of `keep` long (5 s to 60 s).
    pub fn new(
        cfg: FlightConfig,
        header: Header,
        incidents: Family<KindLabels, Counter>,
    ) -> io::Result<FlightRecorder> {
        use std::os::unix::fs::DirBuilderExt as _;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&cfg.dir)?;
        remove_stale_segments(&cfg.dir);
        let segment_ns = (cfg.keep_ns / 3).clamp(5_000_000_000, 60_000_000_000);
        Ok(FlightRecorder {
            cfg,
            header,
            incidents,
            closed: VecDeque::new(),
            current: None,
            segment_ns,
            seq: 0,
            written: VecDeque::new(),
            pending: None,
            last: std::collections::HashMap::new(),
            now_ns: 0,
            now_wall_ns: 0,
            burst: (0, 0),
            segments_dropped: 0,
            incidents_dropped: 0,
            files: Vec::new(),
        })
    }

    fn writer(&mut self) -> io::Result<&mut RecordingWriter<File>> {
        if self.current.is_none() {
            self.seq += 1;
            let path = self.cfg.dir.join(format!(
                "segment-{}-{:06}.rdmt",
                std::process::id(),
                self.seq
            ));
            let w = RecordingWriter::create(&path, &self.header, true)?;
            let seg = Segment {
                path,
                first_ns: self.now_ns,
                last_ns: self.now_ns,
                bytes: 0,
            };
            self.current = Some((w, seg));
        }
        match self.current.as_mut() {
            Some((w, _)) => Ok(w),
            None => Err(io::Error::other("no segment")),
        }
    }

    /// Closes the current segment (its file stays, complete).
    fn rotate(&mut self) -> io::Result<()> {
        if let Some((w, mut seg)) = self.current.take() {
            let (_, bytes) = w.finish()?;
            seg.bytes = bytes;
            self.closed.push_back(seg);
        }
        Ok(())
    }

    fn disk(&self) -> u64 {
        let segs: u64 = self.closed.iter().map(|s| s.bytes).sum();
        let cur = self.current.as_ref().map_or(0, |(w, _)| w.bytes_written);
        let inc: u64 = self.written.iter().map(|(_, b)| *b).sum();
        segs + cur + inc
    }

    /// Deletes segments older than the history kept, then the oldest files while over the cap.
    fn trim(&mut self) {
        let horizon = self
            .now_ns
            .saturating_sub(self.cfg.keep_ns + self.cfg.after_ns);
        while self.closed.front().is_some_and(|s| s.last_ns < horizon) {
            if let Some(s) = self.closed.pop_front() {
                let _ = std::fs::remove_file(&s.path);
            }
        }
        while self.disk() > self.cfg.max_disk {
            if let Some(s) = self.closed.pop_front() {
                let _ = std::fs::remove_file(&s.path);
                self.segments_dropped += 1;
            } else if let Some((p, _)) = self.written.pop_front() {
                let _ = std::fs::remove_file(&p);
                self.incidents_dropped += 1;
            } else {
                break;
            }
        }
    }

    /// An incident of `kind` now, unless one is being collected, or one of the same kind
    /// fired less than `keep` ago (its file holds this one's history already: a dying QP's
    /// error completion, then its ERR state in the next table sample, are one incident).
    fn trigger(&mut self, kind: &'static str) {
        if self.pending.is_some() {
            return;
        }
        if let Some(&at) = self.last.get(kind) {
            if self.now_ns.saturating_sub(at) < self.cfg.keep_ns {
                return;
            }
        }
        self.last.insert(kind, self.now_ns);
        self.pending = Some(Pending {
            kind,
            at_wall_ns: self.now_wall_ns,
            from_ns: self.now_ns.saturating_sub(self.cfg.keep_ns),
            until_ns: self.now_ns + self.cfg.after_ns,
        });
    }

    /// Writes the pending incident once its time after has passed (or `force`, at the end).
    fn maybe_write(&mut self, force: bool) -> io::Result<()> {
        let due = self
            .pending
            .as_ref()
            .is_some_and(|p| force || self.now_ns >= p.until_ns);
        if !due {
            return Ok(());
        }
        let Some(p) = self.pending.take() else {
            return Ok(());
        };
        self.rotate()?;
        let stamp = rfc3339(p.at_wall_ns)
            .replace(['-', ':'], "")
            .split('.')
            .next()
            .unwrap_or_default()
            .to_string();
        let path = self
            .cfg
            .dir
            .join(format!("incident-{stamp}Z-{}.rdmt", p.kind));
        let mut out = RecordingWriter::create(&path, &self.header, true)?;
        for seg in self
            .closed
            .iter()
            .filter(|s| s.last_ns >= p.from_ns && s.first_ns <= p.until_ns)
        {
            copy(&seg.path, &mut out)?;
        }
        let (_, bytes) = out.finish()?;
        self.written.push_back((path.clone(), bytes));
        self.files.push(path.clone());
        self.incidents
            .get_or_create(&KindLabels {
                kind: p.kind.into(),
            })
            .inc();
        eprintln!(
            "rdmatrace: incident {} written to {} ({bytes} bytes)",
            p.kind,
            path.display()
        );
        self.trim();
        Ok(())
    }

    /// What `rec` says about incidents.
    fn detect(&mut self, rec: &Record, state: &Correlator) {
        if let Some(QpChange::State {
            to: QpState::Err, ..
        }) = state.change()
        {
            self.trigger("qp_err");
        }
        match &rec.body {
            // An error completion other than a flush moves its QP to ERR (the IB spec's
            // completion error rule), before any table sample can show it.
            Body::WcError(w) if w.status != "WR_FLUSH_ERR" => self.trigger("qp_err"),
            Body::Async(a) if a.event == "DEVICE_UNREGISTER" => self.trigger("device_removed"),
            Body::Async(a)
                if matches!(
                    a.event.as_str(),
                    "QP_FATAL"
                        | "QP_REQ_ERR"
                        | "QP_ACCESS_ERR"
                        | "CQ_ERR"
                        | "SRQ_ERR"
                        | "DEVICE_FATAL"
                        | "WQ_FATAL"
                        | "PATH_MIG_ERR"
                ) || (a.event == "PORT_ERR" && matches!(a.element, AsyncElement::Port(_))) =>
            {
                self.trigger("async_fatal")
            }
            Body::Port(p) if p.state == "REMOVED" => self.trigger("device_removed"),
            Body::Port(p) if p.state == "DOWN" => self.trigger("port_down"),
            Body::Retransmit(_) => {
                if rec.ts_ns.saturating_sub(self.burst.1) >= 1_000_000_000 {
                    self.burst = (0, rec.ts_ns);
                }
                self.burst.0 += 1;
                if self.burst.0 == self.cfg.burst {
                    self.trigger("retransmit_burst");
                }
            }
            _ => {}
        }
    }
}

/// Deletes the segments of recorders no longer running (a run killed with -9).
fn remove_stale_segments(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.filter_map(Result::ok) {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix("segment-")
            .and_then(|r| r.split('-').next())
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_file(e.path());
            eprintln!(
                "rdmatrace: removed {} (left by a flight recorder that is gone)",
                e.path().display()
            );
        }
    }
}

/// Copies every intact entry of the recording at `path` into `out`.
fn copy(path: &Path, out: &mut RecordingWriter<File>) -> io::Result<()> {
    let rec = match Recording::open(path) {
        Ok(r) => r,
        // A segment deleted meanwhile, or empty: nothing to copy.
        Err(_) => return Ok(()),
    };
    let mut err = None;
    rec.replay(|e| {
        if err.is_some() {
            return;
        }
        if let Err(e) = out.put(e) {
            err = Some(e);
        }
    });
    match err {
        Some(e) => Err(e),
        None => out.flush_chunk(),
    }
}

impl Sink for FlightRecorder {
    fn raw(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.writer()?.event(bytes)
    }

    fn symbol(&mut self, pid: u32, addr: u64, name: &str) -> io::Result<()> {
        self.writer()?.symbol(pid, addr, name)
    }

    fn cgroup(&mut self, id: u64, path: &str) -> io::Result<()> {
        self.writer()?.cgroup(id, path)
    }

    fn env(&mut self, pid: u32, name: &str, value: &str) -> io::Result<()> {
        self.writer()?.env(pid, name, value)
    }

    fn record(&mut self, rec: &Record, state: &Correlator) -> io::Result<()> {
        self.now_ns = self.now_ns.max(rec.ts_ns);
        self.now_wall_ns = self.now_wall_ns.max(rec.wall_ns);
        if let Some((_, seg)) = self.current.as_mut() {
            seg.last_ns = self.now_ns;
            if seg.first_ns == 0 {
                seg.first_ns = self.now_ns;
            }
        }
        if let Body::Lost { count, cpu } = rec.body {
            self.writer()?.lost(rec.ts_ns, cpu, count)?;
        }
        self.detect(rec, state);
        self.maybe_write(false)
    }

    /// Once a second: the chunk to disk, rotation, the disk cap, a due incident.
    fn tick(&mut self, _state: &Correlator) -> io::Result<()> {
        if let Some((w, seg)) = self.current.as_mut() {
            w.flush_chunk()?;
            seg.bytes = w.bytes_written;
            let long = self.now_ns.saturating_sub(seg.first_ns) >= self.segment_ns;
            let big = seg.bytes >= self.cfg.max_disk / 8;
            if long || big {
                self.rotate()?;
            }
        }
        self.trim();
        self.maybe_write(false)
    }

    /// A pending incident is written with what there is; the segments are deleted (those of
    /// a run killed with -9 are deleted by the next run).
    fn finish(&mut self, _state: &Correlator) -> io::Result<()> {
        self.maybe_write(true)?;
        self.rotate()?;
        for s in self.closed.drain(..) {
            let _ = std::fs::remove_file(&s.path);
        }
        Ok(())
    }
}
