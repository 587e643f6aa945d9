//! Helper commands (ldconfig, dmesg, sinfo, scontrol, sbatch, kubectl), run with a bound on what
//! is read and, where a hang is not what the user asked for, on how long they may take.
//!
//! `Command::output` reads everything a child writes and waits for ever: a `sinfo` whose
//! controller does not answer, or a `dmesg` that floods, would hold a root process without end.
//! Here stdout is read to [`STDOUT_LIMIT`] bytes (past that the pipe closes, the child's next
//! write fails, and the output says it was cut); stderr is kept to [`STDERR_LIMIT`] bytes and
//! the rest drained, so a chatty child is not killed by it. A child that outlives its limit is
//! killed with its process group, so a grandchild holding the pipe cannot keep us waiting, and
//! it is reaped on a thread of its own (a process stuck in the kernel may never be). Each child
//! dies with the thread that started it (`PR_SET_PDEATHSIG`): a nodecert killed by its caller
//! (slurmd ends a health check that overruns) leaves no helper behind.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

/// The most of a helper's stdout that is read (ldconfig -p lists a few thousand lines).
pub const STDOUT_LIMIT: u64 = 4 << 20;
/// The most of a helper's stderr that is kept: enough for any error message.
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
    /// Whether stdout went on past [`STDOUT_LIMIT`]: what is here is its beginning only.
    pub truncated: bool,
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
    #[error("cannot learn how {program} exited: {source}")]
    Wait {
        program: String,
        source: std::io::Error,
    },
}

fn program(cmd: &Command) -> String {
    cmd.get_program().to_string_lossy().into_owned()
}

/// What a reader thread has read so far, and word when it has read all it will.
struct Pipe {
    text: Arc<Mutex<Vec<u8>>>,
    /// The pipe went on past the limit.
    over: Arc<Mutex<bool>>,
    done: mpsc::Receiver<()>,
}

impl Pipe {
    /// Read `r` on a thread, keeping at most `limit` bytes. Past the limit, `drain` reads on and
    /// drops the rest (the child may write as much as it likes); else the pipe is closed.
    fn read(mut r: impl Read + Send + 'static, limit: u64, drain: bool) -> std::io::Result<Pipe> {
        let text = Arc::new(Mutex::new(Vec::new()));
        let over = Arc::new(Mutex::new(false));
        let (tx, done) = mpsc::channel();
        let (into, over_flag) = (text.clone(), over.clone());
        std::thread::Builder::new()
            .name("helper-output".into())
            .spawn(move || {
                let mut kept = 0u64;
                let mut chunk = vec![0u8; 64 << 10];
                loop {
                    let n = match r.read(&mut chunk) {
                        Ok(0) => break,
                        Ok(n) => n,
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                        Err(_) => break,
                    };
                    let room = usize::try_from(limit - kept).unwrap_or(usize::MAX).min(n);
                    if room > 0 {
                        if let Ok(mut t) = into.lock() {
                            t.extend_from_slice(&chunk[..room]);
                        }
                        kept += room as u64;
                    }
                    if room < n {
                        if let Ok(mut o) = over_flag.lock() {
                            *o = true;
                        }
                        if !drain {
                            // Dropping `r` closes our end: a child still writing gets EPIPE.
                            break;
                        }
                    }
                }
                let _ = tx.send(());
            })?;
        Ok(Pipe { text, over, done })
    }

    /// What was kept, once the pipe closed or `by` passed (whichever is first): (text, whether
    /// it went past its limit, whether it closed).
    fn take(self, by: Instant) -> (String, bool, bool) {
        let closed = self
            .done
            .recv_timeout(by.saturating_duration_since(Instant::now()))
            .is_ok();
        let bytes = self.text.lock().map(|t| t.clone()).unwrap_or_default();
        let over = self.over.lock().map(|o| *o).unwrap_or(false);
        (String::from_utf8_lossy(&bytes).into_owned(), over, closed)
    }
}

