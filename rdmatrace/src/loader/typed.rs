//! BTF-typed twins of the per-packet and per-call programs, used in their place where the
//! kernel takes them: fentry on the rxe functions (`rdmatrace-ebpf/src/probes/rxe_fentry.rs`,
//! in place of kprobes) and tp_btf on the socket byte tracepoints (`tcp_typed.rs`, in place of
//! raw tracepoints). A typed program loads the fields of its typed arguments directly, with no
//! read helper; it is loaded by hand (`btfprog`) after the attach pass, and the program it
//! replaces is then unloaded and stands by (`rdmatrace doctor` lists both). Any refusal leaves
//! the replaced programs counting, with a note.

use std::{
    collections::HashMap,
    ffi::CString,
    os::fd::{AsFd as _, BorrowedFd, OwnedFd},
};

use aya::Ebpf;
use aya_obj::generated::bpf_insn;
use rdmatrace_common::{
    config::{ProbeConfig, TYPED_RXE_CQ_POST, TYPED_RXE_PACKETS, TYPED_SOCK},
    limits::UNRESOLVED,
    patch,
};

use super::{
    btfprog::{self, attach_one, instructions, module_btf, set_offsets, Target},
    plink,
    resolve::Phases,
    AttachReport, ProbeState, ProbeStatus,
};
use crate::collect::{Hook, ProbeSpec};

/// The kernel programs, as named in the object (and the kernel: 15 characters at most).
pub const XMIT: &str = "rxe_xmit_f";
pub const RECV: &str = "rxe_recv_f";
pub const CQ_POST: &str = "rxe_cq_post_f";
pub const SEND: &str = "tcp_send_btf";
pub const RECV_SOCK: &str = "tcp_recv_btf";

/// The module whose functions the fentry programs attach to.
const MODULE: &str = "rdma_rxe";

