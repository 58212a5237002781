//! The per-process TCP byte slots (`SOCK_SLOTS`, see `rdmatrace_common::event::SockSlot`) in
//! the sampler: each slot that moved gives its change, like a `TCP_BYTES` entry; a slot whose
//! process is gone is freed once its last totals are read.

use std::{collections::HashMap, path::Path};

use rdmatrace_common::event::{sock_slot_tgid, SockSlot};

use super::{tcp_delta, Sampler, TcpChanges};
use crate::loader::slots::SockSlots;

/// The slots and the totals each held at the previous sample.
pub(super) struct SockSlotReader {
    slots: SockSlots,
    prev: HashMap<usize, SockSlot>,
    /// Whether a process exists, by process id (`/proc/TGID`); tests stand in for the host.
    alive: fn(u32) -> bool,
}

/// Whether process `tgid` exists on this host.
fn process_exists(tgid: u32) -> bool {
    Path::new(&format!("/proc/{tgid}")).exists()
}

impl Sampler {
    /// Adds the per-process TCP byte slots, baselined like the maps.
    pub(super) fn with_sock_slots(&mut self, slots: SockSlots) {
        self.with_sock_slots_checked(slots, process_exists);
    }

    /// [`Sampler::with_sock_slots`] with `alive` telling which processes exist.
    pub(super) fn with_sock_slots_checked(&mut self, slots: SockSlots, alive: fn(u32) -> bool) {
        let mut reader = SockSlotReader {
            slots,
            prev: HashMap::new(),
            alive,
        };
        reader.poll(&mut TcpChanges::default());
        self.sock_slots = Some(reader);
    }
}

/// Whether `a` and `b` are the same process and peer.
fn same_pair(a: &SockSlot, b: &SockSlot) -> bool {
    a.key == b.key && a.bytes.daddr == b.bytes.daddr
}

impl SockSlotReader {
    /// Adds to `changes` what each slot's pair did since the previous call. A slot that did
    /// not move is checked for its process: when that is gone, the slot is read once more (a
    /// last call may have come between) and freed.
    pub(super) fn poll(&mut self, changes: &mut TcpChanges) {
        let mut gone: HashMap<u32, bool> = HashMap::new();
        for i in 0..self.slots.len() {
            let Some(mut now) = self.slots.get(i) else {
                self.prev.remove(&i);
                continue;
            };
            let prev = self.prev.get(&i).filter(|p| same_pair(p, &now)).copied();
            let tgid = sock_slot_tgid(now.key);
            let free = prev.is_some_and(|p| p.bytes == now.bytes)
                && *gone.entry(tgid).or_insert_with(|| !(self.alive)(tgid));
            if free {
                // Only user space frees a slot, so it still holds this pair.
                now = self.slots.get(i).unwrap_or(now);
            }
            changes.add(tgid, tcp_delta(prev.as_ref().map(|p| &p.bytes), now.bytes));
            if free {
                self.slots.free(i);
                self.prev.remove(&i);
            } else {
                self.prev.insert(i, now);
            }
        }
    }
}

#[cfg(test)]
#[path = "sock_slot_tests.rs"]
mod tests;
