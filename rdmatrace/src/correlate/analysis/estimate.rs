//! RDMA traffic estimated from port counters, for verdicts where no per-QP traffic source is
//! on (every driver but rxe, or `--no-probe rxe`): each change of a port's traffic counter is
//! shared among the processes whose QPs on that device were connected during the sample
//! interval, in proportion to their connected QP-time in it. Bytes come from the IB port
//! counters (`port_xmit_data`/`port_rcv_data`, in 4-byte words) where the device has them,
//! else from packet counters (rxe's `sent_pkts`/`rcvd_pkts`) times the port's active MTU: an
//! upper bound. Either way an estimate, and marked so.

use rustc_hash::FxHashMap;

use crate::{
    event::{CompactString, CounterDelta},
    ports::{traffic_counter, TrafficDir as Dir},
};

/// A sample interval is taken as at most this long (samples come every second; emulation can
/// delay one). Traffic is shared among QPs connected within it.
pub const WINDOW_NS: u64 = 3_000_000_000;

/// Connected spans ended longer ago than this are forgotten.
const KEEP_NS: u64 = 4 * WINDOW_NS;

/// MTU assumed for packet counters of a port whose active MTU was not sampled.
const DEFAULT_MTU: u64 = 4096;

/// A process's estimated RDMA traffic (its share of its devices' port counters).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Estimate {
    pub tx_bytes: u64,
    pub rx_bytes: u64,
    pub tx_packets: u64,
    pub rx_packets: u64,
    /// Bytes were derived from packets times the MTU (no byte counter): an upper bound.
    pub from_packets: bool,
    /// Other processes had connected QPs on the same device in some interval it was given a
    /// share of.
    pub shared: bool,
}

impl Estimate {
    pub fn add(&mut self, o: &Estimate) {
        self.tx_bytes += o.tx_bytes;
        self.rx_bytes += o.rx_bytes;
        self.tx_packets += o.tx_packets;
        self.rx_packets += o.rx_packets;
        self.from_packets |= o.from_packets;
        self.shared |= o.shared;
    }
}

/// One QP's connected time on a device.
#[derive(Clone, Debug)]
struct Span {
    life: usize,
    pid: u32,
    from_ns: u64,
    until_ns: Option<u64>,
}

#[derive(Clone, Debug, Default)]
struct Device {
    /// Traffic counters of the device were sampled (announced at the first sample).
    counted: bool,
    /// It has IB byte counters: packet counters then only count packets.
    has_bytes: bool,
    mtu: Option<u32>,
    spans: Vec<Span>,
    /// When each (port, counter) last changed.
    last_change: FxHashMap<(u32, String), u64>,
}

/// Per device: connected QP spans and the traffic counters seen.
#[derive(Clone, Debug, Default)]
pub struct PortShares {
    devs: FxHashMap<CompactString, Device>,
}

impl PortShares {
    /// Whether traffic counters of `dev` are sampled (a connected QP there gets an estimate).
    pub fn counted(&self, dev: &str) -> bool {
        self.devs.get(dev).is_some_and(|d| d.counted)
    }

    /// The estimate of a process that has moved nothing on `dev` yet.
    pub fn blank(&self, dev: &str) -> Estimate {
        Estimate {
            from_packets: self
                .devs
                .get(dev)
                .is_some_and(|d| d.counted && !d.has_bytes),
            ..Default::default()
        }
    }

    pub fn mtu(&mut self, dev: &CompactString, mtu: u32) {
        if mtu > 0 {
            self.devs.entry(dev.clone()).or_default().mtu = Some(mtu);
        }
    }

    /// QP life `life` of `pid` on `dev` became connected at `ts`.
    pub fn connected(&mut self, dev: &CompactString, life: usize, pid: u32, ts: u64) {
        let d = self.devs.entry(dev.clone()).or_default();
        if d.spans
            .iter()
            .any(|s| s.life == life && s.until_ns.is_none())
        {
            return;
        }
        d.spans
            .retain(|s| s.until_ns.is_none_or(|u| u + KEEP_NS >= ts));
        d.spans.push(Span {
            life,
            pid,
            from_ns: ts,
            until_ns: None,
        });
    }

    /// QP life `life` on `dev` stopped being connected (error, reset, destroyed) at `ts`.
    pub fn disconnected(&mut self, dev: &str, life: usize, ts: u64) {
        if let Some(d) = self.devs.get_mut(dev) {
            for s in d.spans.iter_mut().filter(|s| s.life == life) {
                s.until_ns.get_or_insert(ts);
            }
        }
    }

    /// The pids with a QP connected now or lately on `dev`.
    pub fn owners(&self, dev: &str) -> Vec<u32> {
        let mut pids: Vec<u32> = self
            .devs
            .get(dev)
            .map(|d| d.spans.iter().map(|s| s.pid).collect())
            .unwrap_or_default();
        pids.sort_unstable();
        pids.dedup();
        pids
    }

    /// A port counter changed (or was announced) at `ts`: each process's share, as an
    /// estimate to add to its account. Empty when the counter is not a traffic counter.
    pub fn counter(&mut self, c: &CounterDelta, ts: u64) -> Vec<(u32, Estimate)> {
        let Some((dir, unit)) = traffic_counter(&c.name) else {
            return Vec::new();
        };
        let d = self.devs.entry(c.dev.clone()).or_default();
        d.counted = true;
        d.has_bytes |= unit.is_some();
        let prev = d.last_change.insert((c.port, c.name.clone()), ts);
        if c.delta == 0 {
            return Vec::new();
        }
        let start = prev.unwrap_or(0).max(ts.saturating_sub(WINDOW_NS)).min(ts);
        // Connected QP-time of each process in (start, ts].
        let mut weights: Vec<(u32, u64)> = Vec::new();
        for s in &d.spans {
            let a = s.from_ns.max(start);
            let b = s.until_ns.unwrap_or(ts).min(ts);
            // A QP connected and gone inside one instant still counts a little.
            let w = b.saturating_sub(a).max(u64::from(b >= a));
            if w == 0 || s.from_ns > ts {
                continue;
            }
            match weights.iter_mut().find(|(p, _)| *p == s.pid) {
                Some(e) => e.1 += w,
                None => weights.push((s.pid, w)),
            }
        }
        let total: u64 = weights.iter().map(|(_, w)| w).sum();
        if total == 0 {
            return Vec::new();
        }
        let shared = weights.len() > 1;
        let mtu = d.mtu.map_or(DEFAULT_MTU, u64::from);
        let (has_bytes, delta) = (d.has_bytes, c.delta);
        weights
            .into_iter()
            .map(|(pid, w)| {
                let part = ((u128::from(delta) * u128::from(w)) / u128::from(total)) as u64;
                let mut e = Estimate {
                    shared,
                    ..Default::default()
                };
                let (bytes, packets) = match dir {
                    Dir::Tx => (&mut e.tx_bytes, &mut e.tx_packets),
                    Dir::Rx => (&mut e.rx_bytes, &mut e.rx_packets),
                };
                match unit {
                    Some(unit) => *bytes = part.saturating_mul(unit),
                    None => {
                        let p = packets;
                        *p = part;
                        if !has_bytes {
                            *bytes = part.saturating_mul(mtu);
                            e.from_packets = true;
                        }
                    }
                }
                (pid, e)
            })
            .collect()
    }
}
