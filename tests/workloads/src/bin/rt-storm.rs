//! An event storm for the ingest benchmark and the ring-buffer overflow test, for a fixed time,
//! with hooks rdmatrace traces on any kernel:
//!
//! - `fork` (default): workers fork children that exit at once; every child's exit fires
//!   `sched_process_exit` (one event per child).
//! - `tcp`: workers connect to a loopback listener and reset the connection (SO_LINGER 0, so no
//!   TIME_WAIT runs the ports out); every connection fires `inet_sock_set_state` several times.
//!
//! Usage: `rt-storm [--mode fork|tcp] [--secs S] [--workers N]` (10 s, one worker per CPU).
//! Output: `rt-storm: C children in S.SSS s (R/s)` or `rt-storm: C connections in ...`.

use std::{
    net::{SocketAddr, TcpListener, TcpStream},
    os::fd::AsRawFd as _,
    time::{Duration, Instant},
};

use anyhow::{bail, Context as _};

fn arg<T: std::str::FromStr>(args: &[String], name: &str, default: T) -> anyhow::Result<T> {
    match args.iter().position(|a| a == name) {
        Some(i) => args
            .get(i + 1)
            .and_then(|v| v.parse().ok())
            .with_context(|| format!("{name} needs a number")),
        None => Ok(default),
    }
}

/// Forks children until `until`; returns how many were reaped.
fn worker(until: Instant) -> anyhow::Result<u64> {
    let mut n = 0u64;
    while Instant::now() < until {
        // SAFETY: fork has no preconditions; the child only calls _exit, which is
        // async-signal-safe, so the parent's state (locks, allocator) is never touched there.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            // SAFETY: _exit ends the child without running any of the parent's handlers.
            unsafe { libc::_exit(0) };
        }
        if pid < 0 {
            bail!("fork: {}", std::io::Error::last_os_error());
        }
        let mut status = 0;
        // SAFETY: waits for the child just forked; `status` is a valid out pointer.
        if unsafe { libc::waitpid(pid, &mut status, 0) } != pid {
            bail!("waitpid: {}", std::io::Error::last_os_error());
        }
        n += 1;
    }
    Ok(n)
}

/// Connects to `to` and resets, until `until`; returns how many connections were made.
fn connector(to: SocketAddr, until: Instant) -> anyhow::Result<u64> {
    let mut n = 0u64;
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    while Instant::now() < until {
        let s = TcpStream::connect(to).context("connect to the loopback listener")?;
        // SAFETY: setsockopt on a socket we own, with a valid `linger` of the stated size.
        let r = unsafe {
            libc::setsockopt(
                s.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_LINGER,
                (&linger as *const libc::linger).cast(),
                std::mem::size_of::<libc::linger>() as libc::socklen_t,
            )
        };
        if r != 0 {
            bail!("SO_LINGER: {}", std::io::Error::last_os_error());
        }
        drop(s);
        n += 1;
    }
    Ok(n)
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let secs: f64 = arg(&args, "--secs", 10.0)?;
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let workers: usize = arg(&args, "--workers", cpus)?;
    let tcp = match arg(&args, "--mode", "fork".to_string())?.as_str() {
        "fork" => false,
        "tcp" => true,
        other => bail!("--mode {other}: expected fork or tcp"),
    };
    let started = Instant::now();
    let until = started + Duration::from_secs_f64(secs);
    let threads: Vec<_> = if tcp {
        let listener = TcpListener::bind("127.0.0.1:0").context("bind a loopback listener")?;
        let to = listener.local_addr()?;
        // Accepted connections are dropped at once; the thread ends with the process.
        std::thread::spawn(move || {
            for s in listener.incoming() {
                drop(s);
            }
        });
        (0..workers)
            .map(|_| std::thread::spawn(move || connector(to, until)))
            .collect()
    } else {
        (0..workers)
            .map(|_| std::thread::spawn(move || worker(until)))
            .collect()
    };
    let mut total = 0u64;
    for t in threads {
        match t.join() {
            Ok(r) => total += r?,
            Err(_) => bail!("a worker thread panicked"),
        }
    }
    let took = started.elapsed().as_secs_f64();
    println!(
        "rt-storm: {total} {} in {took:.3} s ({:.0}/s)",
        if tcp { "connections" } else { "children" },
        total as f64 / took
    );
    Ok(())
}
