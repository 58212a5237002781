//! One file per subcommand: each picks its sink and wires it to the stage, live (`live`) or
//! over recordings (`crate::replay`).
pub mod doctor;
pub mod export;
pub mod flamegraph;
pub mod live;
pub mod places;
pub mod record;
pub mod report;
pub mod serve;
pub mod timeline;
pub mod top;
pub mod trace;
pub mod verdict;

/// Writes a command's output file, or stdout for `-`; returns whether it went to a file (so
/// the caller can say what it wrote).
pub fn write_output(path: &std::path::Path, bytes: &[u8]) -> anyhow::Result<bool> {
    use anyhow::Context as _;
    use std::io::Write as _;
    if path.as_os_str() == "-" {
        std::io::stdout().lock().write_all(bytes)?;
        return Ok(false);
    }
    std::fs::write(path, bytes).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(true)
}
