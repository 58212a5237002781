//! The live side shared by every live command (`trace`, `record`, `verdict`, `top`): load the
//! probes, announce what is off, open the ring buffer and the sampler ([`Live::start`]), run
//! the loop — ring buffer, a 1 s tick (loss accounting, samples, periodic flushes), signals,
//! `--duration` and, for `-- CMD`, the command — into a [`Stage`] ([`Live::run`]), and say
//! what was lost at the end ([`Live::loss_advice`]).

use std::{collections::BTreeMap, time::Duration};

use anyhow::Context as _;
use tokio::{
    signal::unix::{signal, SignalKind},
    time::{interval, sleep, Instant, MissedTickBehavior},
};

use crate::{
    clock::{monotonic_ns, ClockAnchor},
    commands::places::PlaceWatch,
    container::{cgroup2_root, CgroupPaths},
    correlate::filter::Filter,
    loader::{self, copies::LibCopies, LoadOptions, Tracer},
    sample::Sampler,
    sinks::Sink,
    source::RingSource,
    stage::Stage,
};

/// A live trace's kernel side: the loaded probes, their ring buffer and the sampler.
pub struct Live {
    pub tracer: Tracer,
    source: RingSource,
    sampler: Sampler,
    /// The kernel side of a container / pod / cgroup filter.
    places: Option<PlaceWatch>,
    /// Verbs probes on containers' own library copies (when the verbs probes are on).
    copies: Option<LibCopies>,
}

impl Live {
    /// Loads every probe area, says which probes are off and why, opens the ring buffer and
    /// the sampler (binding per-QP counters when asked, announced). A `filter` naming
    /// containers, pods or cgroups is also applied in the kernel.
    pub fn start(
        opts: &LoadOptions,
        bind_qp_counters: bool,
        filter: &Filter,
    ) -> anyhow::Result<Live> {
        let mut opts = opts.clone();
        opts.cgroup_filter = filter.by_place();
        // The running processes' own library copies are looked for while the probes load
        // (reading every process's maps takes as long as a few probes attaching).
        let copies = LibCopies::new();
        let survey = copies.host_has_libraries().then(|| {
            std::thread::spawn(move || {
                let s = copies.survey();
                (copies, s)
            })
        });
        let mut tracer = loader::load(&opts, loader::all_areas())?;
        announce(&tracer.report);
        let places = if filter.by_place() {
            Some(PlaceWatch::start(&mut tracer, filter)?)
        } else {
            None
        };
        let source = RingSource::new(&mut tracer)?;
        let sampler = sampler(&mut tracer, bind_qp_counters);
        let verbs_on =
            tracer.report.probes.iter().any(|p| {
                p.area == "verbs" && matches!(p.state, crate::loader::ProbeState::Attached)
            });
        let copies = match (verbs_on, survey.map(|t| t.join())) {
            (false, _) => None,
            (true, Some(Ok((mut c, s)))) => {
                c.finish(s, &mut tracer);
                Some(c)
            }
            (true, _) => {
                let mut c = LibCopies::new();
                let s = c.survey();
                c.finish(s, &mut tracer);
                Some(c)
            }
        };
        Ok(Live {
            tracer,
            source,
            sampler,
            places,
            copies,
        })
    }

    /// A stage for this live trace: wall time through `anchor`, cgroup ids named from the
    /// cgroup2 mount while they exist, each process's transport variables read once.
    pub fn stage<S: Sink>(&self, anchor: ClockAnchor, filter: Filter, sink: S) -> Stage<S> {
        Stage::new(anchor, filter, sink)
            .with_cgroup_paths(CgroupPaths::new(cgroup2_root()))
            .with_environ()
    }

    /// Runs `command` (if any) traced with its descendants; see [`load_options`].
    pub fn spawn(&mut self, command: &[String]) -> anyhow::Result<Option<tokio::process::Child>> {
        spawn_traced(&mut self.tracer, command)
    }

