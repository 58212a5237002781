//! The undo journal of counter binding: what a run changed on the host, written under
//! `/run/rdmatrace` *before* each change, so that a run killed with -9 (or dying any other way
//! that skips its undo) leaves enough behind for the next run to undo it.
//!
//! One file per run, `bindings-PID-START.json` (0600, in a 0700 directory): the owner (pid,
//! start time from `/proc/PID/stat`, boot id, so a recycled pid is not taken for a live owner)
//! and each change. It is removed after a complete undo. A file whose owner is gone is undone by
//! the next run (see [`super::recover`]); one whose owner lives is left alone.
//!
//! This file is pure except for the few functions that touch the file system or `/proc`; the
//! decisions (who owns a journal, what to undo given what the kernel shows now) are plain
//! functions with host tests.

use std::{
    io::Write as _,
    os::unix::fs::{DirBuilderExt as _, MetadataExt as _, OpenOptionsExt as _},
    path::{Path, PathBuf},
};

use serde::{Deserialize, Serialize};

use super::nldev::{self, QpCounter};

/// Where journals live (a tmpfs: gone at reboot, as are the bindings).
pub const DIR: &str = "/run/rdmatrace";
const VERSION: u32 = 1;

#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    #[error("cannot create {path}: {source}")]
    CreateDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} is not a directory owned by us with mode 0700 (mode {mode:o}, uid {uid}): not trusted")]
    UntrustedDir { path: PathBuf, mode: u32, uid: u32 },
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot parse {path}: {source}")]
    Parse {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error("{path}: journal version {found}, this rdmatrace reads version {VERSION}")]
    Version { path: PathBuf, found: u32 },
    #[error("cannot remove {path}: {source}")]
    Remove {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot tell who we are from /proc/self/stat")]
    SelfStat,
}

/// The process that made the changes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Owner {
    pub pid: u32,
    /// Field 22 of `/proc/PID/stat` (clock ticks after boot).
    pub start_time: u64,
    /// `/proc/sys/kernel/random/boot_id`.
    pub boot_id: String,
}

/// What was changed on one port.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PortChange {
    pub dev: String,
    pub dev_index: u32,
    pub port: u32,
    /// The port's counter mode and auto mask before the change (`rdma_nl_counter_mode`).
    pub prev_mode: u32,
    pub prev_mask: u32,
    pub change: Change,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Change {
    /// Auto mode set with this mask.
    Auto { mask: u32 },
    /// QPs bound one by one to counters of their own.
    Manual { bound: Vec<Bound> },
}

/// A QP bound by us in manual mode.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Bound {
    pub qpn: u32,
    /// The counter; `None` while the bind request is under way (its outcome unknown).
    pub counter: Option<u32>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Journal {
    pub version: u32,
    pub owner: Owner,
    pub ports: Vec<PortChange>,
}

impl Journal {
    pub fn new(owner: Owner) -> Journal {
        Journal {
            version: VERSION,
            owner,
            ports: Vec::new(),
        }
    }

    /// Whether the journal names any change (an empty one needs no file).
    pub fn is_empty(&self) -> bool {
        self.ports.iter().all(|p| match &p.change {
            Change::Auto { .. } => false,
            Change::Manual { bound } => bound.is_empty(),
        })
    }

    /// Records a manual binding of a port (its entry created on first use).
    pub fn push_bound(&mut self, dev: &str, dev_index: u32, port: u32, b: Bound) {
        for p in &mut self.ports {
            if let (true, Change::Manual { bound }) =
                (p.dev_index == dev_index && p.port == port, &mut p.change)
            {
                bound.push(b);
                return;
            }
        }
        self.ports.push(PortChange {
            dev: dev.to_string(),
            dev_index,
            port,
            prev_mode: nldev::COUNTER_MODE_NONE,
            prev_mask: 0,
            change: Change::Manual { bound: vec![b] },
        });
    }

    /// The outcome of a bind request: its counter, or `None` (it failed: forget it).
    pub fn settle_bound(&mut self, dev_index: u32, port: u32, qpn: u32, counter: Option<u32>) {
        for p in &mut self.ports {
            if let (true, Change::Manual { bound }) =
                (p.dev_index == dev_index && p.port == port, &mut p.change)
            {
                match counter {
                    Some(id) => {
                        for b in bound.iter_mut().filter(|b| b.qpn == qpn) {
                            b.counter = Some(id);
                        }
                    }
                    None => bound.retain(|b| b.qpn != qpn),
                }
            }
        }
    }

    /// Whether a QP of a port is bound (or being bound) by us.
    pub fn has_bound(&self, dev_index: u32, port: u32, qpn: u32) -> bool {
        self.ports.iter().any(|p| {
            p.dev_index == dev_index
                && p.port == port
                && matches!(&p.change, Change::Manual { bound } if bound.iter().any(|b| b.qpn == qpn))
        })
    }
}

