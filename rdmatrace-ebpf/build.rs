//! Rebuild the programs when bpf-linker changes (a different LLVM can emit different code).
fn main() {
    if let Ok(linker) = which::which("bpf-linker") {
        println!("cargo:rerun-if-changed={}", linker.display());
    }
}
