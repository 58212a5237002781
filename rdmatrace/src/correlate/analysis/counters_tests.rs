//! ConnectX port counters read as causes: a fixture tree laid out as mlx5's sysfs (the
//! kernel's counter names), sampled twice by the same sampler a live run uses, decoded and
//! analysed.
use std::path::Path;

use super::*;
use crate::{clock::ClockAnchor, correlate::Correlator, decode::decode, sample::Sampler};

fn write(root: &Path, dir: &str, values: &[(&str, u64)]) {
    let d = root.join("mlx5_0/ports/1").join(dir);
    std::fs::create_dir_all(&d).expect("mkdir");
    for (n, v) in values {
        std::fs::write(d.join(n), format!("{v}\n")).expect("write");
    }
}

/// The report of a run in which mlx5_0's counters moved by `delta` (hw_counters) and the port
/// moved `packets` each way.
fn run(delta: &[(&str, u64)], packets: u64) -> Report {
    let dir = tempfile::Builder::new()
        .prefix("rdmt-mlx5-")
        .tempdir()
        .expect("temp dir");
    let root = dir.path();
    std::fs::create_dir_all(root.join("mlx5_0/ports/1")).expect("mkdir");
    std::fs::write(root.join("mlx5_0/ports/1/state"), "4: ACTIVE\n").expect("state");
    std::fs::write(root.join("mlx5_0/ports/1/link_layer"), "Ethernet\n").expect("ll");
    let zero: Vec<(&str, u64)> = delta.iter().map(|(n, _)| (*n, 0)).collect();
    write(root, "hw_counters", &zero);
    write(
        root,
        "counters",
        &[("port_xmit_packets", 0), ("port_rcv_packets", 0)],
    );
    let mut sampler = Sampler::from_sysfs(root.to_path_buf());
    write(root, "hw_counters", delta);
    write(
        root,
        "counters",
        &[
            ("port_xmit_packets", packets),
            ("port_rcv_packets", packets),
        ],
    );
    let records = sampler.poll(1_000_000_000);
    let (mut state, mut analyzer) = (Correlator::new(), Analyzer::new());
    for raw in &records {
        let mut rec = decode(raw, &ClockAnchor::fixed(0)).expect("decode");
        state.observe(&mut rec);
        analyzer.push(&rec, &state);
    }
    analyzer.finish()
}

#[test]
fn sequence_errors_and_ack_timeouts_are_fabric_loss_with_their_meaning() {
    let r = run(
        &[
            ("out_of_sequence", 40),
            ("packet_seq_err", 25),
            ("local_ack_timeout_err", 5),
            ("duplicate_request", 3),
        ],
        10_000,
    );
    let kinds: Vec<_> = r.diagnoses.iter().map(|d| d.kind).collect();
    assert_eq!(kinds, ["fabric_loss"], "{:#?}", r.diagnoses);
    let d = &r.diagnoses[0];
    assert_eq!(d.dev.as_deref(), Some("mlx5_0"));
    assert!(
        d.cause
            .contains("mlx5_0 port 1 are lost on the fabric (70 loss signals)"),
        "{}",
        d.cause
    );
    assert!(
        d.evidence[0].starts_with(
            "mlx5_0 port 1 out_of_sequence +40: requests arrived out of sequence here"
        ),
        "{:?}",
        d.evidence
    );
    assert_eq!(
        d.evidence.last().map(String::as_str),
        Some("20000 packets moved by the port (0.350 % lost or late)")
    );
}

#[test]
fn ecn_marks_are_congestion_not_loss_and_rnr_and_retries_are_named() {
    let r = run(
        &[
            ("np_ecn_marked_roce_packets", 5000),
            ("np_cnp_sent", 2500),
            ("rp_cnp_handled", 1200),
            ("rnr_nak_retry_err", 2),
            ("req_transport_retries_exceeded", 1),
        ],
        100_000,
    );
    let kinds: Vec<_> = r.diagnoses.iter().map(|d| d.kind).collect();
    assert_eq!(
        kinds,
        ["congestion", "rnr", "retry_exceeded"],
        "{:#?}",
        r.diagnoses
    );
    assert!(r.diagnoses[0]
        .cause
        .contains("bandwidth is shared, not lost"));
}

#[test]
fn a_few_timeouts_against_many_packets_are_no_fault() {
    let r = run(
        &[("local_ack_timeout_err", 3), ("np_cnp_sent", 10)],
        1_000_000,
    );
    assert!(r.diagnoses.is_empty(), "{:#?}", r.diagnoses);
}
