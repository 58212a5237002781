//! Slot arrays the kernel programs count in (`QP_SLOTS`, see
//! `rdmatrace_common::event::QpSlot`; `SOCK_SLOTS`, see `SockSlot`), read through a shared
//! mapping of the array: a sample reads every slot without a system call per entry, and frees
//! the slots whose owner is gone.

use std::{
    io,
    marker::PhantomData,
    os::fd::{AsFd as _, AsRawFd as _},
    ptr::NonNull,
};

use aya::maps::{Map, MapData};
use rdmatrace_common::{
    event::{QpSlot, SockSlot},
    limits::{QP_SLOTS, SOCK_SLOTS},
};

/// A value of a slot array: a `u64` key first (0: free), then integers only.
///
/// # Safety
/// `#[repr(C)]`, 8-aligned, its size a multiple of 8, a `u64` key at offset 0, and every bit
/// pattern a valid value.
pub unsafe trait SlotValue: Copy {
    /// The array's map name and number of slots.
    const MAP: &'static str;
    const COUNT: u32;
    fn set_key(&mut self, key: u64);
}

// SAFETY: `#[repr(C)]` integers only (sizes asserted in rdmatrace-common), `key: u64` first.
unsafe impl SlotValue for QpSlot {
    const MAP: &'static str = "QP_SLOTS";
    const COUNT: u32 = QP_SLOTS;
    fn set_key(&mut self, key: u64) {
        self.key = key;
    }
}

// SAFETY: as for `QpSlot`.
unsafe impl SlotValue for SockSlot {
    const MAP: &'static str = "SOCK_SLOTS";
    const COUNT: u32 = SOCK_SLOTS;
    fn set_key(&mut self, key: u64) {
        self.key = key;
    }
}

/// A slot array, mapped into this process; unmapped on drop.
pub struct Slots<T: SlotValue> {
    base: NonNull<T>,
    len: usize,
    _values: PhantomData<T>,
}

/// The per-QP traffic slots.
pub type QpSlots = Slots<QpSlot>;
/// The per-process TCP byte slots.
pub type SockSlots = Slots<SockSlot>;

// SAFETY: the mapping is plain shared memory, valid until drop wherever the owner moves; every
// access is a volatile read or write of whole integers (the kernel programs write it too).
unsafe impl<T: SlotValue> Send for Slots<T> {}

impl<T: SlotValue> Slots<T> {
    /// Maps the object's array (made mappable by the kernel program's definition).
    pub fn map(map: &Map) -> io::Result<Slots<T>> {
        let Map::Array(data) = map else {
            return Err(io::Error::other(format!("{} is not an array", T::MAP)));
        };
        Self::map_data(data)
    }

    fn bytes() -> usize {
        T::COUNT as usize * std::mem::size_of::<T>()
    }

