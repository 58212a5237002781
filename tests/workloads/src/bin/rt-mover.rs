//! Moves data from one RDMA device to another in one process, the way a real job would, or —
//! with `--transport tcp` or `RT_TRANSPORT=tcp` in the environment, the way NCCL/UCX switch
//! silently — opens both devices and creates the QPs, then moves the data over TCP instead.
//!
//! Usage: `rt-mover --from-dev rxe0 --to-dev rxe1 [--mib 64] [--transport rdma|tcp]
//!         [--events] [--retry-cnt N] [--kill-peer-after-mib M] [--gid-index 1]
//!         [--from 192.0.2.1 --to 192.0.2.2] [--linger-secs S] [--chunk-kib K]
//!         [--no-remote-write] [--overflow-cq] [--wrong-dest-qpn] [--peer-gid-index N]
//!         [--send-without-recv] [--rnr-retry N] [--timeout N] [--sq-depth N]
//!         [--dest-addr A] [--past-mr] [--short-recv] [--cq-depth N] [--srq-depth N]
//!         [--side-tcp-mib M --side-tcp-to ADDR]`
//!
//! RDMA: RC QPs, signaled RDMA WRITEs of `--chunk-kib` (64) KiB, 16 in flight; `--events` waits on a
//! completion channel instead of polling. `--kill-peer-after-mib M` destroys the receiving QP
//! after M MiB: the sender's writes then fail with a transport retry error (use a small
//! `--retry-cnt`: rxe retries forever at 7). `--linger-secs S` keeps the process and its QPs
//! (errored or not) for S seconds before exiting, like a job that hangs on to a broken QP.
//! `--no-remote-write` registers the receiving buffer without remote write access, as a
//! program that forgot the flag would: the first write fails with a remote access error.
//! `--overflow-cq` gives the sender a CQ of 1 entry and posts 16 signaled writes without
//! polling it, as a program with an undersized CQ would: the CQ overflows (exit code 3).
//! `--wrong-dest-qpn` connects the sender to a QPN that does not exist (a stale or garbled
//! out-of-band exchange): its writes are never answered. `--peer-gid-index N` tells the
//! receiver the sender's GID of index N while the sender sends from `--gid-index`, as two
//! ends configured with different GID indexes would be. `--send-without-recv` sends with
//! SENDs while the receiver never posts a receive buffer: the receiver answers with RNR NAKs
//! until the sender's `--rnr-retry` (default 7, forever) run out. `--sq-depth N` asks for a
//! sender QP with N outstanding work requests (default 16): above the device's max_qp_wr the
//! creation is refused; `--cq-depth N` asks for a sender CQ of N entries and `--srq-depth N`
//! creates a receiver SRQ of N work requests (above max_cqe / max_srq_wr: refused; the mover
//! exits 1 saying so). `--timeout N` sets the sender's local ACK timeout (4.096 us x 2^N,
//! default 14 = 67 ms; rxe rounds anything below one jiffy up to one): below the round trip, the
//! sender retransmits requests the receiver already has. `--dest-addr A` connects the sender to
//! the GID of IPv4 address A instead of the receiver's (an address nobody answers for: its
//! retries run out with nothing acknowledged). `--past-mr` registers only the first half of the
//! sender's buffer and posts writes of all of it, as a program with a stale length would: the
//! first write fails with a local protection error (rxe on 6.12 reports only the flushes).
//! `--short-recv` sends with SENDs into receive buffers half their size: the receiver's
//! completion is a local error (LOC_QP_OP_ERR on rxe), the sender's the NAK for it (a remote operation error
//! on rxe). `--side-tcp-mib M` also moves M MiB over TCP on loopback-style
//! `ADDR` (to ADDR, from ADDR) while the RDMA transfer runs, as a data loader or a checkpoint
//! upload beside a job would.
//!
//! Output: `rt-mover: pid P transport T sender DEV qpn 0xN receiver DEV qpn 0xN`, then
//! `rt-mover: moved B bytes`, or `rt-mover: wc error status S (TEXT) qpn 0xN` and exit code 2.

use std::ffi::CStr;
use std::io::Write as _;

use anyhow::{bail, Context as _};
use rdma_sys::{ibv_access_flags as acc, ibv_wc, ibv_wc_status_str};
use rdmatrace_workloads::{tcp_transfer, Endpoint, Verbs};

const DEPTH: usize = 16;

struct Opts {
    from_dev: String,
    to_dev: String,
    mib: u64,
    tcp: bool,
    events: bool,
    retry_cnt: u8,
    kill_after_mib: Option<u64>,
    gid_index: u8,
    from: String,
    to: String,
    linger: std::time::Duration,
    chunk: usize,
    no_remote_write: bool,
    overflow_cq: bool,
    wrong_dest_qpn: bool,
    peer_gid_index: Option<u8>,
    send: bool,
    rnr_retry: u8,
    timeout: u8,
    dest_addr: Option<std::net::Ipv4Addr>,
    past_mr: bool,
    short_recv: bool,
    cq_depth: Option<i32>,
    srq_depth: Option<u32>,
    sq_depth: u32,
    side_tcp: Option<(u64, String)>,
}

