//! Builds the kernel programs (`rdmatrace-ebpf`) for the bpf target with nightly + bpf-linker;
//! `cargo xtask bootstrap` installs both. `AYA_BUILD_SKIP=1` skips it (docs, clippy, the fuzz
//! targets): the embedded object is then empty and loading it fails with a clear error.
use aya_build::{Package, Toolchain};

fn main() -> anyhow::Result<()> {
    println!("cargo:rerun-if-env-changed=AYA_BUILD_SKIP");
    if std::env::var_os("AYA_BUILD_SKIP").is_some() {
        let out = std::path::PathBuf::from(std::env::var("OUT_DIR")?).join("rdmatrace-probes");
        if !out.exists() {
            std::fs::write(&out, b"")?;
        }
    }
    // Read when the script runs, not baked in when it is compiled: cargo reuses a compiled
    // build script for another checkout of the same workspace layout in a shared target
    // directory (the bench's previous release), which would then build that checkout's probes.
    let manifest = std::env::var("CARGO_MANIFEST_DIR")?;
    let root = format!("{manifest}/../rdmatrace-ebpf");
    aya_build::build_ebpf(
        [Package {
            name: "rdmatrace-ebpf",
            root_dir: &root,
            ..Default::default()
        }],
        Toolchain::Nightly,
    )
}
