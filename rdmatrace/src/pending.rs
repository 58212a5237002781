//! The kernel programs keep what a call's entry probe read until its return probe runs, in
//! hash maps keyed by the task (`PENDING_*`, pid_tgid). A return that is never seen (a
//! kretprobe the kernel missed: more tasks were in the call than the probe has instances)
//! leaves its entry behind; without a sweep, the entries of dead tasks would pile up over
//! months of `serve` until the map is full and no call of that kind is traced again.
//!
//! [`Sweeper`] removes, every few seconds, the entries of tasks that no longer exist
//! (`/proc/TGID/task/TID` gone). A live task's stale entry is replaced by its next call, so the
//! maps stay bounded by the live tasks. The maps stay plain hash maps: an LRU map would bound
//! them too, but before Linux 6.16 its per-CPU free lists can evict live entries of calls in
//! flight on hosts with many CPUs long before it is full.

use std::{
    path::Path,
    time::{Duration, Instant},
};

use aya::maps::{HashMap as BpfHashMap, MapData};
use rdmatrace_common::event::{QpDestroyEvent, QpModifyEvent};

use crate::loader::Tracer;

/// How often the maps are swept.
pub const PERIOD: Duration = Duration::from_secs(5);

/// Every `PENDING_*` map the sweep knows, with its value size.
pub const MAPS: [(&str, usize); 6] = [
    ("PENDING_CREATE", 16),
    ("PENDING_MODIFY", size_of::<QpModifyEvent>()),
    ("PENDING_DESTROY", size_of::<QpDestroyEvent>()),
    ("PENDING_QUEUE", 16),
    ("PENDING_UMEM", 16),
    ("PENDING_RES", 8),
];

/// One map, its values seen as bytes (only keys are read).
enum Pending {
    B8(BpfHashMap<MapData, u64, [u8; 8]>),
    B16(BpfHashMap<MapData, u64, [u8; 16]>),
    Modify(BpfHashMap<MapData, u64, [u8; size_of::<QpModifyEvent>()]>),
    Destroy(BpfHashMap<MapData, u64, [u8; size_of::<QpDestroyEvent>()]>),
}

impl Pending {
    fn open(map: aya::maps::Map, value_len: usize) -> Option<Pending> {
        Some(match value_len {
            8 => Pending::B8(BpfHashMap::try_from(map).ok()?),
            16 => Pending::B16(BpfHashMap::try_from(map).ok()?),
            n if n == size_of::<QpModifyEvent>() => {
                Pending::Modify(BpfHashMap::try_from(map).ok()?)
            }
            n if n == size_of::<QpDestroyEvent>() => {
                Pending::Destroy(BpfHashMap::try_from(map).ok()?)
            }
            _ => return None,
        })
    }

    fn keys(&self) -> Vec<u64> {
        match self {
            Pending::B8(m) => m.keys().filter_map(Result::ok).collect(),
            Pending::B16(m) => m.keys().filter_map(Result::ok).collect(),
            Pending::Modify(m) => m.keys().filter_map(Result::ok).collect(),
            Pending::Destroy(m) => m.keys().filter_map(Result::ok).collect(),
        }
    }

    fn remove(&mut self, key: u64) -> bool {
        match self {
            Pending::B8(m) => m.remove(&key).is_ok(),
            Pending::B16(m) => m.remove(&key).is_ok(),
            Pending::Modify(m) => m.remove(&key).is_ok(),
            Pending::Destroy(m) => m.remove(&key).is_ok(),
        }
    }
}

/// Sweeps the `PENDING_*` maps of a loaded object.
pub struct Sweeper {
    maps: Vec<Pending>,
    proc: std::path::PathBuf,
    last: Option<Instant>,
    /// Entries removed so far.
    pub removed: u64,
}

impl Sweeper {
    /// Takes the maps out of the loaded object, or says why it does not sweep: where this
    /// process does not see every task by the ids the kernel programs use, a live task's entry
    /// would look dead.
    pub fn new(tracer: &mut Tracer) -> Result<Sweeper, &'static str> {
        let proc = Path::new("/proc");
        proc_shows_kernel_tasks(proc)?;
        let maps = MAPS
            .iter()
            .filter_map(|(name, len)| Pending::open(tracer.ebpf.take_map(name)?, *len))
            .collect();
        Ok(Sweeper {
            maps,
            proc: proc.into(),
            last: None,
            removed: 0,
        })
    }

    /// Sweeps when [`PERIOD`] has passed since the last sweep; returns what it removed.
    pub fn tick(&mut self, now: Instant) -> u64 {
        if self.last.is_some_and(|l| now.duration_since(l) < PERIOD) {
            return 0;
        }
        self.last = Some(now);
        let mut n = 0;
        for map in &mut self.maps {
            for key in map.keys() {
                if !task_exists(&self.proc, key) && map.remove(key) {
                    n += 1;
                }
            }
        }
        self.removed += n;
        n
    }
}

