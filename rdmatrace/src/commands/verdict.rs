//! `rdmatrace verdict [--pid P | --duration S | -- CMD]`: watch, then say per process whether
//! its data moved over RDMA, fell back to TCP, or both, with the evidence. Exit status 3 when
//! any watched process fell back to TCP, for scripts.

use std::{path::PathBuf, process::ExitCode, time::Duration};

use crate::{
    clock::ClockAnchor,
    commands::live::{self, Consumer},
    correlate::{
        analysis::{Analyzer, Verdict},
        Correlator,
    },
    decode::decode,
    event::Record,
    loader,
    sinks::report::{verdict_json, verdict_text},
    source::RingSource,
};

/// Exit status when a watched process fell back to TCP.
pub const FALLBACK_EXIT: u8 = 3;

#[derive(Clone, Debug)]
pub struct VerdictConfig {
    pub pid: Option<u32>,
    pub duration: Option<Duration>,
    pub command: Vec<String>,
    pub json: bool,
    pub ringbuf_bytes: u32,
    pub btf_dir: PathBuf,
    /// Bind per-QP counters over rdma netlink (undone at exit).
    pub bind_qp_counters: bool,
}

struct Watch {
    anchor: ClockAnchor,
    correlator: Correlator,
    analyzer: Analyzer,
}

impl Consumer for Watch {
    fn raw(&mut self, bytes: &[u8]) {
        if let Ok(mut r) = decode(bytes, &self.anchor) {
            self.correlator.observe(&mut r);
            self.analyzer.push(&r);
        }
    }
    fn lost(&mut self, count: u64, cpu: Option<u32>, ts_ns: u64) {
        if count > 0 {
            let mut r = Record::lost(count, cpu, ts_ns, &self.anchor);
            self.correlator.observe(&mut r);
            self.analyzer.push(&r);
        }
    }
    fn broken(&self) -> bool {
        false
    }
}

pub fn run(cfg: &VerdictConfig) -> anyhow::Result<ExitCode> {
    live::runtime()?.block_on(run_async(cfg))
}

async fn run_async(cfg: &VerdictConfig) -> anyhow::Result<ExitCode> {
    let opts = live::load_options(&cfg.btf_dir, cfg.ringbuf_bytes, cfg.pid, &cfg.command);
    let mut tracer = loader::load(&opts, loader::all_areas())?;
    live::announce(&tracer.report);
    let mut source = RingSource::new(&mut tracer)?;
    let mut sampler = live::sampler(&mut tracer, cfg.bind_qp_counters);
    let mut watch = Watch {
        anchor: ClockAnchor::now(),
        correlator: Correlator::new(),
        analyzer: Analyzer::new(),
    };
    let mut child = live::spawn_traced(&mut tracer, &cfg.command)?;
    eprintln!("Watching for RDMA / TCP fallback... Hit Ctrl-C to end.");
    live::run(
        &mut source,
        &mut watch,
        cfg.duration,
        child.as_mut(),
        Some(&mut sampler),
    )
    .await?;
    let report = watch.analyzer.finish();
    let mut fallback = false;
    if !cfg.json {
        println!("PID     COMM            VERDICT      EVIDENCE");
    }
    for p in report
        .processes
        .iter()
        .filter(|p| cfg.pid.is_none_or(|pid| pid == p.stats.pid))
    {
        fallback |= p.verdict == Verdict::TcpFallback;
        if cfg.json {
            println!("{}", verdict_json(p));
        } else {
            println!("{}", verdict_text(p));
        }
    }
    Ok(if fallback {
        ExitCode::from(FALLBACK_EXIT)
    } else {
        ExitCode::SUCCESS
    })
}
