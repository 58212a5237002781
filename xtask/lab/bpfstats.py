#!/usr/bin/env python3
"""Per-program cost of one tracer's eBPF programs, from the kernel's own accounting
(kernel.bpf_stats_enabled=1): for each program process PID attached, the hook it is attached
to and its run_time_ns / run_cnt since it was loaded.

  bpfstats.py PID TOOL ROUND [DOCTOR_JSON | hooks=HOOK,HOOK...]
      prints `prog_ns TOOL:HOOK ROUND NS_PER_RUN` and `prog_runs TOOL:HOOK ROUND RUNS` lines
      (bench.sh's format). Programs attached through perf-event links (rdmatrace's kprobes:
      bpftool 7.1 shows no owner or function for those links) and fentry programs (bpftool
      7.1 shows neither owner nor target of their links) are named by `rdmatrace doctor
      --json` (DOCTOR_JSON: its `probe AREA/PROGRAM (KIND TARGET)` items), or, for bpftrace's
      `kfunc:` programs (named for their function, cut to 15 characters), by the list of
      hooks they are on (hooks=...).

Hooks: kprobes and uprobes by function, tracepoints by name, raw tracepoints (and tp_btf) by name;
a hook with several programs of the tool (entry + return) is summed. Uses bpftool's JSON.
"""
import json
import re
import subprocess
import sys


def bpftool(*args):
    out = subprocess.run(["bpftool", "-j", *args], capture_output=True, text=True, check=True)
    return json.loads(out.stdout or "[]")


def doctor_hooks(path):
    """Kernel program name (15 characters at most) -> hook, from rdmatrace doctor --json: the
    targets the program is attached to here (a probe standing by, e.g. mlx5_ib_create_cq on a
    host without mlx5, is not one), joined with "+" when one program serves several (rxe's
    two receive queues): the kernel counts a program's runs, not a link's."""
    targets = {}
    for item in json.load(open(path))["data"]:
        m = re.match(r"probe [^/]+/(\S+) \((\S+) (\S+)\)", item.get("item", ""))
        if m and item.get("detail") == "attached":
            t = targets.setdefault(m.group(1)[:15], [])
            hook = m.group(3).split(":")[-1]
            if hook not in t:
                t.append(hook)
    out = {}
    for prog, t in targets.items():
        t = sorted(t)
        # One word: bench.sh's lines are split on spaces.
        out[prog] = "+".join(t) if len(t) <= 3 else f"{t[0]}+{len(t) - 1}-more"
    return out


def main():
    pid, tool, rnd = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    extra = sys.argv[4] if len(sys.argv) > 4 else ""
    by_doctor = bool(extra) and not extra.startswith("hooks=")
    if extra.startswith("hooks="):
        # The kernel keeps a program's first 15 characters as its name.
        named = {h[:15]: h for h in extra[len("hooks="):].split(",") if h}
    else:
        named = doctor_hooks(extra) if extra else {}
    progs = {p["id"]: p for p in bpftool("prog", "show")}
    hooks = {}  # hook -> [ns, runs]
    counted = set()  # (hook, program): a program linked to a hook twice is counted once

    def add(hook, prog_id):
        p = progs.get(prog_id)
        if p is None or (hook, prog_id) in counted:
            return
        counted.add((hook, prog_id))
        h = hooks.setdefault(hook, [0, 0])
        h[0] += p.get("run_time_ns", 0)
        h[1] += p.get("run_cnt", 0)

    perf = bpftool("perf", "show")
    # Programs another process holds through a perf event (another tracer on the same hooks,
    # e.g. the floor's empty programs beside rdmatrace): never named as this tool's.
    others = {e.get("prog_id") for e in perf if e.get("pid") != pid}
    for e in perf:
        if e.get("pid") != pid:
            continue
        hook = e.get("func") or e.get("tracepoint") or e.get("filename", "?")
        kind = e.get("fd_type", "?")
        if kind.startswith("uprobe") or kind.startswith("uretprobe"):
            hook = "uprobe:" + str(e.get("filename", "?")).rsplit("/", 1)[-1] + "+" + str(e.get("offset"))
        add(hook, e.get("prog_id"))
    for link in bpftool("link", "show"):
        owners = [p.get("pid") for p in link.get("pids", [])]
        if owners and pid not in owners:
            continue  # another process's (when this bpftool shows owners)
        if link.get("type") == "perf_event" and by_doctor:
            if link.get("prog_id") in others:
                continue
            hook = named.get(progs.get(link.get("prog_id"), {}).get("name"))
            if hook:
                add(hook, link.get("prog_id"))
            continue
        # fentry (and tp_btf) links: bpftool 7.1 may show neither their owner nor their function; doctor
        # (or the hooks= list) names the program (only the tool given them has programs of those names).
        prog_name = progs.get(link.get("prog_id"), {}).get("name")
        if link.get("type") in ("tracing", "raw_tracepoint") and named.get(prog_name):
            add(named[prog_name], link.get("prog_id"))
            continue
        if pid not in owners:
            continue
        if link.get("type") in ("raw_tracepoint", "tracing"):
            prog = progs.get(link.get("prog_id"), {})
            hook = link.get("tp_name") or "btf:" + str(prog.get("name", "?"))
            add(hook, link.get("prog_id"))
    for hook, (ns, runs) in sorted(hooks.items()):
        hook = "_".join(hook.split())
        if runs:
            print(f"prog_ns {tool}:{hook} {rnd} {ns / runs:.1f}")
        print(f"prog_runs {tool}:{hook} {rnd} {runs}")


main()
