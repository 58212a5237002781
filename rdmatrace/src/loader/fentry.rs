//! The rxe fentry programs (`rdmatrace-ebpf/src/probes/rxe_fentry.rs`), loaded and
//! attached here: aya 0.14 loads a tracing program only against vmlinux's BTF (it never passes
//! the BTF object of a module, where the rxe functions are). The programs come from the same
//! object, their map references bound to the maps aya created (aya-obj's own relocation, as
//! aya does it), the placeholder offsets of their loads set from the resolved config
//! (`rdmatrace_common::patch`), and each is loaded for its function in `rdma_rxe`'s BTF and
//! attached with `BPF_RAW_TRACEPOINT_OPEN`. Any refusal leaves the caller on the kprobes.

use std::{
    collections::{HashMap, HashSet},
    ffi::CString,
    io,
    os::fd::{AsFd as _, AsRawFd as _, FromRawFd as _, OwnedFd, RawFd},
};

use aya::{
    maps::{Map, MapData},
    Ebpf,
};
use aya_obj::generated::{
    bpf_attach_type, bpf_attr, bpf_btf_info, bpf_cmd, bpf_insn, bpf_prog_type,
};
use rdmatrace_common::{
    config::{ProbeConfig, FENTRY_CQ_POST, FENTRY_PACKETS},
    limits::UNRESOLVED,
    patch,
};

use super::{plink, resolve::Phases, AttachReport, ProbeState, ProbeStatus};
use crate::collect::{Hook, ProbeSpec};

/// The kernel programs, as named in the object (and the kernel: 15 characters at most).
pub const XMIT: &str = "rxe_xmit_f";
pub const RECV: &str = "rxe_recv_f";
pub const CQ_POST: &str = "rxe_cq_post_f";

/// The module whose functions they attach to.
const MODULE: &str = "rdma_rxe";

/// The programs loaded and attached; dropping it detaches them.
pub struct FentryLinks {
    _fds: Vec<OwnedFd>,
}

/// `BPF_CLASS(code) == BPF_LDX`.
const BPF_LDX: u8 = 0x01;

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

/// The object read again (aya keeps its own copy to itself), for [`attach`]: started on a
/// thread of its own at the start of the load when the rxe programs may go on fentry.
pub(super) fn parse(object: &[u8]) -> Result<aya_obj::Object, String> {
    aya_obj::Object::parse(object).map_err(|e| format!("object: {e}"))
}

