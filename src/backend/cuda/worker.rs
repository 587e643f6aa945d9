//! A thread that owns the GPU state and runs one measurement at a time, each with a deadline.
//!
//! A hung copy or collective blocks the thread that waits for it, inside the driver, and nothing
//! in-process can interrupt it. So measurements run on this worker thread while the caller waits
//! on a channel with a timeout. When the deadline passes, the caller gets
//! [`HwError::Timeout`] naming what hung, and the worker is marked poisoned: the stuck thread is
//! abandoned (never joined), and every later call fails at once with an error that names the
//! earlier hang. A hung CUDA context cannot be recovered in-process; the way out is to end the
//! process (and look at the GPU: `nvidia-smi`, Xid messages in the kernel log).
//!
//! The state `S` is created on the worker thread and never leaves it, so it need not be `Send`.

use crate::error::HwError;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::time::Duration;

type Job<S> = Box<dyn FnOnce(&mut S) + Send + 'static>;

/// How long dropping the worker waits for it to release its state before leaving it behind.
const DROP_WAIT: Duration = Duration::from_secs(30);

/// Set once any worker thread has been left behind (a call or the start timed out, or the state
/// was not released in time): it may be stuck inside the driver for good.
static ABANDONED: AtomicBool = AtomicBool::new(false);

/// Whether a measurement thread of this process was left behind, stuck. The process should then
/// end without running the C library's exit handlers (libcuda's and NCCL's may wait for that
/// thread forever): see `main`.
pub fn thread_abandoned() -> bool {
    ABANDONED.load(Ordering::SeqCst)
}

/// Record that a thread of this process was left behind inside the driver.
pub(crate) fn abandon() {
    ABANDONED.store(true, Ordering::SeqCst);
}

pub struct Worker<S> {
    tx: Option<Sender<Job<S>>>,
    done: Receiver<()>,
    /// Set when a call timed out: what hung, and its deadline in seconds.
    poisoned: Option<(String, f64)>,
}

/// Why a worker could not be started.
#[derive(Debug)]
pub enum StartError {
    /// The state could not be made (no library, no device, a failed call).
    Failed(HwError),
    /// Making the state did not finish in time; the thread is abandoned.
    TimedOut(HwError),
}

fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic".into()
    }
}

fn secs(d: Duration) -> f64 {
    (d.as_secs_f64() * 10.0).round() / 10.0
}

