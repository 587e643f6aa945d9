//! Hostile folders and careless operators: what nodecert writes and reads (issue 13). nodecert
//! runs as root, so each test plants what an unprivileged user could plant (a link, a FIFO, a
//! lock held) and checks that nothing outside what was asked is touched, and nothing hangs.

mod util;

use std::os::unix::fs::symlink;
use std::path::Path;
use std::time::Duration;
use util::Env;

/// Long enough for a slow CI machine, short enough that a hang fails the test.
const QUICK: Duration = Duration::from_secs(60);

fn mkfifo(p: &Path) {
    let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a valid C string.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0, "mkfifo");
}

fn is_fifo(p: &Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
    p.symlink_metadata().is_ok_and(|m| m.file_type().is_fifo())
}

fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).to_string()
}

fn run_sim(env: &Env, extra: &[&str]) -> std::process::Output {
    env.cmd()
        .args(["run", "--simulate", "h200-vm-1", "-q"])
        .args(extra)
        .timeout(QUICK)
        .output()
        .expect("runs")
}

fn dot_files(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().to_string())
                .filter(|n| n.starts_with('.'))
                .collect()
        })
        .unwrap_or_default()
}

// ---------------------------------------------------------------------------------------------
// writing

#[test]
fn an_export_to_a_symlink_or_a_fifo_is_refused_before_the_run() {
    let env = Env::new();
    let victim = env.write("victim.txt", "precious");
    symlink(&victim, env.path("link.xml")).unwrap();
    mkfifo(&env.path("null"));
    for (flag, target) in [("--junit", "link.xml"), ("--prometheus", "null")] {
        let o = run_sim(&env, &["--out", "r", flag, target]);
        assert_eq!(o.status.code(), Some(2), "{flag} {target}: {}", stderr(&o));
        assert!(stderr(&o).contains("not a regular file"), "{}", stderr(&o));
    }
    assert_eq!(env.read("victim.txt"), "precious");
    assert!(env
        .path("link.xml")
        .symlink_metadata()
        .unwrap()
        .file_type()
        .is_symlink());
    assert!(
        is_fifo(&env.path("null")),
        "the FIFO (our /dev/null) is still there"
    );
    assert!(!env.path("r").exists(), "refused before the run");
}

#[test]
fn an_export_never_replaces_the_run_s_own_evidence() {
    let env = Env::new();
    std::fs::create_dir(env.path("r")).unwrap();
    let o = run_sim(
        &env,
        &["--out", "r", "--junit", "r/evidence.json", "--force"],
    );
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("report's own files"), "{}", stderr(&o));
    // render: nor the evidence it reads.
    assert_eq!(run_sim(&env, &["--out", "r"]).status.code(), Some(0));
    let o = env
        .cmd()
        .args([
            "render",
            "r/evidence.json",
            "--out",
            "other",
            "--prometheus",
            "r/evidence.json",
        ])
        .timeout(QUICK)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    util::read_json(&env.path("r/evidence.json"));
}

