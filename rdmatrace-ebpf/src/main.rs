//! rdmatrace kernel programs. Each probe area lives in `probes/<area>.rs`; the maps every area
//! shares are in `maps.rs` and the common event plumbing (header, filter, output) in `emit.rs`.
#![no_std]
#![no_main]

mod emit;
mod maps;
mod probes;
mod read;

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

/// GPL-compatible: `bpf_probe_read_kernel` and friends are GPL-only helpers.
#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 13] = *b"Dual MIT/GPL\0";
