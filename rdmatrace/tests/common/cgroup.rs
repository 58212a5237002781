//! Cgroups made the way container runtimes make them, for tests that put real processes in
//! containers without a container runtime: a Docker scope, a Kubernetes pod's containerd scope.

use std::{path::PathBuf, process::Command};

pub const DOCKER_ID: &str = "d0c4e2a1b3c5d7e9f0a2b4c6d8e0f1a3b5c7d9e1f2a4b6c8d0e1f3a5b7c9d1e3";
pub const POD_CONTAINER: &str = "c0ffee0123456789abcdef0123456789abcdef0123456789abcdef0123456789";
pub const POD_UID: &str = "7d3c2b1a-0f9e-4d8c-b7a6-958473625140";

/// `/system.slice/docker-<DOCKER_ID>.scope`.
pub fn docker_path() -> String {
    format!("/system.slice/docker-{DOCKER_ID}.scope")
}

/// A besteffort pod's containerd container, systemd cgroup driver.
pub fn pod_path() -> String {
    format!(
        "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{}.slice/cri-containerd-{POD_CONTAINER}.scope",
        POD_UID.replace('-', "_")
    )
}

/// A cgroup v2 directory made for the test, removed at the end (its processes have exited).
pub struct Cgroup {
    pub dir: PathBuf,
    /// Made by us, innermost last: removed in reverse.
    made: Vec<PathBuf>,
}

pub fn cgroup2_root() -> PathBuf {
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
    pub fn make(rel: &str) -> Cgroup {
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

    /// `sh -c 'move into this cgroup; exec PROG ARGS'`: the command runs in the cgroup from
    /// its exec on, under the pid the caller sees.
    pub fn command(&self, prog: &str, args: &[&str]) -> Command {
        let mut c = Command::new("/bin/sh");
        c.arg("-c")
            .arg(format!(
                "echo $$ > {} && exec \"$0\" \"$@\"",
                self.dir.join("cgroup.procs").display()
            ))
            .arg(prog)
            .args(args);
        c
    }

    /// Runs a loopback TCP transfer of `bytes` inside this cgroup; its pid.
    pub fn transfer(&self, bytes: usize) -> u32 {
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
