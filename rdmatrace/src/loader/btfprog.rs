//! Loading BTF-typed programs (fentry, tp_btf) by hand: aya 0.14 loads a tracing program
//! only against vmlinux's BTF (it never passes the BTF object of a module, where the rxe
//! functions are), and it cannot set a load's offset in a program's instructions. The programs
//! come from the same object as the rest, their map references bound to the maps aya created
//! (aya-obj's own relocation, as aya does it), the placeholder offsets of their loads set
//! (`rdmatrace_common::patch`), then each is loaded for its BTF id (`BPF_PROG_LOAD`) and
//! attached (`BPF_RAW_TRACEPOINT_OPEN`). What they are and when they are used: `typed`.

use std::{
    collections::{HashMap, HashSet},
    ffi::CString,
    io,
    os::fd::{AsFd as _, AsRawFd as _, BorrowedFd, FromRawFd as _, OwnedFd, RawFd},
};

use aya::{
    maps::{Map, MapData},
    Ebpf,
};
use aya_obj::generated::{
    bpf_attach_type, bpf_attr, bpf_btf_info, bpf_cmd, bpf_insn, bpf_link_info, bpf_link_type,
    bpf_perf_event_type, bpf_prog_info, bpf_prog_type,
};

/// `BPF_CLASS(code) == BPF_LDX`.
pub(super) const BPF_LDX: u8 = 0x01;

fn sys_bpf(cmd: bpf_cmd, attr: &mut bpf_attr) -> io::Result<libc::c_long> {
    // SAFETY: attr is a valid, initialized bpf_attr of the size passed; the kernel reads (and
    // writes, for info and logs) only within it and the buffers it names, which outlive the
    // call.
    let r = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd as libc::c_long,
            attr as *mut bpf_attr,
            std::mem::size_of::<bpf_attr>(),
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(r)
}

