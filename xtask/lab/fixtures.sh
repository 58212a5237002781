#!/bin/bash
# Runs inside the lab (`cargo xtask fixtures`): records the golden fixtures with today's probe
# set into $FIXTURES_OUT. Every scenario is a real program under `rdmatrace record -- CMD`, so
# the recording ends with the command. Each writes a line `fixture NAME: ...` for the log.
set -eu
out=${FIXTURES_OUT:?}
bin=${RDMATRACE_BIN:?}
w=${RDMATRACE_WORKLOADS:?}
mkdir -p "$out"
rec() { # rec NAME CMD...: record CMD and its descendants into $out/NAME.rdmt ($flags: more options)
    local name=$1; shift
    "$bin" record --force ${flags:-} -o "$out/$name.rdmt" -- "$@" 2> "$out/$name.log" || {
        echo "fixture $name: recorder or command failed ($?)"; cat "$out/$name.log"; return 1; }
    echo "fixture $name: $(tail -1 "$out/$name.log")"
}
# Fresh devices before each fixture: rxe numbers QPs from 0x11 on a new device, so each
# fixture's QPNs do not depend on what ran before it.
fresh_devices() {
    rdma link delete rxe0 && rdma link delete rxe1
    rdma link add rxe0 type rxe netdev "$LAB_NIC_A" && rdma link add rxe1 type rxe netdev "$LAB_NIC_B"
    for _ in $(seq 100); do
        case "$(cat /sys/class/infiniband/rxe0/ports/1/gids/1 /sys/class/infiniband/rxe1/ports/1/gids/1 2>/dev/null)" in
            *ffff:c000:0201*ffff:c000:0202*) return 0 ;;
        esac
        sleep 0.1
    done
    echo "fresh devices: GIDs not populated"; return 1
}
# A client started once its server listens on TCP port $1 (TCG is slow to start programs), so
# no failed first attempt ends up in the fixture.
after_listen='for i in $(seq 200); do ss -Hltn "sport = :$0" | grep -q . && exec "$@"; sleep 0.1; done; exit 1'

# 1. lab-pingpong: an ibv_rc_pingpong pair between rxe1 and rxe0, then a refused modify
#    (rt-bad-modify: RESET->RTS, EINVAL) on rxe1.
fresh_devices
rec lab-pingpong bash -c "
    ibv_rc_pingpong -d rxe1 -g 1 -n 20 > $out/pingpong-server.txt 2>&1 &
    bash -c '$after_listen' 18515 ibv_rc_pingpong -d rxe0 -g 1 -n 20 192.0.2.2 > $out/pingpong-client.txt 2>&1
    wait
    $w/rt-bad-modify --dev rxe1 > $out/bad-modify.txt 2>&1"

# 2. lab-loss: 5% loss on rxe0's wire. ib_write_bw from rxe0 retransmits (rxe), and a TCP
#    transfer on the same lossy path retransmits (tcp); per-QP traffic, TCP bytes, port
#    counters (out_of_seq_request on the receiver).
fresh_devices
tc qdisc add dev "$LAB_NIC_A" root netem loss 5%
rec lab-loss bash -c "
    ib_write_bw -d rxe1 -x 1 -F -s 4096 -n 300 > $out/loss-server.txt 2>&1 &
    bash -c '$after_listen' 18515 ib_write_bw -d rxe0 -x 1 -F -s 4096 -n 300 192.0.2.2 > $out/loss-client.txt 2>&1
    wait
    python3 -c '
import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((\"192.0.2.2\", 5556)); s.listen(1)
c, _ = s.accept(); n = 0
while True:
    b = c.recv(65536)
    if not b: break
    n += len(b)
print(\"tcp server received\", n)' > $out/tcp-server.txt 2>&1 &
    bash -c '$after_listen' 5556 python3 -c '
import socket
c = socket.create_connection((\"192.0.2.2\", 5556), source_address=(\"192.0.2.1\", 0))
c.sendall(b\"x\" * (4 << 20)); c.close()'
    wait"
tc qdisc del dev "$LAB_NIC_A" root

# 3. lab-deadpeer: rt-mover's receiving QP is destroyed after 4 MiB; the sender's writes
#    exhaust their one transport retry (RETRY_EXC_ERR, then flushes), rxe moves the QP to ERR
#    (seen in the QP table), completion events on the sender's CQ.
fresh_devices
rec lab-deadpeer bash -c "
    $w/rt-mover --mib 64 --events --retry-cnt 1 --kill-peer-after-mib 4 > $out/deadpeer.txt 2>&1
    sleep 2; exit 0"

# 4. lab-verbs: rt-mover (built with frame pointers) creating and connecting its QPs: the
#    verbs calls' user stacks, named at record time, and its on-CPU samples (--cpu-profile).
fresh_devices
flags=--cpu-profile rec lab-verbs bash -c "$w/rt-mover --mib 16 > $out/verbs.txt 2>&1"
# 5. lab-verdicts: ib_write_bw moving its data over RC (rdma, with perftest's small TCP
#    control channel), then rt-fallback opening rxe0 and creating a QP but moving 8 MiB over
#    TCP (tcp_fallback): the README's verdict example.
fresh_devices
rec lab-verdicts bash -c "
    ib_write_bw -d rxe1 -x 1 -F -s 65536 -n 200 > $out/verdicts-server.txt 2>&1 &
    bash -c '$after_listen' 18515 ib_write_bw -d rxe0 -x 1 -F -s 65536 -n 200 192.0.2.2 > $out/verdicts-client.txt 2>&1
    wait
    $w/rt-fallback --dev rxe0 --from 192.0.2.1 --to 192.0.2.2 --mib 8 > $out/fallback.txt 2>&1"
echo "fixtures recorded in $out"
