//! Probe links made here rather than by aya: a `perf_event_open` of the kprobe or uprobe PMU,
//! then `BPF_LINK_CREATE` (with the cookie) or, before perf links (Linux 5.15), the
//! `PERF_EVENT_IOC_SET_BPF` ioctl. Two reasons:
//! - a kprobe's perf event needs no program: the attach pass opens (arms) every kprobe while
//!   the programs are still being verified on other threads, and links each when its program
//!   is ready (arming is serialized in the kernel; done after verification, it was the tail of
//!   the start-up);
//! - aya 0.14 asks the kernel whether cookies are supported before every uprobe it attaches
//!   with one (it loads a test program each time) and reads the PMU's sysfs files every time;
//!   here they are read once.
//!
//! A link is a descriptor: closing it detaches the probe.

use std::{
    ffi::CString,
    io,
    os::fd::{AsRawFd as _, BorrowedFd, FromRawFd as _, OwnedFd},
    sync::OnceLock,
};

use aya_obj::generated::{
    bpf_attach_type, bpf_attr, bpf_cmd, perf_event_attr, PERF_FLAG_FD_CLOEXEC,
};

/// `_IO('$', 0)` and `_IOW('$', 8, __u32)` of linux/perf_event.h.
const PERF_EVENT_IOC_ENABLE: libc::c_ulong = 0x2400;
const PERF_EVENT_IOC_SET_BPF: libc::c_ulong = 0x4004_2408;

/// Which dynamic-probe PMU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Pmu {
    Kprobe,
    Uprobe,
}

impl Pmu {
    fn dir(self) -> &'static str {
        match self {
            Pmu::Kprobe => "/sys/bus/event_source/devices/kprobe",
            Pmu::Uprobe => "/sys/bus/event_source/devices/uprobe",
        }
    }

    /// The PMU's perf type and the bit of `config` that makes a return probe, read once.
    fn read(self) -> Option<(u32, u32)> {
        static KPROBE: OnceLock<Option<(u32, u32)>> = OnceLock::new();
        static UPROBE: OnceLock<Option<(u32, u32)>> = OnceLock::new();
        let cell = match self {
            Pmu::Kprobe => &KPROBE,
            Pmu::Uprobe => &UPROBE,
        };
        *cell.get_or_init(|| {
            let ty = std::fs::read_to_string(format!("{}/type", self.dir())).ok()?;
            // "config:0"
            let bit = std::fs::read_to_string(format!("{}/format/retprobe", self.dir())).ok()?;
            Some((
                ty.trim().parse().ok()?,
                bit.trim().strip_prefix("config:")?.parse().ok()?,
            ))
        })
    }
}

/// Opens (arms) a probe: for kprobes `target` is the function's name and `offset` 0, for
/// uprobes the file's path and the code's file offset. Every process, reported through CPU 0's
/// event (as aya and libbpf do).
pub(super) fn open(pmu: Pmu, ret: bool, target: &[u8], offset: u64) -> io::Result<OwnedFd> {
    let (ty, bit) = pmu.read().ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::Unsupported,
            format!("{} does not describe the PMU", pmu.dir()),
        )
    })?;
    let target = CString::new(target).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: perf_event_attr is a plain C struct; all-zero is its documented default.
    let mut attr: perf_event_attr = unsafe { std::mem::zeroed() };
    attr.size = std::mem::size_of::<perf_event_attr>() as u32;
    attr.type_ = ty;
    if ret {
        attr.config = 1 << bit;
    }
    attr.__bindgen_anon_3.config1 = target.as_ptr() as u64;
    attr.__bindgen_anon_4.config2 = offset;
    // SAFETY: attr is a valid perf_event_attr whose config1 points at a NUL-terminated string
    // that outlives the call; pid -1 with cpu 0 is every process.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            &attr as *const perf_event_attr,
            -1 as libc::pid_t,
            0 as libc::c_int,
            -1 as libc::c_int,
            libc::c_ulong::from(PERF_FLAG_FD_CLOEXEC),
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a descriptor perf_event_open just returned, owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// Why a link was not made.
#[derive(Debug)]
pub(super) enum LinkError {
    /// This kernel has no perf links, and a cookie needs one.
    NoCookie,
    Failed(&'static str, io::Error),
}

impl std::fmt::Display for LinkError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LinkError::NoCookie => f.write_str("this kernel cannot pass a cookie (Linux 5.15)"),
            LinkError::Failed(call, e) => write!(f, "{call} failed: {e}"),
        }
    }
}

