//! Diagnoses of resources, found as their events come: a CQ that overflowed (`cq_overrun`), a
//! refused QP creation (`create_failed`), a registration whose memory could not be pinned
//! (`mr_reg_failed`).

use super::{Diagnoser, Diagnosis};
use crate::event::{
    AsyncElement, AsyncEvent, QpCaps, QueueCaps, Record, ResType, Resource, UmemFailed,
};

impl Diagnoser {
    pub fn resource(&mut self, r: &Resource) {
        if let (ResType::Mr, true, Some(m)) = (r.res_type, r.added, &r.mr) {
            let list = self.mrs.entry((r.dev.clone(), r.owner_pid)).or_default();
            if list.len() >= super::MRS_KEPT {
                list.remove(0);
            }
            list.push(super::MrSeen {
                rkey: m.rkey,
                length: m.length,
                access: m.access,
            });
            return;
        }
        if r.res_type != ResType::Cq {
            return;
        }
        let key = (r.dev.clone(), r.id);
        if r.added {
            let cqe = r.cq.map(|(cqe, _)| cqe);
            self.cqs
                .insert(key, (r.owner_pid, r.owner_comm.clone(), cqe));
        } else {
            self.cqs.remove(&key);
        }
    }

    /// A CQ error event: the CQ overflowed. Named after the CQ's owner (the event itself is
    /// delivered from a kernel worker).
    pub fn async_event(&mut self, rec: &Record, a: &AsyncEvent) {
        let (AsyncElement::Cq(id), "CQ_ERR") = (&a.element, a.event.as_str()) else {
            return;
        };
        let owner = self.cqs.get(&(a.dev.clone(), *id)).cloned();
        let (pid, comm, cqe) = match owner {
            Some((pid, comm, cqe)) if pid != 0 => (pid, comm, cqe),
            _ if a.owner_pid != 0 => (a.owner_pid, a.owner_comm.clone(), None),
            _ => (rec.pid, rec.comm.clone(), None),
        };
        let size = cqe.map_or_else(String::new, |n| format!(" of {n} entries"));
        let mut evidence = vec![format!("async event CQ_ERR on {} CQ#{id}", a.dev)];
        if let Some(n) = cqe {
            evidence.push(format!(
                "CQ#{id} was created with {n} entries by pid {pid} ({comm})"
            ));
        }
        self.found.push(Diagnosis {
            kind: "cq_overrun",
            ts_ns: rec.ts_ns,
            wall_ns: rec.wall_ns,
            pid,
            comm,
            dev: Some(a.dev.clone()),
            qpn: None,
            cause: format!(
                "CQ#{id}{size} on {} overflowed: completions arrived faster than pid {pid} polled them",
                a.dev
            ),
            evidence,
            fix: "poll the CQ more often, or create it with room for every outstanding work \
                  request of the QPs that share it (send + receive queue depths)"
                .into(),
            consequences: vec!["the CQ is in error: its QPs' completions are lost".into()],
        });
    }

    /// `create_failed`: a refused QP creation, with the capacity asked above the device's.
    pub fn qp_caps(&mut self, rec: &Record, c: &QpCaps) {
        let dev = if c.dev.is_empty() {
            "?"
        } else {
            c.dev.as_str()
        };
        let over: Vec<String> = [
            ("max_send_wr", c.max_send_wr, "max_qp_wr", c.dev_max_qp_wr),
            ("max_recv_wr", c.max_recv_wr, "max_qp_wr", c.dev_max_qp_wr),
            (
                "max_send_sge",
                c.max_send_sge,
                "max_send_sge",
                c.dev_max_send_sge,
            ),
            (
                "max_recv_sge",
                c.max_recv_sge,
                "max_recv_sge",
                c.dev_max_recv_sge,
            ),
        ]
        .into_iter()
        .filter(|&(_, asked, _, max)| max != 0 && asked > max)
        .map(|(a, asked, m, max)| format!("{a} {asked} above {dev}'s {m} {max}"))
        .collect();
        let qp_type = crate::event::qp_type_name(c.qp_type);
        let errno = crate::format::errno_text(c.ret);
        let evidence = vec![
            format!("create of a {qp_type} QP on {dev} failed: {errno}"),
            format!(
                "asked: max_send_wr {}, max_recv_wr {}, max_send_sge {}, max_recv_sge {}, max_inline_data {}",
                c.max_send_wr, c.max_recv_wr, c.max_send_sge, c.max_recv_sge, c.max_inline_data
            ),
            format!(
                "{dev} allows: max_qp_wr {}, max_send_sge {}, max_recv_sge {}",
                c.dev_max_qp_wr, c.dev_max_send_sge, c.dev_max_recv_sge
            ),
        ];
        let (cause, fix) = if over.is_empty() {
            (
                format!(
                    "pid {} ({}) could not create a {qp_type} QP on {dev}: {errno}; no capacity asked is above the device's limits",
                    rec.pid, rec.comm
                ),
                "check the other limits (`ibv_devinfo -v`: max_qp, max_inline_data, the QP \
                 type's support) and the process's resources"
                    .to_string(),
            )
        } else {
            (
                format!(
                    "pid {} ({}) could not create a {qp_type} QP on {dev}: {}",
                    rec.pid,
                    rec.comm,
                    over.join(", ")
                ),
                format!(
                    "ask for no more than the device allows (`ibv_devinfo -v` on {dev} lists \
                     max_qp_wr and max_sge), or spread the work over more QPs"
                ),
            )
        };
        self.found.push(Diagnosis {
            kind: "create_failed",
            ts_ns: rec.ts_ns,
            wall_ns: rec.wall_ns,
            pid: rec.pid,
            comm: rec.comm.clone(),
            dev: (!c.dev.is_empty()).then(|| c.dev.clone()),
            qpn: None,
            cause,
            evidence,
            fix,
            consequences: vec!["the creation returned an error to the program".into()],
        });
    }

