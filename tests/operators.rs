//! Careless operators (issue 13, smaller things): names that are both an embedded suite and a
//! folder here, evidence versions, `--out FILE`, frozen suites with odd driver strings, and
//! links above an export target.

mod util;

use predicates::prelude::*;
use util::Env;

fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn an_embedded_suite_name_is_that_suite_even_beside_a_folder_of_the_same_name() {
    let env = Env::new();
    // The report folder takes the suite's name...
    env.cmd()
        .args([
            "run",
            "h200-vm-1",
            "--simulate",
            "h200-vm-1",
            "--out",
            "h200-vm-1",
            "-q",
        ])
        .assert()
        .code(0);
    // ...and the same command still means the embedded suite, and says which it took.
    env.cmd()
        .args([
            "run",
            "h200-vm-1",
            "--simulate",
            "h200-vm-1",
            "--out",
            "again",
            "-q",
        ])
        .assert()
        .code(0)
        .stderr(predicate::str::contains(
            "note: h200-vm-1 is the embedded suite of that name",
        ))
        .stderr(predicate::str::contains("write ./h200-vm-1"));
    // A file named like an embedded suite is reached as a path.
    env.write(
        "l40s-pcie-4",
        "format_version = 1\nname = \"mine\"\nextends = \"h200-vm-1\"\n",
    );
    env.cmd()
        .args(["check", "l40s-pcie-4"])
        .assert()
        .code(0)
        .stdout(predicate::str::contains(
            "suite l40s-pcie-4 (embedded:l40s-pcie-4)",
        ));
    env.cmd()
        .args(["check", "./l40s-pcie-4"])
        .assert()
        .code(0)
        .stdout(predicate::str::contains("suite mine (./l40s-pcie-4)"));
    // A bare name that is no embedded suite is still a file.
    env.write(
        "mysuite",
        "format_version = 1\nname = \"m\"\nextends = \"h200-vm-1\"\n",
    );
    env.cmd().args(["check", "mysuite"]).assert().code(0);
}

/// Run once and return the evidence text.
fn evidence(env: &Env) -> String {
    env.cmd()
        .args(["run", "--simulate", "h200-vm-1", "--out", "r", "-q"])
        .assert()
        .code(0);
    env.read("r/evidence.json")
}

#[test]
fn evidence_format_versions_are_checked_with_their_place() {
    let env = Env::new();
    let text = evidence(&env);
    let line = text
        .lines()
        .position(|l| l.trim_start().starts_with("\"format_version\""))
        .expect("a format_version line")
        + 1;
    for (v, want) in [
        ("0", "0 is not a version: evidence formats start at 1"),
        (
            "1.0",
            "invalid type: floating point `1.0`, expected a whole number from 1 to",
        ),
        ("9", "9 is newer than this nodecert reads"),
        // Once truncated to 32 bits, this read as version 1.
        ("4294967297", "4294967297 is newer than this nodecert reads"),
        ("\"2\"", "invalid type: string \"2\""),
    ] {
        let edited = text.replacen(
            "\"format_version\": 3",
            &format!("\"format_version\": {v}"),
            1,
        );
        env.write("e.json", &edited);
        let o = env
            .cmd()
            .args(["render", "e.json", "--out", "x"])
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "{v}: {}", stderr(&o));
        let located = format!("e.json:{line}:");
        assert!(stderr(&o).contains(&located), "{v}: {}", stderr(&o));
        assert!(stderr(&o).contains(want), "{v}: {}", stderr(&o));
    }
    env.write("e.json", &text.replacen("\"format_version\": 3,", "", 1));
    env.cmd()
        .args(["render", "e.json", "--out", "x"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("e.json: no format_version"));
}

#[test]
fn an_out_that_is_a_file_is_invalid_input() {
    let env = Env::new();
    env.write("f", "notes\n");
    for args in [
        &["run", "--simulate", "h200-vm-1", "--out", "f"][..],
        &["run", "--simulate", "h200-vm-1", "--out", "f/sub"][..],
    ] {
        env.cmd()
            .args(args)
            .assert()
            .code(2)
            .stderr(predicate::str::contains("Not a directory"));
    }
    assert_eq!(env.read("f"), "notes\n");
}

