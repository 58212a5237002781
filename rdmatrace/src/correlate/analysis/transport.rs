//! Diagnoses of a process's transport, judged on the whole run (dated at its end): its
//! environment turned RDMA off (`transport_disabled_by_env`), or it found no RDMA device to
//! open (`no_rdma_device`), and it moved its data over TCP.

use super::{diagnosis::Diagnosis, ProcReport, ProcStats, Verdict};

/// It looked for RDMA devices and opened none (its verdict decides whether that mattered).
pub fn found_no_device(s: &ProcStats) -> bool {
    s.device_lookups > 0 && s.ctx_opens == 0 && s.qps_created == 0
}

/// `transport_disabled_by_env`: a process whose data went over TCP while its environment turns
/// RDMA off or picks a socket transport. Judged on the whole run (dated at its end).
pub fn transport_env(procs: &[ProcReport], end_wall_ns: u64, out: &mut Vec<Diagnosis>) {
    for p in procs {
        if !matches!(
            p.verdict,
            Verdict::Tcp | Verdict::TcpFallback | Verdict::Mixed
        ) {
            continue;
        }
        let Some((var, why, fix)) = crate::environ::disables_rdma(&p.stats.env) else {
            continue;
        };
        let s = &p.stats;
        let mut evidence = vec![format!("{var} in its environment (read at exec)")];
        evidence.push(format!("verdict {}", p.verdict.name()));
        evidence.extend(p.evidence.iter().cloned());
        out.push(Diagnosis {
            kind: "transport_disabled_by_env",
            ts_ns: u64::MAX,
            wall_ns: end_wall_ns,
            pid: s.pid,
            comm: s.comm.clone(),
            dev: None,
            qpn: None,
            cause: format!(
                "pid {} ({}) moved its data over TCP because {var} {why}",
                s.pid, s.comm
            ),
            evidence,
            fix,
            consequences: Vec::new(),
        });
    }
}

/// `no_rdma_device`: a process that looked for RDMA devices, opened none and moved its data
/// over TCP (a container without /dev/infiniband, an rdma namespace without devices, a host
/// whose driver is not loaded). Judged on the whole run (dated at its end).
pub fn no_device(procs: &[ProcReport], end_wall_ns: u64, out: &mut Vec<Diagnosis>) {
    for p in procs {
        let s = &p.stats;
        if p.verdict != Verdict::TcpFallback || !found_no_device(s) {
            continue;
        }
        // Told not to use RDMA: that diagnosis says why.
        if crate::environ::disables_rdma(&s.env).is_some() {
            continue;
        }
        out.push(Diagnosis {
            kind: "no_rdma_device",
            ts_ns: u64::MAX,
            wall_ns: end_wall_ns,
            pid: s.pid,
            comm: s.comm.clone(),
            dev: None,
            qpn: None,
            cause: format!(
                "pid {} ({}) looked for RDMA devices and opened none, then moved its data over TCP",
                s.pid, s.comm
            ),
            evidence: p.evidence.clone(),
            fix: "give the process the RDMA devices: /dev/infiniband/uverbs* and rdma_cm in \
                  its container (device plugin or --device), the device in its rdma network \
                  namespace (`rdma system` / `rdma dev set DEV netns`), and the driver loaded \
                  (`rdma link`, `ibv_devices` from inside it)"
                .into(),
            consequences: Vec::new(),
        });
    }
}
