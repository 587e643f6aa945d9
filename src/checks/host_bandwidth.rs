//! Host<->device bandwidth per GPU (H2D, D2H, both at once), all GPUs at once, and the device's
//! own copy bandwidth. Pinned, portable memory; copy engines; median of many samples.

use super::judge::{judge, outliers, typical};
use super::verify;
use super::{Check, Ctx, Measured, Progress};
use crate::backend::{Backend, HostDir};
use crate::error::HwError;
use crate::evidence::{
    Bytes, Convention, Directions, Fact, FactValue, Finding, Metric, Status, Subject, Tool,
};
use crate::suite::{HostBandwidthCheck, Limit};
use crate::units::format_bytes;

pub struct HostBandwidth(pub HostBandwidthCheck);

/// (metric name, human name) of each figure this check measures.
pub const FIGURES: [(&str, &str); 5] = [
    ("h2d", "host-to-device"),
    ("d2h", "device-to-host"),
    ("bidir", "both directions at once"),
    ("all_gpus_h2d", "host-to-device with all GPUs at once"),
    ("device_copy", "device-local copy"),
];

/// How each figure counts, compared with nvbandwidth's host and device-local copy tests:
/// "both directions at once" is the sum of both, and a device-local copy counts each byte read
/// and each byte written (nvbandwidth counts them once).
pub fn convention(name: &str) -> Option<Convention> {
    use Bytes::*;
    use Directions::*;
    let (d, b) = match name {
        "h2d" | "d2h" | "all_gpus_h2d" => (OneWay, Once),
        "bidir" => (SumOfBoth, Once),
        "device_copy" => (OneWay, ReadPlusWritten),
        _ => return None,
    };
    Some(Convention::new(d, b, Tool::Nvbandwidth))
}

impl HostBandwidth {
    /// The suite's limit for a figure; None for a name this check does not measure.
    fn limit(&self, name: &str) -> Option<&Limit> {
        match name {
            "h2d" => Some(&self.0.h2d),
            "d2h" => Some(&self.0.d2h),
            "bidir" => Some(&self.0.bidir),
            "all_gpus_h2d" => Some(&self.0.all_gpus_h2d),
            "device_copy" => Some(&self.0.device_copy),
            _ => None,
        }
    }

    /// Whether H2D is measured on all `n` GPUs at once: on several, and on one where the suite
    /// holds that figure to a bound.
    fn all_at_once(&self, n: usize) -> bool {
        n > 1 || (n == 1 && !self.0.all_gpus_h2d.judging().is_empty())
    }
}

