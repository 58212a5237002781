//! Periodic samples, turned into records of the same wire format as kernel events (kinds of
//! 100 and above in `rdmatrace-common`), so they decode, correlate and record like the rest:
//! per-process TCP bytes and per-QP traffic from kernel aggregates, the RDMA port counters,
//! port states and MTUs of sysfs, and the rdma netlink QP table and per-QP counters. Only
//! what changed since the previous sample is emitted.

use std::{
    collections::HashMap,
    path::{Path, PathBuf},
};

use aya::maps::{MapData, PerCpuHashMap};
use rdmatrace_common::{
    event::{
        CounterSample, CqNotify, CqNotifySample, EventKind, GidSample, PortSample, QpTraffic,
        QpTrafficSample, TcpBytes, TcpBytesSample, TcpPeerKey, COUNTER_NAME_LEN,
        PORT_STATE_REMOVED,
    },
    limits::DEV_NAME_LEN,
};

use crate::{
    loader::Tracer,
    wire::{fixed, header, pod_bytes},
};

fn port_sample(p: &crate::ports::Port, ts_ns: u64) -> PortSample {
    PortSample {
        header: header(EventKind::Port, ts_ns, 0, [0; 16]),
        dev: fixed::<DEV_NAME_LEN>(&p.dev),
        port: p.port,
        state: p.state,
        active_mtu: p.active_mtu,
        netdev_mtu: p.netdev_mtu,
        link_layer: fixed::<16>(&p.link_layer),
        netdev: fixed::<16>(&p.netdev),
    }
}

fn gid_sample(g: &crate::gids::Gid, deleted: bool, ts_ns: u64) -> GidSample {
    GidSample {
        header: header(EventKind::Gid, ts_ns, 0, [0; 16]),
        dev: fixed::<DEV_NAME_LEN>(&g.dev),
        port: g.port,
        index: g.index,
        gid: if deleted { [0; 16] } else { g.gid },
        gid_type: g.gid_type,
        _pad: 0,
        netdev: fixed::<16>(&g.netdev),
    }
}

/// GID tables are read at most this often, and when a port changed (every entry read is a
/// driver call).
const GID_PERIOD: std::time::Duration = std::time::Duration::from_secs(30);

/// One port counter file.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct CounterKey {
    dev: String,
    port: u32,
    hw: bool,
    name: String,
}

/// Reads `root/DEV/ports/N/{counters,hw_counters}/*` (normally root = /sys/class/infiniband).
fn read_counters(root: &Path) -> Vec<(CounterKey, u64)> {
    let mut out = Vec::new();
    let Ok(devs) = std::fs::read_dir(root) else {
        return out;
    };
    for dev in devs.filter_map(Result::ok) {
        let dev_name = dev.file_name().to_string_lossy().into_owned();
        let Ok(ports) = std::fs::read_dir(dev.path().join("ports")) else {
            continue;
        };
        for port in ports.filter_map(Result::ok) {
            let Ok(port_no) = port.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            for (dir, hw) in [("counters", false), ("hw_counters", true)] {
                let Ok(files) = std::fs::read_dir(port.path().join(dir)) else {
                    continue;
                };
                for f in files.filter_map(Result::ok) {
                    let Ok(text) = std::fs::read_to_string(f.path()) else {
                        continue;
                    };
                    if let Ok(v) = text.trim().parse::<u64>() {
                        let key = CounterKey {
                            dev: dev_name.clone(),
                            port: port_no,
                            hw,
                            name: f.file_name().to_string_lossy().into_owned(),
                        };
                        out.push((key, v));
                    }
                }
            }
        }
    }
    out
}

pub struct Sampler {
    tcp: Option<PerCpuHashMap<MapData, TcpPeerKey, TcpBytes>>,
    qps: Option<PerCpuHashMap<MapData, u64, QpTraffic>>,
    cqs: Option<PerCpuHashMap<MapData, u64, CqNotify>>,
    counters_root: Option<PathBuf>,
    prev_tcp: HashMap<TcpPeerKey, TcpBytes>,
    prev_qp: HashMap<u64, QpTraffic>,
    prev_cq: HashMap<u64, CqNotify>,
    prev_counters: HashMap<CounterKey, u64>,
    netlink: Option<crate::netlink::sampler::NetlinkSampler>,
    prev_ports: HashMap<(String, u32), crate::ports::Port>,
    prev_gids: HashMap<(String, u32, u32), crate::gids::Gid>,
    gids_read: Option<std::time::Instant>,
    /// The traffic counters were reported once (the first sample lists them unchanged too, so
    /// that a report knows which devices' traffic was counted).
    traffic_announced: bool,
}

