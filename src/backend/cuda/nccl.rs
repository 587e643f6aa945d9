//! NCCL collectives over all GPUs in this process (one communicator per GPU from
//! `ncclCommInitAll`), measured and checked the way nccl-tests does: f32 data, sum, root 0,
//! out-of-place; warm-up iterations, then timed iterations back to back, then a check run whose
//! result is compared element by element with what the collective must produce (#wrong).
//!
//! Timing: events on every rank's stream around each iteration; an iteration's time is the
//! longest of the ranks' (the collective ends when its slowest rank does). Like nccl-tests'
//! default mode this includes the host's launch of each iteration.
//!
//! cudarc's safe `Comm` is not used: its `Drop` unwraps the result of `ncclCommAbort`, and its
//! buffer accessors record events in the timed loop. The raw calls here name themselves in
//! every error, decoded with `ncclGetErrorString`.

use super::driver::{elapsed_ms, record, DevBuf, Gpu, SyncOnDrop, STAGE};
use super::verify::{input_value, layout, CollLayout, ELT, ROOT};
use crate::backend::CollectiveSample;
use crate::error::HwError;
use crate::suite::CollectiveOp;
use cudarc::nccl::result::{self as nr, NcclError};
use cudarc::nccl::sys as ns;
use std::ffi::c_void;

/// "ncclUnhandledCudaError: unhandled cuda error (run with NCCL_DEBUG=WARN for details)".
pub fn describe(e: &NcclError) -> String {
    // SAFETY: ncclGetErrorString returns a pointer to a static string (or null).
    let p = unsafe { ns::ncclGetErrorString(e.0) };
    let text = if p.is_null() {
        String::new()
    } else {
        // SAFETY: non-null, NUL-terminated static string.
        unsafe { std::ffi::CStr::from_ptr(p) }
            .to_string_lossy()
            .into_owned()
    };
    format!("{:?}: {text} (NCCL_DEBUG=WARN says more)", e.0)
}

fn nk<T>(call: &str, r: Result<T, NcclError>) -> Result<T, HwError> {
    r.map_err(|e| HwError::Call {
        call: call.into(),
        detail: describe(&e),
    })
}

/// "2.28.3" from ncclGetVersion's code (X*10000+Y*100+Z since 2.9, X*1000+Y*100+Z before).
pub fn decode_version(code: i32) -> String {
    let c = code.max(0);
    let (major, minor, patch) = if c >= 10000 {
        (c / 10000, (c % 10000) / 100, c % 100)
    } else {
        (c / 1000, (c % 1000) / 100, c % 100)
    };
    format!("{major}.{minor}.{patch}")
}

/// The loaded NCCL's version. Call only when libnccl is loadable.
pub fn version() -> Result<String, HwError> {
    nk("ncclGetVersion", nr::get_nccl_version()).map(decode_version)
}

/// One communicator per GPU, destroyed (aborted) on drop, errors ignored.
pub struct Comms {
    comms: Vec<ns::ncclComm_t>,
}

use crate::backend::NCCL_ID_BYTES as UNIQUE_ID_BYTES;

/// A new unique id (`ncclGetUniqueId`), for a communicator across processes: it names this
/// process's bootstrap listener, so the process that made it must take part.
pub fn unique_id() -> Result<Vec<u8>, HwError> {
    let id = nk("ncclGetUniqueId", nr::get_uniqueid())?;
    Ok(id.internal.iter().map(|&c| c as u8).collect())
}

impl Comms {
    pub fn init(gpus: &[&Gpu]) -> Result<Comms, HwError> {
        let ordinals: Vec<i32> = gpus.iter().map(|g| g.ordinal as i32).collect();
        let mut comms = vec![std::ptr::null_mut(); gpus.len()];
        // SAFETY: `comms` has room for one communicator per ordinal.
        nk(
            &format!("ncclCommInitAll over CUDA devices {ordinals:?}"),
            unsafe {
                nr::comm_init_all(comms.as_mut_ptr(), ordinals.len() as i32, ordinals.as_ptr())
            },
        )?;
        Ok(Comms { comms })
    }

