#!/bin/bash
# Runs inside the lab VM for `cargo xtask bench`: perftest over rxe0 -> rxe1 with no tracer,
# under `rdmatrace record`, and under an equivalent bpftrace script, interleaved (the order
# rotates every round so drift hits all three alike). Raw figures go to $out/lab.txt as
# `metric tool round value` lines; the xtask computes ratios and medians.
#
#   bench.sh RDMATRACE_BINARY OUT_DIR ROUNDS
set -u
rt=$1 out=$2 rounds=${3:-5}
w=${RDMATRACE_WORKLOADS:-target/release}
mkdir -p "$out"
res=$out/lab.txt
: >"$res"
say() { echo "bench: $*" >&2; }
put() { echo "$*" >>"$res"; }
# Microseconds since the epoch, read by bash itself: under TCG every fork and exec costs
# 70-90 ms (`/bin/true`), so a clock read by `date` would land that much after the event.
# (Sets the variable named $1; a $(...) would fork.)
now_us() { local t=$EPOCHREALTIME; printf -v "$1" %d "$((10#${t/[.,]/}))"; }
# A descriptor that never has data: `read -t` on it naps without starting a process.
exec {nap}<> <(:)
tck=$(getconf CLK_TCK)
# Both tracers run from copies in the guest's /tmp (an overlay whose new files live in guest
# memory), bpftrace with the shared libraries it loads: the lab's root filesystem is the
# host's, shared over 9p without a page cache, so a binary run from it reads its pages over
# virtio again at every start, which a host with local disks does not pay (and which weighs on
# the two tools differently).
bin=$(mktemp -d /tmp/bench-bin.XXXXXX)
cp "$rt" "$bin/rdmatrace" && rt=$bin/rdmatrace
mkdir -p "$bin/bt"
cp "$(command -v bpftrace)" "$bin/bt/"
for lib in $(ldd "$(command -v bpftrace)" | awk '$2 == "=>" && $3 ~ /^\// {print $3}'); do
    cp -L "$lib" "$bin/bt/"
done
BPFTRACE=(env LD_LIBRARY_PATH="$bin/bt" "$bin/bt/bpftrace")
export BT_LIBS=$bin/bt
say "tracers copied to $bin ($(du -sh "$bin" | cut -f1))"
# Per-program run time and count (the kernel accounts them only when asked; off by default).
# Where one start-up goes, phase by phase; also which of rdmatrace's programs is on which hook
# (its kprobes' links do not say).
"$rt" doctor --json >"$out/doctor.json" 2>/dev/null || say "rdmatrace doctor --json failed"
stats=0
if command -v bpftool >/dev/null && sysctl -qw kernel.bpf_stats_enabled=1; then
    stats=1
else
    say "bpf_stats not available (no bpftool, or kernel.bpf_stats_enabled cannot be set): no per-program cost"
fi

# The same hooks rdmatrace attaches (QP verbs, restrack, async/CM events, rxe timers and
# traffic, TCP, process events); per-packet and per-call hooks aggregate in maps, as rdmatrace's
# programs do, the rest print one line per event.
read -r -d '' BT <<'SCRIPT'
BEGIN { printf("Tracing\n"); }
kprobe:ib_create_qp_user, kprobe:ib_modify_qp_with_udata, kprobe:ib_destroy_qp_user { @arg[tid] = arg0; }
kretprobe:ib_create_qp_user, kretprobe:ib_modify_qp_with_udata, kretprobe:ib_destroy_qp_user {
  printf("%d %s %s %llx %d\n", pid, comm, probe, @arg[tid], retval); delete(@arg[tid]);
}
kprobe:ib_create_srq_user, kprobe:ib_umem_get, kprobe:rxe_create_cq { @arg[tid] = arg0; }
kretprobe:ib_create_srq_user, kretprobe:ib_umem_get, kretprobe:rxe_create_cq { printf("%d %s %s %llx %d\n", pid, comm, probe, @arg[tid], retval); delete(@arg[tid]); }
kprobe:rdma_restrack_add { @res[tid] = arg0; }
kretprobe:rdma_restrack_add { printf("%d %s %s %llx\n", pid, comm, probe, @res[tid]); delete(@res[tid]); }
kprobe:rdma_restrack_del { printf("%d %s %s %llx\n", pid, comm, probe, arg0); }
kprobe:__ib_unregister_device, kprobe:rxe_reg_user_mr { printf("%d %s %s %llx\n", pid, comm, probe, arg0); }
kprobe:ib_uverbs_qp_event_handler, kprobe:ib_uverbs_cq_event_handler, kprobe:ib_uverbs_srq_event_handler,
kprobe:ib_uverbs_event_handler, kprobe:ucma_event_handler { printf("%d %s %s %llx\n", pid, comm, probe, arg0); }
kprobe:retransmit_timer, kprobe:rnr_nak_timer { printf("%s %llx\n", probe, arg0); }
kprobe:rxe_xmit_packet { @tx[arg0] = count(); }
kprobe:rxe_comp_queue_pkt, kprobe:rxe_resp_queue_pkt { @rx[arg0] = count(); }
kprobe:rxe_cq_post { @cqe[arg0] = count(); }
kprobe:ib_uverbs_comp_handler { @comp[arg0] = count(); }
kprobe:tcp_sendmsg { @tcp_tx[pid] = sum(arg2); }
tracepoint:sock:sock_send_length, tracepoint:sock:sock_recv_length { @sock[pid, probe] = count(); }
tracepoint:tcp:tcp_retransmit_skb { printf("retrans %d %d\n", args->sport, args->dport); }
tracepoint:sock:inet_sock_set_state { printf("tcp %d %s %d %d\n", pid, comm, args->oldstate, args->newstate); }
tracepoint:sched:sched_process_exec, tracepoint:sched:sched_process_exit, tracepoint:sched:sched_process_fork { printf("%d %s %s\n", pid, comm, probe); }
SCRIPT

