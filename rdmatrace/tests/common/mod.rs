//! Helpers shared by the integration tests: run the real `rdmatrace` binary, wait for its ready
//! line, stop it with SIGINT, collect its JSON Lines; a temporary directory of each test's own.
//!
//! A test that needs something this machine may lack (root, chromium, the lab VM) never passes
//! without running: it is `#[ignore = "needs ...: why"]`, its name starts with what it needs
//! (`root_`, `root_nordma_`, `root_verbs_`, `chromium_`, `lab_`: the table is `NEEDS` in
//! xtask/src/test.rs), and `cargo xtask test` runs it by name when the need is met, or reports
//! it as SKIPPED with the reason.
#![allow(dead_code)]

pub mod cgroup;
pub mod hosts;
pub mod lab;

use std::{
    io::{BufRead, BufReader, Read},
    os::unix::process::CommandExt as _,
    path::PathBuf,
    process::{Child, Command, Stdio},
    sync::mpsc,
    thread,
    time::{Duration, Instant},
};

use serde_json::Value;

pub const READY: &str = "Hit Ctrl-C to end.";

/// The rdmatrace binary under test: this build's, or `RDMATRACE_BIN` (the lab tier runs a
/// release build: under emulation a debug build takes three times as long to attach).
pub fn bin() -> &'static str {
    static BIN: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    BIN.get_or_init(|| {
        std::env::var("RDMATRACE_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_rdmatrace").into())
    })
}

/// Where the rdma-sys workloads were built (`cargo build -p rdmatrace-workloads`).
pub fn workload(name: &str) -> PathBuf {
    let dir = std::env::var_os("RDMATRACE_WORKLOADS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/debug"));
    dir.join(name)
}

pub struct Running {
    /// The stderr line that said it was ready.
    pub ready_line: String,
    child: Child,
    stdout: thread::JoinHandle<String>,
    stderr: thread::JoinHandle<String>,
}

/// Starts `rdmatrace ARGS` and waits (up to `timeout`) for its ready line on stderr.
pub fn start(args: &[&str], timeout: Duration) -> Running {
    let mut child = Command::new(bin())
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start rdmatrace");
    let mut out = child.stdout.take().expect("stdout");
    let stdout = thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let err = child.stderr.take().expect("stderr");
    let (tx, rx) = mpsc::channel();
    let stderr = thread::spawn(move || {
        let mut all = String::new();
        let mut sent = false;
        for line in BufReader::new(err).lines().map_while(Result::ok) {
            all.push_str(&line);
            all.push('\n');
            if !sent && line.contains(READY) {
                let _ = tx.send(line.clone());
                sent = true;
            }
        }
        all
    });
    let started = Instant::now();
    let ready_line = match rx.recv_timeout(timeout) {
        Ok(line) => line,
        Err(_) => {
            let _ = child.kill();
            let _ = child.wait();
            let err = stderr.join().unwrap_or_default();
            panic!(
                "rdmatrace {args:?} not ready after {:?}; stderr:\n{err}",
                started.elapsed()
            );
        }
    };
    Running {
        ready_line,
        child,
        stdout,
        stderr,
    }
}

pub struct Finished {
    pub status: std::process::ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl Finished {
    /// Every stdout line parsed as JSON.
    pub fn events(&self) -> Vec<Value> {
        self.stdout
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad JSON line {l:?}: {e}")))
            .collect()
    }
}

impl Running {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGINT, then wait for a clean exit.
    pub fn stop(self) -> Finished {
        // SAFETY: kill(2) on our own child's pid with a valid signal number.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGINT) };
        self.wait()
    }

    /// SIGKILL: no chance to clean up.
    pub fn kill9(mut self) -> Finished {
        let _ = self.child.kill();
        self.wait()
    }

    pub fn wait(mut self) -> Finished {
        let status = self.child.wait().expect("wait rdmatrace");
        Finished {
            status,
            stdout: self.stdout.join().unwrap_or_default(),
            stderr: self.stderr.join().unwrap_or_default(),
        }
    }
}

/// Runs `rdmatrace ARGS` to completion.
pub fn run(args: &[&str]) -> Finished {
    finished(Command::new(bin()).args(args))
}

/// Runs `rdmatrace ARGS` to completion without privileges (see [`unprivileged`]).
pub fn run_unprivileged(args: &[&str]) -> Finished {
    finished(unprivileged(Command::new(bin()).args(args)))
}

fn finished(cmd: &mut Command) -> Finished {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("run {cmd:?}: {e}"));
    Finished {
        status: out.status,
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// A new directory for one test alone, removed when dropped. Tests run as parallel threads of
/// one process: a directory named after the process would be shared, and removed by one test
/// while another still writes there.
pub fn test_dir(test: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("rdmatrace-{test}-"))
        .tempdir()
        .unwrap_or_else(|e| panic!("cannot create a temp dir for {test}: {e}"))
}

/// The user and group `nobody`.
pub const NOBODY: u32 = 65534;

/// Makes `cmd` run without privileges: as root, it drops to user and group nobody with no
/// supplementary groups before exec (all of root's capabilities go with its uid); otherwise it
/// runs as this unprivileged user anyway.
pub fn unprivileged(cmd: &mut Command) -> &mut Command {
    if is_root() {
        // SAFETY: the closure runs between fork and exec and makes only async-signal-safe
        // system calls (setgroups, setgid, setuid) on values it owns; it allocates nothing.
        unsafe {
            cmd.pre_exec(|| {
                if libc::setgroups(0, std::ptr::null()) != 0
                    || libc::setgid(NOBODY) != 0
                    || libc::setuid(NOBODY) != 0
                {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    cmd
}

/// Events of `type` whose data matches every `(key, value)`.
pub fn select<'a>(events: &'a [Value], ty: &str, want: &[(&str, Value)]) -> Vec<&'a Value> {
    events
        .iter()
        .filter(|e| e["type"] == ty)
        .filter(|e| want.iter().all(|(k, v)| &e["data"][*k] == v))
        .collect()
}

/// A plain HTTP/1.1 request to `addr` (`host:port`): (status, headers, body).
pub fn http(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> (u16, String, String) {
    try_http(addr, method, path, headers)
        .unwrap_or_else(|e| panic!("{method} http://{addr}{path}: {e}"))
}

/// [`http`], with connection errors returned (a server still starting).
pub fn try_http(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> std::io::Result<(u16, String, String)> {
    use std::io::Write as _;
    let mut s = std::net::TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(20)))?;
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (k, v) in headers {
        req += &format!("{k}: {v}\r\n");
    }
    req += "\r\n";
    s.write_all(req.as_bytes())?;
    let mut resp = String::new();
    s.read_to_string(&mut resp)?;
    let (head, body) = resp.split_once("\r\n\r\n").unwrap_or((&resp, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    Ok((status, head.to_string(), body.to_string()))
}

/// The `host:port` in a `serve` ready line.
pub fn served_addr(ready_line: &str) -> String {
    ready_line
        .split("http://")
        .nth(1)
        .and_then(|r| r.split('/').next())
        .unwrap_or_else(|| panic!("no address in {ready_line:?}"))
        .to_string()
}
