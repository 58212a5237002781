//! `rdmatrace flamegraph` on the committed lab recordings: golden folded stacks and SVGs
//! (inferno with deterministic colours), a differential graph, and the SVG drawn by headless
//! Chromium to check that frames really appear on screen (a `chromium_` test: ignored by
//! `cargo test`, run by `cargo xtask test`, which installs Chromium, or reported as skipped).
//! Bless with `INSTA_UPDATE=always cargo test --test flamegraph`.

mod common;

use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use common::*;

const PINGPONG: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../tests/fixtures/lab-pingpong.rdmt"
);
const LOSS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../tests/fixtures/lab-loss.rdmt"
);

#[test]
fn retransmit_folded_golden() {
    let out = run(&[
        "flamegraph",
        LOSS,
        "--kind",
        "retransmits",
        "--folded",
        "-o",
        "-",
    ]);
    assert!(out.status.success(), "{}", out.stderr);
    // The lossy sender's QP carries the blame (ib_write_bw on rxe0, QPN 0x11 on the fixture's
    // fresh device); the TCP transfer's socket its own.
    let sender = out
        .stdout
        .lines()
        .find(|l| l.starts_with("ib_write_bw [") && l.contains("];rxe0;QPN 0x11;retransmit_timer "))
        .unwrap_or_else(|| panic!("no rxe blame on the sender's QP:\n{}", out.stdout));
    let count: u64 = sender
        .rsplit(' ')
        .next()
        .and_then(|n| n.parse().ok())
        .expect("count");
    assert!(count > 0, "{sender}");
    assert!(
        out.stdout
            .lines()
            .any(|l| l.contains(";tcp;") && l.ends_with(|c: char| c.is_ascii_digit())),
        "the TCP transfer's retransmits:\n{}",
        out.stdout
    );
    insta::assert_snapshot!(out.stdout);
}

#[test]
fn retransmit_svg_golden() {
    let out = run(&["flamegraph", LOSS, "-o", "-"]);
    assert!(out.status.success(), "{}", out.stderr);
    assert!(
        out.stdout.starts_with("<?xml"),
        "{}",
        &out.stdout[..100.min(out.stdout.len())]
    );
    insta::assert_snapshot!(out.stdout);
}

#[test]
fn differential_folded_and_svg_golden() {
    let folded = run(&[
        "flamegraph",
        LOSS,
        "--base",
        PINGPONG,
        "--folded",
        "-o",
        "-",
    ]);
    assert!(folded.status.success(), "{}", folded.stderr);
    // Every line: stack BASE THIS.
    for line in folded.stdout.lines() {
        let fields: Vec<&str> = line.rsplitn(3, ' ').collect();
        assert_eq!(fields.len(), 3, "{line}");
        assert!(
            fields[0].parse::<u64>().is_ok() && fields[1].parse::<u64>().is_ok(),
            "{line}"
        );
    }
    insta::assert_snapshot!("differential_folded", folded.stdout);
    let svg = run(&["flamegraph", LOSS, "--base", PINGPONG, "-o", "-"]);
    assert!(svg.status.success(), "{}", svg.stderr);
    assert!(svg.stdout.contains("Differential"));
    insta::assert_snapshot!("differential_svg", svg.stdout);
}

/// A recording of a process that only starts and ends: no retransmits, no verbs calls, no CPU
/// samples.
fn quiet_recording(dir: &Path) -> PathBuf {
    use rdmatrace::testing::{synthetic_header, zeroed, Gen};
    use rdmatrace_common::event::{EventKind, ProcessEvent};
    let mut g = Gen::new(&synthetic_header(), rdmatrace::recording::VERSION);
    for kind in [EventKind::ProcessExec, EventKind::ProcessExit] {
        let mut ev: ProcessEvent = zeroed();
        ev.header = g.header(kind, 7, "quiet");
        g.put(&ev);
    }
    let path = dir.join("quiet.rdmt");
    std::fs::write(&path, g.finish()).expect("write");
    path
}

