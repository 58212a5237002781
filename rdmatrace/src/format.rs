//! Shared formatting: errno and wait-status texts, GIDs, byte sizes and durations. Below
//! `correlate` and `sinks`, so analysis, timelines and outputs all say these things one way.

/// `-22` -> `-22 (EINVAL)`.
pub fn errno_text(ret: i32) -> String {
    // checked: a corrupt or crafted record can hold i32::MIN (found by fuzzing).
    let name = match ret.checked_neg().unwrap_or(0) {
        1 => "EPERM",
        2 => "ENOENT",
        5 => "EIO",
        11 => "EAGAIN",
        12 => "ENOMEM",
        13 => "EACCES",
        14 => "EFAULT",
        16 => "EBUSY",
        19 => "ENODEV",
        22 => "EINVAL",
        28 => "ENOSPC",
        38 => "ENOSYS",
        61 => "ENODATA",
        95 => "EOPNOTSUPP",
        99 => "EADDRNOTAVAIL",
        101 => "ENETUNREACH",
        110 => "ETIMEDOUT",
        113 => "EHOSTUNREACH",
        _ => return ret.to_string(),
    };
    format!("{ret} ({name})")
}

/// wait(2) status as `code N` or `signal NAME`.
pub fn exit_text(status: i32) -> String {
    let sig = status & 0x7f;
    if sig == 0 {
        format!("code {}", (status >> 8) & 0xff)
    } else {
        let core = if status & 0x80 != 0 {
            " (core dumped)"
        } else {
            ""
        };
        format!("signal {sig}{core}")
    }
}

/// IPv4-mapped GIDs (RoCEv2 over IPv4) as dotted quads, others as IPv6 text.
pub fn gid_text(gid: &[u8; 16]) -> String {
    let v6 = std::net::Ipv6Addr::from(*gid);
    match v6.to_ipv4_mapped() {
        Some(v4) => v4.to_string(),
        None => v6.to_string(),
    }
}

/// A byte count in binary units: `512 B`, `1.5 KiB`, `12.5 MiB`, `2.0 GiB`.
pub fn size(b: u64) -> String {
    if b >= 1 << 30 {
        format!("{:.1} GiB", b as f64 / (1u64 << 30) as f64)
    } else if b >= 1 << 20 {
        format!("{:.1} MiB", b as f64 / (1u64 << 20) as f64)
    } else if b >= 1 << 10 {
        format!("{:.1} KiB", b as f64 / 1024.0)
    } else {
        format!("{b} B")
    }
}

/// Nanoseconds as seconds with one decimal: `1.5s`.
pub fn secs(ns: u64) -> String {
    format!("{:.1}s", ns as f64 / 1e9)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errno_text_names_known_errors_and_survives_any_value() {
        assert_eq!(errno_text(-22), "-22 (EINVAL)");
        assert_eq!(errno_text(-9999), "-9999");
        assert_eq!(errno_text(22), "22");
        // Negating i32::MIN overflows: once a panic on a crafted recording.
        assert_eq!(errno_text(i32::MIN), i32::MIN.to_string());
    }

    #[test]
    fn sizes_exit_statuses_and_gids_read_as_people_write_them() {
        assert_eq!(size(512), "512 B");
        assert_eq!(size(1536), "1.5 KiB");
        assert_eq!(size(3 << 20), "3.0 MiB");
        assert_eq!(exit_text(1 << 8), "code 1");
        assert_eq!(exit_text(11 | 0x80), "signal 11 (core dumped)");
        let mut g = [0u8; 16];
        g[10] = 0xff;
        g[11] = 0xff;
        g[12..].copy_from_slice(&[192, 0, 2, 1]);
        assert_eq!(gid_text(&g), "192.0.2.1");
        assert_eq!(secs(1_500_000_000), "1.5s");
    }
}
