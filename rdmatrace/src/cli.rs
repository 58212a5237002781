//! Command line (clap). Arguments are turned into plain config structs here, at the edge.

mod export;
pub use export::{ExportArgs, ExportFormatArg};

use std::{path::PathBuf, time::Duration};

use clap::{Args, Parser, Subcommand};

use crate::{
    commands::{record::RecordConfig, top::TopConfig, verdict::VerdictConfig},
    config::{Format, TraceConfig},
    correlate::filter::Filter,
};

#[derive(Parser, Debug)]
#[command(
    name = "rdmatrace",
    version,
    about = "eBPF tracing and fault localization for RDMA"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

/// The output of a command that has several: `--format text|json` (`--json` is short for
/// `--format json`).
#[derive(Args, Clone, Copy, Debug)]
pub struct OutputArgs {
    /// Output format: `text` for people, `json` for programs (schema: docs/json.md).
    #[arg(long, value_enum, default_value_t = OutputFormat::Text)]
    pub format: OutputFormat,
    /// Short for `--format json`.
    #[arg(long)]
    pub json: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum OutputFormat {
    Text,
    Json,
}

impl OutputArgs {
    pub fn json(&self) -> bool {
        self.json || self.format == OutputFormat::Json
    }
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Print RDMA control-path events live, one line each (bcc style) or as JSON Lines.
    Trace(TraceArgs),
    /// Record every event to a file (crash-safe), for `trace --input` and `report` later.
    Record(RecordArgs),
    /// Post-mortem of a recording: verdicts, QP table, retransmit blame, anomalies (no root).
    /// Several recordings (one per host): both ends of each connection paired, the hosts'
    /// clocks aligned, faults localized to a direction and a host.
    Report {
        /// Recordings from `rdmatrace record` (one per host).
        #[arg(required = true, num_args = 1..)]
        files: Vec<PathBuf>,
        #[command(flatten)]
        output: OutputArgs,
    },
    /// Watch, then say per process: rdma, tcp_fallback, tcp, mixed or idle, with evidence.
    /// Exits 3 when a watched process fell back to TCP.
    Verdict(VerdictArgs),
    /// A live table per process and QP (verdict, state, rates, retransmits), refreshed like top.
    Top(TopArgs),
    /// What this host allows: kernel, BTF, privileges, RDMA devices, every probe and counter source.
    Doctor {
        #[command(flatten)]
        output: OutputArgs,
    },
    /// Recordings as a timeline: a track per process, QP states as slices, CM/async/anomaly
    /// instants, rate counters; Perfetto protobuf (default) or Chrome JSON. Several files (one per
    /// host) line up on UTC.
    Timeline(TimelineArgs),
    /// Recordings (one per host) as Parquet tables for DuckDB, Spark or ClickHouse: events,
    /// hosts, processes, qps, connections, retransmits, faults (docs/parquet.md).
    Export(ExportArgs),
    /// An always-on agent for Prometheus: metrics per process and container on
    /// http://127.0.0.1:9477/metrics (loopback unless --listen says otherwise).
    Serve(ServeArgs),
    /// Flamegraph (SVG via inferno, or folded stacks) of retransmit blame, verbs call stacks or
    /// on-CPU samples; `--base OTHER` makes it differential against another recording.
    Flamegraph(FlamegraphArgs),
}

#[derive(Args, Debug)]
pub struct RecordArgs {
    /// Recording to write (mode 0600); an existing file is refused unless --force.
    #[arg(long, short = 'o')]
    pub output: PathBuf,
    /// Overwrite the output file if it exists.
    #[arg(long)]
    pub force: bool,
    /// Stop after this long (`90`, `90s`, `5m`, `500ms`; plain numbers are seconds).
    #[arg(long, short = 'd', value_parser = parse_duration)]
    pub duration: Option<Duration>,
    /// Only this process (and nothing else); filtered in the kernel.
    #[arg(long, short = 'p', conflicts_with = "command")]
    pub pid: Option<u32>,
    #[command(flatten)]
    pub place: PlaceArgs,
    #[command(flatten)]
    pub probe: ProbeArgs,
    /// Also sample the recorded processes on CPU (perf events, user and kernel stacks), for
    /// `flamegraph --kind cpu`. Without --pid or a command, samples every process.
    #[arg(long)]
    pub cpu_profile: bool,
    /// Sampling frequency of --cpu-profile, per CPU.
    #[arg(long, default_value_t = crate::collect::profile::DEFAULT_HZ, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub cpu_hz: u64,
    /// Run this command and record it and its descendants until it exits.
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<String>,
}

#[derive(Args, Debug)]
pub struct TopArgs {
    /// Only this process (filtered in the kernel).
    #[arg(long, short = 'p')]
    pub pid: Option<u32>,
    #[command(flatten)]
    pub place: PlaceArgs,
    /// Seconds between frames (whole seconds, at least 1).
    #[arg(long, short = 'd', default_value_t = 2)]
    pub delay: u64,
    /// Stop after this many frames.
    #[arg(long, short = 'n')]
    pub iterations: Option<u64>,
    /// Print frames one after another instead of redrawing the screen (as `top -b`).
    #[arg(long, short = 'b')]
    pub batch: bool,
    /// Processes shown at most (the busiest first).
    #[arg(long, default_value_t = 20)]
    pub max_processes: usize,
    #[command(flatten)]
    pub probe: ProbeArgs,
}

impl TopArgs {
    pub fn to_config(&self) -> Result<TopConfig, String> {
        if self.delay == 0 {
            return Err("--delay must be at least 1 second".into());
        }
        Ok(TopConfig {
            pid: self.pid,
            place: self.place.filter(),
            interval: Duration::from_secs(self.delay),
            iterations: self.iterations,
            batch: self.batch,
            max_procs: self.max_processes.max(1),
            probing: self.probe.to_probing(),
        })
    }
}

#[derive(Args, Debug)]
pub struct VerdictArgs {
    /// Only this process.
    #[arg(long, short = 'p', conflicts_with = "command")]
    pub pid: Option<u32>,
    #[command(flatten)]
    pub place: PlaceArgs,
    /// One verdict per process (default), or per container (processes outside containers
    /// per cgroup) with its processes' evidence summed.
    #[arg(long, value_enum, default_value_t = VerdictBy::Process)]
    pub by: VerdictBy,
    /// Watch this long (`90`, `90s`, `5m`; default: until Ctrl-C or the command exits).
    #[arg(long, short = 'd', value_parser = parse_duration)]
    pub duration: Option<Duration>,
    /// `--format json`: one {"type":"verdict","data":{pid,comm,verdict,evidence}} line per process.
    #[command(flatten)]
    pub output: OutputArgs,
    /// Judge the processes of a recording (from `rdmatrace record`) instead of watching live;
    /// needs no privileges.
    #[arg(long, short = 'i', conflicts_with_all = ["command", "duration"])]
    pub input: Option<PathBuf>,
    #[command(flatten)]
    pub probe: ProbeArgs,
    /// Run this command and judge it and its descendants.
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<String>,
}

impl VerdictArgs {
    pub fn to_config(&self) -> Result<VerdictConfig, String> {
        Ok(VerdictConfig {
            input: self.input.clone(),
            pid: self.pid,
            place: self.place.filter(),
            by_container: self.by == VerdictBy::Container,
            duration: self.duration,
            command: self.command.clone(),
            json: self.output.json(),
            probing: self.probe.to_probing(),
        })
    }
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum VerdictBy {
    Process,
    Container,
}

impl RecordArgs {
    pub fn to_config(&self) -> Result<RecordConfig, String> {
        Ok(RecordConfig {
            output: self.output.clone(),
            force: self.force,
            duration: self.duration,
            pid: self.pid,
            place: self.place.filter(),
            command: self.command.clone(),
            probing: self.probe.to_probing(),
            cpu_hz: self.cpu_profile.then_some(self.cpu_hz),
        })
    }
}

#[derive(Args, Debug)]
pub struct TraceArgs {
    /// `--format json`: JSON Lines, {"type": T, "data": {...}} per event (schema: docs/json.md).
    #[command(flatten)]
    pub output: OutputArgs,
    /// Only events of this process (thread-group id); filtered in the kernel.
    #[arg(long, short = 'p')]
    pub pid: Option<u32>,
    /// Only events of processes with this comm.
    #[arg(long)]
    pub comm: Option<String>,
    /// Only QP events on this RDMA device (e.g. rxe0, mlx5_0).
    #[arg(long)]
    pub dev: Option<String>,
    /// Only events of this QPN (decimal or 0x hex); combine with --dev, QPNs are per device.
    #[arg(long, value_parser = parse_u32)]
    pub qpn: Option<u32>,
    #[command(flatten)]
    pub place: PlaceArgs,
    /// Stop after this long (`90`, `90s`, `5m`, `500ms`; plain numbers are seconds).
    #[arg(long, short = 'd', value_parser = parse_duration)]
    pub duration: Option<Duration>,
    #[command(flatten)]
    pub probe: ProbeArgs,
    /// Replay a recording (from `rdmatrace record`) instead of tracing live; needs no privileges.
    #[arg(long, short = 'i')]
    pub input: Option<PathBuf>,
}

/// `--container`, `--pod`, `--cgroup`: which containers' processes to watch.
#[derive(Args, Clone, Debug, Default)]
pub struct PlaceArgs {
    /// Only processes in this container: its id or a prefix of it, as `docker ps`, `crictl
    /// ps` or `podman ps` show it. Filtered in the kernel.
    #[arg(long, value_parser = parse_nonempty)]
    pub container: Option<String>,
    /// Only processes of this Kubernetes pod, by UID (`kubectl get pod P -o
    /// jsonpath={.metadata.uid}`). Filtered in the kernel.
    #[arg(long, value_parser = parse_nonempty)]
    pub pod: Option<String>,
    /// Only processes in this cgroup v2 path or below it, relative to the cgroup2 mount
    /// (`/kubepods.slice`, `/system.slice/slurmstepd.scope`). Filtered in the kernel.
    #[arg(long, value_parser = parse_nonempty)]
    pub cgroup: Option<String>,
}

impl PlaceArgs {
    /// A filter with these places (and nothing else).
    pub fn filter(&self) -> Filter {
        Filter {
            container: self.container.clone(),
            pod: self.pod.clone(),
            cgroup: self.cgroup.clone(),
            ..Filter::default()
        }
    }
}

fn parse_nonempty(s: &str) -> Result<String, String> {
    if s.trim().is_empty() {
        return Err("must not be empty".into());
    }
    Ok(s.trim().to_string())
}

/// Options of every command that loads the probes.
#[derive(Args, Debug)]
pub struct ProbeArgs {
    /// Ring buffer size in bytes (power of two, at least 4096).
    #[arg(long, default_value_t = rdmatrace_common::limits::RINGBUF_BYTES, value_parser = parse_ringbuf)]
    pub ringbuf_size: u32,
    /// Where the kernel's BTF lives.
    #[arg(long, default_value = "/sys/kernel/btf", hide = true)]
    pub btf_dir: PathBuf,
    /// Bind per-QP statistic counters over rdma netlink (auto mode, or one counter per
    /// existing QP) so retransmit counters can be blamed on a QP; changes the host's counter
    /// mode, so it is announced and undone at exit (journaled under /run/rdmatrace: after a
    /// kill -9 the next run undoes it). Drivers without per-QP counters say so and nothing
    /// changes.
    #[arg(long)]
    pub bind_qp_counters: bool,
    /// Switch a probe area off (repeatable): `rxe` stands in for hardware whose data path the
    /// kernel does not see (RDMA bytes are then estimated from port counters). The areas are
    /// listed in docs/cli.md; `doctor` shows each probe with its area.
    #[arg(long = "no-probe", value_name = "AREA", value_parser = parse_area)]
    pub no_probe: Vec<String>,
    /// Kprobes and raw tracepoints only: not their BTF-typed twins (fentry on the rxe
    /// functions, tp_btf on the socket byte tracepoints), which cost less per event. The
    /// kernel then does not hold the rdma_rxe module while rdmatrace runs.
    #[arg(long)]
    pub no_typed_probes: bool,
}

impl ProbeArgs {
    pub fn to_probing(&self) -> crate::config::Probing {
        crate::config::Probing {
            ringbuf_bytes: self.ringbuf_size,
            btf_dir: self.btf_dir.clone(),
            bind_qp_counters: self.bind_qp_counters,
            no_probe: self.no_probe.clone(),
            typed: !self.no_typed_probes,
        }
    }
}

fn parse_area(s: &str) -> Result<String, String> {
    let names = crate::loader::area_names();
    if names.contains(&s) {
        Ok(s.to_string())
    } else {
        Err(format!(
            "no probe area {s:?}; the areas are: {}",
            names.join(", ")
        ))
    }
}

fn parse_u32(s: &str) -> Result<u32, String> {
    let r = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u32::from_str_radix(hex, 16),
        None => s.parse(),
    };
    r.map_err(|e| format!("{s:?} is not a number: {e}"))
}

fn parse_ringbuf(s: &str) -> Result<u32, String> {
    let n = parse_u32(s)?;
    if n < 4096 || !n.is_power_of_two() {
        return Err(format!("{n} is not a power of two of at least 4096"));
    }
    Ok(n)
}

impl TraceArgs {
    pub fn to_config(&self) -> Result<TraceConfig, String> {
        let duration = self.duration;
        Ok(TraceConfig {
            filter: Filter {
                pid: self.pid,
                comm: self.comm.clone(),
                dev: self.dev.clone(),
                qpn: self.qpn,
                ..self.place.filter()
            },
            format: if self.output.json() {
                Format::Jsonl
            } else {
                Format::Text
            },
            duration,
            probing: self.probe.to_probing(),
        })
    }
}

#[derive(Args, Debug)]
pub struct ServeArgs {
    /// Address and port of the metrics endpoint. Loopback by default: another address
    /// exposes process names, pids and containers to whoever can reach it.
    #[arg(long, default_value = crate::commands::serve::DEFAULT_LISTEN)]
    pub listen: std::net::SocketAddr,
    /// Only this process (filtered in the kernel).
    #[arg(long, short = 'p')]
    pub pid: Option<u32>,
    #[command(flatten)]
    pub place: PlaceArgs,
    /// How long a process's series stay after it exited (`90s`, `5m`, `1h`).
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    pub grace: Duration,
    /// Most per-process series at once; what would go beyond is not created and is counted in
    /// rdmatrace_series_dropped_total.
    #[arg(long, default_value_t = 50_000)]
    pub max_series: usize,
    /// Serve the metrics of a recording instead of tracing live (no privileges needed).
    #[arg(long, short = 'i', conflicts_with = "flight_recorder")]
    pub input: Option<PathBuf>,
    /// Flight recorder: record continuously into rotating segments in DIR, and write
    /// DIR/incident-<UTC>-<kind>.rdmt around each incident (QP to ERR, fatal async event,
    /// port down, device removed, retransmit burst).
    #[arg(long, value_name = "DIR")]
    pub flight_recorder: Option<PathBuf>,
    /// History an incident file holds before the incident.
    #[arg(long, default_value = "60s", value_parser = parse_duration, requires = "flight_recorder")]
    pub keep: Duration,
    /// How long an incident file keeps collecting after the incident.
    #[arg(long, default_value = "10s", value_parser = parse_duration, requires = "flight_recorder")]
    pub after: Duration,
    /// Most disk the flight recorder uses (segments and incident files; the oldest go first).
    #[arg(long, default_value = "1G", value_parser = parse_size, requires = "flight_recorder")]
    pub max_disk: u64,
    /// Retransmits within one second that count as a burst incident.
    #[arg(long, default_value_t = 100, requires = "flight_recorder")]
    pub burst: u64,
    #[command(flatten)]
    pub probe: ProbeArgs,
}

impl ServeArgs {
    pub fn to_config(&self) -> Result<crate::commands::serve::ServeConfig, String> {
        if self.max_series == 0 {
            return Err("--max-series must be at least 1".into());
        }
        Ok(crate::commands::serve::ServeConfig {
            listen: self.listen,
            filter: Filter {
                pid: self.pid,
                ..self.place.filter()
            },
            limits: crate::sinks::metrics::Limits {
                grace_ns: u64::try_from(self.grace.as_nanos()).unwrap_or(u64::MAX),
                max_series: self.max_series,
            },
            input: self.input.clone(),
            flight: self
                .flight_recorder
                .as_ref()
                .map(|dir| crate::flight::FlightConfig {
                    dir: dir.clone(),
                    keep_ns: u64::try_from(self.keep.as_nanos()).unwrap_or(u64::MAX),
                    after_ns: u64::try_from(self.after.as_nanos()).unwrap_or(u64::MAX),
                    max_disk: self.max_disk,
                    burst: self.burst.max(1),
                }),
            probing: self.probe.to_probing(),
        })
    }
}

/// `90`, `90s`, `5m`, `2h`, `1d`, `500ms`.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    // A plain number of seconds in any form a float takes (`30`, `0.5`, `1e3`).
    if let Ok(secs) = s.parse::<f64>() {
        return positive(s, secs);
    }
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: f64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a duration (like 90s, 5m, 2h)"))?;
    let secs = match unit {
        "" | "s" => n,
        "ms" => n / 1000.0,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        "d" => n * 86400.0,
        _ => {
            return Err(format!(
                "{s:?}: unknown unit {unit:?} (use ms, s, m, h or d)"
            ))
        }
    };
    positive(s, secs)
}

