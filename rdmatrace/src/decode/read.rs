//! Reading a record's fixed-layout structs and C strings: in place when aligned, copied when not.

use std::mem::size_of;

use rdmatrace_common::event::EventKind;

use super::DecodeError;
use crate::event::CompactString;

/// A `T` read from the front of a record: borrowed in place when the bytes are aligned and
/// long enough (the usual case: ring-buffer records and the recording reader's buffer are
/// 8-aligned), else copied out.
pub(super) enum View<'a, T> {
    Borrowed(&'a T),
    Owned(T),
}

impl<T> std::ops::Deref for View<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        match self {
            View::Borrowed(t) => t,
            View::Owned(t) => t,
        }
    }
}

/// Reads a `T` at the front of `bytes` (which need not be aligned).
pub(super) fn read<T: aya::Pod>(bytes: &[u8], kind: EventKind) -> Result<View<'_, T>, DecodeError> {
    read_grown(bytes, kind, size_of::<T>())
}

/// Like [`read`] for a struct that grew by appended fields: a record of at least `min_len`
/// bytes (the struct's first published size) is accepted, the missing tail reads as zeros.
pub(super) fn read_grown<T: aya::Pod>(
    bytes: &[u8],
    kind: EventKind,
    min_len: usize,
) -> Result<View<'_, T>, DecodeError> {
    if bytes.len() < min_len {
        return Err(DecodeError::Short {
            kind,
            len: bytes.len(),
            need: min_len,
        });
    }
    if bytes.len() < size_of::<T>() {
        let mut full = std::mem::MaybeUninit::<T>::zeroed();
        // SAFETY: `bytes` is shorter than T, so the copy stays inside `full`; the two do not
        // overlap (one is on our stack). T is Pod: all zeros overwritten by any bytes is a
        // valid T.
        return Ok(View::Owned(unsafe {
            std::ptr::copy_nonoverlapping(
                bytes.as_ptr(),
                full.as_mut_ptr().cast::<u8>(),
                bytes.len(),
            );
            full.assume_init()
        }));
    }
    let ptr = bytes.as_ptr().cast::<T>();
    if ptr.is_aligned() {
        // SAFETY: the length is checked above, the pointer is aligned for T, T is Pod (any
        // bit pattern valid) and the reference borrows `bytes`, which outlives it.
        return Ok(View::Borrowed(unsafe { &*ptr }));
    }
    // SAFETY: the length is checked above and T is Pod (any bit pattern valid);
    // read_unaligned copes with the buffer's alignment.
    Ok(View::Owned(unsafe { std::ptr::read_unaligned(ptr) }))
}

/// A NUL-padded C string as UTF-8 (lossy). Kernel names are short ASCII: they stay inline in
/// the [`CompactString`] (no allocation) and skip the lossy conversion's slow path.
pub fn c_str(bytes: &[u8]) -> CompactString {
    let bytes = &bytes[..nul_at(bytes)];
    if bytes.is_ascii() {
        // SAFETY: ASCII is valid UTF-8.
        return CompactString::new(unsafe { std::str::from_utf8_unchecked(bytes) });
    }
    match std::str::from_utf8(bytes) {
        Ok(s) => CompactString::new(s),
        Err(_) => CompactString::from_utf8_lossy(bytes),
    }
}

/// Index of the first NUL in `bytes` (its length when there is none), eight bytes at a time.
pub(super) fn nul_at(bytes: &[u8]) -> usize {
    const LO: u64 = 0x0101_0101_0101_0101;
    const HI: u64 = 0x8080_8080_8080_8080;
    let mut words = bytes.chunks_exact(8);
    let mut at = 0;
    for word in &mut words {
        let Ok(word) = <[u8; 8]>::try_from(word) else {
            break;
        };
        let w = u64::from_le_bytes(word);
        // The lowest set bit marks the first zero byte (bits above it may be false alarms).
        let zero = w.wrapping_sub(LO) & !w & HI;
        if zero != 0 {
            return at + (zero.trailing_zeros() / 8) as usize;
        }
        at += 8;
    }
    let rest = words.remainder();
    at + rest.iter().position(|&b| b == 0).unwrap_or(rest.len())
}
