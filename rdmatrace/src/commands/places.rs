//! The kernel side of `--container`, `--pod` and `--cgroup`: the ids of the cgroups that match,
//! in the probes' `WANTED_CGROUPS` map, refreshed every second so containers started later are
//! traced from their first event. The same filter runs again in user space on every record.

use std::collections::HashSet;

use anyhow::Context as _;
use aya::maps::{HashMap, MapData};

use crate::{
    container::{cgroup2_root, CgroupPaths},
    correlate::{cgroups::Place, filter::Filter},
    loader::Tracer,
};

pub struct PlaceWatch {
    map: HashMap<MapData, u64, u8>,
    filter: Filter,
    paths: CgroupPaths,
    wanted: HashSet<u64>,
    full: bool,
}

impl PlaceWatch {
    /// Takes the map from `tracer` (loaded with `cgroup_filter`) and fills it.
    pub fn start(tracer: &mut Tracer, filter: &Filter) -> anyhow::Result<PlaceWatch> {
        let map = tracer
            .ebpf
            .take_map("WANTED_CGROUPS")
            .context("the probes have no WANTED_CGROUPS map")?;
        let map = HashMap::try_from(map).context("WANTED_CGROUPS is not a hash map")?;
        let mut w = PlaceWatch {
            map,
            filter: filter.clone(),
            paths: CgroupPaths::new(cgroup2_root()),
            wanted: HashSet::new(),
            full: false,
        };
        let n = w.refresh();
        eprintln!(
            "rdmatrace: {n} cgroups match {} now (more are added as they appear)",
            describe(filter)
        );
        Ok(w)
    }

    /// Adds the matching cgroups made since the last call; how many match in all.
    pub fn refresh(&mut self) -> usize {
        let mut fresh = Vec::new();
        for (id, path) in self.paths.scan() {
            if !self.wanted.contains(&id) && self.filter.wants_place(&Place::new(id, path)) {
                fresh.push(id);
            }
        }
        for id in fresh {
            match self.map.insert(id, 1, 0) {
                Ok(()) => {
                    self.wanted.insert(id);
                }
                Err(e) if !self.full => {
                    self.full = true;
                    eprintln!(
                        "rdmatrace: cannot add cgroup {id} to the kernel filter ({e}); \
                         its processes are not traced"
                    );
                }
                Err(_) => {}
            }
        }
        self.wanted.len()
    }
}

fn describe(f: &Filter) -> String {
    let mut parts = Vec::new();
    if let Some(c) = &f.container {
        parts.push(format!("--container {c}"));
    }
    if let Some(p) = &f.pod {
        parts.push(format!("--pod {p}"));
    }
    if let Some(c) = &f.cgroup {
        parts.push(format!("--cgroup {c}"));
    }
    parts.join(" ")
}
