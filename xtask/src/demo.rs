//! The README's first command: the lab with a real ibv_rc_pingpong traced live.

use std::process::{Command, ExitCode};

use crate::{bootstrap, cmd, lab};

pub fn run_demo_script() -> String {
    // Start the tracer, wait for its ready line, run a pingpong between rxe1 (server) and rxe0
    // (client) over the wire, then stop the tracer and show what it saw.
    r#"set -u
out=$(mktemp -d)
target/debug/rdmatrace trace > "$out/trace.txt" 2> "$out/trace.err" &
tracer=$!
for _ in $(seq 600); do grep -q "Hit Ctrl-C" "$out/trace.err" && break; sleep 0.1; done
cat "$out/trace.err"
ibv_rc_pingpong -d rxe1 -g 1 -n 100 > "$out/server.txt" 2>&1 &
server=$!
sleep 1
ibv_rc_pingpong -d rxe0 -g 1 -n 100 192.0.2.2 > "$out/client.txt" 2>&1
wait $server
sleep 1
kill -INT $tracer; wait $tracer
echo "--- ibv_rc_pingpong server (rxe1) ---"; cat "$out/server.txt"
echo "--- ibv_rc_pingpong client (rxe0) ---"; cat "$out/client.txt"
echo "--- rdmatrace trace ---"; grep -v ' exec \| exit ' "$out/trace.txt" || true
echo "(process exec/exit lines omitted: $(grep -c ' exec \| exit ' "$out/trace.txt"))"
"#
    .to_string()
}

/// RDMA devices of this host (`/sys/class/infiniband/*`).
fn host_rdma_devices() -> Vec<String> {
    std::fs::read_dir("/sys/class/infiniband")
        .map(|d| {
            d.filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// On a host with RDMA devices: trace it live. Without: the lab and its scenario.
pub fn run() -> anyhow::Result<ExitCode> {
    bootstrap::toolchain()?;
    run_build()?;
    let devices = host_rdma_devices();
    if !devices.is_empty() {
        eprintln!(
            "demo: this host has RDMA devices ({}): tracing it live",
            devices.join(", ")
        );
        let status = Command::new(cmd::repo_root().join("target/debug/rdmatrace"))
            .arg("trace")
            .status()?;
        return Ok(ExitCode::from(
            status.code().unwrap_or(1).clamp(0, 255) as u8
        ));
    }
    eprintln!("demo: no RDMA device on this host: booting the Soft-RoCE lab instead");
    bootstrap::lab()?;
    let status = lab::run(Some(&run_demo_script()))?;
    Ok(ExitCode::from(status.clamp(0, 255) as u8))
}

fn run_build() -> anyhow::Result<()> {
    cmd::run(
        Command::new("cargo")
            .current_dir(cmd::repo_root())
            .env("PATH", cmd::path_with_cargo_bin())
            .args(["build", "-p", "rdmatrace"]),
    )
}
