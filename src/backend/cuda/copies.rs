//! Copy measurements: host<->device, device-local, peer-to-peer bandwidth and peer latency.
//!
//! Method (nvbandwidth's): buffers are allocated and filled once; each sample times a batch of
//! copies between two CUDA events on the copy engine; a gate ([`Gate`]) holds the stream until
//! the whole batch is queued so launch overhead stays out; warm-up samples are discarded; the
//! destination is checked against the pattern after the last sample.

use super::driver::{
    check_device, cu, elapsed_ms, enable_peer, fill_device, record, wait, DevBuf, Gate, Gpu,
    HostBuf, Peer, SyncOnDrop,
};
use super::verify::{count_pattern_mismatches, fill_pattern};
use super::{copies_per_sample, device_copies_per_sample, latency_plan, Cuda};
use crate::backend::{HostDir, P2pMode, P2pSample, Samples, Timing};
use crate::error::HwError;
use cudarc::driver::{sys, CudaEvent, CudaStream};
use std::sync::atomic::{AtomicBool, Ordering};

/// One stream's part of a sample: `enqueue` queues one copy on `stream`.
pub struct Lane<'a> {
    pub gpu: &'a Gpu,
    pub stream: &'a CudaStream,
    pub enqueue: Box<dyn FnMut() -> Result<(), HwError> + 'a>,
}

/// Lanes timed as one: the first lane's events span the work of all of them (the other lanes
/// wait for its start event, and it waits for their ends).
pub struct Group<'a> {
    lanes: Vec<Lane<'a>>,
    start: CudaEvent,
    end: CudaEvent,
    joins: Vec<CudaEvent>,
}

