//! Containers and pods from cgroup v2 paths: what a process's cgroup (`/proc/PID/cgroup`'s
//! `0::PATH`, or a cgroup id resolved to its directory under the cgroup2 mount) says about the
//! container runtime, the container id and the Kubernetes pod it runs in.
//!
//! Known layouts (both cgroup drivers of the kubelet, every QoS class):
//! - systemd driver: `/kubepods.slice/kubepods-burstable.slice/
//!   kubepods-burstable-pod<UID with _>.slice/cri-containerd-<ID>.scope` (also `crio-<ID>.scope`,
//!   `docker-<ID>.scope`); guaranteed pods sit directly under `kubepods.slice`.
//! - cgroupfs driver: `/kubepods/burstable/pod<UID>/<ID>`, `/kubepods/pod<UID>/<ID>`.
//! - Docker: `/system.slice/docker-<ID>.scope` (systemd), `/docker/<ID>` (cgroupfs).
//! - Podman: `/machine.slice/libpod-<ID>.scope` (possibly with a `/container` leaf),
//!   `/user.slice/.../libpod-<ID>.scope`.
//! - CRI-O outside Kubernetes: `crio-<ID>.scope`. The runtimes' monitor processes
//!   (`crio-conmon-`, `libpod-conmon-`) are not containers.
//! - Anything else under a systemd unit: the unit (`foo.service`), no container.
//!
//! Pure: paths in, names out. Nothing of the environment or of the payload is read.

/// What a cgroup path says about its process.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Placement {
    /// The container runtime (`containerd`, `cri-o`, `docker`, `podman`), when in a container.
    pub runtime: Option<&'static str>,
    /// The full container id as the runtime names it.
    pub container: Option<String>,
    /// The Kubernetes pod UID (dashed form), when in a pod.
    pub pod_uid: Option<String>,
    /// The innermost systemd unit (`.service` or `.scope`), when the path has one.
    pub unit: Option<String>,
}

impl Placement {
    /// The container id shortened as `docker ps` shows it (12 characters).
    pub fn short_container(&self) -> Option<&str> {
        self.container.as_deref().map(|c| &c[..c.len().min(12)])
    }
}

/// A container id: 64 hex digits (every runtime named here uses them).
fn container_id(s: &str) -> Option<&str> {
    (s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit())).then_some(s)
}

/// `<prefix><ID>.scope` -> ID.
fn scoped<'a>(component: &'a str, prefix: &str) -> Option<&'a str> {
    container_id(component.strip_prefix(prefix)?.strip_suffix(".scope")?)
}

/// A pod UID as the kubelet writes it in a path: `pod<UID>` (cgroupfs, dashed) or
/// `kubepods[-QOS]-pod<UID with _>.slice` (systemd). Returned dashed.
fn pod_uid(component: &str) -> Option<String> {
    let raw = if let Some(rest) = component.strip_suffix(".slice") {
        rest.rsplit_once("-pod").map(|(_, uid)| uid)?
    } else {
        component.strip_prefix("pod")?
    };
    let uid = raw.replace('_', "-");
    let ok = uid.len() == 36
        && uid.bytes().enumerate().all(|(i, b)| {
            if [8, 13, 18, 23].contains(&i) {
                b == b'-'
            } else {
                b.is_ascii_hexdigit()
            }
        });
    ok.then_some(uid)
}

/// Reads a cgroup v2 path (relative to the cgroup2 root, with or without a leading `/`).
pub fn placement(path: &str) -> Placement {
    let mut p = Placement::default();
    let parts: Vec<&str> = path.split('/').filter(|c| !c.is_empty()).collect();
    let in_kubepods = parts
        .first()
        .is_some_and(|c| *c == "kubepods" || *c == "kubepods.slice");
    for (i, c) in parts.iter().enumerate() {
        if c.ends_with(".service") || c.ends_with(".scope") {
            p.unit = Some((*c).to_string());
        }
        if in_kubepods {
            if let Some(uid) = pod_uid(c) {
                p.pod_uid = Some(uid);
                continue;
            }
        }
        let found = [
            ("cri-containerd-", "containerd"),
            ("crio-", "cri-o"),
            ("docker-", "docker"),
            ("libpod-", "podman"),
        ]
        .iter()
        .find_map(|(prefix, runtime)| scoped(c, prefix).map(|id| (id, *runtime)));
        if let Some((id, runtime)) = found {
            p.container = Some(id.to_string());
            p.runtime = Some(runtime);
            continue;
        }
        // cgroupfs layouts: a bare id under a pod, or under `docker`.
        if let Some(id) = container_id(c) {
            let parent = i.checked_sub(1).map(|j| parts[j]);
            if in_kubepods && p.pod_uid.is_some() {
                // The kubelet's cgroupfs layout does not name the runtime.
                p.container = Some(id.to_string());
            } else if parent == Some("docker") {
                p.container = Some(id.to_string());
                p.runtime = Some("docker");
            }
        }
    }
    p
}

