//! Anchoring kernel CLOCK_MONOTONIC timestamps to wall-clock time (UTC), so recordings from
//! several hosts line up. Reading the clocks is the only I/O here; the conversion is pure.

/// `wall = monotonic + offset`, measured once when tracing starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClockAnchor {
    /// Wall-clock minus monotonic, in ns.
    pub offset_ns: i128,
}

impl ClockAnchor {
    /// An anchor with a known offset (replay, tests).
    pub const fn fixed(offset_ns: i128) -> ClockAnchor {
        ClockAnchor { offset_ns }
    }

    /// Measures the offset now.
    pub fn now() -> ClockAnchor {
        let mono = read_clock(libc::CLOCK_MONOTONIC);
        let wall = read_clock(libc::CLOCK_REALTIME);
        ClockAnchor {
            offset_ns: wall - mono,
        }
    }

    pub fn wall_ns(&self, mono_ns: u64) -> u64 {
        (i128::from(mono_ns) + self.offset_ns).clamp(0, i128::from(u64::MAX)) as u64
    }
}

fn read_clock(id: libc::clockid_t) -> i128 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; clock_gettime only writes it. Both clocks
    // exist on every Linux, so the call cannot fail in practice; on failure ts stays 0.
    unsafe { libc::clock_gettime(id, &mut ts) };
    i128::from(ts.tv_sec) * 1_000_000_000 + i128::from(ts.tv_nsec)
}

/// `HH:MM:SS.mmm` (UTC) of a wall-clock ns value, for the live text output.
pub fn hms_millis(wall_ns: u64) -> String {
    let secs = wall_ns / 1_000_000_000;
    let millis = (wall_ns % 1_000_000_000) / 1_000_000;
    let day = secs % 86_400;
    format!(
        "{:02}:{:02}:{:02}.{:03}",
        day / 3600,
        (day / 60) % 60,
        day % 60,
        millis
    )
}

/// RFC 3339 UTC with ns, for reports and JSON.
pub fn rfc3339(wall_ns: u64) -> String {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_nanos(wall_ns);
    humantime::format_rfc3339_nanos(t).to_string()
}

/// CLOCK_MONOTONIC now, in ns (the kernel programs' time base).
pub fn monotonic_ns() -> u64 {
    read_clock(libc::CLOCK_MONOTONIC).max(0) as u64
}