fn sys_bpf_fd(cmd: bpf_cmd, attr: &mut bpf_attr) -> io::Result<OwnedFd> {
    let fd = sys_bpf(cmd, attr)?;
    // SAFETY: on success these commands return a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// The data of any aya map (every kind holds one).
fn map_data(m: &Map) -> &MapData {
    match m {
        Map::Array(d)
        | Map::ArrayOfMaps(d)
        | Map::BloomFilter(d)
        | Map::CgroupArray(d)
        | Map::CgroupStorage(d)
        | Map::CgrpStorage(d)
        | Map::CpuMap(d)
        | Map::DevMap(d)
        | Map::DevMapHash(d)
        | Map::HashMap(d)
        | Map::HashOfMaps(d)
        | Map::InodeStorage(d)
        | Map::LpmTrie(d)
        | Map::LruHashMap(d)
        | Map::PerCpuArray(d)
        | Map::PerCpuCgroupStorage(d)
        | Map::PerCpuHashMap(d)
        | Map::PerCpuLruHashMap(d)
        | Map::PerfEventArray(d)
        | Map::ProgramArray(d)
        | Map::Queue(d)
        | Map::ReusePortSockArray(d)
        | Map::RingBuf(d)
        | Map::SockHash(d)
        | Map::SockMap(d)
        | Map::SkStorage(d)
        | Map::Stack(d)
        | Map::StackTraceMap(d)
        | Map::Unsupported(d)
        | Map::XskMap(d) => d,
    }
}

/// The object read again (aya keeps its own copy to itself), for the typed programs: started on a
/// thread of its own at the start of the load when the rxe programs may go on fentry.
pub(super) fn parse(object: &[u8]) -> Result<aya_obj::Object, String> {
    aya_obj::Object::parse(object).map_err(|e| format!("object: {e}"))
}

/// The programs `names` of `obj`, their map references bound to `ebpf`'s maps: instructions
/// and license of each.
pub(super) fn instructions(
    mut obj: aya_obj::Object,
    ebpf: &Ebpf,
    names: &[&str],
) -> Result<HashMap<String, (Vec<bpf_insn>, CString)>, String> {
    let mut maps: Vec<(String, RawFd, aya_obj::Map)> = Vec::new();
    for (name, m) in &obj.maps {
        // A map aya did not create (none today) cannot be referenced by these programs: the
        // relocation below would say so.
        if let Some(created) = ebpf.map(name) {
            maps.push((
                name.clone(),
                map_data(created).fd().as_fd().as_raw_fd(),
                m.clone(),
            ));
        }
    }
    let text: HashSet<usize> = obj.functions.keys().map(|(s, _)| *s).collect();
    obj.relocate_maps(maps.iter().map(|(n, fd, m)| (n.as_str(), *fd, m)), &text)
        .map_err(|e| format!("binding maps: {e}"))?;
    obj.relocate_calls(&text)
        .map_err(|e| format!("linking calls: {e}"))?;
    names
        .iter()
        .map(|name| {
            let p = obj
                .programs
                .get(*name)
                .ok_or_else(|| format!("program {name} missing from the object"))?;
            let f = obj
                .functions
                .get(&p.function_key())
                .ok_or_else(|| format!("program {name} has no code"))?;
            Ok((
                name.to_string(),
                (f.instructions.clone(), p.license.clone()),
            ))
        })
        .collect()
}

/// Sets every load whose offset is a placeholder of `values` (placeholder, offset) to its
/// offset; an error when a placeholder has no load, or an offset does not fit a load's.
pub(super) fn set_offsets(insns: &mut [bpf_insn], values: &[(i16, u32)]) -> Result<(), String> {
    for &(placeholder, value) in values {
        let off = i16::try_from(value)
            .map_err(|_| format!("offset {value} of placeholder {placeholder:#x} too large"))?;
        let mut found = 0;
        for insn in insns.iter_mut() {
            if insn.code & 0x07 == BPF_LDX && insn.off == placeholder {
                insn.off = off;
                found += 1;
            }
        }
        if found == 0 {
            return Err(format!("no load at placeholder {placeholder:#x}"));
        }
    }
    Ok(())
}

/// A descriptor of the kernel's BTF object of module `module`.
pub(super) fn module_btf(module: &str) -> Result<OwnedFd, String> {
    let mut id = 0u32;
    loop {
        // SAFETY: bpf_attr is a plain C union of integers; all zero is its "unset" state.
        let mut attr: bpf_attr = unsafe { std::mem::zeroed() };
        attr.__bindgen_anon_6.__bindgen_anon_1.start_id = id;
        if let Err(e) = sys_bpf(bpf_cmd::BPF_BTF_GET_NEXT_ID, &mut attr) {
            return Err(if e.raw_os_error() == Some(libc::ENOENT) {
                format!("the kernel has no BTF object for module {module}")
            } else {
                format!("listing BTF objects: {e}")
            });
        }
        // SAFETY: the member BPF_BTF_GET_NEXT_ID just wrote (all of the union is initialized).
        id = unsafe { attr.__bindgen_anon_6.next_id };
        // SAFETY: as above.
        let mut attr: bpf_attr = unsafe { std::mem::zeroed() };
        attr.__bindgen_anon_6.__bindgen_anon_1.btf_id = id;
        // An object gone since it was listed is skipped.
        let Ok(fd) = sys_bpf_fd(bpf_cmd::BPF_BTF_GET_FD_BY_ID, &mut attr) else {
            continue;
        };
        let mut name = [0u8; 64];
        // SAFETY: a plain C struct of integers; all zero asks for nothing but the name.
        let mut info: bpf_btf_info = unsafe { std::mem::zeroed() };
        info.name = name.as_mut_ptr() as u64;
        info.name_len = name.len() as u32;
        // SAFETY: as above.
        let mut attr: bpf_attr = unsafe { std::mem::zeroed() };
        attr.info.bpf_fd = fd.as_raw_fd() as u32;
        attr.info.info_len = std::mem::size_of::<bpf_btf_info>() as u32;
        attr.info.info = &mut info as *mut bpf_btf_info as u64;
        if sys_bpf(bpf_cmd::BPF_OBJ_GET_INFO_BY_FD, &mut attr).is_err() {
            continue;
        }
        let len = name.iter().position(|&b| b == 0).unwrap_or(name.len());
        if info.kernel_btf != 0 && &name[..len] == module.as_bytes() {
            return Ok(fd);
        }
    }
}

/// Where a typed program attaches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Target {
    /// fentry on function `btf_id` of a module's BTF object.
    Fentry,
    /// tp_btf on the tracepoint whose typedef `btf_trace_*` is `btf_id` in vmlinux's BTF.
    TpBtf,
}

