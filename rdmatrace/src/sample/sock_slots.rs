//! The per-process TCP byte slots (`SOCK_SLOTS`, see `rdmatrace_common::event::SockSlot`) in
//! the sampler: each slot that moved gives its change, like a `TCP_BYTES` entry (a process's
//! sockets towards one peer summed); a slot whose socket closed or whose process is gone is
//! freed once its last totals are read.

use std::{collections::HashMap, path::Path};

use rdmatrace_common::event::{sock_slot_family, sock_slot_tgid, SockSlot, SOCK_CLOSED};

use super::{claims::ClaimWait, tcp_delta, Sampler, TcpChanges};
use crate::loader::slots::SockSlots;

/// The slots and the totals each held at the previous sample.
pub(super) struct SockSlotReader {
    slots: SockSlots,
    prev: HashMap<usize, SockSlot>,
    /// Slots seen as claims under way ([`claiming`]).
    claims: ClaimWait,
    /// Whether a process is known to be gone, by process id (`/proc/TGID`); tests stand in
    /// for the host.
    gone: fn(u32) -> bool,
}

/// Whether process `tgid` is known to be gone from this host.
fn process_gone(tgid: u32) -> bool {
    crate::pending::process_gone(Path::new("/proc"), tgid)
}

/// Never gone: where /proc cannot tell (see [`crate::pending::proc_shows_kernel_tasks`]).
fn never_gone(_: u32) -> bool {
    false
}

impl Sampler {
    /// Adds the per-process TCP byte slots, baselined like the maps. A closed socket's slot is
    /// freed everywhere; a gone process's only where /proc names every process by the kernel's
    /// ids (elsewhere its open sockets' slots stay, said once, and sockets beyond the slots go
    /// on in the hash).
    pub(super) fn with_sock_slots(&mut self, slots: SockSlots) {
        let gone = match crate::pending::proc_shows_kernel_tasks(Path::new("/proc")) {
            Ok(()) => process_gone as fn(u32) -> bool,
            Err(why) => {
                self.warnings.push(format!(
                    "the TCP byte slots of processes that exited with sockets open are not \
                     freed (sockets go on in the hash map once the slots are taken): this \
                     process {why}"
                ));
                never_gone
            }
        };
        self.with_sock_slots_checked(slots, gone);
    }

    /// [`Sampler::with_sock_slots`] with `gone` telling which processes are known gone.
    pub(super) fn with_sock_slots_checked(&mut self, slots: SockSlots, gone: fn(u32) -> bool) {
        let mut reader = SockSlotReader {
            slots,
            prev: HashMap::new(),
            claims: ClaimWait::default(),
            gone,
        };
        // The baseline frees nothing (no slot has a previous total yet). The hash map's
        // baseline was taken a moment before: a call between the two is in neither.
        reader.poll(&mut TcpChanges::default());
        self.sock_slots = Some(reader);
    }
}

/// Whether `a` and `b` are the same socket, process and peer (the socket closed or not).
fn same_pair(a: &SockSlot, b: &SockSlot) -> bool {
    a.key == b.key && a.sk | SOCK_CLOSED == b.sk | SOCK_CLOSED && a.bytes.daddr == b.bytes.daddr
}

/// Whether the kernel saw the slot's socket close.
fn closed(s: &SockSlot) -> bool {
    s.sk & SOCK_CLOSED != 0
}

/// Whether a slot's key may be seen before the identity written ahead of it (a CPU that orders
/// stores less strictly than x86): a known family with no peer address yet. Read again at the
/// next sample, and taken as it is if it still looks so then. (A TCP socket that moves data
/// has a peer; the family is in the key.)
fn claiming(s: &SockSlot) -> bool {
    sock_slot_family(s.key) != 0 && s.bytes.daddr == [0; 16]
}

impl SockSlotReader {
    /// Adds to `changes` what each slot's pair did since the previous call. A slot that did
    /// not move is freed when its socket closed or its process is gone, read once more first
    /// (a last call may have come between).
    pub(super) fn poll(&mut self, changes: &mut TcpChanges) {
        let mut gone: HashMap<u32, bool> = HashMap::new();
        for i in 0..self.slots.len() {
            let Some(mut now) = self.slots.get(i) else {
                self.prev.remove(&i);
                self.claims.forget(i);
                continue;
            };
            if self.claims.skip(i, now.key, claiming(&now)) {
                continue;
            }
            let prev = self.prev.get(&i).filter(|p| same_pair(p, &now)).copied();
            let tgid = sock_slot_tgid(now.key);
            let free = prev.is_some_and(|p| p.bytes == now.bytes)
                && (closed(&now) || *gone.entry(tgid).or_insert_with(|| (self.gone)(tgid)));
            if free {
                // Only user space frees a slot, so it still holds this pair.
                now = self.slots.get(i).unwrap_or(now);
            }
            let mut delta = tcp_delta(prev.as_ref().map(|p| &p.bytes), now.bytes);
            // The key says the family.
            delta.family = sock_slot_family(now.key);
            changes.add(tgid, delta);
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
