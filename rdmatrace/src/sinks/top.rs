//! `rdmatrace top`'s screen: per process (busiest first) its verdict, QPs and rates, and under
//! it each live QP with state, rates, retransmits and peer. Pure: two reports (this frame and
//! the previous one) and the time between them in, text out.

use std::{
    collections::HashMap,
    io::{self, Write},
    time::{Duration, Instant},
};

use crate::{
    clock::rfc3339,
    correlate::{
        analysis::{Analyzer, ProcReport, QpLife, Report},
        Correlator,
    },
    event::{qp_type_name, QpKey, Record},
    format::size,
    sinks::Sink,
};

/// What a frame needs besides the two reports.
pub struct Frame<'a> {
    pub now: &'a Report,
    pub prev: Option<&'a Report>,
    /// Seconds between the two reports (rates are per second over it).
    pub secs: f64,
    /// Processes shown at most (the busiest).
    pub max_procs: usize,
}

fn rate(now: u64, before: u64, secs: f64) -> String {
    if secs <= 0.0 {
        return "-".into();
    }
    let per = (now.saturating_sub(before) as f64 / secs) as u64;
    format!("{}/s", size(per))
}

fn proc_bytes(p: &ProcReport) -> (u64, u64, u64, u64) {
    let s = &p.stats;
    (
        s.rdma_tx_bytes,
        s.rdma_rx_bytes,
        s.tcp_tx_bytes + s.tcp_rx_bytes,
        s.retrans_rdma + s.retrans_tcp,
    )
}

pub fn render(f: &Frame<'_>) -> String {
    let before: HashMap<u32, (u64, u64, u64, u64)> = f
        .prev
        .map(|r| {
            r.processes
                .iter()
                .map(|p| (p.stats.pid, proc_bytes(p)))
                .collect()
        })
        .unwrap_or_default();
    let qp_before: HashMap<&QpKey, &QpLife> = f
        .prev
        .map(|r| {
            r.qps
                .iter()
                .filter(|q| q.destroyed_ns.is_none())
                .map(|q| (&q.key, q))
                .collect()
        })
        .unwrap_or_default();
    let live: Vec<&QpLife> = f
        .now
        .qps
        .iter()
        .filter(|q| q.destroyed_ns.is_none())
        .collect();
    let rts = live
        .iter()
        .filter(|q| q.state.is_some_and(|s| s.name() == "RTS"))
        .count();
    let mut out = format!(
        "rdmatrace top - {}  processes {}  live QPs {} ({} RTS)  events {}  lost {}\n\n",
        rfc3339(f.now.last_wall_ns),
        f.now.processes.len(),
        live.len(),
        rts,
        f.now.events,
        f.now.lost
    );
    // A CONTAINER column only when some process runs in one.
    let containers = crate::sinks::report::any_container(&f.now.processes);
    let container = |p: &ProcReport| {
        if containers {
            format!("{:<12} ", crate::sinks::report::short_container(p))
        } else {
            String::new()
        }
    };
    out += &format!(
        "{:<7} {:<15} {}{:<12} {:>4} {:>12} {:>12} {:>12} {:>7}\n",
        "PID",
        "COMM",
        if containers { "CONTAINER    " } else { "" },
        "VERDICT",
        "QPS",
        "RDMA TX",
        "RDMA RX",
        "TCP",
        "RETX/s"
    );
    let mut procs: Vec<(&ProcReport, u64)> = f
        .now
        .processes
        .iter()
        .map(|p| {
            let (tx, rx, tcp, _) = proc_bytes(p);
            let (btx, brx, btcp, _) = before.get(&p.stats.pid).copied().unwrap_or_default();
            let moved = tx.saturating_sub(btx) + rx.saturating_sub(brx) + tcp.saturating_sub(btcp);
            (p, moved)
        })
        .collect();
    procs.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.stats.pid.cmp(&b.0.stats.pid)));
    for (p, _) in procs.iter().take(f.max_procs) {
        let (tx, rx, tcp, retx) = proc_bytes(p);
        let (btx, brx, btcp, bretx) = before.get(&p.stats.pid).copied().unwrap_or_default();
        let qps = live.iter().filter(|q| q.owner_pid == p.stats.pid).count();
        out += &format!(
            "{:<7} {:<15.15} {}{:<12} {:>4} {:>12} {:>12} {:>12} {:>7.1}\n",
            p.stats.pid,
            p.stats.comm,
            container(p),
            p.verdict.name(),
            qps,
            rate(tx, btx, f.secs),
            rate(rx, brx, f.secs),
            rate(tcp, btcp, f.secs),
            if f.secs > 0.0 {
                retx.saturating_sub(bretx) as f64 / f.secs
            } else {
                0.0
            }
        );
        for q in live.iter().filter(|q| q.owner_pid == p.stats.pid) {
            let b = qp_before.get(&q.key);
            let peer = q
                .peer_qpn
                .map(|d| format!(" peer {d:#x}"))
                .unwrap_or_default();
            out += &format!(
                "  {:<8} {:#08x} {:<3} {:<5} tx {:>12} rx {:>12} retx {}{peer}\n",
                q.key.dev,
                q.key.qpn,
                qp_type_name(q.qp_type),
                q.state.map_or("?", |s| s.name()),
                rate(q.tx_bytes, b.map_or(0, |b| b.tx_bytes), f.secs),
                rate(q.rx_bytes, b.map_or(0, |b| b.rx_bytes), f.secs),
                q.retransmits,
            );
        }
    }
    if procs.len() > f.max_procs {
        out += &format!("({} more processes)\n", procs.len() - f.max_procs);
    }
    out
}

