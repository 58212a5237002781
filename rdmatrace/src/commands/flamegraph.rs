//! `rdmatrace flamegraph FILE --kind retransmits|verbs|cpu -o OUT [--folded] [--base OTHER]`:
//! a flamegraph SVG (inferno) or folded stacks from a recording; with `--base`, a differential
//! flamegraph of FILE against OTHER. No privileges needed.

use std::{
    path::{Path, PathBuf},
    process::ExitCode,
};

use crate::{
    correlate::filter::Filter,
    flame::{svg, Folded, Kind},
    replay::{self, Replayed},
    sinks::flame::FlameSink,
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

/// The folded stacks of one recording, a subtitle naming where it was recorded, and what the
/// replay met.
fn fold(path: &Path, kind: Kind) -> anyhow::Result<(Folded, String, Replayed)> {
    let (sink, h, replayed) = replay::file(path, Filter::default(), |_| FlameSink::new(kind))?;
    let subtitle = format!("host {} (kernel {})", h.hostname, h.kernel);
    Ok((sink.folded, subtitle, replayed))
}

pub fn run(cfg: &FlamegraphConfig) -> anyhow::Result<ExitCode> {
    let (this, subtitle, replayed) = fold(&cfg.input, cfg.kind)?;
    let mut replays = vec![replayed];
    let bytes = match &cfg.base {
        None if cfg.folded => lines_bytes(&this.lines()),
        None => svg::render(cfg.kind, &this, Some(subtitle))?,
        Some(base_path) => {
            let (base, base_sub, replayed) = fold(base_path, cfg.kind)?;
            replays.push(replayed);
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
            this.len(),
            this.total(),
            cfg.kind.count_name()
        );
    }
    Ok(replay::exit_code(&replays))
}

fn lines_bytes(lines: &[String]) -> Vec<u8> {
    let mut out = Vec::new();
    for l in lines {
        out.extend_from_slice(l.as_bytes());
        out.push(b'\n');
    }
    out
}