/// `secs` as a duration when it is one and above zero.
fn positive(s: &str, secs: f64) -> Result<Duration, String> {
    match Duration::try_from_secs_f64(secs) {
        Ok(d) if !d.is_zero() => Ok(d),
        Ok(_) => Err(format!("{s:?} must be a positive duration")),
        Err(_) if secs > 0.0 => Err(format!("{s:?} is too long a duration")),
        Err(_) => Err(format!("{s:?} must be a positive duration")),
    }
}

#[cfg(test)]
mod duration_tests;

/// `1G`, `512M`, `64K`, `1000000` (bytes; powers of 1024).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a size (like 512M, 2G)"))?;
    let mult: u64 = match unit.trim_end_matches(['B', 'b', 'i']) {
        "" => 1,
        "K" | "k" => 1 << 10,
        "M" | "m" => 1 << 20,
        "G" | "g" => 1 << 30,
        "T" | "t" => 1 << 40,
        _ => return Err(format!("{s:?}: unknown unit {unit:?} (use K, M, G or T)")),
    };
    n.checked_mul(mult)
        .filter(|b| *b > 0)
        .ok_or_else(|| format!("{s:?} must be a positive size"))
}

#[derive(Args, Debug)]
pub struct TimelineArgs {
    /// Recordings from `rdmatrace record` (several hosts' files share one UTC time axis).
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    /// Where to write the timeline (`-` for stdout).
    #[arg(long, short = 'o')]
    pub output: PathBuf,
    /// `perfetto` (TrackEvent protobuf, for ui.perfetto.dev) or `json` (Chrome trace events).
    #[arg(long, value_enum, default_value_t = TimelineFormatArg::Perfetto)]
    pub format: TimelineFormatArg,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimelineFormatArg {
    Perfetto,
    Json,
}

impl TimelineArgs {
    pub fn to_config(&self) -> crate::commands::timeline::TimelineConfig {
        use crate::commands::timeline::{TimelineConfig, TimelineFormat};
        TimelineConfig {
            inputs: self.files.clone(),
            output: self.output.clone(),
            format: match self.format {
                TimelineFormatArg::Perfetto => TimelineFormat::Perfetto,
                TimelineFormatArg::Json => TimelineFormat::Json,
            },
        }
    }
}

#[derive(Args, Debug)]
pub struct FlamegraphArgs {
    /// A recording from `rdmatrace record`.
    pub file: PathBuf,
    /// retransmits: process;device;QPN;reason by count. verbs: user stacks at verbs calls.
    /// cpu: on-CPU samples.
    #[arg(long, value_enum, default_value_t = FlameKindArg::Retransmits)]
    pub kind: FlameKindArg,
    /// Where to write (`-` for stdout).
    #[arg(long, short = 'o')]
    pub output: PathBuf,
    /// Write folded stacks (`a;b;c N`) instead of SVG.
    #[arg(long)]
    pub folded: bool,
    /// Differential flamegraph against this (earlier) recording: red grew, blue shrank.
    #[arg(long)]
    pub base: Option<PathBuf>,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlameKindArg {
    Retransmits,
    Verbs,
    Cpu,
}

impl FlamegraphArgs {
    pub fn to_config(&self) -> crate::commands::flamegraph::FlamegraphConfig {
        use crate::flame::Kind;
        crate::commands::flamegraph::FlamegraphConfig {
            input: self.file.clone(),
            base: self.base.clone(),
            kind: match self.kind {
                FlameKindArg::Retransmits => Kind::Retransmits,
                FlameKindArg::Verbs => Kind::Verbs,
                FlameKindArg::Cpu => Kind::Cpu,
            },
            output: self.output.clone(),
            folded: self.folded,
        }
    }
}
