//! RDMA netlink (`NETLINK_RDMA`, the interface of iproute2's `rdma` tool): the kernel's QP
//! resource table, per-QP statistic counters and their binding. Reading changes nothing;
//! binding is done only when asked (see [`binding`]).

pub mod attr;
pub mod binding;
pub mod journal;
pub mod nldev;
pub mod recover;
pub mod sampler;
pub mod table;
#[cfg(test)]
mod tests;

use std::time::Duration;

use netlink_sys::{Socket, SocketAddr};

use attr::AttrWriter;
use nldev::{cmd, Device, QpCounter, QpRow, Reply};

#[derive(Debug, thiserror::Error)]
pub enum NetlinkError {
    #[error("cannot open an RDMA netlink socket: {0}")]
    Socket(#[source] std::io::Error),
    #[error("RDMA netlink {what}: {source}")]
    Io {
        what: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("RDMA netlink {what} on {target}: {}", errno_text(*.errno))]
    Kernel {
        what: &'static str,
        target: String,
        errno: i32,
    },
    #[error("malformed RDMA netlink reply: {0}")]
    Malformed(&'static str),
}

impl NetlinkError {
    /// The errno of a kernel refusal.
    pub fn errno(&self) -> Option<i32> {
        match self {
            NetlinkError::Kernel { errno, .. } => Some(*errno),
            _ => None,
        }
    }
}

fn errno_text(errno: i32) -> String {
    let name = match errno {
        libc::EOPNOTSUPP => " (EOPNOTSUPP: the driver has no per-QP counters)",
        libc::EPERM => " (EPERM: needs CAP_NET_ADMIN)",
        libc::EINVAL => " (EINVAL)",
        libc::ENODEV => " (ENODEV: device gone)",
        libc::EBUSY => " (EBUSY)",
        _ => "",
    };
    format!("{}{name}", std::io::Error::from_raw_os_error(errno))
}

/// A connected RDMA netlink socket.
pub struct RdmaNetlink {
    socket: Socket,
    seq: u32,
}

impl RdmaNetlink {
    pub fn open() -> Result<RdmaNetlink, NetlinkError> {
        let mut socket = Socket::new(nldev::NETLINK_RDMA).map_err(NetlinkError::Socket)?;
        socket.bind_auto().map_err(NetlinkError::Socket)?;
        socket
            .set_rx_buf_sz(1 << 20)
            .map_err(NetlinkError::Socket)?;
        // A dump of a busy device must never hang a sampler tick.
        set_recv_timeout(&socket, Duration::from_secs(2)).map_err(NetlinkError::Socket)?;
        Ok(RdmaNetlink { socket, seq: 1 })
    }

    /// Sends one request and collects the data messages of its reply (a dump or a single
    /// answer), stopping at DONE or at the ACK/error.
    fn call(
        &mut self,
        what: &'static str,
        target: &str,
        op: u16,
        flags: u16,
        attrs: &AttrWriter,
    ) -> Result<Vec<Vec<u8>>, NetlinkError> {
        self.seq = self.seq.wrapping_add(1);
        let dump = flags & nldev::NLM_F_DUMP != 0;
        let req = nldev::request(op, flags, self.seq, attrs);
        let kernel = SocketAddr::new(0, 0);
        self.socket
            .send_to(&req, &kernel, 0)
            .map_err(|source| NetlinkError::Io { what, source })?;
        let mut out = Vec::new();
        loop {
            let (buf, _) = self
                .socket
                .recv_from_full()
                .map_err(|source| NetlinkError::Io { what, source })?;
            let mut finished = false;
            for reply in nldev::replies(&buf)? {
                match reply {
                    Reply::Data(body) => {
                        out.push(body.to_vec());
                        if !dump && flags & nldev::NLM_F_ACK == 0 {
                            finished = true;
                        }
                    }
                    Reply::Done => finished = true,
                    Reply::Error(0) => finished = true,
                    Reply::Error(code) => {
                        return Err(NetlinkError::Kernel {
                            what,
                            target: target.to_string(),
                            errno: -code,
                        })
                    }
                }
            }
            if finished {
                return Ok(out);
            }
        }
    }

    pub fn devices(&mut self) -> Result<Vec<Device>, NetlinkError> {
        self.call(
            "device list",
            "all devices",
            cmd::GET,
            nldev::NLM_F_DUMP,
            &AttrWriter::default(),
        )?
        .iter()
        .map(|b| nldev::parse_device(b))
        .collect()
    }

    /// The QP resource table of one device.
    pub fn qps(&mut self, dev: &Device) -> Result<Vec<QpRow>, NetlinkError> {
        let mut a = AttrWriter::default();
        a.u32(nldev::attr::DEV_INDEX, dev.index);
        let mut rows = Vec::new();
        for body in self.call(
            "QP table",
            &dev.name,
            cmd::RES_QP_GET,
            nldev::NLM_F_DUMP,
            &a,
        )? {
            rows.extend(nldev::parse_qps(&body)?);
        }
        Ok(rows)
    }

    /// The per-QP statistic counters of one device (empty when none is bound).
    pub fn qp_counters(&mut self, dev: &Device) -> Result<Vec<QpCounter>, NetlinkError> {
        let mut a = AttrWriter::default();
        a.u32(nldev::attr::DEV_INDEX, dev.index)
            .u32(nldev::attr::STAT_RES, u32::from(nldev::attr::RES_QP));
        let mut out = Vec::new();
        for body in self.call(
            "QP counters",
            &dev.name,
            cmd::STAT_GET,
            nldev::NLM_F_DUMP,
            &a,
        )? {
            out.extend(nldev::parse_counters(&body)?);
        }
        Ok(out)
    }

    /// Counter mode of a port: `(mode, auto mask)`.
    pub fn counter_mode(&mut self, dev: &Device, port: u32) -> Result<(u32, u32), NetlinkError> {
        let mut a = AttrWriter::default();
        a.u32(nldev::attr::DEV_INDEX, dev.index)
            .u32(nldev::attr::PORT_INDEX, port)
            .u32(nldev::attr::STAT_RES, u32::from(nldev::attr::RES_QP))
            .u32(nldev::attr::STAT_MODE, nldev::COUNTER_MODE_NONE);
        let target = format!("{}/{port}", dev.name);
        let replies = self.call("counter mode", &target, cmd::STAT_GET, 0, &a)?;
        let body = replies
            .first()
            .ok_or(NetlinkError::Malformed("no reply to a counter mode query"))?;
        nldev::parse_mode(body)
    }

    /// Sets auto mode on a port (`mask` 0 turns it off).
    pub fn set_auto_mode(
        &mut self,
        dev: &Device,
        port: u32,
        mask: u32,
    ) -> Result<(), NetlinkError> {
        let mut a = AttrWriter::default();
        a.u32(nldev::attr::DEV_INDEX, dev.index)
            .u32(nldev::attr::PORT_INDEX, port)
            .u32(nldev::attr::STAT_RES, u32::from(nldev::attr::RES_QP))
            .u32(nldev::attr::STAT_MODE, nldev::COUNTER_MODE_AUTO)
            .u32(nldev::attr::STAT_AUTO_MODE_MASK, mask);
        let target = format!("{}/{port}", dev.name);
        self.call(
            "set counter auto mode",
            &target,
            cmd::STAT_SET,
            nldev::NLM_F_ACK,
            &a,
        )?;
        Ok(())
    }

    /// Binds a QP to a new counter of its own (manual mode); returns the counter id.
    pub fn bind_manual(&mut self, dev: &Device, port: u32, qpn: u32) -> Result<u32, NetlinkError> {
        let mut a = AttrWriter::default();
        a.u32(nldev::attr::DEV_INDEX, dev.index)
            .u32(nldev::attr::PORT_INDEX, port)
            .u32(nldev::attr::STAT_RES, u32::from(nldev::attr::RES_QP))
            .u32(nldev::attr::STAT_MODE, nldev::COUNTER_MODE_MANUAL)
            .u32(nldev::attr::RES_LQPN, qpn);
        let target = format!("{}/{port} QP {qpn:#x}", dev.name);
        let replies = self.call("bind counter", &target, cmd::STAT_SET, nldev::NLM_F_ACK, &a)?;
        replies
            .iter()
            .find_map(|b| nldev::parse_counter_id(b).ok().flatten())
            .ok_or(NetlinkError::Malformed("bind reply without a counter id"))
    }

    /// Unbinds a QP from a counter (the counter is freed with its last QP).
    pub fn unbind(
        &mut self,
        dev: &Device,
        port: u32,
        counter: u32,
        qpn: u32,
    ) -> Result<(), NetlinkError> {
        let mut a = AttrWriter::default();
        a.u32(nldev::attr::DEV_INDEX, dev.index)
            .u32(nldev::attr::PORT_INDEX, port)
            .u32(nldev::attr::STAT_RES, u32::from(nldev::attr::RES_QP))
            .u32(nldev::attr::STAT_COUNTER_ID, counter)
            .u32(nldev::attr::RES_LQPN, qpn);
        let target = format!("{}/{port} counter {counter} QP {qpn:#x}", dev.name);
        self.call(
            "unbind counter",
            &target,
            cmd::STAT_DEL,
            nldev::NLM_F_ACK,
            &a,
        )?;
        Ok(())
    }
}

fn set_recv_timeout(socket: &Socket, timeout: Duration) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let tv = libc::timeval {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_usec: libc::suseconds_t::from(timeout.subsec_micros() as i32),
    };
    // SAFETY: a valid socket fd and a timeval that lives across the call, with its size.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            (&tv as *const libc::timeval).cast(),
            size_of::<libc::timeval>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}
