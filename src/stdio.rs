//! Everything nodecert prints goes through here. `println!` and `eprintln!` panic when the write
//! fails (stdout redirected to a full disk, a device that refuses it), and a panic would turn a
//! verify result that was never written into exit 101, or a passing run's lost summary into a
//! crash. These macros write, and remember a failure instead; [`finish`] then makes the exit
//! code say so. A closed pipe does not come here: SIGPIPE is left at its default (main.rs), so
//! `nodecert inventory --json | head` ends quietly, as any Unix tool does.
//!
//! The lints `clippy::print_stdout` and `clippy::print_stderr` (lib.rs) keep the std macros out.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

/// Whether a write to stdout (or stderr) failed. Process-wide, as stdout and stderr are.
static STDOUT_FAILED: AtomicBool = AtomicBool::new(false);
static STDERR_FAILED: AtomicBool = AtomicBool::new(false);

/// Write to stdout; a failure is remembered, never a panic.
pub fn out(args: std::fmt::Arguments) {
    if std::io::stdout().lock().write_fmt(args).is_err() {
        STDOUT_FAILED.store(true, Ordering::Relaxed);
    }
}

/// Write to stderr; a failure is remembered, never a panic.
pub fn err(args: std::fmt::Arguments) {
    if std::io::stderr().lock().write_fmt(args).is_err() {
        STDERR_FAILED.store(true, Ordering::Relaxed);
    }
}

/// Record that something written another way (clap's help or usage error) did not reach
/// stderr (`to_stderr`) or stdout.
pub fn failed(to_stderr: bool) {
    match to_stderr {
        true => STDERR_FAILED.store(true, Ordering::Relaxed),
        false => STDOUT_FAILED.store(true, Ordering::Relaxed),
    }
}

/// `print!` without the panic.
#[macro_export]
macro_rules! out {
    ($($t:tt)*) => { $crate::stdio::out(format_args!($($t)*)) };
}

/// `println!` without the panic.
#[macro_export]
macro_rules! outln {
    () => { $crate::stdio::out(format_args!("\n")) };
    ($($t:tt)*) => { $crate::stdio::out(format_args!("{}\n", format_args!($($t)*))) };
}

/// `eprintln!` without the panic.
#[macro_export]
macro_rules! errln {
    () => { $crate::stdio::err(format_args!("\n")) };
    ($($t:tt)*) => { $crate::stdio::err(format_args!("{}\n", format_args!($($t)*))) };
}

/// The exit code once everything is printed: stdout is flushed, and when it or stderr could not
/// be written, a command that would have exited 0 exits 3 instead (its result was not seen,
/// whatever it was; a failure's own code stays), with a message on stderr if stderr works.
pub fn finish(code: u8) -> u8 {
    if std::io::stdout().lock().flush().is_err() {
        failed(false);
    }
    let lost = [
        (STDOUT_FAILED.load(Ordering::Relaxed), "standard output"),
        (STDERR_FAILED.load(Ordering::Relaxed), "standard error"),
    ];
    let lost: Vec<&str> = lost.iter().filter(|(f, _)| *f).map(|(_, n)| *n).collect();
    if lost.is_empty() {
        return code;
    }
    let _ = writeln!(
        std::io::stderr().lock(),
        "error: cannot write to {} (a full disk, or a device that refuses it): what nodecert \
         printed there is lost{}",
        lost.join(" and "),
        if code == crate::error::exit::PASS {
            "; exiting 3 so that it is not taken for a success"
        } else {
            ""
        }
    );
    if code == crate::error::exit::PASS {
        crate::error::exit::NODE_UNTESTABLE
    } else {
        code
    }
}
