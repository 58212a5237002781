//! Helpers of the two-host lab tests (`tests/lab_hosts.rs`), run on both VMs of
//! `cargo xtask lab --hosts 2` at once: which host this is, barriers and values exchanged
//! through the folder both share, recordings kept there, the true clock offset measured over
//! the wire.

use std::{
    path::PathBuf,
    process::{Command, Stdio},
    thread::sleep,
    time::{Duration, Instant},
};

use super::{start, Finished, Running};

/// How long a host waits for the other at a barrier.
const BARRIER_TIMEOUT: Duration = Duration::from_secs(300);
/// The port of the clock exchange the tests run (guest2.sh's own is over by then).
const CLOCK_PORT: &str = "7320";

pub struct Host {
    /// `a` or `b`.
    pub name: String,
    pub addr: String,
    pub peer_addr: String,
    pub nic: String,
    pub dev: String,
    pub gid_index: String,
    pub shared: PathBuf,
    /// b's clock offset from a's the lab set, in seconds.
    pub clock_offset: f64,
}

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!("{name} not set: two-host lab tests run on both VMs of `cargo xtask lab --hosts 2`")
    })
}

impl Host {
    /// This host, from the lab's environment.
    pub fn here() -> Host {
        Host {
            name: env("LAB_HOST"),
            addr: env("LAB_ADDR"),
            peer_addr: env("LAB_PEER_ADDR"),
            nic: env("LAB_NIC"),
            dev: env("LAB_DEV"),
            gid_index: env("LAB_GID_INDEX"),
            shared: PathBuf::from(env("LAB_SHARED")),
            clock_offset: env("LAB_CLOCK_OFFSET").parse().expect("LAB_CLOCK_OFFSET"),
        }
    }

    pub fn is_a(&self) -> bool {
        self.name == "a"
    }

    /// The host name recordings carry.
    pub fn hostname(name: &str) -> String {
        format!("lab-{name}")
    }

    /// Waits until both hosts reached barrier `name`.
    pub fn barrier(&self, name: &str) {
        std::fs::write(self.shared.join(format!("{name}.{}", self.name)), b"")
            .expect("write barrier");
        let deadline = Instant::now() + BARRIER_TIMEOUT;
        while !["a", "b"]
            .iter()
            .all(|h| self.shared.join(format!("{name}.{h}")).exists())
        {
            assert!(
                Instant::now() < deadline,
                "barrier {name}: the other host did not come in {BARRIER_TIMEOUT:?}"
            );
            sleep(Duration::from_millis(100));
        }
    }

    /// Publishes `value` as `key` for the other host.
    pub fn put(&self, key: &str, value: &str) {
        let tmp = self.shared.join(format!(".{key}.{}", self.name));
        std::fs::write(&tmp, value).expect("write value");
        std::fs::rename(&tmp, self.shared.join(format!("{key}.{}.v", self.name)))
            .expect("publish value");
    }

    /// What host `from` published as `key` (waits for it).
    pub fn get(&self, from: &str, key: &str) -> String {
        let path = self.shared.join(format!("{key}.{from}.v"));
        let deadline = Instant::now() + BARRIER_TIMEOUT;
        loop {
            if let Ok(v) = std::fs::read_to_string(&path) {
                return v;
            }
            assert!(Instant::now() < deadline, "{from} never published {key}");
            sleep(Duration::from_millis(100));
        }
    }

    /// Where host `name`'s recording of scenario `test` goes.
    pub fn recording(&self, test: &str, name: &str) -> PathBuf {
        self.shared.join(format!("{test}-{name}.rdmt"))
    }

    /// Starts recording scenario `test` on this host.
    pub fn record(&self, test: &str) -> Running {
        let path = self.recording(test, &self.name);
        let path = path.to_str().expect("utf8 path");
        start(&["record", "-o", path], super::lab::READY_TIMEOUT)
    }

    /// Stops the recorder (SIGTERM: it finishes the file) and checks it ended well.
    pub fn stop(&self, recorder: Running) -> Finished {
        // SAFETY: kill(2) on our own child's pid with a valid signal number.
        unsafe { libc::kill(recorder.pid() as i32, libc::SIGTERM) };
        let done = recorder.wait();
        assert!(done.status.success(), "recorder: {}", done.stderr);
        done
    }

    /// Adds netem loss of `pct` % on this host's NIC (egress); removed by [`Host::no_loss`].
    pub fn loss(&self, pct: u32) {
        let ok = Command::new("tc")
            .args(["qdisc", "add", "dev", &self.nic, "root", "netem", "loss"])
            .arg(format!("{pct}%"))
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "tc netem on {}", self.nic);
    }

    pub fn no_loss(&self) {
        let _ = Command::new("tc")
            .args(["qdisc", "del", "dev", &self.nic, "root"])
            .stderr(Stdio::null())
            .status();
    }

    /// The true offset to add to b's clock to read a's, in ns, measured over the wire now
    /// (from a; b serves), with half the exchange's round trip as its bound: `(offset, bound)`
    /// on a, `None` on b.
    pub fn measured_clock_correction(&self) -> Option<(i64, i64)> {
        let sync = concat!(env!("CARGO_MANIFEST_DIR"), "/../xtask/lab/clocksync.py");
        if !self.is_a() {
            let ok = Command::new("python3")
                .args([sync, "serve", &self.addr, CLOCK_PORT])
                .status()
                .is_ok_and(|s| s.success());
            assert!(ok, "clock server");
            return None;
        }
        let out = Command::new("python3")
            .args([sync, "measure", &self.peer_addr, CLOCK_PORT])
            .output()
            .expect("clocksync");
        let text = String::from_utf8_lossy(&out.stdout);
        let v: Vec<i64> = text
            .split_whitespace()
            .filter_map(|w| w.parse().ok())
            .collect();
        assert_eq!(v.len(), 2, "clocksync measure: {text}");
        // a minus b is the correction to b.
        Some((v[0], v[1] / 2))
    }
}
