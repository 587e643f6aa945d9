//! The all-reduce sweep with NVLink SHARP (NVLS) forced off, measured in a child process.
//!
//! Why a child: NCCL reads `NCCL_NVLS_ENABLE` through its `NCCL_PARAM` macro
//! (`src/include/param.h`; `NCCL_PARAM(NvlsEnable, "NVLS_ENABLE", 2)` in
//! `src/transport/nvls.cc`), which caches the value in a function-local static the first time a
//! communicator asks for it. A `setenv` after nodecert's first collective changes nothing in this
//! process: a second communicator would still use NVLS. And the per-communicator config that
//! cudarc binds (`ncclConfig_t`, NCCL 2.22 to 2.30) has `nvlsCTAs` but no switch that turns NVLS
//! off. So nodecert re-executes itself ([`std::env::current_exe`]) with the hidden subcommand
//! [`SUBCOMMAND`], the [`Request`] as one JSON argument and `NCCL_NVLS_ENABLE=0` in its
//! environment; the child opens the GPUs, runs the sweep with its own per-measurement deadlines,
//! and prints one [`Reply`] line after [`REPLY_MARK`] on stdout (NCCL's own messages may share
//! stdout: the last marked line is the reply).
//!
//! The parent holds the child to the same discipline as the in-process worker
//! ([`super::cuda::worker`]): the whole sweep has a deadline, and a child still running past it
//! is killed and the call fails with [`HwError::Timeout`] (exit 3, never a slow link); stdout is
//! read up to [`MAX_STDOUT`] bytes, and a child that prints more, prints no reply, or a reply
//! that cannot be read is an [`HwError::Call`] naming what went wrong.

use super::CollectiveSample;
use crate::error::HwError;
use crate::suite::CollectiveOp;
use serde::{Deserialize, Serialize};
use std::io::Read;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The hidden subcommand the child runs.
pub const SUBCOMMAND: &str = "__collective-no-nvls";
/// Start of the reply line on the child's stdout.
pub const REPLY_MARK: &str = "nodecert-no-nvls-reply ";
/// Version of [`Request`] and [`Reply`]: parent and child are the same binary, but a reply of
/// another version is refused, never guessed at.
pub const PROTOCOL: u32 = 1;
/// The most the child may print on stdout (its reply, NCCL's messages).
pub const MAX_STDOUT: u64 = 16 << 20;
/// How much of the child's stderr is kept for an error message (its last bytes).
const STDERR_KEPT: usize = 2048;
/// The environment variable NCCL reads (once per process) to allow NVLS; "0" turns it off.
pub const NVLS_ENV: &str = "NCCL_NVLS_ENABLE";

/// What the child measures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Request {
    pub protocol: u32,
    pub op: CollectiveOp,
    /// Bytes per rank of each measurement, in order.
    pub sizes: Vec<u64>,
    pub warmup: u32,
    pub iters: u32,
    pub target: Target,
}

/// Which node the child measures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Target {
    /// The real GPUs, by PCI bus id in nodecert's order (empty: CUDA's ordinals).
    Real { bus_ids: Vec<String> },
    /// A simulated node (embedded name or node file), its faults and seed: how `cargo test`
    /// exercises this transport without a GPU.
    Simulated {
        node: String,
        faults: Vec<String>,
        seed: u64,
    },
}

/// What the child answers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Reply {
    pub protocol: u32,
    /// The value of [`NVLS_ENV`] the child saw (the parent refuses a figure measured without
    /// "0": it would not be the figure without NVLS).
    pub nvls_enable: Option<String>,
    /// One sample per requested size, or what failed.
    pub result: Result<Vec<CollectiveSample>, HwError>,
}

impl Request {
    pub fn new(op: CollectiveOp, sizes: &[u64], warmup: u32, iters: u32, target: Target) -> Self {
        Request {
            protocol: PROTOCOL,
            op,
            sizes: sizes.to_vec(),
            warmup,
            iters,
            target,
        }
    }
}

/// What a measurement in a child is called in errors.
pub fn what(op: CollectiveOp) -> String {
    format!("NCCL {op} with NVLS forced off (child process)")
}

