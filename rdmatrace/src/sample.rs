//! Periodic samples, turned into records of the same wire format as kernel events (kinds of
//! 100 and above in `rdmatrace-common`), so they decode, correlate and record like the rest:
//! per-process TCP bytes and per-QP traffic from kernel aggregates, the RDMA port counters,
//! port states and MTUs of sysfs, and the rdma netlink QP table and per-QP counters. Only
//! what changed since the previous sample is emitted.

use std::{
    collections::HashMap,
    path::{Path, PathBuf},
};

use aya::maps::{HashMap as BpfHashMap, MapData};
use rdmatrace_common::{
    event::{
        CounterSample, CqNotify, CqNotifySample, EventKind, GidSample, PortSample, QpTraffic,
        QpTrafficSample, TcpBytes, TcpBytesSample, TcpPeerKey, COUNTER_NAME_LEN,
        PORT_STATE_REMOVED, SLOT_FREED,
    },
    limits::DEV_NAME_LEN,
};

use crate::{
    loader::{slots::QpSlots, Tracer},
    wire::{fixed, header, pod_bytes},
};

mod claims;
mod sock_slots;

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
    tcp: Option<BpfHashMap<MapData, TcpPeerKey, TcpBytes>>,
    qps: Option<BpfHashMap<MapData, u64, QpTraffic>>,
    cqs: Option<BpfHashMap<MapData, u64, CqNotify>>,
    counters_root: Option<PathBuf>,
    prev_tcp: HashMap<TcpPeerKey, TcpBytes>,
    prev_qp: HashMap<u64, QpTraffic>,
    /// The per-QP traffic slots (the per-packet path; `QP_TRAFFIC` takes a QP whose slot
    /// another holds), the previous totals by QP address, and the slots seen with a key but
    /// no device name yet (a claim under way).
    slots: Option<QpSlots>,
    prev_slot: HashMap<u64, QpTraffic>,
    claims: claims::ClaimWait,
    /// The per-process TCP byte slots (the per-call path; `TCP_BYTES` takes a socket whose slot
    /// another socket holds).
    sock_slots: Option<sock_slots::SockSlotReader>,
    prev_cq: HashMap<u64, CqNotify>,
    prev_counters: HashMap<CounterKey, u64>,
    netlink: Option<crate::netlink::sampler::NetlinkSampler>,
    prev_ports: HashMap<(String, u32), crate::ports::Port>,
    prev_gids: HashMap<(String, u32, u32), crate::gids::Gid>,
    gids_read: Option<std::time::Instant>,
    /// The traffic counters were reported once (the first sample lists them unchanged too, so
    /// that a report knows which devices' traffic was counted).
    traffic_announced: bool,
    /// Removes the entry -> return entries of tasks that are gone (`crate::pending`).
    sweeper: Option<crate::pending::Sweeper>,
    warnings: Vec<String>,
}

/// What a QP sent and received since the previous total at its map key; everything when that
/// was another QP (one freed at the same address).
fn qp_delta(prev: Option<QpTraffic>, total: QpTraffic) -> QpTraffic {
    let p = prev.filter(|p| p.qp == total.qp).unwrap_or(QpTraffic {
        qp: total.qp,
        tx_packets: 0,
        tx_bytes: 0,
        rx_packets: 0,
        rx_bytes: 0,
    });
    QpTraffic {
        qp: total.qp,
        tx_packets: total.tx_packets.saturating_sub(p.tx_packets),
        tx_bytes: total.tx_bytes.saturating_sub(p.tx_bytes),
        rx_packets: total.rx_packets.saturating_sub(p.rx_packets),
        rx_bytes: total.rx_bytes.saturating_sub(p.rx_bytes),
    }
}

/// What a process sent and received towards a peer since the previous total (everything when
/// there is none).
fn tcp_delta(prev: Option<&TcpBytes>, total: TcpBytes) -> TcpBytes {
    let base = prev.copied().unwrap_or(TcpBytes {
        tx_bytes: 0,
        rx_bytes: 0,
        tx_calls: 0,
        rx_calls: 0,
        ..total
    });
    TcpBytes {
        tx_bytes: total.tx_bytes.saturating_sub(base.tx_bytes),
        rx_bytes: total.rx_bytes.saturating_sub(base.rx_bytes),
        tx_calls: total.tx_calls.saturating_sub(base.tx_calls),
        rx_calls: total.rx_calls.saturating_sub(base.rx_calls),
        ..total
    }
}

/// The changes of one sample's TCP totals by process and peer, in the order first seen.
#[derive(Default)]
struct TcpChanges {
    order: Vec<(u32, TcpBytes)>,
    at: HashMap<TcpPeerKey, usize>,
}

