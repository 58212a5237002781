//! `rdmatrace serve`: an always-on agent for Prometheus. The endpoint listens first (loopback
//! unless told otherwise), the probes load, then every record updates the metrics
//! ([`crate::sinks::metrics`]); `--input FILE` serves a recording's metrics instead (no
//! privileges: tests, demos, a recording brought from another host).

use std::{
    collections::BTreeMap, net::SocketAddr, path::PathBuf, process::ExitCode, sync::Arc,
    time::Duration,
};

use anyhow::Context as _;
use prometheus_client::metrics::{counter::Counter, family::Family};
use tokio::signal::unix::{signal, SignalKind};

use crate::{
    clock::ClockAnchor,
    commands::live::{self, Live},
    commands::record,
    correlate::filter::Filter,
    exporter::{self, Exporter},
    flight::{FlightConfig, FlightRecorder},
    loader::misses::MissedRuns,
    replay,
    sinks::metrics::{Families, Limits, MetricsSink, ProgramLabels},
};

/// Where `serve` listens unless told otherwise: loopback only.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:9477";

#[derive(Clone, Debug)]
pub struct ServeConfig {
    pub listen: SocketAddr,
    /// `--pid` and the place filters (also applied in the kernel).
    pub filter: Filter,
    pub limits: Limits,
    pub input: Option<PathBuf>,
    pub flight: Option<FlightConfig>,
    pub probing: crate::config::Probing,
}

/// The line scripts wait for, with the endpoint's address.
pub fn ready_line(addr: SocketAddr) -> String {
    format!("Serving metrics on http://{addr}/metrics ... Hit Ctrl-C to end.")
}

pub fn run(cfg: &ServeConfig) -> anyhow::Result<ExitCode> {
    if !cfg.listen.ip().is_loopback() {
        eprintln!(
            "rdmatrace: note: the metrics endpoint listens on {} (not loopback): anyone who can \
             reach it sees process names, pids and containers",
            cfg.listen
        );
    }
    let (families, registry) = Families::new();
    let exporter = exporter::start(cfg.listen, Arc::new(registry))?;
    live::runtime()?.block_on(async {
        match &cfg.input {
            Some(path) => serve_recording(cfg, path, families, &exporter).await,
            None => serve_live(cfg, families, &exporter).await,
        }
    })
}

async fn serve_recording(
    cfg: &ServeConfig,
    path: &std::path::Path,
    families: Families,
    exporter: &Exporter,
) -> anyhow::Result<ExitCode> {
    let (sink, _, replayed) = replay::file(path, cfg.filter.clone(), |_| {
        MetricsSink::new(families.clone(), cfg.limits)
    })?;
    families.up.set(1);
    exporter.set_ready();
    eprintln!(
        "rdmatrace: serving the metrics of {} ({} processes)",
        path.display(),
        sink.processes()
    );
    wait_for_signal(&ready_line(exporter.addr)).await?;
    Ok(replay::exit_code([&replayed]))
}

async fn serve_live(
    cfg: &ServeConfig,
    families: Families,
    exporter: &Exporter,
) -> anyhow::Result<ExitCode> {
    let opts = live::load_options(&cfg.probing, cfg.filter.pid, &[]);
    let mut live = Live::start(&opts, cfg.probing.bind_qp_counters, &cfg.filter)?;
    let anchor = ClockAnchor::now();
    let flight = match &cfg.flight {
        Some(f) => {
            let header = record::header(&live, &anchor, &[])?;
            let fr = FlightRecorder::new(f.clone(), header, families.incidents.clone())
                .with_context(|| {
                    format!("cannot use {} for the flight recorder", f.dir.display())
                })?;
            eprintln!(
                "rdmatrace: flight recorder in {} ({} of history per incident, at most {} on disk)",
                f.dir.display(),
                crate::format::secs(f.keep_ns),
                crate::format::size(f.max_disk)
            );
            Some(fr)
        }
        None => None,
    };
    let sink = (MetricsSink::new(families.clone(), cfg.limits), flight);
    let mut stage = live.stage(anchor, cfg.filter.clone(), sink);
    let missed = tokio::spawn(count_missed_runs(
        live.tracer.missed_reader(),
        families.missed_runs.clone(),
    ));
    families.up.set(1);
    exporter.set_ready();
    let ran = live
        .run(&mut stage, &ready_line(exporter.addr), None, None)
        .await;
    missed.abort();
    ran?;
    families.up.set(0);
    stage.warn_undecodable("");
    let _ = stage.finish();
    live.loss_advice();
    Ok(ExitCode::SUCCESS)
}

/// Keeps `rdmatrace_program_runs_missed_total` up with the kernel's counts, every few seconds
/// (a series per program from the start, at 0, so that alerts find them).
async fn count_missed_runs(reader: MissedRuns, family: Family<ProgramLabels, Counter>) {
    let mut seen: BTreeMap<String, u64> = BTreeMap::new();
    let mut tick = tokio::time::interval(Duration::from_secs(5));
    loop {
        tick.tick().await;
        for (program, n) in reader.read().unwrap_or_default() {
            let before = seen.insert(program.clone(), n).unwrap_or(0);
            family
                .get_or_create(&ProgramLabels { program })
                .inc_by(n.saturating_sub(before));
        }
    }
}

/// Says `ready` once SIGTERM, SIGINT and SIGHUP are handled, then waits for one.
async fn wait_for_signal(ready: &str) -> anyhow::Result<()> {
    let mut term = signal(SignalKind::terminate()).context("cannot watch SIGTERM")?;
    let mut int = signal(SignalKind::interrupt()).context("cannot watch SIGINT")?;
    let mut hup = signal(SignalKind::hangup()).context("cannot watch SIGHUP")?;
    eprintln!("{ready}");
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
        _ = hup.recv() => {}
    }
    Ok(())
}
