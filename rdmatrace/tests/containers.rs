//! Containers on the host kernel: real processes placed in cgroups made the way container
//! runtimes make them (a Docker scope, a Kubernetes pod's containerd scope), traced live with a
//! kernel-side `--container` filter and recorded; the recording then read as it would be on
//! another machine (paths stored in it). Root only (`root_`): cgroups are made and eBPF loaded.

mod common;

use std::{
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

use common::*;
use serde_json::Value;

const DOCKER_ID: &str = "d0c4e2a1b3c5d7e9f0a2b4c6d8e0f1a3b5c7d9e1f2a4b6c8d0e1f3a5b7c9d1e3";
const POD_CONTAINER: &str = "c0ffee0123456789abcdef0123456789abcdef0123456789abcdef0123456789";
const POD_UID: &str = "7d3c2b1a-0f9e-4d8c-b7a6-958473625140";

/// A cgroup v2 directory made for the test, removed at the end (its processes have exited).
struct Cgroup {
    dir: PathBuf,
    /// Made by us, innermost last: removed in reverse.
    made: Vec<PathBuf>,
}

fn cgroup2_root() -> PathBuf {
    let mounts = std::fs::read_to_string("/proc/self/mounts").expect("mounts");
    mounts
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.get(2) == Some(&"cgroup2")).then(|| PathBuf::from(f[1]))
        })
        .expect("a cgroup2 mount")
}

impl Cgroup {
    fn make(rel: &str) -> Cgroup {
        let root = cgroup2_root();
        let mut dir = root.clone();
        let mut made = Vec::new();
        for part in rel.split('/').filter(|p| !p.is_empty()) {
            dir.push(part);
            if !dir.exists() {
                std::fs::create_dir(&dir)
                    .unwrap_or_else(|e| panic!("mkdir {}: {e}", dir.display()));
                made.push(dir.clone());
            }
        }
        Cgroup { dir, made }
    }

    /// Runs a loopback TCP transfer of `bytes` inside this cgroup; its pid.
    fn transfer(&self, bytes: usize) -> u32 {
        let script = format!(
            "import socket,os\n\
             s=socket.socket(); s.bind(('127.0.0.1',0)); s.listen()\n\
             c=socket.create_connection(s.getsockname()); a,_=s.accept()\n\
             left={bytes}\n\
             while left>0:\n\
             \x20   n=c.send(b'x'*min(left,65536)); left-=n\n\
             \x20   got=0\n\
             \x20   while got<n: got+=len(a.recv(n-got))\n\
             print(os.getpid())\n"
        );
        let procs = self.dir.join("cgroup.procs");
        let out = Command::new("/bin/sh")
            .arg("-c")
            .arg(format!(
                "echo $$ > {} && exec /usr/bin/python3 -c \"$0\"",
                procs.display()
            ))
            .arg(script)
            .output()
            .expect("run the workload");
        assert!(
            out.status.success(),
            "workload failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .expect("the workload prints its pid")
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        for d in self.made.iter().rev() {
            let _ = std::fs::remove_dir(d);
        }
    }
}

fn pids_of(events: &[Value]) -> std::collections::BTreeSet<u64> {
    events
        .iter()
        .filter_map(|e| e["data"]["pid"].as_u64())
        .filter(|p| *p != 0)
        .collect()
}

/// The records of `pid` from its move into a cgroup whose `field` is `value` on (its shell
/// started in the test's cgroup and wrote itself into the new one before exec'ing the
/// workload). Empty when it never moved there.
fn after_move<'a>(events: &'a [Value], pid: u32, field: &str, value: &str) -> Vec<&'a Value> {
    let mine: Vec<&Value> = events
        .iter()
        .filter(|e| e["data"]["pid"].as_u64() == Some(u64::from(pid)))
        .collect();
    let moved = mine
        .iter()
        .position(|e| e["type"] == "process_cgroup" && e["data"][field] == value);
    moved.map_or_else(Vec::new, |i| mine[i..].to_vec())
}