impl<S: 'static> Worker<S> {
    /// Start the thread and make its state with `init`, waiting at most `limit` for it.
    pub fn start<F>(name: &str, what: &str, limit: Duration, init: F) -> Result<Self, StartError>
    where
        F: FnOnce() -> Result<S, HwError> + Send + 'static,
    {
        let (tx, rx) = mpsc::channel::<Job<S>>();
        let (init_tx, init_rx) = mpsc::sync_channel::<Result<(), HwError>>(1);
        let (done_tx, done) = mpsc::sync_channel::<()>(1);
        let thread_what = what.to_string();
        std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                let mut state = match catch_unwind(AssertUnwindSafe(init)) {
                    Ok(Ok(s)) => {
                        let _ = init_tx.send(Ok(()));
                        s
                    }
                    Ok(Err(e)) => {
                        let _ = init_tx.send(Err(e));
                        return;
                    }
                    Err(p) => {
                        let _ = init_tx.send(Err(HwError::Call {
                            call: thread_what,
                            detail: format!("panicked: {}", panic_text(p.as_ref())),
                        }));
                        return;
                    }
                };
                while let Ok(job) = rx.recv() {
                    job(&mut state);
                }
                // The channel closed: release the GPU state here, on its own thread.
                drop(state);
                let _ = done_tx.send(());
            })
            .map_err(|e| {
                StartError::Failed(HwError::Call {
                    call: "spawning the measurement thread".into(),
                    detail: e.to_string(),
                })
            })?;
        match init_rx.recv_timeout(limit) {
            Ok(Ok(())) => Ok(Worker {
                tx: Some(tx),
                done,
                poisoned: None,
            }),
            Ok(Err(e)) => Err(StartError::Failed(e)),
            Err(RecvTimeoutError::Timeout) => {
                abandon();
                Err(StartError::TimedOut(HwError::Timeout {
                    what: what.into(),
                    seconds: secs(limit),
                }))
            }
            Err(RecvTimeoutError::Disconnected) => Err(StartError::Failed(HwError::Call {
                call: what.into(),
                detail: "the measurement thread ended without an answer".into(),
            })),
        }
    }

    /// Whether an earlier call timed out.
    #[cfg(test)]
    pub fn is_poisoned(&self) -> bool {
        self.poisoned.is_some()
    }

    /// Run `f` on the worker and wait at most `limit` for its answer. A panic inside `f` becomes
    /// an error naming `what`; a timeout poisons the worker.
    pub fn call<R, F>(&mut self, what: &str, limit: Duration, f: F) -> Result<R, HwError>
    where
        R: Send + 'static,
        F: FnOnce(&mut S) -> Result<R, HwError> + Send + 'static,
    {
        if let Some((hung, s)) = &self.poisoned {
            return Err(poisoned_error(hung, *s));
        }
        let Some(tx) = &self.tx else {
            return Err(stopped(what));
        };
        let (rtx, rrx) = mpsc::sync_channel::<Result<R, HwError>>(1);
        let job_what = what.to_string();
        let job: Job<S> = Box::new(move |s: &mut S| {
            let r = catch_unwind(AssertUnwindSafe(|| f(s))).unwrap_or_else(|p| {
                Err(HwError::Call {
                    call: job_what,
                    detail: format!("panicked: {}", panic_text(p.as_ref())),
                })
            });
            let _ = rtx.send(r);
        });
        tx.send(job).map_err(|_| stopped(what))?;
        match rrx.recv_timeout(limit) {
            Ok(r) => r,
            Err(RecvTimeoutError::Timeout) => {
                abandon();
                self.poisoned = Some((what.to_string(), secs(limit)));
                Err(HwError::Timeout {
                    what: what.into(),
                    seconds: secs(limit),
                })
            }
            Err(RecvTimeoutError::Disconnected) => Err(stopped(what)),
        }
    }
}

fn stopped(what: &str) -> HwError {
    HwError::Call {
        call: what.into(),
        detail: "the measurement thread has stopped".into(),
    }
}

/// The error every call returns once a measurement has hung.
pub fn poisoned_error(hung: &str, seconds: f64) -> HwError {
    HwError::Unavailable {
        what: "the GPU measurement backend".into(),
        detail: format!(
            "an earlier measurement ({hung}) did not finish within {seconds} s and may still be \
             running on the GPU; a hung CUDA context cannot be recovered in this process. \
             Restart nodecert after checking the GPU (nvidia-smi, Xid messages in the kernel log)"
        ),
    }
}