    /// Prints `ready` (the line tests and scripts wait for) and feeds `stage` until a signal,
    /// `duration`, the command's exit or the sink's end.
    pub async fn run<S: Sink>(
        &mut self,
        stage: &mut Stage<S>,
        ready: &str,
        duration: Option<Duration>,
        command: Option<&mut tokio::process::Child>,
    ) -> anyhow::Result<End> {
        stage.start().context("cannot write output")?;
        let mut extras = Extras {
            places: self.places.as_mut(),
            copies: self.copies.as_mut().map(|c| (c, &mut self.tracer)),
        };
        run(
            &mut self.source,
            stage,
            ready,
            duration,
            command,
            Some(&mut self.sampler),
            &mut extras,
        )
        .await
    }

    pub fn lost_total(&self) -> u64 {
        self.source.lost_total()
    }

    /// The loss advice at exit: the total, where it happened, and the remedy; then the runs
    /// the kernel skipped, by program.
    pub fn loss_advice(&self) {
        loss_advice(self.source.lost_total(), &self.source.lost_per_cpu());
        if let Some(text) = self.tracer.missed_runs().as_ref().and_then(missed_text) {
            eprintln!("{text}");
        }
    }
}

/// What the live loop keeps up besides the stage: the cgroup filter's map and the verbs probes
/// on containers' library copies.
struct Extras<'a> {
    places: Option<&'a mut PlaceWatch>,
    copies: Option<(&'a mut LibCopies, &'a mut Tracer)>,
}

impl Extras<'_> {
    fn saw(&mut self, bytes: &[u8]) {
        if let Some((c, t)) = self.copies.as_mut() {
            c.saw(bytes, t);
        }
    }

    fn tick(&mut self) {
        if let Some(p) = self.places.as_mut() {
            p.refresh();
        }
        if let Some((c, t)) = self.copies.as_mut() {
            c.tick(t);
        }
    }
}

/// Why the loop ended.
#[derive(Debug, PartialEq, Eq)]
pub enum End {
    Signal,
    Duration,
    /// The command run under `record -- CMD` exited with this wait status.
    CommandExited(std::process::ExitStatus),
    OutputClosed,
}

enum Wake {
    End(End),
    Tick,
    Data,
}

async fn run<S: Sink>(
    source: &mut RingSource,
    consumer: &mut Stage<S>,
    ready: &str,
    duration: Option<Duration>,
    mut command: Option<&mut tokio::process::Child>,
    mut sampler: Option<&mut Sampler>,
    extras: &mut Extras<'_>,
) -> anyhow::Result<End> {
    let mut sigterm = signal(SignalKind::terminate()).context("cannot watch SIGTERM")?;
    let mut sigint = signal(SignalKind::interrupt()).context("cannot watch SIGINT")?;
    // A closed terminal ends the run cleanly too (its default action would skip every undo).
    let mut sighup = signal(SignalKind::hangup()).context("cannot watch SIGHUP")?;
    // Only now: a signal sent by whoever waited for this line is handled, not fatal.
    eprintln!("{ready}");
    let deadline = duration.map(|d| Instant::now() + d);
    let mut tick = interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    // The programs do not wake this task for every record (see `wake_flags` in the kernel
    // programs): the ring is drained on this timer, and at once when it fills up.
    let mut drain = interval(Duration::from_millis(rdmatrace_common::limits::DRAIN_MS));
    drain.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let end = loop {
        let wake = tokio::select! {
            _ = sigint.recv() => Wake::End(End::Signal),
            _ = sigterm.recv() => Wake::End(End::Signal),
            _ = sighup.recv() => Wake::End(End::Signal),
            _ = async { sleep(deadline.map_or(Duration::MAX, |d| d - Instant::now())).await },
                if deadline.is_some() => Wake::End(End::Duration),
            status = async { command.as_mut().map(|c| c.wait()).expect("guarded").await },
                if command.is_some() => Wake::End(End::CommandExited(status.context("cannot wait for the command")?)),
            _ = tick.tick() => Wake::Tick,
            _ = drain.tick() => Wake::Data,
            r = source.wait_readable() => { r?; Wake::Data }
        };
        match wake {
            Wake::End(end) => break end,
            Wake::Tick => {
                // What the probes saw first: a table sample read now must not get ahead of
                // records still waiting in the ring (see DRAIN_MS).
                source.drain_now(&mut |b| {
                    extras.saw(b);
                    consumer.raw(b)
                });
                let now = monotonic_ns();
                for (cpu, count) in source.lost_since_last() {
                    consumer.lost(count, cpu, now);
                }
                if let Some(s) = sampler.as_mut() {
                    for sample in s.poll(now) {
                        consumer.raw(&sample);
                    }
                    for w in s.take_warnings() {
                        eprintln!("rdmatrace: {w}");
                    }
                }
                extras.tick();
                consumer.tick();
            }
            Wake::Data => {
                source.drain_now(&mut |b| {
                    extras.saw(b);
                    consumer.raw(b)
                });
            }
        }
        if consumer.broken() {
            break End::OutputClosed;
        }
    };
    // Whatever is still in the ring buffer, and the last samples, belong to the trace.
    source.drain_now(&mut |b| consumer.raw(b));
    let now = monotonic_ns();
    for (cpu, count) in source.lost_since_last() {
        consumer.lost(count, cpu, now);
    }
    if let Some(s) = sampler {
        for sample in s.poll_final(now) {
            consumer.raw(&sample);
        }
        for w in s.take_warnings().into_iter().chain(s.finish()) {
            eprintln!("rdmatrace: {w}");
        }
    }
    Ok(end)
}

