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
//! So nodecert looks for the socket before anything starts CUDA ([`go_around`], first thing in
//! `main`). Where there is one, it points its own `CUDA_MPS_PIPE_DIRECTORY` (inherited by its
//! children) at a path under which nothing can exist, so the driver's attempt fails and CUDA runs
//! as it does without MPS, as the MPS documentation says a client does when it cannot connect.
//! What was found goes into the inventory, and the health check names it.

use crate::inventory::MpsDaemon;
use std::ffi::OsStr;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The variable the CUDA driver reads for the daemon's folder.
pub const PIPE_ENV: &str = "CUDA_MPS_PIPE_DIRECTORY";
/// The folder the driver uses when the variable is not set.
pub const DEFAULT_PIPE_DIR: &str = "/tmp/nvidia-mps";
/// Where nodecert points its own CUDA instead: not a folder, so nothing can ever be created
/// under it (no one can plant a socket there), and nothing needs to be cleaned up.
pub const NOWHERE: &str = "/dev/null";
/// The most /proc entries looked at for the daemon's process.
const MAX_PROC_ENTRIES: usize = 1 << 17;
/// The daemon's program name (its `comm` is cut to 15 bytes, "nvidia-cuda-mps", which the
/// server shares, so the command line tells them apart).
const DAEMON: &str = "nvidia-cuda-mps-control";

/// The daemon whose socket is where a CUDA process with this `env` value of
/// [`PIPE_ENV`] would look, in the tree under `root` ("/" on a node): None when there is none.
pub fn find(root: &Path, env: Option<&OsStr>) -> Option<MpsDaemon> {
    let dir = env
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(DEFAULT_PIPE_DIR));
    let under_root = |p: &Path| root.join(p.strip_prefix("/").unwrap_or(p));
    // The socket itself, not what a link there points to: any kind of file counts, as the
    // driver would try it.
    std::fs::symlink_metadata(under_root(&dir.join("control"))).ok()?;
    Some(MpsDaemon {
        pipe_dir: dir.to_string_lossy().into_owned(),
        pid: daemon_pid(&under_root(Path::new("/proc"))),
    })
}

/// The first process in `proc` whose program is the control daemon (None: none seen, as when
/// it runs in another PID namespace).
fn daemon_pid(proc: &Path) -> Option<u32> {
    let entries = std::fs::read_dir(proc).ok()?;
    let mut pids: Vec<u32> = entries
        .take(MAX_PROC_ENTRIES)
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    pids.sort_unstable();
    pids.into_iter().find(|pid| {
        let path = proc.join(pid.to_string()).join("cmdline");
        // argv[0] ends at its NUL, within a path's length: nothing past that is read.
        let mut bytes = Vec::new();
        let read = crate::fsio::read::open(&path, false)
            .and_then(|f| f.take(4096).read_to_end(&mut bytes));
        if read.is_err() {
            return false;
        }
        let argv0 = bytes.split(|&b| b == 0).next().unwrap_or_default();
        Path::new(OsStr::new(std::str::from_utf8(argv0).unwrap_or_default()))
            .file_name()
            .is_some_and(|n| n == DAEMON)
    })
}

static FOUND: OnceLock<Option<MpsDaemon>> = OnceLock::new();

/// Looks for the daemon where this process's CUDA would, and where there is one, points
/// [`PIPE_ENV`] at [`NOWHERE`]. Call it before any thread starts (it sets an environment
/// variable) and before anything starts CUDA; later calls do nothing.
pub fn go_around() {
    FOUND.get_or_init(|| {
        let found = find(Path::new("/"), std::env::var_os(PIPE_ENV).as_deref());
        if found.is_some() {
            std::env::set_var(PIPE_ENV, NOWHERE);
        }
        found
    });
}

/// What [`go_around`] found (None where it was not called: nodecert's CUDA then looks where
/// the environment says).
pub fn found_at_start() -> Option<MpsDaemon> {
    FOUND.get().cloned().flatten()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixListener;

    fn proc_entry(root: &Path, pid: u32, cmdline: &[u8]) {
        let d = root.join("proc").join(pid.to_string());
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("cmdline"), cmdline).unwrap();
    }

    /// The socket in the default folder is found, with the daemon's process; the server (same
    /// `comm`) and other programs are not taken for it.
    #[test]
    fn the_daemon_is_found_by_its_socket_and_named_by_its_process() {
        let root = tempfile::tempdir().unwrap();
        assert_eq!(find(root.path(), None), None, "no socket: no daemon");
        let dir = root.path().join("tmp/nvidia-mps");
        std::fs::create_dir_all(&dir).unwrap();
        let _l = UnixListener::bind(dir.join("control")).unwrap();
        proc_entry(root.path(), 1, b"/sbin/init\0");
        proc_entry(root.path(), 40, b"nvidia-cuda-mps-server\0");
        proc_entry(root.path(), 77, b"/usr/bin/nvidia-cuda-mps-control\0-d\0");
        proc_entry(root.path(), 90, b"/usr/bin/nvidia-cuda-mps-control\0");
        std::fs::create_dir_all(root.path().join("proc/self")).unwrap();
        assert_eq!(
            find(root.path(), None),
            Some(MpsDaemon {
                pipe_dir: "/tmp/nvidia-mps".into(),
                pid: Some(77)
            })
        );
        // An empty variable is the default, as the driver takes it.
        assert_eq!(
            find(root.path(), Some(OsStr::new(""))).unwrap().pipe_dir,
            "/tmp/nvidia-mps"
        );
        // A socket whose daemon runs where nodecert cannot see it (another PID namespace).
        std::fs::remove_dir_all(root.path().join("proc/77")).unwrap();
        std::fs::remove_dir_all(root.path().join("proc/90")).unwrap();
        assert_eq!(find(root.path(), None).unwrap().pid, None);
    }

    /// The variable names the folder, as the driver reads it; nothing under the default folder
    /// counts then, and the folder nodecert points at holds nothing.
    #[test]
    fn the_folder_the_variable_names_is_the_one_looked_in() {
        let root = tempfile::tempdir().unwrap();
        let k8s = root.path().join("run/nvidia/mps/pipe");
        std::fs::create_dir_all(&k8s).unwrap();
        std::fs::create_dir_all(root.path().join("tmp/nvidia-mps")).unwrap();
        std::fs::write(root.path().join("tmp/nvidia-mps/control"), b"").unwrap();
        assert_eq!(
            find(root.path(), Some(OsStr::new("/run/nvidia/mps/pipe"))),
            None
        );
        let _l = UnixListener::bind(k8s.join("control")).unwrap();
        assert_eq!(
            find(root.path(), Some(OsStr::new("/run/nvidia/mps/pipe")))
                .unwrap()
                .pipe_dir,
            "/run/nvidia/mps/pipe"
        );
        assert_eq!(find(Path::new("/"), Some(OsStr::new(NOWHERE))), None);
    }

    /// A link named `control` counts, without being followed (the driver would try it).
    #[test]
    fn a_link_at_the_socket_name_counts_unfollowed() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("tmp/nvidia-mps");
        std::fs::create_dir_all(&dir).unwrap();
        std::os::unix::fs::symlink("/nonexistent", dir.join("control")).unwrap();
        assert!(find(root.path(), None).is_some());
    }
}