# Starts a tracer ($1 = rdmatrace | bpftrace) in the background; sets tpid and records its
# attach time (start to its ready line). The wait for the line starts no process (no grep, no
# sleep, no date: each would cost 70-90 ms under TCG and add up to that to the figure), and
# bpftrace is started directly (no `env` in front).
start_tracer() {
    local tool=$1 log=$out/$1.log t0 t1 text
    : >"$log"
    now_us t0
    case $tool in
    rdmatrace) "$rt" record --force -o "$out/rec.rdmt" >/dev/null 2>"$log" & tpid=$! ;;
    bpftrace) LD_LIBRARY_PATH=$BT_LIBS "$bin/bt/bpftrace" -e "$BT" >"$log" 2>&1 & tpid=$! ;;
    esac
    while :; do
        text=
        IFS= read -r -d '' text <"$log"
        case $text in *"Hit Ctrl-C to end"* | Tracing* | *$'\n'Tracing*) break ;; esac
        if ! kill -0 "$tpid" 2>/dev/null; then
            say "$tool died before attaching:"; cat "$log" >&2; exit 1
        fi
        read -r -t 0.005 -u "$nap"
    done
    now_us t1
    put attach_ms "$tool" "$round" $(((t1 - t0) / 1000))
}

# The tracer's peak RSS and CPU time so far (attach and the perftest runs).
tracer_usage() {
    local tool=$1
    put rss_kib "$tool" "$round" "$(awk '/^VmHWM/ {print $2}' /proc/$tpid/status)"
    put cpu_ms "$tool" "$round" "$(awk -v t="$tck" '{print ($14 + $15) * 1000 / t}' /proc/$tpid/stat)"
}

# A TCP storm on loopback: $1 one-byte sends and receives on one connection, so that the
# socket hooks' programs run thousands of times (with a few hundred runs, a program's time per
# run is mostly the emulator translating its code on first use, the bigger program more).
tcp_storm() {
    python3 - "$1" <<'PY' || say "the TCP storm failed"
import socket
import sys
lst = socket.socket()
lst.bind(("127.0.0.1", 0))
lst.listen(1)
c = socket.create_connection(lst.getsockname())
s, _ = lst.accept()
for _ in range(int(sys.argv[1])):
    c.sendall(b"x")
    s.recv(1)
PY
}
# The storm's sends in each round's churn, and in each side-by-side pass of the floor (below).
# The side passes' storm is ten times longer: each pass loads the programs anew, and under TCG
# their first runs include translating their code, which a few thousand runs do not amortize
# (the socket hooks' ratio to the floor is taken from these passes).
STORM_CHURN=5000
STORM_SIDE=50000
put storm_sends churn 1 $STORM_CHURN
put storm_sends side 1 $STORM_SIDE

# Control-path churn under a tracer, so that its control-path programs run hundreds of times a
# round: with a handful of runs, a program's time per run is mostly the emulator translating
# its code the first time (TCG), not the program. QPs created, brought to INIT and destroyed,
# CQs created and memory registered (verbs, restrack, umem), processes forked, exec'd and
# exited, loopback TCP connections opened, used and closed, and a TCP storm.
churn() {
    "$w/rt-manyqp" --dev rxe0 --qps 200 --cqs 200 --mrs 200 --hold 0 >/dev/null ||
        say "rt-manyqp failed in the churn"
    for _ in $(seq 200); do /bin/true; done
    python3 - <<'PY' || say "the TCP churn failed"
import socket
lst = socket.socket()
lst.bind(("127.0.0.1", 0))
lst.listen(64)
for _ in range(200):
    c = socket.create_connection(lst.getsockname())
    s, _ = lst.accept()
    c.sendall(b"x")
    s.recv(1)
    s.close()
    c.close()
PY
    tcp_storm $STORM_CHURN
}

