//! rdmatrace kernel programs. Each probe area lives in `probes/<area>.rs`; the maps every area
//! shares are in `maps.rs`, the common event plumbing (header, filter, output) in `emit.rs`,
//! kernel memory reads in `read.rs` and every per-architecture register access in `regs.rs`.
#![no_std]
#![no_main]
// `maps::add`: the atomic add intrinsic (the bpf target has no `AtomicU64::fetch_add`).
#![feature(core_intrinsics)]
#![allow(internal_features)]

mod emit;
mod maps;
mod probes;
mod read;
mod regs;
mod typed;
mod zero;

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

/// GPL-compatible: `bpf_probe_read_kernel` and friends are GPL-only helpers.
#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 13] = *b"Dual MIT/GPL\0";