    /// This process's GPUs as ranks `first..first + gpus.len()` of a communicator of `total`
    /// ranks across processes (nodes), from the unique id another rank made: one
    /// `ncclCommInitRank` per GPU, with that GPU current, inside one group (one process
    /// initialising several ranks must group them, or the first call waits for the others
    /// forever). The call returns once every rank of every node has joined; the caller's
    /// deadline bounds it.
    pub fn init_ranks(
        gpus: &[&Gpu],
        id: &[u8],
        first: usize,
        total: usize,
    ) -> Result<Comms, HwError> {
        let bad = |detail: String| HwError::Call {
            call: "ncclCommInitRank".into(),
            detail,
        };
        if id.len() != UNIQUE_ID_BYTES {
            return Err(bad(format!(
                "a unique id of {} bytes (NCCL's has {UNIQUE_ID_BYTES})",
                id.len()
            )));
        }
        if gpus.is_empty() || first + gpus.len() > total || total > i32::MAX as usize {
            return Err(bad(format!(
                "ranks {first}..{} of {total}: not inside the communicator",
                first + gpus.len()
            )));
        }
        let mut uid = ns::ncclUniqueId {
            internal: [0; UNIQUE_ID_BYTES],
        };
        for (d, s) in uid.internal.iter_mut().zip(id) {
            *d = *s as std::ffi::c_char;
        }
        // Made before the calls: whatever fails, the communicators made so far are aborted
        // (a null one is refused by ncclCommAbort, harmlessly).
        let mut made = Comms {
            comms: vec![std::ptr::null_mut(); gpus.len()],
        };
        grouped(|| {
            for (i, g) in gpus.iter().enumerate() {
                g.bind()?;
                let rank = first + i;
                // SAFETY: a valid out-pointer into `made`; the id is NCCL's own layout.
                nk(
                    &format!("ncclCommInitRank (rank {rank} of {total}, {})", g.label()),
                    unsafe {
                        nr::comm_init_rank(&mut made.comms[i], total as i32, uid, rank as i32)
                    },
                )?;
            }
            Ok(())
        })?;
        Ok(made)
    }

    pub(crate) fn len(&self) -> usize {
        self.comms.len()
    }

    /// An error a communicator reported asynchronously (a failed kernel, a network error).
    pub fn async_errors(&self) -> Result<(), HwError> {
        for (r, c) in self.comms.iter().enumerate() {
            let mut res = ns::ncclResult_t::ncclSuccess;
            // SAFETY: live communicator, valid out-pointer.
            nk("ncclCommGetAsyncError", unsafe {
                ns::ncclCommGetAsyncError(*c, &mut res).result()
            })?;
            if !matches!(
                res,
                ns::ncclResult_t::ncclSuccess | ns::ncclResult_t::ncclInProgress
            ) {
                return Err(HwError::Call {
                    call: format!("NCCL rank {r} (ncclCommGetAsyncError)"),
                    detail: describe(&NcclError(res)),
                });
            }
        }
        Ok(())
    }
}

impl Drop for Comms {
    fn drop(&mut self) {
        for c in &self.comms {
            // SAFETY: each communicator is released once. Callers synchronise before dropping,
            // except after a failure, where aborting what is in flight is the point.
            let _ = unsafe { ns::ncclCommAbort(*c) };
        }
    }
}

/// Calls between ncclGroupStart and ncclGroupEnd; the group is always closed, even when a call
/// inside fails (an open group would swallow the next calls).
fn grouped(f: impl FnOnce() -> Result<(), HwError>) -> Result<(), HwError> {
    with_group(nr::group_start, nr::group_end, f)
}

/// [`grouped`] with the group calls passed in (tests count them). A panic inside `f` closes the
/// group too: cudarc panics when the loaded NCCL lacks a function (ncclSend before 2.7), and the
/// worker turns the panic into an error and carries on; a group left open on its thread would
/// keep every later collective queued and never launched, and the data checks would then report
/// untouched buffers as wrong data.
fn with_group<S, E>(
    start: impl FnOnce() -> Result<S, NcclError>,
    end: E,
    f: impl FnOnce() -> Result<(), HwError>,
) -> Result<(), HwError>
where
    E: FnMut() -> Result<nr::NcclStatus, NcclError>,
{
    /// Calls `end` when dropped unless `closed`: on the way out of a panic.
    struct Close<E: FnMut() -> Result<nr::NcclStatus, NcclError>> {
        end: E,
        closed: bool,
    }
    impl<E: FnMut() -> Result<nr::NcclStatus, NcclError>> Drop for Close<E> {
        fn drop(&mut self) {
            if !self.closed {
                let _ = (self.end)();
            }
        }
    }
    nk("ncclGroupStart", start())?;
    let mut close = Close { end, closed: false };
    let r = f();
    close.closed = true;
    let ended = nk("ncclGroupEnd", (close.end)());
    r?;
    ended.map(|_| ())
}

