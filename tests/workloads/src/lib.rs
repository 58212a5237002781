//! Minimal RAII wrappers over rdma-sys for the lab workloads: just enough verbs to create QPs
//! and drive them through states. Each workload prints the facts the tests check the tracer
//! against (device, QPN, PID), in the `key value` style of the rdma-core examples.

use std::ffi::CStr;

use std::net::{SocketAddr, TcpStream};

use anyhow::{bail, Context as _};
use rdma_sys::*;

/// An open device context with one PD and one CQ (with a completion channel when asked).
pub struct Verbs {
    pub name: String,
    ctx: *mut ibv_context,
    pd: *mut ibv_pd,
    cq: *mut ibv_cq,
    channel: *mut ibv_comp_channel,
    /// Completion events taken from the channel and not yet acknowledged.
    unacked: u32,
}

impl Verbs {
    /// Opens `name` (or the first device when `None`) with a small CQ, no channel.
    pub fn open(name: Option<&str>) -> anyhow::Result<Verbs> {
        Verbs::open_with(name, 16, false)
    }

    /// Opens `name` with a CQ of `cqe` entries, attached to a completion channel if `events`.
    pub fn open_with(name: Option<&str>, cqe: i32, events: bool) -> anyhow::Result<Verbs> {
        let mut n = 0;
        // SAFETY: ibv_get_device_list writes the count to `n` and returns a NULL-terminated
        // array (or NULL), freed below with ibv_free_device_list.
        let list = unsafe { ibv_get_device_list(&mut n) };
        if list.is_null() {
            bail!(
                "ibv_get_device_list failed: {}",
                std::io::Error::last_os_error()
            );
        }
        let mut chosen = None;
        for i in 0..usize::try_from(n).unwrap_or(0) {
            // SAFETY: i < n entries of the list returned above.
            let dev = unsafe { *list.add(i) };
            // SAFETY: dev is a valid device; the name is a NUL-terminated string it owns.
            let dev_name = unsafe { CStr::from_ptr(ibv_get_device_name(dev)) }
                .to_string_lossy()
                .into_owned();
            if name.is_none_or(|want| want == dev_name) {
                chosen = Some((dev, dev_name));
                break;
            }
        }
        let Some((dev, dev_name)) = chosen else {
            // SAFETY: the list came from ibv_get_device_list.
            unsafe { ibv_free_device_list(list) };
            bail!("no RDMA device {}", name.unwrap_or("at all"));
        };
        // SAFETY: dev comes from the live list; the context outlives the list.
        let ctx = unsafe { ibv_open_device(dev) };
        // SAFETY: as above.
        unsafe { ibv_free_device_list(list) };
        if ctx.is_null() {
            bail!(
                "ibv_open_device({dev_name}) failed: {}",
                std::io::Error::last_os_error()
            );
        }
        let mut v = Verbs {
            name: dev_name,
            ctx,
            pd: std::ptr::null_mut(),
            cq: std::ptr::null_mut(),
            channel: std::ptr::null_mut(),
            unacked: 0,
        };
        // SAFETY: ctx is an open context.
        v.pd = unsafe { ibv_alloc_pd(ctx) };
        if v.pd.is_null() {
            bail!("ibv_alloc_pd failed: {}", std::io::Error::last_os_error());
        }
        if events {
            // SAFETY: ctx is open.
            v.channel = unsafe { ibv_create_comp_channel(ctx) };
            if v.channel.is_null() {
                bail!(
                    "ibv_create_comp_channel failed: {}",
                    std::io::Error::last_os_error()
                );
            }
        }
        // SAFETY: ctx is open; the channel is NULL or live; vector 0.
        v.cq = unsafe { ibv_create_cq(ctx, cqe, std::ptr::null_mut(), v.channel, 0) };
        if v.cq.is_null() {
            bail!("ibv_create_cq failed: {}", std::io::Error::last_os_error());
        }
        Ok(v)
    }

