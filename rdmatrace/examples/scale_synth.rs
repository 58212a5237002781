//! Scale figures for `cargo xtask bench`, on synthetic input through the real code.
//!
//! - `scale_synth qps N`: N RC QPs (1,000 processes; each QP created, brought to RTS and given
//!   traffic) through the real stage and correlator with a sink that keeps nothing. Prints JSON:
//!   the QPs the correlator holds, RSS before and after, bytes per QP, seconds.
//! - `scale_synth stacks FILE N`: writes a recording of N CPU samples with named stacks (200
//!   processes of 100 code paths each, user stacks 4-12 deep over 5,000 functions, kernel
//!   stacks 0-6 deep over 500),
//!   for `rdmatrace flamegraph FILE --kind cpu` to be timed on.

use std::{process::ExitCode, time::Instant};

use rdmatrace::{
    correlate::Correlator,
    event::{Body, QpKey, QpState, QpTrafficDelta},
    testing::{modify, qp_info, record, synthetic_header, zeroed, Gen},
};
use rdmatrace_common::event::{CpuSampleEvent, EventKind, STACK_DEPTH};

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("scale_synth: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

fn run() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.as_slice() {
        [mode, n] if mode == "qps" => qps(n.parse()?),
        [mode, file, n] if mode == "stacks" => stacks(file, n.parse()?),
        _ => anyhow::bail!("usage: scale_synth qps N | scale_synth stacks FILE N"),
    }
}

fn qps(n: u32) -> anyhow::Result<()> {
    const PROCS: u32 = 1_000;
    let mut correlator = Correlator::new();
    let mut push = |mut r| correlator.observe(&mut r);
    let before = rss_kib();
    let t = Instant::now();
    let mut ts = 1_000_000_000u64;
    for q in 0..n {
        let pid = 10_000 + q % PROCS;
        let comm = "trainer";
        let qpn = 0x100 + q;
        let dev = if q.is_multiple_of(2) {
            "mlx5_0"
        } else {
            "mlx5_1"
        };
        ts += 1_000;
        push(record(
            pid,
            comm,
            ts,
            Body::QpCreate {
                qp: qp_info(dev, qpn),
                ret: 0,
            },
        ));
        for to in [QpState::Init, QpState::Rtr, QpState::Rts] {
            ts += 1_000;
            push(record(pid, comm, ts, modify(dev, qpn, to, 0)));
        }
        ts += 1_000;
        push(record(
            0,
            "",
            ts,
            Body::QpTraffic(QpTrafficDelta {
                qp: qp_info(dev, qpn),
                tx_packets: 10,
                tx_bytes: 40_960,
                rx_packets: 10,
                rx_bytes: 40_960,
                owner_pid: 0,
                owner_comm: "".into(),
            }),
        ));
    }
    let secs = t.elapsed().as_secs_f64();
    let after = rss_kib();
    let dev = |q: u32| {
        if q.is_multiple_of(2) {
            "mlx5_0"
        } else {
            "mlx5_1"
        }
    };
    let held = (0..n)
        .filter(|&q| {
            let key = QpKey {
                dev: dev(q).into(),
                qpn: 0x100 + q,
            };
            correlator.qp(&key).is_some()
        })
        .count();
    println!(
        "{}",
        serde_json::json!({
            "qps": n,
            "held": held,
            "records": u64::from(n) * 5,
            "rss_before_kib": before,
            "rss_after_kib": after,
            "bytes_per_qp": (after.saturating_sub(before) * 1024) as f64 / f64::from(n.max(1)),
            "secs": secs,
        })
    );
    Ok(())
}

/// A reproducible pseudo-random sequence (xorshift).
struct Rng(u64);

impl Rng {
    fn next(&mut self, below: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % below
    }
}

fn stacks(file: &str, n: u64) -> anyhow::Result<()> {
    const PROCS: u64 = 200;
    const USER_FNS: u64 = 5_000;
    const KERNEL_FNS: u64 = 500;
    const PATHS: u64 = 100;
    let user = |f: u64| 0x5555_0000_0000 + f * 0x40;
    let kernel = |f: u64| 0xffff_ffff_8100_0000 + f * 0x40;
    let mut g = Gen::new(&synthetic_header(), rdmatrace::recording::VERSION);
    g.step_ns = 10_000;
    for f in 0..KERNEL_FNS {
        g.w.symbol(0, kernel(f), &format!("kernel_fn_{f}"))?;
    }
    for p in 0..PROCS {
        for f in 0..USER_FNS / PROCS * 4 {
            let f = (p * 97 + f) % USER_FNS;
            g.w.symbol(
                20_000 + p as u32,
                user(f),
                &format!("app::module_{}::fn_{f}", f % 50),
            )?;
        }
    }
    // Each process runs 100 code paths (a user stack with the kernel stack it was in), sampled
    // with a skew: about 20,000 distinct stacks in all, as a CPU profile of a fleet job has.
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut paths: Vec<Vec<(Vec<u64>, Vec<u64>)>> = Vec::new();
    for p in 0..PROCS {
        let own = USER_FNS / PROCS * 4;
        let mut v = Vec::new();
        for _ in 0..PATHS {
            let depth = 4 + rng.next(9);
            let user_stack = (0..depth)
                .map(|i| {
                    let f = if i + 3 < depth { i } else { rng.next(own) };
                    user((p * 97 + f) % USER_FNS)
                })
                .collect();
            let kernel_stack = (0..rng.next(7))
                .map(|_| kernel(rng.next(KERNEL_FNS)))
                .collect();
            v.push((user_stack, kernel_stack));
        }
        paths.push(v);
    }
    for _ in 0..n {
        let p = rng.next(PROCS);
        let pid = 20_000 + p as u32;
        // Skewed: a few hot paths take most samples.
        let path = rng.next(PATHS).min(rng.next(PATHS)) as usize;
        let (user_stack, kernel_stack) = &paths[p as usize][path];
        let mut ev: CpuSampleEvent = zeroed();
        ev.header = g.header(EventKind::CpuSample, pid, "trainer");
        ev.user_frames = user_stack.len().min(STACK_DEPTH) as u32;
        for (ip, &a) in ev.user_ips.iter_mut().zip(user_stack) {
            *ip = a;
        }
        ev.kernel_frames = kernel_stack.len().min(STACK_DEPTH) as u32;
        for (ip, &a) in ev.kernel_ips.iter_mut().zip(kernel_stack) {
            *ip = a;
        }
        g.put(&ev);
    }
    std::fs::write(file, g.finish())?;
    Ok(())
}
