//! Writes synthetic recordings of a fleet for the multi-host bench (`cargo xtask bench`):
//! `fleet_synth OUT_DIR HOSTS EVENTS_PER_HOST QPS_PER_HOST` writes `OUT_DIR/host-I.rdmt` for
//! I in 0..HOSTS (see `rdmatrace::testing::fleet`).

use std::{path::PathBuf, process::ExitCode};

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("fleet_synth: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [dir, hosts, events, qps] = args.as_slice() else {
        anyhow::bail!("usage: fleet_synth OUT_DIR HOSTS EVENTS_PER_HOST QPS_PER_HOST");
    };
    let dir = PathBuf::from(dir);
    let (hosts, events, qps): (usize, u64, u32) = (hosts.parse()?, events.parse()?, qps.parse()?);
    std::fs::create_dir_all(&dir)?;
    for i in 0..hosts {
        let bytes = rdmatrace::testing::fleet::host(i, hosts, qps, events);
        std::fs::write(dir.join(format!("host-{i}.rdmt")), bytes)?;
    }
    Ok(())
}