    /// Creates a shared receive queue of `max_wr` work requests of one SGE on this context's PD
    /// (destroyed when dropped).
    pub fn create_srq(&self, max_wr: u32) -> anyhow::Result<Srq> {
        // SAFETY: all-zero is the documented "unset" value of this C struct.
        let mut init: ibv_srq_init_attr = unsafe { std::mem::zeroed() };
        init.attr.max_wr = max_wr;
        init.attr.max_sge = 1;
        // SAFETY: pd is live; init is initialised.
        let srq = unsafe { ibv_create_srq(self.pd, &mut init) };
        if srq.is_null() {
            bail!(
                "ibv_create_srq of {max_wr} work requests on {} failed: {}",
                self.name,
                std::io::Error::last_os_error()
            );
        }
        Ok(Srq { srq })
    }

    /// Creates a CQ of `cqe` entries on this context, without a channel (destroyed when
    /// dropped).
    pub fn create_cq(&self, cqe: i32) -> anyhow::Result<Cq> {
        // SAFETY: ctx is open; no channel, vector 0.
        let cq =
            unsafe { ibv_create_cq(self.ctx, cqe, std::ptr::null_mut(), std::ptr::null_mut(), 0) };
        if cq.is_null() {
            bail!(
                "ibv_create_cq of {cqe} entries on {} failed: {}",
                self.name,
                std::io::Error::last_os_error()
            );
        }
        Ok(Cq { cq })
    }

    /// Creates an RC QP on this context's PD/CQ.
    pub fn create_rc_qp(&self) -> anyhow::Result<Qp> {
        self.create_rc_qp_with(4)
    }

    /// Creates an RC QP with room for `depth` outstanding sends and receives.
    pub fn create_rc_qp_with(&self, depth: u32) -> anyhow::Result<Qp> {
        // SAFETY: all-zero is the documented "unset" value of this C struct.
        let mut init: ibv_qp_init_attr = unsafe { std::mem::zeroed() };
        init.send_cq = self.cq;
        init.recv_cq = self.cq;
        init.qp_type = ibv_qp_type::IBV_QPT_RC;
        init.cap.max_send_wr = depth;
        init.cap.max_recv_wr = depth;
        init.cap.max_send_sge = 1;
        init.cap.max_recv_sge = 1;
        // SAFETY: pd is live, init is fully initialised.
        let qp = unsafe { ibv_create_qp(self.pd, &mut init) };
        if qp.is_null() {
            bail!(
                "ibv_create_qp of depth {depth} on {} failed: {}",
                self.name,
                std::io::Error::last_os_error()
            );
        }
        Ok(Qp { qp })
    }

    /// The port-1 GID at `index` (rxe: index 1 is the IPv4-mapped RoCEv2 GID).
    pub fn gid(&self, index: i32) -> anyhow::Result<[u8; 16]> {
        // SAFETY: all-zero is a valid ibv_gid; ctx is open.
        let mut gid: ibv_gid = unsafe { std::mem::zeroed() };
        // SAFETY: as above; gid is written by the call.
        let rc = unsafe { ibv_query_gid(self.ctx, 1, index, &mut gid) };
        if rc != 0 {
            bail!("ibv_query_gid({}, 1, {index}) failed: {rc}", self.name);
        }
        // SAFETY: every bit pattern of the union is a valid byte array.
        Ok(unsafe { gid.raw })
    }

    /// Registers `buf` (which must outlive the MR) with `access` (`ibv_access_flags` bits).
    pub fn reg_mr(&self, buf: &mut [u8], access: u32) -> anyhow::Result<Mr> {
        // SAFETY: pd is live; buf is valid for its length for as long as the caller keeps it.
        let mr = unsafe {
            ibv_reg_mr(
                self.pd,
                buf.as_mut_ptr().cast(),
                buf.len(),
                access as std::os::raw::c_int,
            )
        };
        if mr.is_null() {
            bail!(
                "ibv_reg_mr of {} bytes on {} failed: {}",
                buf.len(),
                self.name,
                std::io::Error::last_os_error()
            );
        }
        Ok(Mr { mr })
    }