pub fn to_json(j: &Journal) -> String {
    // A struct of strings and integers always serializes.
    serde_json::to_string_pretty(j).unwrap_or_default()
}

pub fn from_json(path: &Path, text: &str) -> Result<Journal, JournalError> {
    // Read the version first, so a newer layout is named as such rather than as garbage.
    #[derive(Deserialize)]
    struct Versioned {
        version: u32,
    }
    let v: Versioned = serde_json::from_str(text).map_err(|source| JournalError::Parse {
        path: path.to_path_buf(),
        source,
    })?;
    if v.version != VERSION {
        return Err(JournalError::Version {
            path: path.to_path_buf(),
            found: v.version,
        });
    }
    serde_json::from_str(text).map_err(|source| JournalError::Parse {
        path: path.to_path_buf(),
        source,
    })
}

/// `bindings-PID-START.json`.
pub fn file_name(owner: &Owner) -> String {
    format!("bindings-{}-{}.json", owner.pid, owner.start_time)
}

/// Whether a directory entry is a journal (not a temporary file of one being written).
pub fn is_journal_name(name: &str) -> bool {
    name.strip_prefix("bindings-")
        .and_then(|r| r.strip_suffix(".json"))
        .is_some_and(|r| {
            r.split_once('-').is_some_and(|(p, s)| {
                !p.is_empty()
                    && !s.is_empty()
                    && p.bytes().all(|b| b.is_ascii_digit())
                    && s.bytes().all(|b| b.is_ascii_digit())
            })
        })
}

/// `(state, start time)` of a `/proc/PID/stat` line. The command name (field 2) is in
/// parentheses and may itself hold spaces and parentheses: fields are counted after the last `)`.
pub fn parse_stat(stat: &str) -> Option<(char, u64)> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    // Fields 3.. follow; start time is field 22, i.e. the 20th after the `)`.
    let start = fields.nth(18)?.parse().ok()?;
    Some((state, start))
}

/// Whether the owner of a journal still runs: same boot, and a process with its pid and start
/// time that is not a zombie. `stat` is the current `/proc/PID/stat` of its pid, if any.
pub fn owner_alive(owner: &Owner, boot_id: &str, stat: Option<&str>) -> bool {
    if owner.boot_id != boot_id {
        return false;
    }
    match stat.and_then(parse_stat) {
        Some((state, start)) => start == owner.start_time && !matches!(state, 'Z' | 'X'),
        None => false,
    }
}

pub fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

pub fn stat_of(pid: u32) -> Option<String> {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()
}

/// This process, as a journal owner.
pub fn this_process() -> Result<Owner, JournalError> {
    let stat = std::fs::read_to_string("/proc/self/stat").map_err(|_| JournalError::SelfStat)?;
    let (_, start_time) = parse_stat(&stat).ok_or(JournalError::SelfStat)?;
    Ok(Owner {
        pid: std::process::id(),
        start_time,
        boot_id: boot_id(),
    })
}

/// Creates the journal directory (0700) or checks that an existing one is ours and private.
pub fn ensure_dir(dir: &Path) -> Result<(), JournalError> {
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(source) => {
            // /run/rdmatrace under a missing parent (a test directory): create the parents too.
            std::fs::DirBuilder::new()
                .mode(0o700)
                .recursive(true)
                .create(dir)
                .map_err(|_| JournalError::CreateDir {
                    path: dir.to_path_buf(),
                    source,
                })?;
        }
    }
    let meta = std::fs::symlink_metadata(dir).map_err(|source| JournalError::CreateDir {
        path: dir.to_path_buf(),
        source,
    })?;
    // SAFETY: geteuid has no preconditions and cannot fail.
    let euid = unsafe { libc::geteuid() };
    if !meta.is_dir() || meta.uid() != euid || meta.mode() & 0o077 != 0 {
        return Err(JournalError::UntrustedDir {
            path: dir.to_path_buf(),
            mode: meta.mode() & 0o7777,
            uid: meta.uid(),
        });
    }
    Ok(())
}

/// A journal and its file; [`JournalFile::save`] before every change.
#[derive(Debug)]
pub struct JournalFile {
    pub path: PathBuf,
    pub journal: Journal,
    /// Whether the file exists (written at the first change).
    pub written: bool,
}

impl JournalFile {
    /// The journal of this process in `dir` (created if needed; nothing is written yet).
    pub fn for_this_process(dir: &Path) -> Result<JournalFile, JournalError> {
        let owner = this_process()?;
        ensure_dir(dir)?;
        Ok(JournalFile {
            path: dir.join(file_name(&owner)),
            journal: Journal::new(owner),
            written: false,
        })
    }

    /// Writes the journal (a temporary file, 0600, renamed over the old one: a reader never
    /// sees half a journal).
    pub fn save(&mut self) -> Result<(), JournalError> {
        let tmp = self.path.with_extension("json.tmp");
        let write = |path: &Path| -> std::io::Result<()> {
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(path)?;
            f.write_all(to_json(&self.journal).as_bytes())?;
            f.sync_data()?;
            std::fs::rename(path, &self.path)
        };
        write(&tmp).map_err(|source| JournalError::Write {
            path: self.path.clone(),
            source,
        })?;
        self.written = true;
        Ok(())
    }

