//! `rdmatrace record -o FILE [--duration S] [--pid P] [-- CMD ARGS...]`: every event into a
//! recording (crash-safe chunks, see `recording`), for `trace --input`, `report`, ... later.
//! With CMD: run it, trace it and its descendants until it exits, and exit with its status.

use std::{io, path::PathBuf, process::ExitCode, time::Duration};

use anyhow::{bail, Context as _};
use rdmatrace_common::event::EventKind;

use crate::{
    clock::ClockAnchor,
    commands::live::{self, Consumer, End},
    loader,
    recording::{writer::RecordingWriter, Header},
    source::RingSource,
    symbolize::resolver::Resolver,
};

#[derive(Clone, Debug)]
pub struct RecordConfig {
    pub output: PathBuf,
    pub duration: Option<Duration>,
    pub pid: Option<u32>,
    pub command: Vec<String>,
    pub ringbuf_bytes: u32,
    pub btf_dir: PathBuf,
    /// Bind per-QP counters over rdma netlink (undone at exit).
    pub bind_qp_counters: bool,
    /// On-CPU profile of the recorded processes at this frequency (Hz).
    pub cpu_hz: Option<u64>,
}

pub const READY_LINE: &str = "Recording RDMA events... Hit Ctrl-C to end.";

struct Recorder {
    writer: RecordingWriter<std::fs::File>,
    /// Names stack addresses now, while the processes live; the names go into the file.
    resolver: Resolver,
    error: Option<io::Error>,
    /// The command's process until it execs: a copy of the recorder, whose CPU samples are
    /// the recorder's spawning code, not the program's.
    unexeced_child: Option<u32>,
}

impl Recorder {
    fn check(&mut self, r: io::Result<()>) {
        if let Err(e) = r {
            self.error.get_or_insert(e);
        }
    }
}

impl Consumer for Recorder {
    fn raw(&mut self, bytes: &[u8]) {
        // Until the command is spawned the recorder itself is traced (to follow the fork):
        // its own CPU samples are not the program's.
        match crate::decode::peek(bytes) {
            Some((EventKind::CpuSample, pid))
                if pid == std::process::id() || Some(pid) == self.unexeced_child =>
            {
                return;
            }
            Some((EventKind::ProcessExec, pid)) if Some(pid) == self.unexeced_child => {
                self.unexeced_child = None;
            }
            _ => {}
        }
        for s in self.resolver.names_for(bytes) {
            let r = self.writer.symbol(s.pid, s.addr, &s.name);
            self.check(r);
        }
        let r = self.writer.event(bytes);
        self.check(r);
    }
    /// Stored in the recording and said on stderr as it happens (at most once a second).
    fn lost(&mut self, count: u64, cpu: Option<u32>, ts_ns: u64) {
        if count > 0 {
            let on = cpu.map_or(String::new(), |c| format!(" (CPU {c})"));
            eprintln!(
                "rdmatrace: {count} events lost: the ring buffer was full{on}; \
                 consider a larger ring buffer (--ringbuf-size)"
            );
        }
        let r = self.writer.lost(ts_ns, cpu, count);
        self.check(r);
    }
    /// At most a second of events is only in memory: a kill -9 loses no more.
    fn tick(&mut self) {
        let r = self.writer.flush_chunk();
        self.check(r);
    }
    fn broken(&self) -> bool {
        self.error.is_some()
    }
}

fn read_proc(path: &str) -> String {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

pub fn run(cfg: &RecordConfig) -> anyhow::Result<ExitCode> {
    live::runtime()?.block_on(run_async(cfg))
}

async fn run_async(cfg: &RecordConfig) -> anyhow::Result<ExitCode> {
    let mut opts = live::load_options(&cfg.btf_dir, cfg.ringbuf_bytes, cfg.pid, &cfg.command);
    opts.cpu_hz = cfg.cpu_hz;
    let mut tracer = loader::load(&opts, loader::all_areas())?;
    live::announce(&tracer.report);
    let anchor = ClockAnchor::now();
    let header = Header {
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
        probes: tracer
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
        command: (!cfg.command.is_empty()).then(|| cfg.command.clone()),
    };
    let writer = RecordingWriter::create(&cfg.output, &header)
        .with_context(|| format!("cannot create {}", cfg.output.display()))?;
    let mut resolver = Resolver::new();
    if cfg.cpu_hz.is_some() {
        resolver.warm_kernel();
    }
    let mut recorder = Recorder {
        writer,
        resolver,
        error: None,
        unexeced_child: None,
    };
    let mut source = RingSource::new(&mut tracer)?;
    let mut sampler = live::sampler(&mut tracer, cfg.bind_qp_counters);

    let mut child = live::spawn_traced(&mut tracer, &cfg.command)?;
    recorder.unexeced_child = child.as_ref().and_then(|c| c.id());
    eprintln!("{READY_LINE}");
    let end = live::run(
        &mut source,
        &mut recorder,
        cfg.duration,
        child.as_mut(),
        Some(&mut sampler),
    )
    .await?;
    let lost = source.lost_total();
    let events = recorder.writer.events;
    if let Some(e) = recorder.error.take() {
        bail!("cannot write {}: {e}", cfg.output.display());
    }
    let (file, bytes) = recorder
        .writer
        .finish()
        .with_context(|| format!("cannot write {}", cfg.output.display()))?;
    file.sync_all()
        .with_context(|| format!("cannot sync {}", cfg.output.display()))?;
    eprintln!(
        "rdmatrace: {events} events, {lost} lost, recorded to {} ({bytes} bytes)",
        cfg.output.display()
    );
    live::loss_advice(lost, &source.lost_per_cpu());
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