fn sum_tcp(per_cpu: impl Iterator<Item = TcpBytes>) -> Option<TcpBytes> {
    per_cpu.reduce(|mut a, b| {
        a.tx_bytes += b.tx_bytes;
        a.rx_bytes += b.rx_bytes;
        a.tx_calls += b.tx_calls;
        a.rx_calls += b.rx_calls;
        if a.comm[0] == 0 {
            a.comm = b.comm;
        }
        a
    })
}

fn sum_qp(per_cpu: impl Iterator<Item = QpTraffic>) -> Option<QpTraffic> {
    // A CPU that never saw this QP (or saw an older QP at its address) has a different ident.
    let all: Vec<QpTraffic> = per_cpu.collect();
    let newest = all
        .iter()
        .filter(|t| t.qp.qpn != 0)
        .max_by_key(|t| t.tx_packets + t.rx_packets)?
        .qp;
    let mut total = QpTraffic {
        qp: newest,
        tx_packets: 0,
        tx_bytes: 0,
        rx_packets: 0,
        rx_bytes: 0,
    };
    for t in all.iter().filter(|t| t.qp == newest) {
        total.tx_packets += t.tx_packets;
        total.tx_bytes += t.tx_bytes;
        total.rx_packets += t.rx_packets;
        total.rx_bytes += t.rx_bytes;
    }
    Some(total)
}

fn sum_cq(per_cpu: impl Iterator<Item = CqNotify>) -> Option<CqNotify> {
    // As for QPs: a CPU may still hold an older CQ that lived at the same address.
    let all: Vec<CqNotify> = per_cpu.collect();
    let newest = all
        .iter()
        .filter(|n| n.count != 0)
        .max_by_key(|n| n.count)?;
    let mut total = *newest;
    total.count = all
        .iter()
        .filter(|n| n.cqn == newest.cqn && n.dev == newest.dev)
        .map(|n| n.count)
        .sum();
    Some(total)
}

impl Sampler {
    /// Takes the aggregate maps out of the loaded object; `counters_root` enables sysfs
    /// counter sampling.
    pub fn new(tracer: &mut Tracer, counters_root: Option<PathBuf>) -> Sampler {
        let tcp = tracer
            .ebpf
            .take_map("TCP_BYTES")
            .and_then(|m| PerCpuHashMap::try_from(m).ok());
        let qps = tracer
            .ebpf
            .take_map("QP_TRAFFIC")
            .and_then(|m| PerCpuHashMap::try_from(m).ok());
        let cqs = tracer
            .ebpf
            .take_map("CQ_NOTIFY")
            .and_then(|m| PerCpuHashMap::try_from(m).ok());
        Sampler::with_sources(tcp, qps, cqs, counters_root)
    }

    /// A sampler of these sources, baselined: it reports what happens from now on.
    fn with_sources(
        tcp: Option<PerCpuHashMap<MapData, TcpPeerKey, TcpBytes>>,
        qps: Option<PerCpuHashMap<MapData, u64, QpTraffic>>,
        cqs: Option<PerCpuHashMap<MapData, u64, CqNotify>>,
        counters_root: Option<PathBuf>,
    ) -> Sampler {
        let mut s = Sampler {
            tcp,
            qps,
            cqs,
            counters_root,
            prev_tcp: HashMap::new(),
            prev_qp: HashMap::new(),
            prev_cq: HashMap::new(),
            prev_counters: HashMap::new(),
            netlink: None,
            prev_ports: HashMap::new(),
            prev_gids: HashMap::new(),
            gids_read: None,
            traffic_announced: false,
        };
        // Baselines: report what happens from now on, not since boot.
        let _ = s.poll(0);
        s
    }

    /// Only the sysfs sources (port counters, states, GID tables) under `root`, laid out as
    /// /sys/class/infiniband: a fixture tree in tests, or a copy of another host's.
    pub fn from_sysfs(root: PathBuf) -> Sampler {
        Sampler::with_sources(None, None, None, Some(root))
    }

    /// Adds the rdma netlink sources (QP resource table, per-QP counters). They are not
    /// baselined: the first sample lists every QP that exists, so QPs older than the trace
    /// get an owner and a state.
    pub fn with_netlink(&mut self, netlink: crate::netlink::sampler::NetlinkSampler) {
        self.netlink = Some(netlink);
    }

    /// Problems of a sample source, each said once.
    pub fn take_warnings(&mut self) -> Vec<String> {
        self.netlink
            .as_mut()
            .map(|n| n.take_warnings())
            .unwrap_or_default()
    }

    /// Undoes what the sources changed on the host (counter binding); returns what could not
    /// be undone.
    pub fn finish(&mut self) -> Vec<String> {
        self.netlink.take().map(|n| n.finish()).unwrap_or_default()
    }

    /// Records for everything that moved since the previous call (the QP table within its
    /// CPU budget: a large table is read less often than every call).
    pub fn poll(&mut self, ts_ns: u64) -> Vec<Vec<u8>> {
        self.poll_with(ts_ns, false)
    }