/// The runtime every live command uses: one thread is plenty for a ring buffer.
pub fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the tokio runtime")
}

/// Prints the probe report the way every live command does.
fn announce(report: &crate::loader::AttachReport) {
    for line in report.off_lines() {
        eprintln!("rdmatrace: {line}");
    }
    for note in &report.notes {
        eprintln!("rdmatrace: note: {note}");
    }
    if !report.any_rdma() {
        eprintln!(
            "rdmatrace: no RDMA probe point exists on this kernel (see above); \
             tracing process events only"
        );
    }
}

/// The loss advice at exit: the total, where it happened, and the remedy.
fn loss_advice(lost: u64, per_cpu: &[u64]) {
    if let Some(text) = loss_text(lost, per_cpu) {
        eprintln!("{text}");
    }
}

/// `None` without loss; otherwise the message, with the CPUs that dropped events.
pub fn loss_text(lost: u64, per_cpu: &[u64]) -> Option<String> {
    if lost == 0 {
        return None;
    }
    let cpus: Vec<String> = per_cpu
        .iter()
        .enumerate()
        .filter(|(_, n)| **n > 0)
        .map(|(cpu, n)| format!("cpu{cpu} {n}"))
        .collect();
    let where_ = if cpus.is_empty() {
        String::new()
    } else {
        format!(" (per CPU: {})", cpus.join(", "))
    };
    Some(format!(
        "rdmatrace: {lost} events were dropped because the ring buffer was full{where_}; \
         consider a larger ring buffer (--ringbuf-size)"
    ))
}

/// `None` when nothing was skipped; otherwise the message: the total and the programs that
/// missed runs, most first.
pub fn missed_text(missed: &BTreeMap<String, u64>) -> Option<String> {
    let total: u64 = missed.values().sum();
    if total == 0 {
        return None;
    }
    let mut by: Vec<(&String, &u64)> = missed.iter().filter(|(_, n)| **n > 0).collect();
    by.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    let list: Vec<String> = by.iter().map(|(p, n)| format!("{p} {n}")).collect();
    let runs = if total == 1 { "run" } else { "runs" };
    Some(format!(
        "rdmatrace: the kernel skipped {total} {runs} of rdmatrace's programs (hit while a BPF \
         program or probe handler was already running on that CPU): {}; each is a packet or \
         call missing from the per-QP traffic or socket byte totals, or an event missing from \
         the trace",
        list.join(", ")
    ))
}

