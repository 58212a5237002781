//! Rebuild the programs when bpf-linker changes (a different LLVM can emit different code).
//! Declares the `bpf_target_arch` cfg that `src/regs.rs` switches on.
fn main() {
    // aya-build passes `--cfg bpf_target_arch="..."` (the target arch of the rdmatrace build).
    // Checked on its own (`cargo check`, rust-analyzer), the crate gets the host's arch, as
    // aya-ebpf does for itself.
    println!("cargo::rustc-check-cfg=cfg(bpf_target_arch, values(\"x86_64\", \"aarch64\"))");
    println!("cargo:rerun-if-env-changed=CARGO_CFG_BPF_TARGET_ARCH");
    if std::env::var_os("CARGO_CFG_BPF_TARGET_ARCH").is_none() {
        let host = std::env::var("HOST").unwrap_or_default();
        let arch = host.split('-').next().unwrap_or_default();
        println!("cargo:rustc-cfg=bpf_target_arch=\"{arch}\"");
    }
    if let Ok(linker) = which::which("bpf-linker") {
        println!("cargo:rerun-if-changed={}", linker.display());
    }
}
