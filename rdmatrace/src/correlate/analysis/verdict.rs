//! Verdicts: did a process move its data over RDMA, fall back to TCP, or both? From its
//! account ([`ProcStats`]) and whether per-QP traffic was measured at all.

use std::sync::Arc;

use super::estimate::Estimate;
use crate::{correlate::cgroups::Place, event::CompactString, format::size};

/// TCP traffic below this is a control channel, not a data path (perftest, MPI bootstrap...).
pub const TCP_DATA_THRESHOLD: u64 = 1 << 20;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Verdict {
    Rdma,
    TcpFallback,
    Tcp,
    Mixed,
    Idle,
    Unknown,
}

impl Verdict {
    pub fn name(self) -> &'static str {
        match self {
            Verdict::Rdma => "rdma",
            Verdict::TcpFallback => "tcp_fallback",
            Verdict::Tcp => "tcp",
            Verdict::Mixed => "mixed",
            Verdict::Idle => "idle",
            Verdict::Unknown => "unknown",
        }
    }
}

/// One process's account: what it opened, created, moved and suffered.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProcStats {
    pub pid: u32,
    pub comm: CompactString,
    pub devices: Vec<CompactString>,
    pub ctx_opens: u64,
    /// Calls to `ibv_get_device_list` (verbs probes): the process looked for RDMA devices.
    pub device_lookups: u64,
    /// Calls to `ibv_open_device` (verbs probes), successful or not.
    pub device_open_calls: u64,
    pub qps_created: u64,
    pub qps_rts: u64,
    pub qp_types: Vec<String>,
    pub rdma_tx_bytes: u64,
    pub rdma_tx_packets: u64,
    pub rdma_rx_bytes: u64,
    pub rdma_rx_packets: u64,
    /// Its share of its devices' port traffic counters, when no per-QP traffic source is on
    /// and its QPs were connected on a device whose traffic counters are sampled.
    pub rdma_estimate: Option<Estimate>,
    /// Error completions on its CQs.
    pub wc_errors: u64,
    pub tcp_tx_bytes: u64,
    pub tcp_rx_bytes: u64,
    pub tcp_calls: u64,
    /// TCP bytes (both ways) per peer address; `None`: peer not known (or past
    /// [`MAX_PEERS`] distinct peers).
    pub tcp_peers: Vec<(Option<std::net::IpAddr>, u64)>,
    /// The addresses its QPs were connected to (dest GIDs), at most [`MAX_PEERS`].
    pub rdma_peers: Vec<std::net::IpAddr>,
    pub retrans_rdma: u64,
    pub retrans_tcp: u64,
    pub exit_code: Option<i32>,
    /// When it exited (monotonic ns), when seen.
    pub exit_ns: Option<u64>,
    /// Its cgroup (container, pod), when known.
    pub place: Option<Arc<Place>>,
    /// Its transport variables (allowlisted environment), when read.
    pub env: Vec<(CompactString, String)>,
}

impl ProcStats {
    /// Whether anything worth a verdict happened to the process.
    pub fn active(&self) -> bool {
        self.ctx_opens
            + self.qps_created
            + self.tcp_calls
            + self.retrans_rdma
            + self.retrans_tcp
            + self.rdma_tx_packets
            + self.rdma_rx_packets
            + self.wc_errors
            > 0
    }

    /// Adds `o`'s account to this one (a container's sum of its processes).
    pub fn add(&mut self, o: &ProcStats) {
        for d in &o.devices {
            if !self.devices.contains(d) {
                self.devices.push(d.clone());
            }
        }
        for t in &o.qp_types {
            if !self.qp_types.contains(t) {
                self.qp_types.push(t.clone());
            }
        }
        self.ctx_opens += o.ctx_opens;
        self.qps_created += o.qps_created;
        self.qps_rts += o.qps_rts;
        self.rdma_tx_bytes += o.rdma_tx_bytes;
        self.rdma_tx_packets += o.rdma_tx_packets;
        self.rdma_rx_bytes += o.rdma_rx_bytes;
        self.rdma_rx_packets += o.rdma_rx_packets;
        if let Some(e) = &o.rdma_estimate {
            self.rdma_estimate.get_or_insert_default().add(e);
        }
        self.wc_errors += o.wc_errors;
        self.tcp_tx_bytes += o.tcp_tx_bytes;
        self.tcp_rx_bytes += o.tcp_rx_bytes;
        self.tcp_calls += o.tcp_calls;
        for (peer, n) in &o.tcp_peers {
            self.tcp_to(*peer, *n);
        }
        for a in &o.rdma_peers {
            self.rdma_peer(*a);
        }
        self.device_lookups += o.device_lookups;
        self.device_open_calls += o.device_open_calls;
        self.retrans_rdma += o.retrans_rdma;
        self.retrans_tcp += o.retrans_tcp;
        for kv in &o.env {
            if !self.env.contains(kv) {
                self.env.push(kv.clone());
            }
        }
    }

