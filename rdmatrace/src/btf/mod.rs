//! Struct offsets and argument positions from the running kernel's BTF: vmlinux plus the split
//! BTF of modules (`/sys/kernel/btf/<module>`). Nothing is hard-coded for a kernel version.

mod names;

use std::{
    cell::RefCell,
    collections::HashMap,
    path::{Path, PathBuf},
    sync::Arc,
};

use btf_rs::{Backend, Btf, Type};

/// Why an offset or a parameter could not be resolved.
#[derive(Debug, thiserror::Error)]
pub enum BtfError {
    /// The cause is part of the message (not a `source`), so `{:#}` does not say it twice.
    #[error("cannot read BTF {path}: {why}")]
    Read { path: PathBuf, why: btf_rs::Error },
    #[error("module {module} has no BTF here ({path} missing): is it loaded?")]
    NoModule { module: String, path: PathBuf },
    #[error("type `{0}` is not in this kernel's BTF")]
    NoType(String),
    #[error("`{ty}` has no member `{member}` in this kernel's BTF")]
    NoMember { ty: String, member: String },
    #[error("`{ty}.{member}` is a bitfield; it cannot be read by byte offset")]
    Bitfield { ty: String, member: String },
    #[error("function `{func}` has no parameter named any of {names:?}")]
    NoParam { func: String, names: Vec<String> },
    #[error("BTF lookup failed: {0}")]
    Lookup(#[from] btf_rs::Error),
}

/// One BTF (vmlinux, or a module's split BTF over it) with its name lookups remembered: the
/// vmlinux BTF is kept mapped rather than parsed whole (tens of MiB of tables), its structs,
/// unions and functions indexed by name in one pass ([`names`]), and a lookup's result kept.
pub struct Types {
    btf: Btf,
    /// vmlinux's name index (shared by the modules' BTF over it), when it could be built.
    index: Option<Arc<names::Names>>,
    ids: RefCell<HashMap<String, Vec<u32>>>,
}

impl Types {
    fn new(btf: Btf, index: Option<Arc<names::Names>>) -> Types {
        Types {
            btf,
            index,
            ids: RefCell::new(HashMap::new()),
        }
    }

    /// The ids of the types named `name`: the module's own first, then vmlinux's.
    fn ids_named(&self, name: &str) -> Vec<u32> {
        let Some(index) = &self.index else {
            return self.btf.resolve_ids_by_name(name).unwrap_or_default();
        };
        let mut ids = match self.btf.split() {
            Some(module) => module.resolve_ids_by_name(name).unwrap_or_default(),
            None => Vec::new(),
        };
        ids.extend(index.candidates(name).filter(|&id| {
            let named = |t: &dyn btf_rs::BtfType| self.btf.resolve_name(t).is_ok_and(|n| n == name);
            match self.btf.resolve_type_by_id(id) {
                Ok(Type::Struct(s) | Type::Union(s)) => named(&s),
                Ok(Type::Func(f)) => named(&f),
                Ok(Type::Typedef(t)) => named(&t),
                _ => false,
            }
        }));
        ids
    }

    /// The types named `name` (the index holds structs, unions and functions: what is looked
    /// up by name here).
    fn named(&self, name: &str) -> Vec<Type> {
        let mut ids = self.ids.borrow_mut();
        let found = ids
            .entry(name.to_string())
            .or_insert_with(|| self.ids_named(name));
        found
            .iter()
            .filter_map(|&id| self.btf.resolve_type_by_id(id).ok())
            .collect()
    }
}

impl std::ops::Deref for Types {
    type Target = Btf;
    fn deref(&self) -> &Btf {
        &self.btf
    }
}

/// vmlinux BTF plus lazily opened module BTF.
pub struct KernelBtf {
    dir: PathBuf,
    vmlinux: Types,
    modules: HashMap<String, Types>,
}

impl KernelBtf {
    /// Opens `dir/vmlinux` (normally `/sys/kernel/btf`).
    pub fn open(dir: &Path) -> Result<KernelBtf, BtfError> {
        let path = dir.join("vmlinux");
        // Read whole first: parsing straight from the sysfs file costs a seek system call per
        // type (hundreds of thousands of them).
        let bytes = read(&path).map_err(|why| BtfError::Read {
            path: path.clone(),
            why,
        })?;
        let vmlinux = match mapped(&bytes) {
            Ok(btf) => Types::new(btf, names::index(&bytes).map(Arc::new)),
            // No memfd or no /proc: parsed whole instead (its own lookups are indexed).
            Err(_) => Types::new(
                Btf::from_bytes(&bytes).map_err(|why| BtfError::Read { path, why })?,
                None,
            ),
        };
        Ok(KernelBtf {
            dir: dir.to_path_buf(),
            vmlinux,
            modules: HashMap::new(),
        })
    }

