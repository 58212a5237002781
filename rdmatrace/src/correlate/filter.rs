//! User-side event filter (`--pid`, `--comm`, `--dev`, `--qpn`, `--container`, `--pod`,
//! `--cgroup`). The pid and cgroup filters also run in the kernel; they are repeated here so a
//! replayed recording filters the same way.

use super::cgroups::Place;
use crate::event::{Body, Record};

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Filter {
    pub pid: Option<u32>,
    pub comm: Option<String>,
    pub dev: Option<String>,
    pub qpn: Option<u32>,
    /// Container id prefix (as `docker ps` shows, or the full id).
    pub container: Option<String>,
    /// Kubernetes pod UID (dashed, as `kubectl get pod -o jsonpath={.metadata.uid}` shows).
    pub pod: Option<String>,
    /// Cgroup v2 path prefix below the cgroup2 root (`/kubepods.slice`, `/system.slice/x.service`).
    pub cgroup: Option<String>,
}

impl Filter {
    /// Whether the filter asks for a container, pod or cgroup.
    pub fn by_place(&self) -> bool {
        self.container.is_some() || self.pod.is_some() || self.cgroup.is_some()
    }

    /// Whether a cgroup at `path` (with what it says) passes the container, pod and cgroup
    /// filters.
    pub fn wants_place(&self, place: &Place) -> bool {
        let container_ok = self.container.as_deref().is_none_or(|want| {
            place
                .container()
                .is_some_and(|c| !want.is_empty() && c.starts_with(want))
        });
        let pod_ok = self
            .pod
            .as_deref()
            .is_none_or(|want| place.pod_uid() == Some(want));
        let cgroup_ok = self
            .cgroup
            .as_deref()
            .is_none_or(|want| path_under(&place.path, want));
        container_ok && pod_ok && cgroup_ok
    }

    /// `rec` passes; `place` is where its process runs, when known.
    pub fn matches(&self, rec: &Record, place: Option<&Place>) -> bool {
        // Loss is never filtered away.
        if matches!(rec.body, Body::Lost { .. }) {
            return true;
        }
        if self.pid.is_some_and(|p| p != rec.subject_pid()) {
            return false;
        }
        if self
            .comm
            .as_deref()
            .is_some_and(|c| c != rec.subject_comm())
        {
            return false;
        }
        if self.by_place() && !place.is_some_and(|p| self.wants_place(p)) {
            return false;
        }
        if self.dev.is_none() && self.qpn.is_none() {
            return true;
        }
        // A device or QPN filter keeps only events about that device / QPN.
        self.dev.as_deref().is_none_or(|d| rec.dev() == Some(d))
            && self.qpn.is_none_or(|q| rec.qpn() == Some(q))
    }
}

/// Whether cgroup `path` is `prefix` or below it (whole components: `/a/b` is under `/a`, not
/// under `/a/bc`... nor is `/a/bc` under `/a/b`).
pub fn path_under(path: &str, prefix: &str) -> bool {
    let p = prefix.trim_end_matches('/');
    if p.is_empty() {
        return true;
    }
    let p = if p.starts_with('/') {
        p.to_string()
    } else {
        format!("/{p}")
    };
    path == p
        || path
            .strip_prefix(&p)
            .is_some_and(|rest| rest.starts_with('/'))
}
