//! Loads of BTF-typed programs (fentry, tp_btf) at a placeholder offset
//! (`rdmatrace_common::patch`), which user space sets from BTF before loading the program.

/// A load at `base + off`, `off` a placeholder of `patch` (or a constant offset into the
/// program's context): one `BPF_LDX` with that offset.
///
/// # Safety
/// Only as the verifier allows, after user space has set the offset.
#[inline(always)]
pub unsafe fn load<T: Copy>(base: *const u8, off: i16) -> T {
    // SAFETY: the caller's.
    unsafe { core::ptr::read_volatile(base.offset(off as isize).cast::<T>()) }
}
