//! A name index of a raw BTF blob's structs, unions, functions and tracepoint typedefs
//! (`btf_trace_*`, what a tp_btf program attaches to), built in one pass over its
//! type section (the layout of the kernel's Documentation/bpf/btf.rst), so that a name is found
//! without scanning every type again. It holds hashes, not names (no allocation per type): a
//! lookup gives candidates, which the caller checks by name. Only the blob's own byte order is
//! read; anything else (another byte order, a kind this pass does not know) gives no index,
//! and lookups fall back to the BTF library's.

use std::hash::Hasher;

const MAGIC: u16 = 0xeb9f;
const KIND_STRUCT: u32 = 4;
const KIND_UNION: u32 = 5;
const KIND_TYPEDEF: u32 = 8;
const KIND_FUNC: u32 = 12;
/// The typedefs indexed: the kernel's tracepoints', one per tracepoint.
const TRACE_TYPEDEF: &[u8] = b"btf_trace_";

/// (hash of the name, type id) of every named struct, union and function, and of every
/// tracepoint typedef, sorted.
pub(super) struct Names(Vec<(u64, u32)>);

fn hash(name: &[u8]) -> u64 {
    let mut h = rustc_hash::FxHasher::default();
    h.write(name);
    h.finish()
}

impl Names {
    /// The ids of the types whose name may be `name` (its hash's): a superset, to be checked.
    pub(super) fn candidates(&self, name: &str) -> impl Iterator<Item = u32> + '_ {
        let h = hash(name.as_bytes());
        let from = self.0.partition_point(|&(x, _)| x < h);
        self.0[from..]
            .iter()
            .take_while(move |&&(x, _)| x == h)
            .map(|&(_, id)| id)
    }
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

/// Bytes after the 12-byte common part of a type of `kind` with `vlen` entries.
fn trailing(kind: u32, vlen: usize) -> Option<usize> {
    Some(match kind {
        2 | 7..=12 | 16 | 18 => 0, // ptr, fwd, typedef, volatile, const, restrict, func, float, type tag
        1 | 14 | 17 => 4,          // int, var, decl tag
        3 => 12,                   // array
        4 | 5 | 15 | 19 => 12 * vlen, // struct, union, datasec, enum64
        6 | 13 => 8 * vlen,        // enum, func proto
        _ => return None,
    })
}

/// The index of a standalone (not split) BTF blob: its first type has id 1.
pub(super) fn index(b: &[u8]) -> Option<Names> {
    if u16::from_ne_bytes(b.get(0..2)?.try_into().ok()?) != MAGIC {
        return None;
    }
    let hdr_len = u32_at(b, 4)? as usize;
    let (type_off, type_len) = (u32_at(b, 8)? as usize, u32_at(b, 12)? as usize);
    let (str_off, str_len) = (u32_at(b, 16)? as usize, u32_at(b, 20)? as usize);
    let types = b.get(hdr_len + type_off..hdr_len + type_off + type_len)?;
    let strings = b.get(hdr_len + str_off..hdr_len + str_off + str_len)?;
    let mut names = Vec::new();
    let (mut at, mut id) = (0usize, 1u32);
    while at < types.len() {
        let name_off = u32_at(types, at)? as usize;
        let info = u32_at(types, at + 4)?;
        let kind = (info >> 24) & 0x1f;
        let vlen = (info & 0xffff) as usize;
        if matches!(kind, KIND_STRUCT | KIND_UNION | KIND_FUNC | KIND_TYPEDEF) && name_off != 0 {
            let tail = strings.get(name_off..)?;
            let name = &tail[..tail.iter().position(|&c| c == 0)?];
            if kind != KIND_TYPEDEF || name.starts_with(TRACE_TYPEDEF) {
                names.push((hash(name), id));
            }
        }
        at += 12 + trailing(kind, vlen)?;
        id += 1;
    }
    names.sort_unstable();
    (at == types.len()).then_some(Names(names))
}
