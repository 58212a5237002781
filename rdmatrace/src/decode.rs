//! Raw ring-buffer records -> [`Record`]s. Pure: no I/O, no clock (the wall-clock offset is data).

use std::mem::size_of;

use rdmatrace_common::event::{
    async_source, attr_mask as mask, element, verbs_func, AsyncEvent as RawAsync, CgroupEvent,
    CmEvent as RawCm, CounterSample, CpuSampleEvent, CqNotifySample, EventHeader, EventKind,
    GidSample, PortSample, ProcessEvent, QpCapsEvent, QpCounterSample, QpCreateEvent,
    QpDestroyEvent, QpIdent, QpModifyEvent, QpResSample, QpTrafficSample, QueueCapsEvent,
    ResourceEvent, RetransmitEvent, TcpBytesSample, TcpStateEvent, TcpTuple as RawTcp,
    UmemFailedEvent, VerbsCallEvent, WcErrorEvent, AV_MIN_RNR_TIMER, AV_SGID_INDEX,
    MIN_RNR_TIMER_SHIFT, QP_TRAFFIC_SAMPLE_V1, QUEUE_SRQ, RESOURCE_EVENT_V1, STATE_UNKNOWN,
    TCP_BYTES_SAMPLE_V1,
};

use crate::{
    clock::ClockAnchor,
    event::{
        cm_event_name, ib_event_name, mlx5_event_name, port_state_name, wc_status_name,
        AsyncElement, AsyncEvent, Body, CmEvent, CompactString, CounterDelta, CpuSample,
        CqNotifyDelta, Frame, GidInfo, ModifyAttrs, MrInfo, PortInfo, QpCaps, QpCounterDelta,
        QpInfo, QpKey, QpResRow, QpState, QueueCaps, Record, ResChange, ResType, Resource,
        TcpState, TcpTuple, UmemFailed, VerbsCall, WcError,
    },
};

mod read;
mod reuse;

pub use read::c_str;
use read::{read, read_grown};

#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("record of {len} bytes is shorter than an event header ({need} bytes)")]
    ShortHeader { len: usize, need: usize },
    #[error("unknown event kind {kind}")]
    UnknownKind { kind: u32 },
    #[error("{kind:?} record has {len} bytes, expected at least {need}")]
    Short {
        kind: EventKind,
        len: usize,
        need: usize,
    },
}

fn qp_info(id: &QpIdent) -> QpInfo {
    QpInfo {
        key: QpKey {
            dev: c_str(&id.dev),
            qpn: id.qpn,
        },
        qp_type: id.qp_type,
    }
}

fn state(raw: u32) -> Option<QpState> {
    if raw == STATE_UNKNOWN {
        None
    } else {
        QpState::from_raw(raw)
    }
}

fn modify_attrs(ev: &QpModifyEvent) -> ModifyAttrs {
    let m = ev.attr_mask;
    let when = |bit: u32| m & bit != 0;
    ModifyAttrs {
        attr_mask: m,
        cur_state: if when(mask::CUR_STATE) {
            state(ev.cur_state)
        } else {
            None
        },
        new_state: if when(mask::STATE) {
            state(ev.new_state)
        } else {
            None
        },
        path_mtu: when(mask::PATH_MTU).then_some(ev.path_mtu),
        dest_qpn: when(mask::DEST_QPN).then_some(ev.dest_qpn),
        sq_psn: when(mask::SQ_PSN).then_some(ev.sq_psn),
        rq_psn: when(mask::RQ_PSN).then_some(ev.rq_psn),
        timeout: when(mask::TIMEOUT).then_some(ev.timeout),
        retry_cnt: when(mask::RETRY_CNT).then_some(ev.retry_cnt),
        rnr_retry: when(mask::RNR_RETRY).then_some(ev.rnr_retry),
        dgid: when(mask::AV).then_some(ev.dgid),
        sgid_index: (when(mask::AV) && ev.av_flags & AV_SGID_INDEX != 0).then_some(ev.sgid_index),
        min_rnr_timer: (when(mask::MIN_RNR_TIMER) && ev.av_flags & AV_MIN_RNR_TIMER != 0)
            .then_some(ev.av_flags >> MIN_RNR_TIMER_SHIFT),
    }
}