/// Make the child die with the thread that starts it, and, when `group`, lead a process group
/// of its own (to be stopped whole).
fn prepare(cmd: &mut Command, group: bool) {
    if group {
        cmd.process_group(0);
    }
    // SAFETY: between fork and exec only async-signal-safe calls are made (getpid-family and
    // prctl), and nothing is allocated.
    let parent = unsafe { libc::getpid() };
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // The parent may have gone before the line above: then no signal would come.
            if libc::getppid() != parent {
                return Err(std::io::Error::other("nodecert exited while starting it"));
            }
            Ok(())
        });
    }
}

/// Run `cmd` with stdin closed, reading its stdout and stderr within their bounds; stopped (with
/// its process group) when `limit` passes. `None` waits as long as the command runs: only for a
/// command the user asked to wait on (`sbatch --wait`); it then stays in our process group, so a
/// Ctrl-C at the terminal reaches it as it reaches us.
pub fn run(cmd: &mut Command, limit: Option<Duration>) -> Result<Output, Error> {
    run_stdin(cmd, limit, Stdio::null())
}

/// [`run`] with `input` as the command's stdin, from memory (an anonymous file, memfd): what
/// the command reads is what we hold, never a file someone could replace meanwhile (`sbatch`
/// reading the batch script).
pub fn run_with_input(
    cmd: &mut Command,
    limit: Option<Duration>,
    input: &[u8],
) -> Result<Output, Error> {
    use std::io::{Seek, Write};
    use std::os::fd::FromRawFd;
    let spawn_error = |source| Error::Spawn {
        program: program(cmd),
        source,
    };
    // SAFETY: a valid C string and flags; the fd returned is owned below.
    let fd = unsafe { libc::memfd_create(c"nodecert-input".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(spawn_error(std::io::Error::last_os_error()));
    }
    // SAFETY: just created, owned by nobody else.
    let mut f = unsafe { std::fs::File::from_raw_fd(fd) };
    f.write_all(input)
        .and_then(|_| f.rewind())
        .map_err(spawn_error)?;
    run_stdin(cmd, limit, Stdio::from(f))
}

fn run_stdin(cmd: &mut Command, limit: Option<Duration>, stdin: Stdio) -> Result<Output, Error> {
    let program = program(cmd);
    let spawn_error = |source| Error::Spawn {
        program: program.clone(),
        source,
    };
    cmd.stdin(stdin)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    prepare(cmd, limit.is_some());
    let mut child = cmd.spawn().map_err(spawn_error)?;
    let pipes = (|| {
        let out = child
            .stdout
            .take()
            .map(|o| Pipe::read(o, STDOUT_LIMIT, false))
            .transpose()?;
        let err = child
            .stderr
            .take()
            .map(|e| Pipe::read(e, STDERR_LIMIT, true))
            .transpose()?;
        Ok((out, err))
    })();
    let (out, err) = match pipes {
        Ok(p) => p,
        Err(e) => {
            stop(child, limit.is_some());
            return Err(spawn_error(e));
        }
    };
    if !exited(&child, limit) {
        stop(child, limit.is_some());
        return Err(Error::TimedOut {
            program,
            limit: limit.unwrap_or_default(),
        });
    }
    // Exited, not yet reaped: its pid, and so its group id, cannot be taken by another process
    // until the wait below, so the group killed here can only be its own.
    let by = Instant::now() + DRAIN;
    let take = |p: Option<Pipe>| p.map_or((String::new(), false, true), |p| p.take(by));
    let (stdout, truncated, out_closed) = take(out);
    let (stderr, _, err_closed) = take(err);
    if limit.is_some() && !(out_closed && err_closed) {
        // Something the child started still holds its output: it is stopped with the group.
        kill_group(&child);
    }
    let status = child
        .wait()
        .map_err(|source| Error::Wait { program, source })?;
    Ok(Output {
        status,
        stdout,
        truncated,
        stderr,
    })
}

/// Run `cmd` with stdin closed and its output where ours goes (the user reads it); stopped when
/// `limit` passes. It stays in our process group (a Ctrl-C reaches it).
pub fn status(cmd: &mut Command, limit: Duration) -> Result<ExitStatus, Error> {
    let program = program(cmd);
    cmd.stdin(Stdio::null());
    prepare(cmd, false);
    let mut child = cmd.spawn().map_err(|source| Error::Spawn {
        program: program.clone(),
        source,
    })?;
    if !exited(&child, Some(limit)) {
        stop(child, false);
        return Err(Error::TimedOut { program, limit });
    }
    child
        .wait()
        .map_err(|source| Error::Wait { program, source })
}

/// Whether the child exited within `limit` (for ever with `None`), seen without reaping it
/// (`waitid` with `WNOWAIT`): its pid stays its own until [`Child::wait`].
fn exited(child: &Child, limit: Option<Duration>) -> bool {
    let pid: libc::id_t = child.id();
    let t0 = Instant::now();
    let mut pause = Duration::from_millis(1);
    loop {
        // SAFETY: waitid fills `info`, a plain C struct zeroed here, and reaps nothing
        // (WNOWAIT).
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        let rc = unsafe {
            libc::waitid(
                libc::P_PID,
                pid,
                &mut info,
                libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
            )
        };
        if rc == 0 && unsafe { info.si_pid() } != 0 {
            return true;
        }
        if rc != 0 && std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            // Not our child to wait on (never here): treat it as gone.
            return true;
        }
        if limit.is_some_and(|l| t0.elapsed() >= l) {
            return false;
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(50));
    }
}