    /// Adds `n` TCP bytes towards `peer`.
    pub(super) fn tcp_to(&mut self, peer: Option<std::net::IpAddr>, n: u64) {
        if let Some(e) = self.tcp_peers.iter_mut().find(|(p, _)| *p == peer) {
            e.1 += n;
        } else if self.tcp_peers.len() < MAX_PEERS {
            self.tcp_peers.push((peer, n));
        } else {
            self.tcp_to(None, n);
        }
    }

    /// Notes an address one of its QPs was connected to.
    pub(super) fn rdma_peer(&mut self, a: std::net::IpAddr) {
        if !self.rdma_peers.contains(&a) && self.rdma_peers.len() < MAX_PEERS {
            self.rdma_peers.push(a);
        }
    }

    /// TCP bytes to other peers than its QPs' (when those are known): side traffic, not the
    /// job's transport.
    pub fn tcp_side_bytes(&self) -> u64 {
        if self.rdma_peers.is_empty() {
            return 0;
        }
        self.tcp_peers
            .iter()
            .filter(|(p, _)| p.is_some_and(|a| !self.rdma_peers.contains(&a)))
            .map(|(_, n)| n)
            .sum()
    }

    /// Notes that the process uses a QP of this type on this device.
    pub(super) fn uses(&mut self, dev: &CompactString, qp_type: u32) {
        let t = crate::event::qp_type_name(qp_type);
        if !self.qp_types.contains(&t) {
            self.qp_types.push(t);
        }
        if !self.devices.contains(dev) {
            self.devices.push(dev.clone());
        }
    }
}

/// Distinct peer addresses kept per process (TCP and RDMA each).
pub const MAX_PEERS: usize = 256;

/// The RDMA bytes `p` moved, and whether they were counted (per QP, or estimated from port
/// counters) so that zero means none moved.
fn rdma_bytes(p: &ProcStats, traffic_measured: bool) -> (u64, bool) {
    match (&p.rdma_estimate, traffic_measured) {
        (_, true) => (p.rdma_tx_bytes + p.rdma_rx_bytes, true),
        (Some(e), false) => (e.tx_bytes + e.rx_bytes, true),
        (None, false) => (0, false),
    }
}

/// Whether a QP of `p` was seen connected: a transition to RTR/RTS, or traffic counted on its
/// QPs (a QP that moved packets was connected, even if its transition was missed).
fn connected(p: &ProcStats, traffic_measured: bool) -> bool {
    p.qps_rts > 0 || (traffic_measured && p.rdma_tx_packets + p.rdma_rx_packets > 0)
}

/// The verdict alone, without its evidence (no allocation: a live agent asks it of every
/// process once a second). [`verdict`] gives the same verdict with its evidence.
pub fn classify(p: &ProcStats, traffic_measured: bool) -> Verdict {
    let tcp = p.tcp_tx_bytes + p.tcp_rx_bytes;
    // TCP on the RDMA path: to its QPs' peers or to peers not known.
    let tcp_path = tcp.saturating_sub(p.tcp_side_bytes());
    let touched = p.ctx_opens > 0 || p.qps_created > 0;
    let connected = connected(p, traffic_measured);
    let (rdma, traffic_measured) = rdma_bytes(p, traffic_measured);
    let tcp_data = tcp >= TCP_DATA_THRESHOLD;
    if !touched {
        // A few KiB of TCP (a bootstrap, a health check) is not a transport for data: two MPI
        // ranks that moved their data through shared memory are idle, not tcp.
        if tcp_data && p.device_lookups > 0 {
            // It looked for RDMA devices, opened none, and moved its data over TCP.
            Verdict::TcpFallback
        } else if tcp_data {
            Verdict::Tcp
        } else if tcp == 0 && p.retrans_tcp > 0 {
            Verdict::Unknown
        } else {
            Verdict::Idle
        }
    } else if !connected || (traffic_measured && rdma == 0) {
        // Never connected a QP, or connected ones that carried nothing.
        if tcp_data {
            Verdict::TcpFallback
        } else {
            Verdict::Idle
        }
    } else if tcp_path >= TCP_DATA_THRESHOLD
        && (!traffic_measured || tcp_path.saturating_mul(10) >= rdma)
    {
        Verdict::Mixed
    } else {
        Verdict::Rdma
    }
}

