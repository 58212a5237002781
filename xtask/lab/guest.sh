#!/bin/bash
# Runs inside the lab VM (booted by `cargo xtask lab`): sets up Soft-RoCE on a real virtual wire,
# then runs the command file given as $2 from the repository root $1 (or a shell without one).
#
#   rxe0 on NIC A (192.0.2.1)  ===== qemu hub =====  rxe1 on NIC B (192.0.2.2)
#
# Traffic between the two local addresses is forced out through the NICs (policy routing, no
# local-table shortcut), so netem on A or B really drops RDMA packets.
set -u
repo=$1
cmdfile=${2:-}
t0=$(date +%s%N)
log() { echo "rdmatrace-lab: $*" >&2; }
fail() { log "setup failed: $*"; exit 97; }

mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing || fail "tracefs"
mountpoint -q /sys/kernel/debug || mount -t debugfs nodev /sys/kernel/debug 2>/dev/null
for m in ib_core ib_uverbs rdma_ucm rdma_rxe sch_netem; do
    modprobe "$m" || fail "modprobe $m"
done

mapfile -t nics < <(ls /sys/class/net | grep -v '^lo$' | sort)
[ "${#nics[@]}" -ge 2 ] || fail "need two NICs (vng --network loop), have: ${nics[*]}"
A=${nics[0]} B=${nics[1]}
IPA=192.0.2.1 IPB=192.0.2.2
ip link set lo up
ip link set "$A" up && ip link set "$B" up || fail "links up"
ip addr add $IPA/24 dev "$A" && ip addr add $IPB/24 dev "$B" || fail "addresses"
for i in all default "$A" "$B"; do
    sysctl -qw net.ipv4.conf.$i.rp_filter=0 net.ipv4.conf.$i.accept_local=1 || fail "sysctl $i"
done
MACA=$(cat /sys/class/net/"$A"/address) MACB=$(cat /sys/class/net/"$B"/address)
ip neigh replace $IPB lladdr "$MACB" dev "$A" nud permanent || fail "neigh A"
ip neigh replace $IPA lladdr "$MACA" dev "$B" nud permanent || fail "neigh B"
ip route add $IPB/32 dev "$A" src $IPA table 100 || fail "route 100"
ip route add $IPA/32 dev "$B" src $IPB table 101 || fail "route 101"
ip rule add pref 10 iif lo to $IPB lookup 100 || fail "rule 10"
ip rule add pref 11 iif lo to $IPA lookup 101 || fail "rule 11"
ip rule add pref 100 lookup local && ip rule del pref 0 || fail "local rule"
rdma link add rxe0 type rxe netdev "$A" || fail "rdma link rxe0"
rdma link add rxe1 type rxe netdev "$B" || fail "rdma link rxe1"
# The IPv4-mapped RoCEv2 GID (index 1) appears asynchronously.
for _ in $(seq 100); do
    g0=$(cat /sys/class/infiniband/rxe0/ports/1/gids/1 2>/dev/null)
    g1=$(cat /sys/class/infiniband/rxe1/ports/1/gids/1 2>/dev/null)
    case "$g0$g1" in *ffff:c000:0201*ffff:c000:0202*) break ;; esac
    sleep 0.1
done
case "$g0$g1" in *ffff:c000:0201*ffff:c000:0202*) ;; *) fail "GIDs not populated: $g0 $g1" ;; esac

export RDMATRACE_LAB=1 LAB_NIC_A=$A LAB_NIC_B=$B LAB_IP_A=$IPA LAB_IP_B=$IPB
export LAB_DEV_A=rxe0 LAB_DEV_B=rxe1 LAB_GID_INDEX=1
t1=$(date +%s%N)
log "ready: rxe0@$A($IPA) <-> rxe1@$B($IPB), setup $(( (t1 - t0) / 1000000 )) ms"
cd "$repo" || fail "cd $repo"
if [ -z "$cmdfile" ]; then
    exec bash -i
fi
bash "$cmdfile"
status=$?
log "command exited with status $status"
exit $status