    /// Removes the file (after a complete undo).
    pub fn remove(&mut self) -> Result<(), JournalError> {
        if !self.written {
            return Ok(());
        }
        remove(&self.path)?;
        self.written = false;
        Ok(())
    }
}

pub fn remove(path: &Path) -> Result<(), JournalError> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(JournalError::Remove {
            path: path.to_path_buf(),
            source,
        }),
    }
}

pub fn read(path: &Path) -> Result<Journal, JournalError> {
    let text = std::fs::read_to_string(path).map_err(|source| JournalError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    from_json(path, &text)
}

/// The journals in `dir` (none when it does not exist), oldest name order.
pub fn list(dir: &Path) -> Result<Vec<PathBuf>, JournalError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => {
            return Err(JournalError::Read {
                path: dir.to_path_buf(),
                source,
            })
        }
    };
    let mut out: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .filter(|e| is_journal_name(&e.file_name().to_string_lossy()))
        .map(|e| e.path())
        .collect();
    out.sort();
    Ok(out)
}

/// What undoing an auto-mode change takes, given the port's mode now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AutoUndo {
    /// Still in auto mode with our mask: turn it off, then unbind what it bound.
    TurnOff,
    /// Auto mode is off already (the change never happened, or was undone).
    AlreadyOff,
    /// Someone changed the port since: leave it as it is.
    ChangedSince { mode: u32, mask: u32 },
}

pub fn auto_undo(our_mask: u32, now: (u32, u32)) -> AutoUndo {
    match now {
        (nldev::COUNTER_MODE_AUTO, mask) if mask == our_mask => AutoUndo::TurnOff,
        (nldev::COUNTER_MODE_NONE, _) => AutoUndo::AlreadyOff,
        (mode, mask) => AutoUndo::ChangedSince { mode, mask },
    }
}

/// `(counter, QPN)` pairs to unbind on `port` once our auto mode is off: every counter of the
/// port (auto mode bound them all: manual binding is refused in auto mode).
pub fn auto_unbinds(port: u32, counters: &[QpCounter]) -> Vec<(u32, u32)> {
    counters
        .iter()
        .filter(|c| c.port == port)
        .flat_map(|c| c.qpns.iter().map(move |&q| (c.id, q)))
        .collect()
}

/// `(counter, QPN)` pairs to unbind for our manual bindings that still exist: the recorded
/// counter still holds the recorded QP (a bind whose outcome was not recorded: any counter of
/// the port that holds the QP).
pub fn manual_unbinds(port: u32, bound: &[Bound], counters: &[QpCounter]) -> Vec<(u32, u32)> {
    let mut out = Vec::new();
    for b in bound {
        for c in counters.iter().filter(|c| c.port == port) {
            if c.qpns.contains(&b.qpn) && b.counter.is_none_or(|id| id == c.id) {
                out.push((c.id, b.qpn));
            }
        }
    }
    out
}

/// What undoing one port's change came to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PortOutcome {
    AutoOff { unbound: usize },
    AlreadyOff,
    ChangedSince { mode: u32, mask: u32 },
    ManualUnbound { unbound: usize },
    DeviceGone,
}

/// The line said for one port of a journal left by a dead run.
pub fn recovery_line(pid: u32, pc: &PortChange, outcome: &PortOutcome) -> String {
    let port = format!("{} port {}", pc.dev, pc.port);
    let counters = |n: usize| match n {
        1 => "1 counter".to_string(),
        n => format!("{n} counters"),
    };
    match outcome {
        PortOutcome::AutoOff { unbound: 0 } => format!(
            "undid a counter binding left by a killed run (pid {pid}): {port} auto mode off"
        ),
        PortOutcome::AutoOff { unbound } => format!(
            "undid a counter binding left by a killed run (pid {pid}): {port} auto mode off, \
             {} unbound",
            counters(*unbound)
        ),
        PortOutcome::ManualUnbound { unbound } => format!(
            "undid a counter binding left by a killed run (pid {pid}): {port} {} unbound",
            counters(*unbound)
        ),
        PortOutcome::AlreadyOff => format!(
            "a counter binding left by a killed run (pid {pid}) needed no undo: {port} auto mode \
             already off"
        ),
        PortOutcome::ChangedSince { mode, mask } => format!(
            "a counter binding left by a killed run (pid {pid}) was not undone: {port} was \
             reconfigured since (mode {mode}, mask {mask:#x}), left as it is"
        ),
        PortOutcome::DeviceGone => format!(
            "a counter binding left by a killed run (pid {pid}) needed no undo: {} is gone \
             (its counters went with it)",
            pc.dev
        ),
    }
}

#[cfg(test)]
mod tests;