/// The verdict on `p` and the evidence lines behind it. `traffic_measured`: a per-QP traffic
/// source (rxe) was on, so zero RDMA bytes means none moved; without it, the process's share
/// of its devices' port counters stands in, marked as estimated.
pub fn verdict(p: &ProcStats, traffic_measured: bool) -> (Verdict, Vec<String>) {
    let mut ev = Vec::new();
    let tcp = p.tcp_tx_bytes + p.tcp_rx_bytes;
    let touched = p.ctx_opens > 0 || p.qps_created > 0;
    let devs = if p.devices.is_empty() {
        "an RDMA device".to_string()
    } else {
        p.devices.join(", ")
    };
    if touched {
        ev.push(format!(
            "opened {devs}; {} QP(s) created ({}), {} reached RTR/RTS",
            p.qps_created,
            if p.qp_types.is_empty() {
                "-".into()
            } else {
                p.qp_types.join("/")
            },
            p.qps_rts
        ));
        if p.qps_rts == 0 && connected(p, traffic_measured) {
            ev.push(
                "its QPs carried packets, so one was connected: its transition to RTR/RTS was \
                 not seen"
                    .into(),
            );
        }
    }
    if !touched && p.device_lookups > 0 {
        ev.push(format!(
            "looked for RDMA devices ({} ibv_get_device_list call(s)) and opened none{}",
            p.device_lookups,
            if p.device_open_calls > 0 {
                format!(
                    ": {} ibv_open_device call(s) created no device context",
                    p.device_open_calls
                )
            } else {
                String::new()
            }
        ));
    }
    if traffic_measured && touched {
        ev.push(format!(
            "{} sent and {} received on its QPs ({} / {} packets)",
            size(p.rdma_tx_bytes),
            size(p.rdma_rx_bytes),
            p.rdma_tx_packets,
            p.rdma_rx_packets
        ));
    }
    if let (Some(e), false, true) = (&p.rdma_estimate, traffic_measured, touched) {
        ev.push(format!(
            "about {} sent and {} received on its QPs ({} / {} packets), estimated: {}{}",
            size(e.tx_bytes),
            size(e.rx_bytes),
            e.tx_packets,
            e.rx_packets,
            if e.from_packets {
                "the port's packet counters times its MTU (an upper bound)"
            } else {
                "the port's byte counters"
            },
            if e.shared {
                ", shared by connected QP-time with other processes on the same device"
            } else {
                ""
            }
        ));
    }
    if p.wc_errors > 0 {
        ev.push(format!("{} error completion(s)", p.wc_errors));
    }
    ev.push(if tcp == 0 {
        "0 B over TCP".to_string()
    } else {
        let per_mib = if tcp >= 1 << 20 {
            format!(
                ", {:.0} calls/MiB",
                p.tcp_calls as f64 / (tcp as f64 / (1u64 << 20) as f64)
            )
        } else {
            String::new()
        };
        format!(
            "{} over TCP ({} sent, {} received) in {} send/recv calls{per_mib}",
            size(tcp),
            size(p.tcp_tx_bytes),
            size(p.tcp_rx_bytes),
            p.tcp_calls
        )
    });
    let side = p.tcp_side_bytes();
    if side > 0 {
        let mut others: Vec<String> = p
            .tcp_peers
            .iter()
            .filter_map(|(a, _)| a.filter(|a| !p.rdma_peers.contains(a)))
            .map(|a| a.to_string())
            .collect();
        if others.len() > 4 {
            let more = others.len() - 4;
            others.truncate(4);
            others.push(format!("{more} more"));
        }
        ev.push(format!(
            "{} of it to other peers than its QPs' ({}): side traffic, not its transport",
            size(side),
            others.join(", ")
        ));
    }
    if !p.env.is_empty() {
        let vars: Vec<String> = p.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
        ev.push(format!("environment: {}", vars.join(" ")));
    }
    let verdict = classify(p, traffic_measured);
    if verdict == Verdict::Unknown && !touched {
        ev.push("TCP retransmits seen but no byte counts (TCP byte probes off?)".into());
    }
    if verdict == Verdict::Idle && !touched && tcp > 0 {
        ev.push(format!(
            "TCP below the data threshold ({}): control traffic only",
            size(TCP_DATA_THRESHOLD)
        ));
    }
    let path = tcp - side;
    if verdict == Verdict::Rdma && path > 0 {
        ev.push(if path < TCP_DATA_THRESHOLD {
            format!(
                "TCP below the data threshold ({}): a control channel",
                size(TCP_DATA_THRESHOLD)
            )
        } else {
            format!(
                "TCP to its QPs' peers ({}) under a tenth of its RDMA bytes: a control channel",
                size(path)
            )
        });
    }
    (verdict, ev)
}
