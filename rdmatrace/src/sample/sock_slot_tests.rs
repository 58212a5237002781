//! The sampler over the per-process TCP byte slots, the kernel's part played by writing the
//! slots, a process known gone by its id (1000 and above).

use rdmatrace_common::event::{
    sock_slot, sock_slot_key, EventKind, TcpBytes, TcpBytesSample, SOCK_CLOSED,
};

use super::*;
use crate::sample::Sampler;

fn gone(tgid: u32) -> bool {
    tgid >= 1000
}

/// Process `tgid`'s slot of a socket towards IPv4 peer `peer` (the socket's address made of
/// both), after `calls` sends of 10 bytes.
fn slot(tgid: u32, peer: [u8; 4], calls: u64) -> SockSlot {
    let mut daddr = [0; 16];
    daddr[..4].copy_from_slice(&peer);
    let mut comm = [0; 16];
    comm[..4].copy_from_slice(b"cli\0");
    SockSlot {
        key: sock_slot_key(tgid, 2),
        sk: 0xffff_8881_0000_0000 | u64::from(tgid) << 12 | u64::from(peer[3]) << 4,
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

/// The slot of a socket whose `skc_hash` is made of `tgid` and `peer` (any distinct value
/// per pair of this test).
fn index(tgid: u32, peer: [u8; 4], n: usize) -> usize {
    sock_slot(tgid.wrapping_mul(31) ^ u32::from_be_bytes(peer), n as u32) as usize
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
fn socket_slots_spread_socket_hashes() {
    let n = SockSlots::anonymous().expect("anonymous mapping").len();
    let distinct = |v: Vec<u32>| {
        v.into_iter()
            .map(|h| sock_slot(h, n as u32))
            .collect::<std::collections::HashSet<_>>()
            .len()
    };
    // Consecutive hashes (the worst case of a multiplicative hash's input) and as many
    // scattered ones as slots (the kernel's `skc_hash` is a keyed hash of the connection):
    // about 1 - 1/e of the slots taken for the latter, as for a random spread.
    let consecutive = distinct((0..256).collect());
    assert!(
        consecutive >= 250,
        "256 consecutive hashes in {consecutive} slots"
    );
    let mut x = 0x1234_5678u32;
    let scattered = distinct(
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                x
            })
            .collect(),
    );
    assert!(
        scattered >= n * 6 / 10,
        "{n} sockets in only {scattered} slots"
    );
}

#[test]
fn a_closed_sockets_slot_is_freed_once_read_and_one_process_sockets_to_one_peer_are_one_record() {
    let slots = SockSlots::anonymous().expect("anonymous mapping");
    let n = slots.len();
    let (ia, ib) = (index(7, [10, 0, 0, 1], n), index(7, [10, 0, 0, 2], n));
    assert_ne!(ia, ib, "two sockets of this test share a slot");
    let mut s = Sampler::with_sources(None, None, None, None);
    s.with_sock_slots_checked(slots, gone);
    let put = |s: &Sampler, i, v| s.sock_slots.as_ref().expect("slots").slots.put(i, v);
    let raw = |s: &Sampler, i| s.sock_slots.as_ref().expect("slots").slots.raw(i);
    // Two sockets of process 7 towards one peer (10.0.0.1), in two slots.
    let mut other = slot(7, [10, 0, 0, 1], 2);
    other.sk += 0x800;
    put(&s, ia, slot(7, [10, 0, 0, 1], 3));
    put(&s, ib, other);
    assert_eq!(samples(&s.poll(1)), [(7, 10, 5, 50)]);
    // The first closes after one more call: counted, then (not moving) freed though its
    // process lives on; the other stays.
    let mut closed = slot(7, [10, 0, 0, 1], 4);
    closed.sk |= SOCK_CLOSED;
    put(&s, ia, closed);
    assert_eq!(samples(&s.poll(2)), [(7, 10, 1, 10)]);
    assert_eq!(
        raw(&s, ia).key,
        sock_slot_key(7, 2),
        "moved: kept a sample more"
    );
    assert!(s.poll(3).is_empty());
    assert_eq!(raw(&s, ia).key, 0, "closed and read: freed");
    assert_eq!(raw(&s, ia).sk, 0);
    assert_eq!(raw(&s, ib), other, "its process lives, its socket is open");
    // A new socket at the freed slot (the kernel reused the closed one's memory): all new.
    put(&s, ia, slot(7, [10, 0, 0, 1], 1));
    assert_eq!(samples(&s.poll(4)), [(7, 10, 1, 10)]);
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
