//! `rdmatrace record -o FILE [--force] [--duration D] [--pid P] [-- CMD ARGS...]`: every event
//! into a recording (crash-safe chunks, see `recording`), for `trace --input`, `report`, ...
//! later. An existing FILE is left alone unless `--force`. With CMD: run it, trace it and its
//! descendants until it exits, and exit with its status.

use std::{io::ErrorKind, path::PathBuf, process::ExitCode, time::Duration};

use anyhow::{bail, Context as _};

use crate::{
    clock::ClockAnchor,
    commands::live::{self, End, Live},
    correlate::filter::Filter,
    recording::{
        repack::{repack_file, Repacked},
        writer::RecordingWriter,
        Header,
    },
    sinks::recording::RecordingSink,
    symbolize::resolver::Resolver,
};

#[derive(Clone, Debug)]
pub struct RecordConfig {
    pub output: PathBuf,
    /// Replace an existing output file.
    pub force: bool,
    pub duration: Option<Duration>,
    pub pid: Option<u32>,
    /// Containers, pods or cgroups to record (filtered in the kernel).
    pub place: Filter,
    pub command: Vec<String>,
    pub probing: crate::config::Probing,
    /// On-CPU profile of the recorded processes at this frequency (Hz).
    pub cpu_hz: Option<u64>,
}

pub const READY_LINE: &str = "Recording RDMA events... Hit Ctrl-C to end.";

fn read_proc(path: &str) -> String {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// The header of a recording made live now: host, kernel, clock anchor, probe report and the
/// command recorded, if any.
pub fn header(live: &Live, anchor: &ClockAnchor, command: &[String]) -> anyhow::Result<Header> {
    Ok(Header {
        tool: format!("rdmatrace {}", env!("CARGO_PKG_VERSION")),
        hostname: read_proc("/proc/sys/kernel/hostname"),
        kernel: read_proc("/proc/sys/kernel/osrelease"),
        endian: if cfg!(target_endian = "little") {
            "little"
        } else {
            "big"
        }
        .into(),
        clock_offset_ns: i64::try_from(anchor.offset_ns).context("clock offset out of range")?,
        probes: live
            .tracer
            .report
            .probes
            .iter()
            .map(|p| {
                format!(
                    "{} {} {} {:?}",
                    p.area, p.spec.program, p.spec.target, p.state
                )
            })
            .collect(),
        command: (!command.is_empty()).then(|| command.to_vec()),
    })
}

fn exists(cfg: &RecordConfig) -> String {
    format!(
        "{} exists; use --force to overwrite it",
        cfg.output.display()
    )
}

pub fn run(cfg: &RecordConfig) -> anyhow::Result<ExitCode> {
    // Before loading anything: an existing file is refused without touching it.
    if !cfg.force && std::fs::symlink_metadata(&cfg.output).is_ok() {
        bail!(exists(cfg));
    }
    live::runtime()?.block_on(run_async(cfg))
}

async fn run_async(cfg: &RecordConfig) -> anyhow::Result<ExitCode> {
    let mut opts = live::load_options(&cfg.probing, cfg.pid, &cfg.command);
    opts.cpu_hz = cfg.cpu_hz;
    let mut live = Live::start(&opts, cfg.probing.bind_qp_counters, &cfg.place)?;
    let anchor = ClockAnchor::now();
    let header = header(&live, &anchor, &cfg.command)?;
    let writer = match RecordingWriter::create(&cfg.output, &header, cfg.force) {
        // Made between the check at start and now.
        Err(e) if e.kind() == ErrorKind::AlreadyExists => bail!(exists(cfg)),
        r => r.with_context(|| format!("cannot create {}", cfg.output.display()))?,
    };
    let mut resolver = Resolver::new();
    if cfg.cpu_hz.is_some() {
        resolver.warm_kernel();
    }
    // Everything the kernel let through is recorded (a place filter ran there).
    let mut stage = live
        .stage(anchor, Filter::default(), RecordingSink::new(writer))
        .with_resolver(resolver);
    let mut child = live.spawn(&cfg.command)?;
    stage.sink_mut().unexeced_child = child.as_ref().and_then(|c| c.id());
    let end = live
        .run(&mut stage, READY_LINE, cfg.duration, child.as_mut())
        .await?;
    let lost = live.lost_total();
    // Still recorded as they came; a newer rdmatrace may read them.
    stage.warn_undecodable("");
    let sink = stage
        .finish()
        .with_context(|| format!("cannot write {}", cfg.output.display()))?;
    let events = sink.writer.events;
    let (file, bytes) = sink
        .writer
        .finish()
        .with_context(|| format!("cannot write {}", cfg.output.display()))?;
    file.sync_all()
        .with_context(|| format!("cannot sync {}", cfg.output.display()))?;
    drop(file);
    let size = match repack_file(&cfg.output) {
        Ok(Repacked::Done { after, .. }) => {
            format!("{after} bytes, packed for storage from {bytes}")
        }
        Ok(Repacked::Left(_)) => format!("{bytes} bytes"),
        Err(e) => {
            eprintln!(
                "rdmatrace: could not pack {} for storage: {e} (the recording is complete as written)",
                cfg.output.display()
            );
            format!("{bytes} bytes")
        }
    };
    eprintln!(
        "rdmatrace: {events} events, {lost} lost, recorded to {} ({size})",
        cfg.output.display()
    );
    live.loss_advice();
    Ok(match end {
        End::CommandExited(status) => ExitCode::from(
            status
                .code()
                .map_or(128 + status_signal(&status), |c| c.clamp(0, 255)) as u8,
        ),
        _ => ExitCode::SUCCESS,
    })
}

fn status_signal(status: &std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt as _;
    status.signal().unwrap_or(0)
}
