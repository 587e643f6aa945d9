//! On a machine without the NVIDIA driver, the commands that need real GPUs exit 3 with one
//! clear sentence and a hint to use --simulate, never a panic.

use assert_cmd::Command;

/// True where NVML loads: the test is about machines where it does not.
fn driver_present() -> bool {
    nvml_wrapper::Nvml::init().is_ok()
}

fn assert_untestable(args: &[&str]) {
    if driver_present() {
        eprintln!("skipped: this machine has an NVIDIA driver");
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let out = Command::cargo_bin("nodecert")
        .expect("binary")
        .args(args)
        .current_dir(dir.path())
        .env_remove("CUDA_VISIBLE_DEVICES")
        .output()
        .expect("runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{args:?}: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 2, "one error sentence and one hint: {stderr}");
    assert!(
        lines[0].starts_with("error: the NVIDIA driver is not available: "),
        "{stderr}"
    );
    assert!(lines[1].starts_with("hint: ") && lines[1].contains("--simulate"));
    assert!(out.stdout.is_empty(), "nothing on stdout");
}

#[test]
fn inventory_without_a_driver_exits_3() {
    assert_untestable(&["inventory"]);
    assert_untestable(&["inventory", "--json"]);
}

#[test]
fn run_without_a_driver_exits_3() {
    assert_untestable(&["run"]);
    assert_untestable(&["run", "h200-vm-1"]);
}
