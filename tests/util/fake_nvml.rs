//! The fake NVML (the workspace crate fake-nvml): built once per test binary, copied to a folder
//! as libnvidia-ml.so.1, and put in front of nodecert through LD_LIBRARY_PATH, so that nodecert
//! loads it exactly as it loads the real library (nvml-wrapper dlopens "libnvidia-ml.so.1").

use assert_cmd::Command;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The folder that holds the fake as libnvidia-ml.so.1, built on first use.
///
/// It is built with cargo into a target folder of its own, so that it never contends for
/// `target/` with the cargo that is running the tests.
pub fn lib_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
        let target = tmp.join("fake-nvml-target");
        let cargo = std::env::var_os("CARGO")
            .or_else(|| option_env!("CARGO").map(Into::into))
            .unwrap_or_else(|| "cargo".into());
        let out = std::process::Command::new(cargo)
            .args(["build", "--quiet", "-p", "fake-nvml", "--manifest-path"])
            .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml"))
            .arg("--target-dir")
            .arg(&target)
            .output()
            .expect("cargo runs");
        assert!(
            out.status.success(),
            "building fake-nvml failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let dir = tmp.join("fake-nvml-lib");
        std::fs::create_dir_all(&dir).expect("mkdir");
        // Test binaries run at the same time: copy under a name of our own, then rename.
        let part = dir.join(format!("libnvidia-ml.so.1.{}", std::process::id()));
        std::fs::copy(target.join("debug/libfake_nvml.so"), &part).expect("copy the fake");
        std::fs::rename(&part, dir.join("libnvidia-ml.so.1")).expect("rename");
        dir
    })
}

/// Point a nodecert command at the fake, answering from the description `node` (JSON).
///
/// CUDA_VISIBLE_DEVICES is empty so that, on a machine with a real CUDA driver, CUDA's GPUs
/// (which the fake's UUIDs never match) stay out of it: nodecert then orders the fake GPUs by
/// bus id, as it does where there is no CUDA.
pub fn use_fake(cmd: &mut Command, node: &Path) {
    cmd.env("LD_LIBRARY_PATH", lib_dir())
        .env("FAKE_NVML_NODE", node)
        .env("CUDA_VISIBLE_DEVICES", "");
}