/// Sum `count` f32 in place on every rank, in one group: rank `r`'s buffer at device address
/// `bufs[r].0`, queued on its stream `bufs[r].1`. Returns once queued.
pub fn all_reduce_in_place(
    comms: &Comms,
    bufs: &[(u64, cudarc::driver::sys::CUstream)],
    count: usize,
) -> Result<(), HwError> {
    use ns::ncclDataType_t::ncclFloat32 as F32;
    use ns::ncclRedOp_t::ncclSum as SUM;
    if bufs.len() != comms.len() {
        return Err(HwError::Call {
            call: "ncclAllReduce".into(),
            detail: format!("{} buffers for {} communicators", bufs.len(), comms.len()),
        });
    }
    grouped(|| {
        for (r, (ptr, stream)) in bufs.iter().enumerate() {
            // SAFETY: each buffer holds `count` f32 on rank r's GPU; live communicator, stream.
            nk("ncclAllReduce", unsafe {
                nr::all_reduce(
                    *ptr as *const c_void,
                    *ptr as *mut c_void,
                    count,
                    F32,
                    SUM,
                    comms.comms[r],
                    *stream as ns::cudaStream_t,
                )
            })?;
        }
        Ok(())
    })
}

fn as_bytes_mut(v: &mut [f32]) -> &mut [u8] {
    // SAFETY: f32 has no padding and every bit pattern is a valid f32; u8 has alignment 1.
    unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr() as *mut u8, std::mem::size_of_val(v)) }
}

/// Fill rank `rank`'s send buffer with its inputs, through pageable memory in pieces.
fn fill_inputs(buf: &DevBuf, rank: usize, count: usize) -> Result<(), HwError> {
    let per = (STAGE / ELT).min(count.max(1));
    let mut stage = vec![0f32; per];
    let mut at = 0;
    while at < count {
        let n = per.min(count - at);
        fill_values(&mut stage[..n], rank, at);
        buf.write(at * ELT, as_bytes_mut(&mut stage[..n]))?;
        at += n;
    }
    Ok(())
}

/// `out[k] = input_value(rank, start + k)`, on several threads for large pieces.
fn fill_values(out: &mut [f32], rank: usize, start: usize) {
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .min(16);
    let per = out.len().div_ceil(threads).max(1 << 16);
    std::thread::scope(|sc| {
        for (j, part) in out.chunks_mut(per).enumerate() {
            sc.spawn(move || {
                for (k, v) in part.iter_mut().enumerate() {
                    *v = input_value(rank, start + j * per + k);
                }
            });
        }
    });
}

/// Receive-buffer elements checked per rank: all of them up to this many; above, windows spread
/// evenly over the buffer (first and last included) adding up to this many.
pub const FULL_CHECK: usize = 64 << 20;
const WINDOW: usize = 1 << 20;

/// (start, len) element ranges to check in a receive buffer of `count` elements.
pub fn check_ranges(count: usize) -> Vec<(usize, usize)> {
    if count <= FULL_CHECK {
        return vec![(0, count)];
    }
    let m = FULL_CHECK / WINDOW;
    let span = count - WINDOW;
    (0..m).map(|i| (span * i / (m - 1), WINDOW)).collect()
}

fn stream_of(g: &Gpu) -> ns::cudaStream_t {
    g.streams[0].cu_stream() as ns::cudaStream_t
}

