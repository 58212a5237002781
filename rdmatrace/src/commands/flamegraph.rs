//! `rdmatrace flamegraph FILE --kind retransmits|verbs|cpu -o OUT [--folded] [--base OTHER]`:
//! a flamegraph SVG (inferno) or folded stacks from a recording; with `--base`, a differential
//! flamegraph of FILE against OTHER. No privileges needed.

use std::{
    path::{Path, PathBuf},
    process::ExitCode,
};

use crate::{
    commands::replay::Replay,
    flame::{self, svg, Folded, Kind},
};

#[derive(Clone, Debug)]
pub struct FlamegraphConfig {
    pub input: PathBuf,
    /// Differential against this recording (the "before").
    pub base: Option<PathBuf>,
    pub kind: Kind,
    /// `-` for stdout.
    pub output: PathBuf,
    /// Folded stacks (`a;b;c N`, or `a;b;c BASE THIS` with `--base`) instead of SVG.
    pub folded: bool,
}

/// The folded stacks of one recording, and a subtitle naming where it was recorded.
fn fold(path: &Path, kind: Kind) -> anyhow::Result<(Folded, String)> {
    let replay = Replay::open(path)?;
    let mut folder = flame::folder(kind);
    let replayed = replay.run(|r| folder.push(r));
    replayed.warn(path);
    let h = replay.header();
    Ok((
        folder.finish(),
        format!("host {} (kernel {})", h.hostname, h.kernel),
    ))
}

pub fn run(cfg: &FlamegraphConfig) -> anyhow::Result<ExitCode> {
    let (this, subtitle) = fold(&cfg.input, cfg.kind)?;
    let bytes = match &cfg.base {
        None if cfg.folded => lines_bytes(&this.lines()),
        None => svg::render(cfg.kind, &this, Some(subtitle))?,
        Some(base_path) => {
            let (base, base_sub) = fold(base_path, cfg.kind)?;
            if cfg.folded {
                lines_bytes(&Folded::diff_lines(&base, &this))
            } else {
                let sub = format!("{subtitle} against {base_sub}");
                svg::render_diff(cfg.kind, &base, &this, Some(sub))?
            }
        }
    };
    if super::write_output(&cfg.output, &bytes)? {
        eprintln!(
            "rdmatrace: wrote {} ({} stacks, {} {})",
            cfg.output.display(),
            this.stacks.len(),
            this.total(),
            cfg.kind.count_name()
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn lines_bytes(lines: &[String]) -> Vec<u8> {
    let mut out = Vec::new();
    for l in lines {
        out.extend_from_slice(l.as_bytes());
        out.push(b'\n');
    }
    out
}