impl TcpChanges {
    /// Adds the change `delta` (its peer and process name in it) of process `tgid`; nothing
    /// when it made no call.
    fn add(&mut self, tgid: u32, delta: TcpBytes) {
        if (delta.tx_calls | delta.rx_calls) == 0 {
            return;
        }
        let key = TcpPeerKey {
            tgid,
            family: delta.family,
            _pad: 0,
            daddr: delta.daddr,
        };
        match self.at.get(&key) {
            Some(&i) => {
                let t = &mut self.order[i].1;
                t.tx_bytes += delta.tx_bytes;
                t.rx_bytes += delta.rx_bytes;
                t.tx_calls += delta.tx_calls;
                t.rx_calls += delta.rx_calls;
            }
            None => {
                self.at.insert(key, self.order.len());
                self.order.push((tgid, delta));
            }
        }
    }

    fn records(self, ts_ns: u64) -> impl Iterator<Item = Vec<u8>> {
        self.order.into_iter().map(move |(tgid, bytes)| {
            pod_bytes(&TcpBytesSample {
                header: header(EventKind::TcpBytes, ts_ns, tgid, bytes.comm),
                bytes,
            })
        })
    }
}

/// A CQ's notifications since the previous total at its map key (all of them when that was
/// another CQ).
fn cq_delta(prev: Option<CqNotify>, total: CqNotify) -> CqNotify {
    let prev = prev.filter(|p| p.cqn == total.cqn && p.dev == total.dev);
    let mut delta = total;
    delta.count = total.count.saturating_sub(prev.map_or(0, |p| p.count));
    delta
}

impl Sampler {
    /// Takes the aggregate maps out of the loaded object; `counters_root` enables sysfs
    /// counter sampling.
    pub fn new(tracer: &mut Tracer, counters_root: Option<PathBuf>) -> Sampler {
        let tcp = tracer
            .ebpf
            .take_map("TCP_BYTES")
            .and_then(|m| BpfHashMap::try_from(m).ok());
        let qps = tracer
            .ebpf
            .take_map("QP_TRAFFIC")
            .and_then(|m| BpfHashMap::try_from(m).ok());
        let cqs = tracer
            .ebpf
            .take_map("CQ_NOTIFY")
            .and_then(|m| BpfHashMap::try_from(m).ok());
        let mut s = Sampler::with_sources(tcp, qps, cqs, counters_root);
        if let Some(slots) = tracer.slots.take() {
            s.with_slots(slots);
        }
        if let Some(slots) = tracer.sock_slots.take() {
            s.with_sock_slots(slots);
        }
        match crate::pending::Sweeper::new(tracer) {
            Ok(sweeper) => s.sweeper = Some(sweeper),
            Err(why) => s.warnings.push(format!(
                "entries the kernel programs keep for calls whose return was missed are not \
                 swept: this process {why}"
            )),
        }
        s
    }

    /// A sampler of these sources, baselined: it reports what happens from now on.
    fn with_sources(
        tcp: Option<BpfHashMap<MapData, TcpPeerKey, TcpBytes>>,
        qps: Option<BpfHashMap<MapData, u64, QpTraffic>>,
        cqs: Option<BpfHashMap<MapData, u64, CqNotify>>,
        counters_root: Option<PathBuf>,
    ) -> Sampler {
        let mut s = Sampler {
            tcp,
            qps,
            cqs,
            counters_root,
            prev_tcp: HashMap::new(),
            prev_qp: HashMap::new(),
            slots: None,
            prev_slot: HashMap::new(),
            claims: claims::ClaimWait::default(),
            sock_slots: None,
            prev_cq: HashMap::new(),
            prev_counters: HashMap::new(),
            netlink: None,
            prev_ports: HashMap::new(),
            prev_gids: HashMap::new(),
            gids_read: None,
            traffic_announced: false,
            sweeper: None,
            warnings: Vec::new(),
        };
        // Baselines: report what happens from now on, not since boot.
        let _ = s.poll(0);
        s
    }

    /// Adds the per-QP traffic slots, baselined like the maps.
    fn with_slots(&mut self, slots: QpSlots) {
        self.slots = Some(slots);
        let _ = self.poll_slots(0);
    }