impl<'a> Group<'a> {
    pub fn new(lanes: Vec<Lane<'a>>) -> Result<Group<'a>, HwError> {
        let lead = lanes.first().ok_or_else(|| HwError::Call {
            call: "timing".into(),
            detail: "no copies to time".into(),
        })?;
        let start = lead.gpu.event()?;
        let end = lead.gpu.event()?;
        let joins = lanes[1..]
            .iter()
            .map(|l| l.gpu.event())
            .collect::<Result<_, _>>()?;
        Ok(Group {
            lanes,
            start,
            end,
            joins,
        })
    }
}

/// Whether a batch may be held by the host-function gate.
#[derive(Clone, Copy)]
pub enum Gating<'a> {
    /// Never gate (staged peer copies, whose queuing may wait for the stream itself).
    Off,
    /// Gate unless a gate already stalled in this process (`stalled`), and if one stalls now,
    /// set `stalled` and measure again without it.
    Try(&'a AtomicBool),
}

/// Why a sampling pass ended early.
pub enum SampleError {
    /// The gate gave up holding the stream: the samples timed the queuing too.
    GateStalled,
    Hw(HwError),
}

impl From<HwError> for SampleError {
    fn from(e: HwError) -> Self {
        SampleError::Hw(e)
    }
}

/// Run `pass(gated)` gated when `gating` allows, and again ungated when the gate stalls; after
/// the first stall every later call goes ungated at once. A stall costs one wasted pass, never
/// the measurement: public NCCL and Hopper reports show pending host functions holding back
/// other streams, and a gate that cannot stall is better than a figure that cannot be had.
pub fn with_gate_fallback<T>(
    gating: Gating<'_>,
    mut pass: impl FnMut(bool) -> Result<T, SampleError>,
) -> Result<(T, Timing), HwError> {
    let ungated = |pass: &mut dyn FnMut(bool) -> Result<T, SampleError>| match pass(false) {
        Ok(t) => Ok((t, Timing::Events)),
        Err(SampleError::Hw(e)) => Err(e),
        // Without a gate nothing can stall; say so rather than loop.
        Err(SampleError::GateStalled) => Err(stall_error()),
    };
    match gating {
        Gating::Off => ungated(&mut pass),
        Gating::Try(stalled) if stalled.load(Ordering::Acquire) => ungated(&mut pass),
        Gating::Try(stalled) => match pass(true) {
            Ok(t) => Ok((t, Timing::GatedEvents)),
            Err(SampleError::Hw(e)) => Err(e),
            Err(SampleError::GateStalled) => {
                stalled.store(true, Ordering::Release);
                ungated(&mut pass)
            }
        },
    }
}

fn stall_error() -> HwError {
    HwError::Call {
        call: "cuLaunchHostFunc (stream gate)".into(),
        detail: "queuing one batch of copies took over 10 s; the sample would time the queuing, \
                 not the copies"
            .into(),
    }
}

/// Run `warmup` + `samples` samples of `per_sample` copies per lane; all groups start together.
/// Returns, per group, the seconds of each timed sample, and how they were timed.
pub fn run_samples(
    groups: &mut [Group<'_>],
    per_sample: u32,
    warmup: u32,
    samples: u32,
    gating: Gating<'_>,
) -> Result<(Vec<Vec<f64>>, Timing), HwError> {
    with_gate_fallback(gating, |gated| {
        sample_pass(groups, per_sample, warmup, samples, gated)
    })
}

/// One pass of samples; `gated`: hold the streams while queuing.
fn sample_pass(
    groups: &mut [Group<'_>],
    per_sample: u32,
    warmup: u32,
    samples: u32,
    gated: bool,
) -> Result<Vec<Vec<f64>>, SampleError> {
    let mut out = vec![Vec::with_capacity(samples as usize); groups.len()];
    for s in 0..warmup + samples {
        let gate = Gate::new();
        for g in groups.iter_mut() {
            let lead = g.lanes[0].stream;
            if gated {
                gate.hold(lead)?;
            }
            record(&g.start, lead)?;
            for l in &g.lanes[1..] {
                wait(l.stream, &g.start)?;
            }
        }
        for _ in 0..per_sample {
            for g in groups.iter_mut() {
                for l in g.lanes.iter_mut() {
                    l.gpu.bind()?;
                    (l.enqueue)()?;
                }
            }
        }
        for g in groups.iter_mut() {
            let lead = g.lanes[0].stream;
            for (l, j) in g.lanes[1..].iter().zip(&g.joins) {
                record(j, l.stream)?;
                wait(lead, j)?;
            }
            record(&g.end, lead)?;
        }
        gate.open();
        for (k, g) in groups.iter().enumerate() {
            let ms = elapsed_ms(&g.start, &g.end)?;
            if s >= warmup {
                out[k].push(ms / 1e3);
            }
        }
        if gate.expired() {
            return Err(SampleError::GateStalled);
        }
    }
    Ok(out)
}

/// GB/s (10^9 bytes/s) for `bytes` per sample. A sample the GPU timed at no time (or at a time
/// that is not a number) has no bandwidth: an error naming the measurement (`what`), never a
/// NaN or infinite figure in the evidence.
fn gbps(what: &str, bytes: f64, secs: &[f64]) -> Result<Vec<f64>, HwError> {
    secs.iter()
        .enumerate()
        .map(|(i, t)| {
            let v = bytes / t / 1e9;
            if *t > 0.0 && v.is_finite() {
                Ok(v)
            } else {
                Err(HwError::Call {
                    call: format!("timing the {what}"),
                    detail: format!(
                        "sample {} of {} took {t} s by the GPU's events, so it has no bandwidth",
                        i + 1,
                        secs.len()
                    ),
                })
            }
        })
        .collect()
}

pub fn buffer_len(bytes: u64) -> Result<usize, HwError> {
    if bytes == 0 {
        return Err(HwError::NotSupported("a copy of 0 bytes".into()));
    }
    usize::try_from(bytes).map_err(|_| HwError::NotSupported(format!("a {bytes} byte buffer")))
}

/// Seeds: one per buffer, so that a copy from the wrong buffer shows.
fn seed(kind: u32, gpu: usize, peer: usize) -> u32 {
    kind.wrapping_mul(0x0101_0101) ^ ((gpu as u32) << 8) ^ ((peer as u32) << 16)
}

const H2D: u32 = 1;
const D2H: u32 = 2;
const D2D: u32 = 3;
const P2P_FWD: u32 = 4;
const P2P_REV: u32 = 5;
const LAT: u32 = 6;

fn h2d_lane<'a>(g: &'a Gpu, s: usize, host: &HostBuf, dev: &DevBuf, n: usize) -> Lane<'a> {
    let (src, dst) = (host.ptr() as usize, dev.ptr);
    let stream = &g.streams[s];
    let raw = stream.cu_stream();
    Lane {
        gpu: g,
        stream,
        enqueue: Box::new(move || {
            // SAFETY: both buffers outlive the samples (SyncOnDrop waits before they drop).
            cu("cuMemcpyHtoDAsync", unsafe {
                sys::cuMemcpyHtoDAsync_v2(dst, src as *const std::ffi::c_void, n, raw)
            })
        }),
    }
}

fn d2h_lane<'a>(g: &'a Gpu, s: usize, dev: &DevBuf, host: &HostBuf, n: usize) -> Lane<'a> {
    let (src, dst) = (dev.ptr, host.ptr() as usize);
    let stream = &g.streams[s];
    let raw = stream.cu_stream();
    Lane {
        gpu: g,
        stream,
        enqueue: Box::new(move || {
            // SAFETY: as in h2d_lane.
            cu("cuMemcpyDtoHAsync", unsafe {
                sys::cuMemcpyDtoHAsync_v2(dst as *mut std::ffi::c_void, src, n, raw)
            })
        }),
    }
}

