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
    commands::live::{self, Consumer},
    config::{Format, TraceConfig},
    loader::{self, LoadOptions},
    pipeline::Pipeline,
    recording::{reader::Recording, Entry},
    sinks::{jsonl::JsonlSink, text::TextSink, Sink},
    source::RingSource,
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

impl Consumer for Pipeline {
    fn raw(&mut self, bytes: &[u8]) {
        self.push_raw(bytes);
    }
    fn lost(&mut self, count: u64, cpu: Option<u32>, ts_ns: u64) {
        Pipeline::lost(self, count, cpu, ts_ns);
    }
    fn broken(&self) -> bool {
        self.write_error.is_some()
    }
}

pub fn run(cfg: &TraceConfig, input: Option<&Path>) -> anyhow::Result<ExitCode> {
    match input {
        Some(path) => replay(cfg, path),
        None => live::runtime()?.block_on(run_live(cfg)),
    }
}

/// Output errors end the command; a closed pipe is a normal way to stop.
fn finish(pipeline: &mut Pipeline) -> anyhow::Result<()> {
    let _ = pipeline.sink.finish();
    if let Some(e) = pipeline.write_error.take() {
        if e.kind() != ErrorKind::BrokenPipe {
            return Err(e).context("cannot write output");
        }
    }
    if let Some(e) = &pipeline.first_decode_error {
        eprintln!(
            "rdmatrace: {} records could not be decoded (first: {e})",
            pipeline.decode_errors
        );
    }
    Ok(())
}

async fn run_live(cfg: &TraceConfig) -> anyhow::Result<ExitCode> {
    let opts = LoadOptions {
        btf_dir: cfg.btf_dir.clone(),
        traced_pids: cfg.filter.pid.map(|p| vec![p]),
        follow_forks: false,
        ringbuf_bytes: cfg.ringbuf_bytes,
        cpu_hz: None,
    };
    let mut tracer = loader::load(&opts, loader::all_areas())?;
    live::announce(&tracer.report);
    let mut source = RingSource::new(&mut tracer)?;
    let mut sampler = live::sampler(&mut tracer, cfg.bind_qp_counters);
    let mut pipeline = Pipeline::new(ClockAnchor::now(), cfg.filter.clone(), sink_for(cfg.format));
    pipeline.resolver = Some(Resolver::new());
    pipeline.sink.start().context("cannot write output")?;
    eprintln!("{READY_LINE}");
    live::run(
        &mut source,
        &mut pipeline,
        cfg.duration,
        None,
        Some(&mut sampler),
    )
    .await?;
    let lost = source.lost_total();
    finish(&mut pipeline)?;
    eprintln!("rdmatrace: {} events, {lost} lost", pipeline.events);
    live::loss_advice(lost, &source.lost_per_cpu());
    Ok(ExitCode::SUCCESS)
}

fn replay(cfg: &TraceConfig, path: &Path) -> anyhow::Result<ExitCode> {
    let rec = Recording::open(path)?;
    let anchor = ClockAnchor::fixed(i128::from(rec.header.clock_offset_ns));
    let mut pipeline = Pipeline::new(anchor, cfg.filter.clone(), sink_for(cfg.format));
    pipeline.sink.start().context("cannot write output")?;
    let problems = rec.replay(|entry| match entry {
        Entry::Event(bytes) => pipeline.push_raw(bytes),
        Entry::Lost { ts_ns, count, cpu } => pipeline.lost(count, cpu, ts_ns),
        Entry::Symbol { pid, addr, name } => pipeline.symbols.insert(pid, addr, name),
    });
    finish(&mut pipeline)?;
    for p in &problems {
        eprintln!("rdmatrace: {}: {p}", path.display());
    }
    // Damage inside the file is reported, and everything intact was printed; an incomplete
    // tail alone (a recorder killed with -9) is normal.
    let damaged = problems
        .iter()
        .any(|p| !matches!(p, crate::recording::reader::ChunkProblem::Truncated { .. }));
    Ok(if damaged {
        ExitCode::from(2)
    } else {
        ExitCode::SUCCESS
    })
}
