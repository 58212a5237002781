//! RDMA ports' GID tables as sysfs shows them (`DEV/ports/N/gids/I`, `gid_attrs/types/I`,
//! `gid_attrs/ndevs/I`): which address and RoCE version each source GID index stands for, so a
//! QP's `sgid_index` and its peer's dest GID can be checked against each other.

use std::path::Path;

use rdmatrace_common::event::{GID_TYPE_IB_ROCE_V1, GID_TYPE_ROCE_V2};

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Gid {
    pub dev: String,
    pub port: u32,
    pub index: u32,
    pub gid: [u8; 16],
    /// [`GID_TYPE_IB_ROCE_V1`], [`GID_TYPE_ROCE_V2`] or 0 (unknown).
    pub gid_type: u32,
    pub netdev: String,
}

/// Empty entries in a row after which the rest of a table is taken as empty.
pub const MAX_EMPTY_RUN: u32 = 32;

/// `fe80:0000:0000:0000:0202:c9ff:fe00:0001` -> bytes.
pub fn parse_gid(text: &str) -> Option<[u8; 16]> {
    let groups: Vec<&str> = text.trim().split(':').collect();
    if groups.len() != 8 {
        return None;
    }
    let mut out = [0u8; 16];
    for (i, g) in groups.iter().enumerate() {
        let v = u16::from_str_radix(g, 16).ok()?;
        out[2 * i..2 * i + 2].copy_from_slice(&v.to_be_bytes());
    }
    Some(out)
}

fn gid_type(text: &str) -> u32 {
    match text.trim() {
        "RoCE v2" => GID_TYPE_ROCE_V2,
        "IB/RoCE v1" => GID_TYPE_IB_ROCE_V1,
        _ => 0,
    }
}

/// The populated GID entries of every port under `ib_root` (normally /sys/class/infiniband),
/// sorted by device, port and index. Empty (all-zero) entries are left out.
pub fn read_gids(ib_root: &Path) -> Vec<Gid> {
    let mut out = Vec::new();
    for (name, port, pp) in crate::ports::port_dirs(ib_root) {
        let Ok(entries) = std::fs::read_dir(pp.join("gids")) else {
            continue;
        };
        // In index order, stopping after a run of empty entries: rxe lists 1024 entries
        // and fills the first few; every read is a driver call.
        let mut indexes: Vec<u32> = entries
            .filter_map(Result::ok)
            .filter_map(|e| e.file_name().to_string_lossy().parse::<u32>().ok())
            .collect();
        indexes.sort_unstable();
        let mut empty_run = 0;
        for index in indexes {
            if empty_run >= MAX_EMPTY_RUN {
                break;
            }
            let Some(gid) = std::fs::read_to_string(pp.join("gids").join(index.to_string()))
                .ok()
                .and_then(|t| parse_gid(&t))
                .filter(|g| *g != [0; 16])
            else {
                empty_run += 1;
                continue;
            };
            empty_run = 0;
            let attr = |what: &str| {
                std::fs::read_to_string(pp.join("gid_attrs").join(what).join(index.to_string()))
                    .map(|s| s.trim().to_string())
                    .unwrap_or_default()
            };
            out.push(Gid {
                dev: name.clone(),
                port,
                index,
                gid,
                gid_type: gid_type(&attr("types")),
                netdev: attr("ndevs"),
            });
        }
    }
    out.sort_by(|a, b| (&a.dev, a.port, a.index).cmp(&(&b.dev, b.port, b.index)));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gid_text_parses_and_bad_text_does_not() {
        let g = parse_gid("0000:0000:0000:0000:0000:ffff:c000:0201\n").expect("gid");
        assert_eq!(&g[10..], &[0xff, 0xff, 192, 0, 2, 1]);
        assert_eq!(parse_gid("fe80::1"), None);
        assert_eq!(parse_gid("zz80:0000:0000:0000:0000:0000:0000:0000"), None);
    }

    #[test]
    fn populated_entries_are_read_with_type_and_netdev() {
        let dir = tempfile::Builder::new()
            .prefix("rdmt-gids-")
            .tempdir()
            .expect("temp dir");
        let port = dir.path().join("rxe0/ports/1");
        for d in ["gids", "gid_attrs/types", "gid_attrs/ndevs"] {
            std::fs::create_dir_all(port.join(d)).expect("mkdir");
        }
        let put = |p: &str, s: &str| std::fs::write(port.join(p), s).expect("write");
        put("gids/0", "fe80:0000:0000:0000:5054:00ff:fe12:3456\n");
        put("gid_attrs/types/0", "RoCE v2\n");
        put("gid_attrs/ndevs/0", "eth1\n");
        put("gids/1", "0000:0000:0000:0000:0000:ffff:c000:0201\n");
        put("gid_attrs/types/1", "IB/RoCE v1\n");
        put("gids/2", "0000:0000:0000:0000:0000:0000:0000:0000\n");
        let got = read_gids(dir.path());
        assert_eq!(
            got.iter()
                .map(|g| (g.index, g.gid_type, g.netdev.as_str(), g.gid[15]))
                .collect::<Vec<_>>(),
            [
                (0, GID_TYPE_ROCE_V2, "eth1", 0x56),
                (1, GID_TYPE_IB_ROCE_V1, "", 1)
            ]
        );
    }
}
