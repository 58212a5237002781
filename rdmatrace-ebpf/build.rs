//! Rebuild the programs when bpf-linker changes (a different LLVM can emit different code).
fn main() {
    // aya-build passes `--cfg bpf_target_arch="..."` (the target arch of the rdmatrace build);
    // `src/regs.rs` supports these two.
    println!("cargo::rustc-check-cfg=cfg(bpf_target_arch, values(\"x86_64\", \"aarch64\"))");
    if let Ok(linker) = which::which("bpf-linker") {
        println!("cargo:rerun-if-changed={}", linker.display());
    }
}