#[test]
#[ignore = "needs root: makes cgroups and traces with eBPF"]
fn root_containers_are_named_filtered_in_the_kernel_and_recorded() {
    let dir = test_dir("containers");
    let file = dir.path().join("c.rdmt");
    let f = file.to_str().expect("utf8");
    let docker = Cgroup::make(&format!("/system.slice/docker-{DOCKER_ID}.scope"));
    let pod = Cgroup::make(&format!(
        "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{}.slice/cri-containerd-{POD_CONTAINER}.scope",
        POD_UID.replace('-', "_")
    ));
    let host = Cgroup::make("/rdmatrace-test-host.slice");

    let recorder = start(&["record", "-o", f], Duration::from_secs(60));
    let only_docker = start(
        &["trace", "--json", "--container", &DOCKER_ID[..12]],
        Duration::from_secs(60),
    );
    let in_docker = docker.transfer(3 << 20);
    let in_pod = pod.transfer(3 << 20);
    let on_host = host.transfer(3 << 20);
    std::thread::sleep(Duration::from_millis(1500));
    let filtered = only_docker.stop();
    let recorded = recorder.stop();
    assert!(recorded.status.success(), "{}", recorded.stderr);
    assert!(filtered.status.success(), "{}", filtered.stderr);

    // The kernel filter let only the Docker container's processes through.
    assert!(
        filtered.stderr.contains("1 cgroups match --container"),
        "{}",
        filtered.stderr
    );
    let events = filtered.events();
    let pids = pids_of(&events);
    assert!(pids.contains(&u64::from(in_docker)), "{pids:?}");
    assert!(
        !pids.contains(&u64::from(in_pod)) && !pids.contains(&u64::from(on_host)),
        "{pids:?} has processes outside the container"
    );
    let docker_events = after_move(&events, in_docker, "container", DOCKER_ID);
    assert!(docker_events.len() > 2, "{events:?}");
    for e in docker_events {
        assert_eq!(e["data"]["container"], DOCKER_ID, "{e}");
    }

    // The recording names every process's place, read back without the cgroups' help.
    drop((docker, pod, host));
    let replay = run(&["trace", "--input", f, "--json"]);
    assert!(replay.status.success(), "{}", replay.stderr);
    let all = replay.events();
    let docker_events = after_move(&all, in_docker, "container", DOCKER_ID);
    assert!(docker_events.len() > 2, "{all:?}");
    for e in &docker_events {
        assert_eq!(e["data"]["container"], DOCKER_ID, "{e}");
        assert!(e["data"].get("pod_uid").is_none(), "{e}");
    }
    let pod_events = after_move(&all, in_pod, "pod_uid", POD_UID);
    assert!(pod_events.len() > 2, "{all:?}");
    for e in pod_events {
        assert_eq!(e["data"]["container"], POD_CONTAINER, "{e}");
        assert_eq!(e["data"]["pod_uid"], POD_UID, "{e}");
    }
    let host_events = after_move(&all, on_host, "cgroup", "/rdmatrace-test-host.slice");
    assert!(host_events.len() > 2, "{all:?}");
    for e in host_events {
        assert_eq!(e["data"]["cgroup"], "/rdmatrace-test-host.slice", "{e}");
        assert!(e["data"].get("container").is_none(), "{e}");
    }

    // Filters on the recording: the pod's processes only.
    let only_pod = run(&["trace", "--input", f, "--json", "--pod", POD_UID]);
    let pids = pids_of(&only_pod.events());
    assert_eq!(
        pids,
        [u64::from(in_pod)].into_iter().collect(),
        "--pod keeps the pod's process only"
    );

    // Verdicts per process name the container; per container they sum its processes.
    let text = run(&["verdict", "--input", f]);
    assert!(text.stdout.contains("CONTAINER"), "{}", text.stdout);
    assert!(text.stdout.contains(&DOCKER_ID[..12]), "{}", text.stdout);
    let by = run(&["verdict", "--input", f, "--by", "container", "--json"]);
    assert!(by.status.success(), "{}", by.stderr);
    let groups = by.events();
    let docker_group = groups
        .iter()
        .find(|g| g["data"]["container"] == DOCKER_ID)
        .unwrap_or_else(|| panic!("no Docker container verdict in {groups:?}"));
    assert_eq!(docker_group["type"], "container_verdict");
    assert_eq!(docker_group["data"]["verdict"], "tcp", "{docker_group}");
    assert!(docker_group["data"]["pids"]
        .as_array()
        .is_some_and(|p| p.contains(&Value::from(in_docker))));
    let pod_group = groups
        .iter()
        .find(|g| g["data"]["pod_uid"] == POD_UID)
        .unwrap_or_else(|| panic!("no pod verdict in {groups:?}"));
    assert_eq!(pod_group["data"]["container"], POD_CONTAINER);
    let _ = Path::new(f);
}