    /// [`Sampler::poll`] for the last time: the QP table is read whatever its budget.
    pub fn poll_final(&mut self, ts_ns: u64) -> Vec<Vec<u8>> {
        self.poll_with(ts_ns, true)
    }

    fn poll_with(&mut self, ts_ns: u64, last: bool) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        if let (Some(nl), true) = (&mut self.netlink, ts_ns != 0) {
            if last {
                out.extend(nl.poll_now(ts_ns).0);
            } else {
                out.extend(nl.poll(ts_ns));
            }
        }
        if let Some(map) = &self.tcp {
            // Keys the kernel evicted or no longer has are forgotten here too.
            let mut seen = std::collections::HashSet::new();
            for (key, per_cpu) in map.iter().filter_map(Result::ok) {
                seen.insert(key);
                let Some(total) = sum_tcp(per_cpu.iter().copied()) else {
                    continue;
                };
                let prev = self.prev_tcp.insert(key, total);
                let base = prev.unwrap_or(TcpBytes {
                    tx_bytes: 0,
                    rx_bytes: 0,
                    tx_calls: 0,
                    rx_calls: 0,
                    ..total
                });
                let delta = TcpBytes {
                    tx_bytes: total.tx_bytes.saturating_sub(base.tx_bytes),
                    rx_bytes: total.rx_bytes.saturating_sub(base.rx_bytes),
                    tx_calls: total.tx_calls.saturating_sub(base.tx_calls),
                    rx_calls: total.rx_calls.saturating_sub(base.rx_calls),
                    // The key says the peer (a CPU slot may be zero where it never counted).
                    daddr: key.daddr,
                    family: key.family,
                    ..total
                };
                if ts_ns != 0 && (delta.tx_calls | delta.rx_calls) != 0 {
                    out.push(pod_bytes(&TcpBytesSample {
                        header: header(EventKind::TcpBytes, ts_ns, key.tgid, total.comm),
                        bytes: delta,
                    }));
                }
            }
            self.prev_tcp.retain(|k, _| seen.contains(k));
        }
        if let Some(map) = &self.qps {
            for (key, per_cpu) in map.iter().filter_map(Result::ok) {
                let Some(total) = sum_qp(per_cpu.iter().copied()) else {
                    continue;
                };
                let prev = self.prev_qp.insert(key, total).filter(|p| p.qp == total.qp);
                let p = prev.unwrap_or(QpTraffic {
                    qp: total.qp,
                    tx_packets: 0,
                    tx_bytes: 0,
                    rx_packets: 0,
                    rx_bytes: 0,
                });
                let delta = QpTraffic {
                    qp: total.qp,
                    tx_packets: total.tx_packets.saturating_sub(p.tx_packets),
                    tx_bytes: total.tx_bytes.saturating_sub(p.tx_bytes),
                    rx_packets: total.rx_packets.saturating_sub(p.rx_packets),
                    rx_bytes: total.rx_bytes.saturating_sub(p.rx_bytes),
                };
                if ts_ns != 0 && (delta.tx_packets | delta.rx_packets) != 0 {
                    out.push(pod_bytes(&QpTrafficSample {
                        header: header(EventKind::QpTraffic, ts_ns, 0, [0; 16]),
                        traffic: delta,
                    }));
                }
            }
        }
        if let Some(map) = &self.cqs {
            for (key, per_cpu) in map.iter().filter_map(Result::ok) {
                let Some(total) = sum_cq(per_cpu.iter().copied()) else {
                    continue;
                };
                let prev = self
                    .prev_cq
                    .insert(key, total)
                    .filter(|p| p.cqn == total.cqn && p.dev == total.dev);
                let mut delta = total;
                delta.count = total.count.saturating_sub(prev.map_or(0, |p| p.count));
                if ts_ns != 0 && delta.count != 0 {
                    out.push(pod_bytes(&CqNotifySample {
                        header: header(EventKind::CqNotify, ts_ns, 0, [0; 16]),
                        notify: delta,
                    }));
                }
            }
        }
        if let (Some(root), true) = (&self.counters_root, ts_ns != 0) {
            // Not baselined: the first sample says what every port is like.
            let ports = crate::ports::read_ports(root, Path::new("/sys/class/net"));
            let mut removed: Vec<crate::ports::Port> = self
                .prev_ports
                .values()
                .filter(|old| !ports.iter().any(|p| p.dev == old.dev && p.port == old.port))
                .cloned()
                .collect();
            removed.sort_by(|a, b| (&a.dev, a.port).cmp(&(&b.dev, b.port)));
            for mut p in removed {
                self.prev_ports.remove(&(p.dev.clone(), p.port));
                p.state = PORT_STATE_REMOVED;
                out.push(pod_bytes(&port_sample(&p, ts_ns)));
            }
            for p in ports {
                let key = (p.dev.clone(), p.port);
                if self.prev_ports.get(&key) == Some(&p) {
                    continue;
                }
                out.push(pod_bytes(&port_sample(&p, ts_ns)));
                self.prev_ports.insert(key, p);
                // A port that came up or changed may have new addresses.
                self.gids_read = None;
            }
        }
        if let (Some(root), true) = (self.counters_root.clone(), ts_ns != 0) {
            if self.gids_read.is_none_or(|t| t.elapsed() >= GID_PERIOD) {
                self.gids_read = Some(std::time::Instant::now());
                self.poll_gids(&root, ts_ns, &mut out);
            }
        }
        if let Some(root) = &self.counters_root {
            let announce = !self.traffic_announced && ts_ns != 0;
            self.traffic_announced |= announce;
            for (key, value) in read_counters(root) {
                let prev = self.prev_counters.insert(key.clone(), value);
                let Some(prev) = prev else { continue };
                let traffic = crate::ports::traffic_counter(&key.name).is_some();
                if (value != prev || (announce && traffic)) && ts_ns != 0 {
                    let sample = CounterSample {
                        header: header(EventKind::Counter, ts_ns, 0, [0; 16]),
                        dev: fixed::<DEV_NAME_LEN>(&key.dev),
                        port: key.port,
                        hw: u32::from(key.hw),
                        name: fixed::<COUNTER_NAME_LEN>(&key.name),
                        value,
                        delta: value.wrapping_sub(prev),
                    };
                    out.push(pod_bytes(&sample));
                }
            }
        }
        out
    }
}

