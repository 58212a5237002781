//! The sampler over the per-QP traffic slots, the kernel's part played by writing the slots.

use rdmatrace_common::event::{qp_slot, QpIdent, QpSlot};

use super::{tests::traffic, *};

/// The QP traffic samples in `records`: (qpn, tx packets, tx bytes, rx packets).
fn traffic_samples(records: &[Vec<u8>]) -> Vec<(u32, u64, u64, u64)> {
    records
        .iter()
        .map(|r| {
            assert_eq!(r.len(), std::mem::size_of::<QpTrafficSample>());
            // SAFETY: a whole QpTrafficSample's bytes (length checked), read unaligned.
            let s: QpTrafficSample = unsafe { std::ptr::read_unaligned(r.as_ptr().cast()) };
            assert_eq!(s.header.kind, EventKind::QpTraffic as u32);
            let t = s.traffic;
            (t.qp.qpn, t.tx_packets, t.tx_bytes, t.rx_packets)
        })
        .collect()
}

fn zero_traffic() -> QpTraffic {
    QpTraffic {
        qp: QpIdent {
            dev: [0; 64],
            qpn: 0,
            qp_type: 0,
        },
        tx_packets: 0,
        tx_bytes: 0,
        rx_packets: 0,
        rx_bytes: 0,
    }
}

#[test]
fn qp_slots_are_sampled_as_changes_and_freed_after_their_last_totals() {
    let slots = QpSlots::anonymous().expect("anonymous mapping");
    let (a, b) = (0xffff_8880_1234_5000_u64, 0xffff_8880_1234_9000_u64);
    let n = slots.len() as u32;
    let (ia, ib) = (qp_slot(a, n) as usize, qp_slot(b, n) as usize);
    assert_ne!(ia, ib, "two QPs of this test share a slot");
    // A slot claimed before the sampler starts: its totals so far are the baseline.
    slots.put(
        ia,
        QpSlot {
            key: a,
            traffic: traffic(0x11, 40),
        },
    );
    let mut s = Sampler::with_sources(None, None, None, None);
    s.with_slots(slots);
    let put = |s: &Sampler, i, slot| s.slots.as_ref().expect("slots").put(i, slot);
    put(
        &s,
        ia,
        QpSlot {
            key: a,
            traffic: traffic(0x11, 45),
        },
    );
    put(
        &s,
        ib,
        QpSlot {
            key: b,
            traffic: traffic(0x12, 3),
        },
    );
    let mut got = traffic_samples(&s.poll(1));
    got.sort();
    assert_eq!(got, [(0x11, 5, 500, 0), (0x12, 3, 300, 1)]);
    assert!(s.poll(2).is_empty(), "nothing moved");
    // QP a is destroyed after two more packets: its last change is reported, its slot freed.
    put(
        &s,
        ia,
        QpSlot {
            key: a | SLOT_FREED,
            traffic: traffic(0x11, 47),
        },
    );
    assert_eq!(traffic_samples(&s.poll(3)), [(0x11, 2, 200, 0)]);
    let slots = s.slots.as_ref().expect("slots");
    assert_eq!(slots.get(ia), None);
    assert_eq!(
        slots.raw(ia),
        QpSlot {
            key: 0,
            traffic: zero_traffic()
        }
    );
    assert!(s.poll(4).is_empty());
    // A new QP at the same address claims the freed slot: all of its traffic is new.
    put(
        &s,
        ia,
        QpSlot {
            key: a,
            traffic: traffic(0x13, 2),
        },
    );
    assert_eq!(traffic_samples(&s.poll(5)), [(0x13, 2, 200, 1)]);
}

#[test]
fn a_qp_slot_seen_with_its_key_before_its_identity_waits_one_sample() {
    let slots = QpSlots::anonymous().expect("anonymous mapping");
    let a = 0xffff_8880_1234_5000_u64;
    let ia = qp_slot(a, slots.len() as u32) as usize;
    let mut s = Sampler::with_sources(None, None, None, None);
    s.with_slots(slots);
    let put = |s: &Sampler, slot| s.slots.as_ref().expect("slots").put(ia, slot);
    // The key is there, the device name not yet (a CPU that showed the key's store first).
    let mut early = traffic(0x11, 3);
    early.qp.dev = [0; 64];
    early.qp.qpn = 0;
    put(
        &s,
        QpSlot {
            key: a,
            traffic: early,
        },
    );
    assert!(s.poll(1).is_empty(), "held, not sampled without its QP");
    // By the next sample the identity is there: every packet so far, under its QP.
    put(
        &s,
        QpSlot {
            key: a,
            traffic: traffic(0x11, 4),
        },
    );
    assert_eq!(traffic_samples(&s.poll(2)), [(0x11, 4, 400, 1)]);
    // A QP whose name never reads (the kernel's read of it failed) is taken at the second look.
    let b = 0xffff_8880_1234_9000_u64;
    let ib = qp_slot(b, s.slots.as_ref().expect("slots").len() as u32) as usize;
    assert_ne!(ia, ib, "two QPs of this test share a slot");
    let mut nameless = traffic(0x12, 2);
    nameless.qp.dev = [0; 64];
    let slots = s.slots.as_ref().expect("slots");
    slots.put(
        ib,
        QpSlot {
            key: b,
            traffic: nameless,
        },
    );
    assert!(s.poll(3).is_empty());
    assert_eq!(traffic_samples(&s.poll(4)), [(0x12, 2, 200, 1)]);
}
