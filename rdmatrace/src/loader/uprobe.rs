//! Where a uprobe goes: the shared library as installed on this host (standard directories and
//! those of `/etc/ld.so.conf`) and the file offset of a symbol's default version in it.
//! libibverbs exports old compat versions next to the default (`ibv_create_qp@IBVERBS_1.0` and
//! `ibv_create_qp@@IBVERBS_1.1`); programs built today call the default one, so that is where the
//! probe goes (a lookup by bare name could pick the compat one and never fire).

use std::path::{Path, PathBuf};

use aya::programs::UProbe;

use super::plink::{self, Pmu};

use object::{
    elf::{FileHeader64, PT_LOAD},
    read::elf::{FileHeader as _, ProgramHeader as _, Sym as _},
    Endianness,
};

#[derive(Debug, thiserror::Error)]
pub enum UprobeError {
    #[error("{lib} not found in {dirs}")]
    NoLibrary { lib: String, dirs: String },
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} is not a 64-bit ELF shared object: {source}")]
    Elf {
        path: PathBuf,
        #[source]
        source: object::Error,
    },
    #[error("{path} does not export {symbol}")]
    NoSymbol { path: PathBuf, symbol: String },
}

/// Directories searched for libraries, in order: the usual multiarch and plain ones, then the
/// ones `/etc/ld.so.conf` (and its includes) adds.
pub fn library_dirs() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = [
        "/lib/x86_64-linux-gnu",
        "/usr/lib/x86_64-linux-gnu",
        "/lib/aarch64-linux-gnu",
        "/usr/lib/aarch64-linux-gnu",
        "/lib64",
        "/usr/lib64",
        "/lib",
        "/usr/lib",
        "/usr/local/lib",
    ]
    .iter()
    .map(PathBuf::from)
    .collect();
    ld_so_conf(Path::new("/etc/ld.so.conf"), &mut dirs, 0);
    dirs
}

fn ld_so_conf(path: &Path, dirs: &mut Vec<PathBuf>, depth: u32) {
    let Ok(text) = std::fs::read_to_string(path) else {
        return;
    };
    for line in text
        .lines()
        .map(|l| l.split('#').next().unwrap_or("").trim())
    {
        if let Some(pattern) = line.strip_prefix("include ") {
            if depth < 4 {
                for conf in glob_conf(pattern.trim()) {
                    ld_so_conf(&conf, dirs, depth + 1);
                }
            }
        } else if line.starts_with('/') {
            let d = PathBuf::from(line);
            if !dirs.contains(&d) {
                dirs.push(d);
            }
        }
    }
}

/// `DIR/*.conf` (the only form ld.so.conf includes take in practice), sorted.
fn glob_conf(pattern: &str) -> Vec<PathBuf> {
    let p = Path::new(pattern);
    let (Some(dir), Some(name)) = (p.parent(), p.file_name().and_then(|n| n.to_str())) else {
        return Vec::new();
    };
    let suffix = name.trim_start_matches('*');
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|f| {
                    f.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.ends_with(suffix))
                })
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

/// The first `dir/lib` that exists.
pub fn find_library(lib: &str, dirs: &[PathBuf]) -> Result<PathBuf, UprobeError> {
    dirs.iter()
        .map(|d| d.join(lib))
        .find(|p| p.is_file())
        .ok_or_else(|| UprobeError::NoLibrary {
            lib: lib.to_string(),
            dirs: dirs
                .iter()
                .map(|d| d.display().to_string())
                .collect::<Vec<_>>()
                .join(":"),
        })
}

/// File offset of `symbol`'s code in the shared object at `path`: the default version when
/// the symbol is versioned, a defined function in any case.
pub fn symbol_offset(path: &Path, symbol: &str) -> Result<u64, UprobeError> {
    Symbols::read(path)?.offset(symbol)
}

/// The defined functions of one shared object with their file offsets, read once for all the
/// uprobes that go into it (each lookup would otherwise read and parse the file again).
#[derive(Debug)]
pub struct Symbols {
    path: PathBuf,
    /// name -> (offset, hidden: a compat version, used only when no default one exists).
    offsets: std::collections::HashMap<Vec<u8>, (u64, bool)>,
}