#[test]
fn an_export_into_a_signed_folder_or_over_a_foreign_file_needs_force() {
    let env = Env::new();
    env.cmd().args(["keygen", "--out", "k"]).assert().code(0);
    assert_eq!(
        run_sim(&env, &["--out", "cert", "--sign-key", "k"])
            .status
            .code(),
        Some(0)
    );
    assert_eq!(run_sim(&env, &["--out", "r"]).status.code(), Some(0));
    let render = |extra: &[&str]| {
        env.cmd()
            .args(["render", "r", "--out", "r2"])
            .args(extra)
            .timeout(QUICK)
            .output()
            .unwrap()
    };
    let o = render(&["--junit", "cert/junit.xml"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("signed report"), "{}", stderr(&o));
    assert_eq!(
        render(&["--junit", "cert/junit.xml", "--force"])
            .status
            .code(),
        Some(0)
    );

    // A frozen suite given by mistake as the export target.
    env.write("handover.toml", "format_version = 1\nname = \"x\"\n");
    let o = render(&["--prometheus", "handover.toml"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("add --force"), "{}", stderr(&o));
    assert_eq!(
        env.read("handover.toml"),
        "format_version = 1\nname = \"x\"\n"
    );
    // An earlier output of the same kind is replaced: a textfile collector's file.
    assert_eq!(render(&["--prometheus", "m.prom"]).status.code(), Some(0));
    assert_eq!(render(&["--prometheus", "m.prom"]).status.code(), Some(0));
}

#[test]
fn an_existing_frozen_suite_is_replaced_only_with_force() {
    let env = Env::new();
    let freeze = |extra: &[&str]| {
        env.cmd()
            .args([
                "inventory",
                "--simulate",
                "h200-vm-1",
                "--as-suite",
                "frozen.toml",
            ])
            .args(extra)
            .timeout(QUICK)
            .output()
            .unwrap()
    };
    assert_eq!(freeze(&[]).status.code(), Some(0));
    let first = env.read("frozen.toml");
    let o = freeze(&[]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("--force"), "{}", stderr(&o));
    assert_eq!(freeze(&["--force"]).status.code(), Some(0));
    assert_eq!(env.read("frozen.toml"), first);
    // A link is refused even with --force.
    let victim = env.write("victim", "precious");
    symlink(&victim, env.path("l.toml")).unwrap();
    let o = env
        .cmd()
        .args([
            "inventory",
            "--simulate",
            "h200-vm-1",
            "--as-suite",
            "l.toml",
            "--force",
        ])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert_eq!(env.read("victim"), "precious");
}

#[test]
fn a_second_run_on_a_locked_folder_refuses() {
    let env = Env::new();
    std::fs::create_dir(env.path("r")).unwrap();
    // What a first run holds for as long as it writes.
    let lock = nodecert::fsio::write::Dir::open(&env.path("r"))
        .unwrap()
        .lock()
        .unwrap();
    let o = run_sim(&env, &["--out", "r"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("another nodecert is writing"),
        "{}",
        stderr(&o)
    );
    assert!(!env.path("r/evidence.json").exists());
    drop(lock);
    assert_eq!(run_sim(&env, &["--out", "r"]).status.code(), Some(0));
}

#[test]
fn two_concurrent_runs_on_one_folder_never_both_write() {
    let env = Env::new();
    let spawn = || {
        let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_nodecert"));
        c.args(["run", "--simulate", "h200-vm-1", "-q", "--out", "r"])
            .current_dir(env.dir.path())
            .env_clear()
            .env("NO_COLOR", "1")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped());
        c.spawn().unwrap()
    };
    let (a, b) = (spawn(), spawn());
    let codes: Vec<i32> = [a, b]
        .into_iter()
        .map(|c| c.wait_with_output().unwrap().status.code().unwrap())
        .collect();
    // Either one refused (2) and one passed, or they did not overlap and both passed.
    assert!(codes.contains(&0), "{codes:?}");
    assert!(codes.iter().all(|c| *c == 0 || *c == 2), "{codes:?}");
    util::read_json(&env.path("r/evidence.json"));
}

#[test]
fn an_out_folder_that_is_a_link_or_a_file_is_invalid_input() {
    let env = Env::new();
    std::fs::create_dir(env.path("elsewhere")).unwrap();
    symlink(env.path("elsewhere"), env.path("r")).unwrap();
    let o = run_sim(&env, &["--out", "r"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("symbolic link"), "{}", stderr(&o));
    assert_eq!(std::fs::read_dir(env.path("elsewhere")).unwrap().count(), 0);
    env.write("f", "");
    let o = run_sim(&env, &["--out", "f"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
}

#[test]
fn a_full_disk_leaves_no_temp_file() {
    use std::os::unix::process::CommandExt;
    let env = Env::new();
    std::fs::create_dir(env.path("r")).unwrap();
    let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_nodecert"));
    c.args(["run", "--simulate", "h200-vm-1", "-q", "--out", "r"])
        .current_dir(env.dir.path())
        .env_clear()
        .env("NO_COLOR", "1");
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        c.pre_exec(|| {
            // Files may not grow past 4 KiB: the first evidence write fails as on a full disk.
            let lim = libc::rlimit {
                rlim_cur: 4096,
                rlim_max: 4096,
            };
            libc::setrlimit(libc::RLIMIT_FSIZE, &lim);
            libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
            Ok(())
        });
    }
    let o = c.output().unwrap();
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert!(stderr(&o).contains("cannot write"), "{}", stderr(&o));
    assert_eq!(dot_files(&env.path("r")), Vec::<String>::new());
}

// ---------------------------------------------------------------------------------------------
// reading

#[test]
fn a_fifo_as_suite_node_evidence_or_template_is_refused_without_hanging() {
    let env = Env::new();
    mkfifo(&env.path("fifo.toml"));
    mkfifo(&env.path("evidence.json"));
    std::fs::create_dir(env.path("t")).unwrap();
    mkfifo(&env.path("t/report.md.j2"));
    let cases: [&[&str]; 5] = [
        &["check", "fifo.toml"],
        &["run", "fifo.toml", "--simulate", "h200-vm-1"],
        &["run", "--simulate", "fifo.toml"],
        &["render", "evidence.json", "--out", "x"],
        &[
            "run",
            "--simulate",
            "h200-vm-1",
            "--templates",
            "t",
            "--out",
            "y",
        ],
    ];
    for args in cases {
        let o = env.cmd().args(args).timeout(QUICK).output().unwrap();
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(
            stderr(&o).contains("named pipe (FIFO)"),
            "{args:?}: {}",
            stderr(&o)
        );
    }
    // /dev/zero as a node file: refused at once, not read until memory runs out.
    let o = env
        .cmd()
        .args(["run", "--simulate", "/dev/zero"])
        .timeout(QUICK)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
}

#[test]
fn a_suite_over_its_size_limit_is_refused() {
    let env = Env::new();
    let mut text = String::from("format_version = 1\nname = \"big\"\n");
    text.push_str(&"# padding\n".repeat(120_000));
    env.write("big.toml", &text);
    let o = env.cmd().args(["check", "big.toml"]).output().unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("1 MiB limit"), "{}", stderr(&o));
}

fn signed(env: &Env) {
    env.cmd().args(["keygen", "--out", "k"]).assert().code(0);
    assert_eq!(
        run_sim(env, &["--out", "cert", "--sign-key", "k"])
            .status
            .code(),
        Some(0)
    );
}

fn verify(env: &Env) -> std::process::Output {
    env.cmd()
        .args(["verify", "cert", "--pubkey", "k.pub"])
        .timeout(QUICK)
        .output()
        .unwrap()
}

#[test]
fn verify_follows_no_link_out_of_the_signed_folder() {
    let env = Env::new();
    signed(&env);
    assert_eq!(verify(&env).status.code(), Some(0));
    // The same bytes outside, and the listed file replaced by a link to them.
    std::fs::rename(env.path("cert/report.md"), env.path("outside.md")).unwrap();
    symlink(env.path("outside.md"), env.path("cert/report.md")).unwrap();
    let o = verify(&env);
    assert_eq!(
        o.status.code(),
        Some(4),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    assert!(
        stderr(&o).contains("report.md: unreadable"),
        "{}",
        stderr(&o)
    );
    assert!(stderr(&o).contains("symbolic link"), "{}", stderr(&o));
}

#[test]
fn verify_refuses_a_fifo_listed_file_or_manifest_without_hanging() {
    let env = Env::new();
    signed(&env);
    std::fs::remove_file(env.path("cert/report.html")).unwrap();
    mkfifo(&env.path("cert/report.html"));
    let o = verify(&env);
    assert_eq!(o.status.code(), Some(4), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("report.html: unreadable"),
        "{}",
        stderr(&o)
    );
    std::fs::remove_file(env.path("cert/nodecert-manifest.txt")).unwrap();
    mkfifo(&env.path("cert/nodecert-manifest.txt"));
    let o = verify(&env);
    assert_eq!(o.status.code(), Some(4), "{}", stderr(&o));
    assert!(stderr(&o).contains("FIFO"), "{}", stderr(&o));
}

#[test]
fn a_deep_extends_chain_is_a_located_error_not_a_stack_overflow() {
    let env = Env::new();
    let n = 2000;
    for i in 0..n {
        env.write(
            &format!("s{i}.toml"),
            &format!(
                "format_version = 1\nname = \"s{i}\"\nextends = \"s{}.toml\"\n",
                i + 1
            ),
        );
    }
    env.write(
        &format!("s{n}.toml"),
        "format_version = 1\nname = \"end\"\n",
    );
    let o = env
        .cmd()
        .args(["check", "s0.toml"])
        .timeout(QUICK)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(e.contains("at most 16 files"), "{e}");
    assert!(e.contains(".toml:3:"), "located: {e}");
}

#[test]
fn a_cycle_through_unnormalised_paths_is_detected() {
    let env = Env::new();
    std::fs::create_dir(env.path("sub")).unwrap();
    env.write(
        "a.toml",
        "format_version = 1\nname = \"a\"\nextends = \"./b.toml\"\n",
    );
    env.write(
        "b.toml",
        "format_version = 1\nname = \"b\"\nextends = \"sub/../a.toml\"\n",
    );
    let o = env
        .cmd()
        .args(["check", "a.toml"])
        .timeout(QUICK)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(e.contains("forms a cycle"), "{e}");
    // Located at the `extends` of the file that closes the cycle.
    assert!(e.contains("b.toml:3:1: `extends` forms a cycle"), "{e}");
    assert!(e.len() < 2000, "short: {e}");
}

// ---------------------------------------------------------------------------------------------
// strings from the suite or the node

#[test]
fn control_characters_in_a_suite_name_are_shown_not_obeyed() {
    let env = Env::new();
    env.write(
        "evil.toml",
        "format_version = 1\nname = \"evil\\n## Injected heading\\r\\u001b[2KPASS: node passed\"\nextends = \"h200-vm-1\"\n",
    );
    for quiet in [true, false] {
        let mut c = env.cmd();
        c.args(["run", "evil.toml", "--simulate", "h200-vm-1", "--out", "r"])
            .args(["--inject", "ecc-uncorrectable"]);
        if quiet {
            c.arg("-q");
        }
        let o = c.timeout(QUICK).output().unwrap();
        assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
        let all = format!("{}{}", String::from_utf8_lossy(&o.stdout), stderr(&o));
        assert!(!all.contains('\u{1b}') && !all.contains('\r'), "{all:?}");
        assert!(!all.lines().any(|l| l.starts_with("PASS")), "{all}");
        assert!(
            all.contains("evil\\n## Injected heading\\r\\u{1b}[2KPASS"),
            "{all}"
        );
    }
    let md = env.read("r/report.md");
    assert!(!md.lines().any(|l| l.starts_with("## Injected")), "{md}");
    assert!(!md.contains('\u{1b}'), "{md}");
}

/// A node whose owner put control characters and Markdown into every string it reports.
fn hostile_node(env: &Env) -> String {
    let node = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("suites/nodes/h200-vm-1.toml"),
    )
    .unwrap();
    let evil = |what: &str| format!("\"{what}\\n# Injected {what}\\r\\u001b[2KPASS: node passed\"");
    let node = node
        .replace(
            "hostname = \"sim-h200-vm\"",
            &format!("hostname = {}", evil("host")),
        )
        .replace(
            "driver_version = \"580.159.04\"",
            &format!("driver_version = {}", evil("1.2")),
        )
        .replace(
            "name = \"NVIDIA H200\"",
            &format!("name = {}", evil("NVIDIA H200")),
        )
        .replace(
            "vbios = \"96.00.AF.00.01\"",
            &format!("vbios = {}", evil("96")),
        );
    assert_eq!(
        node.matches("Injected").count(),
        4,
        "the node file changed shape"
    );
    env.write("evil-node.toml", &node);
    "evil-node.toml".into()
}

/// Neither a raw control character nor a line that a node string started.
fn assert_shown_not_obeyed(what: &str, text: &str) {
    assert!(
        !text.contains('\u{1b}') && !text.contains('\r'),
        "{what}: {text:?}"
    );
    assert!(
        !text
            .lines()
            .any(|l| l.starts_with("# Injected") || l.starts_with("PASS")),
        "{what}: {text}"
    );
}

#[test]
fn node_strings_are_shown_not_obeyed_by_check_inventory_diff_and_the_markdown() {
    let env = Env::new();
    let node = hostile_node(&env);
    let out = |args: &[&str]| {
        let o = env.cmd().args(args).timeout(QUICK).output().unwrap();
        let all = format!("{}{}", String::from_utf8_lossy(&o.stdout), stderr(&o));
        (o.status.code(), all)
    };
    let (code, text) = out(&["check", "h200-vm-1", "--simulate", &node]);
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("host\\n# Injected host"), "{text}");
    assert_shown_not_obeyed("check", &text);
    let (code, text) = out(&["inventory", "--simulate", &node]);
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("VBIOS 96\\n# Injected 96"), "{text}");
    assert_shown_not_obeyed("inventory", &text);
    // The driver string does not read as a version: unknown, not old (partial, exit 7), and
    // the health check's finding quotes it.
    let (code, text) = out(&["run", "--simulate", &node, "-q", "--out", "new"]);
    assert_eq!(code, Some(7), "{text}");
    assert_shown_not_obeyed("run", &text);
    let (code, text) = out(&[
        "run",
        "h200-vm-1",
        "--simulate",
        "h200-vm-1",
        "-q",
        "--out",
        "old",
    ]);
    assert_eq!(code, Some(0), "{text}");
    let (code, text) = out(&["diff", "old", "new", "--out", "d"]);
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("1.2\\n# Injected 1.2"), "{text}");
    assert_shown_not_obeyed("diff", &text);
    for f in ["new/report.md", "d/diff.md"] {
        let md = env.read(f);
        assert!(
            md.contains("\\# Injected") || md.contains("\\n# Injected"),
            "{f}: {md}"
        );
        assert_shown_not_obeyed(f, &md);
        // Every table row stays one line: a row ends with '|'.
        for l in md.lines().filter(|l| l.starts_with('|')) {
            assert!(
                l.trim_end().ends_with('|'),
                "{f}: a table row was broken: {l}"
            );
        }
    }
}

