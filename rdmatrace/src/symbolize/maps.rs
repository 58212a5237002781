//! `/proc/PID/maps`: where each executable file of a process is mapped, to turn a stack
//! address into (file, file offset) while the process lives.

use std::path::PathBuf;

/// One executable file mapping.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mapping {
    pub start: u64,
    pub end: u64,
    /// File offset of `start`.
    pub offset: u64,
    /// The file, or a pseudo name such as `[vdso]`.
    pub path: PathBuf,
}

impl Mapping {
    pub fn contains(&self, addr: u64) -> bool {
        (self.start..self.end).contains(&addr)
    }

    /// Whether `path` is a real file (not `[vdso]`, `[heap]`, ...).
    pub fn is_file(&self) -> bool {
        self.path.is_absolute()
    }

    /// The file offset of `addr` (which must be inside the mapping).
    pub fn file_offset(&self, addr: u64) -> u64 {
        addr - self.start + self.offset
    }

    /// `[libibverbs.so.1]`: what an address in this mapping reads as when the file has no symbol
    /// for it.
    pub fn module_label(&self) -> String {
        let name = self
            .path
            .file_name()
            .map_or_else(|| self.path.to_string_lossy(), |n| n.to_string_lossy());
        let name = name.trim_start_matches('[').trim_end_matches(']');
        format!("[{name}]")
    }
}

/// The executable mappings in the text of a `/proc/PID/maps` file; malformed lines are skipped.
pub fn parse(text: &str) -> Vec<Mapping> {
    text.lines().filter_map(parse_line).collect()
}

fn parse_line(line: &str) -> Option<Mapping> {
    // start-end perms offset dev inode   path (the path may contain spaces)
    let mut fields = line.splitn(6, ' ');
    let range = fields.next()?;
    let perms = fields.next()?;
    let offset = fields.next()?;
    let _dev = fields.next()?;
    let _inode = fields.next()?;
    let path = fields.next().unwrap_or("").trim_start();
    if !perms.contains('x') || path.is_empty() {
        return None;
    }
    let (start, end) = range.split_once('-')?;
    let path = path.strip_suffix(" (deleted)").unwrap_or(path);
    Some(Mapping {
        start: u64::from_str_radix(start, 16).ok()?,
        end: u64::from_str_radix(end, 16).ok()?,
        offset: u64::from_str_radix(offset, 16).ok()?,
        path: PathBuf::from(path),
    })
}

/// The executable mappings of `pid` now; `None` when the process is gone (or not readable).
pub fn read(pid: u32) -> Option<Vec<Mapping>> {
    std::fs::read_to_string(format!("/proc/{pid}/maps"))
        .ok()
        .map(|t| parse(&t))
}