/// The sampler every live command uses: kernel aggregates, sysfs port counters and, when the
/// kernel has RDMA netlink, the QP resource table (and per-QP counters, bound only with
/// `bind_qp_counters`). A source that cannot open is said once; the rest still sample.
fn sampler(tracer: &mut crate::loader::Tracer, bind_qp_counters: bool) -> Sampler {
    let mut sampler = Sampler::new(tracer, Some(COUNTERS_ROOT.into()));
    let has_rdma = std::path::Path::new(COUNTERS_ROOT)
        .read_dir()
        .is_ok_and(|mut d| d.next().is_some());
    if has_rdma || bind_qp_counters {
        match crate::netlink::sampler::NetlinkSampler::open(bind_qp_counters) {
            Ok(n) => sampler.with_netlink(n),
            Err(e) => eprintln!("rdmatrace: QP resource table off: {e}"),
        }
    }
    for w in sampler.take_warnings() {
        eprintln!("rdmatrace: {w}");
    }
    sampler
}

/// Where RDMA port counters live.
pub const COUNTERS_ROOT: &str = "/sys/class/infiniband";

/// Load options for a command that traces everything, one process (`--pid`), or a command it
/// runs (`-- CMD`): for a command we trace ourselves with fork-following on, so the kernel adds
/// the command at fork time, before it can issue a single verb; [`spawn_traced`] then leaves
/// the set.
pub fn load_options(
    probing: &crate::config::Probing,
    pid: Option<u32>,
    command: &[String],
) -> crate::loader::LoadOptions {
    let traced = match (pid, command.is_empty()) {
        (Some(p), _) => Some(vec![p]),
        (None, false) => Some(vec![std::process::id()]),
        (None, true) => None,
    };
    crate::loader::LoadOptions {
        btf_dir: probing.btf_dir.clone(),
        follow_forks: !command.is_empty(),
        traced_pids: traced,
        ringbuf_bytes: probing.ringbuf_bytes,
        cpu_hz: None,
        cgroup_filter: false,
        no_probe: probing.no_probe.clone(),
        typed: probing.typed,
    }
}

fn spawn_traced(
    tracer: &mut crate::loader::Tracer,
    command: &[String],
) -> anyhow::Result<Option<tokio::process::Child>> {
    let Some((prog, args)) = command.split_first() else {
        return Ok(None);
    };
    let spawned = tokio::process::Command::new(prog)
        .args(args)
        .spawn()
        .with_context(|| format!("cannot run {prog}"));
    tracer.untrace_pid(std::process::id())?;
    Ok(Some(spawned?))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::{loss_text, missed_text};

    #[test]
    fn loss_text_names_the_cpus_that_dropped_and_the_remedy() {
        assert_eq!(loss_text(0, &[0, 0]), None);
        let t = loss_text(5, &[0, 3, 0, 2]).expect("a message");
        assert!(t.contains("5 events were dropped"), "{t}");
        assert!(t.contains("(per CPU: cpu1 3, cpu3 2)"), "{t}");
        assert!(t.contains("--ringbuf-size"), "{t}");
    }

    #[test]
    fn skipped_runs_are_said_most_first_and_nothing_when_none() {
        let mut m = BTreeMap::from([("rxe_xmit".to_string(), 0u64)]);
        assert_eq!(missed_text(&m), None);
        m.insert("rxe_recv".into(), 1);
        let one = missed_text(&m).expect("one skipped");
        assert!(one.contains("skipped 1 run of"), "{one}");
        m.insert("rxe_recv".into(), 3);
        m.insert("tcp_send_btf".into(), 12);
        let t = missed_text(&m).expect("some skipped");
        assert!(
            t.contains("skipped 15 runs") && t.contains(": tcp_send_btf 12, rxe_recv 3;"),
            "{t}"
        );
        assert!(!t.contains("rxe_xmit"), "{t}");
    }
}
