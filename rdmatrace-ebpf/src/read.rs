//! Reading kernel memory at BTF-resolved offsets. Every read is a `bpf_probe_read_kernel`, so a
//! bad pointer yields `None`, never a fault.

use aya_ebpf::{
    helpers::{bpf_probe_read_kernel, bpf_probe_read_kernel_buf},
    programs::ProbeContext,
};
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

/// Argument `n` of the probed call. The position comes from BTF at run time, but the verifier
/// only allows constant offsets into the context: read every register argument at a constant
/// offset, then pick from the stack copy.
#[inline(always)]
pub fn arg(ctx: &ProbeContext, n: u32) -> u64 {
    if n == UNRESOLVED {
        return 0;
    }
    let all: [u64; 8] = [
        ctx.arg::<u64>(0).unwrap_or(0),
        ctx.arg::<u64>(1).unwrap_or(0),
        ctx.arg::<u64>(2).unwrap_or(0),
        ctx.arg::<u64>(3).unwrap_or(0),
        ctx.arg::<u64>(4).unwrap_or(0),
        ctx.arg::<u64>(5).unwrap_or(0),
        0,
        0,
    ];
    let all = core::hint::black_box(all);
    all[(n & 7) as usize]
}
