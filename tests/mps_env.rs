//! Going around an MPS control daemon changes nodecert's own environment, which its children
//! inherit. One test in its own process: it sets a variable of the process.

use std::os::unix::net::UnixListener;

#[test]
fn a_daemon_found_points_nodecerts_cuda_and_its_children_nowhere() {
    use nodecert::platform::mps;
    let dir = tempfile::tempdir().expect("temp dir");
    let _socket = UnixListener::bind(dir.path().join("control")).expect("bind");
    std::env::set_var(mps::PIPE_ENV, dir.path());
    assert_eq!(mps::found_at_start(), None, "nothing looked for yet");
    mps::go_around();
    let found = mps::found_at_start().expect("looked");
    assert_eq!(found.pipe_dir, dir.path().to_str().unwrap());
    assert!(found.socket);
    assert_eq!(
        std::env::var_os(mps::PIPE_ENV).as_deref(),
        Some(std::ffi::OsStr::new(mps::NOWHERE))
    );
    assert_eq!(
        std::env::var_os(mps::LOOKED_ENV).as_deref(),
        Some(dir.path().as_os_str())
    );
    // A child inherits both: a nodecert started by this one looks where this one did.
    let child = std::process::Command::new("sh")
        .args([
            "-c",
            "printf '%s %s' \"$CUDA_MPS_PIPE_DIRECTORY\" \"$NODECERT_MPS_PIPE_DIRECTORY\"",
        ])
        .output()
        .expect("sh runs");
    assert_eq!(
        String::from_utf8(child.stdout).unwrap(),
        format!("{} {}", mps::NOWHERE, dir.path().display())
    );
    // Looked for once: a second call changes nothing, and what was found stays.
    std::env::set_var(mps::PIPE_ENV, dir.path());
    mps::go_around();
    assert_eq!(std::env::var_os(mps::PIPE_ENV).unwrap(), dir.path());
    assert_eq!(mps::found_at_start(), Some(found));
}