impl Check for HostBandwidth {
    fn id(&self) -> String {
        "host_bandwidth".into()
    }
    fn kind(&self) -> &'static str {
        "host_bandwidth"
    }
    fn title(&self) -> String {
        "Host <-> device bandwidth".into()
    }

    fn plan(&self, ctx: &Ctx) -> Result<Vec<String>, String> {
        let n = ctx.inventory.gpus.len();
        if n == 0 {
            return Err("no GPUs".into());
        }
        let c = &self.0;
        let mut p = vec![format!(
            "{n} GPUs x H2D, D2H, both at once, device copy: {} buffers, {} warm-up + {} timed copies",
            format_bytes(c.size.0),
            c.warmup,
            c.iterations
        )];
        if self.all_at_once(n) {
            p.push(format!("H2D on all {n} GPUs at once"));
        }
        Ok(p)
    }

    fn measure(
        &self,
        ctx: &Ctx,
        b: &mut dyn Backend,
        progress: Progress,
    ) -> Result<Measured, HwError> {
        let c = &self.0;
        let n = ctx.inventory.gpus.len();
        let total = n * 4 + usize::from(self.all_at_once(n));
        let mut m = Measured::default();
        let mut done = 0;
        for g in 0..n {
            for (dir, name) in [
                (HostDir::H2d, "h2d"),
                (HostDir::D2h, "d2h"),
                (HostDir::Bidir, "bidir"),
            ] {
                let s = b.host_copy(g, dir, c.size.0, c.warmup, c.iterations)?;
                verify::record(&mut m, name, Subject::gpu(g), s.verified);
                if dir == HostDir::H2d {
                    host_memory(&mut m, "host_memory", g, s.host_memory.as_ref());
                }
                m.metrics.push(
                    Metric::new(name, Subject::gpu(g), "GB/s", s.values)
                        .timed(s.timing)
                        .counted(convention(name)),
                );
                done += 1;
                progress(done, total);
            }
            let s = b.device_copy(g, c.size.0, c.warmup, c.iterations)?;
            verify::record(&mut m, "device_copy", Subject::gpu(g), s.verified);
            m.metrics.push(
                Metric::new("device_copy", Subject::gpu(g), "GB/s", s.values)
                    .timed(s.timing)
                    .counted(convention("device_copy")),
            );
            done += 1;
            progress(done, total);
        }
        // On one GPU, "all at once" is that GPU alone: measured where the suite holds it to a
        // bound, so that the bound is judged rather than dropped.
        if self.all_at_once(n) {
            for (g, s) in b
                .host_copy_all(HostDir::H2d, c.size.0, c.warmup, c.iterations)?
                .into_iter()
                .enumerate()
            {
                verify::record(&mut m, "all_gpus_h2d", Subject::gpu(g), s.verified);
                host_memory(
                    &mut m,
                    "all_gpus_h2d_host_memory",
                    g,
                    s.host_memory.as_ref(),
                );
                m.metrics.push(
                    Metric::new("all_gpus_h2d", Subject::gpu(g), "GB/s", s.values)
                        .timed(s.timing)
                        .counted(convention("all_gpus_h2d")),
                );
            }
            progress(total, total);
        }
        Ok(m)
    }

    fn samples(&self, gpus: usize) -> (u64, String) {
        // H2D, D2H, both ways and device copy per GPU, then H2D on all at once.
        let figures = gpus as u64 * 4
            + if self.all_at_once(gpus) {
                gpus as u64
            } else {
                0
            };
        (
            figures * u64::from(self.0.iterations),
            "checks.host_bandwidth.iterations".into(),
        )
    }

    fn remeasure(&self) -> u32 {
        self.0.remeasure
    }

    fn evaluate(&self, _: &Ctx, m: &Measured) -> Vec<Finding> {
        let mut out = verify::findings(m, &FIGURES);
        out.extend(remote_memory_findings(m));
        // A figure this check has no limit for is a bug between measuring and judging: it is
        // not judged against another figure's limit.
        for x in m.metrics.iter().filter(|x| self.limit(&x.name).is_none()) {
            out.push(
                super::judge::finding(
                    Status::Error,
                    x.subject.clone(),
                    format!("unknown figure '{}'", x.name),
                    "a figure of this check",
                    format!(
                        "{}: host bandwidth figure '{}' is not one this check knows a limit for",
                        x.subject.describe(),
                        x.name
                    ),
                )
                .on(&x.name),
            );
        }
        for (name, human) in FIGURES {
            let Some(limit) = self.limit(name) else {
                continue;
            };
            let items: Vec<(Subject, f64)> = m
                .metrics
                .iter()
                .filter(|x| x.name == name)
                .map(|x| (x.subject.clone(), x.median))
                .collect();
            for (who, v) in &items {
                if let Some(f) = judge(who, human, *v, "GB/s", limit) {
                    out.push(f.on(name));
                }
            }
            if let Some(pct) = self.0.outlier_pct {
                out.extend(
                    outliers(&items, pct, true, human, "GB/s")
                        .into_iter()
                        .map(|f| f.on(name)),
                );
            }
            let values: Vec<f64> = items.iter().map(|x| x.1).collect();
            if let Some(f) = typical(&values, limit, true, human, "GB/s") {
                out.push(f.on(name));
            }
        }
        out
    }
}