/// Queue one collective on every rank (one group).
fn launch(
    comms: &Comms,
    gpus: &[&Gpu],
    l: &CollLayout,
    send: &[DevBuf],
    recv: &[DevBuf],
) -> Result<(), HwError> {
    use ns::ncclDataType_t::ncclFloat32 as F32;
    use ns::ncclRedOp_t::ncclSum as SUM;
    grouped(|| {
        for (r, g) in gpus.iter().enumerate() {
            let (c, st) = (comms.comms[r], stream_of(g));
            let (s, d) = (send[r].ptr as *const c_void, recv[r].ptr as *mut c_void);
            // SAFETY: buffers hold send_count / recv_count f32 on this rank's GPU, live
            // communicator and stream.
            unsafe {
                match l.op {
                    CollectiveOp::AllReduce => nk(
                        "ncclAllReduce",
                        nr::all_reduce(s, d, l.send_count, F32, SUM, c, st),
                    )?,
                    CollectiveOp::Broadcast => nk(
                        "ncclBroadcast",
                        nr::broadcast(s, d, l.send_count, F32, ROOT as i32, c, st),
                    )?,
                    CollectiveOp::AllGather => {
                        nk("ncclAllGather", nr::all_gather(s, d, l.block, F32, c, st))?
                    }
                    CollectiveOp::ReduceScatter => nk(
                        "ncclReduceScatter",
                        nr::reduce_scatter(s, d, l.block, F32, SUM, c, st),
                    )?,
                    CollectiveOp::AllToAll => {
                        // ncclSend/ncclRecv to every peer (itself included), as nccl-tests
                        // does where ncclAlltoAll is absent: works with every NCCL 2.7+.
                        for p in 0..l.ranks {
                            let off = (p * l.block * ELT) as u64;
                            nk(
                                "ncclSend",
                                nr::send(
                                    (send[r].ptr + off) as *const c_void,
                                    l.block,
                                    F32,
                                    p as i32,
                                    c,
                                    st,
                                ),
                            )?;
                            nk(
                                "ncclRecv",
                                nr::recv(
                                    (recv[r].ptr + off) as *mut c_void,
                                    l.block,
                                    F32,
                                    p as i32,
                                    c,
                                    st,
                                ),
                            )?;
                        }
                        nr::NcclStatus::Success
                    }
                };
            }
        }
        Ok(())
    })
}

fn sync_all(gpus: &[&Gpu]) -> Result<(), HwError> {
    for g in gpus {
        g.sync_streams()?;
    }
    Ok(())
}

/// Measure one collective at `bytes` (nccl-tests' size) over all `gpus`.
pub fn measure(
    comms: &Comms,
    gpus: &[&Gpu],
    op: CollectiveOp,
    bytes: u64,
    warmup: u32,
    iters: u32,
) -> Result<CollectiveSample, HwError> {
    measure_span(comms, gpus, 0, gpus.len(), op, bytes, warmup, iters)
}

