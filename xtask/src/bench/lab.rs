//! The lab part: runs `xtask/lab/bench.sh` in one boot and turns its raw lines
//! (`metric tool round value`) into pair ratios and medians.

use std::collections::BTreeMap;

use anyhow::Context as _;

use crate::{cmd, lab};

/// Raw values: metric -> tool -> round -> value.
pub struct LabResults {
    pub rounds: u32,
    pub kernel: String,
    /// Whether that boot used KVM (else TCG), as the lab decided it; `None`: unknown.
    pub kvm: Option<bool>,
    raw: BTreeMap<String, BTreeMap<String, BTreeMap<u32, f64>>>,
    /// (phase, duration text) of one `rdmatrace doctor --json` start-up in that boot.
    pub startup: Vec<(String, String)>,
    /// Where rdmatrace put typed programs in that boot: (`fentry` or `tp_btf`, function or
    /// tracepoint) (its other hooks: kprobes, raw tracepoints, uprobes).
    pub typed: Vec<(String, String)>,
}

impl LabResults {
    pub fn parse(text: &str, rounds: u32, kernel: String) -> anyhow::Result<LabResults> {
        let mut raw: BTreeMap<String, BTreeMap<String, BTreeMap<u32, f64>>> = BTreeMap::new();
        let mut done = false;
        for line in text.lines() {
            let f: Vec<&str> = line.split_whitespace().collect();
            let [metric, tool, round, value] = f[..] else {
                anyhow::bail!("bad lab result line {line:?}");
            };
            if metric == "done" {
                done = true;
                continue;
            }
            let round: u32 = round
                .parse()
                .with_context(|| format!("round in {line:?}"))?;
            let value: f64 = value
                .parse()
                .with_context(|| format!("value in {line:?}"))?;
            raw.entry(metric.into())
                .or_default()
                .entry(tool.into())
                .or_default()
                .insert(round, value);
        }
        anyhow::ensure!(done, "the lab bench did not finish (no `done` line)");
        Ok(LabResults {
            rounds,
            kvm: None,
            kernel,
            raw,
            startup: Vec::new(),
            typed: Vec::new(),
        })
    }

    /// Every (metric, tool) measured.
    pub fn series(&self) -> Vec<(String, String)> {
        self.raw
            .iter()
            .flat_map(|(m, t)| t.keys().map(move |t| (m.clone(), t.clone())))
            .collect()
    }

    pub fn values(&self, metric: &str, tool: &str) -> Vec<f64> {
        self.raw
            .get(metric)
            .and_then(|t| t.get(tool))
            .map(|r| r.values().copied().collect())
            .unwrap_or_default()
    }

    /// The value of one round.
    pub fn value(&self, metric: &str, tool: &str, round: u32) -> Option<f64> {
        self.raw.get(metric)?.get(tool)?.get(&round).copied()
    }

    /// The rounds `tool` has values of `metric` in.
    pub fn rounds_of(&self, metric: &str, tool: &str) -> Vec<u32> {
        self.raw
            .get(metric)
            .and_then(|t| t.get(tool))
            .map(|r| r.keys().copied().collect())
            .unwrap_or_default()
    }

    /// The values of `metric` that are measurements: a perftest figure of `inf` or 0 (perftest
    /// prints them when its run was too short for its clock, or failed) is not one.
    pub fn measured(&self, metric: &str, tool: &str) -> Vec<f64> {
        let mut v = self.values(metric, tool);
        if PERFTEST.contains(&metric) {
            v.retain(|x| is_measurement(*x));
        }
        v
    }

    /// (tool, none) of `metric` in `round`, when both are there and are measurements.
    fn pair(&self, metric: &str, tool: &str, round: u32) -> Option<(f64, f64)> {
        let w = self.value(metric, tool, round)?;
        let b = self.value(metric, "none", round)?;
        (is_measurement(w) && is_measurement(b)).then_some((w, b))
    }