    /// Waits for completions: through the channel (arming the CQ first) when there is one,
    /// else by polling. Returns at least one completion.
    pub fn completions(&mut self, out: &mut [ibv_wc]) -> anyhow::Result<usize> {
        loop {
            // SAFETY: cq is live; out has room for out.len() entries.
            let n = unsafe { ibv_poll_cq(self.cq, out.len() as i32, out.as_mut_ptr()) };
            if n < 0 {
                bail!("ibv_poll_cq failed: {n}");
            }
            if n > 0 {
                return Ok(n as usize);
            }
            if self.channel.is_null() {
                std::hint::spin_loop();
                continue;
            }
            // SAFETY: cq is live.
            if unsafe { ibv_req_notify_cq(self.cq, 0) } != 0 {
                bail!("ibv_req_notify_cq failed");
            }
            // A completion may have arrived before the CQ was armed.
            // SAFETY: as above.
            let n = unsafe { ibv_poll_cq(self.cq, out.len() as i32, out.as_mut_ptr()) };
            if n != 0 {
                if n < 0 {
                    bail!("ibv_poll_cq failed: {n}");
                }
                return Ok(n as usize);
            }
            let mut cq = std::ptr::null_mut();
            let mut cq_ctx = std::ptr::null_mut();
            // SAFETY: channel is live; both out-pointers are written by the call.
            if unsafe { ibv_get_cq_event(self.channel, &mut cq, &mut cq_ctx) } != 0 {
                bail!(
                    "ibv_get_cq_event failed: {}",
                    std::io::Error::last_os_error()
                );
            }
            self.unacked += 1;
        }
    }
}

/// A shared receive queue.
pub struct Srq {
    srq: *mut ibv_srq,
}

impl Drop for Srq {
    fn drop(&mut self) {
        // SAFETY: srq was created by ibv_create_srq and is destroyed once.
        unsafe { ibv_destroy_srq(self.srq) };
    }
}

/// A completion queue of its own (besides the context's).
pub struct Cq {
    cq: *mut ibv_cq,
}

impl Drop for Cq {
    fn drop(&mut self) {
        // SAFETY: cq was created by ibv_create_cq, has no QP on it, and is destroyed once.
        unsafe { ibv_destroy_cq(self.cq) };
    }
}

/// A registered memory region.
pub struct Mr {
    mr: *mut ibv_mr,
}

impl Mr {
    pub fn lkey(&self) -> u32 {
        // SAFETY: mr is live until drop.
        unsafe { (*self.mr).lkey }
    }
    pub fn rkey(&self) -> u32 {
        // SAFETY: as above.
        unsafe { (*self.mr).rkey }
    }
}

impl Drop for Mr {
    fn drop(&mut self) {
        // SAFETY: mr was registered by ibv_reg_mr and is deregistered once.
        unsafe { ibv_dereg_mr(self.mr) };
    }
}

/// What one side of an RC connection tells the other.
#[derive(Clone, Copy, Debug)]
pub struct Endpoint {
    pub qpn: u32,
    pub gid: [u8; 16],
    /// The buffer the peer may write into, and its key.
    pub addr: u64,
    pub rkey: u32,
}

impl Drop for Verbs {
    fn drop(&mut self) {
        // SAFETY: each handle is either NULL or was created above and not yet destroyed.
        unsafe {
            if !self.cq.is_null() {
                if self.unacked > 0 {
                    ibv_ack_cq_events(self.cq, self.unacked);
                }
                ibv_destroy_cq(self.cq);
            }
            if !self.channel.is_null() {
                ibv_destroy_comp_channel(self.channel);
            }
            if !self.pd.is_null() {
                ibv_dealloc_pd(self.pd);
            }
            ibv_close_device(self.ctx);
        }
    }
}

pub struct Qp {
    qp: *mut ibv_qp,
}

impl Qp {
    pub fn qpn(&self) -> u32 {
        // SAFETY: qp is live until drop.
        unsafe { (*self.qp).qp_num }
    }

