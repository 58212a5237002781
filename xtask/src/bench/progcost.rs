//! Per-program cost in the lab: each eBPF program's run time per run, from the kernel's own
//! accounting (`kernel.bpf_stats_enabled=1`, read with bpftool by `xtask/lab/bpfstats.py` after
//! each perftest round), for rdmatrace's programs and bpftrace's equivalents on the same hooks,
//! and empty programs on the per-packet hooks (kprobe, and fentry on the rxe functions),
//! measured side by side with rdmatrace in one pass, as the floor. TCG inflates every figure alike;
//! the comparison is between programs on the same hook in the same boot.

use std::{collections::BTreeSet, fmt::Write as _};

use super::{lab::LabResults, median};

/// Hooks that fire per packet or per completion (the floor's hooks).
const PER_PACKET: &[&str] = &[
    "rxe_xmit_packet",
    "rxe_comp_queue_pkt",
    "rxe_resp_queue_pkt",
    "rxe_cq_post",
    "ib_uverbs_comp_handler",
    "retransmit_timer",
    "sock_send_length",
    "sock_recv_length",
];

/// The per-packet hooks that are tracepoints (their empty program is a tracepoint, not a
/// kprobe).
const TRACEPOINTS: [&str; 2] = ["sock_send_length", "sock_recv_length"];

/// (hook, median ns/run, median runs) of `tool`'s programs.
fn per_hook(lab: &LabResults, tool: &str) -> Vec<(String, f64, f64)> {
    let prefix = format!("{tool}:");
    lab.series()
        .into_iter()
        .filter(|(m, t)| m == "prog_ns" && t.starts_with(&prefix))
        .map(|(_, t)| {
            let ns = median(&lab.values("prog_ns", &t)).unwrap_or(f64::NAN);
            let runs = median(&lab.values("prog_runs", &t)).unwrap_or(f64::NAN);
            (t[prefix.len()..].to_string(), ns, runs)
        })
        .collect()
}

/// (hook, ns/run, runs) of `tool`'s programs in one round.
fn in_round(lab: &LabResults, tool: &str, round: u32) -> Vec<(String, f64, f64)> {
    let prefix = format!("{tool}:");
    lab.series()
        .into_iter()
        .filter(|(m, t)| m == "prog_ns" && t.starts_with(&prefix))
        .filter_map(|(_, t)| {
            let ns = lab.value("prog_ns", &t, round)?;
            let runs = lab.value("prog_runs", &t, round)?;
            Some((t[prefix.len()..].to_string(), ns, runs))
        })
        .collect()
}

/// The empty kprobe (tracepoint) on hook `h` in one round: the mean of the two loaded apart
/// (`floor`, `floor2`), or the one there is.
fn floor_in_round(lab: &LabResults, round: u32, h: &str) -> Option<(String, f64, f64)> {
    let a = find(&in_round(lab, "floor", round), h);
    let b = find(&in_round(lab, "floor2", round), h);
    match (a, b) {
        (Some(a), Some(b)) => Some((a.0, (a.1 + b.1) / 2.0, (a.2 + b.2) / 2.0)),
        (a, b) => a.or(b),
    }
}

/// The rounds with figures of `tool`.
fn rounds(lab: &LabResults, tool: &str) -> Vec<u32> {
    let prefix = format!("{tool}:");
    let mut rounds: Vec<u32> = lab
        .series()
        .into_iter()
        .filter(|(m, t)| m == "prog_ns" && t.starts_with(&prefix))
        .flat_map(|(m, t)| lab.rounds_of(&m, &t))
        .collect();
    rounds.sort_unstable();
    rounds.dedup();
    rounds
}

/// (hook, median ns/run, median runs) of the empty kprobes (tracepoints), each round's the
/// mean of the two.
fn floor_per_hook(lab: &LabResults) -> Vec<(String, f64, f64)> {
    let hooks: BTreeSet<String> = per_hook(lab, "floor")
        .into_iter()
        .chain(per_hook(lab, "floor2"))
        .map(|h| h.0)
        .collect();
    let passes: BTreeSet<u32> = rounds(lab, "floor")
        .into_iter()
        .chain(rounds(lab, "floor2"))
        .collect();
    hooks
        .into_iter()
        .filter_map(|h| {
            let v: Vec<_> = passes
                .iter()
                .filter_map(|r| floor_in_round(lab, *r, &h))
                .collect();
            let ns = median(&v.iter().map(|x| x.1).collect::<Vec<_>>())?;
            let runs = median(&v.iter().map(|x| x.2).collect::<Vec<_>>())?;
            Some((h, ns, runs))
        })
        .collect()
}