impl<S> Drop for Worker<S> {
    fn drop(&mut self) {
        // Closing the channel ends the worker's loop; it then releases its state.
        drop(self.tx.take());
        if self.poisoned.is_none() && self.done.recv_timeout(DROP_WAIT).is_err() {
            abandon();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    fn counter() -> Worker<u32> {
        match Worker::start("test-worker", "opening", Duration::from_secs(5), || {
            Ok(0u32)
        }) {
            Ok(w) => w,
            Err(e) => panic!("{e:?}"),
        }
    }

    #[test]
    fn calls_run_in_order_on_one_state() {
        let mut w = counter();
        for i in 1..=3 {
            let v = w
                .call("count", Duration::from_secs(5), |s| {
                    *s += 1;
                    Ok(*s)
                })
                .unwrap();
            assert_eq!(v, i);
        }
        let e = w
            .call("fail", Duration::from_secs(5), |_| -> Result<(), HwError> {
                Err(HwError::Call {
                    call: "cuMemAlloc".into(),
                    detail: "out of memory".into(),
                })
            })
            .unwrap_err();
        assert_eq!(e.to_string(), "cuMemAlloc failed: out of memory");
    }

    #[test]
    fn a_hung_measurement_times_out_and_later_calls_fail_fast() {
        let mut w = counter();
        let t0 = Instant::now();
        let e = w
            .call("copies on GPU 0", Duration::from_millis(100), |_| {
                std::thread::sleep(Duration::from_secs(3));
                Ok(())
            })
            .unwrap_err();
        assert!(t0.elapsed() < Duration::from_secs(2));
        assert!(matches!(e, HwError::Timeout { .. }), "{e:?}");
        assert_eq!(e.to_string(), "copies on GPU 0 did not finish within 0.1 s");
        assert!(w.is_poisoned());
        assert!(thread_abandoned(), "main must learn that a thread is stuck");
        let t1 = Instant::now();
        let e = w
            .call("next", Duration::from_secs(10), |s| Ok(*s))
            .unwrap_err();
        assert!(t1.elapsed() < Duration::from_millis(50));
        let msg = e.to_string();
        assert!(msg.contains("copies on GPU 0"), "{msg}");
        assert!(msg.contains("cannot be recovered"), "{msg}");
        // Dropping a poisoned worker does not wait for the stuck thread.
        let t2 = Instant::now();
        drop(w);
        assert!(t2.elapsed() < Duration::from_secs(1));
    }

    #[test]
    fn a_panic_becomes_an_error_and_the_worker_lives_on() {
        let mut w = counter();
        let e = w
            .call(
                "panicky",
                Duration::from_secs(5),
                |_| -> Result<(), HwError> {
                    panic!("Unable to dynamically load the \"nccl\" shared library")
                },
            )
            .unwrap_err();
        assert!(
            e.to_string().contains("panicky failed: panicked: Unable"),
            "{e}"
        );
        assert_eq!(
            w.call("after", Duration::from_secs(5), |s| Ok(*s)).unwrap(),
            0
        );
    }

    #[test]
    fn start_reports_init_errors_and_timeouts() {
        let r = Worker::<u32>::start("t", "opening the GPUs", Duration::from_secs(5), || {
            Err(HwError::Unavailable {
                what: "libcuda.so.1".into(),
                detail: "not found".into(),
            })
        });
        assert!(matches!(
            r,
            Err(StartError::Failed(HwError::Unavailable { .. }))
        ));
        let r = Worker::<u32>::start("t", "opening the GPUs", Duration::from_millis(50), || {
            std::thread::sleep(Duration::from_secs(2));
            Ok(1)
        });
        match r {
            Err(StartError::TimedOut(e)) => {
                assert_eq!(
                    e.to_string(),
                    "opening the GPUs did not finish within 0.1 s"
                )
            }
            other => panic!("{:?}", other.err()),
        }
        let r = Worker::<u32>::start("t", "opening", Duration::from_secs(5), || panic!("boom"));
        match r {
            Err(StartError::Failed(e)) => assert!(e.to_string().contains("panicked: boom")),
            other => panic!("{:?}", other.err()),
        }
    }

    #[test]
    fn the_state_is_dropped_on_the_worker_thread() {
        struct Tracked(std::sync::mpsc::Sender<String>);
        impl Drop for Tracked {
            fn drop(&mut self) {
                let name = std::thread::current().name().unwrap_or("").to_string();
                let _ = self.0.send(name);
            }
        }
        let (tx, rx) = std::sync::mpsc::channel();
        let w = match Worker::start("gpu-owner", "opening", Duration::from_secs(5), move || {
            Ok(Tracked(tx))
        }) {
            Ok(w) => w,
            Err(e) => panic!("{e:?}"),
        };
        drop(w);
        assert_eq!(
            rx.recv_timeout(Duration::from_secs(5)).unwrap(),
            "gpu-owner"
        );
    }
}
