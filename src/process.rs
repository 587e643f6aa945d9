//! Helper commands (ldconfig, dmesg, sinfo, scontrol, sbatch, kubectl), run with a bound on what
//! is read and, where a hang is not what the user asked for, on how long they may take.
//!
//! `Command::output` reads everything a child writes and waits for ever: a `sinfo` whose
//! controller does not answer, or a `dmesg` that floods, would hold a root process without end.
//! Here stdout is read to [`STDOUT_LIMIT`] bytes and stderr to [`STDERR_LIMIT`]; past that the
//! pipe closes and the child's next write fails. A child that outlives its limit is killed, with
//! its process group, so a grandchild holding the pipe cannot keep us waiting either.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The most of a helper's stdout that is read (ldconfig -p lists a few thousand lines).
pub const STDOUT_LIMIT: u64 = 4 << 20;
/// The most of a helper's stderr that is read: enough for any error message.
pub const STDERR_LIMIT: u64 = 64 << 10;

/// How long the output may still take to close once the child has exited (a grandchild that
/// inherited the pipe may hold it).
const DRAIN: Duration = Duration::from_secs(2);

/// What a helper command said.
#[derive(Debug)]
pub struct Output {
    pub status: ExitStatus,
    /// Its stdout, at most [`STDOUT_LIMIT`] bytes, lossily decoded.
    pub stdout: String,
    /// Its stderr, at most [`STDERR_LIMIT`] bytes, lossily decoded.
    pub stderr: String,
}

impl Output {
    /// Its stderr trimmed, or how it exited when it said nothing there.
    pub fn why(&self) -> String {
        match self.stderr.trim() {
            "" => format!("exited with {}", self.status),
            e => e.to_string(),
        }
    }
}

/// Why a helper command gave no output.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot run {program}: {source}")]
    Spawn {
        program: String,
        source: std::io::Error,
    },
    #[error("{program} did not finish within {} s and was stopped", .limit.as_secs_f64())]
    TimedOut { program: String, limit: Duration },
}

fn program(cmd: &Command) -> String {
    cmd.get_program().to_string_lossy().into_owned()
}

/// What a reader thread has read so far, and word when it has read all it will.
struct Pipe {
    text: std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
    done: mpsc::Receiver<()>,
}

impl Pipe {
    /// Read at most `limit` bytes of `r` on a thread.
    fn read(mut r: impl Read + Send + 'static, limit: u64) -> Pipe {
        let text = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let (tx, done) = mpsc::channel();
        let into = text.clone();
        std::thread::spawn(move || {
            let mut left = limit;
            let mut chunk = [0u8; 64 << 10];
            while left > 0 {
                let want = chunk.len().min(usize::try_from(left).unwrap_or(usize::MAX));
                match r.read(&mut chunk[..want]) {
                    Ok(0) => break,
                    Ok(n) => {
                        if let Ok(mut t) = into.lock() {
                            t.extend_from_slice(&chunk[..n]);
                        }
                        left -= n as u64;
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(_) => break,
                }
            }
            // Dropping `r` here closes our end: a child still writing gets EPIPE.
            let _ = tx.send(());
        });
        Pipe { text, done }
    }

    /// What was read, once the pipe closed or `by` passed (whichever is first); whether it closed.
    fn take(self, by: Instant) -> (String, bool) {
        let closed = self
            .done
            .recv_timeout(by.saturating_duration_since(Instant::now()))
            .is_ok();
        let bytes = self.text.lock().map(|t| t.clone()).unwrap_or_default();
        (String::from_utf8_lossy(&bytes).into_owned(), closed)
    }
}

/// Run `cmd` with stdin closed, reading its stdout and stderr within their bounds; stopped (with
/// its process group) when `limit` passes. `None` waits as long as the command runs: only for a
/// command the user asked to wait on (`sbatch --wait`).
pub fn run(cmd: &mut Command, limit: Option<Duration>) -> Result<Output, Error> {
    let program = program(cmd);
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if limit.is_some() {
        // Its own group, to be stopped whole. Without a limit it stays in ours, so a Ctrl-C at
        // the terminal reaches it as it reaches us.
        cmd.process_group(0);
    }
    let mut child = cmd.spawn().map_err(|source| Error::Spawn {
        program: program.clone(),
        source,
    })?;
    let out = child.stdout.take().map(|o| Pipe::read(o, STDOUT_LIMIT));
    let err = child.stderr.take().map(|e| Pipe::read(e, STDERR_LIMIT));
    let status = wait(&mut child, limit).ok_or_else(|| Error::TimedOut {
        program: program.clone(),
        limit: limit.unwrap_or_default(),
    })?;
    let by = Instant::now() + DRAIN;
    let take = |p: Option<Pipe>| p.map(|p| p.take(by)).unwrap_or((String::new(), true));
    let (stdout, out_closed) = take(out);
    let (stderr, err_closed) = take(err);
    if limit.is_some() && !(out_closed && err_closed) {
        // Something the child started still holds its output: it is stopped with the group.
        kill_group(&child);
    }
    Ok(Output {
        status,
        stdout,
        stderr,
    })
}

/// Run `cmd` with stdin closed and its output where ours goes (the user reads it); stopped (with
/// its process group) when `limit` passes.
pub fn status(cmd: &mut Command, limit: Duration) -> Result<ExitStatus, Error> {
    let program = program(cmd);
    let mut child = cmd
        .stdin(Stdio::null())
        .process_group(0)
        .spawn()
        .map_err(|source| Error::Spawn {
            program: program.clone(),
            source,
        })?;
    wait(&mut child, Some(limit)).ok_or(Error::TimedOut { program, limit })
}

/// The child's exit status, or None once `limit` passed and it was killed with its group.
fn wait(child: &mut std::process::Child, limit: Option<Duration>) -> Option<ExitStatus> {
    let t0 = Instant::now();
    let mut pause = Duration::from_millis(1);
    loop {
        match child.try_wait() {
            Ok(Some(st)) => return Some(st),
            Ok(None) if limit.is_none_or(|l| t0.elapsed() < l) => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(50));
            }
            _ => {
                kill_group(child);
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
        }
    }
}

