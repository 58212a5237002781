//! RDMA ports as sysfs shows them: state, link layer, the netdev under a RoCE port and the
//! active MTU, estimated for RoCE from the netdev MTU the way drivers derive it (largest IB MTU
//! that fits after the RoCEv2 headers). InfiniBand ports' active MTU is not in sysfs: unknown.

use std::path::Path;

/// Headers a RoCE driver subtracts from the netdev MTU before picking the IB MTU (GRH/IPv6,
/// UDP, BTH, the largest extended header and ICRC: ib_core's `iboe_get_mtu`).
const ROCE_OVERHEAD: u32 = 40 + 8 + 12 + 4 + 28 + 4;

/// The largest IB MTU (256..4096) that fits a netdev MTU; 0 if none.
pub fn roce_active_mtu(netdev_mtu: u32) -> u32 {
    let room = netdev_mtu.saturating_sub(ROCE_OVERHEAD);
    [4096, 2048, 1024, 512, 256]
        .into_iter()
        .find(|&m| m <= room)
        .unwrap_or(0)
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Port {
    pub dev: String,
    pub port: u32,
    /// `enum ib_port_state`, 0 unknown.
    pub state: u32,
    pub link_layer: String,
    pub netdev: String,
    pub netdev_mtu: u32,
    pub active_mtu: u32,
}

fn read(p: &Path) -> Option<String> {
    std::fs::read_to_string(p)
        .ok()
        .map(|s| s.trim().to_string())
}

/// (device, port number, the port's sysfs directory) of every port under `ib_root` (laid out
/// as /sys/class/infiniband), in directory order.
pub fn port_dirs(ib_root: &Path) -> Vec<(String, u32, std::path::PathBuf)> {
    let mut out = Vec::new();
    let Ok(devs) = std::fs::read_dir(ib_root) else {
        return out;
    };
    for dev in devs.filter_map(Result::ok) {
        let name = dev.file_name().to_string_lossy().into_owned();
        let Ok(ports) = std::fs::read_dir(dev.path().join("ports")) else {
            continue;
        };
        for p in ports.filter_map(Result::ok) {
            if let Ok(port) = p.file_name().to_string_lossy().parse::<u32>() {
                out.push((name.clone(), port, p.path()));
            }
        }
    }
    out
}

/// Every port under `ib_root` (normally /sys/class/infiniband), netdevs under `net_root`
/// (normally /sys/class/net).
pub fn read_ports(ib_root: &Path, net_root: &Path) -> Vec<Port> {
    let mut out = Vec::new();
    for (name, port, pp) in port_dirs(ib_root) {
        // "4: ACTIVE"
        let state = read(&pp.join("state"))
            .and_then(|s| s.split(':').next().and_then(|n| n.trim().parse().ok()))
            .unwrap_or(0);
        let link_layer = read(&pp.join("link_layer")).unwrap_or_default();
        let netdev = read(&pp.join("gid_attrs/ndevs/0")).unwrap_or_default();
        let netdev_mtu = if netdev.is_empty() {
            0
        } else {
            read(&net_root.join(&netdev).join("mtu"))
                .and_then(|m| m.parse().ok())
                .unwrap_or(0)
        };
        let active_mtu = if link_layer == "Ethernet" {
            roce_active_mtu(netdev_mtu)
        } else {
            0
        };
        out.push(Port {
            dev: name.clone(),
            port,
            state,
            link_layer,
            netdev,
            netdev_mtu,
            active_mtu,
        });
    }
    out.sort_by(|a, b| (&a.dev, a.port).cmp(&(&b.dev, b.port)));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roce_mtu_follows_the_netdev_mtu() {
        assert_eq!(roce_active_mtu(1500), 1024);
        assert_eq!(roce_active_mtu(9000), 4096);
        assert_eq!(roce_active_mtu(4200), 4096);
        assert_eq!(roce_active_mtu(2200), 2048);
        assert_eq!(roce_active_mtu(1100), 512);
        assert_eq!(roce_active_mtu(100), 0);
    }

    #[test]
    fn ports_are_read_with_their_netdev() {
        let dir = tempfile::Builder::new()
            .prefix("rdmt-ports-")
            .tempdir()
            .expect("temp dir");
        let root = dir.path();
        let port = root.join("ib/rxe0/ports/1");
        std::fs::create_dir_all(port.join("gid_attrs/ndevs")).expect("mkdir");
        std::fs::write(port.join("state"), "4: ACTIVE\n").expect("write");
        std::fs::write(port.join("link_layer"), "Ethernet\n").expect("write");
        std::fs::write(port.join("gid_attrs/ndevs/0"), "eth1\n").expect("write");
        std::fs::create_dir_all(root.join("net/eth1")).expect("mkdir");
        std::fs::write(root.join("net/eth1/mtu"), "9000\n").expect("write");
        let ib = root.join("ib/mlx5_0/ports/1");
        std::fs::create_dir_all(&ib).expect("mkdir");
        std::fs::write(ib.join("state"), "1: DOWN\n").expect("write");
        std::fs::write(ib.join("link_layer"), "InfiniBand\n").expect("write");
        let got = read_ports(&root.join("ib"), &root.join("net"));
        assert_eq!(
            got.iter()
                .map(|p| (
                    p.dev.as_str(),
                    p.state,
                    p.netdev.as_str(),
                    p.netdev_mtu,
                    p.active_mtu
                ))
                .collect::<Vec<_>>(),
            [("mlx5_0", 1, "", 0, 0), ("rxe0", 4, "eth1", 9000, 4096)]
        );
    }
}

/// The direction a port traffic counter counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TrafficDir {
    Tx,
    Rx,
}

/// What a port traffic counter counts: its direction, and how many bytes one unit is (`None`:
/// it counts packets). The IB port counters count data in 4-byte words (`port_xmit_data`) and
/// packets; rxe's `hw_counters` packets; bnxt_re's `hw_counters` bytes and packets.
pub fn traffic_counter(name: &str) -> Option<(TrafficDir, Option<u64>)> {
    Some(match name {
        "port_xmit_data" => (TrafficDir::Tx, Some(4)),
        "port_rcv_data" => (TrafficDir::Rx, Some(4)),
        "tx_bytes" => (TrafficDir::Tx, Some(1)),
        "rx_bytes" => (TrafficDir::Rx, Some(1)),
        "port_xmit_packets" | "sent_pkts" | "tx_pkts" => (TrafficDir::Tx, None),
        "port_rcv_packets" | "rcvd_pkts" | "rx_pkts" => (TrafficDir::Rx, None),
        _ => return None,
    })
}