    /// RESET -> INIT on port 1 with remote-write access; returns 0 or the positive errno.
    pub fn modify_to_init(&self) -> i32 {
        // SAFETY: all-zero is valid for this C struct; qp is live.
        let mut attr: ibv_qp_attr = unsafe { std::mem::zeroed() };
        attr.qp_state = ibv_qp_state::IBV_QPS_INIT;
        attr.port_num = 1;
        attr.pkey_index = 0;
        attr.qp_access_flags = ibv_access_flags::IBV_ACCESS_REMOTE_WRITE.0;
        let mask = ibv_qp_attr_mask::IBV_QP_STATE.0
            | ibv_qp_attr_mask::IBV_QP_PKEY_INDEX.0
            | ibv_qp_attr_mask::IBV_QP_PORT.0
            | ibv_qp_attr_mask::IBV_QP_ACCESS_FLAGS.0;
        // SAFETY: as above.
        unsafe { ibv_modify_qp(self.qp, &mut attr, mask as i32) }
    }

    /// RESET -> INIT -> RTR -> RTS towards `peer` over port 1 and GID `gid_index`, path MTU
    /// 1024, ACK timeout 14 (67 ms), `retry_cnt` transport retries (rxe treats 7 as infinite).
    pub fn connect(&self, peer: &Endpoint, gid_index: u8, retry_cnt: u8) -> anyhow::Result<()> {
        self.connect_with(peer, gid_index, retry_cnt, 7, 14)
    }

    /// [`Qp::connect`] with `rnr_retry` RNR NAK retries (7 = forever) and local ACK timeout
    /// `timeout` (4.096 us x 2^timeout).
    pub fn connect_with(
        &self,
        peer: &Endpoint,
        gid_index: u8,
        retry_cnt: u8,
        rnr_retry: u8,
        timeout: u8,
    ) -> anyhow::Result<()> {
        let rc = self.modify_to_init();
        if rc != 0 {
            bail!("modify to INIT: errno {rc}");
        }
        // SAFETY: all-zero is valid for this C struct.
        let mut attr: ibv_qp_attr = unsafe { std::mem::zeroed() };
        attr.qp_state = ibv_qp_state::IBV_QPS_RTR;
        attr.path_mtu = ibv_mtu::IBV_MTU_1024;
        attr.dest_qp_num = peer.qpn;
        attr.rq_psn = 0;
        attr.max_dest_rd_atomic = 1;
        attr.min_rnr_timer = 12;
        attr.ah_attr.is_global = 1;
        attr.ah_attr.grh.dgid.raw = peer.gid;
        attr.ah_attr.grh.sgid_index = gid_index;
        attr.ah_attr.grh.hop_limit = 64;
        attr.ah_attr.port_num = 1;
        let mask = ibv_qp_attr_mask::IBV_QP_STATE.0
            | ibv_qp_attr_mask::IBV_QP_AV.0
            | ibv_qp_attr_mask::IBV_QP_PATH_MTU.0
            | ibv_qp_attr_mask::IBV_QP_DEST_QPN.0
            | ibv_qp_attr_mask::IBV_QP_RQ_PSN.0
            | ibv_qp_attr_mask::IBV_QP_MAX_DEST_RD_ATOMIC.0
            | ibv_qp_attr_mask::IBV_QP_MIN_RNR_TIMER.0;
        // SAFETY: qp is live; attr is initialised for every bit in mask.
        let rc = unsafe { ibv_modify_qp(self.qp, &mut attr, mask as i32) };
        if rc != 0 {
            bail!("modify to RTR: errno {rc}");
        }
        // SAFETY: all-zero is valid for this C struct.
        let mut attr: ibv_qp_attr = unsafe { std::mem::zeroed() };
        attr.qp_state = ibv_qp_state::IBV_QPS_RTS;
        attr.timeout = timeout;
        attr.retry_cnt = retry_cnt;
        attr.rnr_retry = rnr_retry;
        attr.sq_psn = 0;
        attr.max_rd_atomic = 1;
        let mask = ibv_qp_attr_mask::IBV_QP_STATE.0
            | ibv_qp_attr_mask::IBV_QP_TIMEOUT.0
            | ibv_qp_attr_mask::IBV_QP_RETRY_CNT.0
            | ibv_qp_attr_mask::IBV_QP_RNR_RETRY.0
            | ibv_qp_attr_mask::IBV_QP_SQ_PSN.0
            | ibv_qp_attr_mask::IBV_QP_MAX_QP_RD_ATOMIC.0;
        // SAFETY: as above.
        let rc = unsafe { ibv_modify_qp(self.qp, &mut attr, mask as i32) };
        if rc != 0 {
            bail!("modify to RTS: errno {rc}");
        }
        Ok(())
    }