#[test]
fn an_unreadable_extends_target_is_located_at_its_key() {
    let env = Env::new();
    mkfifo(&env.path("parent.toml"));
    env.write(
        "a.toml",
        "format_version = 1\nname = \"a\"\nextends = \"parent.toml\"\n",
    );
    let o = env
        .cmd()
        .args(["check", "a.toml"])
        .timeout(QUICK)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(e.contains("a.toml:3:"), "{e}");
    assert!(e.contains("FIFO"), "{e}");
}

/// An error naming what the operator typed (a suite path, an --out folder, a key) never prints a
/// line of its own from a newline in it: the newline is shown as `\n`.
#[test]
fn a_newline_in_a_typed_path_does_not_start_a_line_of_an_error() {
    let env = Env::new();
    let evil = "x\nPASS: node passed\r\u{1b}[2K";
    let runs: [&[&str]; 3] = [
        &["run", evil, "--simulate", "h200-vm-1"],
        &["render", evil],
        &["verify", evil, "--pubkey", evil],
    ];
    for args in runs {
        let o = env.cmd().args(args).timeout(QUICK).output().unwrap();
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        let err = stderr(&o);
        assert!(err.starts_with("error: "), "{err}");
        assert!(err.contains("x\\nPASS: node passed\\r\\u{1b}[2K"), "{err}");
        assert_shown_not_obeyed(args[0], &err);
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
    }
}

