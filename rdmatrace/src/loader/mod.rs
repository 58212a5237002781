//! Loading the kernel programs: attach every probe that this kernel allows (on the object's
//! thread) while offsets are resolved from BTF (on this one), take off the areas whose offsets
//! did not resolve, write the config map (the programs emit nothing before it), and report the
//! probes that stay off with the reason.

use crate::btf;
mod attach;
mod btfprog;
pub mod copies;
pub mod memory;
pub mod misses;
mod pass;
mod plink;
mod resolve;
pub mod slots;
pub mod typed;
pub mod uprobe;
mod verify;

use std::path::PathBuf;

use aya::{programs::ProgramError, Ebpf, EbpfLoader};

use crate::collect::{Area, Hook, ProbeSpec, Role, AREAS};
use resolve::{kernel_has, Phases};

/// The compiled kernel programs, embedded at build time.
static PROBES_OBJ: &[u8] =
    aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/rdmatrace-probes"));

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error(
        "loading eBPF needs root (or CAP_BPF + CAP_PERFMON): run rdmatrace as root, or replay a \
         recording with `--input`, which needs no privileges"
    )]
    Permission {
        #[source]
        source: aya::EbpfError,
    },
    #[error("cannot load the eBPF object: {0}")]
    Object(#[source] aya::EbpfError),
    #[error("cannot read this kernel's BTF from {dir} (--btf-dir; CONFIG_DEBUG_INFO_BTF=y kernels have /sys/kernel/btf)")]
    Btf {
        dir: PathBuf,
        #[source]
        source: btf::BtfError,
    },
    #[error("the eBPF object has no map `{0}`")]
    MissingMap(&'static str),
    #[error("cannot write the config map: {0}")]
    Config(#[source] aya::maps::MapError),
    #[error("no probe could attach on this kernel:\n{0}")]
    NothingAttached(String),
    #[error("the thread loading the eBPF object panicked")]
    LoaderThread,
}

/// Settings for one load.
#[derive(Clone, Debug)]
pub struct LoadOptions {
    /// Normally `/sys/kernel/btf`.
    pub btf_dir: PathBuf,
    /// Kernel-side process filter: `None` reports every process; `Some(pids)` only these (more
    /// can be added after load with [`Tracer::trace_pid`]).
    pub traced_pids: Option<Vec<u32>>,
    /// Also trace the descendants of traced processes as they fork.
    pub follow_forks: bool,
    /// Ring buffer size in bytes (power of two, >= page size).
    pub ringbuf_bytes: u32,
    /// On-CPU profile at this frequency (Hz); `None`: no profile (the default).
    pub cpu_hz: Option<u64>,
    /// Kernel-side cgroup filter: only processes of the cgroups put in `WANTED_CGROUPS` after
    /// load (and any in `traced_pids`).
    pub cgroup_filter: bool,
    /// Areas not loaded (`--no-probe AREA`), reported as off.
    pub no_probe: Vec<String>,
    /// Typed programs (see `typed`) in place of kprobes and raw tracepoints where the kernel
    /// takes them; off (`--no-typed-probes`): the kprobes and raw tracepoints count.
    pub typed: bool,
}

impl Default for LoadOptions {
    fn default() -> Self {
        LoadOptions {
            btf_dir: PathBuf::from("/sys/kernel/btf"),
            traced_pids: None,
            follow_forks: false,
            ringbuf_bytes: rdmatrace_common::limits::RINGBUF_BYTES,
            cpu_hz: None,
            cgroup_filter: false,
            no_probe: Vec::new(),
            typed: true,
        }
    }
}

/// Whether one probe is running.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProbeState {
    Attached,
    Off(String),
    /// A fallback left unattached because what it stands in for is attached.
    Standby(String),
}

#[derive(Clone, Debug)]
pub struct ProbeStatus {
    pub area: &'static str,
    pub rdma: bool,
    pub spec: ProbeSpec,
    pub state: ProbeState,
}

/// What attached and what did not, and why.
#[derive(Clone, Debug, Default)]
pub struct AttachReport {
    pub probes: Vec<ProbeStatus>,
    /// Details left out because an optional BTF member is missing.
    pub notes: Vec<String>,
    /// Where the start-up time went, phase by phase (shown by `doctor`).
    pub timings: Vec<(&'static str, std::time::Duration)>,
}

impl AttachReport {
    pub fn attached(&self) -> impl Iterator<Item = &ProbeStatus> {
        self.probes
            .iter()
            .filter(|p| p.state == ProbeState::Attached)
    }

    pub fn any_rdma(&self) -> bool {
        self.attached().any(|p| p.rdma)
    }

    /// Why the fallback `spec` of `area` need not attach: what it stands in for is attached.
    pub fn standby_reason(&self, area: &str, spec: &ProbeSpec) -> Option<String> {
        let Role::InsteadOf(program) = spec.role else {
            return None;
        };
        let primary = self.probes.iter().find(|p| {
            p.area == area && p.spec.program == program && p.state == ProbeState::Attached
        })?;
        Some(format!("not needed: {} is attached", primary.spec.target))
    }

    /// The attached fallback that does the work of `primary`, if any.
    fn stand_in(&self, primary: &ProbeStatus) -> Option<&ProbeStatus> {
        self.probes.iter().find(|p| {
            p.area == primary.area
                && p.spec.role == Role::InsteadOf(primary.spec.program)
                && p.state == ProbeState::Attached
        })
    }

    /// One line per area and reason: `area probes off (targets): reason`.
    pub fn off_lines(&self) -> Vec<String> {
        let mut groups: Vec<(&str, String, Vec<&str>)> = Vec::new();
        for p in &self.probes {
            if let ProbeState::Off(why) = &p.state {
                let why = match self.stand_in(p) {
                    Some(s) => format!("{why}; {} {} stands in", s.spec.hook, s.spec.target),
                    None => why.clone(),
                };
                match groups
                    .iter_mut()
                    .find(|(a, w, _)| *a == p.area && *w == why)
                {
                    Some((_, _, targets)) => {
                        if !targets.contains(&p.spec.target) {
                            targets.push(p.spec.target);
                        }
                    }
                    None => groups.push((p.area, why, vec![p.spec.target])),
                }
            }
        }
        groups
            .into_iter()
            .map(|(area, why, targets)| {
                format!("{area} probes off ({}): {why}", targets.join(", "))
            })
            .collect()
    }
}

/// Loaded programs; dropping it detaches everything.
pub struct Tracer {
    pub ebpf: Ebpf,
    pub report: AttachReport,
    /// The kprobe and uprobe links made here rather than by aya (they detach when dropped).
    links: plink::Links,
    /// Per-QP traffic slots, mapped for the sampler; `None` when unused (`ProbeConfig::qp_slots`).
    pub slots: Option<slots::QpSlots>,
    /// Per-process TCP byte slots, likewise (`ProbeConfig::sock_slots`).
    pub sock_slots: Option<slots::SockSlots>,
    /// The typed programs, when they count in place of the ones they replace.
    typed: Option<typed::TypedLinks>,
}

/// True when the kernel can create kprobe perf events at all.
fn kprobes_supported() -> bool {
    std::path::Path::new("/sys/bus/event_source/devices/kprobe").exists()
}

/// `addr type name [module]` lines: is `name` a text symbol?
fn kallsyms_has(kallsyms: &str, name: &str) -> bool {
    kallsyms.lines().any(|l| {
        let mut f = l.split_whitespace();
        let kind = f.nth(1).unwrap_or("");
        matches!(kind, "t" | "T") && f.next() == Some(name)
    })
}

fn is_permission(e: &aya::EbpfError) -> bool {
    let text = format!("{e:?}");
    text.contains("PermissionDenied")
        || text.contains("EPERM")
        || text.contains("Operation not permitted")
}

fn program_error(e: ProgramError) -> String {
    match e {
        ProgramError::LoadError {
            io_error,
            verifier_log,
        } => {
            // The verdict is at the end of the log; the whole log is for developers.
            let log = verifier_log.to_string();
            let tail: Vec<&str> = log.lines().rev().take(4).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            format!(
                "the verifier rejected it ({io_error}): {}",
                tail.join(" | ")
            )
        }
        other => {
            let mut s = other.to_string();
            let mut src = std::error::Error::source(&other);
            while let Some(e) = src {
                s += &format!(": {e}");
                src = e.source();
            }
            s
        }
    }
}

/// Where the loader's thread finds no kernel BTF (see [`loader_without_btf`]).
const NO_BTF_ROOT: &std::ffi::CStr = c"/sys/kernel/btf";

/// A loader that has not read the kernel's BTF. aya 0.14's `EbpfLoader::new` reads and parses
/// all of `/sys/kernel/btf/vmlinux`; this object needs none of it (`load` sets `.btf(None)`), the
/// loader has no other constructor and its fields are private. In the emulated lab that parse
/// was most of the object load (about 0.7 s of 1 s). So the loader is made on a thread of its
/// own that first takes its own root and working directory (`unshare(CLONE_FS)`: this thread
/// only, nothing changes for the process or the host) and moves its root to a directory below
/// which the kernel's BTF is not found: the read fails at once and the loader comes out without
/// BTF, as `load` wants it. Without CAP_SYS_CHROOT (or if unsharing fails) the thread makes an
/// ordinary loader, which parses the BTF as before. The thread ends when the loader is made.
fn loader_without_btf() -> EbpfLoader<'static> {
    leave_kernel_btf_behind();
    EbpfLoader::new()
}

/// Moves the calling thread's root (its own, once `CLONE_FS` is unshared) to
/// [`NO_BTF_ROOT`]; whether it did. Only for a thread that ends soon after: it no longer sees
/// the host's files.
fn leave_kernel_btf_behind() -> bool {
    // SAFETY: unshare(CLONE_FS) gives the calling thread a copy of the process's root, working
    // directory and umask; no memory is involved.
    if unsafe { libc::unshare(libc::CLONE_FS) } != 0 {
        return false;
    }
    // SAFETY: a NUL-terminated path; with CLONE_FS unshared above, chroot moves this thread's
    // root only (never reached when unsharing failed).
    unsafe { libc::chroot(NO_BTF_ROOT.as_ptr()) == 0 }
}

/// [`loader_without_btf`], made on a thread of its own (it moves that thread's root) that
/// ends once the loader is made; an ordinary loader if that thread cannot be started.
fn loader_from_own_thread() -> EbpfLoader<'static> {
    std::thread::Builder::new()
        .name("rdmatrace-loader".into())
        .spawn(loader_without_btf)
        .ok()
        .and_then(|h| h.join().ok())
        .unwrap_or_default()
}