    /// Records for the QPs whose slot moved; frees the slots of destroyed QPs once their last
    /// totals are read.
    fn poll_slots(&mut self, ts_ns: u64) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        let Some(slots) = &self.slots else {
            return out;
        };
        for i in 0..slots.len() {
            let Some(s) = slots.get(i).filter(|s| s.key != 0) else {
                self.claims.forget(i);
                continue;
            };
            // No device name yet: a claim under way (see `claims`).
            if self.claims.skip(i, s.key, s.traffic.qp.dev[0] == 0) {
                continue;
            }
            let qp = s.key & !SLOT_FREED;
            let delta = qp_delta(self.prev_slot.insert(qp, s.traffic), s.traffic);
            if ts_ns != 0 && (delta.tx_packets | delta.rx_packets) != 0 {
                out.push(pod_bytes(&QpTrafficSample {
                    header: header(EventKind::QpTraffic, ts_ns, 0, [0; 16]),
                    traffic: delta,
                }));
            }
            if s.key & SLOT_FREED != 0 {
                self.prev_slot.remove(&qp);
                slots.free(i);
            }
        }
        out
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
        let mut w = std::mem::take(&mut self.warnings);
        if let Some(n) = self.netlink.as_mut() {
            w.extend(n.take_warnings());
        }
        w
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
        if let (Some(sw), true) = (&mut self.sweeper, ts_ns != 0) {
            sw.tick(std::time::Instant::now());
        }
        if let (Some(nl), true) = (&mut self.netlink, ts_ns != 0) {
            if last {
                out.extend(nl.poll_now(ts_ns).0);
            } else {
                out.extend(nl.poll(ts_ns));
            }
        }
        // Per process and peer, what moved: in the hash and in the slots (a pair may be in
        // both when its slot was taken at first and freed later), one record each.
        let mut tcp = TcpChanges::default();
        if let Some(map) = &self.tcp {
            // Keys the kernel evicted or no longer has are forgotten here too.
            let mut seen = std::collections::HashSet::new();
            for (key, total) in map.iter().filter_map(Result::ok) {
                seen.insert(key);
                let prev = self.prev_tcp.insert(key, total);
                let mut delta = tcp_delta(prev.as_ref(), total);
                // The key says the peer.
                delta.daddr = key.daddr;
                delta.family = key.family;
                tcp.add(key.tgid, delta);
            }
            self.prev_tcp.retain(|k, _| seen.contains(k));
        }
        if let Some(slots) = &mut self.sock_slots {
            slots.poll(&mut tcp);
        }
        if ts_ns != 0 {
            out.extend(tcp.records(ts_ns));
        }
        if let Some(map) = &self.qps {
            for (key, total) in map.iter().filter_map(Result::ok) {
                let delta = qp_delta(self.prev_qp.insert(key, total), total);
                if ts_ns != 0 && (delta.tx_packets | delta.rx_packets) != 0 {
                    out.push(pod_bytes(&QpTrafficSample {
                        header: header(EventKind::QpTraffic, ts_ns, 0, [0; 16]),
                        traffic: delta,
                    }));
                }
            }
        }
        out.extend(self.poll_slots(ts_ns));
        if let Some(map) = &self.cqs {
            for (key, total) in map.iter().filter_map(Result::ok) {
                let delta = cq_delta(self.prev_cq.insert(key, total), total);
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
mod slot_tests;

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

    pub(super) fn traffic(qpn: u32, packets: u64) -> QpTraffic {
        let mut t = QpTraffic {
            qp: rdmatrace_common::event::QpIdent {
                dev: [0; 64],
                qpn,
                qp_type: 2,
            },
            tx_packets: packets,
            tx_bytes: packets * 100,
            rx_packets: 1,
            rx_bytes: 10,
        };
        t.qp.dev[0] = b'r';
        t
    }

    #[test]
    fn qp_traffic_is_the_change_since_the_same_qps_previous_total() {
        let d = qp_delta(Some(traffic(0x12, 50)), traffic(0x12, 57));
        assert_eq!(
            (d.qp.qpn, d.tx_packets, d.tx_bytes, d.rx_packets),
            (0x12, 7, 700, 0)
        );
        // A new QP at a freed QP's address: all of its traffic is new.
        let d = qp_delta(Some(traffic(0x11, 50)), traffic(0x12, 5));
        assert_eq!((d.qp.qpn, d.tx_packets, d.rx_bytes), (0x12, 5, 10));
        let d = qp_delta(None, traffic(0x12, 5));
        assert_eq!(d.tx_packets, 5);
    }

    #[test]
    fn cq_notifications_are_the_change_since_the_same_cqs_previous_total() {
        // SAFETY: all-zero is a valid value of this integer-only struct.
        let mut old: CqNotify = unsafe { std::mem::zeroed() };
        old.cqn = 3;
        old.count = 40;
        let mut now = old;
        now.count = 42;
        assert_eq!(cq_delta(Some(old), now).count, 2);
        now.cqn = 4;
        assert_eq!(cq_delta(Some(old), now).count, 42);
    }
}