# Ends the tracers whose pids are given: SIGINT, then SIGKILL (said) for any still running two
# minutes later (a bpftrace once never exited after its SIGINT here, holding the bench until the
# lab's own time limit).
stop_pids() {
    local p deadline=$(($(date +%s) + 120))
    for p in "$@"; do kill -INT "$p" 2>/dev/null; done
    for p in "$@"; do
        while kill -0 "$p" 2>/dev/null && [ "$(date +%s)" -le "$deadline" ]; do sleep 0.2; done
        if kill -0 "$p" 2>/dev/null; then
            say "tracer $p ($(tr '\0' ' ' </proc/"$p"/cmdline 2>/dev/null | cut -c1-60)) still running 2 minutes after SIGINT: killed"
            kill -9 "$p" 2>/dev/null
        fi
        wait "$p"
    done
}

# SIGINT the tracer after reading each of its programs' cost (bpf_stats) per hook.
stop_tracer() {
    local tool=$1
    if [ $stats = 1 ]; then
        python3 xtask/lab/bpfstats.py "$tpid" "$tool" "$round" "$out/doctor.json" >>"$res" ||
            say "bpf_stats of $tool could not be read"
    fi
    stop_pids "$tpid"
    if [ "$tool" = rdmatrace ]; then
        local ev
        ev=$("$rt" trace --input "$out/rec.rdmt" --json | wc -l)
        put rec_events "$tool" "$round" "$ev"
        put rec_bytes "$tool" "$round" "$(stat -c %s "$out/rec.rdmt")"
        cp "$out/rec.rdmt" "$out/last.rdmt"
    fi
}

# One perftest run (server on rxe1, client on rxe0); prints the client's output. The client
# retries for up to 2 minutes: under TCG a loaded host can take that long to start a server.
perf() {
    local prog=$1 ok=0 deadline
    shift
    "$prog" -d rxe1 -x 1 -F "$@" >"$out/server.txt" 2>&1 &
    local s=$!
    deadline=$(($(date +%s) + 120))
    while [ "$(date +%s)" -lt "$deadline" ]; do
        sleep 0.5
        if "$prog" -d rxe0 -x 1 -F "$@" 192.0.2.2 >"$out/client.txt" 2>&1; then ok=1; break; fi
    done
    [ $ok = 1 ] || kill "$s" 2>/dev/null
    wait "$s"
    [ $ok = 1 ] || { say "$prog never succeeded:"; cat "$out/client.txt" "$out/server.txt" >&2; exit 1; }
    cat "$out/client.txt"
}

measure() {
    local tool=$1 bw lat
    [ "$tool" = none ] || start_tracer "$tool"
    bw=$(perf ib_write_bw -s 65536 -n 500 | awk '$1 == 65536 && NF >= 4 {print $4}')
    lat=$(perf ib_send_lat -s 2 -n 1000 | awk '$1 == 2 && NF >= 5 {print $5}')
    if [ "$tool" != none ]; then
        tracer_usage "$tool"
        churn
        stop_tracer "$tool"
    fi
    [ -n "$bw" ] && [ -n "$lat" ] || { say "no figures from perftest ($tool)"; exit 1; }
    put bw_mbps "$tool" "$round" "$bw"
    put lat_p50_us "$tool" "$round" "$lat"
    say "round $round $tool: $bw MB/s, p50 $lat us"
}

tools=(none rdmatrace bpftrace)
for round in $(seq "$rounds"); do
    for k in 0 1 2; do
        measure "${tools[$(((k + round) % 3))]}"
    done
done