/// Run the sweep in a child: `exe` with [`SUBCOMMAND`], `NCCL_NVLS_ENABLE=0`, at most `limit`.
pub fn measure(
    exe: &Path,
    req: &Request,
    limit: Duration,
) -> Result<Vec<CollectiveSample>, HwError> {
    let what = what(req.op);
    let json = serde_json::to_string(req).map_err(|e| HwError::Call {
        call: format!("writing the request for {what}"),
        detail: e.to_string(),
    })?;
    let mut cmd = Command::new(exe);
    cmd.arg(SUBCOMMAND).arg(json).env(NVLS_ENV, "0");
    let out = run_bounded(cmd, limit, MAX_STDOUT, &what)?;
    read_reply(&out, req, &what)
}

/// What a child left behind.
#[derive(Debug)]
pub struct ChildOutput {
    pub status: ExitStatus,
    pub stdout: Vec<u8>,
    /// The last [`STDERR_KEPT`] bytes of stderr.
    pub stderr_tail: String,
}

fn secs(d: Duration) -> f64 {
    (d.as_secs_f64() * 10.0).round() / 10.0
}

/// The children started here (they open the GPUs) that have not been reaped yet: a killed one
/// may hold its GPUs for a while after its check ended.
static LIVE: std::sync::Mutex<Vec<u32>> = std::sync::Mutex::new(Vec::new());

/// The process ids of nodecert's own children that may still hold GPUs: not another job
/// ([`crate::checks::arrivals`]).
pub fn live_children() -> Vec<u32> {
    LIVE.lock().map(|l| l.clone()).unwrap_or_default()
}

fn reaped(pid: u32) {
    if let Ok(mut l) = LIVE.lock() {
        l.retain(|p| *p != pid);
    }
}

/// Kill a child and reap it on a thread of its own: a child stuck inside the driver may take
/// long to die, and nodecert must not wait for it.
fn kill(mut child: Child) {
    let _ = child.kill();
    let pid = child.id();
    let _ = std::thread::Builder::new()
        .name("nodecert-reap".into())
        .spawn(move || {
            let _ = child.wait();
            reaped(pid);
        });
}

