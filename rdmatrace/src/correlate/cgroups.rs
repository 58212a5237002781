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

#[derive(Default)]
pub struct Cgroups {
    by_pid: FxHashMap<u32, u64>,
    places: FxHashMap<u64, Arc<Place>>,
    /// A process that exited: forgotten at the next record (its exit record still names it).
    exited: Option<u32>,
}

impl Cgroups {
    /// Process `pid` is in cgroup `id`.
    pub fn seen(&mut self, pid: u32, id: u64) {
        self.by_pid.insert(pid, id);
    }

    /// Cgroup `id` is at `path`.
    pub fn named(&mut self, id: u64, path: &str) {
        self.places.insert(id, Arc::new(Place::new(id, path)));
    }

    pub fn knows(&self, id: u64) -> bool {
        self.places.contains_key(&id)
    }

    /// Called before each record: forgets the process that exited at the previous one.
    pub(super) fn next(&mut self) {
        if let Some(pid) = self.exited.take() {
            self.by_pid.remove(&pid);
        }
    }

    pub(super) fn exit(&mut self, pid: u32) {
        self.exited = Some(pid);
    }

    /// The cgroup id of `pid`, when its cgroup was reported.
    pub fn id_of(&self, pid: u32) -> Option<u64> {
        self.by_pid.get(&pid).copied()
    }

    /// Where `pid` runs, when its cgroup was reported and its path is known.
    pub fn of(&self, pid: u32) -> Option<&Arc<Place>> {
        self.places.get(self.by_pid.get(&pid)?)
    }

    /// Cgroup `id`'s place, when its path is known.
    pub fn place(&self, id: u64) -> Option<&Arc<Place>> {
        self.places.get(&id)
    }

    /// Processes with a known cgroup (memory accounting, tests).
    pub fn processes(&self) -> usize {
        self.by_pid.len()
    }
}
