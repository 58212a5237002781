#!/bin/bash
# Runs inside the lab VM (called by bench.sh, or alone): rt-manyqp holds N QPs on rxe0 while
# `rdmatrace record` runs; the recorder's CPU per second and RSS with them held (its QP-table
# sampler walks them over rdma netlink every second), and how many it saw created. Appends
# `manyqp_* rdmatrace 1 V` lines to $out/lab.txt.
#
#   manyqp.sh RDMATRACE_BINARY WORKLOADS_DIR OUT_DIR QPS
set -u
rt=$1 w=$2 out=$3 n=${4:-10000}
res=$out/lab.txt
say() { echo "bench: $*" >&2; }
tck=$(getconf CLK_TCK)
cpu_ms() { awk -v t="$tck" '{print ($14 + $15) * 1000 / t}' "/proc/$1/stat"; }
log=$out/manyqp-rec.log
"$rt" record --force -o "$out/manyqp.rdmt" >/dev/null 2>"$log" &
rpid=$!
until grep -q "Hit Ctrl-C to end" "$log"; do
    kill -0 "$rpid" 2>/dev/null || { say "the recorder died:"; cat "$log" >&2; exit 0; }
    sleep 0.1
done
t0=$(date +%s%N)
"$w/rt-manyqp" --dev rxe0 --qps "$n" --hold 40 >"$out/manyqp.txt" 2>&1 &
mpid=$!
until grep -q holding "$out/manyqp.txt"; do
    kill -0 "$mpid" 2>/dev/null || { say "rt-manyqp failed:"; cat "$out/manyqp.txt" >&2; kill -INT "$rpid"; wait; exit 0; }
    sleep 0.2
done
echo "manyqp_create_ms rdmatrace 1 $((($(date +%s%N) - t0) / 1000000))" >>"$res"
# Let the sampler see them all, then measure 20 s with all of them held.
sleep 5
c0=$(cpu_ms "$rpid") s0=$(date +%s%N)
sleep 20
c1=$(cpu_ms "$rpid") s1=$(date +%s%N)
echo "manyqp_cpu_ms_per_s rdmatrace 1 $(awk -v a="$c0" -v b="$c1" -v d=$(((s1 - s0) / 1000000)) 'BEGIN {print (b - a) * 1000 / d}')" >>"$res"
echo "manyqp_rss_kib rdmatrace 1 $(awk '/^VmRSS/ {print $2}' /proc/$rpid/status)" >>"$res"
echo "manyqp_hwm_kib rdmatrace 1 $(awk '/^VmHWM/ {print $2}' /proc/$rpid/status)" >>"$res"
echo "manyqp_held rdmatrace 1 $(rdma resource show qp link rxe0 2>/dev/null | grep -c 'lqpn')" >>"$res"
wait "$mpid"
kill -INT "$rpid"
wait "$rpid"
echo "manyqp_recorded_creates rdmatrace 1 $("$rt" trace --input "$out/manyqp.rdmt" --json --comm rt-manyqp | grep -c '"qp_create"')" >>"$res"
say "many QPs: $(grep '^manyqp' "$res" | tr '\n' ' ')"