/// A peer copy `src` (on `from`) -> `dst` (on `to`), queued on `by`'s first stream.
fn peer_lane<'a>(
    by: &'a Gpu,
    from: &Gpu,
    src: &DevBuf,
    to: &Gpu,
    dst: &DevBuf,
    n: usize,
) -> Lane<'a> {
    let (src_ctx, dst_ctx) = (from.ctx.cu_ctx() as usize, to.ctx.cu_ctx() as usize);
    let (s, d) = (src.ptr, dst.ptr);
    let stream = &by.streams[0];
    let raw = stream.cu_stream();
    Lane {
        gpu: by,
        stream,
        enqueue: Box::new(move || {
            // SAFETY: buffers and contexts outlive the samples. Note the argument order of the
            // C function: dst, dstContext, src, srcContext.
            cu("cuMemcpyPeerAsync", unsafe {
                sys::cuMemcpyPeerAsync(
                    d,
                    dst_ctx as sys::CUcontext,
                    s,
                    src_ctx as sys::CUcontext,
                    n,
                    raw,
                )
            })
        }),
    }
}

struct HostBufs {
    h2d: Option<(HostBuf, DevBuf, u32)>,
    d2h: Option<(HostBuf, DevBuf, u32)>,
}

fn host_bufs(g: &Gpu, dir: HostDir, n: usize) -> Result<HostBufs, HwError> {
    let h2d = if matches!(dir, HostDir::H2d | HostDir::Bidir) {
        let sd = seed(H2D, g.index, 0);
        let mut host = HostBuf::new(g, n)?;
        fill_pattern(host.slice_mut(), sd, 0);
        let dev = DevBuf::new(g, n)?;
        dev.memset(0)?;
        Some((host, dev, sd))
    } else {
        None
    };
    let d2h = if matches!(dir, HostDir::D2h | HostDir::Bidir) {
        let sd = seed(D2H, g.index, 0);
        let host = HostBuf::new(g, n)?; // zeroed
        let dev = DevBuf::new(g, n)?;
        fill_device(&dev, sd)?;
        Some((host, dev, sd))
    } else {
        None
    };
    Ok(HostBufs { h2d, d2h })
}

