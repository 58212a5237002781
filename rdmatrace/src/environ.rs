//! Transport variables of a process's environment: the few names that choose or disable an RDMA
//! transport in NCCL, UCX, Open MPI, libfabric, Intel MPI and MPICH. Read from
//! `/proc/PID/environ` when a process is first seen (live only); only names on the allowlist are
//! kept — no other variable is read into a record, stored or printed.

use rustc_hash::FxHashSet;

use crate::event::{Body, Record};

/// Variables kept by name.
pub const TRANSPORT_VARS: &[&str] = &[
    "NCCL_IB_DISABLE",
    "NCCL_NET",
    "NCCL_IB_HCA",
    "NCCL_SOCKET_IFNAME",
    "NCCL_NET_PLUGIN",
    "UCX_TLS",
    "UCX_NET_DEVICES",
    "OMPI_MCA_btl",
    "OMPI_MCA_pml",
    "OMPI_MCA_osc",
    "FI_PROVIDER",
    "I_MPI_FABRICS",
    "I_MPI_OFI_PROVIDER",
];

/// Variables kept by prefix (MPICH's control variables).
pub const TRANSPORT_PREFIXES: &[&str] = &["MPIR_CVAR_CH4_", "MPIR_CVAR_OFI_", "MPIR_CVAR_NEMESIS_"];

/// Longest value kept (a value is a transport name or a short list).
const MAX_VALUE: usize = 256;

/// Whether variable `name` is on the allowlist.
pub fn allowed(name: &str) -> bool {
    TRANSPORT_VARS.contains(&name) || TRANSPORT_PREFIXES.iter().any(|p| name.starts_with(p))
}

/// The allowlisted variables of an environment block (`NAME=value\0...`), in its order.
pub fn parse(block: &[u8]) -> Vec<(String, String)> {
    block
        .split(|b| *b == 0)
        .filter_map(|kv| {
            let eq = kv.iter().position(|b| *b == b'=')?;
            let name = std::str::from_utf8(&kv[..eq]).ok()?;
            if !allowed(name) {
                return None;
            }
            let value = String::from_utf8_lossy(&kv[eq + 1..]);
            let mut end = value.len().min(MAX_VALUE);
            while !value.is_char_boundary(end) {
                end -= 1;
            }
            Some((name.to_string(), value[..end].to_string()))
        })
        .collect()
}

/// The allowlisted variables of process `pid` (empty when it is gone or has none).
pub fn read(pid: u32) -> Vec<(String, String)> {
    std::fs::read(format!("/proc/{pid}/environ"))
        .map(|b| parse(&b))
        .unwrap_or_default()
}

/// Why these variables turn RDMA off or pick a non-RDMA transport: (the variable as
/// `NAME=value`, the sentence, the fix). `None` when they do not.
pub fn disables_rdma(
    vars: &[(impl AsRef<str>, impl AsRef<str>)],
) -> Option<(String, String, String)> {
    let get = |n: &str| {
        vars.iter()
            .find(|(k, _)| k.as_ref() == n)
            .map(|(_, v)| v.as_ref().trim())
    };
    let set = |n: &str, v: &str| format!("{n}={v}");
    let lower = |v: &str| v.to_ascii_lowercase();
    if let Some(v) = get("NCCL_IB_DISABLE").filter(|v| *v == "1") {
        return Some((
            set("NCCL_IB_DISABLE", v),
            "turns NCCL's InfiniBand/RoCE transport off: NCCL falls back to sockets".into(),
            "unset NCCL_IB_DISABLE (or set it to 0) in the job's environment".into(),
        ));
    }
    if let Some(v) = get("NCCL_NET").filter(|v| lower(v) == "socket") {
        return Some((
            set("NCCL_NET", v),
            "makes NCCL use its socket transport instead of IB verbs".into(),
            "unset NCCL_NET, or set it to IB".into(),
        ));
    }
    if let Some(v) = get("UCX_TLS") {
        let l = lower(v);
        let rdma = |t: &str| {
            t == "all" || t == "ib" || ["rc", "ud", "dc"].iter().any(|p| t.starts_with(p))
        };
        let (exclude, list) = match l.strip_prefix('^') {
            Some(rest) => (true, rest),
            None => (false, l.as_str()),
        };
        let names: Vec<&str> = list.split(',').map(str::trim).collect();
        let off = if exclude {
            names.contains(&"ib")
                || ["rc", "ud", "dc"]
                    .iter()
                    .all(|p| names.iter().any(|n| n.starts_with(p)))
        } else {
            !names.iter().any(|n| rdma(n))
        };
        if off {
            return Some((
                set("UCX_TLS", v),
                "leaves UCX no RDMA transport (no rc, ud, dc or ib)".into(),
                "add rc (or ib) to UCX_TLS, or unset it".into(),
            ));
        }
    }
    if let Some(v) = get("FI_PROVIDER") {
        let l = lower(v);
        let rdma = ["verbs", "efa", "psm", "cxi", "opx", "mlx"]
            .iter()
            .any(|p| l.contains(p));
        if !rdma && (l.contains("tcp") || l.contains("sockets") || l.contains("udp")) {
            return Some((
                set("FI_PROVIDER", v),
                "makes libfabric use a socket provider".into(),
                "set FI_PROVIDER to verbs (or the NIC's provider), or unset it".into(),
            ));
        }
    }
    if let Some(v) = get("I_MPI_FABRICS") {
        let l = lower(v);
        if l.contains("tcp") && !l.contains("ofi") && !l.contains("dapl") && !l.contains("ofa") {
            return Some((
                set("I_MPI_FABRICS", v),
                "makes Intel MPI use TCP between nodes".into(),
                "set I_MPI_FABRICS to shm:ofi (with an RDMA libfabric provider)".into(),
            ));
        }
    }
    if let Some(v) = get("OMPI_MCA_pml").filter(|v| lower(v) == "ob1") {
        let btl = get("OMPI_MCA_btl").map(lower).unwrap_or_default();
        if !btl.is_empty()
            && !btl.starts_with('^')
            && !btl.contains("openib")
            && !btl.contains("uct")
        {
            return Some((
                format!(
                    "{} {}",
                    set("OMPI_MCA_pml", v),
                    set("OMPI_MCA_btl", get("OMPI_MCA_btl").unwrap_or(""))
                ),
                "make Open MPI use the ob1 PML over non-RDMA BTLs".into(),
                "use OMPI_MCA_pml=ucx (or add an RDMA BTL), or unset both".into(),
            ));
        }
    }
    for (k, v) in vars {
        let (k, v) = (k.as_ref(), v.as_ref().trim());
        if k.starts_with("MPIR_CVAR_") && (k.ends_with("NETMOD") || k.ends_with("PROVIDER")) {
            let l = lower(v);
            if l.contains("tcp") || l.contains("sockets") {
                return Some((
                    set(k, v),
                    "makes MPICH use a socket network module or provider".into(),
                    format!("set {k} to an RDMA provider (ucx, or ofi with verbs), or unset it"),
                ));
            }
        }
    }
    None
}