/// Loads the object, resolves every area's offsets, attaches what this kernel allows.
pub fn load(opts: &LoadOptions, areas: &[Area]) -> Result<Tracer, LoadError> {
    let mut phases = Phases::new();
    let profile = opts.cpu_hz.map(|_| &crate::collect::profile::AREA);
    let wanted: Vec<&Area> = areas
        .iter()
        .chain(profile)
        .filter(|a| !opts.no_probe.iter().any(|n| n == a.name))
        .collect();
    // Two threads. A second one loads the object, creates its maps and attaches every probe of
    // the wanted areas (the probes carry no CO-RE relocations and no program is typed by the
    // kernel's BTF, so the object needs no kernel BTF: see
    // `the_probes_need_no_kernel_btf_to_load`; and the programs emit nothing until their config
    // is written, below) while this one reads BTF and resolves every area's offsets.
    // A third one opens (arms) the kprobes from the start (see `pass::open_kprobes`).
    // The object read again for the typed programs (see `typed`), beside the rest.
    let names: Vec<&str> = wanted.iter().map(|a| a.name).collect();
    let typed_obj = typed::read_object(opts, &names, PROBES_OBJ);
    let (resolved, loaded) = std::thread::scope(|s| {
        let wanted = &wanted;
        // (None on a kernel without kprobes: nothing to open.)
        let kprobes = kprobes_supported().then(|| {
            s.spawn(|| {
                let mut side = Phases::new();
                let opened = pass::open_kprobes(wanted);
                side.mark("(beside it) kprobes opened");
                (opened, side.out)
            })
        });
        let loader = s.spawn(move || {
            let mut side = Phases::new();
            let mut opened_phases = Vec::new();
            let loaded = load_and_attach(opts, wanted, &mut side, || {
                let (opened, out) = kprobes?.join().ok()?;
                opened_phases = out;
                Some(opened)
            });
            side.out.extend(opened_phases);
            (loaded, side.out)
        });
        let resolved = resolve::areas(opts, areas, &mut phases);
        (resolved, loader.join())
    });
    let (mut cfg, usable, mut report) = resolved?;
    phases.mark("waiting for the object's thread (load and attach pass)");
    let (loaded, side) = loaded.map_err(|_| LoadError::LoaderThread)?;
    phases.out.extend(side);
    let (mut ebpf, attached, mut links) = loaded?;
    // Areas attached before their offsets failed to resolve go off again, with resolve's
    // reason (already in the report).
    let kept = |area: &str| usable.iter().any(|u| u.name == area);
    let off: Vec<&Area> = wanted.iter().copied().filter(|a| !kept(a.name)).collect();
    pass::unload_areas(&mut ebpf, &mut links, &off, &usable);
    report
        .probes
        .extend(attached.probes.into_iter().filter(|p| kept(p.area)));
    let (slots, sock_slots) = slots::mapped(&ebpf, &mut report, &mut cfg);
    let typed = typed::replace(
        typed_obj,
        &mut ebpf,
        &mut links,
        &mut report,
        &mut cfg,
        &mut phases,
    );
    resolve::write_config(&mut ebpf, cfg)?;
    phases.mark("config set (the programs start emitting)");
    report.timings = phases.out;
    if report.attached().next().is_none() {
        return Err(LoadError::NothingAttached(report.off_lines().join("\n")));
    }
    Ok(Tracer {
        ebpf,
        report,
        links,
        slots,
        sock_slots,
        typed,
    })
}

