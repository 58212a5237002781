//! The RDMA netlink device interface (`RDMA_NL_NLDEV`, uapi `rdma/rdma_netlink.h`): message
//! framing, requests and the parsing of replies into plain rows. Pure: no socket here.
//!
//! Command and attribute numbers are uapi ABI (append-only enums), the same on every kernel.

use super::{
    attr::{Attr, AttrWriter, Attrs},
    NetlinkError,
};

pub const NETLINK_RDMA: isize = 20;
const RDMA_NL_NLDEV: u16 = 5;

pub mod cmd {
    pub const GET: u16 = 1;
    pub const RES_QP_GET: u16 = 10;
    pub const STAT_SET: u16 = 16;
    pub const STAT_GET: u16 = 17;
    pub const STAT_DEL: u16 = 18;
}

pub mod attr {
    pub const DEV_INDEX: u16 = 1;
    pub const DEV_NAME: u16 = 2;
    pub const PORT_INDEX: u16 = 3;
    pub const RES_QP: u16 = 19;
    pub const RES_QP_ENTRY: u16 = 20;
    pub const RES_LQPN: u16 = 21;
    pub const RES_RQPN: u16 = 22;
    pub const RES_RQ_PSN: u16 = 23;
    pub const RES_SQ_PSN: u16 = 24;
    pub const RES_TYPE: u16 = 26;
    pub const RES_STATE: u16 = 27;
    pub const RES_PID: u16 = 28;
    pub const RES_KERN_NAME: u16 = 29;
    pub const STAT_MODE: u16 = 74;
    pub const STAT_RES: u16 = 75;
    pub const STAT_AUTO_MODE_MASK: u16 = 76;
    pub const STAT_COUNTER: u16 = 77;
    pub const STAT_COUNTER_ENTRY: u16 = 78;
    pub const STAT_COUNTER_ID: u16 = 79;
    pub const STAT_HWCOUNTERS: u16 = 80;
    pub const STAT_HWCOUNTER_ENTRY: u16 = 81;
    pub const STAT_HWCOUNTER_ENTRY_NAME: u16 = 82;
    pub const STAT_HWCOUNTER_ENTRY_VALUE: u16 = 83;
}

/// `enum rdma_nl_counter_mode`.
pub const COUNTER_MODE_NONE: u32 = 0;
pub const COUNTER_MODE_AUTO: u32 = 1;
pub const COUNTER_MODE_MANUAL: u32 = 2;
/// `enum rdma_nl_counter_mask`.
pub const COUNTER_MASK_QP_TYPE: u32 = 1;
pub const COUNTER_MASK_PID: u32 = 2;

const NLMSG_HDRLEN: usize = 16;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
pub const NLM_F_REQUEST: u16 = 1;
pub const NLM_F_MULTI: u16 = 2;
pub const NLM_F_ACK: u16 = 4;
pub const NLM_F_DUMP: u16 = 0x300;

/// `RDMA_NL_GET_TYPE(RDMA_NL_NLDEV, op)`.
pub const fn msg_type(op: u16) -> u16 {
    (RDMA_NL_NLDEV << 10) + op
}

/// A whole request: `nlmsghdr` and attributes.
pub fn request(op: u16, flags: u16, seq: u32, attrs: &AttrWriter) -> Vec<u8> {
    let len = NLMSG_HDRLEN + attrs.buf.len();
    let mut out = Vec::with_capacity(len);
    out.extend_from_slice(&(len as u32).to_ne_bytes());
    out.extend_from_slice(&msg_type(op).to_ne_bytes());
    out.extend_from_slice(&(flags | NLM_F_REQUEST).to_ne_bytes());
    out.extend_from_slice(&seq.to_ne_bytes());
    out.extend_from_slice(&0u32.to_ne_bytes());
    out.extend_from_slice(&attrs.buf);
    out
}

/// One message of a reply datagram.
#[derive(Debug, PartialEq, Eq)]
pub enum Reply<'a> {
    /// Attributes of a data message.
    Data(&'a [u8]),
    /// End of a dump.
    Done,
    /// `NLMSG_ERROR`: 0 is an ACK, else -errno.
    Error(i32),
}