/// Live: reads the transport variables of each process once — when it execs, or at its first
/// record if it was running before the trace.
#[derive(Default)]
pub struct EnvReader {
    checked: FxHashSet<u32>,
}

/// Processes remembered as read (then forgotten all at once: a process read again only costs a
/// read).
const MAX_CHECKED: usize = 100_000;

impl EnvReader {
    /// The variables to record for `rec`'s process, when it is the time to read them.
    pub fn for_record(&mut self, rec: &Record) -> Option<(u32, Vec<(String, String)>)> {
        let pid = rec.subject_pid();
        if pid == 0 {
            return None;
        }
        match rec.body {
            Body::ProcessExit { .. } => {
                self.checked.remove(&pid);
                return None;
            }
            Body::ProcessExec { .. } => {
                self.checked.remove(&pid);
            }
            _ => {}
        }
        if self.checked.len() >= MAX_CHECKED {
            self.checked.clear();
        }
        if !self.checked.insert(pid) {
            return None;
        }
        let vars = read(pid);
        (!vars.is_empty()).then_some((pid, vars))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_allowlisted_names_are_kept() {
        let block = b"HOME=/root\0NCCL_IB_DISABLE=1\0AWS_SECRET_ACCESS_KEY=x\0UCX_TLS=tcp,self\0MPIR_CVAR_CH4_NETMOD=ofi\0PATH=/bin\0";
        assert_eq!(
            parse(block),
            [
                ("NCCL_IB_DISABLE".to_string(), "1".to_string()),
                ("UCX_TLS".into(), "tcp,self".into()),
                ("MPIR_CVAR_CH4_NETMOD".into(), "ofi".into()),
            ]
        );
    }

    fn off(vars: &[(&str, &str)]) -> Option<String> {
        disables_rdma(vars).map(|(v, ..)| v)
    }

    #[test]
    fn transport_choices_that_leave_rdma_out_are_named() {
        assert_eq!(
            off(&[("NCCL_IB_DISABLE", "1")]).as_deref(),
            Some("NCCL_IB_DISABLE=1")
        );
        assert_eq!(off(&[("NCCL_IB_DISABLE", "0")]), None);
        assert!(off(&[("NCCL_NET", "Socket")]).is_some());
        assert_eq!(off(&[("NCCL_NET", "IB")]), None);
        assert!(off(&[("UCX_TLS", "tcp,sm,self")]).is_some());
        assert_eq!(off(&[("UCX_TLS", "rc,sm,self")]), None);
        assert_eq!(off(&[("UCX_TLS", "all")]), None);
        assert!(off(&[("UCX_TLS", "^ib")]).is_some());
        assert_eq!(off(&[("UCX_TLS", "^tcp")]), None);
        assert!(off(&[("FI_PROVIDER", "tcp;ofi_rxm")]).is_some());
        assert_eq!(off(&[("FI_PROVIDER", "verbs;ofi_rxm")]), None);
        assert!(off(&[("I_MPI_FABRICS", "shm:tcp")]).is_some());
        assert_eq!(off(&[("I_MPI_FABRICS", "shm:ofi")]), None);
        assert!(off(&[("OMPI_MCA_pml", "ob1"), ("OMPI_MCA_btl", "tcp,self")]).is_some());
        assert_eq!(off(&[("OMPI_MCA_pml", "ucx")]), None);
        assert!(off(&[("MPIR_CVAR_NEMESIS_NETMOD", "tcp")]).is_some());
        assert_eq!(off(&[("MPIR_CVAR_CH4_NETMOD", "ucx")]), None);
        assert!(off(&[("MPIR_CVAR_OFI_USE_PROVIDER", "sockets")]).is_some());
        // Naming a device is not turning RDMA off.
        assert_eq!(
            off(&[("NCCL_IB_HCA", "mlx5_0"), ("UCX_NET_DEVICES", "mlx5_0:1")]),
            None
        );
    }
}
