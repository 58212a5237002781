//! Verbs probes on the libraries containers bring: a uprobe is attached to one file (inode), so
//! a process whose libibverbs/librdmacm is another copy (its image's own, or a copy at another
//! path) would go unseen. At each exec (and for every process at start) this looks for the
//! process's copies — in its root's library directories (through `/proc/PID/root`, so a
//! container's mount namespace is seen as the process sees it) and, a little later, among the
//! files it mapped (`/proc/PID/maps`) — and attaches the same probes once per distinct file.
//! Calls a process made before its copy was found are not seen (for a copy found only in its
//! maps: typically the first `ibv_get_device_list`/`ibv_open_device`).

use std::{
    collections::HashSet,
    os::unix::fs::MetadataExt as _,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use super::{uprobe, Tracer};

/// The libraries whose copies are probed (the verbs area's).
const LIBS: [&str; 2] = ["libibverbs.so.1", "librdmacm.so.1"];

/// Library directories as a process sees them below its root.
const DIRS: [&str; 6] = [
    "usr/lib/x86_64-linux-gnu",
    "lib/x86_64-linux-gnu",
    "usr/lib/aarch64-linux-gnu",
    "usr/lib64",
    "usr/lib",
    "lib64",
];

/// How long after its exec a process's maps are looked at again.
const WATCH: Duration = Duration::from_secs(5);

/// One copy of a probed library: its path as seen from here, which library, its (device, inode).
pub struct Found {
    path: PathBuf,
    lib: &'static str,
    file: (u64, u64),
}

/// What [`LibCopies::survey`] found: the processes looked at, and their copies.
pub struct Survey {
    pids: Vec<u32>,
    found: Vec<(u32, Vec<Found>)>,
}

/// The pids under /proc now.
fn running_pids() -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect()
}

pub struct LibCopies {
    /// (device, inode) of every file probed (the host's copies included).
    probed: HashSet<(u64, u64)>,
    /// Processes to look at again, until when.
    pending: Vec<(u32, Instant)>,
    /// Copies attached so far (path as seen from here, pid that had it).
    pub attached: Vec<(PathBuf, u32)>,
    /// This process's mount namespace and root, read once: a process whose differ is in a
    /// container.
    own_ns: Option<PathBuf>,
    own_root: Option<(u64, u64)>,
}

/// The mount namespace of `/proc/<who>` (`mnt:[4026531841]`).
fn mount_ns(who: &str) -> Option<PathBuf> {
    std::fs::read_link(format!("/proc/{who}/ns/mnt")).ok()
}

fn id(path: &Path) -> Option<(u64, u64)> {
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

/// Which of [`LIBS`] a file name is a version of (`libibverbs.so.1.14.50.0` -> libibverbs.so.1).
fn lib_of(name: &str) -> Option<&'static str> {
    LIBS.iter()
        .find(|l| name == **l || name.starts_with(&format!("{l}.")))
        .copied()
}

impl LibCopies {
    /// Knows the host's copies (already probed by the loader).
    pub fn new() -> LibCopies {
        let dirs = uprobe::library_dirs();
        let probed = LIBS
            .iter()
            .filter_map(|l| uprobe::find_library(l, &dirs).ok())
            .filter_map(|p| id(&p))
            .collect();
        LibCopies {
            probed,
            pending: Vec::new(),
            attached: Vec::new(),
            own_ns: mount_ns("self"),
            own_root: id(Path::new("/")),
        }
    }

    /// Whether this host has a library the verbs probes attach to (without one, they are off
    /// and copies are not looked for).
    pub fn host_has_libraries(&self) -> bool {
        !self.probed.is_empty()
    }

    /// The copies every running process has, found without attaching anything (every
    /// process's maps read: a sixth of a second in the lab), so that it can be made on another
    /// thread while the probes are loaded; [`LibCopies::finish`] attaches them.
    pub fn survey(&self) -> Survey {
        let pids = running_pids();
        let found = pids
            .iter()
            .map(|&pid| (pid, self.copies_of(pid, true)))
            .filter(|(_, f)| !f.is_empty())
            .collect();
        Survey { pids, found }
    }

    /// Attaches the copies `survey` found, then looks at the processes that started since it
    /// was made (before the exec probe was attached, they were seen by neither).
    pub fn finish(&mut self, survey: Survey, tracer: &mut Tracer) {
        for (pid, found) in survey.found {
            self.attach(pid, found, tracer);
        }
        let seen: HashSet<u32> = survey.pids.into_iter().collect();
        for pid in running_pids() {
            if !seen.contains(&pid) {
                self.look(pid, tracer, true);
            }
        }
    }

