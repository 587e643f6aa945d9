//! Peer-to-peer latency for every ordered GPU pair (small transfers).

use super::judge::{judge, outliers_by_class, typical};
use super::verify;
use super::{Check, Ctx, Measured, Progress};
use crate::backend::Backend;
use crate::error::HwError;
use crate::evidence::{Finding, Metric, Subject};
use crate::suite::P2pLatencyCheck;

pub struct P2pLatency(pub P2pLatencyCheck);

impl P2pLatency {
    /// The bounds the suite states for each pair (the outlier rule compares pairs).
    fn bounds(&self) -> Vec<String> {
        let mut b = super::stated_bounds("latency", "us", &self.0.latency_us);
        if let Some(p) = self.0.outlier_pct {
            b.push(format!("latency within {p}% of the median pair"));
        }
        b
    }
}

impl Check for P2pLatency {
    fn id(&self) -> String {
        "p2p_latency".into()
    }
    fn kind(&self) -> &'static str {
        "p2p_latency"
    }
    fn title(&self) -> String {
        "Peer-to-peer latency".into()
    }

    fn plan(&self, ctx: &Ctx) -> Result<Vec<String>, String> {
        let n = super::peer_plan(ctx, &self.bounds())?;
        Ok(vec![format!(
            "{} ordered pairs x {} small transfers",
            n * n.saturating_sub(1),
            self.0.iterations
        )])
    }

    fn measure(
        &self,
        ctx: &Ctx,
        b: &mut dyn Backend,
        progress: Progress,
    ) -> Result<Measured, HwError> {
        let pairs = ctx.inventory.ordered_pairs();
        let mut m = Measured::default();
        for (i, &(a, z)) in pairs.iter().enumerate() {
            let s = b.p2p_latency(a, z, self.0.iterations)?;
            // A time of 0 (or none) is a timer that failed, never the fastest pair there is.
            super::positive_times(&format!("peer latency GPU {a} -> GPU {z}"), "us", &s.values)?;
            // The CUDA code checks what the small transfers carried: judge it, per pair.
            verify::record(&mut m, "latency", Subject::pair(a, z), s.verified);
            m.metrics
                .push(Metric::new("latency", Subject::pair(a, z), "us", s.values).timed(s.timing));
            progress(i + 1, pairs.len());
        }
        Ok(m)
    }

    fn samples(&self, gpus: usize) -> (u64, String) {
        // CUDA batches 10 transfers a sample from 100 on; the simulator records up to 100.
        let i = self.0.iterations;
        let per_pair = crate::backend::cuda::latency_plan(i).1.max(i.min(100));
        let pairs = (gpus * gpus.saturating_sub(1)) as u64;
        (
            pairs * u64::from(per_pair),
            "checks.p2p_latency.iterations".into(),
        )
    }

    fn remeasure(&self) -> u32 {
        self.0.remeasure
    }

    fn evaluate(&self, ctx: &Ctx, m: &Measured) -> Vec<Finding> {
        let classed: Vec<(Subject, String, f64)> = m
            .metrics
            .iter()
            .map(|x| {
                (
                    x.subject.clone(),
                    super::p2p_bandwidth::path_class(ctx, &x.subject),
                    x.median,
                )
            })
            .collect();
        let mut out = verify::findings(m, &[("latency", "small peer transfer")]);
        out.extend(super::no_peer_pairs(ctx, &self.bounds()));
        out.extend(classed.iter().filter_map(|(who, _, v)| {
            judge(who, "latency", *v, "us", &self.0.latency_us).map(|f| f.on("latency"))
        }));
        if let Some(pct) = self.0.outlier_pct {
            let (known, left_out) = super::p2p_bandwidth::known_classes(ctx, &classed, "latency");
            out.extend(left_out.map(|f| f.on("latency")));
            out.extend(
                outliers_by_class(&known, pct, false, "latency", "us")
                    .into_iter()
                    .map(|f| f.on("latency")),
            );
        }
        let values: Vec<f64> = classed.iter().map(|x| x.2).collect();
        if let Some(f) = typical(&values, &self.0.latency_us, false, "latency", "us") {
            out.push(f.on("latency"));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::evidence::Status;

    /// The latency findings of a four-GPU PCIe box on two sockets (pairs 0-1 and 2-3 near,
    /// NODE; the rest across, SYS), each pair measured at `us(a, b)`.
    fn judge_box(us: impl Fn(usize, usize) -> f64, cfg: &str) -> Vec<Finding> {
        let (suite, inv, m) = crate::testutil::pcie_box("latency", "us", true, us);
        let ctx = crate::testutil::ctx(&suite, &inv);
        let cfg: P2pLatencyCheck = toml::from_str(cfg).unwrap();
        P2pLatency(cfg)
            .evaluate(&ctx, &m)
            .into_iter()
            .filter(|f| f.metric.as_deref() == Some("latency") && f.status != Status::Pass)
            .collect()
    }

    /// Near pairs 2.0 us, far pairs 20% slower.
    fn healthy(a: usize, b: usize) -> f64 {
        if a / 2 == b / 2 {
            2.0
        } else {
            2.4
        }
    }

    #[test]
    fn a_slow_pair_is_compared_with_pairs_of_its_own_path_class() {
        // 20% apart, more than the 15% rule: healthy, each class agrees with itself.
        assert!(judge_box(healthy, "outlier_pct = 15.0").is_empty());
        // One far pair 50% slower than its class fails, named, against its class.
        let f = judge_box(
            |a, b| healthy(a, b) * if (a, b) == (3, 0) { 1.5 } else { 1.0 },
            "outlier_pct = 15.0",
        );
        assert_eq!(f.len(), 1, "{f:#?}");
        assert_eq!(
            (f[0].subject.describe().as_str(), f[0].status),
            ("GPU 3 -> GPU 0", Status::Fail)
        );
        assert!(
            f[0].reason
                .contains("above the median of SYS pairs of 2.40 us"),
            "{}",
            f[0].reason
        );
        // The absolute ceiling holds for every pair.
        let f = judge_box(healthy, "latency_us = { fail_above = 2.2 }");
        assert_eq!(f.len(), 8, "{f:#?}");
        assert!(f.iter().all(|x| x.status == Status::Fail), "{f:#?}");
    }

    /// A latency sample of 0 us is a timer that failed: the check cannot measure, and no
    /// ceiling passes it.
    #[test]
    fn a_latency_of_zero_is_an_error_not_the_fastest_pair() {
        use crate::backend::sim::{self, SimBackend};
        let measure = |us: f64| {
            let mut node = sim::load_node("h100-sxm-8").unwrap();
            node.perf.p2p_latency_us = us;
            let mut b = SimBackend::new(node, vec![], 1).unwrap();
            let inv = b.inventory().unwrap();
            let loaded = crate::suite::load::load("h100-sxm-8").unwrap();
            let ctx = crate::testutil::ctx(&loaded.suite, &inv);
            let cfg: P2pLatencyCheck = toml::from_str("iterations = 3").unwrap();
            P2pLatency(cfg).measure(&ctx, &mut b, &mut |_, _| {})
        };
        let e = measure(0.0).unwrap_err().to_string();
        assert!(e.contains("timing peer latency GPU 0 -> GPU 1"), "{e}");
        assert!(e.contains("took 0 us"), "{e}");
        assert!(measure(2.0).is_ok());
    }

    #[test]
    fn a_uniformly_slow_box_is_warned_about_against_typical() {
        let cfg = "latency_us = { fail_above = 10.0, typical = 2.0 }";
        // Median 2.4 us against a typical 2 us: over 2 / 0.9 = 2.22 us.
        let f = judge_box(healthy, cfg);
        assert_eq!(f.len(), 1, "{f:#?}");
        assert_eq!(
            (f[0].subject.describe().as_str(), f[0].status),
            ("node", Status::Warn)
        );
        assert!(judge_box(|_, _| 2.1, cfg).is_empty());
    }
}
