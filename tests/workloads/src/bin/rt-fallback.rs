//! What NCCL or UCX do silently when RDMA setup goes wrong: open the RDMA device, create a QP,
//! then move the data over a TCP socket instead. The tracer must call this `tcp_fallback`.
//!
//! Usage: `rt-fallback --dev rxe0 --from 192.0.2.1 --to 192.0.2.2 --mib 8`
//! Output: `rt-fallback: pid P dev D qpn 0xN tcp_bytes B`

use std::{
    io::{Read, Write},
    net::{SocketAddr, TcpListener, TcpStream},
};

use anyhow::{bail, Context as _};
use rdma_sys::ibv_qp_state;
use rdmatrace_workloads::Verbs;

fn main() -> anyhow::Result<()> {
    let (mut dev, mut from, mut to, mut mib) =
        (None, "127.0.0.1".to_string(), "127.0.0.1".to_string(), 8u64);
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut val = || args.next().with_context(|| format!("{a} needs a value"));
        match a.as_str() {
            "--dev" => dev = Some(val()?),
            "--from" => from = val()?,
            "--to" => to = val()?,
            "--mib" => mib = val()?.parse()?,
            other => bail!("unknown argument {other:?}"),
        }
    }
    let verbs = Verbs::open(dev.as_deref())?;
    let qp = verbs.create_rc_qp()?;
    // The QP gets as far as INIT, then the "transport" gives up on it.
    let _ = qp.modify_to_init();
    let listener = TcpListener::bind((to.as_str(), 0)).context("bind")?;
    let addr = listener.local_addr()?;
    let total = mib << 20;
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
    let sock = socket2_connect(src, addr)?;
    let mut s = sock;
    let chunk = vec![0x5au8; 1 << 16];
    let mut sent = 0u64;
    while sent < total {
        let k = (total - sent).min(chunk.len() as u64) as usize;
        s.write_all(&chunk[..k])?;
        sent += k as u64;
    }
    drop(s);
    let got = server
        .join()
        .map_err(|_| anyhow::anyhow!("server thread panicked"))??;
    println!(
        "rt-fallback: pid {} dev {} qpn {:#08x} tcp_bytes {got}",
        std::process::id(),
        verbs.name,
        qp.qpn()
    );
    let _ = ibv_qp_state::IBV_QPS_INIT;
    Ok(())
}

/// Connects from a chosen source address (so the lab's traffic takes the wire).
fn socket2_connect(src: SocketAddr, dst: SocketAddr) -> anyhow::Result<TcpStream> {
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