/// The object's thread: loads it (its maps created), fills the process filter, and attaches
/// every probe of `areas`.
fn load_and_attach(
    opts: &LoadOptions,
    areas: &[&Area],
    phases: &mut Phases,
    opened: impl FnOnce() -> Option<pass::Opened>,
) -> Result<(Ebpf, AttachReport, plink::Links), LoadError> {
    let ebpf = loader_from_own_thread()
        .btf(None)
        .map_max_entries("EVENTS", opts.ringbuf_bytes)
        .load(PROBES_OBJ);
    phases.mark("(beside it) eBPF object loaded, maps created");
    let mut ebpf = ebpf.map_err(|e| {
        if is_permission(&e) {
            LoadError::Permission { source: e }
        } else {
            LoadError::Object(e)
        }
    })?;
    for pid in opts.traced_pids.iter().flatten() {
        insert_traced(&mut ebpf, *pid)?;
    }
    let mut links = plink::Links::default();
    let report = pass::attach_areas(&mut ebpf, areas, opts, phases, &mut links, opened);
    Ok((ebpf, report, links))
}

fn insert_traced(ebpf: &mut Ebpf, pid: u32) -> Result<(), LoadError> {
    let map = ebpf
        .map_mut("TRACED")
        .ok_or(LoadError::MissingMap("TRACED"))?;
    let mut traced: aya::maps::HashMap<_, u32, u32> =
        aya::maps::HashMap::try_from(map).map_err(LoadError::Config)?;
    traced.insert(pid, 1, 0).map_err(LoadError::Config)
}