    /// Posts a signaled RDMA WRITE of `local` (registered as `mr`) to the peer's buffer at
    /// `offset`.
    pub fn post_write(
        &self,
        wr_id: u64,
        mr: &Mr,
        local: &[u8],
        peer: &Endpoint,
        offset: u64,
    ) -> anyhow::Result<()> {
        let target = rdma_t {
            remote_addr: peer.addr + offset,
            rkey: peer.rkey,
        };
        self.post(
            wr_id,
            mr,
            local,
            ibv_wr_opcode::IBV_WR_RDMA_WRITE,
            Some(target),
        )
    }

    /// Posts a signaled SEND of `local` (registered as `mr`): it consumes a receive the peer
    /// posted.
    pub fn post_send(&self, wr_id: u64, mr: &Mr, local: &[u8]) -> anyhow::Result<()> {
        self.post(wr_id, mr, local, ibv_wr_opcode::IBV_WR_SEND, None)
    }

    /// Posts a receive buffer `local` (registered as `mr`): a SEND from the peer lands in it.
    pub fn post_recv(&self, wr_id: u64, mr: &Mr, local: &[u8]) -> anyhow::Result<()> {
        let mut sge = ibv_sge {
            addr: local.as_ptr() as u64,
            length: local.len() as u32,
            lkey: mr.lkey(),
        };
        // SAFETY: all-zero is valid for this C struct (null `next`).
        let mut wr: ibv_recv_wr = unsafe { std::mem::zeroed() };
        wr.wr_id = wr_id;
        wr.sg_list = &mut sge;
        wr.num_sge = 1;
        let mut bad = std::ptr::null_mut();
        // SAFETY: qp is live; wr and sge outlive the call; the MR covers `local`.
        let rc = unsafe { ibv_post_recv(self.qp, &mut wr, &mut bad) };
        if rc != 0 {
            bail!("ibv_post_recv: errno {rc}");
        }
        Ok(())
    }

    /// One signaled work request of one SGE (`local`, registered as `mr`).
    fn post(
        &self,
        wr_id: u64,
        mr: &Mr,
        local: &[u8],
        opcode: ibv_wr_opcode::Type,
        rdma: Option<rdma_t>,
    ) -> anyhow::Result<()> {
        let mut sge = ibv_sge {
            addr: local.as_ptr() as u64,
            length: local.len() as u32,
            lkey: mr.lkey(),
        };
        // SAFETY: all-zero is valid for this C struct (null `next`, no inline data).
        let mut wr: ibv_send_wr = unsafe { std::mem::zeroed() };
        wr.wr_id = wr_id;
        wr.sg_list = &mut sge;
        wr.num_sge = 1;
        wr.opcode = opcode;
        wr.send_flags = ibv_send_flags::IBV_SEND_SIGNALED.0;
        if let Some(r) = rdma {
            wr.wr.rdma = r;
        }
        let mut bad = std::ptr::null_mut();
        // SAFETY: qp is live; wr and sge outlive the call; the MR covers `local`.
        let rc = unsafe { ibv_post_send(self.qp, &mut wr, &mut bad) };
        if rc != 0 {
            bail!("ibv_post_send: errno {rc}");
        }
        Ok(())
    }

