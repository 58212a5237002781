//! The ends of TCP connections and RDMA CM connections a host saw, with when each step of their
//! handshakes and teardowns happened here: the other host's side of the same connection
//! happened in a known order with these (a SYN-ACK after the SYN, a CM reply after the request),
//! which pairs them across hosts and bounds the hosts' clock offset (`correlate::fleet`).

use std::{collections::HashMap, net::SocketAddr};

use crate::event::{tcp_state_name, CmEvent, CompactString, Record, TcpState};

/// Ends kept at most (a post-mortem of a host with endless short connections stays bounded;
/// the first ones are kept).
pub const MAX_ENDS: usize = 100_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Tcp,
    Cm,
}

/// One end of a connection, as this host saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NetEnd {
    pub kind: Kind,
    pub local: SocketAddr,
    pub remote: SocketAddr,
    pub pid: u32,
    pub comm: CompactString,
    /// CM: the device and QPN once the id had a QP.
    pub dev: Option<CompactString>,
    pub qpn: Option<u32>,
    /// The first time (monotonic ns) of each step: TCP `est_active` (SYN_SENT -> ESTABLISHED),
    /// `est_passive` (SYN_RECV -> ESTABLISHED) and the states it entered (`FIN_WAIT1`,
    /// `CLOSE_WAIT`, ...); CM the event names (`ROUTE_RESOLVED`, `CONNECT_REQUEST`, ...).
    pub steps: Vec<(String, u64)>,
}

impl NetEnd {
    pub fn step(&self, name: &str) -> Option<u64> {
        self.steps.iter().find(|(n, _)| n == name).map(|(_, t)| *t)
    }
}

#[derive(Clone, Default)]
pub struct Handshakes {
    pub ends: Vec<NetEnd>,
    /// (kind, local, remote) -> index of its live end.
    open: HashMap<(bool, SocketAddr, SocketAddr), usize>,
}

impl Handshakes {
    fn end(
        &mut self,
        kind: Kind,
        local: SocketAddr,
        remote: SocketAddr,
        pid: u32,
        comm: &str,
    ) -> Option<&mut NetEnd> {
        let key = (kind == Kind::Tcp, local, remote);
        let i = match self.open.get(&key) {
            Some(i) => *i,
            None => {
                if self.ends.len() >= MAX_ENDS {
                    return None;
                }
                self.ends.push(NetEnd {
                    kind,
                    local,
                    remote,
                    pid,
                    comm: comm.into(),
                    dev: None,
                    qpn: None,
                    steps: Vec::new(),
                });
                self.open.insert(key, self.ends.len() - 1);
                self.ends.len() - 1
            }
        };
        let e = &mut self.ends[i];
        if e.pid == 0 && pid != 0 {
            e.pid = pid;
            e.comm = comm.into();
        }
        Some(e)
    }

    pub fn tcp(&mut self, rec: &Record, t: &TcpState) {
        let tu = &t.tcp;
        if tu.sport == 0 || tu.dport == 0 {
            return; // a listener, or a connect before its port was chosen
        }
        let local = SocketAddr::new(tu.saddr, tu.sport);
        let remote = SocketAddr::new(tu.daddr, tu.dport);
        let new = tcp_state_name(tu.state);
        let old = tcp_state_name(t.old_state);
        let name = match (new.as_str(), old.as_str()) {
            ("ESTABLISHED", "SYN_SENT") => "est_active".to_string(),
            ("ESTABLISHED", "SYN_RECV") => "est_passive".to_string(),
            _ => new,
        };
        let closed = name == "CLOSE";
        let Some(e) = self.end(Kind::Tcp, local, remote, t.owner_pid, &t.owner_comm) else {
            return;
        };
        if e.step(&name).is_none() {
            e.steps.push((name, rec.ts_ns));
        }
        if closed {
            self.open.remove(&(true, local, remote));
        }
    }

    pub fn cm(&mut self, rec: &Record, c: &CmEvent) {
        let (Some(local), Some(remote)) = (c.src, c.dst) else {
            return;
        };
        if local.port() == 0 || remote.port() == 0 {
            return;
        }
        let Some(e) = self.end(Kind::Cm, local, remote, c.owner_pid, &c.owner_comm) else {
            return;
        };
        if c.qpn != 0 {
            e.dev = Some(c.dev.clone());
            e.qpn = Some(c.qpn);
        }
        if e.step(&c.event).is_none() {
            e.steps.push((c.event.to_string(), rec.ts_ns));
        }
        if matches!(c.event.as_str(), "DISCONNECTED" | "TIMEWAIT_EXIT") {
            self.open.remove(&(false, local, remote));
        }
    }
}

impl Handshakes {
    /// Forgets the ends whose last step is older than `before_ns` (a long-running agent).
    pub fn forget_before(&mut self, before_ns: u64) {
        let before = self.ends.len();
        self.ends
            .retain(|e| e.steps.iter().any(|(_, t)| *t >= before_ns));
        if self.ends.len() != before {
            self.open = self
                .ends
                .iter()
                .enumerate()
                .filter(|(_, e)| {
                    !e.steps.iter().any(|(n, _)| {
                        matches!(n.as_str(), "CLOSE" | "DISCONNECTED" | "TIMEWAIT_EXIT")
                    })
                })
                .map(|(i, e)| ((e.kind == Kind::Tcp, e.local, e.remote), i))
                .collect();
        }
    }
}
