//! A deadline for NVML. Its calls have no timeout of their own, and a GPU or driver in a bad
//! state makes them block for good (the node where `nvidia-smi` hangs). Opening the node and
//! reading its inventory run under a [`Watchdog`]: past the deadline nodecert says what did not
//! answer and ends with exit 3, rather than hang on the node it was asked to judge.

use std::sync::mpsc::{channel, RecvTimeoutError, Sender};
use std::time::Duration;

/// The longest opening the node or reading its inventory may take. It covers CUDA's own set-up
/// limit (the PCIe link is read under load through CUDA) with room to spare.
pub const NVML_LIMIT: Duration = Duration::from_secs(420);

/// Runs `on_expiry` if it is not dropped within its limit.
pub struct Watchdog {
    _armed: Sender<()>,
}

impl Watchdog {
    /// Arm a watchdog for `what` ("reading the inventory through NVML").
    pub fn start(what: &str, limit: Duration) -> Watchdog {
        Self::with(what, limit, give_up)
    }

    fn with(what: &str, limit: Duration, on_expiry: fn(&str, Duration)) -> Watchdog {
        let (tx, rx) = channel::<()>();
        let what = what.to_string();
        // Without a thread there is no watchdog, and the work runs as it did before.
        let _ = std::thread::Builder::new()
            .name("nodecert-watchdog".into())
            .spawn(move || {
                if let Err(RecvTimeoutError::Timeout) = rx.recv_timeout(limit) {
                    on_expiry(&what, limit);
                }
            });
        Watchdog { _armed: tx }
    }
}

/// Say what hung and end the process (exit 3): the stuck call holds the driver, and the exit
/// handlers could wait on it, so the process leaves without them.
fn give_up(what: &str, limit: Duration) {
    use std::io::Write;
    let _ = writeln!(
        std::io::stderr(),
        "nodecert: {what} did not answer within {} s: the NVIDIA driver or a GPU is in a bad \
         state (nvidia-smi will likely hang too); check the kernel log for XIDs, then reset \
         the GPU or reboot the node",
        limit.as_secs()
    );
    let _ = std::io::stdout().flush();
    // SAFETY: _exit ends the process at once; nothing after it runs.
    unsafe { libc::_exit(crate::error::exit::NODE_UNTESTABLE as i32) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    static EXPIRED: AtomicUsize = AtomicUsize::new(0);

    fn count(_: &str, _: Duration) {
        EXPIRED.fetch_add(1, Ordering::SeqCst);
    }

    #[test]
    fn fires_only_when_not_dropped_in_time() {
        let quick = Watchdog::with("quick", Duration::from_secs(5), count);
        drop(quick);
        let slow = Watchdog::with("slow", Duration::from_millis(20), count);
        std::thread::sleep(Duration::from_millis(500));
        drop(slow);
        assert_eq!(EXPIRED.load(Ordering::SeqCst), 1);
    }
}
