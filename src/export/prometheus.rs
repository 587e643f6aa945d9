//! The Prometheus text exposition format (version 0.0.4), for node_exporter's textfile
//! collector: write the file into its `--collector.textfile.directory` with a `.prom` name.
//!
//! Every series is a gauge and carries the labels `node`, `suite` and `simulated`, so a simulated
//! rehearsal can never be mistaken for a measured node. No sample has a timestamp (the textfile
//! collector refuses them); `nodecert_run_timestamp_seconds` says when the run finished.
//!
//! Status codes in `nodecert_check_status` and `nodecert_run_status`:
//! `-1` skip, `0` pass, `1` warn, `2` fail, `3` error (the node could not be tested), so that
//! `> 1` selects what did not pass and `< 0` what was not run.

use super::Exporter;
use crate::evidence::{CheckRecord, Evidence, Status, Verdict};
use std::fmt::Write as _;

pub struct Prometheus;

impl Exporter for Prometheus {
    fn flag(&self) -> &'static str {
        "--prometheus"
    }

    fn render(&self, ev: &Evidence) -> String {
        render(ev)
    }
}

/// The number a status is exported as (see the module documentation).
pub fn status_code(s: Status) -> f64 {
    match s {
        Status::Skip => -1.0,
        Status::Pass => 0.0,
        Status::Warn => 1.0,
        Status::Fail => 2.0,
        Status::Error => 3.0,
    }
}

