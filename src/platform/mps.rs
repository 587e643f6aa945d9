//! The MPS control daemon, and going around it.
//!
//! When CUDA starts in a process, the driver looks for the MPS control daemon's socket
//! (`control`) in `$CUDA_MPS_PIPE_DIRECTORY`, or in `/tmp/nvidia-mps`. If a daemon answers there,
//! the process becomes an MPS client: its work runs inside a shared MPS server, under that
//! server's limits (a share of the SMs, a cap on pinned memory), so nodecert would measure a
//! share of each GPU and read it as a slow GPU. Worse, where the daemon's server runs for another
//! user, the daemon asks that server to stop once its clients are done and queues nodecert
//! behind it: nodecert would wait on a tenant's job and then end that tenant's server.
//!
//! So, first thing in `main` and before anything starts CUDA, [`go_around`] looks where the
//! driver would, then points nodecert's own `CUDA_MPS_PIPE_DIRECTORY` at a path under which
//! nothing can exist: the driver's attempt fails and CUDA runs as it does without MPS, as the
//! MPS documentation says a client does when it cannot connect. It does so whatever it found,
//! so a daemon that starts after the look does not catch nodecert's CUDA either. Its children
//! inherit both that and the folder it looked in ([`LOOKED_ENV`]): a nodecert that nodecert
//! started (run again for its libraries, or a rank a Slurm job it submitted starts) looks where
//! the first one did. What was found goes into the inventory, and the health check judges it.

use crate::inventory::Mps;
use std::ffi::OsStr;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The variable the CUDA driver reads for the daemon's folder.
pub const PIPE_ENV: &str = "CUDA_MPS_PIPE_DIRECTORY";
/// The folder the driver uses when the variable is not set (or is empty).
pub const DEFAULT_PIPE_DIR: &str = "/tmp/nvidia-mps";
/// Where nodecert points its own CUDA instead: not a folder, so nothing can ever be created
/// under it (no one can plant a socket there), and nothing needs to be cleaned up.
pub const NOWHERE: &str = "/dev/null";
/// The folder a nodecert looked in, for the nodecerts it starts (whose [`PIPE_ENV`] it has
/// set to [`NOWHERE`]).
pub const LOOKED_ENV: &str = "NODECERT_MPS_PIPE_DIRECTORY";
/// The most /proc entries looked at for the daemon's process.
const MAX_PROC_ENTRIES: usize = 1 << 17;
/// The daemon's program, and its `comm` (cut to 15 bytes, which its server shares).
const DAEMON: &str = "nvidia-cuda-mps-control";
const DAEMON_COMM: &str = "nvidia-cuda-mps";

/// The folder the driver would look in, from the values of [`PIPE_ENV`] and [`LOOKED_ENV`]
/// this process was started with; a relative one is taken from `cwd`, as the driver would.
pub fn pipe_dir(cuda: Option<&OsStr>, looked: Option<&OsStr>, cwd: &Path) -> PathBuf {
    let value = match (cuda, looked) {
        (Some(c), Some(l)) if c == NOWHERE && !l.is_empty() => Some(l),
        (c, _) => c,
    };
    let dir = value
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(DEFAULT_PIPE_DIR));
    cwd.join(dir)
}

/// What is at `dir` (an absolute path) in the tree under `root` ("/" on a node).
pub fn look(root: &Path, dir: &Path) -> Mps {
    let under_root = |p: &Path| root.join(p.strip_prefix("/").unwrap_or(p));
    // The socket itself, not what a link there points to: any kind of file counts, as the
    // driver would try it.
    let socket = std::fs::symlink_metadata(under_root(&dir.join("control"))).is_ok();
    Mps {
        pipe_dir: dir.to_string_lossy().into_owned(),
        socket,
        pid: socket
            .then(|| daemon_pid(&under_root(Path::new("/proc"))))
            .flatten(),
    }
}

/// The daemon's process in `proc`, where there is exactly one. Only what the kernel gives
/// without waiting on the process is read: its `comm` and its `exe` link. Its command line is
/// not, since reading it waits on the process's memory map, which a process stuck in the
/// driver may hold forever.
fn daemon_pid(proc: &Path) -> Option<u32> {
    let entries = std::fs::read_dir(proc).ok()?;
    let mut found = entries
        .take(MAX_PROC_ENTRIES)
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let at = proc.join(pid.to_string());
            let mut comm = Vec::new();
            let read = crate::fsio::read::open(&at.join("comm"), false)
                .and_then(|f| f.take(64).read_to_end(&mut comm));
            read.is_ok()
                && comm.strip_suffix(b"\n").unwrap_or(&comm) == DAEMON_COMM.as_bytes()
                && std::fs::read_link(at.join("exe")).is_ok_and(|exe| {
                    // A daemon whose program was replaced since it started (a driver upgrade)
                    // runs a " (deleted)" one.
                    let name = exe.file_name().unwrap_or_default().as_encoded_bytes();
                    name.strip_suffix(b" (deleted)").unwrap_or(name) == DAEMON.as_bytes()
                })
        });
    match (found.next(), found.next()) {
        (Some(one), None) => Some(one),
        _ => None,
    }
}

static FOUND: OnceLock<Mps> = OnceLock::new();

