//! Attaching one probe: its program (verified, or loaded here) on its hook, and why not.

use std::path::PathBuf;

use std::os::fd::{AsFd as _, OwnedFd};

use aya::programs::{
    perf_event::{PerfEventConfig, PerfEventScope, SamplePolicy, SoftwareEvent},
    KProbe, PerfEvent, Program, ProgramError, RawTracePoint,
};

use super::{
    kprobes_supported,
    plink::{self, Pmu},
    program_error, uprobe, verify, LoadOptions,
};
use crate::collect::{Hook, ProbeSpec};

/// Why one probe did not attach.
pub(super) struct Failed {
    pub(super) why: String,
    /// The kernel said its function does not exist (`perf_event_open`: ENOENT).
    pub(super) absent: bool,
}

impl<S: Into<String>> From<S> for Failed {
    fn from(why: S) -> Failed {
        Failed {
            why: why.into(),
            absent: false,
        }
    }
}

/// Opens (arms) the kprobe of `spec` without its program (see [`super::plink`]). The kernel
/// answers ENOENT from its own symbol table when no function of that name exists in it or a
/// loaded module, so /proc/kallsyms (read whole, a quarter of a second in the lab) need not be
/// consulted.
pub(super) fn open_kprobe(spec: &ProbeSpec) -> Result<OwnedFd, Failed> {
    if !kprobes_supported() {
        return Err("this kernel has no kprobe support".into());
    }
    let ret = spec.hook == Hook::Kretprobe;
    plink::open(Pmu::Kprobe, ret, spec.target.as_bytes(), 0).map_err(|e| Failed {
        absent: e.raw_os_error() == Some(libc::ENOENT),
        why: format!(
            "cannot attach to {}: perf_event_open failed: {e}",
            spec.target
        ),
    })
}

/// Whether attaching a raw tracepoint failed because the kernel has no tracepoint of that name
/// (`BPF_RAW_TRACEPOINT_OPEN`: ENOENT), e.g. `sock_send_length` before Linux 6.3.
fn tracepoint_missing(e: &ProgramError) -> bool {
    matches!(
        e,
        ProgramError::SyscallError(aya::sys::SyscallError { call, io_error })
            if *call == "bpf_raw_tracepoint_open" && io_error.raw_os_error() == Some(libc::ENOENT)
    )
}

/// Attaches `prog` (verified, or loaded here) to the hook of `spec`; a kprobe's or uprobe's
/// perf event may have been `opened` already.
pub(super) fn attach_one(
    prog: &mut Program,
    spec: &ProbeSpec,
    opened: Option<OwnedFd>,
    opts: &LoadOptions,
    lib_dirs: &[PathBuf],
    links: &mut plink::Links,
) -> Result<(), Failed> {
    match spec.hook {
        Hook::Kprobe | Hook::Kretprobe => {
            let perf = match opened {
                Some(perf) => perf,
                None => open_kprobe(spec)?,
            };
            verify::load(prog, spec)?;
            let p: &mut KProbe = prog.try_into().map_err(program_error)?;
            let fd = p.fd().map_err(program_error)?;
            let link = plink::link(fd.as_fd(), perf, 0)
                .map_err(|e| format!("cannot attach to {}: {e}", spec.target))?;
            links.links.push((spec.program, link.into()));
        }
        Hook::RawTracepoint => {
            verify::load(prog, spec)?;
            let p: &mut RawTracePoint = prog.try_into().map_err(program_error)?;
            let id = p.attach(spec.target).map_err(|e| {
                let absent = tracepoint_missing(&e);
                Failed {
                    absent,
                    why: if absent {
                        format!("this kernel has no tracepoint {}", spec.target)
                    } else {
                        format!(
                            "cannot attach to raw_tp/{}: {}",
                            spec.target,
                            program_error(e)
                        )
                    },
                }
            })?;
            // Held with the others, so that it can be detached apart from its program.
            let link = p.take_link(id).map_err(program_error)?;
            links.links.push((spec.program, plink::Held::RawTp(link)));
        }
        Hook::Uprobe { lib, cookie } => {
            let path = uprobe::find_library(lib, lib_dirs).map_err(|e| e.to_string())?;
            let perf = match opened {
                Some(perf) => perf,
                None => uprobe::open(spec.target, &path, &mut links.libs)?,
            };
            verify::load(prog, spec)?;
            uprobe::link(
                prog,
                spec.program,
                perf,
                (spec.target, &path),
                cookie,
                links,
            )?;
        }
        Hook::PerfCpuClock => {
            let hz = opts.cpu_hz.ok_or("no sampling frequency given")?;
            let cpus = aya::util::online_cpus()
                .map_err(|(what, e)| format!("cannot list the online CPUs ({what}): {e}"))?;
            let p: &mut PerfEvent = prog.try_into().map_err(program_error)?;
            p.load().map_err(program_error)?;
            for cpu in cpus {
                p.attach(
                    PerfEventConfig::Software(SoftwareEvent::CpuClock),
                    PerfEventScope::AllProcessesOneCpu { cpu },
                    SamplePolicy::Frequency(hz),
                    false,
                )
                .map_err(|e| {
                    format!(
                        "cannot open a {hz} Hz cpu-clock perf event on CPU {cpu}: {} \
                         (kernel.perf_event_max_sample_rate may be lower)",
                        program_error(e)
                    )
                })?;
            }
        }
        Hook::Fentry | Hook::TpBtf => {
            return Err("attached by the typed-program loader, not the attach pass".into())
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_failed_raw_tracepoint_open_with_enoent_means_no_such_tracepoint() {
        let err = |call, errno| {
            ProgramError::SyscallError(aya::sys::SyscallError {
                call,
                io_error: std::io::Error::from_raw_os_error(errno),
            })
        };
        assert!(tracepoint_missing(&err(
            "bpf_raw_tracepoint_open",
            libc::ENOENT
        )));
        assert!(!tracepoint_missing(&err(
            "bpf_raw_tracepoint_open",
            libc::EPERM
        )));
        assert!(!tracepoint_missing(&err("perf_event_open", libc::ENOENT)));
    }
}