/// SIGKILL the child's process group: its own (process_group(0)), so its pid is the group id.
fn kill_group(child: &std::process::Child) {
    if let Ok(pid) = i32::try_from(child.id()) {
        if pid > 0 {
            // SAFETY: kill(2) with a negative pid signals that process group; no memory is
            // involved.
            unsafe { libc::kill(-pid, libc::SIGKILL) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str) -> Command {
        let mut c = Command::new("sh");
        c.args(["-c", script]);
        c
    }

    #[test]
    fn output_and_status_come_back() {
        let o = run(&mut sh("echo one; echo two; echo bad >&2; exit 3"), None).unwrap();
        assert_eq!(o.stdout, "one\ntwo\n");
        assert_eq!(o.stderr, "bad\n");
        assert_eq!(o.status.code(), Some(3));
        assert_eq!(o.why(), "bad");
        let o = run(&mut sh("exit 4"), Some(Duration::from_secs(5))).unwrap();
        assert!(o.why().starts_with("exited with"), "{}", o.why());
    }

    #[test]
    fn endless_output_is_cut_at_the_bound_not_the_clock() {
        let t0 = Instant::now();
        let o = run(Command::new("yes").arg("x"), Some(Duration::from_secs(60))).unwrap();
        assert!(t0.elapsed() < Duration::from_secs(30), "ended by the bound");
        assert_eq!(o.stdout.len() as u64, STDOUT_LIMIT);
        assert!(!o.status.success(), "its next write failed");
        // The same on stderr, at its own bound.
        let o = run(&mut sh("yes x >&2"), Some(Duration::from_secs(60))).unwrap();
        assert_eq!(o.stderr.len() as u64, STDERR_LIMIT);
    }

    #[test]
    fn a_command_past_its_limit_is_stopped_with_its_children() {
        let t0 = Instant::now();
        let e = run(&mut sh("sleep 30"), Some(Duration::from_millis(200))).unwrap_err();
        assert!(matches!(e, Error::TimedOut { .. }), "{e}");
        assert!(e.to_string().contains("did not finish within 0.2 s"), "{e}");
        // A grandchild holding the pipe is in the group and is stopped too.
        let e = run(&mut sh("sleep 30 & wait"), Some(Duration::from_millis(200))).unwrap_err();
        assert!(matches!(e, Error::TimedOut { .. }), "{e}");
        let e = status(&mut sh("sleep 30"), Duration::from_millis(200)).unwrap_err();
        assert!(matches!(e, Error::TimedOut { .. }), "{e}");
        assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
    }

    #[test]
    fn a_grandchild_left_holding_the_pipe_does_not_hold_us() {
        // The child exits at once; the background sleep keeps stdout open for 30 s.
        let t0 = Instant::now();
        let o = run(
            &mut sh("echo hi; sleep 30 &"),
            Some(Duration::from_secs(20)),
        )
        .unwrap();
        assert!(o.status.success());
        assert_eq!(o.stdout, "hi\n", "what it wrote before is kept");
        assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
    }

    #[test]
    fn a_missing_program_says_which() {
        let e = run(
            &mut Command::new("/nonexistent/nodecert-helper"),
            Some(Duration::from_secs(1)),
        )
        .unwrap_err();
        assert!(
            e.to_string()
                .starts_with("cannot run /nonexistent/nodecert-helper"),
            "{e}"
        );
        assert!(status(&mut Command::new("/nonexistent/x"), Duration::from_secs(1)).is_err());
        assert!(status(&mut Command::new("true"), Duration::from_secs(5))
            .unwrap()
            .success());
    }
}
