//! Minimal RAII wrappers over rdma-sys for the lab workloads: just enough verbs to create QPs
//! and drive them through states. Each workload prints the facts the tests check the tracer
//! against (device, QPN, PID), in the `key value` style of the rdma-core examples.

use std::ffi::CStr;

use anyhow::{bail, Context as _};
use rdma_sys::*;

/// An open device context with one PD and one CQ.
pub struct Verbs {
    pub name: String,
    ctx: *mut ibv_context,
    pd: *mut ibv_pd,
    cq: *mut ibv_cq,
}

impl Verbs {
    /// Opens `name` (or the first device when `None`).
    pub fn open(name: Option<&str>) -> anyhow::Result<Verbs> {
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
        };
        // SAFETY: ctx is an open context.
        v.pd = unsafe { ibv_alloc_pd(ctx) };
        if v.pd.is_null() {
            bail!("ibv_alloc_pd failed: {}", std::io::Error::last_os_error());
        }
        // SAFETY: ctx is open; no channel, vector 0.
        v.cq = unsafe { ibv_create_cq(ctx, 16, std::ptr::null_mut(), std::ptr::null_mut(), 0) };
        if v.cq.is_null() {
            bail!("ibv_create_cq failed: {}", std::io::Error::last_os_error());
        }
        Ok(v)
    }

    /// Creates an RC QP on this context's PD/CQ.
    pub fn create_rc_qp(&self) -> anyhow::Result<Qp> {
        // SAFETY: all-zero is the documented "unset" value of this C struct.
        let mut init: ibv_qp_init_attr = unsafe { std::mem::zeroed() };
        init.send_cq = self.cq;
        init.recv_cq = self.cq;
        init.qp_type = ibv_qp_type::IBV_QPT_RC;
        init.cap.max_send_wr = 4;
        init.cap.max_recv_wr = 4;
        init.cap.max_send_sge = 1;
        init.cap.max_recv_sge = 1;
        // SAFETY: pd is live, init is fully initialised.
        let qp = unsafe { ibv_create_qp(self.pd, &mut init) };
        if qp.is_null() {
            bail!("ibv_create_qp failed: {}", std::io::Error::last_os_error());
        }
        Ok(Qp { qp })
    }
}

impl Drop for Verbs {
    fn drop(&mut self) {
        // SAFETY: each handle is either NULL or was created above and not yet destroyed.
        unsafe {
            if !self.cq.is_null() {
                ibv_destroy_cq(self.cq);
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