/// Splits a datagram into messages.
pub fn replies(mut buf: &[u8]) -> Result<Vec<Reply<'_>>, NetlinkError> {
    let mut out = Vec::new();
    while buf.len() >= NLMSG_HDRLEN {
        let len = u32::from_ne_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
        let kind = u16::from_ne_bytes([buf[4], buf[5]]);
        if len < NLMSG_HDRLEN || len > buf.len() {
            return Err(NetlinkError::Malformed("message length out of bounds"));
        }
        let body = &buf[NLMSG_HDRLEN..len];
        out.push(match kind {
            NLMSG_DONE => Reply::Done,
            NLMSG_ERROR => {
                let code = body
                    .get(..4)
                    .map(|b| i32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
                    .ok_or(NetlinkError::Malformed("error message too short"))?;
                Reply::Error(code)
            }
            _ => Reply::Data(body),
        });
        buf = buf.get(super::attr::align4(len)..).unwrap_or(&[]);
    }
    Ok(out)
}

/// An RDMA device (`RDMA_NLDEV_CMD_GET`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Device {
    pub index: u32,
    pub name: String,
    /// Number of ports (`PORT_INDEX` in a device reply).
    pub ports: u32,
}

pub fn parse_device(body: &[u8]) -> Result<Device, NetlinkError> {
    let mut dev = Device {
        index: u32::MAX,
        name: String::new(),
        ports: 0,
    };
    for a in Attrs::new(body) {
        let a = a?;
        match a.kind {
            attr::DEV_INDEX => dev.index = a.u32()?,
            attr::DEV_NAME => dev.name = a.str(),
            attr::PORT_INDEX => dev.ports = a.u32()?,
            _ => {}
        }
    }
    if dev.index == u32::MAX {
        return Err(NetlinkError::Malformed("device reply without an index"));
    }
    Ok(dev)
}

/// A row of the kernel's QP resource table (`rdma resource show qp`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QpRow {
    pub dev: String,
    pub port: u32,
    pub lqpn: u32,
    /// Remote QPN (connected QPs only).
    pub rqpn: Option<u32>,
    pub sq_psn: u32,
    pub rq_psn: Option<u32>,
    /// `enum ib_qp_type`.
    pub qp_type: u8,
    /// `enum ib_qp_state`.
    pub state: u8,
    /// The owning process; 0 for a kernel QP (then `kern_name` names its owner).
    pub pid: u32,
    pub kern_name: String,
}

fn dev_of(body: &[u8]) -> Result<(u32, String), NetlinkError> {
    let mut index = u32::MAX;
    let mut name = String::new();
    for a in Attrs::new(body) {
        let a = a?;
        match a.kind {
            attr::DEV_INDEX => index = a.u32()?,
            attr::DEV_NAME => name = a.str(),
            _ => {}
        }
    }
    Ok((index, name))
}

fn qp_row(dev: &str, entry: Attr<'_>) -> Result<QpRow, NetlinkError> {
    let mut row = QpRow {
        dev: dev.to_string(),
        port: 0,
        lqpn: 0,
        rqpn: None,
        sq_psn: 0,
        rq_psn: None,
        qp_type: 0,
        state: 0,
        pid: 0,
        kern_name: String::new(),
    };
    for a in entry.nested() {
        let a = a?;
        match a.kind {
            attr::PORT_INDEX => row.port = a.u32()?,
            attr::RES_LQPN => row.lqpn = a.u32()?,
            attr::RES_RQPN => row.rqpn = Some(a.u32()?),
            attr::RES_SQ_PSN => row.sq_psn = a.u32()?,
            attr::RES_RQ_PSN => row.rq_psn = Some(a.u32()?),
            attr::RES_TYPE => row.qp_type = a.u8()?,
            attr::RES_STATE => row.state = a.u8()?,
            attr::RES_PID => row.pid = a.u32()?,
            attr::RES_KERN_NAME => row.kern_name = a.str(),
            _ => {}
        }
    }
    Ok(row)
}

