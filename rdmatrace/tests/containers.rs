//! Containers on the host kernel: real processes placed in cgroups made the way container
//! runtimes make them (a Docker scope, a Kubernetes pod's containerd scope), traced live with a
//! kernel-side `--container` filter and recorded; the recording then read as it would be on
//! another machine (paths stored in it). Root only (`root_`): cgroups are made and eBPF loaded.

mod common;

use std::{path::Path, time::Duration};

use common::{
    cgroup::{docker_path, pod_path, Cgroup, DOCKER_ID, POD_CONTAINER, POD_UID},
    *,
};
use serde_json::Value;

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
    let docker = Cgroup::make(&docker_path());
    let pod = Cgroup::make(&pod_path());
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
