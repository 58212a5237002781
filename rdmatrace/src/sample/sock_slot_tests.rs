//! The sampler over the per-process TCP byte slots, the kernel's part played by writing the
//! slots, a process known gone by its id (1000 and above).

use rdmatrace_common::event::{sock_slot, sock_slot_key, EventKind, TcpBytes, TcpBytesSample};

use super::*;
use crate::sample::Sampler;

fn gone(tgid: u32) -> bool {
    tgid >= 1000
}

/// Process `tgid`'s slot towards IPv4 peer `peer`, after `calls` sends of 10 bytes.
fn slot(tgid: u32, peer: [u8; 4], calls: u64) -> SockSlot {
    let mut daddr = [0; 16];
    daddr[..4].copy_from_slice(&peer);
    let mut comm = [0; 16];
    comm[..4].copy_from_slice(b"cli\0");
    SockSlot {
        key: sock_slot_key(tgid, 2),
        bytes: TcpBytes {
            tx_bytes: calls * 10,
            rx_bytes: 0,
            tx_calls: calls,
            rx_calls: 0,
            comm,
            daddr,
            family: 2,
            _pad: [0; 6],
        },
    }
}

fn index(tgid: u32, peer: [u8; 4], n: usize) -> usize {
    let mut d = [0u8; 16];
    d[..4].copy_from_slice(&peer);
    let w = |b: &[u8]| u64::from_ne_bytes(b.try_into().expect("8 bytes"));
    sock_slot(tgid, [w(&d[..8]), w(&d[8..])], n as u32) as usize
}

/// The TCP byte samples in `records`: (pid, peer's first byte, tx calls, tx bytes).
fn samples(records: &[Vec<u8>]) -> Vec<(u32, u8, u64, u64)> {
    let mut v: Vec<_> = records
        .iter()
        .map(|r| {
            assert_eq!(r.len(), std::mem::size_of::<TcpBytesSample>());
            // SAFETY: a whole TcpBytesSample's bytes (length checked), read unaligned.
            let s: TcpBytesSample = unsafe { std::ptr::read_unaligned(r.as_ptr().cast()) };
            assert_eq!(s.header.kind, EventKind::TcpBytes as u32);
            assert_eq!(&s.header.comm[..4], b"cli\0");
            assert_eq!(s.bytes.family, 2);
            (
                s.header.pid,
                s.bytes.daddr[0],
                s.bytes.tx_calls,
                s.bytes.tx_bytes,
            )
        })
        .collect();
    v.sort();
    v
}

#[test]
fn socket_slots_are_sampled_as_changes_and_freed_once_their_process_is_gone() {
    let slots = SockSlots::anonymous().expect("anonymous mapping");
    let n = slots.len();
    let (a, b) = ((7, [10, 0, 0, 1]), (4242, [10, 0, 0, 2]));
    let (ia, ib) = (index(a.0, a.1, n), index(b.0, b.1, n));
    assert_ne!(ia, ib, "two pairs of this test share a slot");
    // Claimed before the sampler starts: the totals so far are the baseline.
    slots.put(ia, slot(a.0, a.1, 3));
    let mut s = Sampler::with_sources(None, None, None, None);
    s.with_sock_slots_checked(slots, gone);
    let put = |s: &Sampler, i, v| s.sock_slots.as_ref().expect("slots").slots.put(i, v);
    put(&s, ia, slot(a.0, a.1, 5));
    put(&s, ib, slot(b.0, b.1, 4));
    assert_eq!(samples(&s.poll(1)), [(7, 10, 2, 20), (4242, 10, 4, 40)]);
    let raw = |s: &Sampler, i| s.sock_slots.as_ref().expect("slots").slots.raw(i);
    assert_eq!(
        raw(&s, ib).key,
        sock_slot_key(4242, 2),
        "moved: not checked"
    );
    // Neither moves; process 4242 is gone: its slot is freed, process 7's kept.
    assert!(s.poll(2).is_empty());
    assert_eq!(raw(&s, ib).key, 0);
    assert_eq!(raw(&s, ib).bytes.tx_calls, 0);
    assert_eq!(raw(&s, ia), slot(a.0, a.1, 5));
    // Another pair claims the freed slot: all of its calls are new.
    put(&s, ib, slot(4343, [10, 0, 0, 9], 1));
    assert_eq!(samples(&s.poll(3)), [(4343, 10, 1, 10)]);
    // The same process towards another peer in a slot (as after a collision): new too.
    put(&s, ia, slot(a.0, [10, 0, 0, 3], 2));
    assert_eq!(samples(&s.poll(4)), [(7, 10, 2, 20)]);
    // A slot whose key is seen before its peer (a claim under way, on a CPU that reorders
    // stores) is left for the next sample, then counted once.
    let mut early = slot(4444, [10, 0, 0, 4], 1);
    early.bytes.daddr = [0; 16];
    put(&s, ib, early);
    assert!(s.poll(5).is_empty());
    put(&s, ib, slot(4444, [10, 0, 0, 4], 1));
    assert_eq!(samples(&s.poll(6)), [(4444, 10, 1, 10)]);
    assert!(s.poll(7).is_empty());
    // A pair whose peer really reads as zero is counted at the second sample, not lost.
    let mut zero = slot(5, [0, 0, 0, 0], 3);
    zero.bytes.daddr = [0; 16];
    put(&s, ib, zero);
    assert!(s.poll(8).is_empty());
    assert_eq!(samples(&s.poll(9)), [(5, 0, 3, 30)]);
    assert!(s.poll(10).is_empty());
}