fn ip(family: u16, raw: &[u8; 16]) -> std::net::IpAddr {
    if family == 10 {
        std::net::IpAddr::from(*raw)
    } else {
        std::net::IpAddr::from([raw[0], raw[1], raw[2], raw[3]])
    }
}

fn tcp_tuple(t: &RawTcp) -> TcpTuple {
    TcpTuple {
        saddr: ip(t.family, &t.saddr),
        sport: t.sport,
        daddr: ip(t.family, &t.daddr),
        dport: t.dport,
        state: t.state,
    }
}

fn wc_error(ev: &WcErrorEvent) -> Body {
    Body::WcError(WcError {
        qp: QpKey {
            dev: c_str(&ev.qp.dev),
            qpn: ev.qp.qpn,
        },
        cqn: ev.cqn,
        status: wc_status_name(ev.status),
        vendor_err: ev.vendor_err,
        owner_pid: ev.owner_pid,
        owner_comm: c_str(&ev.owner_comm),
    })
}

fn resource(ev: &ResourceEvent, added: bool) -> Body {
    let res_type = ResType::from_raw(ev.res_type);
    Body::Resource(Resource {
        added,
        res_type,
        dev: c_str(&ev.dev),
        id: ev.res_id,
        owner_pid: ev.owner_pid,
        owner_comm: c_str(&ev.owner_comm),
        user: ev.user != 0,
        cq: (res_type == ResType::Cq).then_some((ev.cqe, ev.comp_vector)),
        mr: (res_type == ResType::Mr).then_some(MrInfo {
            lkey: ev.lkey,
            rkey: ev.rkey,
            length: ev.length,
            iova: ev.iova,
            access: (added && ev.access != 0).then_some(ev.access),
        }),
    })
}

fn async_event(ev: &RawAsync) -> Body {
    let dev = c_str(&ev.qp.dev);
    let element = match ev.element {
        element::QP => AsyncElement::Qp(QpKey {
            dev: dev.clone(),
            qpn: ev.qp.qpn,
        }),
        element::CQ => AsyncElement::Cq(ev.element_id),
        element::SRQ => AsyncElement::Srq(ev.element_id),
        _ => AsyncElement::Port(ev.element_id),
    };
    Body::Async(AsyncEvent {
        dev,
        event: match ev.source {
            async_source::MLX5 => mlx5_event_name(ev.event_type),
            async_source::CORE if ev.event_type == async_source::DEVICE_UNREGISTER => {
                CompactString::const_new("DEVICE_UNREGISTER")
            }
            async_source::CORE => compact_str::format_compact!("CORE_{}", ev.event_type),
            _ => ib_event_name(ev.event_type),
        },
        element,
        source: match ev.source {
            async_source::MLX5 => "mlx5",
            async_source::CORE => "ib_core",
            _ => "uverbs",
        },
        owner_pid: 0,
        owner_comm: CompactString::const_new(""),
    })
}

fn sockaddr(family: u16, port: u16, addr: &[u8; 16]) -> Option<std::net::SocketAddr> {
    match family {
        2 | 10 => Some(std::net::SocketAddr::new(ip(family, addr), port)),
        _ => None,
    }
}

fn cm_event(ev: &RawCm) -> Body {
    Body::Cm(CmEvent {
        dev: c_str(&ev.qp.dev),
        qpn: ev.qp.qpn,
        event: cm_event_name(ev.event),
        status: ev.status,
        cm_id: ev.cm_id,
        owner_pid: ev.owner_pid,
        owner_comm: c_str(&ev.owner_comm),
        src: sockaddr(ev.src_family, ev.src_port, &ev.src_addr),
        dst: sockaddr(ev.dst_family, ev.dst_port, &ev.dst_addr),
    })
}

