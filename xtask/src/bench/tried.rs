//! What was tried for a target not met: notes kept by hand in `tried.md` (one `## key` section
//! per target), printed under the target when a run finds it not met, and said to be notes
//! from earlier measurements, not figures of this run.

use std::fmt::Write as _;

const NOTES: &str = include_str!("tried.md");

/// The items of section `key` in `tried.md`.
fn items(key: &str) -> Option<&'static str> {
    let head = format!("## {key}\n");
    let start = NOTES.find(&head)? + head.len();
    let rest = &NOTES[start..];
    let end = rest.find("\n## ").map_or(rest.len(), |e| e + 1);
    Some(rest[..end].trim())
}

/// Prints the notes on target `key` (a section of `tried.md`).
pub fn section(s: &mut String, key: &str, target: &str) {
    if let Some(text) = items(key) {
        let _ = writeln!(
            s,
            "What was tried for the {target} target (notes kept in `xtask/src/bench/tried.md` \
             from earlier measurements; this run did not measure them):\n\n{text}\n"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::items;

    #[test]
    fn every_target_the_report_names_has_notes() {
        for key in [
            "lab-attach",
            "per-packet-floor",
            "control-path-vs-bpftrace",
            "replay",
            "flamegraph",
        ] {
            let text = items(key).unwrap_or_else(|| panic!("no section {key}"));
            assert!(text.starts_with("- "), "{key}: {text}");
            assert!(!text.contains("\n## "), "{key} runs into the next section");
        }
        assert!(items("nothing-like-this").is_none());
    }
}
