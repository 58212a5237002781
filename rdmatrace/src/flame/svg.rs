//! SVG rendering with inferno, with options that make the output byte-for-byte reproducible
//! (colours from a hash of the frame name, no random palette), so SVGs can be golden files.

use std::io;

use inferno::flamegraph::{self, color::BasicPalette, Options, Palette};

use super::{Folded, Kind};

#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    #[error("nothing to draw: the recording has no {what}")]
    Empty { what: &'static str },
    #[error("inferno could not render the flamegraph: {0}")]
    Inferno(#[source] io::Error),
}

fn what(kind: Kind) -> &'static str {
    match kind {
        Kind::Retransmits => "retransmit events",
        Kind::Verbs => {
            "verbs calls (no traced process called libibverbs/librdmacm, or the verbs probes \
             were off: see the probe lines `record` printed)"
        }
        Kind::Cpu => "CPU samples (recorded without --cpu-profile?)",
    }
}

fn options<'a>(kind: Kind, subtitle: Option<String>) -> Options<'a> {
    let mut opt = Options::default();
    opt.title = kind.title().to_string();
    opt.subtitle = subtitle;
    opt.count_name = kind.count_name().to_string();
    opt.deterministic = true;
    opt.colors = Palette::Basic(match kind {
        Kind::Retransmits => BasicPalette::Red,
        Kind::Verbs => BasicPalette::Aqua,
        Kind::Cpu => BasicPalette::Hot,
    });
    opt
}

/// One flamegraph of `folded`.
pub fn render(
    kind: Kind,
    folded: &Folded,
    subtitle: Option<String>,
) -> Result<Vec<u8>, RenderError> {
    if folded.is_empty() {
        return Err(RenderError::Empty { what: what(kind) });
    }
    let lines = folded.lines();
    let mut out = Vec::new();
    flamegraph::from_lines(
        &mut options(kind, subtitle),
        lines.iter().map(String::as_str),
        &mut out,
    )
    .map_err(RenderError::Inferno)?;
    Ok(out)
}

/// A differential flamegraph: widths from `this`, red where `this` has more than `base`, blue
/// where less (inferno's difffolded semantics).
pub fn render_diff(
    kind: Kind,
    base: &Folded,
    this: &Folded,
    subtitle: Option<String>,
) -> Result<Vec<u8>, RenderError> {
    // Widths come from `this`: with nothing there, there is nothing to draw.
    if this.is_empty() {
        return Err(RenderError::Empty { what: what(kind) });
    }
    let lines = Folded::diff_lines(base, this);
    let mut opt = options(kind, subtitle);
    opt.title = format!("Differential: {}", kind.title());
    let mut out = Vec::new();
    flamegraph::from_lines(&mut opt, lines.iter().map(String::as_str), &mut out)
        .map_err(RenderError::Inferno)?;
    Ok(out)
}