/// `top`: the analysis of everything seen so far, drawn as a frame every `interval` (on the
/// live tick), with rates against the previous frame.
pub struct TopSink<W: Write> {
    out: W,
    analyzer: Analyzer,
    interval: Duration,
    /// Frames one after another (`--batch`) instead of redrawing the screen.
    batch: bool,
    max_procs: usize,
    /// Stop after this many frames.
    iterations: Option<u64>,
    prev: Option<(Report, Instant)>,
    last_frame: Instant,
    frames: u64,
}

impl<W: Write> TopSink<W> {
    pub fn new(
        out: W,
        interval: Duration,
        batch: bool,
        max_procs: usize,
        iterations: Option<u64>,
    ) -> TopSink<W> {
        TopSink {
            out,
            analyzer: Analyzer::new(),
            interval,
            batch,
            max_procs,
            iterations,
            prev: None,
            last_frame: Instant::now(),
            frames: 0,
        }
    }

    fn frame(&mut self) -> io::Result<()> {
        let now = Instant::now();
        let report = self.analyzer.clone().finish();
        let secs = self
            .prev
            .as_ref()
            .map_or(0.0, |(_, t)| now.duration_since(*t).as_secs_f64());
        let text = render(&Frame {
            now: &report,
            prev: self.prev.as_ref().map(|(r, _)| r),
            secs,
            max_procs: self.max_procs,
        });
        if self.batch {
            writeln!(self.out, "{text}")?;
        } else {
            // Home, clear screen: a fresh frame as top(1) draws it.
            write!(self.out, "\x1b[H\x1b[2J{text}")?;
        }
        self.out.flush()?;
        self.prev = Some((report, now));
        self.last_frame = now;
        self.frames += 1;
        Ok(())
    }
}

impl<W: Write> Sink for TopSink<W> {
    fn record(&mut self, rec: &Record, state: &Correlator) -> io::Result<()> {
        self.analyzer.push(rec, state);
        Ok(())
    }

    fn tick(&mut self, _state: &Correlator) -> io::Result<()> {
        if self.last_frame.elapsed() + Duration::from_millis(50) >= self.interval {
            self.frame()?;
        }
        Ok(())
    }

    fn finish(&mut self, _state: &Correlator) -> io::Result<()> {
        self.out.flush()
    }

    fn done(&self) -> bool {
        self.iterations.is_some_and(|n| self.frames >= n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{correlate::filter::Filter, event::Body};

    /// Takes the two reports of the golden frame while the fixture replays.
    #[derive(Default)]
    struct Frames {
        analyzer: Analyzer,
        prev: Option<(Report, u64)>,
        now: Option<(Report, u64)>,
    }

    impl Sink for Frames {
        fn record(&mut self, r: &Record, state: &Correlator) -> io::Result<()> {
            if self.prev.is_none() && matches!(r.body, Body::Retransmit(_)) {
                self.prev = Some((self.analyzer.clone().finish(), r.ts_ns));
            }
            if self.now.is_none() && matches!(r.body, Body::QpDestroy { .. }) {
                self.now = Some((self.analyzer.clone().finish(), r.ts_ns));
            }
            self.analyzer.push(r, state);
            Ok(())
        }
        fn finish(&mut self, _state: &Correlator) -> io::Result<()> {
            Ok(())
        }
    }

    /// A frame of a lab recording (ib_write_bw under netem loss): the previous frame just
    /// before the first retransmit, this one just before the QPs are destroyed.
    #[test]
    fn top_frame_of_a_lossy_transfer_golden() {
        let path = std::path::Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../tests/fixtures/lab-loss.rdmt"
        ));
        let (frames, _, seen) =
            crate::replay::file(path, Filter::default(), |_| Frames::default()).expect("fixture");
        assert!(seen.problems.is_empty());
        let (prev, t0) = frames.prev.expect("a retransmit in the fixture");
        let (now, t1) = frames.now.expect("a destroy in the fixture");
        let frame = render(&Frame {
            now: &now,
            prev: Some(&prev),
            secs: (t1 - t0) as f64 / 1e9,
            max_procs: 5,
        });
        assert!(frame.contains("RTS"), "{frame}");
        assert!(frame.lines().all(|l| l.chars().count() < 100), "{frame}");
        insta::assert_snapshot!(frame);
    }
}
