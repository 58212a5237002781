#!/usr/bin/env python3
"""Clock exchange between the two-host lab's VMs over their wire (NTP's idea, one hop).

  clocksync.py serve ADDR PORT             answer time requests until a client is done
  clocksync.py measure PEER PORT           print "offset_ns rtt_ns": this clock minus the
                                           peer's, from the exchange with the smallest RTT
  clocksync.py set PEER PORT SECONDS       set this clock to the peer's + SECONDS
"""
import socket
import sys
import time


def serve(addr, port):
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((addr, port))
    srv.listen(4)
    srv.settimeout(600)
    while True:
        conn, _ = srv.accept()
        with conn:
            f = conn.makefile("rw")
            for line in f:
                if line.strip() == "quit":
                    return
                f.write(f"{time.clock_gettime_ns(time.CLOCK_REALTIME)}\n")
                f.flush()


def connect(peer, port):
    for _ in range(600):
        try:
            return socket.create_connection((peer, port), timeout=5)
        except OSError:
            time.sleep(0.2)
    sys.exit(f"clocksync: no time server at {peer}:{port}")


def exchange(f, rounds=20):
    """(offset_ns, rtt_ns) of the round with the smallest RTT: this clock minus the peer's."""
    best = None
    for _ in range(rounds):
        t0 = time.clock_gettime_ns(time.CLOCK_REALTIME)
        f.write("t\n")
        f.flush()
        theirs = int(f.readline())
        t1 = time.clock_gettime_ns(time.CLOCK_REALTIME)
        rtt = t1 - t0
        off = (t0 + rtt // 2) - theirs
        if best is None or rtt < best[1]:
            best = (off, rtt)
    return best


def main():
    mode, addr, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if mode == "serve":
        serve(addr, port)
    elif mode in ("measure", "set"):
        with connect(addr, port) as s:
            f = s.makefile("rw")
            off, rtt = exchange(f)
            if mode == "set":
                want = round(float(sys.argv[4]) * 1e9)
                now = time.clock_gettime_ns(time.CLOCK_REALTIME)
                time.clock_settime_ns(time.CLOCK_REALTIME, now - off + want)
                off, rtt = exchange(f)
                print(f"clock set {want / 1e9:+.3f} s off the peer's: measured {off / 1e9:+.4f} s "
                      f"(rtt {rtt / 1e6:.2f} ms)")
            else:
                print(off, rtt)
            f.write("quit\n")
            f.flush()
    else:
        sys.exit(__doc__)


main()
