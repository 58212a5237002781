//! Reading kernel memory at BTF-resolved offsets. Every read is a `bpf_probe_read_kernel`, so a
//! bad pointer yields `None`, never a fault.

use aya_ebpf::helpers::{bpf_probe_read_kernel, bpf_probe_read_kernel_buf};
use rdmatrace_common::limits::UNRESOLVED;

/// Reads a `T` at `base + off`; `None` when the pointer is NULL, the offset is unresolved on this
/// kernel, or the read faults.
#[inline(always)]
pub fn field<T>(base: u64, off: u32) -> Option<T> {
    if base == 0 || off == UNRESOLVED {
        return None;
    }
    // SAFETY: bpf_probe_read_kernel copies through the kernel's fault-tolerant path; the
    // pointer is never dereferenced directly.
    unsafe { bpf_probe_read_kernel((base + u64::from(off)) as *const T).ok() }
}

/// Copies `dst.len()` bytes at `base + off` into `dst`; leaves `dst` untouched on failure.
#[inline(always)]
pub fn bytes(base: u64, off: u32, dst: &mut [u8]) -> bool {
    if base == 0 || off == UNRESOLVED {
        return false;
    }
    // SAFETY: as in `field`: a checked kernel copy into a buffer we own.
    unsafe { bpf_probe_read_kernel_buf((base + u64::from(off)) as *const u8, dst).is_ok() }
}