    /// The BTF that describes `module`'s types: its split BTF when it is a loaded module, or
    /// vmlinux when the module is built in (recognised by `witness`, a struct it defines).
    pub fn scope(&mut self, module: &str, witness: &str) -> Result<&Types, BtfError> {
        if !self.modules.contains_key(module) {
            let path = self.dir.join(module);
            if !path.exists() {
                if find_struct(&self.vmlinux, witness).is_ok() {
                    return Ok(&self.vmlinux);
                }
                return Err(BtfError::NoModule {
                    module: module.to_string(),
                    path,
                });
            }
            let btf = read(&path)
                .and_then(|b| Btf::from_split_bytes(&b, &self.vmlinux))
                .map_err(|why| BtfError::Read { path, why })?;
            let index = self.vmlinux.index.clone();
            self.modules
                .insert(module.to_string(), Types::new(btf, index));
        }
        Ok(&self.modules[module])
    }

    /// Like [`KernelBtf::open`] with vmlinux parsed whole (btf-rs's default backend): what the
    /// mapped one is checked against.
    #[cfg(test)]
    fn open_parsed(dir: &Path) -> Result<KernelBtf, BtfError> {
        let path = dir.join("vmlinux");
        let vmlinux = read(&path)
            .and_then(|b| Btf::from_bytes(&b))
            .map_err(|why| BtfError::Read { path, why })?;
        Ok(KernelBtf {
            dir: dir.to_path_buf(),
            vmlinux: Types::new(vmlinux, None),
            modules: HashMap::new(),
        })
    }

