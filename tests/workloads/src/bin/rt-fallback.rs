//! What NCCL or UCX do silently when RDMA setup goes wrong: open the RDMA device, create a QP,
//! then move the data over a TCP socket instead. The tracer must call this `tcp_fallback`.
//!
//! Usage: `rt-fallback --dev rxe0 --from 192.0.2.1 --to 192.0.2.2 --mib 8 [--any-device]`
//! Output: `rt-fallback: pid P dev D qpn 0xN tcp_bytes B`
//!
//! `--any-device`: when no RDMA device can be opened (a container without /dev/infiniband),
//! move the data over TCP anyway, as NCCL does after "NET/IB : No device found", and print
//! `rt-fallback: pid P no rdma device (WHY) tcp_bytes B`.

use anyhow::{bail, Context as _};
use rdmatrace_workloads::{tcp_transfer, Verbs};

fn main() -> anyhow::Result<()> {
    let (mut dev, mut from, mut to, mut mib) =
        (None, "127.0.0.1".to_string(), "127.0.0.1".to_string(), 8u64);
    let mut any_device = false;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut val = || args.next().with_context(|| format!("{a} needs a value"));
        match a.as_str() {
            "--dev" => dev = Some(val()?),
            "--from" => from = val()?,
            "--to" => to = val()?,
            "--mib" => mib = val()?.parse()?,
            "--any-device" => any_device = true,
            other => bail!("unknown argument {other:?}"),
        }
    }
    let verbs = match Verbs::open(dev.as_deref()) {
        Ok(v) => v,
        Err(e) if any_device => {
            let got = tcp_transfer(&from, &to, mib << 20)?;
            println!(
                "rt-fallback: pid {} no rdma device ({e:#}) tcp_bytes {got}",
                std::process::id()
            );
            return Ok(());
        }
        Err(e) => return Err(e),
    };
    let qp = verbs.create_rc_qp()?;
    // The QP gets as far as INIT, then the "transport" gives up on it.
    let _ = qp.modify_to_init();
    let got = tcp_transfer(&from, &to, mib << 20)?;
    println!(
        "rt-fallback: pid {} dev {} qpn {:#08x} tcp_bytes {got}",
        std::process::id(),
        verbs.name,
        qp.qpn()
    );
    Ok(())
}