/// Runs a pass below which a program's time per run is mostly TCG translating it on first use.
const SETTLED_RUNS: f64 = 1000.0;

/// The widest gap between the two identical empty programs of one pass on one hook that both
/// ran at least [`SETTLED_RUNS`] times: (the slower over the faster, the hook).
fn placement_spread(lab: &LabResults) -> Option<(f64, String)> {
    let mut widest: Option<(f64, String)> = None;
    for r in rounds(lab, "floor") {
        let second = in_round(lab, "floor2", r);
        for (h, a, runs) in in_round(lab, "floor", r) {
            let Some(b) = find(&second, &h) else {
                continue;
            };
            if runs.min(b.2) < SETTLED_RUNS {
                continue;
            }
            let gap = a.max(b.1) / a.min(b.1);
            if gap.is_finite() && widest.as_ref().is_none_or(|w| gap > w.0) {
                widest = Some((gap, h));
            }
        }
    }
    widest
}

/// rdmatrace's program on hook `h` over each empty program (kprobe or tracepoint, fentry),
/// pass by pass of the side-by-side passes: the medians of those ratios.
fn floor_ratios(lab: &LabResults, h: &str) -> (Option<f64>, Option<f64>, usize) {
    let (mut vs_kprobe, mut vs_fentry) = (Vec::new(), Vec::new());
    for r in &rounds(lab, "side") {
        let Some(o) = find(&in_round(lab, "side", *r), h) else {
            continue;
        };
        if let Some(f) = floor_in_round(lab, *r, h) {
            vs_kprobe.push(o.1 / f.1);
        }
        if let Some(f) = find(&in_round(lab, "floor_fentry", *r), h) {
            vs_fentry.push(o.1 / f.1);
        }
    }
    let passes = vs_kprobe.len().max(vs_fentry.len());
    (median(&vs_kprobe), median(&vs_fentry), passes)
}

/// The figures of hook `h` in `v`. For `a+b` (one of rdmatrace's programs on several hooks:
/// the kernel counts a program's runs, not a link's), the other tool's programs on `a` and `b`
/// taken together: their runs summed, their time per run weighted by runs (all of them must be
/// there).
fn find(v: &[(String, f64, f64)], h: &str) -> Option<(String, f64, f64)> {
    if let Some(x) = v.iter().find(|x| x.0 == h) {
        return Some(x.clone());
    }
    if !h.contains('+') {
        return None;
    }
    let parts: Option<Vec<_>> = h.split('+').map(|p| v.iter().find(|x| x.0 == p)).collect();
    let parts = parts?;
    let runs: f64 = parts.iter().map(|x| x.2).sum();
    let ns = parts.iter().map(|x| x.1 * x.2).sum::<f64>() / runs;
    (runs > 0.0).then(|| (h.to_string(), ns, runs))
}

fn cell(v: Option<&(String, f64, f64)>) -> String {
    v.map_or_else(
        || "—".into(),
        |(_, ns, runs)| format!("{ns:.0} ({runs:.0})"),
    )
}

/// The kind of rdmatrace's program on hook `h` in that boot: `fentry` or `tp_btf` when every
/// function of `h` had one (`rdmatrace doctor`), else a kprobe or tracepoint.
fn kind_on<'a>(lab: &'a LabResults, h: &str) -> Option<&'a str> {
    let kinds: Vec<&str> = h
        .split('+')
        .map(|p| {
            lab.typed
                .iter()
                .find(|(_, t)| t == p)
                .map_or("", |(k, _)| k.as_str())
        })
        .collect();
    let first = *kinds.first()?;
    (!first.is_empty() && kinds.iter().all(|k| *k == first)).then_some(first)
}

