//! Register access for kprobe, kretprobe and uprobe programs: the one place that knows which
//! register holds what on each architecture. Probes never touch `pt_regs` themselves.
//!
//! The architecture is the kernel's, passed by aya-build as `--cfg bpf_target_arch="..."` (the
//! target arch of the `rdmatrace` build that embeds these programs): `x86_64` (tested, in the
//! lab) and `aarch64` (Grace hosts; built by `cargo xtask cross`, not run here). aya-ebpf's own
//! `ProbeContext::arg` / `RetProbeContext::ret` already follow the calling convention of that
//! cfg; what they do not cover (the instruction pointer and the return address at a uprobe, and
//! BTF-positioned arguments, which the verifier only lets us read at constant offsets) is here.
//! Raw tracepoint arguments (`RawTracePointContext::arg`) are not registers: they are the same on
//! every architecture and are read where they are used.

#[cfg(not(any(bpf_target_arch = "x86_64", bpf_target_arch = "aarch64")))]
compile_error!(
    "rdmatrace-ebpf supports bpf_target_arch x86_64 and aarch64 only; build it through \
     rdmatrace/build.rs (aya-build sets the cfg from the target arch)"
);

use aya_ebpf::{
    programs::{ProbeContext, RetProbeContext},
    Argument,
};
use rdmatrace_common::limits::UNRESOLVED;

#[cfg(bpf_target_arch = "x86_64")]
use core::mem::MaybeUninit;

/// Argument `n` (0-based) of the probed call, at a position known when the program is written.
#[inline(always)]
pub fn arg_at(ctx: &ProbeContext, n: usize) -> Option<u64> {
    ctx.arg::<u64>(n)
}

/// Argument `n` of the probed call, its position resolved from BTF at load time (`UNRESOLVED`
/// reads 0). The verifier only allows constant offsets into the context: read every register
/// argument at a constant offset, then pick from the stack copy. x86_64 passes six arguments in
/// registers (rdi, rsi, rdx, rcx, r8, r9): positions 6 and 7 read 0.
#[cfg(bpf_target_arch = "x86_64")]
#[inline(always)]
pub fn arg(ctx: &ProbeContext, n: u32) -> u64 {
    if n == UNRESOLVED {
        return 0;
    }
    let mut slot = MaybeUninit::<[u64; 8]>::uninit();
    let p = slot.as_mut_ptr().cast::<u64>();
    // SAFETY: eight aligned writes, one per element of the array, initialize it whole. The two
    // zeros are volatile: as plain stores side by side (an array literal's) they became a call
    // to the byte-wise `memset` (see `zero`), on every packet.
    let all = unsafe {
        p.write(ctx.arg::<u64>(0).unwrap_or(0));
        p.add(1).write(ctx.arg::<u64>(1).unwrap_or(0));
        p.add(2).write(ctx.arg::<u64>(2).unwrap_or(0));
        p.add(3).write(ctx.arg::<u64>(3).unwrap_or(0));
        p.add(4).write(ctx.arg::<u64>(4).unwrap_or(0));
        p.add(5).write(ctx.arg::<u64>(5).unwrap_or(0));
        p.add(6).write_volatile(0);
        p.add(7).write_volatile(0);
        slot.assume_init_mut()
    };
    let all = core::hint::black_box(all);
    all[(n & 7) as usize]
}

/// As above; aarch64 passes eight arguments in registers (x0..x7).
#[cfg(bpf_target_arch = "aarch64")]
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
        ctx.arg::<u64>(6).unwrap_or(0),
        ctx.arg::<u64>(7).unwrap_or(0),
    ];
    let all = core::hint::black_box(all);
    all[(n & 7) as usize]
}

/// The probed function's return value (a kretprobe's return register: rax, x0).
#[inline(always)]
pub fn ret<T: Argument>(ctx: &RetProbeContext) -> T {
    ctx.ret::<T>()
}

/// At a uprobe on a function's entry: the instruction pointer, i.e. the function's first
/// instruction (rip, pc).
#[inline(always)]
pub fn uprobe_entry_ip(ctx: &ProbeContext) -> u64 {
    // SAFETY: the kernel hands a uprobe program a valid `pt_regs` of the probed task; read only.
    let regs = unsafe { &*ctx.regs };
    #[cfg(bpf_target_arch = "x86_64")]
    let ip = regs.rip;
    #[cfg(bpf_target_arch = "aarch64")]
    let ip = regs.pc;
    ip
}

/// At a uprobe on a function's entry: the caller's return address, 0 when it cannot be read.
/// x86_64: `call` pushed it, so it is the word at the stack pointer (user memory, read with
/// `bpf_probe_read_user`). aarch64: `bl` put it in the link register x30, which the function's
/// prologue has not saved yet.
#[inline(always)]
pub fn uprobe_return_address(ctx: &ProbeContext) -> u64 {
    // SAFETY: as in `uprobe_entry_ip`.
    let regs = unsafe { &*ctx.regs };
    #[cfg(bpf_target_arch = "x86_64")]
    let ret = {
        let sp = regs.rsp as *const u64;
        // SAFETY: a checked copy from user memory: a bad stack pointer gives an error, no fault.
        unsafe { aya_ebpf::helpers::bpf_probe_read_user(sp) }.unwrap_or(0)
    };
    #[cfg(bpf_target_arch = "aarch64")]
    let ret = regs.regs[30];
    ret
}
