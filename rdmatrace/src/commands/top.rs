//! `rdmatrace top`: a live table per process and QP (verdict, state, rates, retransmits),
//! refreshed every interval like top(1). `--batch` prints frames one after another without
//! clearing the screen (for logs and scripts, as `top -b`).

use std::{
    io::Write as _,
    path::PathBuf,
    process::ExitCode,
    time::{Duration, Instant},
};

use crate::{
    clock::ClockAnchor,
    commands::live::{self, Consumer},
    correlate::{
        analysis::{Analyzer, Report},
        Correlator,
    },
    decode::decode,
    event::Record,
    loader,
    sinks::top::{render, Frame},
    source::RingSource,
};

#[derive(Clone, Debug)]
pub struct TopConfig {
    pub pid: Option<u32>,
    pub interval: Duration,
    /// Stop after this many frames.
    pub iterations: Option<u64>,
    pub batch: bool,
    pub max_procs: usize,
    pub ringbuf_bytes: u32,
    pub btf_dir: PathBuf,
    pub bind_qp_counters: bool,
}

struct Screen {
    anchor: ClockAnchor,
    correlator: Correlator,
    analyzer: Analyzer,
    cfg: TopConfig,
    prev: Option<(Report, Instant)>,
    last_frame: Instant,
    frames: u64,
    closed: bool,
}

impl Screen {
    fn frame(&mut self) {
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
            max_procs: self.cfg.max_procs,
        });
        let mut out = std::io::stdout().lock();
        let written = if self.cfg.batch {
            writeln!(out, "{text}")
        } else {
            // Home, clear screen: a fresh frame as top(1) draws it.
            write!(out, "\x1b[H\x1b[2J{text}")
        };
        if written.and_then(|()| out.flush()).is_err() {
            self.closed = true;
        }
        self.prev = Some((report, now));
        self.last_frame = now;
        self.frames += 1;
    }
}

impl Consumer for Screen {
    fn raw(&mut self, bytes: &[u8]) {
        if let Ok(mut r) = decode(bytes, &self.anchor) {
            self.correlator.observe(&mut r);
            if self.cfg.pid.is_none_or(|p| p == r.subject_pid()) {
                self.analyzer.push(&r);
            }
        }
    }
    fn lost(&mut self, count: u64, cpu: Option<u32>, ts_ns: u64) {
        if count > 0 {
            let r = Record::lost(count, cpu, ts_ns, &self.anchor);
            self.analyzer.push(&r);
        }
    }
    fn tick(&mut self) {
        if self.last_frame.elapsed() + Duration::from_millis(50) >= self.cfg.interval {
            self.frame();
        }
    }
    fn broken(&self) -> bool {
        self.closed || self.cfg.iterations.is_some_and(|n| self.frames >= n)
    }
}

pub fn run(cfg: &TopConfig) -> anyhow::Result<ExitCode> {
    live::runtime()?.block_on(run_async(cfg))
}

async fn run_async(cfg: &TopConfig) -> anyhow::Result<ExitCode> {
    let opts = live::load_options(&cfg.btf_dir, cfg.ringbuf_bytes, cfg.pid, &[]);
    let mut tracer = loader::load(&opts, loader::all_areas())?;
    live::announce(&tracer.report);
    let mut source = RingSource::new(&mut tracer)?;
    let mut sampler = live::sampler(&mut tracer, cfg.bind_qp_counters);
    let mut screen = Screen {
        anchor: ClockAnchor::now(),
        correlator: Correlator::new(),
        analyzer: Analyzer::new(),
        cfg: cfg.clone(),
        prev: None,
        last_frame: Instant::now(),
        frames: 0,
        closed: false,
    };
    eprintln!("Watching RDMA processes and QPs... Hit Ctrl-C to end.");
    live::run(&mut source, &mut screen, None, None, Some(&mut sampler)).await?;
    let lost = source.lost_total();
    live::loss_advice(lost, &source.lost_per_cpu());
    Ok(ExitCode::SUCCESS)
}
