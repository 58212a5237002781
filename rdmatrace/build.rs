//! Builds the kernel programs (`rdmatrace-ebpf`) for the bpf target with nightly + bpf-linker;
//! `cargo xtask bootstrap` installs both. `AYA_BUILD_SKIP=1` skips it (docs, clippy).
use aya_build::{Package, Toolchain};

fn main() -> anyhow::Result<()> {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../rdmatrace-ebpf");
    aya_build::build_ebpf(
        [Package {
            name: "rdmatrace-ebpf",
            root_dir: root,
            ..Default::default()
        }],
        Toolchain::Nightly,
    )
}
