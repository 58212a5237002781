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

/// The field at placeholder `field` of the typed pointer argument at placeholder `arg` of a
/// tracing program's context `args`; `None` when the pointer is null.
///
/// # Safety
/// As [`load`], for both loads.
#[inline(always)]
pub unsafe fn arg_field<T: Copy>(args: *const u8, arg: i16, field: i16) -> Option<T> {
    // SAFETY: the caller's.
    unsafe {
        let p = load::<u64>(args, arg);
        if p == 0 {
            return None;
        }
        Some(load::<T>(p as *const u8, field))
    }
}