/// A message nodecert writes in several lines keeps them: a run whose template fails says what
/// failed, then the commands that finish the job, each on its own line.
#[test]
fn a_failed_template_still_prints_its_commands_on_lines_of_their_own() {
    let env = Env::new();
    // Renders against the sample evidence checked before the run; fails on a failed check.
    env.write(
        "t/report.md.j2",
        "{% for c in ev.checks %}{% if c.status == 'fail' %}{{ c.no_such_field }}{% endif %}\
         {% endfor %}done {{ v.verdict }}\n",
    );
    let o = env
        .cmd()
        .args([
            "run",
            "--simulate",
            "h200-vm-1",
            "--out",
            "r\nPASS",
            "--templates",
            "t",
        ])
        .args(["--inject", "ecc-uncorrectable:gpu=0"])
        .timeout(QUICK)
        .output()
        .unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.lines()
            .any(|l| l == "  nodecert render r\\nPASS/evidence.json --templates t"),
        "{err}"
    );
    assert_shown_not_obeyed("run", &err);
}

/// A folder whose name is not UTF-8 (`fleet report /shared/*` where a node's tool named one so)
/// is a path like any other: written into, or refused in words, never a panic (exit 101).
#[test]
fn a_name_that_is_not_utf8_is_a_path_never_a_panic() {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    let env = Env::new();
    let odd = env.path("").join(OsStr::from_bytes(b"node-\xff"));
    let o = env
        .cmd()
        .args(["run", "--simulate", "h200-vm-1", "-q", "--out"])
        .arg(&odd)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(odd.join("evidence.json").is_file());
    let ev = util::read_json(&odd.join("evidence.json"));
    let recorded = ev["environment"]["command_line"].to_string();
    assert!(recorded.contains("node-\u{fffd}"), "{recorded}");
    for args in [
        vec![OsStr::new("verify"), OsStr::from_bytes(b"gone-\xff")],
        vec![
            OsStr::new("render"),
            OsStr::from_bytes(b"gone-\xff/evidence.json"),
        ],
        vec![
            OsStr::new("run"),
            OsStr::from_bytes(b"suite-\xff.toml"),
            OsStr::new("--simulate"),
            OsStr::new("h200-vm-1"),
        ],
    ] {
        let o = env.cmd().args(&args).output().unwrap();
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(!stderr(&o).contains("panicked"), "{args:?}: {}", stderr(&o));
    }
}