#[test]
fn empty_flamegraph_says_why() {
    let dir = test_dir("flame-empty");
    let quiet = quiet_recording(dir.path());
    let quiet = quiet.to_str().expect("utf8");
    let out = run(&["flamegraph", quiet, "-o", "-"]);
    assert!(!out.status.success());
    assert!(
        out.stderr.contains("no retransmit events"),
        "{}",
        out.stderr
    );
    // No verbs call and no --cpu-profile.
    let out = run(&["flamegraph", quiet, "--kind", "verbs", "-o", "-"]);
    assert!(!out.status.success());
    assert!(out.stderr.contains("has no verbs calls"), "{}", out.stderr);
    let out = run(&["flamegraph", quiet, "--kind", "cpu", "-o", "-"]);
    assert!(!out.status.success());
    assert!(out.stderr.contains("--cpu-profile"), "{}", out.stderr);
}

fn chromium() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    ["chromium", "chromium-browser", "google-chrome"]
        .iter()
        .flat_map(|name| std::env::split_paths(&path).map(move |d| d.join(name)))
        .find(|p| p.is_file())
}

/// A PNG screenshot of `page` from headless Chromium (its profile next to `png`).
fn screenshot(browser: &Path, page: &Path, png: &Path) {
    let profile = png.with_file_name("chromium-profile");
    let mut child = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--window-size=1200,400",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(format!("--screenshot={}", png.display()))
        .arg(format!("file://{}", page.display()))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start chromium");
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if let Some(status) = child.try_wait().expect("wait chromium") {
            assert!(status.success(), "chromium exited with {status}");
            break;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "chromium took more than 120 s to screenshot {}",
                page.display()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// (pixels, reddish frame pixels, bluish pixels, non-white pixels) of an RGB(A) PNG.
fn pixel_census(png_path: &Path) -> (usize, usize, usize, usize) {
    let file = std::fs::File::open(png_path).expect("open png");
    let mut decoder = png::Decoder::new(std::io::BufReader::new(file));
    decoder.set_transformations(png::Transformations::EXPAND | png::Transformations::STRIP_16);
    let mut reader = decoder.read_info().expect("png header");
    let mut buf = vec![0; reader.output_buffer_size().expect("png size")];
    let info = reader.next_frame(&mut buf).expect("png frame");
    let channels = info.color_type.samples();
    assert!(channels >= 3, "expected RGB(A), got {:?}", info.color_type);
    let (mut total, mut red, mut blue, mut ink) = (0, 0, 0, 0);
    for px in buf[..info.buffer_size()].chunks_exact(channels) {
        let (r, g, b) = (px[0] as i32, px[1] as i32, px[2] as i32);
        total += 1;
        if r > 150 && r - g > 60 && r - b > 60 {
            red += 1;
        }
        if b > 150 && b - r > 60 {
            blue += 1;
        }
        if r < 230 || g < 230 || b < 230 {
            ink += 1;
        }
    }
    (total, red, blue, ink)
}

#[test]
#[ignore = "needs chromium: screenshots the SVG headless; `cargo xtask test` installs it and runs this"]
fn chromium_draws_the_flamegraph_frames() {
    let browser = chromium()
        .expect("no chromium in PATH (`cargo xtask test` installs it; apt-get install chromium)");
    let dir = test_dir("flame-chromium");
    let tmp = |name: &str| dir.path().join(name);
    let svg = tmp("retransmits.svg");
    let out = run(&["flamegraph", LOSS, "-o", &svg.to_string_lossy()]);
    assert!(out.status.success(), "{}", out.stderr);
    let png = tmp("retransmits.png");
    screenshot(&browser, &svg, &png);
    let (total, red, _, ink) = pixel_census(&png);
    // Five rows of frames, 16 px high, across most of 1200 px: tens of thousands of red pixels.
    assert!(
        red > 20_000,
        "only {red} of {total} pixels have a frame colour"
    );
    assert!(ink > red, "text and background are drawn too");

    let diff = tmp("diff.svg");
    let out = run(&[
        "flamegraph",
        PINGPONG,
        "--base",
        LOSS,
        "-o",
        &diff.to_string_lossy(),
    ]);
    // Widths come from the newer recording: PINGPONG has no retransmits, nothing to draw.
    assert!(!out.status.success(), "{}", out.stderr);
    assert!(out.stderr.contains("nothing to draw"), "{}", out.stderr);
    let out = run(&[
        "flamegraph",
        LOSS,
        "--base",
        PINGPONG,
        "-o",
        &diff.to_string_lossy(),
    ]);
    assert!(out.status.success(), "{}", out.stderr);
    let png = tmp("diff.png");
    screenshot(&browser, &diff, &png);
    let (total, red, _, _) = pixel_census(&png);
    // All of it is new since the base: the leaf frames (where the counts change) are drawn red,
    // the strongest one over ~800x15 px.
    assert!(
        red > 8_000,
        "differential: only {red} of {total} pixels are red"
    );
}

/// rt-mover moving 2 MiB from rxe0 to rxe1, recorded in the lab with `record --cpu-profile`.
const VERBS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../tests/fixtures/lab-verbs.rdmt"
);

/// Sum of the counts of the folded lines ending in `;leaf`.
fn calls_to(folded: &str, leaf: &str) -> u64 {
    folded
        .lines()
        .filter_map(|l| l.rsplit_once(' '))
        .filter(|(stack, _)| stack.ends_with(&format!(";{leaf}")))
        .filter_map(|(_, n)| n.parse::<u64>().ok())
        .sum()
}

#[test]
fn verbs_folded_golden() {
    let out = run(&[
        "flamegraph",
        VERBS,
        "--kind",
        "verbs",
        "--folded",
        "-o",
        "-",
    ]);
    assert!(out.status.success(), "{}", out.stderr);
    // What rt-mover does: two devices, two QPs taken through INIT, RTR and RTS, two MRs.
    assert_eq!(calls_to(&out.stdout, "ibv_open_device"), 2);
    assert_eq!(calls_to(&out.stdout, "ibv_create_qp"), 2);
    assert_eq!(calls_to(&out.stdout, "ibv_modify_qp"), 6);
    assert_eq!(calls_to(&out.stdout, "ibv_reg_mr"), 2);
    assert_eq!(
        calls_to(
            &out.stdout,
            "rdmatrace_workloads::Verbs::create_rc_qp_with;ibv_create_qp"
        ),
        2,
        "{}",
        out.stdout
    );
    insta::assert_snapshot!(out.stdout);
}

#[test]
fn verbs_svg_golden() {
    let out = run(&["flamegraph", VERBS, "--kind", "verbs", "-o", "-"]);
    assert!(out.status.success(), "{}", out.stderr);
    assert!(out.stdout.contains("ibv_create_qp"), "frames drawn");
    insta::assert_snapshot!(out.stdout);
}

#[test]
fn cpu_folded_and_svg_golden() {
    let folded = run(&["flamegraph", VERBS, "--kind", "cpu", "--folded", "-o", "-"]);
    assert!(folded.status.success(), "{}", folded.stderr);
    assert!(
        folded.stdout.lines().any(|l| l.starts_with("rt-mover [")),
        "{}",
        folded.stdout
    );
    // Kernel frames come after the user frames, marked.
    for line in folded.stdout.lines() {
        let frames: Vec<&str> = line
            .rsplit_once(' ')
            .map_or(line, |p| p.0)
            .split(';')
            .collect();
        if let Some(first_k) = frames.iter().position(|f| f.ends_with("_[k]")) {
            assert!(
                frames[first_k..].iter().all(|f| f.ends_with("_[k]")),
                "{line}"
            );
        }
    }
    insta::assert_snapshot!("cpu_folded", folded.stdout);
    let svg = run(&["flamegraph", VERBS, "--kind", "cpu", "-o", "-"]);
    assert!(svg.status.success(), "{}", svg.stderr);
    insta::assert_snapshot!("cpu_svg", svg.stdout);
}

#[test]
fn verbs_calls_json_golden() {
    let out = run(&["trace", "--input", VERBS, "--json"]);
    assert!(out.status.success(), "{}", out.stderr);
    let lines: Vec<&str> = out
        .stdout
        .lines()
        .filter(|l| l.starts_with(r#"{"type":"verbs_call""#))
        .collect();
    assert!(!lines.is_empty());
    for l in &lines {
        let v: serde_json::Value = serde_json::from_str(l).expect("json");
        let d = &v["data"];
        assert_eq!(
            d["stack"].as_array().map(Vec::len),
            d["stack_addrs"].as_array().map(Vec::len),
            "{l}"
        );
    }
    insta::assert_snapshot!(lines.join("\n"));
}