impl Tracer {
    /// Attaches every uprobe of the areas loaded for library `lib` (`libibverbs.so.1`...)
    /// to another copy of it at `path` (a container's own); how many attached, or why none.
    pub fn attach_library_copy(
        &mut self,
        lib: &str,
        path: &std::path::Path,
    ) -> Result<usize, String> {
        let specs: Vec<ProbeSpec> = self
            .report
            .probes
            .iter()
            .filter(|p| matches!(p.state, ProbeState::Attached))
            .filter(|p| matches!(p.spec.hook, Hook::Uprobe { lib: l, .. } if l == lib))
            .map(|p| p.spec)
            .collect();
        let mut n = 0;
        let mut first_err = None;
        let mut made = plink::Links::default();
        for spec in specs {
            let Hook::Uprobe { cookie, .. } = spec.hook else {
                continue;
            };
            let Some(prog) = self.ebpf.program_mut(spec.program) else {
                continue;
            };
            match uprobe::attach(prog, spec.program, spec.target, path, cookie, &mut made) {
                Ok(()) => n += 1,
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        self.links.links.append(&mut made.links);
        match (n, first_err) {
            (0, Some(e)) => Err(e),
            (0, None) => Err(format!("no {lib} probe is attached on the host's copy")),
            (n, _) => Ok(n),
        }
    }

    /// Adds a process to the kernel-side filter set.
    pub fn trace_pid(&mut self, pid: u32) -> Result<(), LoadError> {
        insert_traced(&mut self.ebpf, pid)
    }

    /// Removes a process from the kernel-side filter set.
    pub fn untrace_pid(&mut self, pid: u32) -> Result<(), LoadError> {
        let map = self
            .ebpf
            .map_mut("TRACED")
            .ok_or(LoadError::MissingMap("TRACED"))?;
        let mut traced: aya::maps::HashMap<_, u32, u32> =
            aya::maps::HashMap::try_from(map).map_err(LoadError::Config)?;
        traced.remove(&pid).map_err(LoadError::Config)
    }
}

/// Every area the tool knows.
pub fn all_areas() -> &'static [Area] {
    AREAS
}

/// The names of the areas `--no-probe` can switch off.
pub fn area_names() -> Vec<&'static str> {
    AREAS.iter().map(|a| a.name).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collect::tcp;