    /// `ibv_modify_qp` with only `IBV_QP_STATE` set; returns 0 or the positive errno.
    pub fn modify_state_only(&self, state: ibv_qp_state::Type) -> i32 {
        // SAFETY: all-zero is valid for this C struct; qp is live.
        let mut attr: ibv_qp_attr = unsafe { std::mem::zeroed() };
        attr.qp_state = state;
        // SAFETY: as above.
        unsafe { ibv_modify_qp(self.qp, &mut attr, ibv_qp_attr_mask::IBV_QP_STATE.0 as i32) }
    }
}

impl Drop for Qp {
    fn drop(&mut self) {
        // SAFETY: qp was created by ibv_create_qp and is destroyed once.
        unsafe { ibv_destroy_qp(self.qp) };
    }
}

/// `--dev NAME` from the command line, if given.
pub fn dev_arg() -> anyhow::Result<Option<String>> {
    let mut args = std::env::args().skip(1);
    let mut dev = None;
    while let Some(a) = args.next() {
        match a.as_str() {
            "-d" | "--dev" => dev = Some(args.next().context("--dev needs a device name")?),
            other => bail!("unknown argument {other:?} (usage: [--dev NAME])"),
        }
    }
    Ok(dev)
}

/// Sends `total` bytes over a TCP connection from `from` to a listener this function opens on
/// `to` (both IPv4 addresses of this host, so lab traffic takes the wire); returns what the
/// receiving end counted.
pub fn tcp_transfer(from: &str, to: &str, total: u64) -> anyhow::Result<u64> {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind((to, 0)).context("bind")?;
    let addr = listener.local_addr()?;
    let server = std::thread::spawn(move || -> anyhow::Result<u64> {
        let (mut c, _) = listener.accept()?;
        let mut buf = vec![0u8; 1 << 16];
        let mut n = 0u64;
        loop {
            let k = c.read(&mut buf)?;
            if k == 0 {
                return Ok(n);
            }
            n += k as u64;
        }
    });
    let src: SocketAddr = format!("{from}:0").parse()?;
    let mut s = socket2_connect(src, addr)?;
    let chunk = vec![0x5au8; 1 << 16];
    let mut sent = 0u64;
    while sent < total {
        let k = (total - sent).min(chunk.len() as u64) as usize;
        s.write_all(&chunk[..k])?;
        sent += k as u64;
    }
    drop(s);
    server
        .join()
        .map_err(|_| anyhow::anyhow!("server thread panicked"))?
}

/// Connects from a chosen source address (so the lab's traffic takes the wire).
pub fn socket2_connect(src: SocketAddr, dst: SocketAddr) -> anyhow::Result<TcpStream> {
    // SAFETY: plain socket syscalls on a fd we own; the fd is handed to TcpStream at the end.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            bail!("socket: {}", std::io::Error::last_os_error());
        }
        let to_sin = |a: SocketAddr| {
            let SocketAddr::V4(v4) = a else { return None };
            let mut sin: libc::sockaddr_in = std::mem::zeroed();
            sin.sin_family = libc::AF_INET as u16;
            sin.sin_port = v4.port().to_be();
            sin.sin_addr.s_addr = u32::from_ne_bytes(v4.ip().octets());
            Some(sin)
        };
        let (Some(s), Some(d)) = (to_sin(src), to_sin(dst)) else {
            bail!("IPv4 only")
        };
        let len = std::mem::size_of::<libc::sockaddr_in>() as u32;
        if libc::bind(fd, (&s as *const libc::sockaddr_in).cast(), len) != 0 {
            bail!("bind {src}: {}", std::io::Error::last_os_error());
        }
        if libc::connect(fd, (&d as *const libc::sockaddr_in).cast(), len) != 0 {
            bail!("connect {dst}: {}", std::io::Error::last_os_error());
        }
        use std::os::fd::FromRawFd as _;
        Ok(TcpStream::from_raw_fd(fd))
    }
}