/// Rows of one `RES_QP_GET` dump message.
pub fn parse_qps(body: &[u8]) -> Result<Vec<QpRow>, NetlinkError> {
    let (_, dev) = dev_of(body)?;
    let mut rows = Vec::new();
    for a in Attrs::new(body) {
        let a = a?;
        if a.kind != attr::RES_QP {
            continue;
        }
        for entry in a.nested() {
            let entry = entry?;
            if entry.kind == attr::RES_QP_ENTRY {
                rows.push(qp_row(&dev, entry)?);
            }
        }
    }
    Ok(rows)
}

/// A per-QP statistic counter (`rdma statistic qp show`): the QPs bound to it and its values.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QpCounter {
    pub dev: String,
    pub port: u32,
    pub id: u32,
    /// Owner of the counter (auto mode per PID) or 0.
    pub pid: u32,
    pub qpns: Vec<u32>,
    pub values: Vec<(String, u64)>,
}

fn counter(dev: &str, entry: Attr<'_>) -> Result<QpCounter, NetlinkError> {
    let mut c = QpCounter {
        dev: dev.to_string(),
        port: 0,
        id: 0,
        pid: 0,
        qpns: Vec::new(),
        values: Vec::new(),
    };
    for a in entry.nested() {
        let a = a?;
        match a.kind {
            attr::PORT_INDEX => c.port = a.u32()?,
            attr::STAT_COUNTER_ID => c.id = a.u32()?,
            attr::RES_PID => c.pid = a.u32()?,
            attr::RES_QP => {
                for qp in a.nested() {
                    for f in qp?.nested() {
                        let f = f?;
                        if f.kind == attr::RES_LQPN {
                            c.qpns.push(f.u32()?);
                        }
                    }
                }
            }
            attr::STAT_HWCOUNTERS => {
                for hw in a.nested() {
                    let (mut name, mut value) = (String::new(), None);
                    for f in hw?.nested() {
                        let f = f?;
                        match f.kind {
                            attr::STAT_HWCOUNTER_ENTRY_NAME => name = f.str(),
                            attr::STAT_HWCOUNTER_ENTRY_VALUE => value = Some(f.u64()?),
                            _ => {}
                        }
                    }
                    if let (false, Some(v)) = (name.is_empty(), value) {
                        c.values.push((name, v));
                    }
                }
            }
            _ => {}
        }
    }
    Ok(c)
}

/// Counters of one `STAT_GET` (QP resource) dump message.
pub fn parse_counters(body: &[u8]) -> Result<Vec<QpCounter>, NetlinkError> {
    let (_, dev) = dev_of(body)?;
    let mut out = Vec::new();
    for a in Attrs::new(body) {
        let a = a?;
        if a.kind != attr::STAT_COUNTER {
            continue;
        }
        for entry in a.nested() {
            let entry = entry?;
            if entry.kind == attr::STAT_COUNTER_ENTRY {
                out.push(counter(&dev, entry)?);
            }
        }
    }
    Ok(out)
}

/// Counter mode of a port: `(mode, auto mask)` from a `STAT_GET` reply with `STAT_MODE`.
pub fn parse_mode(body: &[u8]) -> Result<(u32, u32), NetlinkError> {
    let (mut mode, mut mask) = (None, 0);
    for a in Attrs::new(body) {
        let a = a?;
        match a.kind {
            attr::STAT_MODE => mode = Some(a.u32()?),
            attr::STAT_AUTO_MODE_MASK => mask = a.u32()?,
            _ => {}
        }
    }
    Ok((
        mode.ok_or(NetlinkError::Malformed("mode reply without STAT_MODE"))?,
        mask,
    ))
}

/// The counter id of a bind reply.
pub fn parse_counter_id(body: &[u8]) -> Result<Option<u32>, NetlinkError> {
    for a in Attrs::new(body) {
        let a = a?;
        if a.kind == attr::STAT_COUNTER_ID {
            return Ok(Some(a.u32()?));
        }
    }
    Ok(None)
}
