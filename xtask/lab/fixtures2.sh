#!/bin/bash
# Runs on both VMs of the two-host lab (`cargo xtask fixtures`): each host records its side of
# four ib_write_bw runs from a (client) to b (server) into $FIXTURES_OUT/two-host-NAME-HOST.rdmt:
#   healthy    nothing done to the wire
#   loss-a     3% netem loss on a's egress (requests lost from a to b)
#   loss-b     20% netem loss on b's egress, one write in flight (ACKs lost from b to a)
#   peer-dead  b's server killed with SIGKILL mid-run; a's client ended 4 s later
# The programs' output lands beside them (NAME-HOST.out).
set -u
R=$RDMATRACE_BIN
OUT=$FIXTURES_OUT
S=$LAB_SHARED
mkdir -p "$OUT"
barrier() {
    touch "$S/$1.$LAB_HOST"
    for _ in $(seq 3000); do
        [ -f "$S/$1.a" ] && [ -f "$S/$1.b" ] && return 0
        sleep 0.1
    done
    echo "barrier $1 timed out" >&2
    exit 1
}
record() {
    log=$OUT/two-host-$1-$LAB_HOST.rec.log
    $R record -o "$OUT/two-host-$1-$LAB_HOST.rdmt" 2>"$log" &
    rec=$!
    for _ in $(seq 600); do grep -q "Ctrl-C" "$log" && return 0; sleep 0.1; done
    echo "recorder not ready: $(cat "$log")" >&2
    exit 1
}
stop() { kill -TERM $rec; wait $rec || exit 1; }
bw=(ib_write_bw -d "$LAB_DEV" -x "$LAB_GID_INDEX")
run() { # name lossy-host loss% kill ib_write_bw-args...
    name=$1 lossy=$2 pct=$3 kill=$4
    shift 4
    record "$name"
    [ "$lossy" = "$LAB_HOST" ] && tc qdisc add dev "$LAB_NIC" root netem loss "$pct%"
    barrier "$name-recording"
    out=$OUT/$name-$LAB_HOST.out
    if [ "$LAB_HOST" = b ]; then
        if [ "$kill" = kill ]; then
            "${bw[@]}" "$@" >"$out" 2>&1 &
            pid=$!
            touch "$S/$name-up"
            sleep 6
            kill -9 $pid
            wait $pid
            touch "$S/$name-killed"
        else
            touch "$S/$name-up"
            "${bw[@]}" "$@" >"$out" 2>&1 || exit 1
        fi
    else
        until [ -f "$S/$name-up" ]; do sleep 0.1; done
        sleep 1
        if [ "$kill" = kill ]; then
            "${bw[@]}" "$@" "$LAB_PEER_ADDR" >"$out" 2>&1 &
            pid=$!
            until [ -f "$S/$name-killed" ]; do sleep 0.1; done
            sleep 4
            kill $pid
            wait $pid
        else
            "${bw[@]}" "$@" "$LAB_PEER_ADDR" >"$out" 2>&1 || exit 1
        fi
    fi
    [ "$lossy" = "$LAB_HOST" ] && tc qdisc del dev "$LAB_NIC" root
    barrier "$name-done"
    stop
    barrier "$name-stopped"
}
run healthy none 0 no -s 4096 -n 2000
run loss-a a 3 no -s 4096 -n 3000
run loss-b b 20 no -s 1024 -n 300 -t 1
run peer-dead none 0 kill -s 4096 -n 1000000
echo "two-host fixtures recorded on lab-$LAB_HOST"