/// Run `cmd` (stdin empty) and wait at most `limit` for it to exit, reading at most `max`
/// bytes of its stdout. Past the deadline the child is killed: [`HwError::Timeout`] naming
/// `what`. More output than `max`: killed, [`HwError::Call`].
pub fn run_bounded(
    mut cmd: Command,
    limit: Duration,
    max: u64,
    what: &str,
) -> Result<ChildOutput, HwError> {
    let start = Instant::now();
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| HwError::Call {
            call: format!("starting {what}"),
            detail: e.to_string(),
        })?;
    if let Ok(mut l) = LIVE.lock() {
        l.push(child.id());
    }
    let (out_tx, out_rx) = mpsc::sync_channel(1);
    if let Some(stdout) = child.stdout.take() {
        let _ = std::thread::Builder::new()
            .name("nodecert-child-out".into())
            .spawn(move || {
                let r = crate::fsio::read::read_limited(stdout, max, "a child's output");
                let _ = out_tx.send(r);
            });
    }
    let (err_tx, err_rx) = mpsc::sync_channel(1);
    if let Some(mut stderr) = child.stderr.take() {
        let _ = std::thread::Builder::new()
            .name("nodecert-child-err".into())
            .spawn(move || {
                // Read it all (a child blocked on a full pipe would never end), keep the tail.
                let mut tail: Vec<u8> = Vec::new();
                let mut buf = [0u8; 8192];
                while let Ok(n) = stderr.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    tail.extend_from_slice(&buf[..n]);
                    // Bytes enough for the last STDERR_KEPT characters once trailing white
                    // space is trimmed (kept to exactly STDERR_KEPT bytes, a final newline
                    // left one character fewer: whether it did hung on how the pipe was read)
                    // and a character is up to 4 bytes.
                    if tail.len() > 8 * STDERR_KEPT {
                        tail.drain(..tail.len() - 4 * STDERR_KEPT);
                    }
                }
                let _ = err_tx.send(tail);
            });
    }
    let deadline = start.checked_add(limit);
    let mut early_out: Option<std::io::Result<Vec<u8>>> = None;
    let status = loop {
        if early_out.is_none() {
            if let Ok(r) = out_rx.try_recv() {
                if let Err(e) = &r {
                    kill(child);
                    return Err(HwError::Call {
                        call: what.into(),
                        detail: format!("the child process printed too much: {e}"),
                    });
                }
                early_out = Some(r);
            }
        }
        match child.try_wait() {
            Ok(Some(s)) => {
                reaped(child.id());
                break s;
            }
            Ok(None) => {}
            Err(e) => {
                kill(child);
                return Err(HwError::Call {
                    call: format!("waiting for {what}"),
                    detail: e.to_string(),
                });
            }
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            kill(child);
            return Err(HwError::Timeout {
                what: what.into(),
                seconds: secs(limit),
            });
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    // The child has ended; its pipes close unless something it started holds them: wait a
    // little for the readers, never for ever.
    let grace = Duration::from_secs(5);
    let out = match early_out {
        Some(r) => r,
        None => out_rx.recv_timeout(grace).map_err(|_| HwError::Call {
            call: what.into(),
            detail: "the child process ended but its output did not close".into(),
        })?,
    }
    .map_err(|e| HwError::Call {
        call: what.into(),
        detail: format!("the child process printed too much: {e}"),
    })?;
    let err = err_rx.recv_timeout(grace).unwrap_or_default();
    let err = String::from_utf8_lossy(&err);
    let tail: String = {
        let t = err.trim_end();
        let skip = t.chars().count().saturating_sub(STDERR_KEPT);
        t.chars().skip(skip).collect()
    };
    Ok(ChildOutput {
        status,
        stdout: out,
        stderr_tail: tail,
    })
}

/// The reply in a child's output, checked against the request.
pub fn read_reply(
    out: &ChildOutput,
    req: &Request,
    what: &str,
) -> Result<Vec<CollectiveSample>, HwError> {
    let text = String::from_utf8_lossy(&out.stdout);
    let fail = |detail: String| {
        let stderr = if out.stderr_tail.is_empty() {
            String::new()
        } else {
            format!("; its last messages: {}", out.stderr_tail)
        };
        HwError::Call {
            call: what.into(),
            detail: format!("{detail} (exit status {}){stderr}", out.status),
        }
    };
    let Some(line) = text.lines().rev().find_map(|l| l.strip_prefix(REPLY_MARK)) else {
        return Err(fail("the child process gave no reply".into()));
    };
    let reply: Reply = serde_json::from_str(line)
        .map_err(|e| fail(format!("the child process's reply cannot be read: {e}")))?;
    if reply.protocol != PROTOCOL {
        return Err(fail(format!(
            "the child process answered in protocol {}, not {PROTOCOL}",
            reply.protocol
        )));
    }
    if reply.nvls_enable.as_deref() != Some("0") {
        return Err(fail(format!(
            "the child process ran with {NVLS_ENV}={}, not 0: its figure would not be the one \
             without NVLS",
            reply.nvls_enable.as_deref().unwrap_or("(unset)")
        )));
    }
    let samples = reply.result?;
    if samples.len() != req.sizes.len() {
        return Err(fail(format!(
            "the child process answered {} sizes for {} asked",
            samples.len(),
            req.sizes.len()
        )));
    }
    Ok(samples)
}

/// The child's side: measure what `request` (JSON) asks, print the reply, and return the exit
/// code (0 measured, 2 the request cannot be read, 3 the measurement failed).
pub fn serve(request: &str) -> u8 {
    use crate::error::exit;
    let (code, reply) = answer(request, std::env::var(NVLS_ENV).ok());
    let line = match serde_json::to_string(&reply) {
        Ok(j) => format!("{REPLY_MARK}{j}\n"),
        Err(_) => return exit::NODE_UNTESTABLE,
    };
    use std::io::Write;
    let mut o = std::io::stdout().lock();
    if o.write_all(line.as_bytes())
        .and_then(|_| o.flush())
        .is_err()
    {
        return exit::NODE_UNTESTABLE;
    }
    code
}

/// What the child answers to `request` (JSON), having seen `nvls_enable` in its environment,
/// and its exit code.
fn answer(request: &str, nvls_enable: Option<String>) -> (u8, Reply) {
    use crate::error::exit;
    let (code, result) = match serde_json::from_str::<Request>(request) {
        Err(e) => (
            exit::INVALID_INPUT,
            Err(HwError::Call {
                call: "reading the request of the child process".into(),
                detail: e.to_string(),
            }),
        ),
        Ok(req) if req.protocol != PROTOCOL => (
            exit::INVALID_INPUT,
            Err(HwError::Call {
                call: "reading the request of the child process".into(),
                detail: format!("protocol {}, not {PROTOCOL}", req.protocol),
            }),
        ),
        Ok(req) => {
            let r = sweep(&req);
            (
                if r.is_ok() {
                    exit::PASS
                } else {
                    exit::NODE_UNTESTABLE
                },
                r,
            )
        }
    };
    (
        code,
        Reply {
            protocol: PROTOCOL,
            nvls_enable,
            result,
        },
    )
}

fn sweep(req: &Request) -> Result<Vec<CollectiveSample>, HwError> {
    match &req.target {
        Target::Real { bus_ids } => {
            let mut m = super::cuda::CudaMeasurements::new(super::cuda::CudaOptions {
                bus_ids: bus_ids.clone(),
                ..Default::default()
            });
            req.sizes
                .iter()
                .map(|&s| m.collective(req.op, s, req.warmup, req.iters))
                .collect()
        }
        Target::Simulated { node, faults, seed } => {
            use super::Backend;
            let bad = |e: String| HwError::Call {
                call: "opening the simulated node in the child process".into(),
                detail: e,
            };
            let node = super::sim::load_node(node).map_err(|e| bad(e.to_string()))?;
            let faults = faults
                .iter()
                .map(|f| super::sim::Fault::parse(f).map_err(bad))
                .collect::<Result<Vec<_>, _>>()?;
            let mut b =
                super::sim::SimBackend::new(node, faults, *seed).map_err(|e| bad(e.to_string()))?;
            b.collective_no_nvls(req.op, &req.sizes, req.warmup, req.iters)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str) -> Command {
        let mut c = Command::new("/bin/sh");
        c.arg("-c").arg(script);
        c
    }

    fn req() -> Request {
        Request::new(
            CollectiveOp::AllReduce,
            &[1024, 2048],
            1,
            2,
            Target::Real { bus_ids: vec![] },
        )
    }

    fn sample() -> CollectiveSample {
        CollectiveSample {
            time_us: vec![10.0, 11.0],
            elements_checked: 256,
            wrong_elements: 0,
            ranks: 8,
            bytes: 1024,
        }
    }

    fn reply_line(r: &Reply) -> String {
        format!("{REPLY_MARK}{}", serde_json::to_string(r).unwrap())
    }

    fn through_sh(stdout: &str) -> Result<Vec<CollectiveSample>, HwError> {
        // printf '%s\n' prints the text as it is, whatever it holds.
        let quoted = stdout.replace('\'', "'\\''");
        let out = run_bounded(
            sh(&format!(
                "printf '%s\\n' '{quoted}'; echo 'some warning' >&2"
            )),
            Duration::from_secs(20),
            MAX_STDOUT,
            "test child",
        )?;
        read_reply(&out, &req(), "test child")
    }

    #[test]
    fn a_hung_child_is_killed_at_its_deadline_and_is_a_timeout() {
        let t0 = Instant::now();
        let e = run_bounded(
            sh("exec sleep 30"),
            Duration::from_millis(300),
            MAX_STDOUT,
            "NCCL all_reduce with NVLS forced off (child process)",
        )
        .unwrap_err();
        assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
        assert!(matches!(e, HwError::Timeout { .. }), "{e:?}");
        assert_eq!(
            e.to_string(),
            "NCCL all_reduce with NVLS forced off (child process) did not finish within 0.3 s"
        );
    }

    #[test]
    fn a_child_that_prints_too_much_is_stopped() {
        let t0 = Instant::now();
        let e = run_bounded(
            sh("yes garbage"),
            Duration::from_secs(60),
            1 << 16,
            "test child",
        )
        .unwrap_err();
        assert!(t0.elapsed() < Duration::from_secs(20));
        assert!(matches!(e, HwError::Call { .. }), "{e:?}");
        assert!(e.to_string().contains("printed too much"), "{e}");
        assert!(e.to_string().contains("64 KiB"), "{e}");
    }

    #[test]
    fn garbage_or_no_reply_is_an_error_naming_it() {
        let e = through_sh("Segmentation fault").unwrap_err();
        assert!(e.to_string().contains("gave no reply"), "{e}");
        assert!(e.to_string().contains("some warning"), "stderr kept: {e}");
        let e = through_sh(&format!("{REPLY_MARK}{{not json")).unwrap_err();
        assert!(e.to_string().contains("reply cannot be read"), "{e}");
        let e = run_bounded(sh("exit 7"), Duration::from_secs(20), 100, "x")
            .and_then(|o| read_reply(&o, &req(), "x"))
            .unwrap_err();
        assert!(e.to_string().contains("exit status: 7"), "{e}");
    }

    #[test]
    fn a_good_reply_is_read_after_nccls_own_messages() {
        let good = Reply {
            protocol: PROTOCOL,
            nvls_enable: Some("0".into()),
            result: Ok(vec![sample(), sample()]),
        };
        let text = format!(
            "node:1:1 [0] NCCL INFO NVLS disabled\n{}",
            reply_line(&good)
        );
        assert_eq!(through_sh(&text).unwrap(), vec![sample(), sample()]);
    }

    #[test]
    fn a_reply_that_does_not_fit_the_request_is_refused() {
        let mut r = Reply {
            protocol: PROTOCOL,
            nvls_enable: Some("0".into()),
            result: Ok(vec![sample()]),
        };
        let e = through_sh(&reply_line(&r)).unwrap_err();
        assert!(e.to_string().contains("1 sizes for 2 asked"), "{e}");
        // NVLS not forced off: the figure is not the one asked for.
        r.result = Ok(vec![sample(), sample()]);
        r.nvls_enable = None;
        let e = through_sh(&reply_line(&r)).unwrap_err();
        assert!(
            e.to_string().contains("NCCL_NVLS_ENABLE=(unset), not 0"),
            "{e}"
        );
        r.nvls_enable = Some("0".into());
        r.protocol = 99;
        let e = through_sh(&reply_line(&r)).unwrap_err();
        assert!(e.to_string().contains("protocol 99"), "{e}");
    }

    #[test]
    fn the_childs_own_errors_keep_their_kind() {
        // A measurement that hung inside the child is a timeout here too (exit 3).
        let r = Reply {
            protocol: PROTOCOL,
            nvls_enable: Some("0".into()),
            result: Err(HwError::Timeout {
                what: "NCCL all_reduce of 1 KiB".into(),
                seconds: 240.0,
            }),
        };
        let e = through_sh(&reply_line(&r)).unwrap_err();
        assert!(matches!(e, HwError::Timeout { .. }), "{e:?}");
    }

    #[test]
    fn the_child_answers_for_the_simulated_node_and_refuses_what_it_cannot_read() {
        let sim = |faults: Vec<String>, node: &str| {
            let mut r = req();
            r.target = Target::Simulated {
                node: node.into(),
                faults,
                seed: 1,
            };
            serde_json::to_string(&r).unwrap()
        };
        let (code, reply) = answer(&sim(vec![], "h100-sxm-8"), Some("0".into()));
        assert_eq!(code, 0);
        assert_eq!(reply.nvls_enable.as_deref(), Some("0"));
        let got = reply.result.unwrap();
        assert_eq!(got.len(), 2);
        assert_eq!((got[0].ranks, got[0].bytes), (8, 1024));
        let (code, reply) = answer(&sim(vec!["no-such-fault".into()], "h100-sxm-8"), None);
        assert_eq!(code, 3);
        assert!(reply.result.is_err());
        let (code, reply) = answer(&sim(vec![], "no-such-node"), None);
        assert_eq!(code, 3, "{reply:?}");
        let mut other = req();
        other.protocol = 2;
        let (code, reply) = answer(&serde_json::to_string(&other).unwrap(), None);
        assert_eq!(code, 2);
        assert!(
            reply
                .result
                .unwrap_err()
                .to_string()
                .contains("protocol 2, not 1"),
            "a request of another version is refused"
        );
        let (code, _) = answer("{", None);
        assert_eq!(code, 2);
    }

    #[test]
    fn a_killed_child_is_gone_not_left_running() {
        let dir = tempfile::tempdir().unwrap();
        let pid_file = dir.path().join("pid");
        let e = run_bounded(
            sh(&format!(
                "echo $$ > '{}'; exec sleep 30",
                pid_file.display()
            )),
            Duration::from_millis(500),
            MAX_STDOUT,
            "x",
        )
        .unwrap_err();
        assert!(matches!(e, HwError::Timeout { .. }), "{e:?}");
        let pid = std::fs::read_to_string(&pid_file).unwrap();
        let proc_dir = std::path::PathBuf::from(format!("/proc/{}", pid.trim()));
        let t0 = Instant::now();
        while proc_dir.exists() && t0.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(!proc_dir.exists(), "killed and reaped");
        // Reaped, it is no longer one of nodecert's own children that may hold a GPU.
        let pid: u32 = pid.trim().parse().unwrap();
        let t0 = Instant::now();
        while live_children().contains(&pid) && t0.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(!live_children().contains(&pid));
    }

    /// A child is one of nodecert's own while it runs, and not once it has ended.
    #[test]
    fn a_child_is_counted_as_nodecerts_own_while_it_runs() {
        let dir = tempfile::tempdir().unwrap();
        let pid_file = dir.path().join("pid");
        let seen = std::sync::Arc::new(std::sync::Mutex::new(None));
        let (file, seen2) = (pid_file.clone(), seen.clone());
        let watcher = std::thread::spawn(move || {
            let t0 = Instant::now();
            while t0.elapsed() < Duration::from_secs(10) {
                if let Some(pid) = std::fs::read_to_string(&file)
                    .ok()
                    .and_then(|p| p.trim().parse::<u32>().ok())
                {
                    // The child may write its pid before the parent, back from spawn, lists it
                    // (a loaded machine): listed at any time in the second it sleeps.
                    let t1 = Instant::now();
                    let mut listed = live_children().contains(&pid);
                    while !listed && t1.elapsed() < Duration::from_millis(500) {
                        std::thread::sleep(Duration::from_millis(5));
                        listed = live_children().contains(&pid);
                    }
                    *seen2.lock().unwrap() = Some(listed);
                    return;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        });
        let out = run_bounded(
            sh(&format!(
                "echo $$ > '{}.tmp'; mv '{0}.tmp' '{0}'; sleep 1; echo $$",
                pid_file.display()
            )),
            Duration::from_secs(20),
            MAX_STDOUT,
            "x",
        )
        .unwrap();
        watcher.join().unwrap();
        assert_eq!(*seen.lock().unwrap(), Some(true), "listed while it ran");
        let pid: u32 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
        assert!(!live_children().contains(&pid), "not once it ended");
    }

    /// The last STDERR_KEPT characters, however the pipe was read: a final newline and
    /// characters of several bytes do not make it fewer.
    #[test]
    fn a_long_stderr_keeps_its_end() {
        let tail = |script: &str| {
            run_bounded(sh(script), Duration::from_secs(20), MAX_STDOUT, "x")
                .unwrap()
                .stderr_tail
        };
        // Ending in a newline and a character of two bytes: kept to exactly 2048 bytes, the
        // tail was fewer characters once trimmed.
        let t = tail("head -c 10238 /dev/zero | tr '\\0' y >&2; printf 'é\\n' >&2");
        assert!(t.ends_with("yyé"), "{t}");
        assert_eq!(t.chars().count(), STDERR_KEPT);
        let many = "é".repeat(3000);
        let t = tail(&format!("printf '{many}\\n\\n' >&2"));
        assert_eq!(t, "é".repeat(STDERR_KEPT));
        let t = tail("head -c 50000 /dev/zero | tr '\\0' x >&2; echo THE-END >&2");
        assert!(t.ends_with("xxTHE-END"), "{t}");
        assert_eq!(t.chars().count(), STDERR_KEPT);
    }

    #[test]
    fn a_child_that_cannot_start_is_an_error() {
        let e = measure(
            Path::new("/nonexistent/nodecert"),
            &req(),
            Duration::from_secs(5),
        )
        .unwrap_err();
        assert!(e.to_string().starts_with("starting NCCL all_reduce"), "{e}");
    }
}