/// The first `n` addresses of a kernel stack array (never more than it holds; zeros end it).
fn frames(ips: &[u64], n: usize) -> Vec<Frame> {
    let mut v = Vec::new();
    frames_into(&mut v, ips, n);
    v
}

/// [`frames`] into `out`, reusing its allocation.
fn frames_into(out: &mut Vec<Frame>, ips: &[u64], n: usize) {
    out.clear();
    out.extend(
        ips.iter()
            .take(n)
            .take_while(|a| **a != 0)
            .map(|a| Frame::new(*a)),
    );
}

fn verbs_call(ev: &VerbsCallEvent) -> Body {
    let func = verbs_func::name(ev.func).map_or_else(|| format!("verbs_{}", ev.func), String::from);
    // ips[0] is the probed function itself: the stack is its callers.
    let all = frames(&ev.ips, ev.frames as usize);
    Body::VerbsCall(VerbsCall {
        func,
        stack: all.into_iter().skip(1).collect(),
    })
}

/// The kind and pid of a raw record, without decoding the rest.
pub fn peek(bytes: &[u8]) -> Option<(EventKind, u32)> {
    let word = |at: usize| {
        bytes
            .get(at..at + 4)
            .and_then(|b| b.try_into().ok())
            .map(u32::from_ne_bytes)
    };
    let kind = EventKind::from_raw(word(0)?)?;
    let pid = word(std::mem::offset_of!(EventHeader, pid))?;
    Some((kind, pid))
}

/// Decodes one ring-buffer record.
pub fn decode(bytes: &[u8], anchor: &ClockAnchor) -> Result<Record, DecodeError> {
    let mut rec = Record::lost(0, None, 0, anchor);
    decode_into(bytes, anchor, &mut rec)?;
    Ok(rec)
}