impl Cuda {
    /// Gate copy batches unless a gate has stalled in this process.
    pub(super) fn gating(&self) -> Gating<'_> {
        Gating::Try(&self.gate_stalled)
    }

    /// Host<->device copies on each of `gpus` at once (one GPU: the per-GPU figure).
    pub fn host_copy_on(
        &self,
        gpus: &[&Gpu],
        dir: HostDir,
        bytes: u64,
        warmup: u32,
        iters: u32,
    ) -> Result<Vec<Samples>, HwError> {
        let n = buffer_len(bytes)?;
        let k = copies_per_sample(bytes);
        let mut bufs = gpus
            .iter()
            .map(|g| host_bufs(g, dir, n))
            .collect::<Result<Vec<_>, _>>()?;
        let _sync = SyncOnDrop(gpus.to_vec());
        let (times, timing) = {
            let mut groups = Vec::new();
            for (g, b) in gpus.iter().zip(&bufs) {
                let mut lanes = Vec::new();
                if let Some((host, dev, _)) = &b.h2d {
                    lanes.push(h2d_lane(g, 0, host, dev, n));
                }
                if let Some((host, dev, _)) = &b.d2h {
                    let s = usize::from(b.h2d.is_some());
                    lanes.push(d2h_lane(g, s, dev, host, n));
                }
                groups.push(Group::new(lanes)?);
            }
            run_samples(&mut groups, k, warmup, iters, self.gating())?
        };
        for g in gpus {
            g.sync_streams()?;
        }
        let per_sample = (n as f64)
            * k as f64
            * if matches!(dir, HostDir::Bidir) {
                2.0
            } else {
                1.0
            };
        let mut out = Vec::new();
        for ((b, t), g) in bufs.iter_mut().zip(&times).zip(gpus) {
            let host_memory = b
                .h2d
                .as_ref()
                .or(b.d2h.as_ref())
                .map(|(h, _, _)| h.placement.clone());
            let mut wrong = 0;
            if let Some((_, dev, sd)) = &b.h2d {
                wrong += check_device(dev, *sd)?;
            }
            if let Some((host, _, sd)) = &mut b.d2h {
                wrong += count_pattern_mismatches(host.slice_mut(), *sd, 0);
            }
            out.push(Samples {
                values: gbps(
                    &format!(
                        "{} copy of GPU {}",
                        match dir {
                            HostDir::H2d => "host-to-device",
                            HostDir::D2h => "device-to-host",
                            HostDir::Bidir => "both-ways host",
                        },
                        g.index
                    ),
                    per_sample,
                    t,
                )?,
                verified: Some(wrong == 0),
                timing: Some(timing),
                host_memory,
            });
        }
        Ok(out)
    }

    /// Device-local copy; the figure counts bytes read plus bytes written.
    pub fn device_copy_on(
        &self,
        g: &Gpu,
        bytes: u64,
        warmup: u32,
        iters: u32,
    ) -> Result<Samples, HwError> {
        let n = buffer_len(bytes)?;
        let k = device_copies_per_sample(bytes);
        let sd = seed(D2D, g.index, 0);
        let src = DevBuf::new(g, n)?;
        fill_device(&src, sd)?;
        let dst = DevBuf::new(g, n)?;
        dst.memset(0)?;
        let _sync = SyncOnDrop(vec![g]);
        let (times, timing) = {
            let (s, d) = (src.ptr, dst.ptr);
            let raw = g.streams[0].cu_stream();
            let lane = Lane {
                gpu: g,
                stream: &g.streams[0],
                enqueue: Box::new(move || {
                    // SAFETY: both buffers outlive the samples.
                    cu("cuMemcpyDtoDAsync", unsafe {
                        sys::cuMemcpyDtoDAsync_v2(d, s, n, raw)
                    })
                }),
            };
            let mut groups = vec![Group::new(vec![lane])?];
            run_samples(&mut groups, k, warmup, iters, self.gating())?
        };
        g.sync_streams()?;
        let wrong = check_device(&dst, sd)?;
        Ok(Samples {
            values: gbps(
                &format!("device copy of GPU {}", g.index),
                2.0 * n as f64 * k as f64,
                &times[0],
            )?,
            verified: Some(wrong == 0),
            timing: Some(timing),
            host_memory: None,
        })
    }

    /// Whether `from` can access `to`'s memory, enabling it on first use.
    pub fn peer(&mut self, from: usize, to: usize) -> Result<bool, HwError> {
        if let Some(v) = self.peers.get(&(from, to)) {
            return Ok(*v);
        }
        let ok = matches!(enable_peer(self.gpu(from)?, self.gpu(to)?)?, Peer::Enabled);
        self.peers.insert((from, to), ok);
        Ok(ok)
    }

    pub fn p2p_copy(
        &mut self,
        src: usize,
        dst: usize,
        mode: P2pMode,
        bytes: u64,
        warmup: u32,
        iters: u32,
    ) -> Result<P2pSample, HwError> {
        if src == dst {
            return Err(HwError::NotSupported(
                "a peer copy needs two different GPUs".into(),
            ));
        }
        let n = buffer_len(bytes)?;
        let k = copies_per_sample(bytes);
        // Read: the destination pulls (it accesses the source's memory). Write: the source
        // pushes (it accesses the destination's memory). Both: both pull at once.
        let peer_access = match mode {
            P2pMode::Read => self.peer(dst, src)?,
            P2pMode::Write => self.peer(src, dst)?,
            P2pMode::Bidir => self.peer(dst, src)? & self.peer(src, dst)?,
        };
        let (a, b) = (self.gpu(src)?, self.gpu(dst)?);
        let sd_fwd = seed(P2P_FWD, src, dst);
        let fwd_src = DevBuf::new(a, n)?;
        fill_device(&fwd_src, sd_fwd)?;
        let fwd_dst = DevBuf::new(b, n)?;
        fwd_dst.memset(0)?;
        let sd_rev = seed(P2P_REV, dst, src);
        let rev = if mode == P2pMode::Bidir {
            let s = DevBuf::new(b, n)?;
            fill_device(&s, sd_rev)?;
            let d = DevBuf::new(a, n)?;
            d.memset(0)?;
            Some((s, d))
        } else {
            None
        };
        let _sync = SyncOnDrop(vec![a, b]);
        let (times, timing) = {
            let by = if mode == P2pMode::Write { a } else { b };
            let mut lanes = vec![peer_lane(by, a, &fwd_src, b, &fwd_dst, n)];
            if let Some((s, d)) = &rev {
                lanes.push(peer_lane(a, b, s, a, d, n));
            }
            let mut groups = vec![Group::new(lanes)?];
            let gating = if peer_access {
                self.gating()
            } else {
                Gating::Off
            };
            run_samples(&mut groups, k, warmup, iters, gating)?
        };
        a.sync_streams()?;
        b.sync_streams()?;
        let mut wrong = check_device(&fwd_dst, sd_fwd)?;
        if let Some((_, d)) = &rev {
            wrong += check_device(d, sd_rev)?;
        }
        let dirs = if mode == P2pMode::Bidir { 2.0 } else { 1.0 };
        Ok(P2pSample {
            gbps: Samples {
                values: gbps(
                    &format!("peer copy ({mode:?}) GPU {src} -> GPU {dst}"),
                    dirs * n as f64 * k as f64,
                    &times[0],
                )?,
                verified: Some(wrong == 0),
                timing: Some(timing),
                host_memory: None,
            },
            peer_access,
        })
    }

    /// One-way latency of 4-byte peer copies: the destination pulls, copies queued back to back
    /// behind a gate; each sample is the time of a batch divided by its copies, microseconds.
    pub fn p2p_latency(&mut self, src: usize, dst: usize, iters: u32) -> Result<Samples, HwError> {
        if src == dst {
            return Err(HwError::NotSupported(
                "a peer latency needs two different GPUs".into(),
            ));
        }
        let peer_access = self.peer(dst, src)?;
        let (a, b) = (self.gpu(src)?, self.gpu(dst)?);
        const N: usize = 4;
        let sd = seed(LAT, src, dst);
        let s = DevBuf::new(a, N)?;
        fill_device(&s, sd)?;
        let d = DevBuf::new(b, N)?;
        d.memset(0)?;
        let (per, samples) = latency_plan(iters);
        let _sync = SyncOnDrop(vec![a, b]);
        let (times, timing) = {
            let mut groups = vec![Group::new(vec![peer_lane(b, a, &s, b, &d, N)])?];
            let gating = if peer_access {
                self.gating()
            } else {
                Gating::Off
            };
            run_samples(&mut groups, per, 2, samples, gating)?
        };
        b.sync_streams()?;
        let wrong = check_device(&d, sd)?;
        Ok(Samples {
            values: times[0].iter().map(|t| t / per as f64 * 1e6).collect(),
            verified: Some(wrong == 0),
            timing: Some(timing),
            host_memory: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hw() -> HwError {
        HwError::Call {
            call: "cuMemcpyHtoDAsync".into(),
            detail: "CUDA_ERROR_ILLEGAL_ADDRESS".into(),
        }
    }

    #[test]
    fn a_sample_timed_at_no_time_is_an_error_naming_the_measurement_not_a_nan() {
        assert_eq!(gbps("x", 2e9, &[1.0, 0.5]).unwrap(), vec![2.0, 4.0]);
        for bad in [0.0, -1.0, f64::NAN, 1e-320] {
            let e = gbps("device copy of GPU 3", 2e9, &[1.0, bad]).unwrap_err();
            let text = e.to_string();
            assert!(text.contains("device copy of GPU 3"), "{text}");
            assert!(text.contains("sample 2 of 2"), "{text}");
        }
    }

    #[test]
    fn a_stalled_gate_is_measured_again_ungated_and_stays_off() {
        let stalled = AtomicBool::new(false);
        let mut calls = Vec::new();
        let r = with_gate_fallback(Gating::Try(&stalled), |gated| {
            calls.push(gated);
            if gated {
                Err(SampleError::GateStalled)
            } else {
                Ok(7)
            }
        });
        assert_eq!(r.ok(), Some((7, Timing::Events)));
        assert_eq!(calls, vec![true, false]);
        assert!(stalled.load(Ordering::Acquire));
        // The next measurement does not try the gate again.
        calls.clear();
        let r = with_gate_fallback(Gating::Try(&stalled), |gated| {
            calls.push(gated);
            Ok(8)
        });
        assert_eq!(r.ok(), Some((8, Timing::Events)));
        assert_eq!(calls, vec![false]);
    }

    #[test]
    fn a_gate_that_holds_measures_gated_once() {
        let stalled = AtomicBool::new(false);
        let mut calls = Vec::new();
        let r = with_gate_fallback(Gating::Try(&stalled), |gated| {
            calls.push(gated);
            Ok(1)
        });
        assert_eq!(r.ok(), Some((1, Timing::GatedEvents)));
        assert_eq!(calls, vec![true]);
        assert!(!stalled.load(Ordering::Acquire));
        let r = with_gate_fallback(Gating::Off, |gated| {
            assert!(!gated);
            Ok(2)
        });
        assert_eq!(r.ok(), Some((2, Timing::Events)));
    }

    #[test]
    fn a_driver_error_is_not_retried_or_taken_for_a_stall() {
        let stalled = AtomicBool::new(false);
        let mut calls = 0;
        let r: Result<((), Timing), HwError> = with_gate_fallback(Gating::Try(&stalled), |_| {
            calls += 1;
            Err(SampleError::Hw(hw()))
        });
        assert!(matches!(r, Err(HwError::Call { .. })));
        assert_eq!(calls, 1);
        assert!(!stalled.load(Ordering::Acquire));
        // An ungated pass that reports a stall (it cannot) ends with the stall error, no loop.
        let r: Result<((), Timing), HwError> =
            with_gate_fallback(Gating::Off, |_| Err(SampleError::GateStalled));
        assert!(r.unwrap_err().to_string().contains("took over 10 s"));
    }
}
