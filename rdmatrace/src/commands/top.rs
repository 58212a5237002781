//! `rdmatrace top`: a live table per process and QP (verdict, state, rates, retransmits),
//! refreshed every interval like top(1). `--batch` prints frames one after another without
//! clearing the screen (for logs and scripts, as `top -b`).

use std::{process::ExitCode, time::Duration};

use crate::{
    clock::ClockAnchor,
    commands::live::{self, Live},
    correlate::filter::Filter,
    sinks::top::TopSink,
};

pub const READY_LINE: &str = "Watching RDMA processes and QPs... Hit Ctrl-C to end.";

#[derive(Clone, Debug)]
pub struct TopConfig {
    pub pid: Option<u32>,
    /// Containers, pods or cgroups to watch (filtered in the kernel).
    pub place: Filter,
    pub interval: Duration,
    /// Stop after this many frames.
    pub iterations: Option<u64>,
    pub batch: bool,
    pub max_procs: usize,
    pub probing: crate::config::Probing,
}

pub fn run(cfg: &TopConfig) -> anyhow::Result<ExitCode> {
    live::runtime()?.block_on(run_async(cfg))
}

async fn run_async(cfg: &TopConfig) -> anyhow::Result<ExitCode> {
    let opts = live::load_options(&cfg.probing, cfg.pid, &[]);
    let mut live = Live::start(&opts, cfg.probing.bind_qp_counters, &cfg.place)?;
    let sink = TopSink::new(
        std::io::stdout(),
        cfg.interval,
        cfg.batch,
        cfg.max_procs,
        cfg.iterations,
    );
    // Only the watched process is analyzed (its QPs' events are about it too).
    let filter = Filter {
        pid: cfg.pid,
        ..cfg.place.clone()
    };
    let mut stage = live.stage(ClockAnchor::now(), filter, sink);
    live.run(&mut stage, READY_LINE, None, None).await?;
    stage.warn_undecodable("");
    // A closed terminal ends top like `q` would: nothing more to say.
    let _ = stage.finish();
    live.loss_advice();
    Ok(ExitCode::SUCCESS)
}
