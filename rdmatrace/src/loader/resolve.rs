//! Beside the attach pass: every area's offsets resolved from the kernel's BTF (an area whose
//! BTF is missing is switched off with its reason), and the start-up's phase timings.

use rdmatrace_common::config::ProbeConfig;

use super::{AttachReport, LoadError, LoadOptions, ProbeState, ProbeStatus};
use crate::{btf, collect::Area};

/// Writes `cfg` to the `CONFIG` map, twice: first with its gates (`ready`, `typed`) clear,
/// then whole. The kernel copies an array value without atomicity, so a program running
/// during the second copy that sees a gate set may see any other field of it, each of which
/// the first copy already wrote with its final value.
pub(super) fn write_config(ebpf: &mut aya::Ebpf, cfg: ProbeConfig) -> Result<(), LoadError> {
    let map = ebpf
        .map_mut("CONFIG")
        .ok_or(LoadError::MissingMap("CONFIG"))?;
    let mut config: aya::maps::Array<_, ProbeConfig> =
        aya::maps::Array::try_from(map).map_err(LoadError::Config)?;
    let gated = ProbeConfig {
        ready: 0,
        typed: 0,
        ..cfg
    };
    config.set(0, gated, 0).map_err(LoadError::Config)?;
    config.set(0, cfg, 0).map_err(LoadError::Config)
}

/// Resolves the config of every area `opts` does not switch off: the config, the areas that
/// resolved, and the report of those that did not.
pub(super) fn areas<'a>(
    opts: &LoadOptions,
    areas: &'a [Area],
    phases: &mut Phases,
) -> Result<(ProbeConfig, Vec<&'a Area>, AttachReport), LoadError> {
    let mut kbtf = btf::KernelBtf::open(&opts.btf_dir).map_err(|source| LoadError::Btf {
        dir: opts.btf_dir.clone(),
        source,
    })?;
    phases.mark("kernel BTF read");
    let mut cfg = ProbeConfig::unresolved();
    if opts.traced_pids.is_some() {
        cfg.filter_mode = rdmatrace_common::config::FILTER_TRACED;
        cfg.follow_forks = u32::from(opts.follow_forks);
    }
    if opts.cgroup_filter {
        // Processes of the cgroups user space keeps in WANTED_CGROUPS, and any in TRACED.
        cfg.filter_mode = rdmatrace_common::config::FILTER_CGROUP;
    }
    let mut report = AttachReport::default();
    let mut usable: Vec<&Area> = Vec::new();
    let profile = opts.cpu_hz.map(|_| &crate::collect::profile::AREA);
    for area in areas.iter().chain(profile) {
        let off = |report: &mut AttachReport, why: String| {
            report
                .probes
                .extend(area.probes.iter().map(|spec| ProbeStatus {
                    area: area.name,
                    rdma: area.rdma,
                    spec: *spec,
                    state: ProbeState::Off(why.clone()),
                }));
        };
        if opts.no_probe.iter().any(|n| n == area.name) {
            off(&mut report, "switched off (--no-probe)".into());
            continue;
        }
        match (area.resolve)(&mut kbtf, &mut cfg) {
            Ok(notes) => {
                report
                    .notes
                    .extend(notes.into_iter().map(|n| format!("{}: {n}", area.name)));
                usable.push(area);
            }
            Err(e) => off(&mut report, e.to_string()),
        }
    }
    phases.mark("offsets resolved (modules' BTF read as needed)");
    Ok((cfg, usable, report))
}

/// Whether the running kernel (or a loaded module) has the function `name`; `/proc/kallsyms`
/// is read once per load, when first needed (it is megabytes).
pub(super) fn kernel_has(kallsyms: &mut Option<String>, name: &str) -> bool {
    let k = kallsyms
        .get_or_insert_with(|| std::fs::read_to_string("/proc/kallsyms").unwrap_or_default());
    super::kallsyms_has(k, name)
}

/// The symbol tables of the libraries uprobes go into, each read once.
pub(super) type LibSymbols =
    std::collections::HashMap<std::path::PathBuf, Result<super::uprobe::Symbols, String>>;

/// Start-up phases timed into [`AttachReport::timings`].
pub(super) struct Phases {
    last: std::time::Instant,
    pub(super) out: Vec<(&'static str, std::time::Duration)>,
}

impl Phases {
    pub(super) fn new() -> Phases {
        Phases {
            last: std::time::Instant::now(),
            out: Vec::new(),
        }
    }

    /// The time since the previous mark, added to `phase`.
    pub(super) fn mark(&mut self, phase: &'static str) {
        let now = std::time::Instant::now();
        let d = now - self.last;
        self.last = now;
        match self.out.iter_mut().find(|(p, _)| *p == phase) {
            Some(e) => e.1 += d,
            None => self.out.push((phase, d)),
        }
    }
}