/// The verdict of a per-packet hook from the ratios of rdmatrace's program to the empty
/// kprobe (or tracepoint: `plain` names which) and to the empty fentry program: held to the one
/// of its own kind (fentry beside fentry when measured; kprobe or tracepoint otherwise), the
/// other shown beside.
fn floor_verdict(
    vs_kprobe: Option<f64>,
    vs_fentry: Option<f64>,
    is_fentry: bool,
    plain: &str,
) -> String {
    let (own, own_name, other, other_name) = if is_fentry && vs_fentry.is_some() {
        (vs_fentry, "fentry", vs_kprobe, plain)
    } else {
        (vs_kprobe, plain, vs_fentry, "fentry")
    };
    let Some(r) = own else {
        return "—".into();
    };
    let also = other.map_or(String::new(), |x| {
        format!("; {x:.1}× of the empty {other_name}")
    });
    let mark = if r <= 2.0 { "yes" } else { "**no**" };
    format!("{mark} ({r:.1}× of the empty {own_name}{also})")
}

pub fn section(s: &mut String, lab: &LabResults) {
    let ours = per_hook(lab, "rdmatrace");
    let theirs = per_hook(lab, "bpftrace");
    let side = per_hook(lab, "side");
    let floor = floor_per_hook(lab);
    let floor_fentry = per_hook(lab, "floor_fentry");
    let _ = writeln!(s, "### Per-program cost (bpf_stats)\n");
    if ours.is_empty() {
        let _ = writeln!(
            s,
            "Not measured: the lab run recorded no per-program figures (bpftool missing, or \
             kernel.bpf_stats_enabled could not be set: the lab log says which).\n"
        );
        return;
    }
    let n = |pass: &str| lab.value("storm_sends", pass, 1);
    let sends = |pass: &str| {
        n(pass).map_or(String::new(), |n| {
            format!(" of {n} one-byte sends on loopback")
        })
    };
    let longer = match (n("churn"), n("side")) {
        (Some(c), Some(s)) if s > c => {
            " (longer than the churn's: each pass loads the programs anew, and their first runs \
             include TCG translating their code)"
        }
        _ => "",
    };
    let _ = writeln!(
        s,
        "Each program's run time per run (ns, median over rounds; runs per round in brackets) as \
         the kernel accounts it with `kernel.bpf_stats_enabled=1`, read with `bpftool` \
         (`xtask/lab/bpfstats.py`) before each tracer stops, after the round's perftest runs, \
         the control-path churn and a TCP storm{} (without the churn, control-path programs ran \
         a handful of times a round and their time per run was mostly TCG translating their code \
         on first use); a hook with an entry and a return program counts both; a program on \
         several hooks (`a+b`) is compared with the other programs on those hooks taken together \
         (runs summed, time per run weighted by runs).\n\n\
         The floor is measured side by side: extra passes of perftest \
         (`ib_write_bw`, `ib_send_lat`) and a TCP storm{}{longer}, each with rdmatrace and empty bpftrace programs on the per-packet hooks \
         attached at once, so that a program and the empty ones run on the same packets at \
         the same time: two empty kprobes (tracepoints on the socket hooks) from two bpftrace \
         processes, whose mean is the floor of a pass (under TCG a program's time per run \
         depends on where it was loaded: the two are identical programs loaded apart), and, on \
         the rxe functions, an empty fentry program (bpftrace's `kfunc:`; one, as bpftool names \
         no owner of a tracing program that would tell two bpftrace processes' apart). A per-packet hook is \
         held to the empty program of its own kind (rdmatrace's fentry programs to the empty \
         fentry program when there is one, the rest to the empty kprobe or tracepoint); the \
         ratio to the other empty program is given beside it. Targets: every rdmatrace \
         program at or below its bpftrace twin; per-packet hooks within 2× of the floor.\n",
        sends("churn"),
        sends("side"),
    );
    let on = |kind: &str| -> Vec<String> {
        lab.typed
            .iter()
            .filter(|(k, _)| k == kind)
            .map(|(_, t)| format!("`{t}`"))
            .collect()
    };
    let (fentry, tp_btf) = (on("fentry"), on("tp_btf"));
    let mut typed = Vec::new();
    if !fentry.is_empty() {
        typed.push(format!(
            "on {} fentry programs (bpftrace's twins there are kprobes)",
            fentry.join(", ")
        ));
    }
    if !tp_btf.is_empty() {
        typed.push(format!(
            "on {} tp_btf programs (bpftrace's twins and the empty programs there are tracepoints)",
            tp_btf.join(", ")
        ));
    }
    if !typed.is_empty() {
        let _ = writeln!(
            s,
            "rdmatrace's programs were, in this boot (`rdmatrace doctor`), {}.\n",
            typed.join("; ")
        );
    }
    if floor_fentry.is_empty() && !fentry.is_empty() {
        let _ = writeln!(
            s,
            "No empty fentry program ran in this boot (bpftrace could not attach one: the lab \
             log says why): the fentry programs are held to the empty kprobe.\n"
        );
    }
    let _ = writeln!(
        s,
        "| hook | rdmatrace ns/run | bpftrace ns/run | side by side: rdmatrace | empty kprobe / tracepoint | empty fentry | ≤ bpftrace | ≤ 2× floor |\n\
         |---|---|---|---|---|---|---|---|"
    );
    let hooks: BTreeSet<&String> = ours.iter().map(|h| &h.0).collect();
    let (mut above_twin, mut above_floor) = (false, false);
    let mut passes = 0;
    for h in hooks {
        let (o, t) = (find(&ours, h), find(&theirs, h));
        let (sd, f, ff) = (find(&side, h), find(&floor, h), find(&floor_fentry, h));
        let vs_bpftrace = match (&o, &t) {
            (Some(o), Some(t)) if o.1 <= t.1 => "yes",
            (Some(_), Some(_)) => "**no**",
            _ => "—",
        };
        let per_packet = h.split('+').all(|p| PER_PACKET.contains(&p));
        let vs_floor = if per_packet {
            let (vs_kprobe, vs_fentry, n) = floor_ratios(lab, h);
            passes = passes.max(n);
            let plain = if h.split('+').all(|p| TRACEPOINTS.contains(&p)) {
                "tracepoint"
            } else {
                "kprobe"
            };
            floor_verdict(
                vs_kprobe,
                vs_fentry,
                kind_on(lab, h) == Some("fentry"),
                plain,
            )
        } else {
            "—".to_string()
        };
        above_twin |= vs_bpftrace.starts_with("**no");
        above_floor |= vs_floor.starts_with("**no");
        let _ = writeln!(
            s,
            "| `{h}` | {} | {} | {} | {} | {} | {vs_bpftrace} | {vs_floor} |",
            cell(o.as_ref()),
            cell(t.as_ref()),
            cell(sd.as_ref()),
            cell(f.as_ref()),
            cell(ff.as_ref())
        );
    }
    if passes > 0 {
        let _ = writeln!(
            s,
            "\nSide by side: medians over the {passes} passes (the tracers attached in \
             alternating order: programs of one kind on one function, two kprobes or two fentry \
             programs, run in the order they were attached); a floor ratio is the median of the \
             passes' own ratios."
        );
        if let Some((gap, h)) = placement_spread(lab) {
            let _ = write!(
                s,
                " The two identical empty programs on one hook in one pass (of those run \
                 {SETTLED_RUNS} times a pass or more) differed by up to {gap:.1}× (`{h}`): how \
                 far the placement of a program alone moves its time per run here."
            );
        }
        s.push_str("\n\n");
    } else {
        s.push('\n');
    }
    if above_twin {
        super::tried::section(s, "control-path-vs-bpftrace", "at or below bpftrace");
    }
    if above_floor {
        super::tried::section(s, "per-packet-floor", "within 2× of the floor");
    }
}