    fn map_data(data: &MapData) -> io::Result<Slots<T>> {
        // SAFETY: a new shared mapping of the map's fd (no address hint), of the array's own
        // size: the kernel checks both and refuses a map not created mappable. The mapping
        // holds its own reference to the map.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                Self::bytes(),
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                data.fd().as_fd().as_raw_fd(),
                0,
            )
        };
        Self::from_mmap(p)
    }

    fn from_mmap(p: *mut libc::c_void) -> io::Result<Slots<T>> {
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let base = NonNull::new(p.cast::<T>()).ok_or_else(|| io::Error::other("null map"))?;
        Ok(Slots {
            base,
            len: T::COUNT as usize,
            _values: PhantomData,
        })
    }

    /// Slots in private memory, for tests to play the kernel's part.
    #[cfg(test)]
    pub fn anonymous() -> io::Result<Slots<T>> {
        // SAFETY: a new private anonymous mapping (zero-filled) of the array's size.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                Self::bytes(),
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        Self::from_mmap(p)
    }

    /// Writes slot `i` whole, as a kernel program would (tests).
    #[cfg(test)]
    pub fn put(&self, i: usize, slot: T) {
        assert!(i < self.len);
        // SAFETY: i is within the mapping (checked).
        unsafe { std::ptr::write_volatile(self.base.as_ptr().add(i), slot) }
    }

    /// Slot `i` whatever it holds (tests).
    #[cfg(test)]
    pub fn raw(&self, i: usize) -> T {
        assert!(i < self.len);
        // SAFETY: i is within the mapping (checked).
        unsafe { std::ptr::read_volatile(self.base.as_ptr().add(i)) }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Slot `i` as it is now (the key read first: a slot the kernel is claiming has its
    /// identity written before its key), `None` when it is free or out of range.
    pub fn get(&self, i: usize) -> Option<T> {
        if i >= self.len {
            return None;
        }
        // SAFETY: i is within the mapping, whose slots are 8-byte aligned `T` values of
        // integers only, the key first (`SlotValue`); read whole, volatile, as other CPUs
        // write them.
        unsafe {
            let s = self.base.as_ptr().add(i);
            let key = std::ptr::read_volatile(s.cast::<u64>());
            if key == 0 {
                return None;
            }
            std::sync::atomic::fence(std::sync::atomic::Ordering::Acquire);
            let mut v = std::ptr::read_volatile(s);
            v.set_key(key);
            Some(v)
        }
    }

    /// Frees slot `i` (its owner gone or, for a socket's slot, its socket closed; its totals
    /// read): zeroed, the key last, so the kernel only claims it once it is clean.
    pub fn free(&self, i: usize) {
        if i >= self.len {
            return;
        }
        // SAFETY: as in `get` (the value's size a multiple of 8); the owner of this slot is
        // gone (a closed socket's slot matches no socket), so no program adds to it.
        unsafe {
            let words = self.base.as_ptr().add(i).cast::<u64>();
            for w in 1..std::mem::size_of::<T>() / 8 {
                std::ptr::write_volatile(words.add(w), 0);
            }
            std::sync::atomic::fence(std::sync::atomic::Ordering::Release);
            std::ptr::write_volatile(words, 0);
        }
    }
}

/// The slot arrays the programs may count in, mapped, and the config told which.
pub(super) fn mapped(
    ebpf: &aya::Ebpf,
    report: &mut super::AttachReport,
    cfg: &mut rdmatrace_common::config::ProbeConfig,
) -> (Option<QpSlots>, Option<SockSlots>) {
    let qp = for_programs(ebpf, report);
    let sock = for_sockets(ebpf, report);
    cfg.qp_slots = u32::from(qp.is_some());
    cfg.sock_slots = u32::from(sock.is_some());
    (qp, sock)
}

/// The per-QP traffic slots, mapped, when the programs can use them: a slot is freed only
/// through the QP destroy probe, so without it every packet goes through the hash map.
fn for_programs(ebpf: &aya::Ebpf, report: &mut super::AttachReport) -> Option<QpSlots> {
    let frees = report
        .attached()
        .any(|p| p.spec.program == "qp_destroy_enter");
    let rxe = report.attached().any(|p| p.spec.program == "rxe_xmit");
    if !(frees && rxe) {
        return None;
    }
    match ebpf.map(QpSlot::MAP).map(QpSlots::map) {
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

impl<T: SlotValue> Drop for Slots<T> {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `map_data`, of that size, unmapped once.
        unsafe {
            libc::munmap(self.base.as_ptr().cast(), Self::bytes());
        }
    }
}

/// The per-process TCP byte slots, mapped; `None` (every call through the `TCP_BYTES` hash)
/// when the array cannot be mapped (said in the report), or when the TCP state program, which
/// releases a closed socket's slot, is not attached (a socket's slot is matched by its address,
/// which the kernel reuses for new sockets once it is closed).
pub(super) fn for_sockets(ebpf: &aya::Ebpf, report: &mut super::AttachReport) -> Option<SockSlots> {
    if !report.attached().any(|p| p.spec.program == "tcp_state") {
        return None;
    }
    match ebpf.map(SockSlot::MAP).map(SockSlots::map) {
        Some(Ok(s)) => Some(s),
        Some(Err(e)) => {
            report.notes.push(format!(
                "per-process TCP bytes summed in the hash map only (slower per call): \
                 SOCK_SLOTS could not be mapped: {e}"
            ));
            None
        }
        None => None,
    }
}