    /// vmlinux's own BTF.
    pub fn vmlinux(&self) -> &Types {
        &self.vmlinux
    }
}

fn read(path: &Path) -> Result<Vec<u8>, btf_rs::Error> {
    Ok(std::fs::read(path)?)
}

/// `bytes` as BTF kept mapped (btf-rs's lazy backend, which needs a file it can map: the sysfs
/// file cannot be mapped on older kernels, an anonymous memory file can).
fn mapped(bytes: &[u8]) -> Result<Btf, btf_rs::Error> {
    use std::{io::Write, os::fd::FromRawFd};
    // SAFETY: the name is a NUL-terminated C string and the flags are valid; the result is
    // checked before use.
    let fd = unsafe { libc::memfd_create(c"rdmatrace-btf".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error().into());
    }
    // SAFETY: `fd` is a fresh descriptor nothing else owns; the File closes it.
    let mut file = unsafe { std::fs::File::from_raw_fd(fd) };
    file.write_all(bytes)?;
    // The mapping outlives the descriptors (the File's and the one btf-rs opens).
    Btf::from_file_with_backend(format!("/proc/self/fd/{fd}"), Backend::Mmap)
}

/// Follows typedefs and qualifiers to the type they name.
fn strip(btf: &Btf, mut ty: Type) -> Result<Type, BtfError> {
    loop {
        match &ty {
            Type::Typedef(_)
            | Type::Const(_)
            | Type::Volatile(_)
            | Type::Restrict(_)
            | Type::TypeTag(_) => {
                let next = btf.resolve_chained_type(
                    ty.as_btf_type()
                        .ok_or_else(|| BtfError::NoType("qualifier".into()))?,
                )?;
                ty = next;
            }
            _ => return Ok(ty),
        }
    }
}

/// Finds the struct or union named `name`, skipping forward declarations.
fn find_struct(btf: &Types, name: &str) -> Result<btf_rs::Struct, BtfError> {
    for ty in btf.named(name) {
        if let Type::Struct(s) | Type::Union(s) = ty {
            return Ok(s);
        }
    }
    Err(BtfError::NoType(format!("struct {name}")))
}

/// Byte offset of `member` inside `s`, looking through anonymous structs and unions.
fn member_in(
    btf: &Btf,
    s: &btf_rs::Struct,
    member: &str,
) -> Result<Option<(u32, Type, bool)>, BtfError> {
    for m in &s.members {
        let name = btf.resolve_name(m).unwrap_or_default();
        let ty = btf.resolve_chained_type(m)?;
        if name == member {
            return Ok(Some((
                m.bit_offset(),
                strip(btf, ty)?,
                m.bitfield_size().is_some_and(|b| b != 0),
            )));
        }
        if name.is_empty() {
            if let Type::Struct(inner) | Type::Union(inner) = strip(btf, ty)? {
                if let Some((off, ty, bf)) = member_in(btf, &inner, member)? {
                    return Ok(Some((m.bit_offset() + off, ty, bf)));
                }
            }
        }
    }
    Ok(None)
}

/// Byte offset of a dotted member path (`"ah_attr.grh.dgid"`) inside `struct ty`.
pub fn offset_of(btf: &Types, ty: &str, path: &str) -> Result<u32, BtfError> {
    let mut current = find_struct(btf, ty)?;
    let mut bits = 0u32;
    let mut parts = path.split('.').peekable();
    while let Some(part) = parts.next() {
        let (off, member_ty, bitfield) =
            member_in(btf, &current, part)?.ok_or_else(|| BtfError::NoMember {
                ty: ty.to_string(),
                member: path.to_string(),
            })?;
        if bitfield || off % 8 != 0 {
            return Err(BtfError::Bitfield {
                ty: ty.to_string(),
                member: path.to_string(),
            });
        }
        bits += off;
        if parts.peek().is_some() {
            match member_ty {
                Type::Struct(s) | Type::Union(s) => current = s,
                _ => {
                    return Err(BtfError::NoMember {
                        ty: ty.to_string(),
                        member: path.to_string(),
                    })
                }
            }
        }
    }
    Ok(bits / 8)
}

/// Size in bytes of `struct ty`.
pub fn struct_size(btf: &Types, ty: &str) -> Result<u32, BtfError> {
    Ok(find_struct(btf, ty)?.size() as u32)
}

/// Whether `struct ty`'s `member` is an inline array (e.g. `char name[64]`), not a pointer.
pub fn is_array(btf: &Types, ty: &str, member: &str) -> Result<bool, BtfError> {
    let s = find_struct(btf, ty)?;
    let (_, t, _) = member_in(btf, &s, member)?.ok_or_else(|| BtfError::NoMember {
        ty: ty.to_string(),
        member: member.to_string(),
    })?;
    Ok(matches!(t, Type::Array(_)))
}

/// The BTF id of function `func` among the module's own types of `btf` (ids that continue
/// vmlinux's, as the kernel numbers a module's BTF): what a tracing program attaches to.
pub fn module_func_id(btf: &Types, func: &str) -> Result<u32, BtfError> {
    let ids = match btf.split() {
        Some(module) => module.resolve_ids_by_name(func).unwrap_or_default(),
        None => Vec::new(),
    };
    ids.into_iter()
        .find(|&id| matches!(btf.resolve_type_by_id(id), Ok(Type::Func(_))))
        .ok_or_else(|| BtfError::NoType(func.to_string()))
}

/// The BTF id of the typedef `btf_trace_<tracepoint>` of `btf` (vmlinux): what a tp_btf
/// program on that tracepoint attaches to.
pub fn tracepoint_id(btf: &Types, tracepoint: &str) -> Result<u32, BtfError> {
    let name = format!("btf_trace_{tracepoint}");
    btf.ids_named(&name)
        .into_iter()
        .find(|&id| matches!(btf.resolve_type_by_id(id), Ok(Type::Typedef(_))))
        .ok_or(BtfError::NoType(name))
}

/// 0-based position of the first parameter of `func` whose name is one of `names`.
pub fn param_index(btf: &Types, func: &str, names: &[&str]) -> Result<u32, BtfError> {
    for ty in btf.named(func) {
        let Type::Func(f) = ty else { continue };
        let Type::FuncProto(proto) = btf.resolve_chained_type(&f)? else {
            continue;
        };
        for (i, p) in proto.parameters.iter().enumerate() {
            let name = btf.resolve_name(p).unwrap_or_default();
            if names.contains(&name.as_str()) {
                return Ok(i as u32);
            }
        }
    }
    Err(BtfError::NoParam {
        func: func.to_string(),
        names: names.iter().map(|s| s.to_string()).collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collect::{profile, AREAS};
    use rdmatrace_common::config::ProbeConfig;

    /// Every area resolved from this host's BTF: the config and each area's outcome.
    fn resolve_all(mut kbtf: KernelBtf) -> (ProbeConfig, Vec<String>) {
        let mut cfg = ProbeConfig::unresolved();
        let outcomes = AREAS
            .iter()
            .chain([&profile::AREA])
            .map(|a| match (a.resolve)(&mut kbtf, &mut cfg) {
                Ok(notes) => format!("{}: ok {notes:?}", a.name),
                Err(e) => format!("{}: {e}", a.name),
            })
            .collect();
        (cfg, outcomes)
    }

    #[test]
    fn the_mapped_vmlinux_btf_resolves_what_the_parsed_one_does() {
        let dir = Path::new("/sys/kernel/btf");
        assert!(
            dir.join("vmlinux").exists(),
            "this test reads the host's own BTF (CONFIG_DEBUG_INFO_BTF): /sys/kernel/btf/vmlinux"
        );
        let kbtf = KernelBtf::open(dir).expect("mapped BTF");
        let index = kbtf.vmlinux.index.clone().expect("vmlinux's name index");
        for name in ["task_struct", "sock", "tcp_sendmsg", "sk_buff"] {
            assert!(index.candidates(name).next().is_some(), "{name}");
            let mut ids = kbtf.vmlinux.ids_named(name);
            let mut all = kbtf.vmlinux.btf.resolve_ids_by_name(name).expect("lookup");
            // The library's lookup also finds other kinds of the name (typedefs, forwards).
            all.retain(|&id| {
                matches!(
                    kbtf.vmlinux.btf.resolve_type_by_id(id),
                    Ok(Type::Struct(_) | Type::Union(_) | Type::Func(_))
                )
            });
            ids.sort_unstable();
            all.sort_unstable();
            assert!(!ids.is_empty(), "{name}");
            assert_eq!(ids, all, "{name}");
        }
        // A tracepoint's typedef (for tp_btf), as the library finds it.
        let typedef = |&id: &u32| {
            matches!(
                kbtf.vmlinux.btf.resolve_type_by_id(id),
                Ok(Type::Typedef(_))
            )
        };
        for tp in ["sched_process_exec", "sock_send_length"] {
            let lib = kbtf
                .vmlinux
                .btf
                .resolve_ids_by_name(&format!("btf_trace_{tp}"))
                .unwrap_or_default()
                .into_iter()
                .find(typedef);
            assert_eq!(tracepoint_id(&kbtf.vmlinux, tp).ok(), lib, "{tp}");
        }
        assert!(tracepoint_id(&kbtf.vmlinux, "sched_process_exec").is_ok());
        let mapped = resolve_all(kbtf);
        let parsed = resolve_all(KernelBtf::open_parsed(dir).expect("parsed BTF"));
        assert_eq!(mapped, parsed);
        // Something was resolved at all (the process and TCP areas are in vmlinux).
        assert_ne!(mapped.0, ProbeConfig::unresolved(), "{:?}", mapped.1);
    }
}