/// Kill the child (with its group, when it leads one) and reap it on a thread of its own: a
/// process stuck in the kernel (a hard NFS mount) may never be reaped, and must not hold us.
fn stop(mut child: Child, group: bool) {
    if group {
        kill_group(&child);
    }
    let _ = child.kill();
    let _ = std::thread::Builder::new()
        .name("helper-reaper".into())
        .spawn(move || {
            let _ = child.wait();
        });
}

/// SIGKILL the child's process group: its own (process_group(0)), so its pid is the group id.
/// Called only while the child is not reaped, so that id is still its group's.
fn kill_group(child: &Child) {
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

    /// What a command reads on stdin is the bytes given, from memory.
    #[test]
    fn input_is_given_from_memory() {
        let o = run_with_input(
            &mut Command::new("cat"),
            Some(Duration::from_secs(30)),
            b"#!/bin/bash\necho hi\n",
        )
        .unwrap();
        assert!(o.status.success());
        assert_eq!(o.stdout, "#!/bin/bash\necho hi\n");
        let o = run(&mut Command::new("cat"), Some(Duration::from_secs(30))).unwrap();
        assert_eq!(o.stdout, "", "plain run: stdin closed");
    }

    fn sh(script: &str) -> Command {
        let mut c = Command::new("sh");
        c.args(["-c", script]);
        c
    }

    /// Whether process `pid` is gone (or a zombie nobody reaps yet: it runs no more).
    fn gone(pid: i32) -> bool {
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(5) {
            // SAFETY: signal 0 only checks that the process exists.
            let alive = unsafe { libc::kill(pid, 0) } == 0;
            let zombie = std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .map(|s| {
                    s.rsplit(')')
                        .next()
                        .unwrap_or("")
                        .trim_start()
                        .starts_with('Z')
                })
                .unwrap_or(true);
            if !alive || zombie {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    fn pid_in(path: &std::path::Path) -> i32 {
        let t0 = Instant::now();
        loop {
            if let Some(p) = std::fs::read_to_string(path)
                .ok()
                .and_then(|s| s.trim().parse().ok())
            {
                return p;
            }
            assert!(t0.elapsed() < Duration::from_secs(5), "no pid written");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    #[test]
    fn output_and_status_come_back() {
        let o = run(&mut sh("echo one; echo two; echo bad >&2; exit 3"), None).unwrap();
        assert_eq!(o.stdout, "one\ntwo\n");
        assert!(!o.truncated);
        assert_eq!(o.stderr, "bad\n");
        assert_eq!(o.status.code(), Some(3));
        assert_eq!(o.why(), "bad");
        let o = run(&mut sh("exit 4"), Some(Duration::from_secs(5))).unwrap();
        assert!(o.why().starts_with("exited with"), "{}", o.why());
    }

    #[test]
    fn endless_output_is_cut_at_the_bound_not_the_clock_and_says_so() {
        let t0 = Instant::now();
        let o = run(Command::new("yes").arg("x"), Some(Duration::from_secs(60))).unwrap();
        assert!(t0.elapsed() < Duration::from_secs(30), "ended by the bound");
        assert_eq!(o.stdout.len() as u64, STDOUT_LIMIT);
        assert!(o.truncated);
        assert!(!o.status.success(), "its next write failed");
        // Output one byte over the bound, all written before the child exits: still said.
        let over = STDOUT_LIMIT + 1;
        let o = run(
            &mut sh(&format!("head -c {over} /dev/zero")),
            Some(Duration::from_secs(60)),
        )
        .unwrap();
        assert!(o.truncated && o.stdout.len() as u64 == STDOUT_LIMIT);
        // Exactly the bound is whole.
        let o = run(
            &mut sh(&format!("head -c {STDOUT_LIMIT} /dev/zero")),
            Some(Duration::from_secs(60)),
        )
        .unwrap();
        assert!(!o.truncated && o.status.success());
    }

    #[test]
    fn a_chatty_stderr_is_kept_to_its_bound_and_drained_not_closed() {
        // 1 MiB of stderr, then a line of stdout: the child is not killed by its stderr.
        let o = run(
            &mut sh("head -c 1048576 /dev/zero >&2; echo done"),
            Some(Duration::from_secs(60)),
        )
        .unwrap();
        assert_eq!(o.stderr.len() as u64, STDERR_LIMIT);
        assert_eq!(o.stdout, "done\n");
        assert!(o.status.success());
    }

    #[test]
    fn a_command_past_its_limit_is_stopped_with_its_children() {
        let t = tempfile::tempdir().unwrap();
        let t0 = Instant::now();
        let e = run(&mut sh("sleep 30"), Some(Duration::from_millis(200))).unwrap_err();
        assert!(matches!(e, Error::TimedOut { .. }), "{e}");
        assert!(e.to_string().contains("did not finish within 0.2 s"), "{e}");
        // A grandchild in the group is stopped too.
        let f = t.path().join("grandchild");
        let script = format!("sleep 30 & echo $! > {}; wait", f.display());
        let e = run(&mut sh(&script), Some(Duration::from_millis(300))).unwrap_err();
        assert!(matches!(e, Error::TimedOut { .. }), "{e}");
        assert!(gone(pid_in(&f)), "the grandchild was stopped");
        let e = status(&mut sh("sleep 30"), Duration::from_millis(200)).unwrap_err();
        assert!(matches!(e, Error::TimedOut { .. }), "{e}");
        assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
    }

    #[test]
    fn a_grandchild_left_holding_the_pipe_does_not_hold_us_and_is_stopped() {
        // The child exits at once; the background sleep keeps stdout open for 30 s.
        let t = tempfile::tempdir().unwrap();
        let f = t.path().join("grandchild");
        let script = format!("echo hi; sleep 30 & echo $! > {}", f.display());
        let t0 = Instant::now();
        let o = run(&mut sh(&script), Some(Duration::from_secs(20))).unwrap();
        assert!(o.status.success());
        assert_eq!(o.stdout, "hi\n", "what it wrote before is kept");
        assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
        assert!(gone(pid_in(&f)), "the grandchild was stopped");
    }

    #[test]
    fn a_grandchild_holding_only_stderr_is_stopped_too() {
        // stdout closes when the child exits; the background sleep keeps stderr open.
        let t = tempfile::tempdir().unwrap();
        let f = t.path().join("grandchild");
        let script = format!("echo hi; sleep 30 >/dev/null & echo $! > {}", f.display());
        let t0 = Instant::now();
        let o = run(&mut sh(&script), Some(Duration::from_secs(20))).unwrap();
        assert_eq!(o.stdout, "hi\n");
        assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
        assert!(gone(pid_in(&f)), "the grandchild was stopped");
    }

    #[test]
    fn what_a_grandchild_writes_within_the_drain_is_kept() {
        // The child exits at once; what it started writes half a second later and then closes
        // the pipe: within the drain, so it is read, and nothing needs stopping.
        let o = run(
            &mut sh("echo hi; (sleep 0.5; echo late) &"),
            Some(Duration::from_secs(20)),
        )
        .unwrap();
        assert_eq!(o.stdout, "hi\nlate\n");
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