/// Whether `proc` (normally /proc) names every task by the ids the kernel programs see, so
/// that a task missing there is gone; else why not.
pub fn proc_shows_kernel_tasks(proc: &Path) -> Result<(), &'static str> {
    if !sees_kernel_pids(&proc.join("self/status")) {
        return Err("runs in a PID namespace of its own (run in the host's PID namespace)");
    }
    if !sees_other_tasks(proc) {
        return Err(
            "cannot see other users' tasks in /proc (mounted with hidepid, and this process \
             lacks CAP_SYS_PTRACE)",
        );
    }
    Ok(())
}

/// Whether process `tgid` is known to be gone from `proc` (an error other than "not found"
/// counts as existing).
pub fn process_gone(proc: &Path, tgid: u32) -> bool {
    matches!(
        std::fs::symlink_metadata(proc.join(tgid.to_string())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound
    )
}

/// Whether the task of `pid_tgid` (tgid in the upper half, tid in the lower) exists under
/// `proc`. An error other than "not found" counts as existing: only a task known to be gone
/// loses its entry.
fn task_exists(proc: &Path, pid_tgid: u64) -> bool {
    let (tgid, tid) = (pid_tgid >> 32, pid_tgid & 0xffff_ffff);
    let path = proc.join(format!("{tgid}/task/{tid}"));
    !matches!(std::fs::symlink_metadata(path), Err(e) if e.kind() == std::io::ErrorKind::NotFound)
}

/// Whether the process whose status file is `status` runs in the initial PID namespace (its
/// `NSpid:` line holds one id), so that /proc names tasks by the ids the kernel programs see.
fn sees_kernel_pids(status: &Path) -> bool {
    std::fs::read_to_string(status).is_ok_and(|s| {
        s.lines()
            .find_map(|l| l.strip_prefix("NSpid:"))
            .is_some_and(|ids| ids.split_whitespace().count() == 1)
    })
}

/// Whether tasks of other users are visible under `proc`: init's (task 1 of process 1) is
/// there on every system, unless /proc hides it (`hidepid=invisible` without CAP_SYS_PTRACE).
fn sees_other_tasks(proc: &Path) -> bool {
    std::fs::symlink_metadata(proc.join("1/task/1")).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_task_is_gone_only_when_proc_says_not_found() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(dir.path().join("100/task/101")).expect("mkdir");
        let key = |tgid: u64, tid: u64| (tgid << 32) | tid;
        assert!(task_exists(dir.path(), key(100, 101)));
        assert!(
            !task_exists(dir.path(), key(100, 102)),
            "a thread that exited"
        );
        assert!(
            !task_exists(dir.path(), key(200, 200)),
            "a process that exited"
        );
        // This process's own main thread, in the real /proc.
        let me = u64::from(std::process::id());
        assert!(task_exists(Path::new("/proc"), key(me, me)));
    }

    #[test]
    fn the_namespace_check_reads_nspid() {
        let dir = tempfile::tempdir().expect("tempdir");
        let status = dir.path().join("status");
        std::fs::write(&status, "Name:\tx\nNSpid:\t4242\n").expect("write");
        assert!(sees_kernel_pids(&status));
        std::fs::write(&status, "Name:\tx\nNSpid:\t4242\t7\n").expect("write");
        assert!(!sees_kernel_pids(&status), "nested PID namespace");
        std::fs::write(&status, "Name:\tx\n").expect("write");
        assert!(!sees_kernel_pids(&status), "no NSpid line: not known");
    }

    #[test]
    fn a_proc_hiding_init_is_not_swept() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert!(!sees_other_tasks(dir.path()), "init hidden");
        std::fs::create_dir_all(dir.path().join("1/task/1")).expect("mkdir");
        assert!(sees_other_tasks(dir.path()));
    }
}