/// Cgroup ids (what the kernel's `bpf_get_current_cgroup_id` returns: the inode number of the
/// cgroup's directory in the cgroup2 file system) to paths below the cgroup2 root, by walking
/// the mount; cached, walked again on an id it does not know (a cgroup made since).
pub struct CgroupPaths {
    root: std::path::PathBuf,
    known: std::collections::HashMap<u64, String>,
}

impl CgroupPaths {
    /// Paths below `root` (normally `/sys/fs/cgroup`).
    pub fn new(root: impl Into<std::path::PathBuf>) -> CgroupPaths {
        CgroupPaths {
            root: root.into(),
            known: std::collections::HashMap::new(),
        }
    }

    /// The path of cgroup `id` (`/` for the root), or `None` when no directory has it (the
    /// cgroup is gone, or `root` is not a cgroup2 mount).
    pub fn path_of(&mut self, id: u64) -> Option<&str> {
        if !self.known.contains_key(&id) {
            self.known.clear();
            let root = self.root.clone();
            self.walk(&root, "");
        }
        self.known.get(&id).map(String::as_str)
    }

    /// Every cgroup below the root now: (id, path).
    pub fn scan(&mut self) -> impl Iterator<Item = (u64, &str)> {
        self.known.clear();
        let root = self.root.clone();
        self.walk(&root, "");
        self.known.iter().map(|(id, p)| (*id, p.as_str()))
    }

    fn walk(&mut self, dir: &std::path::Path, rel: &str) {
        use std::os::unix::fs::MetadataExt as _;
        if let Ok(m) = std::fs::metadata(dir) {
            let path = if rel.is_empty() {
                "/".to_string()
            } else {
                rel.to_string()
            };
            self.known.insert(m.ino(), path);
        }
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.filter_map(Result::ok) {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                let name = e.file_name().to_string_lossy().into_owned();
                self.walk(&e.path(), &format!("{rel}/{name}"));
            }
        }
    }
}

/// Where the cgroup v2 hierarchy is mounted, from `/proc/self/mounts`' text: the first
/// `cgroup2` mount (`/sys/fs/cgroup` on a unified host, `/sys/fs/cgroup/unified` on a hybrid
/// one).
pub fn cgroup2_mount(mounts: &str) -> Option<&str> {
    mounts.lines().find_map(|l| {
        let mut f = l.split_whitespace();
        let (_, dir, fstype) = (f.next()?, f.next()?, f.next()?);
        (fstype == "cgroup2").then_some(dir)
    })
}

/// This host's cgroup2 mount (`/sys/fs/cgroup` when `/proc/self/mounts` names none).
pub fn cgroup2_root() -> std::path::PathBuf {
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    cgroup2_mount(&mounts).unwrap_or("/sys/fs/cgroup").into()
}

