//! `rdmatrace trace`: live lines (text or JSON Lines) until Ctrl-C, SIGTERM or `--duration`;
//! with `--input FILE`, the same output from a recording, without privileges.

use std::{
    io::{self, ErrorKind},
    path::Path,
    process::ExitCode,
};

use anyhow::Context as _;

use crate::{
    clock::ClockAnchor,
    commands::live::{self, Live},
    config::{Format, TraceConfig},
    replay,
    sinks::{jsonl::JsonlSink, text::TextSink, Sink},
    symbolize::resolver::Resolver,
};

/// The line tests and scripts wait for: printed once every probe is attached.
pub const READY_LINE: &str = "Tracing RDMA QP events... Hit Ctrl-C to end.";

pub fn sink_for(format: Format) -> Box<dyn Sink> {
    match format {
        Format::Text => Box::new(TextSink::new(io::stdout())),
        Format::Jsonl => Box::new(JsonlSink::new(io::stdout())),
    }
}

pub fn run(cfg: &TraceConfig, input: Option<&Path>) -> anyhow::Result<ExitCode> {
    match input {
        Some(path) => {
            // A closed pipe (`| head`) ends the replay; main() takes it as a normal stop.
            let (_, _, replayed) =
                replay::file(path, cfg.filter.clone(), |_| sink_for(cfg.format))?;
            Ok(replay::exit_code([&replayed]))
        }
        None => live::runtime()?.block_on(run_live(cfg)),
    }
}

async fn run_live(cfg: &TraceConfig) -> anyhow::Result<ExitCode> {
    let opts = live::load_options(&cfg.probing, cfg.filter.pid, &[]);
    let mut live = Live::start(&opts, cfg.probing.bind_qp_counters, &cfg.filter)?;
    let mut stage = live
        .stage(ClockAnchor::now(), cfg.filter.clone(), sink_for(cfg.format))
        .with_resolver(Resolver::new());
    live.run(&mut stage, READY_LINE, cfg.duration, None).await?;
    let events = stage.events;
    stage.warn_undecodable("");
    match stage.finish() {
        Ok(_) => {}
        // A closed pipe (`rdmatrace trace | head`) is a normal way to stop.
        Err(e) if e.kind() == ErrorKind::BrokenPipe => {}
        Err(e) => return Err(e).context("cannot write output"),
    }
    eprintln!("rdmatrace: {events} events, {} lost", live.lost_total());
    live.loss_advice();
    Ok(ExitCode::SUCCESS)
}
