//! Asynchronous events to user space (see `rdmatrace-ebpf/src/probes/async_event.rs`).

use rdmatrace_common::config::ProbeConfig;

use super::{res::resolve_tracker, Area, Hook, ProbeSpec, Role};
use crate::btf::{offset_of, param_index, BtfError, KernelBtf};

pub const AREA: Area = Area {
    name: "async",
    rdma: true,
    probes: &[
        ProbeSpec {
            program: "async_qp",
            hook: Hook::Kprobe,
            target: "ib_uverbs_qp_event_handler",
            role: Role::Always,
        },
        ProbeSpec {
            program: "async_cq",
            hook: Hook::Kprobe,
            target: "ib_uverbs_cq_event_handler",
            role: Role::Always,
        },
        ProbeSpec {
            program: "async_srq",
            hook: Hook::Kprobe,
            target: "ib_uverbs_srq_event_handler",
            role: Role::Always,
        },
        ProbeSpec {
            program: "async_port",
            hook: Hook::Kprobe,
            target: "ib_uverbs_event_handler",
            role: Role::Always,
        },
    ],
    resolve,
};

/// A device going away: no event handler reports it, ib_core's unregistration does.
pub const DEV_AREA: Area = Area {
    name: "dev",
    rdma: true,
    probes: &[ProbeSpec {
        program: "dev_unregister",
        hook: Hook::Kprobe,
        target: "__ib_unregister_device",
        role: Role::Always,
    }],
    resolve: resolve_dev,
};

fn resolve_dev(kbtf: &mut KernelBtf, cfg: &mut ProbeConfig) -> Result<Vec<String>, BtfError> {
    let core = kbtf.scope("ib_core", "ib_qp")?;
    cfg.device_name = offset_of(core, "ib_device", "name")?;
    cfg.unreg_arg_dev = param_index(core, "__ib_unregister_device", &["ib_dev", "device"])?;
    Ok(Vec::new())
}

fn resolve(kbtf: &mut KernelBtf, cfg: &mut ProbeConfig) -> Result<Vec<String>, BtfError> {
    let mut notes = Vec::new();
    resolve_tracker(kbtf, cfg, &mut notes)?;
    let core = kbtf.scope("ib_core", "ib_qp")?;
    cfg.ev_device = offset_of(core, "ib_event", "device")?;
    cfg.ev_element = offset_of(core, "ib_event", "element")?;
    cfg.ev_event = offset_of(core, "ib_event", "event")?;
    let uverbs = kbtf.scope("ib_uverbs", "ib_uverbs_file")?;
    let qp = param_index(uverbs, "ib_uverbs_qp_event_handler", &["event"])?;
    for f in ["ib_uverbs_cq_event_handler", "ib_uverbs_srq_event_handler"] {
        let i = param_index(uverbs, f, &["event"])?;
        if i != qp {
            return Err(BtfError::NoParam {
                func: format!("{f} (event at {i}, not {qp})"),
                names: vec!["event".into()],
            });
        }
    }
    cfg.async_arg_event = qp;
    cfg.async_dev_arg_event = param_index(uverbs, "ib_uverbs_event_handler", &["event"])?;
    Ok(notes)
}
