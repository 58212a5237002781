//! What the loaded maps hold in kernel memory: the `memlock` the kernel accounts for each map
//! this process has open (`/proc/self/fdinfo`), the figure `bpftool map show` prints. From
//! Linux 6.4 that is the memory a map really uses; before, only its keys and values (a ring
//! buffer shows as 0). Per-CPU maps are counted apart: their values are kept once per possible
//! CPU.

use std::fs;

/// `BPF_MAP_TYPE_PERCPU_HASH`, `_PERCPU_ARRAY`, `_LRU_PERCPU_HASH`, `_PERCPU_CGROUP_STORAGE`.
const PER_CPU_TYPES: [u32; 4] = [5, 6, 10, 21];

/// Kernel memory of the maps a process holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MapMemory {
    pub maps: usize,
    pub bytes: u64,
    /// The part in per-CPU maps.
    pub per_cpu_bytes: u64,
}

/// `(map_type, memlock, map_id)` of one map's fdinfo text (the id where the kernel says it);
/// `None` when it is not a map's.
fn parse_fdinfo(text: &str) -> Option<(u32, u64, Option<u32>)> {
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .map(str::trim)
    };
    Some((
        field("map_type")?.parse().ok()?,
        field("memlock")?.parse().ok()?,
        field("map_id").and_then(|i| i.parse().ok()),
    ))
}

/// Sums over this process's open BPF maps (every map it loaded: the tracer opens no others),
/// each once however many of its descriptors are open (the sampler opens one of its own).
pub fn of_this_process() -> std::io::Result<MapMemory> {
    let mut m = MapMemory::default();
    let mut seen = std::collections::HashSet::new();
    for fd in fs::read_dir("/proc/self/fd")? {
        let fd = fd?;
        if fs::read_link(fd.path()).is_ok_and(|l| l.as_os_str() == "anon_inode:bpf-map") {
            let info = match fs::read_to_string(format!(
                "/proc/self/fdinfo/{}",
                fd.file_name().to_string_lossy()
            )) {
                Ok(i) => i,
                // Closed meanwhile (another thread): not a map of ours any more.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            };
            if let Some((kind, bytes, id)) = parse_fdinfo(&info) {
                if id.is_some_and(|id| !seen.insert(id)) {
                    continue;
                }
                m.maps += 1;
                m.bytes += bytes;
                if PER_CPU_TYPES.contains(&kind) {
                    m.per_cpu_bytes += bytes;
                }
            }
        }
    }
    Ok(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_maps_fdinfo_gives_its_type_and_memlock() {
        let text = "pos:\t0\nflags:\t02000002\nmnt_id:\t15\nino:\t1057\nmap_type:\t9\n\
                    key_size:\t8\nvalue_size:\t4\nmax_entries:\t4096\nmap_flags:\t0x0\n\
                    map_extra:\t0x0\nmemlock:\t328576\nmap_id:\t42\nfrozen:\t0\n";
        assert_eq!(parse_fdinfo(text), Some((9, 328576, Some(42))));
        // A program's fdinfo, or a kernel without memlock accounting: not counted.
        assert_eq!(parse_fdinfo("prog_type:\t2\nmemlock:\t4096\n"), None);
        assert_eq!(parse_fdinfo("map_type:\t1\n"), None);
        // A kernel that does not say the id: counted, not deduplicated.
        assert_eq!(
            parse_fdinfo("map_type:\t6\nmemlock:\t336\n"),
            Some((6, 336, None))
        );
    }
}
