//! Creates an RC QP and asks for an illegal transition (RESET -> RTS), which every driver must
//! refuse with EINVAL; prints what it did so a test can check the tracer saw the same.
//!
//! Output: `rt-bad-modify: pid P dev D qpn 0xN RESET->RTS errno E`

use rdma_sys::ibv_qp_state;
use rdmatrace_workloads::{dev_arg, Verbs};

fn main() -> anyhow::Result<()> {
    let verbs = Verbs::open(dev_arg()?.as_deref())?;
    let qp = verbs.create_rc_qp()?;
    let errno = qp.modify_state_only(ibv_qp_state::IBV_QPS_RTS);
    println!(
        "rt-bad-modify: pid {} dev {} qpn {:#08x} RESET->RTS errno {errno}",
        std::process::id(),
        verbs.name,
        qp.qpn()
    );
    if errno == 0 {
        anyhow::bail!("the driver accepted RESET->RTS");
    }
    Ok(())
}
