//! Which cgroup (and so which container and pod) each process is in: pid -> cgroup id from the
//! kernel's `ProcessCgroup` records, cgroup id -> path from the recorder (live: the cgroup2
//! mount; replay: the recording's cgroup entries). Pure state.

use std::sync::Arc;

use rustc_hash::FxHashMap;

use crate::container::{placement, Placement};

/// A cgroup and what its path says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Place {
    pub id: u64,
    /// Below the cgroup2 root, `/` for the root.
    pub path: String,
    pub placement: Placement,
}

impl Place {
    pub fn new(id: u64, path: &str) -> Place {
        Place {
            id,
            path: path.to_string(),
            placement: placement(path),
        }
    }

    /// The full container id, when in a container.
    pub fn container(&self) -> Option<&str> {
        self.placement.container.as_deref()
    }

    pub fn pod_uid(&self) -> Option<&str> {
        self.placement.pod_uid.as_deref()
    }
}

/// How long a process's cgroup is kept after it exited: samples of its last second (TCP
/// bytes, QP traffic) arrive after its exit record and still name it.
pub const KEEP_AFTER_EXIT_NS: u64 = 10_000_000_000;

#[derive(Default)]
pub struct Cgroups {
    /// pid -> (cgroup id, when it exited).
    by_pid: FxHashMap<u32, (u64, Option<u64>)>,
    places: FxHashMap<u64, Arc<Place>>,
    /// Exits in time order, forgotten [`KEEP_AFTER_EXIT_NS`] later (unless the pid was seen
    /// again since: a new process).
    exited: std::collections::VecDeque<(u64, u32)>,
}

impl Cgroups {
    /// Process `pid` is in cgroup `id`.
    pub fn seen(&mut self, pid: u32, id: u64) {
        self.by_pid.insert(pid, (id, None));
    }

    /// Cgroup `id` is at `path`.
    pub fn named(&mut self, id: u64, path: &str) {
        self.places.insert(id, Arc::new(Place::new(id, path)));
    }

    pub fn knows(&self, id: u64) -> bool {
        self.places.contains_key(&id)
    }

    /// Called before each record (monotonic `now`): forgets processes that exited long enough
    /// ago.
    pub(super) fn next(&mut self, now: u64) {
        while let Some(&(at, pid)) = self.exited.front() {
            if now.saturating_sub(at) < KEEP_AFTER_EXIT_NS {
                break;
            }
            self.exited.pop_front();
            if self.by_pid.get(&pid).is_some_and(|(_, e)| *e == Some(at)) {
                self.by_pid.remove(&pid);
            }
        }
    }

    pub(super) fn exit(&mut self, pid: u32, now: u64) {
        if let Some((_, exited)) = self.by_pid.get_mut(&pid) {
            *exited = Some(now);
            self.exited.push_back((now, pid));
        }
    }

    /// The cgroup id of `pid`, when its cgroup was reported.
    pub fn id_of(&self, pid: u32) -> Option<u64> {
        self.by_pid.get(&pid).map(|(id, _)| *id)
    }

    /// Where `pid` runs, when its cgroup was reported and its path is known.
    pub fn of(&self, pid: u32) -> Option<&Arc<Place>> {
        self.places.get(&self.by_pid.get(&pid)?.0)
    }

    /// Cgroup `id`'s place, when its path is known.
    pub fn place(&self, id: u64) -> Option<&Arc<Place>> {
        self.places.get(&id)
    }

    /// Forgets the places no known process is in any more (containers come and go on a fleet
    /// host: an agent must not keep every one it ever saw). A place forgotten is resolved
    /// again if a process shows up in it.
    pub fn forget_unused(&mut self) {
        let used: rustc_hash::FxHashSet<u64> = self.by_pid.values().map(|(id, _)| *id).collect();
        self.places.retain(|id, _| used.contains(id));
    }

    /// Places known (memory accounting, tests).
    pub fn places(&self) -> usize {
        self.places.len()
    }

    /// Processes with a known cgroup (memory accounting, tests).
    pub fn processes(&self) -> usize {
        self.by_pid.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_exited_process_keeps_its_place_for_a_while_and_a_reused_pid_its_own() {
        let mut c = Cgroups::default();
        c.named(7, "/system.slice/docker-x.scope");
        c.named(8, "/other.slice");
        c.seen(100, 7);
        c.next(1);
        c.exit(100, 1);
        c.next(KEEP_AFTER_EXIT_NS);
        assert_eq!(c.id_of(100), Some(7), "late samples still name it");
        c.next(KEEP_AFTER_EXIT_NS + 1);
        assert_eq!(c.id_of(100), None, "forgotten after the grace period");
        // A pid reused within the grace period is the new process's.
        c.seen(200, 7);
        c.exit(200, 5);
        c.seen(200, 8);
        c.next(KEEP_AFTER_EXIT_NS + 10);
        assert_eq!(c.of(200).map(|p| p.path.as_str()), Some("/other.slice"));
        assert_eq!(c.processes(), 1);
        // The place no process is in any more is forgotten; the other stays.
        c.forget_unused();
        assert_eq!(c.places(), 1);
        assert!(c.knows(8) && !c.knows(7));
    }
}