    /// The thread that makes aya's loader stops seeing the kernel's BTF, and nothing else
    /// changes: the process (this thread) still sees it, its root unmoved.
    #[test]
    #[ignore = "root: moving a thread's root needs CAP_SYS_CHROOT; run through `cargo xtask test`"]
    fn root_the_loader_thread_alone_loses_sight_of_the_kernel_btf() {
        let btf = std::path::Path::new("/sys/kernel/btf/vmlinux");
        assert!(btf.exists(), "this host has no kernel BTF to hide");
        let root = || {
            std::fs::metadata("/")
                .map(|m| std::os::unix::fs::MetadataExt::ino(&m))
                .ok()
        };
        let before = root();
        let (moved, seen) = std::thread::spawn(|| (super::leave_kernel_btf_behind(), btf.exists()))
            .join()
            .expect("the thread ran");
        assert!(moved, "the thread's root was not moved");
        assert!(!seen, "the moved thread still sees {}", btf.display());
        assert!(btf.exists(), "this thread lost sight of {}", btf.display());
        assert_eq!(root(), before, "the process's root changed");
    }

    #[test]
    fn the_probes_need_no_kernel_btf_to_load() {
        // `load` creates the object without the kernel's BTF, which aya uses only for CO-RE
        // relocations: a program with one would load unrelocated and read the wrong fields.
        let obj = aya_obj::Object::parse(PROBES_OBJ).expect("the embedded object parses");
        assert!(
            !obj.has_btf_relocations(),
            "the kernel programs now carry CO-RE relocations: give `load` the kernel BTF again"
        );
        assert!(obj.programs.len() > 10, "the probes are in the object");
    }

    fn status(program: &str, state: ProbeState) -> ProbeStatus {
        let spec = *tcp::AREA
            .probes
            .iter()
            .find(|s| s.program == program)
            .expect("a tcp program");
        ProbeStatus {
            area: "tcp",
            rdma: false,
            spec,
            state,
        }
    }

    fn spec(program: &str) -> ProbeSpec {
        status(program, ProbeState::Attached).spec
    }

    #[test]
    fn kallsyms_lookup_matches_whole_text_symbols_only() {
        let k = "ffffffffc0a264d0 T rdma_restrack_commit_del\t[ib_core]\n\
                 ffffffffc0a26720 t rdma_restrack_del.cold\t[ib_core]\n\
                 ffffffff82000000 D rdma_restrack_data\n";
        assert!(kallsyms_has(k, "rdma_restrack_commit_del"));
        assert!(!kallsyms_has(k, "rdma_restrack_del"));
        assert!(!kallsyms_has(k, "rdma_restrack_data"));
        assert!(!kallsyms_has(k, "rdma_restrack_commit"));
    }

    #[test]
    fn a_fallback_stands_by_only_while_what_it_replaces_is_attached() {
        let mut report = AttachReport::default();
        report
            .probes
            .push(status("tcp_send_bytes", ProbeState::Attached));
        report.probes.push(status(
            "tcp_recv_bytes",
            ProbeState::Off("this kernel has no tracepoint sock_recv_length".into()),
        ));
        assert_eq!(
            report
                .standby_reason("tcp", &spec("tcp_send_bytes_ret"))
                .as_deref(),
            Some("not needed: sock_send_length is attached")
        );
        // Off on this kernel: the kretprobe must attach in its place.
        assert_eq!(
            report.standby_reason("tcp", &spec("tcp_recv_bytes_ret")),
            None
        );
        // Same program name in another area does not count; primaries never stand by.
        assert_eq!(
            report.standby_reason("qp", &spec("tcp_send_bytes_ret")),
            None
        );
        assert_eq!(report.standby_reason("tcp", &spec("tcp_send_bytes")), None);
        // A standing-by fallback is not an "off" probe.
        report.probes.push(status(
            "tcp_send_bytes_ret",
            ProbeState::Standby("not needed".into()),
        ));
        let off = report.off_lines();
        assert_eq!(off.len(), 1, "{off:?}");
        assert!(off[0].contains("sock_recv_length"), "{off:?}");
        // Once the fallback is attached, the line says so.
        report
            .probes
            .push(status("tcp_recv_bytes_ret", ProbeState::Attached));
        assert_eq!(
            report.off_lines(),
            [
                "tcp probes off (sock_recv_length): this kernel has no tracepoint \
              sock_recv_length; kretprobe tcp_recvmsg stands in"
            ]
        );
    }
}
