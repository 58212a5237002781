#!/bin/bash
# Runs inside one VM of the two-host lab (booted by `cargo xtask lab --hosts 2`): sets up
# Soft-RoCE rxe0 on this host's one NIC, wired to the other VM's, then runs the command file.
#
#   lab-a: rxe0 on NIC (192.0.2.1)  ===== virtual wire =====  lab-b: rxe0 on NIC (192.0.2.2)
#
# Arguments: repo-root host(a|b) command-file shared-dir clock-offset-seconds (b's from a's)
set -u
repo=$1 host=$2 cmdfile=$3 shared=$4 offset=$5
t0=$(date +%s%N)
log() { echo "rdmatrace-lab: $*" >&2; }
fail() { log "setup failed: $*"; exit 97; }

mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing || fail "tracefs"
mountpoint -q /sys/kernel/debug || mount -t debugfs nodev /sys/kernel/debug 2>/dev/null
for m in ib_core ib_uverbs rdma_ucm rdma_rxe sch_netem; do
    modprobe "$m" || fail "modprobe $m"
done

mapfile -t nics < <(ls /sys/class/net | grep -v '^lo$' | sort)
[ "${#nics[@]}" -ge 1 ] || fail "no NIC"
nic=${nics[0]}
case $host in
a) addr=192.0.2.1 peer=192.0.2.2 ;;
b) addr=192.0.2.2 peer=192.0.2.1 ;;
*) fail "host $host" ;;
esac
ip link set lo up
ip link set "$nic" up || fail "link up"
ip addr add $addr/24 dev "$nic" || fail "address"
rdma link add rxe0 type rxe netdev "$nic" || fail "rdma link rxe0"
want=$(printf 'ffff:c000:02%02x' "${addr##*.}")
for _ in $(seq 100); do
    g=$(cat /sys/class/infiniband/rxe0/ports/1/gids/1 2>/dev/null)
    case "$g" in *"$want") break ;; esac
    sleep 0.1
done
case "$g" in *"$want") ;; *) fail "GID not populated: $g" ;; esac
# The wire: wait until the peer answers (it may still be booting).
for _ in $(seq 600); do
    ping -c1 -W1 "$peer" >/dev/null 2>&1 && break
done
ping -c1 -W1 "$peer" >/dev/null 2>&1 || fail "peer $peer not reachable over the wire"
# b's wall clock is set $offset s off a's, measured over the wire (CLOCK_MONOTONIC is
# untouched), so analyses must align clocks. Tests measure it again the same way
# (xtask/lab/clocksync.py measure) when they need the truth.
sync=$repo/xtask/lab/clocksync.py
if [ "$host" = a ]; then
    python3 "$sync" serve $addr 7319 || fail "clock server"
else
    msg=$(python3 "$sync" set $peer 7319 "$offset") || fail "clock offset $offset"
    log "$msg"
fi

export RDMATRACE_LAB=1 LAB_HOST=$host LAB_ADDR=$addr LAB_PEER_ADDR=$peer LAB_NIC=$nic
export LAB_DEV=rxe0 LAB_GID_INDEX=1 LAB_SHARED=$shared LAB_CLOCK_OFFSET=$offset
t1=$(date +%s%N)
log "ready: lab-$host rxe0@$nic($addr), peer $peer, setup $(( (t1 - t0) / 1000000 )) ms"
cd "$repo" || fail "cd $repo"
bash "$cmdfile"
status=$?
log "command exited with status $status"
exit $status
