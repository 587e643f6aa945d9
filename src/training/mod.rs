//! The MLP training check: CPU golden reference, CUDA kernel sources, the run as a plan of GPU
//! operations, data-parallel, or tensor-parallel and hybrid ([`partition`]).

pub mod fit;
pub mod kernels;
pub mod partition;
pub mod plan;
pub mod reference;

use reference::{Flaw, MlpConfig};
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

/// The golden configuration of a training check.
pub fn golden_config(c: &crate::suite::TrainingCheck) -> MlpConfig {
    MlpConfig {
        layers: c.golden_layers.clone(),
        batch: c.golden_batch,
        steps: c.golden_steps,
        lr: c.golden_lr as f32,
        seed: c.seed,
    }
}

/// Losses of `steps` steps of `cfg` computed on the CPU, with `flaw` injected (Flaw::None for the
/// golden trajectory). Deterministic, so computed once per process for each input.
pub fn cpu_losses(cfg: &MlpConfig, flaw: Flaw) -> Result<Vec<f64>, reference::ConfigError> {
    cfg.validate()?;
    cached(cfg, format!("{flaw:?}"), || {
        Ok::<_, reference::ConfigError>(reference::train_with(cfg, cfg.steps, flaw).losses)
    })
}

/// Losses of `cfg.steps` steps of `cfg` partitioned as `p`, every rank simulated on the CPU
/// ([`reference::sharded`]); computed once per process for each input, as [`cpu_losses`].
pub fn sharded_cpu_losses(
    cfg: &MlpConfig,
    p: partition::Partition,
) -> Result<Vec<f64>, reference::sharded::ShardError> {
    cached(cfg, format!("{p:?}"), || {
        reference::sharded::train_sharded(cfg, p, cfg.steps).map(|r| r.losses)
    })
}

/// `train()`'s losses for `cfg` and `how` (a flaw, a partition), from this process's cache
/// when it has them.
fn cached<E>(
    cfg: &MlpConfig,
    how: String,
    train: impl FnOnce() -> Result<Vec<f32>, E>,
) -> Result<Vec<f64>, E> {
    type Key = (Vec<usize>, usize, usize, u32, u64, String);
    static CACHE: OnceLock<Mutex<HashMap<Key, Vec<f64>>>> = OnceLock::new();
    let key = (
        cfg.layers.clone(),
        cfg.batch,
        cfg.steps,
        cfg.lr.to_bits(),
        cfg.seed,
        how,
    );
    let cache = CACHE.get_or_init(|| Mutex::new(HashMap::new()));
    if let Some(v) = cache.lock().ok().and_then(|c| c.get(&key).cloned()) {
        return Ok(v);
    }
    let losses: Vec<f64> = train()?.into_iter().map(f64::from).collect();
    if let Ok(mut c) = cache.lock() {
        c.insert(key, losses.clone());
    }
    Ok(losses)
}
