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
