//! Relaying a lab VM's output line by line (qemu reopens fds 1 and 2 separately: both are piped
//! and relayed, never shared in one file), with an optional host-name prefix.

use std::{
    io::{BufRead, BufReader, Write},
    process::Child,
    sync::mpsc,
    thread,
    time::Instant,
};

/// Relays `child`'s stdout and stderr until both close, each line prefixed with `prefix`;
/// announces when the guest said it was set up. Returns the last non-empty line.
pub fn relay(child: &mut Child, prefix: &str, started: Instant) -> String {
    let (tx, rx) = mpsc::channel::<(bool, String)>();
    let mut relays = Vec::new();
    if let Some(out) = child.stdout.take() {
        let tx = tx.clone();
        relays.push(thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                let _ = tx.send((false, line));
            }
        }));
    }
    if let Some(err) = child.stderr.take() {
        let tx = tx.clone();
        relays.push(thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                let _ = tx.send((true, line));
            }
        }));
    }
    drop(tx);
    let mut announced = false;
    let mut last = String::new();
    for (is_err, line) in rx {
        if !line.trim().is_empty() {
            last.clone_from(&line);
        }
        if !announced && line.contains("rdmatrace-lab: ready") {
            announced = true;
            eprintln!(
                "{prefix}lab: booted and set up in {:.1} s",
                started.elapsed().as_secs_f64()
            );
        }
        if is_err {
            eprintln!("{prefix}{line}");
        } else {
            println!("{prefix}{line}");
            let _ = std::io::stdout().flush();
        }
    }
    for r in relays {
        let _ = r.join();
    }
    last
}
