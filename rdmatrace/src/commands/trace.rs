//! `rdmatrace trace`: live lines (text or JSON Lines) until Ctrl-C, SIGTERM or `--duration`.

use std::{
    io::{self, ErrorKind},
    process::ExitCode,
    time::Duration,
};

use anyhow::Context as _;
use tokio::{
    signal::unix::{signal, SignalKind},
    time::{interval, sleep, Instant, MissedTickBehavior},
};

use crate::{
    clock::{monotonic_ns, ClockAnchor},
    config::{Format, TraceConfig},
    loader::{self, LoadOptions},
    pipeline::Pipeline,
    sinks::{jsonl::JsonlSink, text::TextSink, Sink},
    source::RingSource,
};

/// The line tests and scripts wait for: printed once every probe is attached.
pub const READY_LINE: &str = "Tracing RDMA QP events... Hit Ctrl-C to end.";

pub fn sink_for(format: Format) -> Box<dyn Sink> {
    match format {
        Format::Text => Box::new(TextSink::new(io::stdout())),
        Format::Jsonl => Box::new(JsonlSink::new(io::stdout())),
    }
}

enum Wake {
    Stop,
    Tick,
    Data,
}

pub fn run(cfg: &TraceConfig) -> anyhow::Result<ExitCode> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the tokio runtime")?;
    rt.block_on(run_async(cfg))
}

async fn run_async(cfg: &TraceConfig) -> anyhow::Result<ExitCode> {
    let opts = LoadOptions {
        btf_dir: cfg.btf_dir.clone(),
        filter_pid: cfg.filter.pid.unwrap_or(0),
        ringbuf_bytes: cfg.ringbuf_bytes,
    };
    let mut tracer = loader::load(&opts, loader::all_areas())?;
    for line in tracer.report.off_lines() {
        eprintln!("rdmatrace: {line}");
    }
    for note in &tracer.report.notes {
        eprintln!("rdmatrace: note: {note}");
    }
    if !tracer.report.any_rdma() {
        eprintln!(
            "rdmatrace: no RDMA probe point exists on this kernel (see above); \
             tracing process events only"
        );
    }
    let mut source = RingSource::new(&mut tracer)?;
    let mut pipeline = Pipeline::new(ClockAnchor::now(), cfg.filter.clone(), sink_for(cfg.format));
    pipeline.sink.start().context("cannot write output")?;
    eprintln!("{READY_LINE}");

    let mut sigterm = signal(SignalKind::terminate()).context("cannot watch SIGTERM")?;
    let mut sigint = signal(SignalKind::interrupt()).context("cannot watch SIGINT")?;
    let deadline = cfg.duration.map(|d| Instant::now() + d);
    let mut tick = interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);

    loop {
        let wake = tokio::select! {
            _ = sigint.recv() => Wake::Stop,
            _ = sigterm.recv() => Wake::Stop,
            _ = async { sleep(deadline.map_or(Duration::MAX, |d| d - Instant::now())).await },
                if deadline.is_some() => Wake::Stop,
            _ = tick.tick() => Wake::Tick,
            r = source.wait_readable() => { r?; Wake::Data }
        };
        match wake {
            Wake::Stop => break,
            Wake::Tick => pipeline.lost(source.lost_since_last(), monotonic_ns()),
            Wake::Data => {
                source.drain_now(&mut |b| pipeline.push_raw(b));
            }
        }
        if pipeline.write_error.is_some() {
            break;
        }
    }
    source.drain_now(&mut |b| pipeline.push_raw(b));
    pipeline.lost(source.lost_since_last(), monotonic_ns());
    let lost = source.lost_total();
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
    eprintln!("rdmatrace: {} events, {lost} lost", pipeline.events);
    if lost > 0 {
        eprintln!(
            "rdmatrace: {lost} events were dropped because the ring buffer was full; \
             consider a larger ring buffer (--ringbuf-size)"
        );
    }
    Ok(ExitCode::SUCCESS)
}