    /// A raw ring-buffer record: a process exec'd, look at it now and again shortly.
    pub fn saw(&mut self, bytes: &[u8], tracer: &mut Tracer) {
        use rdmatrace_common::event::EventKind;
        if bytes.len() < 20 {
            return;
        }
        let word = |at: usize| {
            u32::from_ne_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
        };
        if word(0) != EventKind::ProcessExec as u32 {
            return;
        }
        let pid = word(16);
        self.look(pid, tracer, false);
        self.pending.push((pid, Instant::now() + WATCH));
    }

    /// Once a second: the processes exec'd lately, their maps again.
    pub fn tick(&mut self, tracer: &mut Tracer) {
        let now = Instant::now();
        self.pending.retain(|(_, until)| *until > now);
        let pids: Vec<u32> = self.pending.iter().map(|(p, _)| *p).collect();
        for pid in pids {
            self.look(pid, tracer, true);
        }
    }

    fn look(&mut self, pid: u32, tracer: &mut Tracer, maps: bool) {
        let found = self.copies_of(pid, maps);
        self.attach(pid, found, tracer);
    }

    /// The library files process `pid` may use that are not the host's (in its own root, or
    /// mapped from another path), with their (device, inode); `maps`: its maps too.
    fn copies_of(&self, pid: u32, maps: bool) -> Vec<Found> {
        let root = PathBuf::from(format!("/proc/{pid}/root"));
        let mut found: Vec<(PathBuf, &'static str)> = Vec::new();
        // Another mount namespace or root (a container): its standard library directories,
        // as it sees them.
        let contained = mount_ns(&pid.to_string()) != self.own_ns || id(&root) != self.own_root;
        if contained {
            for dir in DIRS {
                for lib in LIBS {
                    found.push((root.join(dir).join(lib), lib));
                }
            }
        }
        if maps {
            if let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/maps")) {
                for path in text.lines().filter_map(|l| l.split_whitespace().nth(5)) {
                    let name = path.rsplit('/').next().unwrap_or_default();
                    if let Some(lib) = lib_of(name) {
                        found.push((root.join(path.trim_start_matches('/')), lib));
                    }
                }
            }
        }
        found
            .into_iter()
            .filter_map(|(path, lib)| {
                let file = id(&path)?;
                (!self.probed.contains(&file)).then_some(Found { path, lib, file })
            })
            .collect()
    }

    /// Attaches the probes to each copy in `found` not probed yet. A copy that could not be
    /// probed because it is no longer reachable (its process exited, taking its view of the
    /// file with it: a short-lived `mount` in a container's new namespace, say) is tried
    /// again with the next process that has it; any other failure is said once.
    fn attach(&mut self, pid: u32, found: Vec<Found>, tracer: &mut Tracer) {
        for Found { path, lib, file } in found {
            if !self.probed.insert(file) {
                continue;
            }
            match tracer.attach_library_copy(lib, &path) {
                Ok(n) => {
                    eprintln!(
                        "rdmatrace: verbs probes ({n}) also on {} (pid {pid}'s own {lib})",
                        path.display()
                    );
                    self.attached.push((path, pid));
                }
                Err(_) if id(&path) != Some(file) => {
                    // Nothing was attached (`attach_library_copy` fails only then).
                    self.probed.remove(&file);
                }
                Err(e) => eprintln!(
                    "rdmatrace: pid {pid}'s {lib} at {} is not probed: {e}",
                    path.display()
                ),
            }
        }
    }
}

impl Default for LibCopies {
    fn default() -> Self {
        LibCopies::new()
    }
}

#[cfg(test)]
mod tests {
    use super::lib_of;

    #[test]
    fn versions_of_the_probed_libraries_are_recognized() {
        assert_eq!(lib_of("libibverbs.so.1"), Some("libibverbs.so.1"));
        assert_eq!(lib_of("libibverbs.so.1.14.50.0"), Some("libibverbs.so.1"));
        assert_eq!(lib_of("librdmacm.so.1.3.50.0"), Some("librdmacm.so.1"));
        assert_eq!(lib_of("libibverbs.so.10"), None);
        assert_eq!(lib_of("libmlx5.so.1"), None);
    }
}
