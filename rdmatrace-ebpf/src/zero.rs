//! All-zero values and copies without `memset`/`memcpy`. On the bpf target LLVM turns the zeroing
//! of a struct (`core::mem::zeroed`, `[0; N]`) and the copy of a byte array into calls to the
//! byte-wise `memset`/`memcpy` linked into the object: one loop turn per byte each time a program
//! runs, and the verifier walks every turn of every call on every path (most of what it verified
//! in the largest programs). These write 8-byte stores instead, volatile so that LLVM cannot
//! fold them back into a `memset`.

use core::mem::{size_of, MaybeUninit};

/// Stack storage for a `T`, aligned for 8-byte stores.
#[repr(C, align(8))]
pub struct Slot<T>(MaybeUninit<T>);

impl<T> Slot<T> {
    #[inline(always)]
    pub const fn new() -> Self {
        Self(MaybeUninit::uninit())
    }

    /// Zeroes the slot and returns its value.
    ///
    /// # Safety
    /// All-zero must be a valid `T` (the integer-only `#[repr(C)]` records and map values).
    #[inline(always)]
    pub unsafe fn zeroed(&mut self) -> &mut T {
        let p = self.0.as_mut_ptr().cast::<u8>();
        // SAFETY: every store is inside the slot (offsets below `size_of::<T>()`), at an offset
        // aligned for its width (the slot is 8-aligned); the caller vouches for the zero value.
        unsafe {
            zero_bytes(p, size_of::<T>());
            self.0.assume_init_mut()
        }
    }
}

/// Writes `len` zero bytes at `p` (8-aligned), widest stores first.
///
/// # Safety
/// `p` must be valid for `len` bytes of writes and 8-aligned.
#[inline(always)]
pub unsafe fn zero_bytes(p: *mut u8, len: usize) {
    let mut off = 0;
    // SAFETY: as the caller guarantees; each store stays below `len` and is aligned for its
    // width (`off` only grows by the widths, largest first).
    unsafe {
        while off + 8 <= len {
            p.add(off).cast::<u64>().write_volatile(0);
            off += 8;
        }
        if off + 4 <= len {
            p.add(off).cast::<u32>().write_volatile(0);
            off += 4;
        }
        if off + 2 <= len {
            p.add(off).cast::<u16>().write_volatile(0);
            off += 2;
        }
        if off < len {
            p.add(off).write_volatile(0);
        }
    }
}

/// The current task's command name, written straight into `dst` (zeroed by the kernel if there
/// is no current task): aya's `bpf_get_current_comm` returns an array, which costs a `memset`
/// and a `memcpy` each time.
#[inline(always)]
pub fn comm_into(dst: &mut [u8; 16]) {
    // SAFETY: the helper writes at most `dst.len()` bytes into `dst`.
    unsafe {
        aya_ebpf::helpers::generated::bpf_get_current_comm(
            dst.as_mut_ptr().cast(),
            dst.len() as u32,
        );
    }
}

/// Copies `len` bytes (a multiple of 4) from `src` to `dst` as 4-byte words: an array copy
/// would be a call to the byte-wise `memcpy`.
///
/// # Safety
/// Both pointers must be 4-aligned and valid for `len` bytes, and must not overlap.
#[inline(always)]
pub unsafe fn copy_words(dst: *mut u8, src: *const u8, len: usize) {
    let mut off = 0;
    // SAFETY: as the caller guarantees; every access is a whole aligned word below `len`.
    unsafe {
        while off + 4 <= len {
            let w = src.add(off).cast::<u32>().read_volatile();
            dst.add(off).cast::<u32>().write_volatile(w);
            off += 4;
        }
    }
}
