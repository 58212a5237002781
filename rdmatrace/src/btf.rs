//! Struct offsets and argument positions from the running kernel's BTF: vmlinux plus the split
//! BTF of modules (`/sys/kernel/btf/<module>`). Nothing is hard-coded for a kernel version.

use std::{
    collections::HashMap,
    path::{Path, PathBuf},
};

use btf_rs::{Btf, Type};

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

/// vmlinux BTF plus lazily opened module BTF.
pub struct KernelBtf {
    dir: PathBuf,
    vmlinux: Btf,
    modules: HashMap<String, Btf>,
}

impl KernelBtf {
    /// Opens `dir/vmlinux` (normally `/sys/kernel/btf`).
    pub fn open(dir: &Path) -> Result<KernelBtf, BtfError> {
        let path = dir.join("vmlinux");
        // Read whole first: parsing straight from the sysfs file costs a seek system call per
        // type (hundreds of thousands of them).
        let vmlinux = read(&path)
            .and_then(|b| Btf::from_bytes(&b))
            .map_err(|why| BtfError::Read { path, why })?;
        Ok(KernelBtf {
            dir: dir.to_path_buf(),
            vmlinux,
            modules: HashMap::new(),
        })
    }

    /// The BTF that describes `module`'s types: its split BTF when it is a loaded module, or
    /// vmlinux when the module is built in (recognised by `witness`, a struct it defines).
    pub fn scope(&mut self, module: &str, witness: &str) -> Result<&Btf, BtfError> {
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
            self.modules.insert(module.to_string(), btf);
        }
        Ok(&self.modules[module])
    }

    /// vmlinux's own BTF.
    pub fn vmlinux(&self) -> &Btf {
        &self.vmlinux
    }
}

fn read(path: &Path) -> Result<Vec<u8>, btf_rs::Error> {
    Ok(std::fs::read(path)?)
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
fn find_struct(btf: &Btf, name: &str) -> Result<btf_rs::Struct, BtfError> {
    for ty in btf.resolve_types_by_name(name).unwrap_or_default() {
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
pub fn offset_of(btf: &Btf, ty: &str, path: &str) -> Result<u32, BtfError> {
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
pub fn struct_size(btf: &Btf, ty: &str) -> Result<u32, BtfError> {
    Ok(find_struct(btf, ty)?.size() as u32)
}

/// Whether `struct ty`'s `member` is an inline array (e.g. `char name[64]`), not a pointer.
pub fn is_array(btf: &Btf, ty: &str, member: &str) -> Result<bool, BtfError> {
    let s = find_struct(btf, ty)?;
    let (_, t, _) = member_in(btf, &s, member)?.ok_or_else(|| BtfError::NoMember {
        ty: ty.to_string(),
        member: member.to_string(),
    })?;
    Ok(matches!(t, Type::Array(_)))
}

/// 0-based position of the first parameter of `func` whose name is one of `names`.
pub fn param_index(btf: &Btf, func: &str, names: &[&str]) -> Result<u32, BtfError> {
    for ty in btf.resolve_types_by_name(func).unwrap_or_default() {
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
