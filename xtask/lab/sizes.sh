#!/bin/bash
# Runs inside the lab VM (called by bench.sh, or alone): fresh recordings with today's probe set
# of ib_write_bw, an rping pair and an ibv_rc_pingpong pair under 5 % loss, each under
# `rdmatrace record -- CMD`, for their size per event. Appends `size_events NAME 1 N` and
# `size_bytes NAME 1 B` lines to $out/lab.txt; the recordings stay in $out/size-NAME.rdmt.
#
#   sizes.sh RDMATRACE_BINARY OUT_DIR
set -u
rt=$1 out=$2
mkdir -p "$out"
res=$out/lab.txt
say() { echo "bench: $*" >&2; }
# A client started once its server listens on TCP port $0 (perftest and pingpong exchange
# their QP numbers over TCP); rping (RDMA CM) is retried instead.
listen='for i in $(seq 300); do ss -Hltn "sport = :$0" | grep -q . && exec "$@"; sleep 0.1; done; exit 1'
size_rec() { # size_rec NAME CMD...
    local name=$1 f=$out/size-$1.rdmt
    shift
    if ! "$rt" record --force -o "$f" -- "$@" >/dev/null 2>"$out/size-$name.log"; then
        say "size recording $name failed:"; tail -5 "$out/size-$name.log" >&2; return 0
    fi
    echo "size_events $name 1 $("$rt" trace --input "$f" --json | wc -l)" >>"$res"
    echo "size_bytes $name 1 $(stat -c %s "$f")" >>"$res"
    say "size recording $name: $(tail -1 "$out/size-$name.log")"
}
size_rec ib_write_bw bash -c "
    ib_write_bw -d rxe1 -x 1 -F -s 65536 -n 500 >/dev/null 2>&1 &
    bash -c '$listen' 18515 ib_write_bw -d rxe0 -x 1 -F -s 65536 -n 500 192.0.2.2 >/dev/null 2>&1
    wait"
size_rec rping bash -c "
    rping -s -a 192.0.2.2 -C 20 >/dev/null 2>&1 &
    for i in \$(seq 60); do rping -c -a 192.0.2.2 -C 20 >/dev/null 2>&1 && break; sleep 0.5; done
    wait"
if tc qdisc add dev "${LAB_NIC_A:-enp0s10}" root netem loss 5%; then
    # Under loss the server can be left retrying its last send to the client's destroyed QP
    # for good (rxe; seen in the 6.12 lab with and without a tracer, about one run in six):
    # it gets 10 s after its client is done, then is stopped (said in size-pingpong_loss.log).
    size_rec pingpong_loss bash -c "
        ibv_rc_pingpong -d rxe1 -g 1 -n 200 >/dev/null 2>&1 & s=\$!
        bash -c '$listen' 18515 ibv_rc_pingpong -d rxe0 -g 1 -n 200 192.0.2.2 >/dev/null 2>&1
        for i in \$(seq 100); do kill -0 \$s 2>/dev/null || break; sleep 0.1; done
        kill \$s 2>/dev/null && echo 'bench: the pingpong server was still retrying 10 s after its client ended: stopped' >&2
        wait"
    tc qdisc del dev "${LAB_NIC_A:-enp0s10}" root
else
    say "no netem: the pingpong-under-loss recording is skipped"
fi