#[test]
fn a_frozen_suite_loads_again_whatever_driver_string_the_node_reports() {
    let env = Env::new();
    let node = include_str!("../suites/nodes/h200-vm-1.toml");
    let line = node
        .lines()
        .find(|l| l.starts_with("driver_version"))
        .expect("a driver line");
    for driver in [
        "550.54.15",
        "550.54-open",
        "",
        "r550",
        "550..1",
        "1.2.3.4.5.6.7.8",
        "550\n[checks.health]\nenabled = false",
        "\u{202e}550",
    ] {
        let quoted = toml_edit::Value::from(driver).to_string();
        env.write(
            "node.toml",
            &node.replacen(line, &format!("driver_version = {quoted}"), 1),
        );
        let o = env
            .cmd()
            .args([
                "inventory",
                "--simulate",
                "./node.toml",
                "--as-suite",
                "frozen.toml",
            ])
            .arg("--force")
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(0), "{driver:?}: {}", stderr(&o));
        let frozen = env.read("frozen.toml");
        // The frozen suite loads again, and the same node passes it.
        env.cmd().args(["check", "frozen.toml"]).assert().code(0);
        let o = env
            .cmd()
            .args([
                "run",
                "frozen.toml",
                "--simulate",
                "./node.toml",
                "--out",
                "r",
                "-q",
            ])
            .output()
            .unwrap();
        assert_eq!(
            o.status.code(),
            Some(0),
            "{driver:?}: {frozen}\n{}",
            stderr(&o)
        );
        // Only a version is held as driver_min; anything else says why it is not.
        let held = frozen.lines().any(|l| l.starts_with("driver_min"));
        assert_eq!(
            held,
            driver.starts_with("550.54.15") || driver == "1.2.3.4.5.6.7.8",
            "{frozen}"
        );
        if !held {
            assert!(
                frozen.contains("# no driver_min: the driver reports"),
                "{frozen}"
            );
        }
    }
}

#[test]
fn links_above_an_export_target_are_followed_only_when_root_or_the_user_owns_them() {
    let env = Env::new();
    std::fs::create_dir_all(env.path("real/dir")).unwrap();
    std::os::unix::fs::symlink("real", env.path("mine")).unwrap();
    // The operator's own link (or the system's, like /var/run) is a path like any other.
    env.cmd()
        .args(["run", "--simulate", "h200-vm-1", "--out", "r", "-q"])
        .args(["--junit", "mine/dir/j.xml"])
        .assert()
        .code(0);
    assert!(env.path("real/dir/j.xml").is_file());
    env.cmd()
        .args(["run", "--simulate", "h200-vm-1", "--out", "real/rep", "-q"])
        .assert()
        .code(0);
    env.cmd().args(["keygen", "--out", "k"]).assert().code(0);
    // Another user's link, planted in a folder on the way, is refused before the run.
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped the other user's link: only root can make one");
        return;
    }
    std::os::unix::fs::symlink("real", env.path("theirs")).unwrap();
    std::os::unix::fs::lchown(env.path("theirs"), Some(65534), None).unwrap();
    for args in [
        &[
            "run",
            "--simulate",
            "h200-vm-1",
            "--out",
            "r2",
            "--junit",
            "theirs/dir/j2.xml",
        ][..],
        &[
            "inventory",
            "--simulate",
            "h200-vm-1",
            "--as-suite",
            "theirs/dir/s.toml",
        ][..],
        &["keygen", "--out", "theirs/dir/k"][..],
        // A report folder below another user's link: not created there, nothing written.
        &["run", "--simulate", "h200-vm-1", "--out", "theirs/dir/r3"][..],
        &["run", "--simulate", "h200-vm-1", "--out", "theirs/dir"][..],
        // A report folder signed through another user's link: nothing signed.
        &["sign", "theirs/rep", "--key", "k"][..],
    ] {
        env.cmd()
            .args(args)
            .assert()
            .code(2)
            .stderr(predicate::str::contains(
                "theirs is a symbolic link owned by another user (uid 65534)",
            ));
    }
    assert!(!env.path("r2").exists(), "refused before the run");
    let left: Vec<_> = std::fs::read_dir(env.path("real/dir"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left, ["j.xml"]);
    assert!(!env.path("real/rep/nodecert-manifest.txt").exists());
}