fn opts() -> anyhow::Result<Opts> {
    let mut o = Opts {
        from_dev: "rxe0".into(),
        to_dev: "rxe1".into(),
        mib: 64,
        tcp: std::env::var("RT_TRANSPORT").is_ok_and(|t| t == "tcp"),
        events: false,
        retry_cnt: 6,
        kill_after_mib: None,
        gid_index: 1,
        from: "192.0.2.1".into(),
        to: "192.0.2.2".into(),
        linger: std::time::Duration::ZERO,
        chunk: 64 << 10,
        no_remote_write: false,
        overflow_cq: false,
        wrong_dest_qpn: false,
        peer_gid_index: None,
        send: false,
        rnr_retry: 7,
        timeout: 14,
        dest_addr: None,
        past_mr: false,
        short_recv: false,
        cq_depth: None,
        srq_depth: None,
        sq_depth: DEPTH as u32,
        side_tcp: None,
    };
    let mut side_to = "127.0.0.1".to_string();
    let mut side_mib = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut val = || args.next().with_context(|| format!("{a} needs a value"));
        match a.as_str() {
            "--from-dev" => o.from_dev = val()?,
            "--to-dev" => o.to_dev = val()?,
            "--mib" => o.mib = val()?.parse()?,
            "--transport" => o.tcp = val()? == "tcp",
            "--events" => o.events = true,
            "--retry-cnt" => o.retry_cnt = val()?.parse()?,
            "--kill-peer-after-mib" => o.kill_after_mib = Some(val()?.parse()?),
            "--gid-index" => o.gid_index = val()?.parse()?,
            "--from" => o.from = val()?,
            "--to" => o.to = val()?,
            "--linger-secs" => o.linger = std::time::Duration::from_secs_f64(val()?.parse()?),
            "--chunk-kib" => o.chunk = val()?.parse::<usize>()? << 10,
            "--no-remote-write" => o.no_remote_write = true,
            "--overflow-cq" => o.overflow_cq = true,
            "--wrong-dest-qpn" => o.wrong_dest_qpn = true,
            "--peer-gid-index" => o.peer_gid_index = Some(val()?.parse()?),
            "--send-without-recv" => o.send = true,
            "--rnr-retry" => o.rnr_retry = val()?.parse()?,
            "--timeout" => o.timeout = val()?.parse()?,
            "--dest-addr" => o.dest_addr = Some(val()?.parse()?),
            "--past-mr" => o.past_mr = true,
            "--cq-depth" => o.cq_depth = Some(val()?.parse()?),
            "--srq-depth" => o.srq_depth = Some(val()?.parse()?),
            "--short-recv" => {
                o.send = true;
                o.short_recv = true;
            }
            "--sq-depth" => o.sq_depth = val()?.parse()?,
            "--side-tcp-mib" => side_mib = Some(val()?.parse::<u64>()?),
            "--side-tcp-to" => side_to = val()?,
            other => bail!("unknown argument {other:?}"),
        }
    }
    o.side_tcp = side_mib.map(|m| (m, side_to));
    Ok(o)
}

