//! Several hosts' reports as one: both ends of each connection paired across the recordings
//! ([`pair`]), each host's clock aligned to the first's from the connections' handshakes
//! ([`clocks`]), and each connection in trouble localized to a direction and a host
//! ([`faults`]). Pure: it reads the per-host [`Report`]s the analysis made.

pub mod clocks;
pub mod faults;
pub mod pair;

use super::analysis::{QpLife, Report};

pub use clocks::HostClock;
pub use faults::Fault;
pub use pair::{Connection, End, NetPair};

/// One host's recording, analysed.
#[derive(Clone, Debug)]
pub struct HostInput {
    /// The recording's host name.
    pub host: String,
    /// The recording's clock anchor: wall = monotonic + this (ns), by the host's own clock.
    pub clock_offset_ns: i64,
    pub report: Report,
}

impl HostInput {
    /// A monotonic time of this host as wall ns by its own clock.
    pub fn wall(&self, mono_ns: u64) -> i128 {
        i128::from(mono_ns) + i128::from(self.clock_offset_ns)
    }
}

/// The hosts together.
#[derive(Clone, Debug)]
pub struct Fleet {
    pub hosts: Vec<HostInput>,
    /// One per host, in the same order: the correction to its wall clock.
    pub clocks: Vec<HostClock>,
    pub connections: Vec<Connection>,
    pub faults: Vec<Fault>,
}

impl Fleet {
    /// Pairs, aligns and localizes.
    pub fn build(hosts: Vec<HostInput>) -> Fleet {
        let mut connections = pair::pair(&hosts);
        let net = pair::pair_net(&hosts);
        let tcp = pair::tcp_connections(&hosts, &net, &mut connections);
        let clocks = clocks::align(&hosts, &connections, &net);
        let faults = faults::localize(&hosts, &clocks, &connections);
        connections.extend(tcp);
        Fleet {
            hosts,
            clocks,
            connections,
            faults,
        }
    }

    pub fn qp(&self, end: &End) -> &QpLife {
        &self.hosts[end.host].report.qps[end.qp]
    }

    /// A monotonic time of host `host` on the common (first host's) clock, in wall ns.
    pub fn aligned(&self, host: usize, mono_ns: u64) -> u64 {
        aligned(&self.hosts, &self.clocks, host, mono_ns)
    }
}

/// [`Fleet::aligned`] before the fleet is built.
pub fn aligned(hosts: &[HostInput], clocks: &[HostClock], host: usize, mono_ns: u64) -> u64 {
    let w = hosts[host].wall(mono_ns) + i128::from(clocks[host].offset_ns);
    w.clamp(0, i128::from(u64::MAX)) as u64
}

#[cfg(test)]
mod tests;