/// The programs `names` of `obj`, their map references bound to `ebpf`'s maps: instructions
/// and license of each.
fn instructions(
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

/// The placeholders of program `name` and their offsets in this kernel; why not, when one is
/// unresolved.
fn offsets(cfg: &ProbeConfig, name: &str) -> Result<Vec<(i16, u32)>, String> {
    let unresolved = |v: &[u32]| v.contains(&UNRESOLVED);
    if name == CQ_POST {
        if unresolved(&[cfg.cq_post_arg_cqe, cfg.wc_status]) {
            return Err("the completion's status is unresolved".into());
        }
        if cfg.wc_status != cfg.uwc_status {
            return Err("the two completion layouts keep the status at different offsets".into());
        }
        return Ok(vec![
            (patch::ARG_CQE, cfg.cq_post_arg_cqe * 8),
            (patch::CQE_STATUS, cfg.wc_status),
        ]);
    }
    let arg_skb = if name == XMIT {
        cfg.xmit_arg_skb
    } else {
        cfg.rcv_arg_skb
    };
    if unresolved(&[arg_skb, cfg.skb_len]) {
        return Err("the packet's length is unresolved".into());
    }
    Ok(vec![
        (patch::ARG_SKB, arg_skb * 8),
        (patch::SKB_LEN, cfg.skb_len),
    ])
}

/// A descriptor of the kernel's BTF object of module `module`.
fn module_btf(module: &str) -> Result<OwnedFd, String> {
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

/// Loads `insns` as an fentry program on function `btf_id` of the BTF object `btf`; the
/// verifier's last lines when it refuses.
fn load(
    name: &str,
    insns: &[bpf_insn],
    license: &CString,
    btf: &OwnedFd,
    btf_id: u32,
) -> Result<OwnedFd, String> {
    let attempt = |log: &mut Vec<u8>| {
        // SAFETY: bpf_attr is a plain C union of integers; all zero is its "unset" state.
        let mut attr: bpf_attr = unsafe { std::mem::zeroed() };
        // SAFETY: writing the prog-load member of the zeroed union, the one BPF_PROG_LOAD reads.
        let a = unsafe { &mut attr.__bindgen_anon_3 };
        a.prog_type = bpf_prog_type::BPF_PROG_TYPE_TRACING as u32;
        a.expected_attach_type = bpf_attach_type::BPF_TRACE_FENTRY as u32;
        a.insns = insns.as_ptr() as u64;
        a.insn_cnt = insns.len() as u32;
        a.license = license.as_ptr() as u64;
        a.attach_btf_id = btf_id;
        a.__bindgen_anon_1.attach_btf_obj_fd = btf.as_raw_fd() as u32;
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

/// Attaches the loaded fentry program `prog` to its function.
fn attach_one(prog: &OwnedFd) -> io::Result<OwnedFd> {
    // SAFETY: as in `load`.
    let mut attr: bpf_attr = unsafe { std::mem::zeroed() };
    attr.raw_tracepoint.prog_fd = prog.as_raw_fd() as u32;
    sys_bpf_fd(bpf_cmd::BPF_RAW_TRACEPOINT_OPEN, &mut attr)
}

/// kprobes that fentry programs replace together, or not at all.
struct Switch {
    /// Its bit in `ProbeConfig::rxe_fentry`.
    bit: u32,
    /// What the programs do, for the note when they are refused.
    what: &'static str,
    /// Each fentry program, the kprobe it replaces and the indexes in
    /// `ProbeConfig::rxe_fentry_ids` of the functions it is loaded for.
    programs: &'static [(&'static str, &'static str, &'static [usize])],
}

const SWITCHES: [Switch; 2] = [
    Switch {
        bit: FENTRY_PACKETS,
        what: "rxe packets counted",
        programs: &[(XMIT, "rxe_xmit", &[0]), (RECV, "rxe_recv", &[1, 2])],
    },
    Switch {
        bit: FENTRY_CQ_POST,
        what: "rxe completions checked",
        programs: &[(CQ_POST, "rxe_cq_post", &[3])],
    },
];

impl Switch {
    fn kprobes(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.programs.iter().map(|(_, k, _)| *k)
    }

    /// Loads and attaches each program of the switch for each of its functions; why not, when
    /// any part is refused (nothing of it stays attached then).
    fn attach(
        &self,
        progs: &mut HashMap<String, (Vec<bpf_insn>, CString)>,
        btf: &OwnedFd,
        cfg: &ProbeConfig,
        phases: &mut Phases,
    ) -> Result<Vec<OwnedFd>, String> {
        let mut fds = Vec::new();
        for &(name, _, functions) in self.programs {
            let (insns, license) = progs
                .get_mut(name)
                .ok_or_else(|| format!("program {name} missing"))?;
            let values = offsets(cfg, name).map_err(|e| format!("{name}: {e}"))?;
            set_offsets(insns, &values).map_err(|e| format!("{name}: {e}"))?;
            for &i in functions {
                let prog = load(name, insns, license, btf, cfg.rxe_fentry_ids[i])?;
                phases.mark("rxe fentry: programs verified");
                let link = attach_one(&prog).map_err(|e| format!("attaching {name}: {e}"))?;
                phases.mark("rxe fentry: programs attached");
                fds.push(prog);
                fds.push(link);
            }
        }
        Ok(fds)
    }
}

/// The rxe fentry programs in place of their kprobes, where the kernel takes them (see
/// [`Switch`]; the kprobes are unloaded and stand by, and the config's `rxe_fentry` says
/// which). Otherwise the kprobes count, and a note says why.
pub(super) fn replace_kprobes(
    obj: Result<aya_obj::Object, String>,
    ebpf: &mut Ebpf,
    links: &mut plink::Links,
    report: &mut AttachReport,
    cfg: &mut ProbeConfig,
    phases: &mut Phases,
) -> Option<FentryLinks> {
    let on = |p: &str| report.attached().any(|s| s.spec.program == p);
    let wanted: Vec<&Switch> = SWITCHES
        .iter()
        .filter(|s| {
            s.kprobes().all(on)
                && s.programs.iter().all(|(_, _, functions)| {
                    functions
                        .iter()
                        .all(|&i| cfg.rxe_fentry_ids[i] != UNRESOLVED)
                })
        })
        .collect();
    if wanted.is_empty() {
        return None;
    }
    let names: Vec<&str> = wanted
        .iter()
        .flat_map(|s| s.programs.iter().map(|(n, _, _)| *n))
        .collect();
    let prepared = obj.and_then(|obj| {
        let progs = instructions(obj, ebpf, &names)?;
        phases.mark("rxe fentry: maps bound (object read again beside the load)");
        let btf = module_btf(MODULE)?;
        phases.mark("rxe fentry: module BTF found");
        Ok((progs, btf))
    });
    let (mut progs, btf) = match prepared {
        Ok(p) => p,
        Err(why) => {
            for s in wanted {
                report
                    .notes
                    .push(format!("{} by kprobes (fentry refused: {why})", s.what));
            }
            return None;
        }
    };
    let mut fds = Vec::new();
    let mut replaced: Vec<(&str, &str)> = Vec::new();
    for s in wanted {
        match s.attach(&mut progs, &btf, cfg, phases) {
            Ok(f) => {
                fds.extend(f);
                cfg.rxe_fentry |= s.bit;
                replaced.extend(s.programs.iter().map(|(n, k, _)| (*k, *n)));
            }
            Err(why) => report
                .notes
                .push(format!("{} by kprobes (fentry refused: {why})", s.what)),
        }
    }
    if fds.is_empty() {
        return None;
    }
    let kprobes: Vec<&str> = replaced.iter().map(|(k, _)| *k).collect();
    // Unregistering a kprobe waits for the kernel's grace periods (a quarter of a second for
    // three in the TCG lab): their links are closed beside the start-up, and until then the
    // kprobes count nothing (`rxe_fentry` in the config).
    let detached: Vec<_> = kprobes.iter().flat_map(|p| links.take_program(p)).collect();
    let _ = std::thread::Builder::new()
        .name("rdmatrace-detach".into())
        .spawn(move || drop(detached));
    super::pass::unload_programs(ebpf, links, &kprobes);
    let mut added = Vec::new();
    for status in report.probes.iter_mut() {
        let Some(&(_, program)) = replaced.iter().find(|(k, _)| *k == status.spec.program) else {
            continue;
        };
        status.state = ProbeState::Standby(format!("fentry {program} counts in its place"));
        added.push(ProbeStatus {
            spec: ProbeSpec {
                program,
                hook: Hook::Fentry,
                ..status.spec
            },
            state: ProbeState::Attached,
            ..status.clone()
        });
    }
    report.probes.extend(added);
    Some(FentryLinks { _fds: fds })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The unrelocated code of program `name` of the embedded object.
    fn code(name: &str) -> Vec<bpf_insn> {
        let obj = parse(super::super::PROBES_OBJ).expect("the object parses");
        let p = obj
            .programs
            .get(name)
            .expect("the program is in the object");
        obj.functions[&p.function_key()].instructions.clone()
    }

    fn placeholders(insns: &[bpf_insn]) -> Vec<i16> {
        let mut found: Vec<i16> = insns
            .iter()
            .filter(|i| i.code & 0x07 == BPF_LDX && patch::ALL.contains(&i.off))
            .map(|i| i.off)
            .collect();
        found.sort();
        found.dedup();
        found
    }

    #[test]
    fn every_load_of_the_fentry_programs_at_a_placeholder_gets_its_offset() {
        let mut cfg = ProbeConfig::unresolved();
        (
            cfg.xmit_arg_qp,
            cfg.xmit_arg_skb,
            cfg.rcv_arg_qp,
            cfg.rcv_arg_skb,
        ) = (0, 2, 0, 1);
        (cfg.rxe_qp_ibqp, cfg.qp_qp_num, cfg.skb_len) = (0, 240, 112);
        (cfg.cq_post_arg_cqe, cfg.wc_status, cfg.uwc_status) = (1, 44, 44);
        for (name, wanted, at) in [
            (XMIT, patch::PACKET, [16, 112]),
            (RECV, patch::PACKET, [8, 112]),
            (CQ_POST, patch::CQ_POST, [8, 44]),
        ] {
            let mut insns = code(name);
            // LLVM kept each placeholder as the offset of a load (not folded into an address).
            let mut wanted = wanted.to_vec();
            wanted.sort();
            assert_eq!(placeholders(&insns), wanted, "{name}");
            let values = offsets(&cfg, name).expect("all resolved");
            set_offsets(&mut insns, &values).expect("every placeholder found");
            assert!(
                placeholders(&insns).is_empty(),
                "{name}: a placeholder left"
            );
            let offs: Vec<i16> = insns
                .iter()
                .filter(|i| i.code & 0x07 == BPF_LDX)
                .map(|i| i.off)
                .collect();
            for off in at {
                assert!(offs.contains(&off), "{name}: no load at {off}");
            }
        }
        // A program without the placeholders (a kprobe) is refused, as is an unresolved offset
        // or a status at two offsets.
        assert!(set_offsets(&mut code("rxe_xmit"), &offsets(&cfg, XMIT).unwrap()).is_err());
        assert!(set_offsets(&mut code("rxe_cq_post"), &offsets(&cfg, CQ_POST).unwrap()).is_err());
        cfg.skb_len = UNRESOLVED;
        assert!(offsets(&cfg, XMIT).is_err());
        cfg.uwc_status = 48;
        assert!(offsets(&cfg, CQ_POST).is_err());
        assert!(set_offsets(&mut code(XMIT), &[(patch::SKB_LEN, 1 << 16)]).is_err());
    }
}