impl Symbols {
    pub fn read(path: &Path) -> Result<Symbols, UprobeError> {
        let data = std::fs::read(path).map_err(|source| UprobeError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let elf_err = |source| UprobeError::Elf {
            path: path.to_path_buf(),
            source,
        };
        let header = FileHeader64::<Endianness>::parse(&*data).map_err(elf_err)?;
        let endian = header.endian().map_err(elf_err)?;
        let sections = header.sections(endian, &*data).map_err(elf_err)?;
        let symbols = sections
            .symbols(endian, &*data, object::elf::SHT_DYNSYM)
            .map_err(elf_err)?;
        let versions = sections.versions(endian, &*data).map_err(elf_err)?;
        let segments = header.program_headers(endian, &*data).map_err(elf_err)?;
        let mut offsets = std::collections::HashMap::new();
        for (index, sym) in symbols.enumerate() {
            if sym.is_undefined(endian) || sym.st_type() != object::elf::STT_FUNC {
                continue;
            }
            let Ok(name) = symbols.symbol_name(endian, sym) else {
                continue;
            };
            let vaddr = sym.st_value(endian);
            let Some(offset) = segments.iter().find_map(|ph| {
                let start = ph.p_vaddr(endian);
                (ph.p_type(endian) == PT_LOAD
                    && (start..start + ph.p_filesz(endian)).contains(&vaddr))
                .then(|| vaddr - start + ph.p_offset(endian))
            }) else {
                continue;
            };
            let hidden = versions
                .as_ref()
                .is_some_and(|v| v.version_index(endian, index).is_hidden());
            // The first default version wins; a hidden one only holds the place until then.
            match offsets.entry(name.to_vec()) {
                std::collections::hash_map::Entry::Vacant(e) => {
                    e.insert((offset, hidden));
                }
                std::collections::hash_map::Entry::Occupied(mut e) if e.get().1 && !hidden => {
                    e.insert((offset, false));
                }
                std::collections::hash_map::Entry::Occupied(_) => {}
            }
        }
        Ok(Symbols {
            path: path.to_path_buf(),
            offsets,
        })
    }

    /// `symbol`'s file offset: the default version when versioned.
    pub fn offset(&self, symbol: &str) -> Result<u64, UprobeError> {
        self.offsets
            .get(symbol.as_bytes())
            .map(|(o, _)| *o)
            .ok_or_else(|| UprobeError::NoSymbol {
                path: self.path.clone(),
                symbol: symbol.to_string(),
            })
    }
}

/// Opens (arms) a uprobe at the entry of `symbol` of the shared object at `path` (every
/// process that maps that file), without its program (see [`plink`]).
pub(super) fn open(
    symbol: &str,
    path: &std::path::Path,
    libs: &mut super::resolve::LibSymbols,
) -> Result<std::os::fd::OwnedFd, String> {
    let symbols = libs
        .entry(path.to_path_buf())
        .or_insert_with(|| Symbols::read(path).map_err(|e| e.to_string()))
        .as_ref()
        .map_err(Clone::clone)?;
    let offset = symbols.offset(symbol).map_err(|e| e.to_string())?;
    use std::os::unix::ffi::OsStrExt as _;
    plink::open(Pmu::Uprobe, false, path.as_os_str().as_bytes(), offset).map_err(|e| {
        format!(
            "cannot attach to {}:{symbol}: perf_event_open failed: {e}",
            path.display()
        )
    })
}

/// Runs the uprobe program `prog` (named `name`; loaded already: `verify::load`) on the
/// uprobe `perf` opened at `symbol` of `path`, told which function by `cookie`.
pub(super) fn link(
    prog: &mut aya::programs::Program,
    name: &'static str,
    perf: std::os::fd::OwnedFd,
    (symbol, path): (&str, &std::path::Path),
    cookie: u64,
    links: &mut plink::Links,
) -> Result<(), String> {
    let p: &mut UProbe = prog.try_into().map_err(super::program_error)?;
    let fd = p.fd().map_err(super::program_error)?;
    let link = plink::link(std::os::fd::AsFd::as_fd(fd), perf, cookie)
        .map_err(|e| format!("cannot attach to {}:{symbol}: {e}", path.display()))?;
    links.links.push((name, link.into()));
    Ok(())
}

/// [`open`] then [`link`].
pub(super) fn attach(
    prog: &mut aya::programs::Program,
    name: &'static str,
    symbol: &str,
    path: &std::path::Path,
    cookie: u64,
    links: &mut plink::Links,
) -> Result<(), String> {
    let perf = open(symbol, path, &mut links.libs)?;
    link(prog, name, perf, (symbol, path), cookie, links)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// libibverbs, when this host has it (rdma-core's library is installed on the dev machines
    /// and in the lab): the default version of a compat-versioned symbol is chosen.
    #[test]
    #[ignore = "needs libibverbs: reads rdma-core's versioned symbols (run by cargo xtask test)"]
    fn verbs_default_version_of_a_versioned_symbol() {
        let lib = find_library("libibverbs.so.1", &library_dirs()).expect("libibverbs.so.1");
        let create_qp = symbol_offset(&lib, "ibv_create_qp").expect("ibv_create_qp");
        let iova2 = symbol_offset(&lib, "ibv_reg_mr_iova2").expect("ibv_reg_mr_iova2");
        assert_ne!(create_qp, iova2);
        // The compat version (IBVERBS_1.0) lives in the old code at lower addresses in
        // rdma-core builds; whatever the layout, the default must not be the hidden one: check
        // against the version table directly.
        let data = std::fs::read(&lib).expect("read");
        let header = FileHeader64::<Endianness>::parse(&*data).expect("elf");
        let endian = header.endian().expect("endian");
        let sections = header.sections(endian, &*data).expect("sections");
        let symbols = sections
            .symbols(endian, &*data, object::elf::SHT_DYNSYM)
            .expect("dynsym");
        let versions = sections.versions(endian, &*data).expect("versions");
        let mut hidden_vaddr = Vec::new();
        for (index, sym) in symbols.enumerate() {
            if symbols.symbol_name(endian, sym).ok() == Some(b"ibv_create_qp".as_slice())
                && versions
                    .as_ref()
                    .is_some_and(|v| v.version_index(endian, index).is_hidden())
            {
                hidden_vaddr.push(sym.st_value(endian));
            }
        }
        // Shared objects here map their text at file offset == vaddr; a hidden vaddr must not be
        // what we picked.
        assert!(
            !hidden_vaddr.contains(&create_qp),
            "{hidden_vaddr:x?} {create_qp:x}"
        );
        assert!(matches!(
            symbol_offset(&lib, "no_such_symbol_anywhere"),
            Err(UprobeError::NoSymbol { .. })
        ));
    }

    #[test]
    fn missing_library_names_the_directories() {
        let err =
            find_library("libnothing.so.9", &[PathBuf::from("/nonexistent")]).expect_err("missing");
        assert_eq!(err.to_string(), "libnothing.so.9 not found in /nonexistent");
    }
}
