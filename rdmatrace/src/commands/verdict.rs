//! `rdmatrace verdict [--pid P | --duration D | -- CMD | --input FILE]`: watch (or replay a
//! recording), then say per process whether its data moved over RDMA, fell back to TCP, or
//! both, with the evidence. Exit status 3 when any watched process fell back to TCP, for
//! scripts (2 when the recording was damaged).

use std::{path::PathBuf, process::ExitCode, time::Duration};

use anyhow::Context as _;

use crate::{
    clock::ClockAnchor,
    commands::live::{self, Live},
    correlate::filter::Filter,
    replay,
    sinks::report::VerdictSink,
};

/// Exit status when a watched process fell back to TCP.
pub const FALLBACK_EXIT: u8 = 3;

pub const READY_LINE: &str = "Watching for RDMA / TCP fallback... Hit Ctrl-C to end.";

#[derive(Clone, Debug)]
pub struct VerdictConfig {
    /// Judge a recording instead of watching live.
    pub input: Option<PathBuf>,
    pub pid: Option<u32>,
    /// Containers, pods or cgroups to judge (filtered in the kernel live).
    pub place: Filter,
    /// One verdict per container.
    pub by_container: bool,
    pub duration: Option<Duration>,
    pub command: Vec<String>,
    pub json: bool,
    pub probing: crate::config::Probing,
}

pub fn run(cfg: &VerdictConfig) -> anyhow::Result<ExitCode> {
    match &cfg.input {
        Some(path) => {
            let (sink, _, replayed) = replay::file(path, cfg.place.clone(), |_| sink(cfg))?;
            Ok(if replayed.damaged() {
                replay::exit_code([&replayed])
            } else {
                exit(&sink)
            })
        }
        None => live::runtime()?.block_on(run_async(cfg)),
    }
}

fn sink(cfg: &VerdictConfig) -> VerdictSink<std::io::Stdout> {
    let mut sink = VerdictSink::new(std::io::stdout(), cfg.json, cfg.pid);
    sink.by_container = cfg.by_container;
    sink
}

fn exit<W: std::io::Write>(sink: &VerdictSink<W>) -> ExitCode {
    if sink.fallback {
        ExitCode::from(FALLBACK_EXIT)
    } else {
        ExitCode::SUCCESS
    }
}

async fn run_async(cfg: &VerdictConfig) -> anyhow::Result<ExitCode> {
    let opts = live::load_options(&cfg.probing, cfg.pid, &cfg.command);
    let mut live = Live::start(&opts, cfg.probing.bind_qp_counters, &cfg.place)?;
    let mut stage = live.stage(ClockAnchor::now(), cfg.place.clone(), sink(cfg));
    let mut child = live.spawn(&cfg.command)?;
    live.run(&mut stage, READY_LINE, cfg.duration, child.as_mut())
        .await?;
    stage.warn_undecodable("");
    let sink = stage.finish().context("cannot write output")?;
    live.loss_advice();
    Ok(exit(&sink))
}