    /// tool / none of the same round, for every round that has both as measurements.
    pub fn pair_ratios(&self, metric: &str, tool: &str) -> Vec<f64> {
        (1..=self.rounds)
            .filter_map(|r| self.pair(metric, tool, r))
            .map(|(w, b)| w / b)
            .collect()
    }

    /// Rounds of `tool` whose `metric` is in no ratio: its figure or the same round's figure
    /// without a tracer was not a measurement (`inf`, 0) or is missing.
    pub fn rounds_left_out(&self, metric: &str, tool: &str) -> Vec<u32> {
        (1..=self.rounds)
            .filter(|&r| self.pair(metric, tool, r).is_none())
            .collect()
    }
}

/// The figures perftest prints (bandwidth, latency).
const PERFTEST: [&str; 2] = ["bw_mbps", "lat_p50_us"];

fn is_measurement(x: f64) -> bool {
    x.is_finite() && x > 0.0
}

pub fn run(rounds: u32) -> anyhow::Result<LabResults> {
    let out = cmd::repo_root().join("target/lab/bench");
    let _ = std::fs::remove_file(out.join("lab.txt"));
    let (_, kernel) = lab::find_kernel(None)?;
    let code = lab::run(Some(&format!(
        "bash xtask/lab/bench.sh target/release/rdmatrace target/lab/bench {rounds}"
    )))?;
    anyhow::ensure!(code == 0, "the lab bench exited with {code}");
    let text = std::fs::read_to_string(out.join("lab.txt"))
        .context("the lab bench left no target/lab/bench/lab.txt")?;
    let mut results = LabResults::parse(&text, rounds, kernel)?;
    results.kvm = lab::used_kvm(&results.kernel);
    // Written by bench.sh before the rounds; without it the report says so.
    if let Ok(text) = std::fs::read_to_string(out.join("doctor.json")) {
        if let Ok(v) = serde_json::from_str::<serde_json::Value>(&text) {
            let items = v["data"].as_array().map_or(&[][..], |a| a);
            results.startup = super::attach::phases(items);
            results.typed = super::attach::typed_targets(items);
        }
    }
    Ok(results)
}

#[cfg(test)]
mod tests {
    use super::LabResults;

    #[test]
    fn ratios_pair_rounds_of_the_same_number() {
        let text = "bw_mbps none 1 100\nbw_mbps rdmatrace 1 90\nbw_mbps none 2 200\n\
                    bw_mbps rdmatrace 2 150\nbw_mbps rdmatrace 3 1\ndone - - 1\n";
        let r = LabResults::parse(text, 3, "k".into()).expect("parses");
        assert_eq!(r.pair_ratios("bw_mbps", "rdmatrace"), vec![0.9, 0.75]);
        assert_eq!(r.rounds_left_out("bw_mbps", "rdmatrace"), [3]);
        assert!(r.pair_ratios("bw_mbps", "bpftrace").is_empty());
        assert!(LabResults::parse("bw_mbps none 1 100\n", 1, "k".into()).is_err());
    }

    #[test]
    fn perftest_figures_of_inf_or_zero_are_no_measurements() {
        let text = "bw_mbps none 1 100\nbw_mbps bpftrace 1 0\nbw_mbps none 2 inf\n\
                    bw_mbps bpftrace 2 50\nbw_mbps none 3 100\nbw_mbps bpftrace 3 80\n\
                    attach_ms bpftrace 1 0\ndone - - 1\n";
        let r = LabResults::parse(text, 3, "k".into()).expect("parses");
        assert_eq!(r.pair_ratios("bw_mbps", "bpftrace"), vec![0.8]);
        assert_eq!(r.rounds_left_out("bw_mbps", "bpftrace"), [1, 2]);
        assert_eq!(r.measured("bw_mbps", "none"), vec![100.0, 100.0]);
        // Only perftest's figures are judged so.
        assert_eq!(r.measured("attach_ms", "bpftrace"), vec![0.0]);
    }
}