/// Looks where this process's CUDA would, then points [`PIPE_ENV`] at [`NOWHERE`] and keeps
/// the folder in [`LOOKED_ENV`]. Call it before any thread starts (it sets environment
/// variables) and before anything starts CUDA; later calls do nothing.
pub fn go_around() {
    FOUND.get_or_init(|| {
        let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
        let dir = pipe_dir(
            std::env::var_os(PIPE_ENV).as_deref(),
            std::env::var_os(LOOKED_ENV).as_deref(),
            &cwd,
        );
        let found = look(Path::new("/"), &dir);
        std::env::set_var(PIPE_ENV, NOWHERE);
        std::env::set_var(LOOKED_ENV, &dir);
        found
    });
}

/// What [`go_around`] found (None where it was not called: nodecert's CUDA then looks where
/// the environment says).
pub fn found_at_start() -> Option<Mps> {
    FOUND.get().cloned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixListener;

    /// A process in the sample /proc under `root`: its comm and where its exe link points.
    fn proc_entry(root: &Path, pid: u32, comm: &str, exe: &str) {
        let d = root.join("proc").join(pid.to_string());
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("comm"), format!("{comm}\n")).unwrap();
        std::os::unix::fs::symlink(exe, d.join("exe")).unwrap();
    }

    fn none_at(dir: &str) -> Mps {
        Mps {
            pipe_dir: dir.into(),
            socket: false,
            pid: None,
        }
    }

    /// The socket in the folder is found, with the daemon's process; its server (same `comm`)
    /// and other programs are not taken for it, and two daemons name none.
    #[test]
    fn the_daemon_is_found_by_its_socket_and_named_by_its_process() {
        let root = tempfile::tempdir().unwrap();
        let dir = Path::new("/tmp/nvidia-mps");
        assert_eq!(look(root.path(), dir), none_at("/tmp/nvidia-mps"));
        std::fs::create_dir_all(root.path().join("tmp/nvidia-mps")).unwrap();
        assert_eq!(look(root.path(), dir), none_at("/tmp/nvidia-mps"));
        let _l = UnixListener::bind(root.path().join("tmp/nvidia-mps/control")).unwrap();
        proc_entry(root.path(), 1, "systemd", "/usr/lib/systemd/systemd");
        proc_entry(
            root.path(),
            40,
            DAEMON_COMM,
            "/usr/bin/nvidia-cuda-mps-server",
        );
        proc_entry(root.path(), 41, "sleep", "/tmp/x/nvidia-cuda-mps-control");
        proc_entry(
            root.path(),
            42,
            DAEMON_COMM,
            "/usr/bin/nvidia-cuda-mps-control-x",
        );
        // Its program replaced since it started (a driver upgrade).
        proc_entry(
            root.path(),
            77,
            DAEMON_COMM,
            "/usr/bin/nvidia-cuda-mps-control (deleted)",
        );
        std::fs::create_dir_all(root.path().join("proc/self")).unwrap();
        let found = |pid| Mps {
            pipe_dir: "/tmp/nvidia-mps".into(),
            socket: true,
            pid,
        };
        assert_eq!(look(root.path(), dir), found(Some(77)));
        // A second daemon (another folder's): which one listens here is not known.
        proc_entry(root.path(), 90, DAEMON_COMM, "/opt/nvidia-cuda-mps-control");
        assert_eq!(look(root.path(), dir), found(None));
        // A daemon nodecert cannot see (another PID namespace).
        std::fs::remove_dir_all(root.path().join("proc/77")).unwrap();
        std::fs::remove_dir_all(root.path().join("proc/90")).unwrap();
        assert_eq!(look(root.path(), dir), found(None));
    }

    /// The folder is the variable's, as the driver reads it: empty is the default, a relative
    /// one is taken from the working folder, and a nodecert started by nodecert (whose
    /// variable points nowhere) looks where its parent did.
    #[test]
    fn the_folder_looked_in_is_the_drivers() {
        let cwd = Path::new("/home/op");
        let dir = |cuda: Option<&str>, looked: Option<&str>| {
            pipe_dir(cuda.map(OsStr::new), looked.map(OsStr::new), cwd)
        };
        assert_eq!(dir(None, None), Path::new(DEFAULT_PIPE_DIR));
        assert_eq!(dir(Some(""), None), Path::new(DEFAULT_PIPE_DIR));
        assert_eq!(dir(Some("/run/mps/pipe"), None), Path::new("/run/mps/pipe"));
        assert_eq!(dir(Some("pipe"), None), Path::new("/home/op/pipe"));
        assert_eq!(
            dir(Some(NOWHERE), Some("/run/mps/pipe")),
            Path::new("/run/mps/pipe")
        );
        // Pointed nowhere by someone else: nowhere is looked in.
        assert_eq!(dir(Some(NOWHERE), None), Path::new(NOWHERE));
        assert_eq!(dir(Some(NOWHERE), Some("")), Path::new(NOWHERE));
        // The kept folder counts only where nodecert pointed CUDA nowhere.
        assert_eq!(dir(Some("/a"), Some("/b")), Path::new("/a"));
        assert!(!look(Path::new("/"), Path::new(NOWHERE)).socket);
    }

    /// A link named `control` counts, without being followed (the driver would try it).
    #[test]
    fn a_link_at_the_socket_name_counts_unfollowed() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("tmp/nvidia-mps");
        std::fs::create_dir_all(&dir).unwrap();
        std::os::unix::fs::symlink("/nonexistent", dir.join("control")).unwrap();
        assert!(look(root.path(), Path::new("/tmp/nvidia-mps")).socket);
    }
}