    /// `create_failed`: a refused CQ or SRQ creation, with the depth or SGEs asked above the
    /// device's.
    pub fn queue_caps(&mut self, rec: &Record, c: &QueueCaps) {
        let dev = if c.dev.is_empty() {
            "?"
        } else {
            c.dev.as_str()
        };
        let (depth_limit, sge_limit) = c.limit_names();
        let what = if c.queue == "CQ" { "entries" } else { "max_wr" };
        let mut over = Vec::new();
        if c.dev_max_depth != 0 && c.depth > c.dev_max_depth {
            over.push(format!(
                "{what} {} above {dev}'s {depth_limit} {}",
                c.depth, c.dev_max_depth
            ));
        }
        if c.dev_max_sge != 0 && c.sge > c.dev_max_sge {
            over.push(format!(
                "max_sge {} above {dev}'s {sge_limit} {}",
                c.sge, c.dev_max_sge
            ));
        }
        let errno = crate::format::errno_text(c.ret);
        let q = c.queue;
        let mut evidence = vec![format!("create of a {q} on {dev} failed: {errno}")];
        if q == "CQ" {
            evidence.push(format!(
                "asked: {} entries; {dev} allows: max_cqe {}",
                c.depth, c.dev_max_depth
            ));
        } else {
            evidence.push(format!(
                "asked: max_wr {}, max_sge {}; {dev} allows: max_srq_wr {}, max_srq_sge {}",
                c.depth, c.sge, c.dev_max_depth, c.dev_max_sge
            ));
        }
        let (cause, fix) = if over.is_empty() {
            (
                format!(
                    "pid {} ({}) could not create a {q} on {dev}: {errno}; nothing asked is above the device's limits",
                    rec.pid, rec.comm
                ),
                "check the other limits (`ibv_devinfo -v`: max_cq, max_srq, the completion \
                 vector) and the process's locked-memory limit"
                    .to_string(),
            )
        } else {
            (
                format!(
                    "pid {} ({}) could not create a {q} on {dev}: {}",
                    rec.pid,
                    rec.comm,
                    over.join(", ")
                ),
                format!(
                    "ask for no more than the device allows (`ibv_devinfo -v` on {dev} lists \
                     {depth_limit}{}), or spread the work over more {q}s",
                    if sge_limit.is_empty() {
                        String::new()
                    } else {
                        format!(" and {sge_limit}")
                    }
                ),
            )
        };
        self.found.push(Diagnosis {
            kind: "create_failed",
            ts_ns: rec.ts_ns,
            wall_ns: rec.wall_ns,
            pid: rec.pid,
            comm: rec.comm.clone(),
            dev: (!c.dev.is_empty()).then(|| c.dev.clone()),
            qpn: None,
            cause,
            evidence,
            fix,
            consequences: vec!["the creation returned an error to the program".into()],
        });
    }

    /// `mr_reg_failed`: user memory of a registration could not be pinned.
    pub fn umem_failed(&mut self, rec: &Record, u: &UmemFailed) {
        use crate::format::{errno_text, size};
        let dev = if u.dev.is_empty() {
            "?"
        } else {
            u.dev.as_str()
        };
        let mut evidence = vec![format!(
            "pinning {} ({} bytes) for a registration on {dev} failed: {}",
            size(u.size),
            u.size,
            errno_text(u.ret)
        )];
        let over_limit = match (u.memlock, u.pinned) {
            (Some(limit), pinned) => {
                evidence.push(format!(
                    "RLIMIT_MEMLOCK {}{}",
                    size(limit),
                    pinned.map_or_else(String::new, |p| format!(", {} already pinned", size(p)))
                ));
                u.ret == -12 && u.size.saturating_add(pinned.unwrap_or(0)) > limit
            }
            (None, _) => false,
        };
        let (cause, fix) = if over_limit {
            (
                format!(
                    "pid {} ({}) could not register {} on {dev}: it is over its locked-memory limit (RLIMIT_MEMLOCK {})",
                    rec.pid,
                    rec.comm,
                    size(u.size),
                    size(u.memlock.unwrap_or(0))
                ),
                "raise the locked-memory limit of the process (`ulimit -l unlimited`, systemd \
                 LimitMEMLOCK=infinity, docker --ulimit memlock=-1, the pod's runtime limits) \
                 or register less memory; processes with CAP_IPC_LOCK are not limited"
                    .to_string(),
            )
        } else {
            (
                format!(
                    "pid {} ({}) could not register {} on {dev}: {}",
                    rec.pid,
                    rec.comm,
                    size(u.size),
                    errno_text(u.ret)
                ),
                "check the buffer (mapped, not larger than the device's max MR size) and the \
                 access flags against the device's capabilities (`ibv_devinfo -v`)"
                    .to_string(),
            )
        };
        self.found.push(Diagnosis {
            kind: "mr_reg_failed",
            ts_ns: rec.ts_ns,
            wall_ns: rec.wall_ns,
            pid: rec.pid,
            comm: rec.comm.clone(),
            dev: (!u.dev.is_empty()).then(|| u.dev.clone()),
            qpn: None,
            cause,
            evidence,
            fix,
            consequences: vec!["the registration returned an error to the program".into()],
        });
    }
}