/// Loads `insns` as a tracing program of `target` on `btf_id`, of the BTF object `btf` (a
/// module's; `None`: vmlinux); the verifier's last lines when it refuses.
pub(super) fn load(
    name: &str,
    (insns, license): (&[bpf_insn], &CString),
    target: Target,
    btf: Option<&OwnedFd>,
    btf_id: u32,
) -> Result<OwnedFd, String> {
    let attempt = |log: &mut Vec<u8>| {
        // SAFETY: bpf_attr is a plain C union of integers; all zero is its "unset" state.
        let mut attr: bpf_attr = unsafe { std::mem::zeroed() };
        // SAFETY: writing the prog-load member of the zeroed union, the one BPF_PROG_LOAD reads.
        let a = unsafe { &mut attr.__bindgen_anon_3 };
        a.prog_type = bpf_prog_type::BPF_PROG_TYPE_TRACING as u32;
        a.expected_attach_type = match target {
            Target::Fentry => bpf_attach_type::BPF_TRACE_FENTRY,
            Target::TpBtf => bpf_attach_type::BPF_TRACE_RAW_TP,
        } as u32;
        a.insns = insns.as_ptr() as u64;
        a.insn_cnt = insns.len() as u32;
        a.license = license.as_ptr() as u64;
        a.attach_btf_id = btf_id;
        if let Some(btf) = btf {
            a.__bindgen_anon_1.attach_btf_obj_fd = btf.as_raw_fd() as u32;
        }
        for (d, s) in a.prog_name.iter_mut().zip(name.bytes().take(15)) {
            *d = s as libc::c_char;
        }
        if !log.is_empty() {
            a.log_level = 1;
            a.log_buf = log.as_mut_ptr() as u64;
            a.log_size = log.len() as u32;
        }
        sys_bpf_fd(bpf_cmd::BPF_PROG_LOAD, &mut attr)
    };
    attempt(&mut Vec::new()).or_else(|e| {
        let mut log = vec![0u8; 1 << 20];
        attempt(&mut log).map_err(|_| {
            let text = String::from_utf8_lossy(&log);
            let text = text.trim_end_matches('\0');
            let tail: Vec<&str> = text.lines().rev().take(3).collect();
            format!(
                "the verifier refused {name} ({e}): {}",
                tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
            )
        })
    })
}

/// Attaches the loaded typed program `prog` to its function or tracepoint.
pub(super) fn attach_one(prog: &OwnedFd) -> io::Result<OwnedFd> {
    // SAFETY: as in `load`.
    let mut attr: bpf_attr = unsafe { std::mem::zeroed() };
    attr.raw_tracepoint.prog_fd = prog.as_raw_fd() as u32;
    sys_bpf_fd(bpf_cmd::BPF_RAW_TRACEPOINT_OPEN, &mut attr)
}

/// How many times the kernel skipped program `prog` (`bpf_prog_info.recursion_misses`, which
/// kernels count for more kinds of programs as they get newer: fentry programs from Linux
/// 5.12). `None` when the kernel does not say (an older `bpf_prog_info`, or the call refused).
pub(super) fn recursion_misses(prog: BorrowedFd<'_>) -> Option<u64> {
    // SAFETY: bpf_prog_info is a plain C struct of integers; all zero is "nothing to fill".
    let mut info: bpf_prog_info = unsafe { std::mem::zeroed() };
    let known = obj_info(prog, &mut info)?;
    let end = std::mem::offset_of!(bpf_prog_info, recursion_misses) + std::mem::size_of::<u64>();
    (known >= end).then_some(info.recursion_misses)
}

/// `BPF_OBJ_GET_INFO_BY_FD` of `fd` into `info` (a kernel info struct, zeroed by the caller):
/// how many of its bytes the kernel knows and wrote.
fn obj_info<T>(fd: BorrowedFd<'_>, info: &mut T) -> Option<usize> {
    // SAFETY: as in `load`.
    let mut attr: bpf_attr = unsafe { std::mem::zeroed() };
    attr.info.bpf_fd = fd.as_raw_fd() as u32;
    attr.info.info_len = std::mem::size_of::<T>() as u32;
    attr.info.info = info as *mut T as u64;
    sys_bpf(bpf_cmd::BPF_OBJ_GET_INFO_BY_FD, &mut attr).ok()?;
    // SAFETY: the `info` member is the one set above and written back by the kernel.
    Some(unsafe { attr.info.info_len } as usize)
}

/// How many times the kprobe of perf link `link` was hit but not run (`bpf_link_info`'s
/// `perf_event.kprobe.missed`, Linux 6.7+: a kprobe hit while another kprobe's handler runs on
/// that CPU is dropped before any program). `None` for another kind of link, a perf event
/// descriptor (kernels before perf links) or an older kernel.
pub(super) fn kprobe_missed(link: BorrowedFd<'_>) -> Option<u64> {
    // SAFETY: bpf_link_info is a plain C struct of integers and unions of them; all zero asks
    // for no names.
    let mut info: bpf_link_info = unsafe { std::mem::zeroed() };
    obj_info(link, &mut info)?;
    if info.type_ != bpf_link_type::BPF_LINK_TYPE_PERF_EVENT as u32 {
        return None;
    }
    // SAFETY: a perf link's info is the `perf_event` member; its `kprobe` member for the two
    // kprobe types checked first.
    unsafe {
        let pe = info.__bindgen_anon_1.perf_event;
        let kprobe = [
            bpf_perf_event_type::BPF_PERF_EVENT_KPROBE as u32,
            bpf_perf_event_type::BPF_PERF_EVENT_KRETPROBE as u32,
        ];
        kprobe
            .contains(&pe.type_)
            .then_some(pe.__bindgen_anon_1.kprobe.missed)
    }
}
