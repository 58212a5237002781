//! Holds many RC QPs for the scale bench: `rt-manyqp --dev NAME --qps N --hold SECS` creates N
//! QPs (depth 1, brought to INIT) on one PD and CQ, prints `rt-manyqp: pid P dev D qps N first
//! QPN last QPN holding`, holds them SECS seconds, then destroys them and exits. With
//! `--cqs N` / `--mrs N` it also creates N more CQs (16 entries) and registers N MRs (a 4 KiB
//! page each, local write), held and freed with the QPs (the bench's control-path churn).

use anyhow::Context as _;
use rdmatrace_workloads::Verbs;

fn main() -> anyhow::Result<()> {
    let mut dev = None;
    let (mut qps, mut hold, mut cqs, mut mrs) = (1000u32, 10u64, 0u32, 0usize);
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = || args.next().with_context(|| format!("{a} needs a value"));
        match a.as_str() {
            "-d" | "--dev" => dev = Some(value()?),
            "--qps" => qps = value()?.parse().context("--qps")?,
            "--hold" => hold = value()?.parse().context("--hold")?,
            "--cqs" => cqs = value()?.parse().context("--cqs")?,
            "--mrs" => mrs = value()?.parse().context("--mrs")?,
            other => anyhow::bail!(
                "unknown argument {other:?} (usage: --dev NAME --qps N --hold SECS [--cqs N] [--mrs N])"
            ),
        }
    }
    let verbs = Verbs::open(dev.as_deref())?;
    let mut held = Vec::with_capacity(qps as usize);
    for i in 0..qps {
        let qp = verbs
            .create_rc_qp_with(1)
            .with_context(|| format!("QP {i} of {qps}"))?;
        let errno = qp.modify_to_init();
        anyhow::ensure!(errno == 0, "QP {i}: RESET->INIT errno {errno}");
        held.push(qp);
    }
    let extra_cqs = (0..cqs)
        .map(|i| {
            verbs
                .create_cq(16)
                .with_context(|| format!("CQ {i} of {cqs}"))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    const PAGE: usize = 4096;
    let mut pages = vec![0u8; mrs * PAGE];
    let regs = pages
        .chunks_exact_mut(PAGE)
        .enumerate()
        .map(|(i, page)| {
            verbs
                .reg_mr(page, rdma_sys::ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0)
                .with_context(|| format!("MR {i} of {mrs}"))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    println!(
        "rt-manyqp: pid {} dev {} qps {} first {:#x} last {:#x} holding",
        std::process::id(),
        verbs.name,
        held.len(),
        held.first().map_or(0, |q| q.qpn()),
        held.last().map_or(0, |q| q.qpn()),
    );
    std::thread::sleep(std::time::Duration::from_secs(hold));
    drop(regs);
    drop(extra_cqs);
    drop(held);
    Ok(())
}
