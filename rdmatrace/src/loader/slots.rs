//! The per-QP traffic slots (`QP_SLOTS`, see `rdmatrace_common::event::QpSlot`), read through
//! a shared mapping of the array: a sample reads every slot without a system call per QP, and
//! frees the slots of destroyed QPs.

use std::{
    io,
    os::fd::{AsFd as _, AsRawFd as _},
    ptr::NonNull,
};

use aya::maps::{Map, MapData};
use rdmatrace_common::{event::QpSlot, limits::QP_SLOTS};

/// The slots array, mapped into this process; unmapped on drop.
pub struct QpSlots {
    base: NonNull<QpSlot>,
    len: usize,
}

// SAFETY: the mapping is plain shared memory, valid until drop wherever the owner moves; every
// access is a volatile read or write of whole integers (the kernel programs write it too).
unsafe impl Send for QpSlots {}

impl QpSlots {
    /// Maps the object's `QP_SLOTS` array (made mappable by the kernel program's definition).
    pub fn map(map: &Map) -> io::Result<QpSlots> {
        let Map::Array(data) = map else {
            return Err(io::Error::other("QP_SLOTS is not an array"));
        };
        Self::map_data(data)
    }

    fn map_data(data: &MapData) -> io::Result<QpSlots> {
        let len = QP_SLOTS as usize;
        let bytes = len * std::mem::size_of::<QpSlot>();
        // SAFETY: a new shared mapping of the map's fd (no address hint), of the array's own
        // size: the kernel checks both and refuses a map not created mappable. The mapping
        // holds its own reference to the map.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                data.fd().as_fd().as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let base = NonNull::new(p.cast::<QpSlot>()).ok_or_else(|| io::Error::other("null map"))?;
        Ok(QpSlots { base, len })
    }

    /// Slots in private memory, for tests to play the kernel's part.
    #[cfg(test)]
    pub fn anonymous() -> io::Result<QpSlots> {
        let len = QP_SLOTS as usize;
        // SAFETY: a new private anonymous mapping (zero-filled) of the array's size.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len * std::mem::size_of::<QpSlot>(),
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let base = NonNull::new(p.cast::<QpSlot>()).ok_or_else(|| io::Error::other("null map"))?;
        Ok(QpSlots { base, len })
    }

    /// Writes slot `i` whole, as a kernel program would (tests).
    #[cfg(test)]
    pub fn put(&self, i: usize, slot: QpSlot) {
        assert!(i < self.len);
        // SAFETY: i is within the mapping (checked).
        unsafe { std::ptr::write_volatile(self.base.as_ptr().add(i), slot) }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Slot `i` as it is now (the key read first: a slot the kernel is claiming has its
    /// identity written before its key).
    pub fn get(&self, i: usize) -> Option<QpSlot> {
        if i >= self.len {
            return None;
        }
        // SAFETY: i is within the mapping, whose slots are 8-byte aligned QpSlot values of
        // integers only; read whole, volatile, as other CPUs write them.
        unsafe {
            let s = self.base.as_ptr().add(i);
            let key = std::ptr::read_volatile(&raw const (*s).key);
            if key == 0 {
                return Some(QpSlot {
                    key,
                    ..std::mem::zeroed()
                });
            }
            let traffic = std::ptr::read_volatile(&raw const (*s).traffic);
            Some(QpSlot { key, traffic })
        }
    }

    /// Frees slot `i` (its QP destroyed, its totals read): zeroed, the key last, so the
    /// kernel only claims it once it is clean.
    pub fn free(&self, i: usize) {
        if i >= self.len {
            return;
        }
        // SAFETY: as in `get`; the QP of this slot is gone, so no program adds to it.
        unsafe {
            let s = self.base.as_ptr().add(i);
            std::ptr::write_volatile(&raw mut (*s).traffic, std::mem::zeroed());
            std::sync::atomic::fence(std::sync::atomic::Ordering::Release);
            std::ptr::write_volatile(&raw mut (*s).key, 0);
        }
    }
}

/// The per-QP traffic slots, mapped, when the programs can use them: a slot is freed only
/// through the QP destroy probe, so without it every packet goes through the hash map.
pub(super) fn for_programs(ebpf: &aya::Ebpf, report: &mut super::AttachReport) -> Option<QpSlots> {
    let frees = report
        .attached()
        .any(|p| p.spec.program == "qp_destroy_enter");
    let rxe = report.attached().any(|p| p.spec.program == "rxe_xmit");
    if !(frees && rxe) {
        return None;
    }
    match ebpf.map("QP_SLOTS").map(QpSlots::map) {
        Some(Ok(s)) => Some(s),
        Some(Err(e)) => {
            report.notes.push(format!(
                "per-QP traffic summed in the hash map only (slower per packet): QP_SLOTS \
                 could not be mapped: {e}"
            ));
            None
        }
        None => None,
    }
}

impl Drop for QpSlots {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `map_data`, of that size, unmapped once.
        unsafe {
            libc::munmap(
                self.base.as_ptr().cast(),
                self.len * std::mem::size_of::<QpSlot>(),
            );
        }
    }
}