/// Decodes one ring-buffer record into `rec`, a record the caller reuses (records are a couple
/// of hundred bytes: building one in place spares copying it out). On error `rec` is unchanged.
pub fn decode_into(
    bytes: &[u8],
    anchor: &ClockAnchor,
    rec: &mut Record,
) -> Result<(), DecodeError> {
    if bytes.len() < size_of::<EventHeader>() {
        return Err(DecodeError::ShortHeader {
            len: bytes.len(),
            need: size_of::<EventHeader>(),
        });
    }
    let raw_kind = u32::from_ne_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
    let kind = EventKind::from_raw(raw_kind).ok_or(DecodeError::UnknownKind { kind: raw_kind })?;
    // SAFETY: the length was checked above; EventHeader is Pod, read_unaligned copes with
    // any alignment.
    let header = unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast::<EventHeader>()) };
    let body = match kind {
        EventKind::QpCreate => {
            let ev = read::<QpCreateEvent>(bytes, kind)?;
            Body::QpCreate {
                qp: qp_info(&ev.qp),
                ret: ev.ret,
            }
        }
        EventKind::QpModify => {
            let ev = read::<QpModifyEvent>(bytes, kind)?;
            Body::QpModify {
                qp: qp_info(&ev.qp),
                attrs: modify_attrs(&ev),
                ret: ev.ret,
            }
        }
        EventKind::QpDestroy => {
            let ev = read::<QpDestroyEvent>(bytes, kind)?;
            Body::QpDestroy {
                qp: qp_info(&ev.qp),
                ret: ev.ret,
            }
        }
        EventKind::ProcessExec => {
            let ev = read::<ProcessEvent>(bytes, kind)?;
            Body::ProcessExec { ppid: ev.ppid }
        }
        EventKind::ProcessCgroup => {
            let ev = read::<CgroupEvent>(bytes, kind)?;
            Body::ProcessCgroup { id: ev.cgroup_id }
        }
        EventKind::ProcessExit => {
            let ev = read::<ProcessEvent>(bytes, kind)?;
            Body::ProcessExit {
                ppid: ev.ppid,
                exit_code: ev.exit_code,
            }
        }
        EventKind::Retransmit => {
            let ev = read::<RetransmitEvent>(bytes, kind)?;
            reuse::retransmit(&ev, &mut rec.body);
            set_header(rec, &header, anchor);
            return Ok(());
        }
        EventKind::ResourceAdd | EventKind::ResourceDel => {
            let ev = read_grown::<ResourceEvent>(bytes, kind, RESOURCE_EVENT_V1)?;
            resource(&ev, kind == EventKind::ResourceAdd)
        }
        EventKind::AsyncEvent => {
            let ev = read::<RawAsync>(bytes, kind)?;
            async_event(&ev)
        }
        EventKind::CmEvent => {
            let ev = read::<RawCm>(bytes, kind)?;
            cm_event(&ev)
        }
        EventKind::TcpBytes => {
            let ev = read_grown::<TcpBytesSample>(bytes, kind, TCP_BYTES_SAMPLE_V1)?;
            reuse::tcp_bytes(&ev, &mut rec.body);
            set_header(rec, &header, anchor);
            return Ok(());
        }
        EventKind::QpTraffic => {
            let ev = read_grown::<QpTrafficSample>(bytes, kind, QP_TRAFFIC_SAMPLE_V1)?;
            reuse::qp_traffic(&ev, &mut rec.body);
            set_header(rec, &header, anchor);
            return Ok(());
        }
        EventKind::TcpState => {
            let ev = read::<TcpStateEvent>(bytes, kind)?;

            Body::TcpState(TcpState {
                tcp: tcp_tuple(&ev.tcp),
                old_state: ev.oldstate as u16,
                owner_pid: ev.owner.pid,
                owner_comm: c_str(&ev.owner.comm),
            })
        }
        EventKind::WcError => {
            let ev = read::<WcErrorEvent>(bytes, kind)?;
            wc_error(&ev)
        }
        EventKind::CqNotify => {
            let ev = read::<CqNotifySample>(bytes, kind)?;
            let n = ev.notify;

            Body::CqNotify(CqNotifyDelta {
                dev: c_str(&n.dev),
                cqn: n.cqn,
                count: n.count,
                owner_pid: n.owner_pid,
                owner_comm: c_str(&n.owner_comm),
            })
        }
        EventKind::QpRes => {
            let ev = read::<QpResSample>(bytes, kind)?;

            Body::QpRes(QpResRow {
                qp: qp_info(&ev.qp),
                port: ev.port,
                rqpn: (ev.rqpn != u32::MAX).then_some(ev.rqpn),
                sq_psn: ev.sq_psn,
                rq_psn: (ev.rq_psn != u32::MAX).then_some(ev.rq_psn),
                state: QpState::from_raw(ev.state),
                change: ResChange::from_raw(ev.change),
            })
        }
        EventKind::QpCounter => {
            let ev = read::<QpCounterSample>(bytes, kind)?;
            let kept = (ev.nqpns as usize).min(ev.qpns.len());

            Body::QpCounter(QpCounterDelta {
                dev: c_str(&ev.dev),
                port: ev.port,
                counter_id: ev.counter_id,
                qpns: ev.qpns[..kept].to_vec(),
                nqpns: ev.nqpns,
                name: c_str(&ev.name).into(),
                value: ev.value,
                delta: ev.delta,
            })
        }
        EventKind::Port => {
            let ev = read::<PortSample>(bytes, kind)?;

            Body::Port(PortInfo {
                dev: c_str(&ev.dev),
                port: ev.port,
                state: port_state_name(ev.state),
                active_mtu: (ev.active_mtu != 0).then_some(ev.active_mtu),
                netdev_mtu: (ev.netdev_mtu != 0).then_some(ev.netdev_mtu),
                link_layer: c_str(&ev.link_layer).into(),
                netdev: c_str(&ev.netdev).into(),
            })
        }
        EventKind::QpCaps => {
            let ev = read::<QpCapsEvent>(bytes, kind)?;

            Body::QpCaps(QpCaps {
                dev: c_str(&ev.dev),
                ret: ev.ret,
                qp_type: ev.qp_type,
                max_send_wr: ev.max_send_wr,
                max_recv_wr: ev.max_recv_wr,
                max_send_sge: ev.max_send_sge,
                max_recv_sge: ev.max_recv_sge,
                max_inline_data: ev.max_inline_data,
                dev_max_qp_wr: ev.dev_max_qp_wr,
                dev_max_send_sge: ev.dev_max_send_sge,
                dev_max_recv_sge: ev.dev_max_recv_sge,
            })
        }
        EventKind::QueueCaps => {
            let ev = read::<QueueCapsEvent>(bytes, kind)?;

            Body::QueueCaps(QueueCaps {
                dev: c_str(&ev.dev),
                ret: ev.ret,
                queue: if ev.queue == QUEUE_SRQ { "SRQ" } else { "CQ" },
                depth: ev.depth,
                sge: ev.sge,
                dev_max_depth: ev.dev_max_depth,
                dev_max_sge: ev.dev_max_sge,
            })
        }
        EventKind::UmemFailed => {
            let ev = read::<UmemFailedEvent>(bytes, kind)?;

            Body::UmemFailed(UmemFailed {
                dev: c_str(&ev.dev),
                ret: ev.ret,
                size: ev.size,
                memlock: (ev.memlock != u64::MAX).then_some(ev.memlock),
                // Pages of 4 KiB: the unit of `mm->pinned_vm` on every architecture built.
                pinned: (ev.pinned_pages != u64::MAX).then(|| ev.pinned_pages.saturating_mul(4096)),
            })
        }
        EventKind::Gid => {
            let ev = read::<GidSample>(bytes, kind)?;

            Body::Gid(GidInfo {
                dev: c_str(&ev.dev),
                port: ev.port,
                index: ev.index,
                gid: (ev.gid != [0; 16]).then_some(ev.gid),
                gid_type: crate::event::gid_type_name(ev.gid_type),
                netdev: c_str(&ev.netdev).into(),
            })
        }
        EventKind::VerbsCall => {
            let ev = read::<VerbsCallEvent>(bytes, kind)?;
            verbs_call(&ev)
        }
        EventKind::CpuSample => {
            let ev = read::<CpuSampleEvent>(bytes, kind)?;
            // The record decoded into again and again mostly holds a sample already: its
            // stacks' allocations are reused (a profile is a million samples).
            let mut c = match std::mem::replace(&mut rec.body, Body::ProcessExec { ppid: 0 }) {
                Body::CpuSample(c) => c,
                _ => CpuSample {
                    user: Vec::new(),
                    kernel: Vec::new(),
                },
            };
            frames_into(&mut c.user, &ev.user_ips, ev.user_frames as usize);
            frames_into(&mut c.kernel, &ev.kernel_ips, ev.kernel_frames as usize);
            Body::CpuSample(c)
        }
        EventKind::Counter => {
            let ev = read::<CounterSample>(bytes, kind)?;

            Body::Counter(CounterDelta {
                dev: c_str(&ev.dev),
                port: ev.port,
                hw: ev.hw != 0,
                name: c_str(&ev.name).into(),
                value: ev.value,
                delta: ev.delta,
            })
        }
    };
    rec.body = body;
    set_header(rec, &header, anchor);
    Ok(())
}

/// The record's fields from the event header.
fn set_header(rec: &mut Record, header: &EventHeader, anchor: &ClockAnchor) {
    rec.ts_ns = header.ts_ns;
    rec.wall_ns = anchor.wall_ns(header.ts_ns);
    rec.cpu = header.cpu;
    rec.pid = header.pid;
    rec.tid = header.tid;
    // Consecutive records mostly come from the same task: keep its name when it is the same.
    reuse::set_c_str(&mut rec.comm, &header.comm);
}

#[cfg(test)]
mod tests;