#[test]
fn socket_slots_spread_processes_and_peers() {
    let n = SockSlots::anonymous().expect("anonymous mapping").len();
    let distinct = |v: Vec<usize>| {
        v.into_iter()
            .collect::<std::collections::HashSet<_>>()
            .len()
    };
    // 256 processes of one host towards one peer, one process towards 256 peers, and 256
    // IPv6 peers differing in their last bytes only: few pairs share a slot.
    let by_process = distinct((1000..1256).map(|t| index(t, [127, 0, 0, 1], n)).collect());
    let by_peer = distinct((0..=255).map(|b| index(4242, [10, 0, 1, b], n)).collect());
    // As many loopback peers of one process as slots: about 1 - 1/e of the slots taken, as
    // for a random spread (the root host test sends to these).
    let loopback = distinct(
        (0..n)
            .map(|i| index(4242, [127, 0, 1 + (i / 250) as u8, 1 + (i % 250) as u8], n))
            .collect(),
    );
    assert!(loopback >= n * 6 / 10, "{n} peers in only {loopback} slots");
    let v6 = distinct(
        (0..256u64)
            .map(|b| sock_slot(4242, [0x20_01_0d_b8, b << 56], n as u32) as usize)
            .collect(),
    );
    for (what, d) in [("processes", by_process), ("peers", by_peer), ("v6", v6)] {
        assert!(d >= 200, "256 {what} in only {d} of {n} slots");
    }
}

#[test]
fn one_pair_summed_in_the_hash_and_in_a_slot_is_one_record() {
    let mut c = TcpChanges::default();
    let d = |peer, calls| slot(7, peer, calls).bytes;
    c.add(7, d([10, 0, 0, 1], 2));
    c.add(7, d([10, 0, 0, 2], 1));
    c.add(7, d([10, 0, 0, 1], 3));
    c.add(8, d([10, 0, 0, 1], 0));
    let records: Vec<_> = c.records(1).collect();
    let mut got = samples(&records);
    got.iter_mut().for_each(|g| g.1 = 0);
    assert_eq!(got, [(7, 0, 1, 10), (7, 0, 5, 50)]);
    let peers: Vec<u8> = records
        .iter()
        // SAFETY: whole TcpBytesSample records (checked by `samples`), read unaligned.
        .map(|r| unsafe { std::ptr::read_unaligned(r.as_ptr().cast::<TcpBytesSample>()) })
        .map(|s| s.bytes.daddr[3])
        .collect();
    assert_eq!(peers, [1, 2], "in the order first seen");
}