impl Sampler {
    /// GID entries that appeared, changed or went away since the previous read (not
    /// baselined: the first read lists every entry).
    fn poll_gids(&mut self, root: &Path, ts_ns: u64, out: &mut Vec<Vec<u8>>) {
        let now = crate::gids::read_gids(root);
        let gone: Vec<(String, u32, u32)> = self
            .prev_gids
            .keys()
            .filter(|k| {
                !now.iter()
                    .any(|g| (&g.dev, g.port, g.index) == (&k.0, k.1, k.2))
            })
            .cloned()
            .collect();
        for k in gone {
            if let Some(g) = self.prev_gids.remove(&k) {
                out.push(pod_bytes(&gid_sample(&g, true, ts_ns)));
            }
        }
        for g in now {
            let key = (g.dev.clone(), g.port, g.index);
            if self.prev_gids.get(&key) != Some(&g) {
                out.push(pod_bytes(&gid_sample(&g, false, ts_ns)));
                self.prev_gids.insert(key, g);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sysfs_counters_are_found_per_device_and_port() {
        let dir = tempfile::Builder::new()
            .prefix("rdmt-counters-")
            .tempdir()
            .expect("temp dir");
        let root = dir.path();
        let hw = root.join("rxe0/ports/1/hw_counters");
        std::fs::create_dir_all(&hw).expect("mkdir");
        std::fs::write(hw.join("rcvd_seq_err"), "42\n").expect("write");
        std::fs::write(hw.join("lifespan"), "10\n").expect("write");
        std::fs::create_dir_all(root.join("rxe0/ports/1/counters")).expect("mkdir");
        std::fs::write(root.join("rxe0/ports/1/counters/port_xmit_data"), "7\n").expect("write");
        let mut got = read_counters(root);
        got.sort_by(|a, b| a.0.name.cmp(&b.0.name));
        let names: Vec<(&str, bool, u64)> = got
            .iter()
            .map(|(k, v)| (k.name.as_str(), k.hw, *v))
            .collect();
        assert_eq!(
            names,
            [
                ("lifespan", true, 10),
                ("port_xmit_data", false, 7),
                ("rcvd_seq_err", true, 42)
            ]
        );
        assert!(got.iter().all(|(k, _)| k.dev == "rxe0" && k.port == 1));
    }

    #[test]
    fn per_cpu_qp_totals_ignore_a_stale_qp_at_the_same_address() {
        let mk = |qpn, pk| {
            let mut t: QpTraffic = QpTraffic {
                qp: rdmatrace_common::event::QpIdent {
                    dev: [0; 64],
                    qpn,
                    qp_type: 2,
                },
                tx_packets: pk,
                tx_bytes: pk * 100,
                rx_packets: 0,
                rx_bytes: 0,
            };
            t.qp.dev[0] = b'r';
            t
        };
        let total = sum_qp([mk(0x11, 5), mk(0x12, 50), mk(0x12, 7)].into_iter()).expect("total");
        assert_eq!(
            (total.qp.qpn, total.tx_packets, total.tx_bytes),
            (0x12, 57, 5700)
        );
    }
}