/// The cgroup v2 path of a process from `/proc/PID/cgroup`'s text (the `0::PATH` line).
pub fn cgroup2_path(proc_cgroup: &str) -> Option<&str> {
    proc_cgroup.lines().find_map(|l| l.strip_prefix("0::"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cgroup2_mount_is_found_on_unified_and_hybrid_hosts() {
        let unified = "sysfs /sys sysfs rw 0 0\ncgroup2 /sys/fs/cgroup cgroup2 rw,nosuid 0 0\n";
        assert_eq!(cgroup2_mount(unified), Some("/sys/fs/cgroup"));
        let hybrid =
            "tmpfs /sys/fs/cgroup tmpfs rw 0 0\ncgroup /sys/fs/cgroup/cpu cgroup rw,cpu 0 0\n\
                      cgroup2 /sys/fs/cgroup/unified cgroup2 rw 0 0\n";
        assert_eq!(cgroup2_mount(hybrid), Some("/sys/fs/cgroup/unified"));
        assert_eq!(cgroup2_mount("proc /proc proc rw 0 0\n"), None);
    }

    const ID: &str = "3f2a1b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f708";
    const UID: &str = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0";

    #[test]
    fn kubernetes_pods_with_the_systemd_driver_in_every_qos_class() {
        let uid_ = UID.replace('-', "_");
        for (qos, runtime, prefix) in [
            ("burstable", "containerd", "cri-containerd-"),
            ("besteffort", "cri-o", "crio-"),
            ("burstable", "docker", "docker-"),
        ] {
            let path = format!(
                "/kubepods.slice/kubepods-{qos}.slice/kubepods-{qos}-pod{uid_}.slice/{prefix}{ID}.scope"
            );
            let p = placement(&path);
            assert_eq!(p.pod_uid.as_deref(), Some(UID), "{path}");
            assert_eq!(p.container.as_deref(), Some(ID), "{path}");
            assert_eq!(p.runtime, Some(runtime), "{path}");
        }
        // Guaranteed pods sit directly under kubepods.slice.
        let p = placement(&format!(
            "/kubepods.slice/kubepods-pod{uid_}.slice/cri-containerd-{ID}.scope"
        ));
        assert_eq!(p.pod_uid.as_deref(), Some(UID));
        assert_eq!(p.short_container(), Some(&ID[..12]));
    }

    #[test]
    fn kubernetes_pods_with_the_cgroupfs_driver() {
        for path in [
            format!("/kubepods/burstable/pod{UID}/{ID}"),
            format!("/kubepods/besteffort/pod{UID}/{ID}"),
            format!("/kubepods/pod{UID}/{ID}"),
        ] {
            let p = placement(&path);
            assert_eq!(p.pod_uid.as_deref(), Some(UID), "{path}");
            assert_eq!(p.container.as_deref(), Some(ID), "{path}");
            assert_eq!(
                p.runtime, None,
                "the layout does not name the runtime: {path}"
            );
        }
    }

    #[test]
    fn docker_podman_and_plain_units() {
        let p = placement(&format!("/system.slice/docker-{ID}.scope"));
        assert_eq!(
            (p.runtime, p.container.as_deref()),
            (Some("docker"), Some(ID))
        );
        assert_eq!(p.pod_uid, None);
        let p = placement(&format!("/docker/{ID}"));
        assert_eq!(
            (p.runtime, p.container.as_deref()),
            (Some("docker"), Some(ID))
        );
        let p = placement(&format!("/machine.slice/libpod-{ID}.scope/container"));
        assert_eq!(
            (p.runtime, p.container.as_deref()),
            (Some("podman"), Some(ID))
        );
        // The runtimes' monitors are not the container.
        let p = placement(&format!("/machine.slice/libpod-conmon-{ID}.scope"));
        assert_eq!(p.container, None);
        let p = placement(&format!("/system.slice/crio-conmon-{ID}.scope"));
        assert_eq!(p.container, None);
        // A plain service: its unit, no container, no pod.
        let p = placement("/system.slice/slurmd.service");
        assert_eq!(p.unit.as_deref(), Some("slurmd.service"));
        assert_eq!((p.container, p.pod_uid), (None, None));
        // A pod-looking name outside kubepods is not a pod.
        let p = placement(&format!("/user.slice/pod{UID}/{ID}"));
        assert_eq!((p.pod_uid, p.container), (None, None));
        assert_eq!(placement("/"), Placement::default());
    }

    #[test]
    fn ids_that_are_not_64_hex_digits_are_not_containers() {
        assert_eq!(placement("/system.slice/docker-abc.scope").container, None);
        let not_hex = "z".repeat(64);
        assert_eq!(placement(&format!("/docker/{not_hex}")).container, None);
    }

    #[test]
    fn cgroup_ids_are_directory_inodes_below_the_root() {
        use std::os::unix::fs::MetadataExt as _;
        let root =
            std::env::temp_dir().join(format!("rdmt-cgroup-{}-{}", std::process::id(), line!()));
        let leaf = root.join(format!("kubepods/pod{UID}/{ID}"));
        std::fs::create_dir_all(&leaf).expect("tree");
        let ino = std::fs::metadata(&leaf).expect("leaf").ino();
        let mut paths = CgroupPaths::new(&root);
        let path = paths.path_of(ino).map(String::from);
        assert_eq!(path, Some(format!("/kubepods/pod{UID}/{ID}")));
        let p = placement(path.as_deref().unwrap_or_default());
        assert_eq!(p.container.as_deref(), Some(ID));
        let root_ino = std::fs::metadata(&root).expect("root").ino();
        assert_eq!(paths.path_of(root_ino), Some("/"));
        // A cgroup made after the first walk is found by walking again.
        let later = root.join("system.slice/late.service");
        std::fs::create_dir_all(&later).expect("later");
        let later_ino = std::fs::metadata(&later).expect("later").ino();
        assert_eq!(paths.path_of(later_ino), Some("/system.slice/late.service"));
        assert_eq!(paths.path_of(u64::MAX), None);
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn the_cgroup2_line_of_proc_pid_cgroup() {
        let text = format!("0::/system.slice/docker-{ID}.scope\n");
        assert_eq!(
            cgroup2_path(&text),
            Some(format!("/system.slice/docker-{ID}.scope").as_str())
        );
        assert_eq!(cgroup2_path("12:cpu:/x\n"), None);
    }
}