/// Record where a GPU's pinned host buffers were; a placement on another NUMA node than the
/// GPU's is also recorded as `<name>_remote`, which the evaluation turns into a warning.
fn host_memory(
    m: &mut Measured,
    name: &str,
    g: usize,
    p: Option<&crate::platform::numa::HostPlacement>,
) {
    let Some(p) = p else { return };
    let placed = || FactValue::Text(p.describe());
    m.facts.push(Fact::new(name, Subject::gpu(g), placed()));
    if p.remote() {
        m.facts.push(Fact::new(
            format!("{name}_remote"),
            Subject::gpu(g),
            placed(),
        ));
    }
}

/// Host buffers on the far socket: the GPU's host figures crossed the socket link, so a low
/// figure may be the placement's fault, not the GPU's.
fn remote_memory_findings(m: &Measured) -> Vec<Finding> {
    m.facts
        .iter()
        .filter(|f| f.name.ends_with("host_memory_remote"))
        .map(|f| {
            let placed = f.value.describe();
            super::judge::finding(
                Status::Warn,
                f.subject.clone(),
                placed.clone(),
                "host buffers on the GPU's NUMA node",
                format!(
                    "{}: pinned host buffers were on {placed}: its host copies crossed the socket link",
                    f.subject.describe(),
                ),
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_buffers_on_another_node_are_recorded_and_warned_about() {
        use crate::platform::numa::HostPlacement;
        let at = |pages: i32| HostPlacement {
            gpu_node: Some(1),
            bound_cpus: Some("48-95".into()),
            pages_node: Some(pages),
            split: false,
            note: None,
        };
        let mut m = Measured::default();
        host_memory(&mut m, "host_memory", 5, Some(&at(1)));
        host_memory(&mut m, "host_memory", 6, Some(&at(0)));
        host_memory(&mut m, "host_memory", 7, None);
        let facts: Vec<(&str, Subject)> = m
            .facts
            .iter()
            .map(|f| (f.name.as_str(), f.subject.clone()))
            .collect();
        assert_eq!(
            facts,
            [
                ("host_memory", Subject::gpu(5)),
                ("host_memory", Subject::gpu(6)),
                ("host_memory_remote", Subject::gpu(6)),
            ]
        );
        let w = remote_memory_findings(&m);
        assert_eq!(w.len(), 1, "{w:#?}");
        assert_eq!(
            (w[0].status, w[0].subject.clone()),
            (Status::Warn, Subject::gpu(6))
        );
        assert_eq!(
            w[0].reason,
            "GPU 6: pinned host buffers were on NUMA node 0, not the GPU's node 1, allocated on \
             CPUs 48-95: its host copies crossed the socket link"
        );
    }

    fn check() -> HostBandwidth {
        HostBandwidth(
            toml::from_str("h2d = { fail_below = 48.0 }\ndevice_copy = { fail_below = 1000.0 }")
                .unwrap(),
        )
    }

    fn evaluate(metrics: Vec<Metric>) -> Vec<Finding> {
        let ev = crate::testutil::simulated("h200-vm-1", &[]);
        let ctx = Ctx {
            suite: &ev.suite.resolved,
            inventory: &ev.node,
            earlier: &[],
            simulated: true,
        };
        check().evaluate(
            &ctx,
            &Measured {
                metrics,
                facts: vec![],
            },
        )
    }

    #[test]
    fn each_figure_is_judged_against_its_own_limit() {
        // 500 GB/s is far above the H2D floor and far below the device-copy one.
        let f = evaluate(vec![Metric::new(
            "h2d",
            Subject::gpu(0),
            "GB/s",
            vec![500.0],
        )]);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].status, Status::Pass);
        let f = evaluate(vec![Metric::new(
            "device_copy",
            Subject::gpu(0),
            "GB/s",
            vec![500.0],
        )]);
        assert_eq!(f[0].status, Status::Fail);
    }

    #[test]
    fn an_unknown_figure_is_an_error_not_judged_by_another_limit() {
        let f = evaluate(vec![Metric::new("h2x", Subject::gpu(0), "GB/s", vec![5.0])]);
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].status, Status::Error);
        assert!(f[0].reason.contains("'h2x'"), "{}", f[0].reason);
        assert_eq!(f[0].subject.describe(), "GPU 0");
    }
}
