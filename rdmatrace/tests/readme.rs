//! README.md's example outputs are what the tool prints for the fixtures they come from.
//!
//! An example is a fenced block whose first line is `# rdmatrace ARGS` where ARGS read a
//! committed recording (`tests/fixtures/...`), optionally followed by a comment in parentheses
//! after two spaces; the other lines must appear, in order, in what `rdmatrace ARGS` prints
//! (a line `...` stands for lines left out). The `top` example is a frame of the golden
//! `top` test: its lines must appear in that snapshot.

mod common;

use common::*;

const README: &str = include_str!("../../README.md");
const TOP_SNAPSHOT: &str = include_str!(
    "../src/sinks/snapshots/rdmatrace__sinks__top__tests__top_frame_of_a_lossy_transfer_golden.snap"
);

/// `(first line, the other lines)` of every fenced block.
fn blocks() -> Vec<(String, Vec<String>)> {
    let mut out = Vec::new();
    let mut cur: Option<Vec<String>> = None;
    for line in README.lines() {
        if line.starts_with("```") {
            match cur.take() {
                Some(b) if !b.is_empty() => out.push((b[0].clone(), b[1..].to_vec())),
                Some(_) => {}
                None => cur = Some(Vec::new()),
            }
            continue;
        }
        if let Some(b) = cur.as_mut() {
            b.push(line.to_string());
        }
    }
    out
}

/// Whether `want` (but `...`) appears in `have`, in order; the first line missing otherwise.
fn missing_line<'a>(want: &'a [String], have: &str) -> Option<&'a str> {
    let mut have = have.lines().map(str::trim_end);
    want.iter()
        .map(|w| w.trim_end())
        .filter(|w| *w != "...")
        .find(|w| !have.any(|h| h == *w))
}

#[test]
fn every_replayable_example_is_what_rdmatrace_prints() {
    let mut checked = 0;
    for (first, lines) in blocks() {
        let Some(cmd) = first.strip_prefix("# rdmatrace ") else {
            continue;
        };
        let cmd = cmd.split("  (").next().unwrap_or(cmd).trim();
        if !cmd.contains("tests/fixtures/") {
            continue;
        }
        let args: Vec<String> = cmd
            .split_whitespace()
            .map(|a| {
                if a.starts_with("tests/fixtures/") {
                    format!("{}/../{a}", env!("CARGO_MANIFEST_DIR"))
                } else {
                    a.to_string()
                }
            })
            .collect();
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = run(&args);
        assert!(
            out.stderr.is_empty() || out.status.code() != Some(1),
            "rdmatrace {cmd}: {}",
            out.stderr
        );
        if let Some(line) = missing_line(&lines, &out.stdout) {
            panic!(
                "README example `rdmatrace {cmd}` shows a line the tool does not print:\n{line}\n\
                 --- the tool prints ---\n{}",
                out.stdout
            );
        }
        checked += 1;
    }
    assert!(
        checked >= 2,
        "the trace and verdict examples are checked ({checked} found)"
    );
}

#[test]
fn the_top_example_is_a_frame_of_the_top_golden() {
    let (_, lines) = blocks()
        .into_iter()
        .find(|(first, _)| first.starts_with("# rdmatrace top"))
        .expect("a top example in README.md");
    // The snapshot's body follows its `---` front matter.
    let frame = TOP_SNAPSHOT
        .splitn(3, "---\n")
        .nth(2)
        .unwrap_or(TOP_SNAPSHOT);
    if let Some(line) = missing_line(&lines, frame) {
        panic!(
            "README's top example shows a line the golden frame does not:\n{line}\n---\n{frame}"
        );
    }
}

#[test]
fn the_bind_qp_counters_text_matches_the_flag_help() {
    // The option table's row names the same commands the flag is on.
    let row = README
        .lines()
        .find(|l| l.starts_with("| `--bind-qp-counters`"))
        .expect("an option row for --bind-qp-counters");
    for cmd in ["trace", "record", "verdict", "top"] {
        let help = run(&[cmd, "--help"]);
        assert!(
            help.stdout.contains("--bind-qp-counters"),
            "{cmd} --help has no --bind-qp-counters"
        );
        assert!(
            row.contains(&format!("`{cmd}`")),
            "README row misses {cmd}: {row}"
        );
    }
}
