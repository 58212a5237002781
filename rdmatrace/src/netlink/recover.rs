//! Undoing counter bindings from their journal (see [`super::journal`]): at the end of the run
//! that made them, after a panic of that run, and, for a run that never got to it (killed with
//! -9, power cut of the process, a signal before the live loop), at the start of the next run.

use std::{
    os::fd::AsRawFd as _,
    os::unix::fs::OpenOptionsExt as _,
    path::{Path, PathBuf},
};

use super::{
    journal::{self, AutoUndo, Change, Journal, PortChange, PortOutcome},
    nldev::Device,
    NetlinkError, RdmaNetlink,
};

/// What undoing a journal came to: per port, or a problem (then the journal is kept).
#[derive(Debug, Default)]
pub struct UndoReport {
    pub outcomes: Vec<(PortChange, PortOutcome)>,
    pub problems: Vec<String>,
}

/// Undoes every change of a journal, port by port, as far as the kernel still shows it.
pub fn undo(nl: &mut RdmaNetlink, j: &Journal) -> UndoReport {
    let mut report = UndoReport::default();
    if j.is_empty() {
        return report;
    }
    let devices = match nl.devices() {
        Ok(d) => d,
        Err(e) => {
            report
                .problems
                .push(format!("cannot undo the counter binding: {e}"));
            return report;
        }
    };
    for pc in &j.ports {
        match undo_port(nl, &devices, pc) {
            Ok(o) => report.outcomes.push((pc.clone(), o)),
            Err(e) => report.problems.push(format!(
                "cannot undo the counter binding on {} port {}: {e}",
                pc.dev, pc.port
            )),
        }
    }
    report
}

fn undo_port(
    nl: &mut RdmaNetlink,
    devices: &[Device],
    pc: &PortChange,
) -> Result<PortOutcome, NetlinkError> {
    // A device removed (and maybe re-created: a new index) took its counters with it.
    let Some(dev) = devices
        .iter()
        .find(|d| d.index == pc.dev_index && d.name == pc.dev)
    else {
        return Ok(PortOutcome::DeviceGone);
    };
    match &pc.change {
        Change::Auto { mask } => match journal::auto_undo(*mask, nl.counter_mode(dev, pc.port)?) {
            AutoUndo::TurnOff => {
                nl.set_auto_mode(dev, pc.port, 0)?;
                // The counters auto mode bound stay (the port is now in manual mode) until
                // unbound; the last one unbound puts the port back to no mode at all.
                let counters = nl.qp_counters(dev)?;
                let unbound =
                    unbind_all(nl, dev, pc.port, &journal::auto_unbinds(pc.port, &counters))?;
                Ok(PortOutcome::AutoOff { unbound })
            }
            AutoUndo::AlreadyOff => Ok(PortOutcome::AlreadyOff),
            AutoUndo::ChangedSince { mode, mask } => Ok(PortOutcome::ChangedSince { mode, mask }),
        },
        Change::Manual { bound } => {
            if bound.is_empty() {
                return Ok(PortOutcome::ManualUnbound { unbound: 0 });
            }
            let counters = nl.qp_counters(dev)?;
            let unbound = unbind_all(
                nl,
                dev,
                pc.port,
                &journal::manual_unbinds(pc.port, bound, &counters),
            )?;
            Ok(PortOutcome::ManualUnbound { unbound })
        }
    }
}

/// Unbinds `(counter, QPN)` pairs; a QP destroyed meanwhile (ENOENT) took its binding with it.
fn unbind_all(
    nl: &mut RdmaNetlink,
    dev: &Device,
    port: u32,
    pairs: &[(u32, u32)],
) -> Result<usize, NetlinkError> {
    let mut n = 0;
    for &(id, qpn) in pairs {
        match nl.unbind(dev, port, id, qpn) {
            Ok(()) => n += 1,
            Err(e) if e.errno() == Some(libc::ENOENT) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// An exclusive `flock` on `DIR/lock`, so two runs starting together do not both undo the same
/// journal. Released when dropped.
struct DirLock {
    _file: std::fs::File,
}

impl DirLock {
    fn take(dir: &Path) -> std::io::Result<DirLock> {
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(dir.join("lock"))?;
        // SAFETY: flock on an fd we own and keep open for the lock's lifetime.
        let rc = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) };
        if rc != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(DirLock { _file: f })
    }
}

/// Undoes the journals in `dir` whose owner is gone; returns the lines to say (one per port,
/// and problems). Journals of a live owner (another rdmatrace running) are left alone.
pub fn recover_dead_runs(nl: &mut RdmaNetlink, dir: &Path) -> Vec<String> {
    let mut lines = Vec::new();
    let look = || {
        journal::list(dir)
            .map_err(|e| format!("cannot look for counter bindings left by killed runs: {e}"))
    };
    match look() {
        Ok(paths) if paths.is_empty() => return lines,
        Ok(_) => {}
        Err(e) => return vec![e],
    }
    let _lock = match DirLock::take(dir) {
        Ok(l) => l,
        Err(e) => {
            return vec![format!(
                "cannot lock {} to undo counter bindings left by killed runs: {e}",
                dir.display()
            )]
        }
    };
    // Listed again under the lock: a run that started with us may have undone some already.
    let paths = match look() {
        Ok(p) => p,
        Err(e) => return vec![e],
    };
    let boot = journal::boot_id();
    for path in paths {
        let j = match journal::read(&path) {
            Ok(j) => j,
            Err(journal::JournalError::Read { source, .. })
                if source.kind() == std::io::ErrorKind::NotFound =>
            {
                continue
            }
            Err(e) => {
                lines.push(format!("{e}: left in place"));
                continue;
            }
        };
        let pid = j.owner.pid;
        if journal::owner_alive(&j.owner, &boot, journal::stat_of(pid).as_deref()) {
            continue;
        }
        let report = undo(nl, &j);
        for (pc, outcome) in &report.outcomes {
            lines.push(journal::recovery_line(pid, pc, outcome));
        }
        if report.problems.is_empty() {
            if let Err(e) = journal::remove(&path) {
                lines.push(e.to_string());
            }
        } else {
            for p in report.problems {
                lines.push(format!(
                    "{p} (left by a killed run, pid {pid}; {} kept for the next run)",
                    path.display()
                ));
            }
        }
    }
    lines
}

/// After a panic (the build aborts on panic: no destructor runs), undo what this process's
/// journal names. Installed once, by the first binder.
pub fn undo_on_panic(dir: PathBuf) {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(move || {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            previous(info);
            undo_own(&dir);
        }));
    });
}

fn undo_own(dir: &Path) {
    let Ok(owner) = journal::this_process() else {
        return;
    };
    let path = dir.join(journal::file_name(&owner));
    let Ok(j) = journal::read(&path) else {
        // No journal: nothing was changed, or it was undone already.
        return;
    };
    let mut nl = match RdmaNetlink::open() {
        Ok(nl) => nl,
        Err(e) => {
            eprintln!(
                "rdmatrace: cannot undo the counter binding after the panic: {e}; the next run \
                 will ({} is kept)",
                path.display()
            );
            return;
        }
    };
    let report = undo(&mut nl, &j);
    if report.problems.is_empty() {
        let _ = journal::remove(&path);
        eprintln!("rdmatrace: counter binding undone after the panic");
    } else {
        for p in report.problems {
            eprintln!(
                "rdmatrace: {p}; the next run will retry ({} is kept)",
                path.display()
            );
        }
    }
}
