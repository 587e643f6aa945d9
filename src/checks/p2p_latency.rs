//! Peer-to-peer latency for every ordered GPU pair (small transfers).

use super::judge::{judge, outliers_by_class, typical};
use super::verify;
use super::{Check, Ctx, Measured, Progress};
use crate::backend::Backend;
use crate::error::HwError;
use crate::evidence::{Finding, Metric, Subject};
use crate::suite::P2pLatencyCheck;

pub struct P2pLatency(pub P2pLatencyCheck);

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
        let n = super::peer_pairs(ctx)?;
        Ok(vec![format!(
            "{} ordered pairs x {} small transfers",
            n * (n - 1),
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
        let items: Vec<(String, f64)> = m
            .metrics
            .iter()
            .map(|x| (x.subject.describe(), x.median))
            .collect();
        let classed: Vec<(String, String, f64)> = m
            .metrics
            .iter()
            .map(|x| {
                (
                    x.subject.describe(),
                    super::p2p_bandwidth::path_class(ctx, &x.subject),
                    x.median,
                )
            })
            .collect();
        let mut out = verify::findings(m, &[("latency", "small peer transfer")], |_, s| {
            s.describe()
        });
        out.extend(items.iter().filter_map(|(who, v)| {
            judge(who, "latency", *v, "us", &self.0.latency_us).map(|f| f.on("latency"))
        }));
        if let Some(pct) = self.0.outlier_pct {
            out.extend(
                outliers_by_class(&classed, pct, false, "latency", "us")
                    .into_iter()
                    .map(|f| f.on("latency")),
            );
        }
        let values: Vec<f64> = items.iter().map(|x| x.1).collect();
        if let Some(f) = typical(&values, &self.0.latency_us, false, "latency", "us") {
            out.push(f.on("latency"));
        }
        out
    }
}