fn main() -> anyhow::Result<std::process::ExitCode> {
    let o = opts()?;
    let cqe = match (o.overflow_cq, o.cq_depth) {
        (true, _) => 1,
        (false, Some(n)) => n,
        (false, None) => (DEPTH * 2) as i32,
    };
    let mut src = Verbs::open_with(Some(&o.from_dev), cqe, o.events)?;
    let dst = Verbs::open_with(Some(&o.to_dev), (DEPTH * 2) as i32, false)?;
    let _srq = o.srq_depth.map(|n| dst.create_srq(n)).transpose()?;
    let sqp = src.create_rc_qp_with(o.sq_depth)?;
    let mut dqp = Some(dst.create_rc_qp_with(DEPTH as u32)?);
    let dqpn = dqp.as_ref().map_or(0, |q| q.qpn());
    println!(
        "rt-mover: pid {} transport {} sender {} qpn {:#08x} receiver {} qpn {:#08x}",
        std::process::id(),
        if o.tcp { "tcp" } else { "rdma" },
        src.name,
        sqp.qpn(),
        dst.name,
        dqpn
    );
    let _ = std::io::stdout().flush();
    let chunk = o.chunk.max(1);
    let total = o.mib << 20;
    if o.tcp {
        // The "transport" gives up on RDMA after INIT.
        let _ = sqp.modify_to_init();
        let got = tcp_transfer(&o.from, &o.to, total)?;
        println!("rt-mover: moved {got} bytes");
        let _ = std::io::stdout().flush();
        std::thread::sleep(o.linger);
        return Ok(std::process::ExitCode::SUCCESS);
    }

    let mut sbuf = vec![0xa5u8; chunk];
    let mut dbuf = vec![0u8; chunk * DEPTH];
    // --past-mr: the MR covers half the buffer the writes are posted from.
    let registered = if o.past_mr { chunk / 2 } else { chunk };
    let smr = src.reg_mr(
        &mut sbuf[..registered.max(1)],
        acc::IBV_ACCESS_LOCAL_WRITE.0,
    )?;
    let remote = if o.no_remote_write {
        0
    } else {
        acc::IBV_ACCESS_REMOTE_WRITE.0
    };
    let dmr = dst.reg_mr(&mut dbuf, acc::IBV_ACCESS_LOCAL_WRITE.0 | remote)?;
    let s_end = Endpoint {
        qpn: sqp.qpn(),
        gid: src.gid(i32::from(o.peer_gid_index.unwrap_or(o.gid_index)))?,
        addr: 0,
        rkey: 0,
    };
    let d_end = Endpoint {
        qpn: dqpn,
        gid: dst.gid(i32::from(o.gid_index))?,
        addr: dbuf.as_ptr() as u64,
        rkey: dmr.rkey(),
    };
    if let Some(q) = &dqp {
        q.connect(&s_end, o.gid_index, o.retry_cnt)?;
    }
    let target = Endpoint {
        // Far above the QPNs rxe hands out on a lab host.
        qpn: if o.wrong_dest_qpn { 0xfedc0 } else { d_end.qpn },
        // An address nobody has: no neighbour, no answer.
        gid: o
            .dest_addr
            .map_or(d_end.gid, |a| a.to_ipv6_mapped().octets()),
        ..d_end
    };
    sqp.connect_with(&target, o.gid_index, o.retry_cnt, o.rnr_retry, o.timeout)?;
    if o.wrong_dest_qpn {
        println!("rt-mover: sender connected to qpn {:#08x}", target.qpn);
        let _ = std::io::stdout().flush();
    }

    if o.overflow_cq {
        // Every write signaled, the CQ never polled: completions beyond its size overflow it.
        for i in 0..DEPTH as u64 {
            let at = i * chunk as u64;
            sqp.post_write(at, &smr, &sbuf, &d_end, at)?;
        }
        std::thread::sleep(std::time::Duration::from_millis(1500));
        println!("rt-mover: posted {DEPTH} writes to a CQ of {cqe} entries without polling it");
        let _ = std::io::stdout().flush();
        std::thread::sleep(o.linger);
        return Ok(std::process::ExitCode::from(3));
    }
    if o.short_recv {
        // Receive buffers half the size of the messages that will land in them.
        let q = dqp.as_ref().context("no receiver QP")?;
        for i in 0..DEPTH {
            let at = i * chunk;
            q.post_recv(i as u64, &dmr, &dbuf[at..at + (chunk / 2).max(1)])?;
        }
    }
    let side = o
        .side_tcp
        .clone()
        .map(|(mib, addr)| std::thread::spawn(move || tcp_transfer(&addr, &addr, mib << 20)));
    let (mut posted, mut done, mut inflight) = (0u64, 0u64, 0usize);
    let mut wcs: Vec<ibv_wc> = (0..DEPTH)
        // SAFETY: all-zero is a valid ibv_wc.
        .map(|_| unsafe { std::mem::zeroed() })
        .collect();
    while done < total {
        while inflight < DEPTH && posted < total {
            let slot = (posted / chunk as u64) % DEPTH as u64;
            if o.send {
                sqp.post_send(posted, &smr, &sbuf)?;
            } else {
                sqp.post_write(posted, &smr, &sbuf, &d_end, slot * chunk as u64)?;
            }
            posted += chunk as u64;
            inflight += 1;
        }
        let n = src.completions(&mut wcs)?;
        for wc in &wcs[..n] {
            if wc.status != 0 {
                // SAFETY: ibv_wc_status_str returns a static string for any status.
                let what = unsafe { CStr::from_ptr(ibv_wc_status_str(wc.status)) };
                println!(
                    "rt-mover: wc error status {} ({}) qpn {:#08x}",
                    wc.status,
                    what.to_string_lossy(),
                    wc.qp_num
                );
                let _ = std::io::stdout().flush();
                std::thread::sleep(o.linger);
                return Ok(std::process::ExitCode::from(2));
            }
            inflight -= 1;
            done += chunk as u64;
        }
        if o.kill_after_mib.is_some_and(|m| done >= m << 20) && dqp.is_some() {
            // The peer goes away mid-transfer: its QPN stops answering.
            dqp = None;
            println!("rt-mover: receiver QP destroyed after {done} bytes");
        }
    }
    if let Some(t) = side {
        let got = t
            .join()
            .map_err(|_| anyhow::anyhow!("side TCP thread panicked"))??;
        println!("rt-mover: side tcp {got} bytes");
    }
    println!("rt-mover: moved {done} bytes");
    let _ = std::io::stdout().flush();
    std::thread::sleep(o.linger);
    Ok(std::process::ExitCode::SUCCESS)
}