/// Runs the loaded program `prog` on the opened probe `perf`, with `cookie` (0 for none);
/// the descriptor that keeps it attached.
pub(super) fn link(prog: BorrowedFd<'_>, perf: OwnedFd, cookie: u64) -> Result<OwnedFd, LinkError> {
    // SAFETY: bpf_attr is a plain C union; all-zero is the documented default for every command.
    let mut attr: bpf_attr = unsafe { std::mem::zeroed() };
    attr.link_create.__bindgen_anon_1.prog_fd = prog.as_raw_fd() as u32;
    attr.link_create.__bindgen_anon_2.target_fd = perf.as_raw_fd() as u32;
    attr.link_create.attach_type = bpf_attach_type::BPF_PERF_EVENT as u32;
    attr.link_create.__bindgen_anon_3.perf_event.bpf_cookie = cookie;
    // SAFETY: BPF_LINK_CREATE with a valid bpf_attr of the size given; it reads the program and
    // perf descriptors, both open for the call.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            bpf_cmd::BPF_LINK_CREATE as libc::c_int,
            &mut attr as *mut bpf_attr,
            std::mem::size_of::<bpf_attr>() as libc::c_uint,
        )
    };
    if fd >= 0 {
        // SAFETY: a descriptor BPF_LINK_CREATE just returned, owned by nobody else. The link
        // holds the perf event, whose own descriptor closes here.
        return Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) });
    }
    let e = io::Error::last_os_error();
    // Before perf links the kernel does not know this attach type: the older ioctl, which
    // cannot pass a cookie, and the perf event's own descriptor keeps the program attached.
    if e.raw_os_error() != Some(libc::EINVAL) {
        return Err(LinkError::Failed("bpf_link_create", e));
    }
    if cookie != 0 {
        return Err(LinkError::NoCookie);
    }
    for (call, req, arg) in [
        (
            "PERF_EVENT_IOC_SET_BPF",
            PERF_EVENT_IOC_SET_BPF,
            prog.as_raw_fd(),
        ),
        ("PERF_EVENT_IOC_ENABLE", PERF_EVENT_IOC_ENABLE, 0),
    ] {
        // SAFETY: both ioctls take an int argument (a program descriptor, or nothing) on a
        // perf event descriptor that is open.
        if unsafe { libc::ioctl(perf.as_raw_fd(), req as _, arg) } != 0 {
            return Err(LinkError::Failed(call, io::Error::last_os_error()));
        }
    }
    Ok(perf)
}

/// One link, detached when dropped.
#[expect(dead_code, reason = "held only to be dropped")]
pub(crate) enum Held {
    /// A perf event with its program (kprobes, uprobes).
    Fd(OwnedFd),
    /// A raw tracepoint's, taken out of its program.
    RawTp(aya::programs::raw_trace_point::RawTracePointLink),
}

impl From<OwnedFd> for Held {
    fn from(fd: OwnedFd) -> Held {
        Held::Fd(fd)
    }
}

/// The links made here, by program (they detach when dropped), and the symbol tables of the
/// libraries uprobes went into (each read once).
#[derive(Default)]
pub(crate) struct Links {
    pub(super) libs: super::resolve::LibSymbols,
    pub(super) links: Vec<(&'static str, Held)>,
}

impl Links {
    /// Detaches every link of `program`.
    pub(super) fn drop_program(&mut self, program: &str) {
        self.links.retain(|(p, _)| *p != program);
    }

    /// Takes the links of `program` out, for the caller to drop (detach) when it suits.
    pub(super) fn take_program(&mut self, program: &str) -> Vec<Held> {
        let (taken, kept) = std::mem::take(&mut self.links)
            .into_iter()
            .partition(|(p, _)| *p == program);
        self.links = kept;
        taken.into_iter().map(|(_, fd)| fd).collect()
    }
}