/// [`measure`] where this process's `gpus` are ranks `first..` of a communicator of `total`
/// ranks (across nodes): every rank's inputs and expected results are the global rank's, the
/// data check covers this process's receive buffers, and the times are this process's ranks'
/// (the other nodes time theirs; the pair's or job's figure is the slowest).
#[allow(clippy::too_many_arguments)]
pub fn measure_span(
    comms: &Comms,
    gpus: &[&Gpu],
    first: usize,
    total: usize,
    op: CollectiveOp,
    bytes: u64,
    warmup: u32,
    iters: u32,
) -> Result<CollectiveSample, HwError> {
    let n = gpus.len();
    if comms.len() != n || first + n > total {
        return Err(HwError::Call {
            call: "NCCL".into(),
            detail: format!(
                "{} communicators for {n} GPUs as ranks {first}.. of {total}",
                comms.len()
            ),
        });
    }
    let l = layout(op, total, bytes);
    let mut send = Vec::with_capacity(n);
    let mut recv = Vec::with_capacity(n);
    for (r, g) in gpus.iter().enumerate() {
        let s = DevBuf::new(g, l.send_count * ELT)?;
        fill_inputs(&s, first + r, l.send_count)?;
        send.push(s);
        let d = DevBuf::new(g, l.recv_count * ELT)?;
        d.memset(0)?;
        recv.push(d);
    }
    let _sync = SyncOnDrop(gpus.to_vec());
    for _ in 0..warmup {
        launch(comms, gpus, &l, &send, &recv)?;
    }
    sync_all(gpus)?;
    comms.async_errors()?;

    let iters = iters.max(1) as usize;
    let mut evs = Vec::with_capacity(n);
    for g in gpus {
        evs.push(
            (0..=iters)
                .map(|_| g.event())
                .collect::<Result<Vec<_>, _>>()?,
        );
    }
    for (g, e) in gpus.iter().zip(&evs) {
        record(&e[0], &g.streams[0])?;
    }
    for it in 0..iters {
        launch(comms, gpus, &l, &send, &recv)?;
        for (g, e) in gpus.iter().zip(&evs) {
            record(&e[it + 1], &g.streams[0])?;
        }
    }
    let mut time_us = vec![0f64; iters];
    for e in &evs {
        for (it, t) in time_us.iter_mut().enumerate() {
            *t = t.max(elapsed_ms(&e[it], &e[it + 1])? * 1e3);
        }
    }
    sync_all(gpus)?;
    comms.async_errors()?;

    // The check run: receive buffers set to NaN first, so a collective that did nothing fails.
    for d in &recv {
        d.memset(0xFF)?;
    }
    launch(comms, gpus, &l, &send, &recv)?;
    sync_all(gpus)?;
    comms.async_errors()?;
    let mut checked = 0u64;
    let mut wrong = 0u64;
    let mut stage: Vec<f32> = Vec::new();
    for (r, d) in recv.iter().enumerate() {
        for (start, len) in check_ranges(l.recv_count) {
            let mut at = start;
            while at < start + len {
                let k = (STAGE / ELT).min(start + len - at);
                stage.resize(k, 0.0);
                d.read(at * ELT, as_bytes_mut(&mut stage))?;
                wrong += l.count_wrong(first + r, at, &stage);
                checked += k as u64;
                at += k;
            }
        }
    }
    Ok(CollectiveSample {
        time_us,
        elements_checked: checked,
        wrong_elements: wrong,
        ranks: total,
        bytes: l.counted_bytes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_group_is_closed_once_on_success_error_and_panic() {
        use std::cell::Cell;
        let ends = Cell::new(0);
        let end = || {
            ends.set(ends.get() + 1);
            Ok(nr::NcclStatus::Success)
        };
        let start = || Ok(nr::NcclStatus::Success);
        assert!(with_group(start, end, || Ok(())).is_ok());
        assert_eq!(ends.get(), 1);
        let failed = with_group(start, end, || {
            Err(HwError::Call {
                call: "ncclAllReduce".into(),
                detail: "x".into(),
            })
        });
        assert!(failed.unwrap_err().to_string().starts_with("ncclAllReduce"));
        assert_eq!(ends.get(), 2);
        // As when cudarc cannot find ncclSend in an old NCCL.
        let p = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            with_group(start, end, || panic!("Missing symbol ncclSend"))
        }));
        assert!(p.is_err());
        assert_eq!(ends.get(), 3, "closed while unwinding");
    }

    #[test]
    fn versions_decode_both_encodings() {
        assert_eq!(decode_version(22803), "2.28.3");
        assert_eq!(decode_version(21903), "2.19.3");
        assert_eq!(decode_version(2708), "2.7.8");
        assert_eq!(decode_version(-1), "0.0.0");
    }

    #[test]
    fn small_buffers_are_checked_whole_large_ones_in_spread_windows() {
        assert_eq!(check_ranges(0), vec![(0, 0)]);
        assert_eq!(check_ranges(FULL_CHECK), vec![(0, FULL_CHECK)]);
        let count = 2 * 1024 * 1024 * 1024 / 4 * 4; // an 8 GiB f32 buffer
        let r = check_ranges(count);
        let total: usize = r.iter().map(|x| x.1).sum();
        assert_eq!(total, FULL_CHECK);
        assert_eq!(r[0].0, 0);
        let last = r.last().unwrap();
        assert_eq!(last.0 + last.1, count);
        assert!(
            r.windows(2).all(|w| w[0].0 + w[0].1 <= w[1].0),
            "disjoint, ascending"
        );
    }

    #[test]
    fn inputs_fill_in_parallel_like_the_definition() {
        let mut v = vec![0f32; (1 << 17) + 3];
        fill_values(&mut v, 3, 1000);
        for (k, x) in v.iter().enumerate() {
            assert_eq!(*x, input_value(3, 1000 + k));
        }
    }
}