/// Escapes a label value: backslash, double quote and line feed, after characters that would
/// act on a terminal or hide text (escape sequences, carriage returns, bidi controls) are shown
/// as escapes, as on every other page ([`crate::console::visible`]): `cat` of a metrics file
/// must not clear the screen because a host name asked it to.
pub fn escape_label_value(s: &str) -> String {
    let s = crate::console::visible(s);
    let mut out = String::with_capacity(s.len());
    for ch in s.chars() {
        match ch {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// Escapes HELP text: backslash and line feed.
fn escape_help(s: &str) -> String {
    s.replace('\\', "\\\\").replace('\n', "\\n")
}

/// A sample value as Go's ParseFloat reads it: `NaN`, `+Inf`, `-Inf` or a decimal.
pub fn format_value(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.into()
    } else {
        format!("{v}")
    }
}

/// One metric family: its samples share a name, a HELP and a TYPE, and are written together.
struct Family {
    name: &'static str,
    help: &'static str,
    samples: Vec<(Vec<(&'static str, String)>, f64)>,
}

impl Family {
    fn new(name: &'static str, help: &'static str) -> Self {
        Family {
            name,
            help,
            samples: Vec::new(),
        }
    }

    fn push(&mut self, labels: Vec<(&'static str, String)>, value: f64) {
        self.samples.push((labels, value));
    }
}

/// The metrics called `name` in `rec` (none when the check is absent).
fn medians<'a>(
    rec: Option<&'a CheckRecord>,
    name: &'a str,
) -> impl Iterator<Item = &'a crate::evidence::Metric> + 'a {
    rec.into_iter()
        .flat_map(|r| r.metrics.iter())
        .filter(move |m| m.name == name)
}

pub fn render(ev: &Evidence) -> String {
    let common = [
        ("node", ev.node.hostname.clone()),
        ("suite", ev.suite.name.clone()),
        ("simulated", ev.simulated.to_string()),
    ];
    let mut families = Vec::new();

    let mut info = Family::new(
        "nodecert_run_info",
        "Facts about the nodecert run; the value is always 1.",
    );
    info.push(
        vec![
            ("nodecert_version", ev.nodecert_version.clone()),
            ("suite_sha256", ev.suite.sha256.clone()),
            ("gpus", ev.node.summary()),
            ("backend", ev.backend.name.clone()),
        ],
        1.0,
    );
    families.push(info);

    let mut pass = Family::new(
        "nodecert_run_pass",
        "1 when the node passed its suite (warnings and skips allowed), 0 when it did not.",
    );
    pass.push(
        vec![],
        if ev.assess() == Verdict::Pass {
            1.0
        } else {
            0.0
        },
    );
    families.push(pass);

    let mut run_status = Family::new(
        "nodecert_run_status",
        "Worst check status of the run: -1 skip, 0 pass, 1 warn, 2 fail, 3 error.",
    );
    run_status.push(vec![], status_code(ev.worst()));
    families.push(run_status);

    let mut verdict = Family::new(
        "nodecert_run_verdict",
        "The run's verdict: 1 for the one that holds, 0 for the others (pass, fail, error, incomplete: promised checks never ran, nothing_judged: every check skipped, partial: readings left unjudged).",
    );
    let now = ev.assess();
    for v in Verdict::ALL {
        verdict.push(
            vec![("verdict", v.key().to_string())],
            if v == now { 1.0 } else { 0.0 },
        );
    }
    families.push(verdict);

    let mut never = Family::new(
        "nodecert_run_checks_never_ran",
        "Checks the suite promised that left no record (the run did not finish).",
    );
    never.push(vec![], ev.missing_checks().len() as f64);
    families.push(never);

    let mut ts = Family::new(
        "nodecert_run_timestamp_seconds",
        "When the run finished (or started, if it did not finish), Unix time.",
    );
    let when = ev.finished_at.unwrap_or(ev.started_at);
    ts.push(vec![], when.timestamp_millis() as f64 / 1000.0);
    families.push(ts);

    if let Some(end) = ev.finished_at {
        let mut d = Family::new("nodecert_run_duration_seconds", "Wall time of the run.");
        d.push(
            vec![],
            (end - ev.started_at).num_milliseconds() as f64 / 1000.0,
        );
        families.push(d);
    }

    let mut status = Family::new(
        "nodecert_check_status",
        "Status of each check: -1 skip, 0 pass, 1 warn, 2 fail, 3 error.",
    );
    let mut duration = Family::new(
        "nodecert_check_duration_seconds",
        "Wall time of each check.",
    );
    for c in &ev.checks {
        let l = vec![("check", c.id.clone()), ("kind", c.kind.clone())];
        status.push(l.clone(), status_code(c.status));
        duration.push(l, c.duration_s);
    }
    families.push(status);
    families.push(duration);

    let hb = ev.check("host_bandwidth");
    let mut host = Family::new(
        "nodecert_host_bandwidth_gbps",
        "Host <-> device copy bandwidth per GPU, median, GB/s (10^9 bytes/s); direction h2d, d2h, bidir (both at once) or all_gpus_h2d (every GPU at once).",
    );
    for dir in ["h2d", "d2h", "bidir", "all_gpus_h2d"] {
        for m in medians(hb, dir) {
            if let Some(g) = m.subject.gpu {
                host.push(
                    vec![("gpu", g.to_string()), ("direction", dir.to_string())],
                    m.median,
                );
            }
        }
    }
    families.push(host);
    let mut dcopy = Family::new(
        "nodecert_device_copy_bandwidth_gbps",
        "Copy bandwidth within each GPU's memory, median, GB/s.",
    );
    for m in medians(hb, "device_copy") {
        if let Some(g) = m.subject.gpu {
            dcopy.push(vec![("gpu", g.to_string())], m.median);
        }
    }
    families.push(dcopy);

    let pb = ev.check("p2p_bandwidth");
    let mut p2p = Family::new(
        "nodecert_p2p_bandwidth_gbps",
        "GPU-to-GPU bandwidth, median, GB/s; mode read (dst reads from src), write (src writes to dst) or bidir (both directions at once, per pair, src < dst).",
    );
    for (name, mode) in [
        ("p2p_read", "read"),
        ("p2p_write", "write"),
        ("p2p_bidir", "bidir"),
    ] {
        for m in medians(pb, name) {
            if let (Some(a), Some(b)) = (m.subject.gpu, m.subject.peer) {
                p2p.push(
                    vec![
                        ("src", a.to_string()),
                        ("dst", b.to_string()),
                        ("mode", mode.to_string()),
                    ],
                    m.median,
                );
            }
        }
    }
    families.push(p2p);

    let mut lat = Family::new(
        "nodecert_p2p_latency_seconds",
        "GPU-to-GPU latency, median, seconds.",
    );
    for m in medians(ev.check("p2p_latency"), "latency") {
        if let (Some(a), Some(b)) = (m.subject.gpu, m.subject.peer) {
            lat.push(
                vec![("src", a.to_string()), ("dst", b.to_string())],
                m.median / 1e6,
            );
        }
    }
    families.push(lat);

    let mut busbw = Family::new(
        "nodecert_collective_busbw_gbps",
        "Collective bus bandwidth (nccl-tests busbw) per message size in bytes, median, GB/s.",
    );
    let mut algbw = Family::new(
        "nodecert_collective_algbw_gbps",
        "Collective algorithm bandwidth (bytes / time) per message size in bytes, median, GB/s.",
    );
    // all_reduce's second pass with NVLS forced off, where the node could use NVLS: a family of
    // its own, so that the series above keep meaning what NCCL chose.
    let mut busbw_off = Family::new(
        "nodecert_collective_busbw_no_nvls_gbps",
        "Collective bus bandwidth with NVLink SHARP forced off (NCCL_NVLS_ENABLE=0) per message size in bytes, median, GB/s.",
    );
    for c in ev.checks.iter().filter(|c| c.kind == "collective") {
        let op = c.id.trim_start_matches("collective.").to_string();
        for (fam, name) in [
            (&mut busbw, "busbw"),
            (&mut algbw, "algbw"),
            (&mut busbw_off, "busbw_no_nvls"),
        ] {
            for m in medians(Some(c), name) {
                if let Some(bytes) = m.subject.bytes {
                    fam.push(
                        vec![("op", op.clone()), ("bytes", bytes.to_string())],
                        m.median,
                    );
                }
            }
        }
    }
    families.push(busbw);
    families.push(algbw);
    families.push(busbw_off);

    // Each GPU's GEMM rate per precision (the compute check's burst; the sustained load's rate
    // is the same GEMMs held, so it is a family of its own).
    let mut gemm = Family::new(
        "nodecert_gemm_tflops",
        "Dense GEMM throughput per GPU and precision (2 n^3 per GEMM), median, TFLOP/s.",
    );
    let mut held = Family::new(
        "nodecert_gemm_sustained_tflops",
        "Dense GEMM throughput per GPU under the sustained load, median, TFLOP/s.",
    );
    let compute = ev.check("compute");
    for m in compute.into_iter().flat_map(|r| r.metrics.iter()) {
        let Some(gpu) = m.subject.gpu else { continue };
        if m.name == crate::checks::compute::sustained::RATE {
            held.push(vec![("gpu", gpu.to_string())], m.median);
        } else if let Some(precision) = m.name.strip_suffix("_tflops") {
            gemm.push(
                vec![
                    ("gpu", gpu.to_string()),
                    ("precision", precision.to_string()),
                ],
                m.median,
            );
        }
    }
    families.push(gemm);
    families.push(held);

    let tr = ev.check("training");
    // Each partitioning the training check compared, by method (the data-parallel run is the
    // node's, below).
    for (name, metric, help, scale) in [
        (
            "nodecert_training_method_step_time_seconds",
            "step_time",
            "Reference training step time per partitioning, median, seconds.",
            1e-3,
        ),
        (
            "nodecert_training_method_scaling_efficiency_ratio",
            "scaling_efficiency",
            "Throughput of a partitioning over N times the one-GPU data-parallel throughput.",
            1.0,
        ),
        (
            "nodecert_training_method_comm_fraction_ratio",
            "comm_fraction",
            "Share of a partitioning's step spent waiting on all-reduces, median.",
            1.0,
        ),
    ] {
        let mut f = Family::new(name, help);
        for m in medians(tr, metric) {
            if let Some(method) = &m.subject.method {
                f.push(vec![("method", method.clone())], m.median * scale);
            }
        }
        families.push(f);
    }
    // The data-parallel run's figures (the node's), not a partitioning's.
    let dp = |name: &'static str| medians(tr, name).filter(|m| m.subject.method.is_none());
    let one = |name: &'static str| dp(name).next().map(|m| m.median);
    for (fam, help, value) in [
        (
            "nodecert_training_samples_per_second",
            "Reference training throughput, whole node, median, samples/s.",
            one("samples_per_s"),
        ),
        (
            "nodecert_training_step_time_seconds",
            "Reference training step time, median, seconds.",
            one("step_time").map(|ms| ms / 1e3),
        ),
        (
            "nodecert_training_scaling_efficiency_ratio",
            "N-GPU training throughput over N times the one-GPU throughput.",
            one("scaling_efficiency"),
        ),
        (
            "nodecert_training_final_loss",
            "Loss of the reference training run after its last step.",
            // A loss that stopped being a number ends as one: NaN, not its last finite value.
            if tr.is_some_and(|r| {
                crate::checks::training::stopped_being_finite(
                    &r.facts,
                    "loss",
                    &crate::evidence::Subject::node(),
                )
            }) {
                Some(f64::NAN)
            } else {
                dp("loss").next().and_then(|m| m.samples.last().copied())
            },
        ),
    ] {
        if let Some(v) = value {
            let mut f = Family::new(fam, help);
            f.push(vec![], v);
            families.push(f);
        }
    }

    let mut out = String::new();
    for f in families.iter().filter(|f| !f.samples.is_empty()) {
        let _ = writeln!(out, "# HELP {} {}", f.name, escape_help(f.help));
        let _ = writeln!(out, "# TYPE {} gauge", f.name);
        // One sample a label set, as the format requires (a scraper refuses the file
        // otherwise): two figures of evidence that differ only in what the labels do not carry
        // (a subject's bus id) give the first, as the report's tables show it.
        let mut seen = std::collections::HashSet::new();
        for (labels, v) in &f.samples {
            let all: Vec<String> = labels
                .iter()
                .chain(common.iter())
                .map(|(k, v)| format!("{k}=\"{}\"", escape_label_value(v)))
                .collect();
            let all = all.join(",");
            if seen.insert(all.clone()) {
                let _ = writeln!(out, "{}{{{all}}} {}", f.name, format_value(*v));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_label_values_and_formats_special_floats() {
        assert_eq!(escape_label_value("a\\b\"c"), "a\\\\b\\\"c");
        // A line break, an escape sequence, a carriage return and a bidi override reach the
        // file as the escapes every page shows (their backslash escaped for the format), never
        // as the characters that would act on a terminal.
        let v = escape_label_value("n\nd\u{1b}[2J\r\u{202e}x");
        assert!(
            !v.chars().any(|c| c.is_control() || c == '\u{202e}'),
            "{v:?}"
        );
        assert_eq!(v, "n\\\\nd\\\\u{1b}[2J\\\\r\\\\u{202e}x");
        assert_eq!(format_value(f64::NAN), "NaN");
        assert_eq!(format_value(f64::INFINITY), "+Inf");
        assert_eq!(format_value(f64::NEG_INFINITY), "-Inf");
        assert_eq!(format_value(2.5), "2.5");
    }

    /// Two figures that differ only in what the labels do not carry make one series, the
    /// first, as the report shows it: a repeated label set would make the file unreadable.
    #[test]
    fn a_label_set_is_written_once() {
        let mut ev = crate::testutil::simulated("h200-vm-1", &[]);
        let c = ev
            .checks
            .iter_mut()
            .find(|c| c.id == "host_bandwidth")
            .unwrap();
        let mut m = c.metrics.iter().find(|m| m.name == "h2d").unwrap().clone();
        m.subject.pci_bus_id = Some("0000:99:00.0".into());
        m.median = 1.0;
        c.metrics.push(m);
        let text = render(&ev);
        let h2d: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("nodecert_host_bandwidth_gbps{") && l.contains("h2d"))
            .collect();
        assert_eq!(h2d.len(), 1, "{h2d:?}");
        assert!(!h2d[0].ends_with(" 1"), "the first figure: {h2d:?}");
        let mut lines: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
        let n = lines.len();
        lines.sort();
        lines.dedup_by(|a, b| a.rsplit_once(' ').map(|x| x.0) == b.rsplit_once(' ').map(|x| x.0));
        assert_eq!(lines.len(), n, "no label set twice in the file");
    }

    #[test]
    fn status_codes_order_by_severity() {
        let codes: Vec<f64> = [Status::Pass, Status::Warn, Status::Fail, Status::Error]
            .into_iter()
            .map(status_code)
            .collect();
        assert!(codes.windows(2).all(|w| w[0] < w[1]));
        assert!(status_code(Status::Skip) < status_code(Status::Pass));
    }

    /// A loss that stopped being a number ends as NaN, not as its last finite value.
    #[test]
    fn a_loss_that_went_nan_is_exported_as_nan() {
        let mut ev = crate::testutil::simulated("h200-vm-1", &[]);
        let last = |t: &str| {
            t.lines()
                .find(|l| l.starts_with("nodecert_training_final_loss"))
                .map(str::to_string)
        };
        let finite = last(&render(&ev)).unwrap();
        assert!(!finite.ends_with("NaN"), "{finite}");
        let tr = ev.checks.iter_mut().find(|c| c.id == "training").unwrap();
        tr.facts.push(crate::evidence::Fact::new(
            "loss_not_finite_at_step",
            crate::evidence::Subject::node(),
            crate::evidence::FactValue::Count(7),
        ));
        assert_eq!(
            last(&render(&ev)).as_deref(),
            Some(
                "nodecert_training_final_loss{node=\"sim-h200-vm\",suite=\"h200-vm-1\",simulated=\"true\"} NaN"
            )
        );
    }

    #[test]
    fn a_failing_pair_shows_in_the_series() {
        let ev = crate::testutil::simulated("h100-sxm-8", &["slow-gpu-pair:gpu=1,peer=4"]);
        let t = render(&ev);
        assert!(t.contains("nodecert_run_pass{node=\"sim-hgx-h100\",suite=\"h100-sxm-8\",simulated=\"true\"} 0\n"), "{t}");
        assert!(t.contains(
            "nodecert_check_status{check=\"p2p_bandwidth\",kind=\"p2p_bandwidth\",node=\"sim-hgx-h100\",suite=\"h100-sxm-8\",simulated=\"true\"} 2\n"
        ));
        let slow = t
            .lines()
            .find(|l| {
                l.starts_with("nodecert_p2p_bandwidth_gbps{src=\"1\",dst=\"4\",mode=\"read\"")
            })
            .expect("pair 1 -> 4");
        let v: f64 = slow
            .rsplit(' ')
            .next()
            .unwrap_or("")
            .parse()
            .expect("value");
        assert!(v < 300.0, "{slow}");
    }

    /// The value of the one line that starts with `prefix`.
    fn value(t: &str, prefix: &str) -> f64 {
        let lines: Vec<&str> = t.lines().filter(|l| l.starts_with(prefix)).collect();
        assert_eq!(lines.len(), 1, "{prefix}\n{t}");
        lines[0].rsplit(' ').next().unwrap().parse().unwrap()
    }

    #[test]
    fn each_gpus_gemm_rate_and_each_partitioning_are_series() {
        let ev = crate::testutil::simulated("h100-sxm-8", &["slow-compute:gpu=5"]);
        let t = render(&ev);
        let rate = |g: usize, p: &str| {
            value(
                &t,
                &format!("nodecert_gemm_tflops{{gpu=\"{g}\",precision=\"{p}\""),
            )
        };
        for p in ["fp32", "tf32", "bf16"] {
            let (fast, slow) = (rate(0, p), rate(5, p));
            assert!(fast > 0.0 && slow < 0.5 * fast, "{p}: {fast} {slow}");
        }
        // fp8 is measured on the simulated Hopper too.
        assert!(rate(7, "fp8") > rate(7, "bf16"));
        let t8 = t
            .lines()
            .filter(|l| l.starts_with("nodecert_gemm_tflops{"))
            .count();
        assert_eq!(t8, 8 * 4, "{t}");
        // One line per partitioning and figure, labelled by method; the data-parallel run
        // keeps its own families.
        let tp = value(
            &t,
            "nodecert_training_method_scaling_efficiency_ratio{method=\"tensor-parallel\"",
        );
        assert!(tp > 0.0 && tp <= 1.0, "{tp}");
        let comm = value(
            &t,
            "nodecert_training_method_comm_fraction_ratio{method=\"hybrid (tensor 2 x data 4)\"",
        );
        assert!(comm > 0.0 && comm < 1.0, "{comm}");
        let step = value(
            &t,
            "nodecert_training_method_step_time_seconds{method=\"tensor-parallel\"",
        );
        assert!(step > 0.0 && step < 1.0, "seconds, not ms: {step}");
        assert_eq!(
            t.lines()
                .filter(|l| l.starts_with("nodecert_training_method_step_time_seconds{"))
                .count(),
            3
        );
        assert_eq!(
            t.lines()
                .filter(|l| l.starts_with("nodecert_training_scaling_efficiency_ratio{"))
                .count(),
            1
        );
    }
}
