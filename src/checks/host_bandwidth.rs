//! Host<->device bandwidth per GPU (H2D, D2H, both at once), all GPUs at once, and the device's
//! own copy bandwidth. Pinned, portable memory; copy engines; median of many samples.

use super::judge::{judge, outliers};
use super::{Check, Ctx, Measured, Progress};
use crate::backend::{Backend, HostDir};
use crate::error::HwError;
use crate::evidence::{Finding, Metric, Status, Subject};
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

impl HostBandwidth {
    fn limit(&self, name: &str) -> &Limit {
        match name {
            "h2d" => &self.0.h2d,
            "d2h" => &self.0.d2h,
            "bidir" => &self.0.bidir,
            "all_gpus_h2d" => &self.0.all_gpus_h2d,
            _ => &self.0.device_copy,
        }
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
        if n > 1 {
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
        let total = n * 4 + usize::from(n > 1);
        let mut m = Measured::default();
        let mut done = 0;
        for g in 0..n {
            for (dir, name) in [
                (HostDir::H2d, "h2d"),
                (HostDir::D2h, "d2h"),
                (HostDir::Bidir, "bidir"),
            ] {
                let s = b.host_copy(g, dir, c.size.0, c.warmup, c.iterations)?;
                verified(&mut m, name, g, s.verified);
                if dir == HostDir::H2d {
                    host_memory(&mut m, "host_memory", g, s.host_memory.as_ref());
                }
                m.metrics
                    .push(Metric::new(name, Subject::gpu(g), "GB/s", s.values).timed(s.timing));
                done += 1;
                progress(done, total);
            }
            let s = b.device_copy(g, c.size.0, c.warmup, c.iterations)?;
            verified(&mut m, "device_copy", g, s.verified);
            m.metrics.push(
                Metric::new("device_copy", Subject::gpu(g), "GB/s", s.values).timed(s.timing),
            );
            done += 1;
            progress(done, total);
        }
        if n > 1 {
            for (g, s) in b
                .host_copy_all(HostDir::H2d, c.size.0, c.warmup, c.iterations)?
                .into_iter()
                .enumerate()
            {
                verified(&mut m, "all_gpus_h2d", g, s.verified);
                host_memory(
                    &mut m,
                    "all_gpus_h2d_host_memory",
                    g,
                    s.host_memory.as_ref(),
                );
                m.metrics.push(
                    Metric::new("all_gpus_h2d", Subject::gpu(g), "GB/s", s.values).timed(s.timing),
                );
            }
            progress(total, total);
        }
        Ok(m)
    }

    fn evaluate(&self, _: &Ctx, m: &Measured) -> Vec<Finding> {
        let mut out = verification_findings(m);
        out.extend(remote_memory_findings(m));
        for (name, human) in FIGURES {
            let items: Vec<(String, f64)> = m
                .metrics
                .iter()
                .filter(|x| x.name == name)
                .map(|x| (x.subject.describe(), x.median))
                .collect();
            for (who, v) in &items {
                if let Some(f) = judge(who, human, *v, "GB/s", self.limit(name)) {
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
    m.facts.push(crate::evidence::Fact {
        name: name.into(),
        subject: Subject::gpu(g),
        value: p.describe(),
    });
    if p.remote() {
        m.facts.push(crate::evidence::Fact {
            name: format!("{name}_remote"),
            subject: Subject::gpu(g),
            value: p.describe(),
        });
    }
}

/// Host buffers on the far socket: the GPU's host figures crossed the socket link, so a low
/// figure may be the placement's fault, not the GPU's.
fn remote_memory_findings(m: &Measured) -> Vec<Finding> {
    m.facts
        .iter()
        .filter(|f| f.name.ends_with("host_memory_remote"))
        .map(|f| {
            super::judge::finding(
                Status::Warn,
                f.subject.describe(),
                f.value.clone(),
                "host buffers on the GPU's NUMA node",
                format!(
                    "{}: pinned host buffers were on {}: its host copies crossed the socket link",
                    f.subject.describe(),
                    f.value
                ),
            )
        })
        .collect()
}

/// Record a failed data check as a fact the evaluation turns into a failure.
pub(crate) fn verified(m: &mut Measured, name: &str, g: usize, v: Option<bool>) {
    if v == Some(false) {
        m.facts.push(crate::evidence::Fact {
            name: format!("{name}_data_mismatch"),
            subject: Subject::gpu(g),
            value: "data differed after the copy".into(),
        });
    }
}

pub(crate) fn verification_findings(m: &Measured) -> Vec<Finding> {
    m.facts
        .iter()
        .filter(|f| f.name.ends_with("_data_mismatch"))
        .map(|f| {
            super::judge::finding(
                Status::Fail,
                f.subject.describe(),
                "wrong data",
                "copied data intact",
                format!(
                    "{}: {} ({})",
                    f.subject.describe(),
                    f.value,
                    f.name.trim_end_matches("_data_mismatch")
                ),
            )
        })
        .collect()
}