/// The programs loaded and attached; dropping it detaches them.
pub struct TypedLinks {
    /// Each program (by name; one per target) and its link.
    programs: Vec<(&'static str, OwnedFd, OwnedFd)>,
}

impl TypedLinks {
    /// Each loaded program, by name (a name once per function it is attached to).
    pub fn programs(&self) -> impl Iterator<Item = (&'static str, BorrowedFd<'_>)> {
        self.programs.iter().map(|(n, p, _)| (*n, p.as_fd()))
    }
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
    if name == SEND || name == RECV_SOCK {
        let fields = [
            cfg.sk_protocol,
            cfg.sk_family,
            cfg.sk_daddr,
            cfg.sk_v6_daddr,
            cfg.sk_hash,
        ];
        if unresolved(&fields) {
            return Err("a socket field is unresolved".into());
        }
        return Ok(vec![
            (patch::SK_PROTOCOL, cfg.sk_protocol),
            (patch::SK_FAMILY, cfg.sk_family),
            (patch::SK_DADDR, cfg.sk_daddr),
            (patch::SK_V6_DADDR, cfg.sk_v6_daddr),
            (patch::SK_V6_DADDR_HI, cfg.sk_v6_daddr + 8),
            (patch::SK_HASH, cfg.sk_hash),
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

/// Programs that typed programs replace together, or not at all.
struct Switch {
    /// Its bit in `ProbeConfig::typed`.
    bit: u32,
    /// What the programs do, for the note when they are refused.
    what: &'static str,
    target: Target,
    /// Each typed program, the program it replaces and the indexes in `ProbeConfig::typed_ids`
    /// of the functions or tracepoints it is loaded for.
    programs: &'static [(&'static str, &'static str, &'static [usize])],
}

const SWITCHES: [Switch; 3] = [
    Switch {
        bit: TYPED_RXE_PACKETS,
        what: "rxe packets counted by kprobes (fentry refused",
        target: Target::Fentry,
        programs: &[(XMIT, "rxe_xmit", &[0]), (RECV, "rxe_recv", &[1, 2])],
    },
    Switch {
        bit: TYPED_RXE_CQ_POST,
        what: "rxe completions checked by a kprobe (fentry refused",
        target: Target::Fentry,
        programs: &[(CQ_POST, "rxe_cq_post", &[3])],
    },
    Switch {
        bit: TYPED_SOCK,
        what: "socket bytes counted by raw tracepoints (tp_btf refused",
        target: Target::TpBtf,
        programs: &[
            (SEND, "tcp_send_bytes", &[4]),
            (RECV_SOCK, "tcp_recv_bytes", &[5]),
        ],
    },
];

impl Switch {
    fn replaced(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.programs.iter().map(|(_, k, _)| *k)
    }

    fn hook(&self) -> Hook {
        match self.target {
            Target::Fentry => Hook::Fentry,
            Target::TpBtf => Hook::TpBtf,
        }
    }

    /// Loads and attaches each program of the switch for each of its targets; why not, when
    /// any part is refused (nothing of it stays attached then).
    fn attach(
        &self,
        progs: &mut HashMap<String, (Vec<bpf_insn>, CString)>,
        module: Option<&OwnedFd>,
        cfg: &ProbeConfig,
        phases: &mut Phases,
    ) -> Result<Vec<(&'static str, OwnedFd, OwnedFd)>, String> {
        let mut fds = Vec::new();
        for &(name, _, targets) in self.programs {
            let (insns, license) = progs
                .get_mut(name)
                .ok_or_else(|| format!("program {name} missing"))?;
            let values = offsets(cfg, name).map_err(|e| format!("{name}: {e}"))?;
            set_offsets(insns, &values).map_err(|e| format!("{name}: {e}"))?;
            let btf = match self.target {
                Target::Fentry => Some(module.ok_or("no module BTF")?),
                Target::TpBtf => None,
            };
            for &i in targets {
                let prog =
                    btfprog::load(name, (insns, license), self.target, btf, cfg.typed_ids[i])?;
                phases.mark("typed programs: verified");
                let link = attach_one(&prog).map_err(|e| format!("attaching {name}: {e}"))?;
                phases.mark("typed programs: attached");
                fds.push((name, prog, link));
            }
        }
        Ok(fds)
    }
}

/// The object (`object`, the embedded one) read again on a thread of its own, from the start
/// of the load, when the typed programs may be tried for any of the areas `areas` (see
/// `SWITCHES`) and `opts` allow them.
pub(super) fn read_object(
    opts: &super::LoadOptions,
    areas: &[&str],
    object: &'static [u8],
) -> Option<Reading> {
    let rxe = areas.iter().any(|a| ["rxe", "rxe_wc"].contains(a));
    let wanted = (rxe && opts.btf_dir.join(MODULE).exists()) || areas.contains(&"tcp");
    if !opts.typed {
        return Some(Reading::Off);
    }
    wanted
        .then(|| {
            std::thread::Builder::new()
                .name("rdmatrace-typed".into())
                .spawn(|| btfprog::parse(object))
                .ok()
                .map(Reading::Thread)
        })
        .flatten()
}

/// The object being read for the typed programs, or why not.
pub(super) enum Reading {
    Thread(std::thread::JoinHandle<Result<aya_obj::Object, String>>),
    /// `--no-typed-probes`.
    Off,
}

/// The typed programs in place of the programs they replace, where the kernel takes them (see
/// [`Switch`]; the replaced ones are unloaded and stand by, and the config's `typed` says
/// which). Otherwise those count, and a note says why.
pub(super) fn replace(
    reading: Option<Reading>,
    ebpf: &mut Ebpf,
    links: &mut plink::Links,
    report: &mut AttachReport,
    cfg: &mut ProbeConfig,
    phases: &mut Phases,
) -> Option<TypedLinks> {
    let obj = match reading? {
        Reading::Off => {
            report.notes.push(
                "typed probes off (--no-typed-probes): kprobes and raw tracepoints count".into(),
            );
            return None;
        }
        Reading::Thread(t) => t
            .join()
            .unwrap_or_else(|_| Err("the thread reading the object failed".into())),
    };
    let on = |p: &str| report.attached().any(|s| s.spec.program == p);
    let wanted: Vec<&Switch> = SWITCHES
        .iter()
        .filter(|s| {
            s.replaced().all(on)
                && s.programs
                    .iter()
                    .all(|(_, _, targets)| targets.iter().all(|&i| cfg.typed_ids[i] != UNRESOLVED))
        })
        .collect();
    if wanted.is_empty() {
        return None;
    }
    let names: Vec<&str> = wanted
        .iter()
        .flat_map(|s| s.programs.iter().map(|(n, _, _)| *n))
        .collect();
    let fentry = wanted.iter().any(|s| s.target == Target::Fentry);
    let prepared = obj.and_then(|obj| {
        let progs = instructions(obj, ebpf, &names)?;
        phases.mark("typed programs: maps bound (object read again beside the load)");
        // A module's BTF for the fentry programs only; its absence refuses only them.
        let module = fentry.then(|| module_btf(MODULE));
        phases.mark("typed programs: module BTF found");
        Ok((progs, module))
    });
    let (mut progs, module) = match prepared {
        Ok(p) => p,
        Err(why) => {
            for s in wanted {
                report.notes.push(format!("{}: {why})", s.what));
            }
            return None;
        }
    };
    let mut fds = Vec::new();
    let mut replaced: Vec<(&str, &str, Hook)> = Vec::new();
    for s in wanted {
        let module = match (&module, s.target) {
            (Some(Err(why)), Target::Fentry) => Err(why.clone()),
            (Some(Ok(fd)), _) => Ok(Some(fd)),
            _ => Ok(None),
        };
        match module.and_then(|m| s.attach(&mut progs, m, cfg, phases)) {
            Ok(f) => {
                fds.extend(f);
                cfg.typed |= s.bit;
                replaced.extend(s.programs.iter().map(|(n, k, _)| (*k, *n, s.hook())));
            }
            Err(why) => report.notes.push(format!("{}: {why})", s.what)),
        }
    }
    if fds.is_empty() {
        return None;
    }
    let old: Vec<&str> = replaced.iter().map(|(k, _, _)| *k).collect();
    // Unregistering a kprobe waits for the kernel's grace periods (a quarter of a second for
    // three in the TCG lab): the replaced programs' links are closed beside the start-up, and
    // until then they count nothing (`typed` in the config).
    let detached: Vec<_> = old.iter().flat_map(|p| links.take_program(p)).collect();
    let _ = std::thread::Builder::new()
        .name("rdmatrace-detach".into())
        .spawn(move || drop(detached));
    super::pass::unload_programs(ebpf, links, &old);
    let mut added = Vec::new();
    for status in report.probes.iter_mut() {
        let Some(&(_, program, hook)) = replaced.iter().find(|(k, _, _)| *k == status.spec.program)
        else {
            continue;
        };
        status.state = ProbeState::Standby(format!("{hook} {program} counts in its place"));
        added.push(ProbeStatus {
            spec: ProbeSpec {
                program,
                hook,
                ..status.spec
            },
            state: ProbeState::Attached,
            ..status.clone()
        });
    }
    report.probes.extend(added);
    Some(TypedLinks { programs: fds })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::loader::btfprog::{parse, BPF_LDX};

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
    fn every_load_of_the_typed_programs_at_a_placeholder_gets_its_offset() {
        let mut cfg = ProbeConfig::unresolved();
        (
            cfg.xmit_arg_qp,
            cfg.xmit_arg_skb,
            cfg.rcv_arg_qp,
            cfg.rcv_arg_skb,
        ) = (0, 2, 0, 1);
        (cfg.rxe_qp_ibqp, cfg.qp_qp_num, cfg.skb_len) = (0, 240, 112);
        (cfg.cq_post_arg_cqe, cfg.wc_status, cfg.uwc_status) = (1, 44, 44);
        (
            cfg.sk_protocol,
            cfg.sk_family,
            cfg.sk_daddr,
            cfg.sk_v6_daddr,
            cfg.sk_hash,
        ) = (516, 16, 0, 56, 8);
        for (name, wanted, at) in [
            (XMIT, &patch::PACKET[..], &[16, 112][..]),
            (RECV, &patch::PACKET, &[8, 112]),
            (CQ_POST, &patch::CQ_POST, &[8, 44]),
            (SEND, &patch::SOCK, &[516, 16, 0, 56, 64, 8]),
            (RECV_SOCK, &patch::SOCK, &[516, 16, 0, 56, 64, 8]),
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
            for &off in at {
                assert!(offs.contains(&off), "{name}: no load at {off}");
            }
        }
        // A program without the placeholders (a kprobe) is refused, as is an unresolved offset
        // or a status at two offsets.
        assert!(set_offsets(&mut code("rxe_xmit"), &offsets(&cfg, XMIT).unwrap()).is_err());
        assert!(set_offsets(&mut code("rxe_cq_post"), &offsets(&cfg, CQ_POST).unwrap()).is_err());
        assert!(set_offsets(&mut code("tcp_send_bytes"), &offsets(&cfg, SEND).unwrap()).is_err());
        cfg.skb_len = UNRESOLVED;
        assert!(offsets(&cfg, XMIT).is_err());
        cfg.uwc_status = 48;
        assert!(offsets(&cfg, CQ_POST).is_err());
        cfg.sk_v6_daddr = UNRESOLVED;
        assert!(offsets(&cfg, RECV_SOCK).is_err());
        assert!(set_offsets(&mut code(XMIT), &[(patch::SKB_LEN, 1 << 16)]).is_err());
    }
}