/// A folder chosen by mistake: files of the report's names that nodecert did not write (notes
/// in report.md, another tool's evidence.json) are not replaced, before the run, exit 2; with
/// --force they are. A link there is refused before the run too, whatever the flags.
#[test]
fn a_report_folder_holding_files_nodecert_did_not_write_is_refused_before_the_run() {
    let env = Env::new();
    for (name, text) in [
        ("report.md", "# my precious notes\n"),
        ("report.html", "<html>mine</html>"),
        ("evidence.json", "{\"mine\": 1}"),
    ] {
        let dir = format!("other-{}", name.replace('.', "-"));
        env.write(&format!("{dir}/{name}"), text);
        let o = run_sim(&env, &["--out", &dir]);
        assert_eq!(o.status.code(), Some(2), "{name}: {}", stderr(&o));
        assert!(
            stderr(&o).contains("exists and is not a file nodecert wrote"),
            "{name}: {}",
            stderr(&o)
        );
        assert_eq!(env.read(&format!("{dir}/{name}")), text, "{name} untouched");
        if name != "evidence.json" {
            assert!(
                !env.path(&format!("{dir}/evidence.json")).exists(),
                "nothing ran"
            );
        }
        let o = run_sim(&env, &["--out", &dir, "--force"]);
        assert_eq!(o.status.code(), Some(0), "{name}: {}", stderr(&o));
        assert_ne!(env.read(&format!("{dir}/{name}")), text);
    }
    // A run into its own folder again replaces its own files, as always.
    let o = run_sim(&env, &["--out", "other-report-md"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    // A link at a page: refused before the run, even with --force; the file it names untouched.
    let victim = env.write("victim.txt", "precious");
    std::fs::create_dir(env.path("linked")).unwrap();
    symlink(&victim, env.path("linked/report.html")).unwrap();
    for extra in [&[][..], &["--force"][..]] {
        let mut args = vec!["--out", "linked"];
        args.extend(extra);
        let o = run_sim(&env, &args);
        assert_eq!(o.status.code(), Some(2), "{extra:?}: {}", stderr(&o));
        assert!(stderr(&o).contains("symbolic link"), "{}", stderr(&o));
        assert!(
            !env.path("linked/evidence.json").exists(),
            "refused before the run"
        );
    }
    assert_eq!(env.read("victim.txt"), "precious");
    // render and diff: pages of someone's are not replaced either.
    let o = run_sim(&env, &["--out", "r"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    env.write("pages/report.md", "notes");
    let o = env
        .cmd()
        .args(["render", "r/evidence.json", "--out", "pages"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert_eq!(env.read("pages/report.md"), "notes");
    let o = env
        .cmd()
        .args(["render", "r/evidence.json", "--out", "pages", "--force"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    // Pages rendered from the user's --templates carry no mark: rendered there again, they are
    // replaced as the user's own.
    std::fs::create_dir(env.path("tpl")).unwrap();
    for t in ["report.html.j2", "report.md.j2"] {
        let text = std::fs::read_to_string(format!("{}/templates/{t}", env!("CARGO_MANIFEST_DIR")))
            .unwrap()
            .replace("nodecert-format-version", "my-format-version")
            .replace("# nodecert certificate: ", "# my certificate: ");
        env.write(&format!("tpl/{t}"), &text);
    }
    for _ in 0..2 {
        let o = env
            .cmd()
            .args([
                "render",
                "r/evidence.json",
                "--out",
                "site",
                "--templates",
                "tpl",
            ])
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    }
    assert!(env.read("site/report.md").contains("# my certificate: "));
    // A folder whose evidence.json is a link to the evidence being rendered: render reads it
    // (the path given), and its pages are written beside it.
    std::fs::create_dir(env.path("l")).unwrap();
    symlink(env.path("r/evidence.json"), env.path("l/evidence.json")).unwrap();
    let o = env
        .cmd()
        .args(["render", "l/evidence.json"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(env.path("l/report.md").is_file());
    // Pages nodecert rendered with its own templates are replaced by the next render.
    let o = env
        .cmd()
        .args(["render", "r/evidence.json", "--out", "pages"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    env.write("d/diff.md", "notes");
    let o = env
        .cmd()
        .args(["diff", "r", "r", "--out", "d"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert_eq!(env.read("d/diff.md"), "notes");
    std::fs::remove_file(env.path("d/diff.md")).unwrap();
    let o = env
        .cmd()
        .args(["diff", "r", "r", "--out", "d"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let o = env
        .cmd()
        .args(["diff", "r", "r", "--out", "d"])
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "a diff replaces its own pages: {}",
        stderr(&o)
    );
}

/// A file someone puts at a page's name while the run goes on (the run removed the earlier
/// pages before its first check, so it is not nodecert's) is left as it is: the run keeps its
/// evidence, writes no page, says why, and exits 2; with `--force` the page is written.
#[test]
fn a_page_that_appears_while_the_run_goes_on_is_not_replaced() {
    use std::io::Write;
    let env = Env::new();
    for attempt in 0..3 {
        let out = env.path(&format!("r{attempt}"));
        let child = std::process::Command::new(env!("CARGO_BIN_EXE_nodecert"))
            .args(["run", "--simulate", "h100-sxm-8", "-q", "--out"])
            .arg(&out)
            .current_dir(env.dir.path())
            .env_clear()
            .env("NO_COLOR", "1")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // The evidence is written after the first check; the training run takes seconds more.
        let start = std::time::Instant::now();
        while !out.join("evidence.json").exists() && start.elapsed() < QUICK {
            std::thread::sleep(Duration::from_millis(2));
        }
        let put = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(out.join("report.md"));
        let mut f = match put {
            Ok(f) => f,
            // The run wrote its pages first: it finished before the file could be put there.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                child.wait_with_output().unwrap();
                continue;
            }
            Err(e) => panic!("{e}"),
        };
        f.write_all(b"my notes\n").unwrap();
        drop(f);
        let o = child.wait_with_output().unwrap();
        assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
        assert_eq!(
            std::fs::read_to_string(out.join("report.md")).unwrap(),
            "my notes\n"
        );
        assert!(!out.join("report.html").exists());
        assert!(
            stderr(&o).contains(
                "report.md is not a file nodecert wrote, and appeared while the run went on"
            ),
            "{}",
            stderr(&o)
        );
        assert!(stderr(&o).contains("nodecert render"), "{}", stderr(&o));
        let ev = util::read_json(&out.join("evidence.json"));
        assert_eq!(ev["verdict"], "pass");
        // The same run with --force over the same folder replaces it.
        let o = run_sim(&env, &["--out", out.to_str().unwrap(), "--force"]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        assert!(std::fs::read_to_string(out.join("report.md"))
            .unwrap()
            .contains("# nodecert certificate: "));
        return;
    }
    panic!("three runs wrote their pages before a file could be put at report.md");
}

/// No page outlives the evidence it was rendered from: a run into a folder that held a PASS,
/// whose export is refused after its checks, leaves its own FAIL evidence and its own pages
/// (README: "the evidence and reports of the run are kept"), never the earlier run's PASS.
#[test]
fn a_refused_export_after_the_run_leaves_this_runs_pages_not_the_last_ones() {
    let env = Env::new();
    let o = run_sim(&env, &["--out", "r"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(env.read("r/report.md").contains("PASS"));
    // Both exports at one file: the second is refused after the run, when the first wrote it.
    let o = run_sim(
        &env,
        &[
            "--out",
            "r",
            "--inject",
            "ecc-uncorrectable:gpu=0",
            "--junit",
            "same.out",
            "--prometheus",
            "same.out",
        ],
    );
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let ev = util::read_json(&env.path("r/evidence.json"));
    assert_eq!(ev["verdict"], "fail");
    let md = env.read("r/report.md");
    assert!(md.contains("— **FAIL"), "{md}");
    assert!(!md.contains("— **PASS"), "{md}");
    assert!(env.read("r/report.html").contains("— FAIL"));
}