#[cfg(test)]
mod tests {
    use super::{find, floor_per_hook, floor_ratios, floor_verdict, placement_spread};
    use crate::bench::lab::LabResults;

    #[test]
    fn a_fentry_program_is_held_to_the_empty_fentry_program() {
        let v = floor_verdict(Some(2.5), Some(1.9), true, "kprobe");
        assert_eq!(
            v,
            "yes (1.9× of the empty fentry; 2.5× of the empty kprobe)"
        );
        let v = floor_verdict(Some(2.5), Some(1.9), false, "kprobe");
        assert_eq!(
            v,
            "**no** (2.5× of the empty kprobe; 1.9× of the empty fentry)"
        );
        // No empty fentry program measured: the kprobe's.
        assert_eq!(
            floor_verdict(Some(1.9), None, true, "kprobe"),
            "yes (1.9× of the empty kprobe)"
        );
        assert_eq!(floor_verdict(None, None, true, "kprobe"), "—");
        // A tracepoint hook's program is held to the empty tracepoint, named so.
        assert_eq!(
            floor_verdict(Some(2.6), None, false, "tracepoint"),
            "**no** (2.6× of the empty tracepoint)"
        );
    }

    /// Lab results of bpfstats lines, one (tool:hook, round, ns per run, runs) each.
    fn lab_of(rows: &[(&str, u32, u32, u32)]) -> LabResults {
        let mut text = String::new();
        for (series, round, ns, runs) in rows {
            text.push_str(&format!(
                "prog_ns {series} {round} {ns}\nprog_runs {series} {round} {runs}\n"
            ));
        }
        text.push_str("done - - 1\n");
        LabResults::parse(&text, 5, "k".into()).expect("parses")
    }

