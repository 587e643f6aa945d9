//! A full stdout or stderr (`> /dev/full`) and a closed pipe: never a panic, never a lost result
//! taken for a success.

mod util;

use std::fs::File;
use std::process::Stdio;
use util::Env;

fn full() -> Stdio {
    Stdio::from(
        File::options()
            .write(true)
            .open("/dev/full")
            .expect("/dev/full"),
    )
}

/// `env.cmd()` as a std Command, whose stdout and stderr can be set.
fn cmd(env: &Env) -> std::process::Command {
    let mut c = std::process::Command::new(assert_cmd::cargo::cargo_bin("nodecert"));
    c.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("NO_COLOR", "1")
        .current_dir(env.dir.path());
    c
}

const LOST: &str = "cannot write to standard output";

#[test]
fn list_to_a_full_disk_exits_3_with_a_message() {
    let env = Env::new();
    let out = cmd(&env).arg("list").stdout(full()).output().unwrap();
    assert_eq!(out.status.code(), Some(3));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(LOST), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn help_and_errors_with_both_streams_full_do_not_panic() {
    let env = Env::new();
    for (args, code) in [
        (&["list"][..], 3),
        (&["--help"][..], 3),
        (&["no-such-command"][..], 2),
        (&["check", "no-such-suite"][..], 2),
        (&["verify", "no-such-folder"][..], 2),
    ] {
        let st = cmd(&env)
            .args(args)
            .stdout(full())
            .stderr(full())
            .status()
            .unwrap();
        // 101 would be a panic.
        assert_eq!(st.code(), Some(code), "{args:?}");
    }
}

#[test]
fn a_run_whose_summary_cannot_be_printed_keeps_its_evidence_and_exits_3() {
    let env = Env::new();
    let out = cmd(&env)
        .args(["run", "--simulate", "h200-vm-1", "--out", "r"])
        .stdout(full())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&out.stderr).contains(LOST));
    assert!(env.path("r/evidence.json").is_file());
    assert!(env.path("r/report.md").is_file());
    // A failed run keeps its own code: 1 says more than "output lost".
    let st = cmd(&env)
        .args(["run", "--simulate", "h200-vm-1", "--out", "f"])
        .args(["--inject", "ecc-uncorrectable:gpu=0"])
        .stdout(full())
        .stderr(full())
        .status()
        .unwrap();
    assert_eq!(st.code(), Some(1));
}

#[test]
fn a_verify_result_written_to_a_full_disk_is_not_lost_silently() {
    let env = Env::new();
    env.cmd().args(["keygen", "--out", "k"]).assert().success();
    env.cmd()
        .args([
            "run",
            "--simulate",
            "h200-vm-1",
            "--out",
            "r",
            "--sign-key",
            "k",
        ])
        .assert()
        .success();
    // Verified, but nobody could read "VERIFIED": not a success.
    let out = cmd(&env)
        .args(["verify", "r", "--pubkey", "k.pub"])
        .stdout(full())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&out.stderr).contains(LOST));
    // Printed where it can be, the same folder verifies.
    env.cmd()
        .args(["verify", "r", "--pubkey", "k.pub"])
        .assert()
        .success()
        .stdout(predicates::str::contains("VERIFIED"));
    // A failed verification keeps its code 4 whatever happened to the output.
    std::fs::write(env.path("r/report.md"), "changed").unwrap();
    let st = cmd(&env)
        .args(["verify", "r", "--pubkey", "k.pub"])
        .stdout(full())
        .stderr(full())
        .status()
        .unwrap();
    assert_eq!(st.code(), Some(4));
}

#[test]
fn a_reader_that_stops_early_ends_nodecert_quietly() {
    use std::os::unix::process::ExitStatusExt;
    let env = Env::new();
    let mut child = cmd(&env)
        .args(["inventory", "--simulate", "h200-sxm-8", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The reader goes away before reading anything (`| head -0`).
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "{err}");
    // Ended by SIGPIPE, as any Unix tool; or, had it finished writing first, a success.
    assert!(
        out.status.signal() == Some(libc::SIGPIPE) || out.status.success(),
        "{:?}",
        out.status
    );
}