# The floor, side by side: rdmatrace and empty programs on the per-packet and per-completion
# hooks, all attached at once through a perftest pass and a TCP storm, so that each program and the floor it
# is held to run on the same packets at the same time (a floor measured in a pass of its own
# moved up to 1.8x between bench runs while the programs did not). Two kinds of empty program
# per hook: a kprobe (tracepoint on the socket hooks), and an fentry program on the rxe
# functions, the twin of rdmatrace's fentry programs there (bpftrace's `kfunc:`; said and left
# out when this bpftrace or kernel cannot attach one). The cost of entering a program at all on
# this kernel, under this emulation. Two empty kprobes (tracepoints), loaded apart: under TCG
# one program's time per run depends on where it was loaded (two identical empty programs on
# one hook differed up to 1.9x, pass after pass), so their floor in a pass is the mean of the
# two. One set of fentry programs: bpftool 7.1 names no owner of a tracing program or link,
# so two bpftrace instances' fentry programs could not be told apart.
if [ $stats = 1 ]; then
    BT_FLOOR='BEGIN { printf("Tracing\n"); }
        kprobe:rxe_xmit_packet, kprobe:rxe_comp_queue_pkt, kprobe:rxe_resp_queue_pkt,
        kprobe:rxe_cq_post, kprobe:ib_uverbs_comp_handler, kprobe:retransmit_timer,
        tracepoint:sock:sock_send_length, tracepoint:sock:sock_recv_length { }'
    FENTRY_HOOKS=rxe_xmit_packet,rxe_comp_queue_pkt,rxe_resp_queue_pkt,rxe_cq_post
    BT_FENTRY="BEGIN { printf(\"Tracing\\n\"); } kfunc:rdma_rxe:${FENTRY_HOOKS//,/, kfunc:rdma_rxe:} { }"
    # Sets the pid variable named $1 once the tracer $2 (a log name) printed its ready line;
    # the rest is its command. Returns 1 (and says why) when it died first or is not ready in
    # 5 minutes (then stopped).
    start_side() {
        local var=$1 name=$2 log=$out/$2.log pid deadline=$(($(date +%s) + 300))
        shift 2
        "$@" >"$log" 2>&1 &
        pid=$!
        until grep -q -e "^Tracing" -e "Hit Ctrl-C to end" "$log"; do
            kill -0 "$pid" 2>/dev/null || { say "the $name tracer died:"; cat "$log" >&2; return 1; }
            if [ "$(date +%s)" -gt "$deadline" ]; then
                say "the $name tracer was not ready in 5 minutes:"; cat "$log" >&2
                kill -9 "$pid"; return 1
            fi
            sleep 0.05
        done
        printf -v "$var" %d "$pid"
    }
    # Five passes, so five placements of each program (see above); the order the tracers
    # attach in alternates (programs of one kind on one function run in attach order: two
    # kprobes, or two fentry programs on its trampoline), so that no tool always runs first.
    for round in 1 2 3 4 5; do
        side_pid= floor_pid= floor2_pid= fentry_pid=
        if [ $((round % 2)) = 1 ]; then
            start_side side_pid side "$rt" record --force -o "$out/side.rdmt" || exit 1
        fi
        start_side floor_pid floor "${BPFTRACE[@]}" -e "$BT_FLOOR" || exit 1
        start_side floor2_pid floor2 "${BPFTRACE[@]}" -e "$BT_FLOOR" || exit 1
        start_side fentry_pid floor_fentry "${BPFTRACE[@]}" -e "$BT_FENTRY" ||
            say "no empty fentry programs: the floor of the fentry programs is the empty kprobe only"
        if [ $((round % 2)) = 0 ]; then
            start_side side_pid side "$rt" record --force -o "$out/side.rdmt" || exit 1
        fi
        perf ib_write_bw -s 65536 -n 500 >/dev/null
        perf ib_send_lat -s 2 -n 1000 >/dev/null
        tcp_storm $STORM_SIDE
        python3 xtask/lab/bpfstats.py "$side_pid" side "$round" "$out/doctor.json" >>"$res" ||
            say "bpf_stats of rdmatrace beside the floor could not be read"
        for f in floor:$floor_pid floor2:$floor2_pid; do
            python3 xtask/lab/bpfstats.py "${f#*:}" "${f%%:*}" "$round" >>"$res" ||
                say "bpf_stats of the floor (${f%%:*}) could not be read"
        done
        if [ -n "$fentry_pid" ]; then
            python3 xtask/lab/bpfstats.py "$fentry_pid" floor_fentry "$round" "hooks=$FENTRY_HOOKS" >>"$res" ||
                say "bpf_stats of the empty fentry programs could not be read"
        fi
        # shellcheck disable=SC2086 # the pids, word-split; an unset one is left out
        stop_pids $side_pid $floor_pid $floor2_pid $fentry_pid
    done
fi
# Fresh recordings of today's probe set, for their size per event.
bash xtask/lab/sizes.sh "$rt" "$out"
# 10,000 QPs held under the recorder: its QP-table sampler's CPU per second, its RSS.
bash xtask/lab/manyqp.sh "$rt" "$w" "$out" 10000
put done - - 1