    #[test]
    fn floor_ratios_are_taken_pass_by_pass() {
        let (side, fentry) = ("side:rxe_xmit_packet", "floor_fentry:rxe_xmit_packet");
        let lab = lab_of(&[
            (side, 1, 400, 10),
            (fentry, 1, 200, 10),
            (side, 2, 300, 10),
            (fentry, 2, 100, 10),
            (side, 3, 330, 10),
            (fentry, 3, 300, 10),
            ("floor:rxe_xmit_packet", 1, 100, 10),
        ]);
        let (k, f, n) = floor_ratios(&lab, "rxe_xmit_packet");
        // Passes 2.0, 3.0 and 1.1: the median of the ratios, not a ratio of medians (330/200).
        assert_eq!(f, Some(2.0));
        assert_eq!(k, Some(4.0), "one pass had an empty kprobe");
        assert_eq!(n, 3);
    }

    #[test]
    fn the_floor_of_a_pass_is_the_mean_of_the_two_empty_programs() {
        let (side, a, b) = (
            "side:sock_recv_length",
            "floor:sock_recv_length",
            "floor2:sock_recv_length",
        );
        let lab = lab_of(&[
            (side, 1, 500, 10),
            (a, 1, 200, 5000),
            (b, 1, 300, 5000),
            (side, 2, 600, 10),
            (a, 2, 400, 5000),
            (b, 2, 100, 5000),
            (side, 3, 500, 10),
            (a, 3, 250, 10),
            ("floor:retransmit_timer", 1, 9000, 3),
            ("floor2:retransmit_timer", 1, 1000, 3),
        ]);
        // Passes 500/250, 600/250 and 500/250 (the third with one empty program only).
        let (k, _, n) = floor_ratios(&lab, "sock_recv_length");
        assert_eq!(k, Some(2.0));
        assert_eq!(n, 3);
        let f = floor_per_hook(&lab);
        let recv = f.iter().find(|h| h.0 == "sock_recv_length").expect("hook");
        assert_eq!(recv.1, 250.0);
        assert_eq!(f.len(), 2);
        // 400 against 100 in the second pass (not the 9× of a hook run three times a pass).
        assert_eq!(
            placement_spread(&lab),
            Some((4.0, "sock_recv_length".into()))
        );
    }

    #[test]
    fn a_program_on_two_hooks_meets_the_others_taken_together() {
        let v = vec![
            ("rxe_comp_queue_pkt".to_string(), 600.0, 2500.0),
            ("rxe_resp_queue_pkt".to_string(), 100.0, 7500.0),
        ];
        let both = find(&v, "rxe_comp_queue_pkt+rxe_resp_queue_pkt").expect("both there");
        assert_eq!(both.2, 10000.0);
        assert!(
            (both.1 - 225.0).abs() < 1e-9,
            "weighted by runs: {}",
            both.1
        );
        assert!(
            find(&v, "rxe_comp_queue_pkt+rxe_xmit_packet").is_none(),
            "one missing"
        );
        assert_eq!(find(&v, "rxe_resp_queue_pkt").map(|x| x.1), Some(100.0));
    }
}
