//! Signed certificates and re-validation, as users run them: keygen, signed runs, verify (also
//! with stock OpenSSH), countersignatures, diff between runs, and baselines in suites.

mod util;
use predicates::prelude::*;
use std::process::Command;
use util::{out_text, Env};

const SSH_KEYGEN: &str = "/usr/bin/ssh-keygen";

#[test]
fn signed_run_round_trip_tamper_wrong_key_missing_file_countersign() {
    let env = Env::new();
    env.cmd()
        .args(["keygen", "--out", "ops.key", "--comment", "ops@example.com"])
        .assert()
        .code(0)
        .stdout(predicate::str::contains("fingerprint: SHA256:"))
        .stdout(predicate::str::contains(
            "ops@example.com namespaces=\"nodecert\" ssh-ed25519 ",
        ));
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(env.path("ops.key"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    let fingerprint = key_fingerprint(&env, "ops.key.pub");

    let a = env
        .cmd()
        .args([
            "run",
            "--simulate",
            "h100-sxm-8",
            "--sign-key",
            "ops.key",
            "--out",
            "cert",
        ])
        .assert()
        .code(0);
    let text = out_text(&a);
    assert!(text.contains("signed cert as ops@example.com"), "{text}");
    assert!(text.contains("SIMULATED RESULTS"), "{text}");
    let line = text
        .lines()
        .map(str::trim)
        .find(|l| l.starts_with("ops@example.com namespaces="))
        .expect("allowed_signers line printed")
        .to_string();

    // The reports name the key, the evidence digest and the command that verifies them.
    let digest = sha256(&env.path("cert/evidence.json"));
    let command = "ssh-keygen -Y verify -f allowed_signers -I ops@example.com -n nodecert -s cert/nodecert-manifest.txt.sig < cert/nodecert-manifest.txt";
    let md = env.read("cert/report.md");
    let html = env.read("cert/report.html");
    for (page, esc) in [(&md, false), (&html, true)] {
        let shown = |t: &str| if esc { html_escape(t) } else { t.to_string() };
        assert!(page.contains(&shown(&fingerprint)), "fingerprint missing");
        assert!(page.contains(&digest), "evidence digest missing");
        assert!(page.contains(&shown(command)), "verify command missing");
        assert!(page.contains("SIMULATED RESULTS"));
    }

    // nodecert verify with the public key.
    env.cmd()
        .args(["verify", "cert", "--pubkey", "ops.key.pub"])
        .assert()
        .code(0)
        .stdout(predicate::str::contains("VERIFIED"))
        .stdout(predicate::str::contains(
            "SIMULATED RESULTS: not a certification of real hardware",
        ));
    // Without saying whom to trust, never a pass.
    env.cmd()
        .args(["verify", "cert"])
        .assert()
        .code(4)
        .stderr(predicate::str::contains("no trusted signer"));

    // Stock OpenSSH verifies the same manifest with the printed allowed_signers line.
    env.write("allowed_signers", &format!("{line}\n"));
    let ok = Command::new(SSH_KEYGEN)
        .current_dir(env.dir.path())
        .args([
            "-Y",
            "verify",
            "-f",
            "allowed_signers",
            "-I",
            "ops@example.com",
        ])
        .args(["-n", "nodecert", "-s", "cert/nodecert-manifest.txt.sig"])
        .stdin(std::fs::File::open(env.path("cert/nodecert-manifest.txt")).unwrap())
        .output()
        .expect("run ssh-keygen");
    assert!(
        ok.status.success(),
        "ssh-keygen -Y verify: {}",
        String::from_utf8_lossy(&ok.stderr)
    );
    env.cmd()
        .args(["verify", "cert", "--allowed-signers", "allowed_signers"])
        .assert()
        .code(0);

    // A second party countersigns; both signatures are reported.
    env.cmd()
        .args([
            "keygen",
            "--out",
            "auditor.key",
            "--comment",
            "auditor@example.com",
        ])
        .assert()
        .code(0);
    env.cmd()
        .args(["sign", "cert", "--key", "auditor.key"])
        .assert()
        .code(0)
        .stdout(predicate::str::contains(
            "countersigned cert as auditor@example.com",
        ))
        .stdout(predicate::str::contains("nodecert-manifest.txt.2.sig"));
    let auditor = key_fingerprint(&env, "auditor.key.pub");
    let a = env
        .cmd()
        .args(["verify", "cert", "--pubkey", "auditor.key.pub"])
        .assert()
        .code(0);
    let text = out_text(&a);
    assert!(
        text.contains("signature nodecert-manifest.txt.sig: valid"),
        "{text}"
    );
    assert!(
        text.contains("signature nodecert-manifest.txt.2.sig: valid, trusted"),
        "{text}"
    );
    assert!(
        text.contains(&fingerprint) && text.contains(&auditor),
        "{text}"
    );
    // The same key cannot sign twice.
    env.cmd()
        .args(["sign", "cert", "--key", "auditor.key"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("already signed by this key"));
    // A copy of a signature under a countersignature's name is one party claimed twice.
    std::fs::copy(
        env.path("cert/nodecert-manifest.txt.2.sig"),
        env.path("cert/nodecert-manifest.txt.3.sig"),
    )
    .unwrap();
    env.cmd()
        .args(["verify", "cert", "--pubkey", "auditor.key.pub"])
        .assert()
        .code(4)
        .stdout(predicate::str::contains(
            "signature nodecert-manifest.txt.3.sig: duplicate",
        ))
        .stderr(predicate::str::contains("not a countersignature"));
    std::fs::remove_file(env.path("cert/nodecert-manifest.txt.3.sig")).unwrap();
    // A countersignature numbered past billions of missing ones is counted, not listed (and not
    // walked: this returns at once).
    std::fs::write(env.path("cert/nodecert-manifest.txt.4294967295.sig"), "").unwrap();
    env.cmd()
        .args(["verify", "cert", "--pubkey", "auditor.key.pub"])
        .timeout(std::time::Duration::from_secs(60))
        .assert()
        .code(4)
        .stderr(predicate::str::contains(
            "nodecert-manifest.txt.3.sig, nodecert-manifest.txt.4.sig, nodecert-manifest.txt.5.sig and 4294967289 more: missing",
        ));
    std::fs::remove_file(env.path("cert/nodecert-manifest.txt.4294967295.sig")).unwrap();
    std::fs::write(env.path("cert/nodecert-manifest.txt.5.sig"), "").unwrap();
    env.cmd()
        .args(["verify", "cert", "--pubkey", "auditor.key.pub"])
        .assert()
        .code(4)
        .stderr(predicate::str::contains(
            "nodecert-manifest.txt.3.sig: missing, but a later countersignature exists",
        ))
        .stderr(predicate::str::contains(
            "nodecert-manifest.txt.4.sig: missing, but a later countersignature exists",
        ));
    std::fs::remove_file(env.path("cert/nodecert-manifest.txt.5.sig")).unwrap();
    // A private key others can read signs nothing, and a run is refused before it starts.
    env.cmd()
        .args(["keygen", "--out", "loose.key"])
        .assert()
        .code(0);
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(
            env.path("loose.key"),
            std::fs::Permissions::from_mode(0o644),
        )
        .unwrap();
    }
    env.cmd()
        .args(["sign", "cert", "--key", "loose.key"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("permissions 0644 are too open"));
    env.cmd()
        .args([
            "run",
            "--simulate",
            "h100-sxm-8",
            "--sign-key",
            "loose.key",
            "--out",
            "loose",
        ])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("chmod 600"));
    assert!(!env.path("loose/evidence.json").exists());

    // A wrong key does not verify.
    env.cmd()
        .args(["keygen", "--out", "other.key"])
        .assert()
        .code(0);
    env.cmd()
        .args(["verify", "cert", "--pubkey", "other.key.pub"])
        .assert()
        .code(4)
        .stderr(predicate::str::contains("no signature is by a trusted key"));

    // One changed byte of report.html fails, naming the file.
    std::fs::copy(env.path("cert/report.html"), env.path("report.html.orig")).unwrap();
    let mut bytes = std::fs::read(env.path("cert/report.html")).unwrap();
    let i = bytes.len() / 2;
    bytes[i] ^= 0x01;
    std::fs::write(env.path("cert/report.html"), &bytes).unwrap();
    env.cmd()
        .args(["verify", "cert", "--pubkey", "ops.key.pub"])
        .assert()
        .code(4)
        .stdout(predicate::str::contains(
            "file report.html: sha-256 mismatch",
        ))
        .stderr(predicate::str::contains("report.html"));
    // In JSON: not verified, exit 4, the file's digest as it is, and nothing said as sealed.
    let o = env
        .cmd()
        .args([
            "verify",
            "cert",
            "--pubkey",
            "ops.key.pub",
            "--json",
            "--require-pass",
        ])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(4));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        (&v["verified"], &v["exit_code"]),
        (&false.into(), &4.into())
    );
    let html = v["files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == "report.html")
        .unwrap();
    assert_eq!(html["status"], "mismatch");
    assert_eq!(html["actual"].as_str().unwrap().len(), 64);
    assert_eq!(v["sealed"], serde_json::Value::Null);
    assert_eq!(v["require"]["judged"], serde_json::Value::Null);
    assert!(
        v["problems"][0].as_str().unwrap().contains("report.html"),
        "{v}"
    );
    std::fs::copy(env.path("report.html.orig"), env.path("cert/report.html")).unwrap();
    env.cmd()
        .args(["verify", "cert", "--pubkey", "ops.key.pub"])
        .assert()
        .code(0);

    // A missing file fails, naming it.
    std::fs::remove_file(env.path("cert/report.md")).unwrap();
    env.cmd()
        .args(["verify", "cert", "--pubkey", "ops.key.pub"])
        .assert()
        .code(4)
        .stdout(predicate::str::contains("file report.md: missing"));

    // A later run does not overwrite a signed report.
    env.cmd()
        .args(["run", "--simulate", "h100-sxm-8", "--out", "cert"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("holds a signed report"));
}

#[test]
fn signing_flags_are_checked_before_running() {
    let env = Env::new();
    env.cmd()
        .args(["keygen", "--out", "k"])
        .assert()
        .code(0)
        .stdout(predicate::str::contains("nodecert-signer namespaces="));
    // The public key is not a signing key; nothing runs.
    env.cmd()
        .args([
            "run",
            "--simulate",
            "h200-vm-1",
            "--sign-key",
            "k.pub",
            "--out",
            "r",
        ])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("not an openssh private key"));
    assert!(!env.path("r").exists());
    env.cmd()
        .args([
            "run",
            "--simulate",
            "h200-vm-1",
            "--sign-key",
            "k",
            "--signer-id",
            "a b",
        ])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("--signer-id"));
    env.cmd()
        .args(["keygen", "--out", "k"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("refusing to overwrite"));
    // A failing node is still signed (the certificate says FAIL), and verifies.
    let a = env
        .cmd()
        .args([
            "run",
            "--simulate",
            "h200-vm-1",
            "--inject",
            "ecc-uncorrectable",
            "-q",
        ])
        .args(["--sign-key", "k", "--signer-id", "lab-7", "--out", "failed"])
        .assert()
        .code(1);
    let text = out_text(&a);
    assert!(text.contains("signed failed as lab-7"), "{text}");
    // Quiet prints one line per thing done; each says the node was simulated.
    for l in text.lines() {
        assert!(l.to_lowercase().contains("simulated"), "{l}");
    }
    env.cmd()
        .args(["verify", "failed", "--pubkey", "k.pub"])
        .assert()
        .code(0);
    env.cmd()
        .args(["verify", "no-such-dir", "--pubkey", "k.pub"])
        .assert()
        .code(2);
}

/// A file dropped into a signed folder cannot draw lines of `nodecert verify`'s report with
/// its name: the terminal codes, line breaks and bidi overrides in it are shown, not obeyed.
#[test]
fn a_file_name_in_a_signed_folder_cannot_fake_a_line_of_verify() {
    let env = Env::new();
    env.cmd().args(["keygen", "--out", "k"]).assert().code(0);
    env.cmd()
        .args(["run", "--simulate", "h200-vm-1", "-q"])
        .args(["--sign-key", "k", "--out", "cert"])
        .assert()
        .code(0);
    let fake = "\x1b[2K\r\x1b[1;32mVERIFIED all good\x1b[0m\n";
    env.write(&format!("cert/{fake}"), "x");
    env.write("cert/notes\u{202e}gis.txt", "x");
    let a = env
        .cmd()
        .args(["verify", "cert", "--pubkey", "k.pub"])
        .assert()
        .code(0);
    let stdout = String::from_utf8_lossy(&a.get_output().stdout).to_string();
    for raw in ['\x1b', '\r', '\u{202e}'] {
        assert!(!stdout.contains(raw), "{raw:?} in {stdout}");
    }
    assert!(
        !stdout
            .lines()
            .any(|l| l.contains("VERIFIED all good") && !l.starts_with("note: ")),
        "{stdout}"
    );
    assert!(
        stdout.contains("\\u{1b}[2K\\r\\u{1b}[1;32mVERIFIED all good\\u{1b}[0m\\n")
            && stdout.contains("notes\\u{202e}gis.txt"),
        "{stdout}"
    );
    // A name that looks like a signature is a problem, and is shown the same way.
    env.write("cert/x\x1b[2K\nVERIFIED.sig", "x");
    let a = env
        .cmd()
        .args(["verify", "cert", "--pubkey", "k.pub"])
        .assert()
        .code(4);
    let o = a.get_output();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(!text.contains('\x1b'), "{text}");
    assert!(
        text.contains("problem: x\\u{1b}[2K\\nVERIFIED.sig: unexpected signature-like file"),
        "{text}"
    );
    assert!(!text.lines().any(|l| l.starts_with("VERIFIED")), "{text}");
}

fn key_fingerprint(env: &Env, public: &str) -> String {
    let o = Command::new(SSH_KEYGEN)
        .arg("-lf")
        .arg(env.path(public))
        .output()
        .expect("run ssh-keygen -l");
    let text = String::from_utf8_lossy(&o.stdout).to_string();
    text.split_whitespace()
        .nth(1)
        .expect("fingerprint")
        .to_string()
}

/// As minijinja's HTML autoescape writes text.
fn html_escape(t: &str) -> String {
    t.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&#x27;")
        .replace('/', "&#x2f;")
}

fn sha256(p: &std::path::Path) -> String {
    use sha2::{Digest, Sha256};
    hex::encode(Sha256::digest(std::fs::read(p).unwrap()))
}

fn run(env: &Env, node: &str, out: &str, extra: &[&str]) {
    let mut c = env.cmd();
    c.args(["run", "--simulate", node, "--out", out, "-q"])
        .args(extra);
    let _ = c.assert();
    assert!(env.path(&format!("{out}/evidence.json")).exists(), "{out}");
}

#[test]
fn diff_names_regressions_verdicts_and_hardware_changes() {
    let env = Env::new();
    run(&env, "h100-sxm-8", "healthy", &[]);
    run(
        &env,
        "h100-sxm-8",
        "slow",
        &["--inject", "slow-gpu-pair:gpu=1,peer=4"],
    );
    run(&env, "h200-sxm-8", "h200", &[]);

    let a = env
        .cmd()
        .args(["diff", "healthy", "slow/evidence.json", "--out", "d1"])
        .assert()
        .code(1);
    let text = out_text(&a);
    assert!(text.contains("SIMULATED RESULTS"), "{text}");
    assert!(
        text.contains("p2p_bandwidth p2p_read GPU 1 -> GPU 4: "),
        "pair regression not named:\n{text}"
    );
    assert!(
        text.contains("p2p_bandwidth: PASS -> FAIL (worse)"),
        "{text}"
    );
    assert!(
        text.contains("p2p_bandwidth GPU 1 -> GPU 4 [p2p_read]: PASS -> FAIL (worse)"),
        "{text}"
    );
    assert!(text.contains("result: REGRESSED"), "{text}");
    let md = env.read("d1/diff.md");
    let html = env.read("d1/diff.html");
    for page in [&md, &html] {
        assert!(page.contains("SIMULATED RESULTS"));
        assert!(page.contains("REGRESSED"));
        assert!(page.contains("GPU 1 -&gt; GPU 4") || page.contains("GPU 1 -> GPU 4"));
    }
    assert!(html.contains("GPU 1 -&gt; GPU 4"), "html must be escaped");
    assert!(!html.contains("src=\"http") && !html.contains("href=\"http"));

    // Better is not worse: the reverse direction improves metrics and verdicts.
    env.cmd()
        .args(["diff", "slow", "healthy", "--out", "d1r"])
        .assert()
        .code(0)
        .stdout(predicate::str::contains("metrics better by more than 5%"));

    env.cmd()
        .args(["diff", "healthy", "healthy", "--out", "d2"])
        .assert()
        .code(0)
        .stdout(predicate::str::contains("hardware changes: 0"))
        .stdout(predicate::str::contains("verdicts changed: 0"))
        .stdout(predicate::str::contains("result: NO REGRESSION"));

    let a = env
        .cmd()
        .args(["diff", "healthy", "h200", "--out", "d3"])
        .assert();
    let text = out_text(&a);
    assert!(
        text.contains("GPU 0: model NVIDIA H100 80GB HBM3 -> NVIDIA H200"),
        "{text}"
    );
    assert!(text.contains("GPU 0: uuid GPU-"), "{text}");
    assert!(text.contains("node: driver 550.90.07 -> "), "{text}");
    let md = env.read("d3/diff.md");
    assert!(md.contains("| GPU 7 | uuid |") && md.contains("| node | driver |"));
}

#[test]
fn diff_follows_gpus_renumbered_by_a_missing_gpu() {
    // GPU 0 gone: CUDA renumbers the rest (old GPU 1 is now GPU 0, ...). The diff compares
    // each GPU with itself and says so.
    let env = Env::new();
    run(&env, "h100-sxm-8", "healthy", &[]);
    run(
        &env,
        "h100-sxm-8",
        "gone",
        &["--inject", "gpu-missing:gpu=0"],
    );
    let a = env
        .cmd()
        .args(["diff", "healthy", "gone", "--out", "d"])
        .assert()
        .code(1);
    let text = out_text(&a);
    assert!(
        text.contains("GPUs renumbered (matched by identity")
            && text.contains("old GPU 1 is now GPU 0, old GPU 2 is now GPU 1")
            && text.contains("old GPU 7 is now GPU 6"),
        "{text}"
    );
    assert!(text.contains("GPU 0: gpu removed"), "{text}");
    assert!(text.contains("GPU 6: cuda index 7 -> 6"), "{text}");
    // No NVLink hardware change ("GPU 1 <-> GPU 2: nvlink NV18 -> NV17"); the health findings
    // of the GPU that went missing, NVLink error counters among them, do go absent.
    assert!(!text.contains(": nvlink "), "same links, same GPUs: {text}");
    let md = env.read("d/diff.md");
    let html = env.read("d/diff.html");
    for page in [&md, &html] {
        assert!(page.contains("GPUs renumbered."), "{page}");
        assert!(
            page.contains("old GPU 3 is now GPU 2 (same uuid)"),
            "{page}"
        );
    }
}

#[test]
fn diff_rejects_bad_input_with_exit_2() {
    let env = Env::new();
    run(&env, "h200-vm-1", "r", &[]);
    env.write("junk.json", "{\"hello\": 1}");
    for args in [
        vec!["diff", "r", "missing.json"],
        vec!["diff", "junk.json", "r"],
        vec!["diff", "r", "r", "--tolerance-pct", "-1"],
        vec!["diff", "r", "r", "--tolerance-pct", "100"],
    ] {
        env.cmd().args(&args).assert().code(2);
    }
}

const REVALIDATE: &str = "format_version = 1
name = \"h200-revalidate\"
extends = \"h200-sxm-8\"

[baseline]
evidence = \"../runs/healthy\"
max_regression_pct = 3
";

#[test]
fn baseline_fails_a_metric_worse_than_before_even_within_its_floor() {
    let env = Env::new();
    run(&env, "h200-sxm-8", "runs/healthy", &[]);
    env.write("suites/revalidate.toml", REVALIDATE);

    // 5% slower host bandwidth on GPU 2: within the floor, worse than the baseline.
    let a = env
        .cmd()
        .args(["run", "suites/revalidate.toml", "--simulate", "h200-sxm-8"])
        .args([
            "--seed",
            "2",
            "--inject",
            "slow-host-bandwidth:gpu=2,factor=0.95",
        ])
        .args(["--out", "slow"])
        .assert()
        .code(1);
    let text = out_text(&a);
    assert!(
        text.contains("host_bandwidth h2d GPU 2: ")
            && text.contains("worse than the baseline's")
            && text.contains("(at most 3% allowed)"),
        "{text}"
    );
    let ev = util::read_json(&env.path("slow/evidence.json"));
    let checks = ev["checks"].as_array().unwrap();
    let host = checks.iter().find(|c| c["id"] == "host_bandwidth").unwrap();
    assert_eq!(host["status"], "pass", "the floor alone passes GPU 2");
    let last = checks.last().unwrap();
    assert_eq!(
        (&last["id"], &last["status"]),
        (&"baseline".into(), &"fail".into())
    );
    let bad: Vec<&serde_json::Value> = last["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["status"] == "fail")
        .collect();
    assert!(
        !bad.is_empty()
            && bad
                .iter()
                .all(|f| f["subject"] == serde_json::json!({ "gpu": 2 })),
        "{bad:?}"
    );

    // The healthy node, another seed: within 3% of the baseline everywhere.
    env.cmd()
        .args(["run", "suites/revalidate.toml", "--simulate", "h200-sxm-8"])
        .args(["--seed", "7", "--out", "again", "-q"])
        .assert()
        .code(0);
    let ev = util::read_json(&env.path("again/evidence.json"));
    let last = ev["checks"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(
        (&last["id"], &last["status"]),
        (&"baseline".into(), &"pass".into())
    );

    // A baseline that is not there is invalid input, found before anything runs.
    env.write(
        "suites/lost.toml",
        &REVALIDATE.replace("../runs/healthy", "../runs/gone/evidence.json"),
    );
    env.cmd()
        .args([
            "run",
            "suites/lost.toml",
            "--simulate",
            "h200-sxm-8",
            "--out",
            "never",
        ])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("suites/lost.toml:6:1:"))
        .stderr(predicate::str::contains("cannot read"));
    assert!(!env.path("never").exists());

    // A baseline that holds no metrics (every figure removed) could judge nothing: refused at
    // load too, never a run whose promised comparison is skipped and passes.
    let p = env.path("runs/healthy/evidence.json");
    let mut v = util::read_json(&p);
    for c in v["checks"].as_array_mut().unwrap() {
        c["metrics"] = serde_json::json!([]);
    }
    std::fs::write(&p, serde_json::to_string_pretty(&v).unwrap()).unwrap();
    env.cmd()
        .args(["run", "suites/revalidate.toml", "--simulate", "h200-sxm-8"])
        .args(["--out", "never"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("suites/revalidate.toml:6:1:"))
        .stderr(predicate::str::contains("holds no metrics"));
    assert!(!env.path("never").exists());
}

#[test]
fn a_baseline_of_another_kind_or_node_is_a_warning_in_the_report() {
    let env = Env::new();
    run(&env, "h200-sxm-8", "runs/healthy", &[]);
    // The same figures, marked as measured on real hardware: a simulated run must not pass
    // against it silently, nor it against a simulated one.
    let mut ev = util::read_json(&env.path("runs/healthy/evidence.json"));
    // Every record that says "simulated" must change (one flipped field is refused as forged).
    ev["simulated"] = false.into();
    ev["backend"]["simulated"] = false.into();
    ev["backend"]["name"] = "nvml".into();
    ev["environment"]["command_line"] = serde_json::json!(["nodecert", "run", "h200-sxm-8"]);
    ev.as_object_mut().unwrap().remove("simulation");
    env.write("runs/real/evidence.json", &ev.to_string());
    env.write(
        "suites/real.toml",
        &REVALIDATE.replace("../runs/healthy", "../runs/real"),
    );
    let a = env
        .cmd()
        .args(["run", "suites/real.toml", "--simulate", "h200-sxm-8"])
        .args(["--out", "vs-real"])
        .assert()
        .code(0);
    let text = out_text(&a);
    assert!(
        text.contains("this run is simulated but the baseline ")
            && text.contains("is from real hardware (sim-"),
        "{text}"
    );
    let last = util::read_json(&env.path("vs-real/evidence.json"))["checks"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(
        (&last["id"], &last["status"]),
        (&"baseline".into(), &"warn".into())
    );
    for page in ["vs-real/report.md", "vs-real/report.html"] {
        let body = env.read(page);
        assert!(
            body.contains("this run is simulated but the baseline"),
            "{page} does not show the warning"
        );
    }

    // A baseline from another node (here: another simulated model) names both.
    run(&env, "h100-sxm-8", "runs/h100", &[]);
    env.write(
        "suites/twin.toml",
        &REVALIDATE.replace("../runs/healthy", "../runs/h100"),
    );
    let a = env
        .cmd()
        .args(["run", "suites/twin.toml", "--simulate", "h200-sxm-8"])
        .args(["--out", "vs-twin"])
        .assert();
    let text = out_text(&a);
    assert!(
        text.contains("was taken on another node: sim-hgx-h100 (8x NVIDIA H100 80GB HBM3), this run is on sim-"),
        "{text}"
    );
}

/// When signing fails after the pages were written naming the signature (here a folder sits
/// where the signature file goes), nothing is signed: the run says why (exit 4) and its pages
/// are rendered again without the signature, so no page names a signature that does not exist.
/// The same run signed shows the signature on both pages.
#[test]
fn a_signature_that_fails_leaves_pages_that_name_none() {
    let env = Env::new();
    env.cmd().args(["keygen", "--out", "k"]).assert().code(0);
    let run = |out: &str| {
        env.cmd()
            .args(["run", "--simulate", "h200-vm-1", "-q"])
            .args(["--sign-key", "k", "--out", out])
            .assert()
    };
    run("signed").code(0);
    let names_signature = |page: &str| page.contains("nodecert-manifest.txt.sig");
    for page in ["signed/report.md", "signed/report.html"] {
        assert!(names_signature(&env.read(page)), "{page}");
    }
    std::fs::create_dir_all(env.path("failed/nodecert-manifest.txt.sig")).unwrap();
    let a = run("failed").code(4);
    let stderr = String::from_utf8_lossy(&a.get_output().stderr).to_string();
    assert!(
        stderr.contains("nodecert-manifest.txt.sig exists"),
        "{stderr}"
    );
    for page in ["failed/report.md", "failed/report.html"] {
        let text = env.read(page);
        assert!(!names_signature(&text), "{page} names the signature");
        assert!(text.contains("PASS"), "{page} is a whole page");
    }
    assert!(env.path("failed/evidence.json").is_file());
    assert!(!env.path("failed/nodecert-manifest.txt").exists());
}

/// `sign DIR` seals what the evidence says, whatever else was left in the folder: pages edited
/// to say PASS of a failed run are rendered again from the evidence (naming the signer), and a
/// manifest nobody signed, listing only the evidence, is written again over every page, so that
/// a page changed afterwards fails verification.
#[test]
fn a_first_signature_seals_pages_rendered_from_the_evidence_and_a_manifest_of_its_own() {
    let env = Env::new();
    env.cmd().args(["keygen", "--out", "k"]).assert().code(0);
    let fingerprint = key_fingerprint(&env, "k.pub");
    env.cmd()
        .args(["run", "--simulate", "h200-vm-1", "-q", "--out", "f"])
        .args(["--inject", "ecc-uncorrectable:gpu=0"])
        .assert()
        .code(1);
    for page in ["f/report.md", "f/report.html"] {
        env.write(page, &env.read(page).replace("FAIL", "PASS"));
    }
    // A manifest that covers the evidence only, as a hand-run sha256sum writes it.
    let digest = sha256(&env.path("f/evidence.json"));
    env.write(
        "f/nodecert-manifest.txt",
        &format!("{digest}  evidence.json\n"),
    );
    let a = env.cmd().args(["sign", "f", "--key", "k"]).assert().code(0);
    let stderr = String::from_utf8_lossy(&a.get_output().stderr).to_string();
    assert!(
        stderr.contains("nodecert-manifest.txt has no signature; it is written again"),
        "{stderr}"
    );
    assert!(stderr.contains("embedded templates"), "{stderr}");
    for page in ["f/report.md", "f/report.html"] {
        let text = env.read(page);
        assert!(text.contains("FAIL"), "{page} says the evidence's verdict");
        assert!(
            text.contains(&fingerprint) || text.contains(&html_escape(&fingerprint)),
            "{page} names the signer"
        );
    }
    let manifest = env.read("f/nodecert-manifest.txt");
    for name in ["evidence.json", "report.html", "report.md"] {
        assert!(manifest.contains(&format!("  {name}\n")), "{manifest}");
    }
    // A certificate that verifies says what it certifies: this one, a failed simulated run.
    let a = env
        .cmd()
        .args(["verify", "f", "--pubkey", "k.pub"])
        .assert()
        .code(0);
    let out = out_text(&a);
    assert!(out.contains("\nverdict: FAIL (SIMULATED)\n"), "{out}");
    assert!(
        out.contains("\nnode: sim-h200-vm (1x NVIDIA H200); GPU serials: "),
        "{out}"
    );
    assert!(out.contains("\nfinished: 20"), "{out}");
    env.write("f/report.html", "PASS: certified hardware\n");
    env.cmd()
        .args(["verify", "f", "--pubkey", "k.pub"])
        .assert()
        .code(4)
        .stdout(predicate::str::contains("report.html: sha-256 mismatch"));
}

/// A first signature that fails after its pages were rendered again puts back what was there,
/// byte for byte: a page that is not UTF-8 and an unsigned manifest are not lost.
#[test]
fn a_failed_first_signature_puts_back_every_file_it_replaced() {
    let env = Env::new();
    env.cmd().args(["keygen", "--out", "k"]).assert().code(0);
    env.cmd()
        .args(["run", "--simulate", "h200-vm-1", "-q", "--out", "r"])
        .assert()
        .code(0);
    let latin1: &[u8] = b"<p>caf\xe9: our own page</p>\n";
    std::fs::write(env.path("r/report.html"), latin1).unwrap();
    env.write("r/nodecert-manifest.txt", "an unsigned manifest\n");
    // Makes the signature fail once the pages are written: a stray signature-like file.
    env.write("r/nodecert-manifest.txt.sig.bak", "x\n");
    env.cmd().args(["sign", "r", "--key", "k"]).assert().code(4);
    assert_eq!(std::fs::read(env.path("r/report.html")).unwrap(), latin1);
    assert_eq!(
        env.read("r/nodecert-manifest.txt"),
        "an unsigned manifest\n"
    );
    assert!(!env.path("r/nodecert-manifest.txt.sig").exists());
}

/// `verify --require-pass` is a gate: 0 only where the signatures verify and seal a pass; the
/// exit code of the sealed verdict where they seal another; 2 for simulated results unless
/// `--allow-simulated`; 4 where they do not verify. Without it, a good signature is enough.
#[test]
fn require_pass_exits_with_the_code_of_what_the_signatures_seal() {
    let env = Env::new();
    env.cmd().args(["keygen", "--out", "k"]).assert().success();
    for (out, inject, code) in [
        ("passed", None, 0),
        ("failed", Some("ecc-uncorrectable"), 1),
    ] {
        let mut c = env.cmd();
        c.args([
            "run",
            "--simulate",
            "h200-vm-1",
            "-q",
            "--sign-key",
            "k",
            "--out",
            out,
        ]);
        if let Some(f) = inject {
            c.args(["--inject", f]);
        }
        c.assert().code(code);
    }
    let verify = |dir: &str, extra: &[&str]| {
        let mut c = env.cmd();
        c.args(["verify", dir, "--pubkey", "k.pub"]).args(extra);
        c.assert()
    };
    verify("passed", &[]).code(0);
    verify("failed", &[]).code(0);
    let a = verify("passed", &["--require-pass"]).code(2);
    let err = String::from_utf8_lossy(&a.get_output().stderr).to_string();
    assert_eq!(
        err,
        "error: --require-pass: the results are simulated, not a certification of real \
         hardware (--allow-simulated lets a rehearsal through)\n"
    );
    verify("passed", &["--require-pass", "--allow-simulated"])
        .code(0)
        .stderr("");
    let a = verify("failed", &["--require-pass", "--allow-simulated"]).code(1);
    let err = String::from_utf8_lossy(&a.get_output().stderr).to_string();
    assert_eq!(
        err,
        "error: --require-pass: the signatures seal FAIL, not a pass\n"
    );
    // --allow-simulated alone is a mistake, not a looser verify; so are --host and --suite.
    verify("passed", &["--allow-simulated"]).code(2);
    verify("passed", &["--host", "sim-h200-vm"]).code(2);
    verify("passed", &["--suite", "h200-vm-1"]).code(2);
    // The certificate of another host, or of another suite, does not open the gate.
    let gate = ["--require-pass", "--allow-simulated"];
    verify(
        "passed",
        &[
            &gate[..],
            &["--host", "sim-h200-vm", "--suite", "h200-vm-1"],
        ]
        .concat(),
    )
    .code(0)
    .stderr("");
    // The same gate in JSON, for scripts: what is sealed (host, serials, suite, verdict) and
    // what the gate concluded, with the exit code; stderr still says why.
    let json = |dir: &str, extra: &[&str]| {
        let o = env
            .cmd()
            .args(["verify", dir, "--pubkey", "k.pub", "--json"])
            .args(extra)
            .output()
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&o.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&o.stdout)));
        assert_eq!(v["exit_code"].as_u64(), o.status.code().map(|c| c as u64));
        (v, String::from_utf8_lossy(&o.stderr).to_string())
    };
    let (v, err) = json("passed", &[&gate[..], &["--host", "gpu-node-17"]].concat());
    assert_eq!(v["format"], "nodecert-verify");
    assert_eq!(v["format_version"], 1);
    assert_eq!((&v["verified"], &v["exit_code"]), (&true.into(), &2.into()));
    let sealed = &v["sealed"];
    assert_eq!(sealed["kind"], "node");
    assert_eq!(sealed["verdict"], "PASS");
    assert_eq!(sealed["exit_code"], 0);
    assert_eq!(sealed["simulated"], true);
    assert_eq!(sealed["host"], "sim-h200-vm");
    assert_eq!(sealed["suite"], "h200-vm-1");
    assert_eq!(sealed["suite_origin"], "embedded:h200-vm-1");
    assert_eq!(sealed["gpu_serials"].as_array().unwrap().len(), 1);
    assert_eq!(v["require"]["host"], "gpu-node-17");
    assert_eq!(v["require"]["judged"]["exit_code"], 2);
    let said = v["require"]["judged"]["said"][0].as_str().unwrap();
    assert_eq!(
        said,
        "error: --require-pass: the certificate is of host sim-h200-vm, not gpu-node-17"
    );
    assert_eq!(err, format!("{said}\n"));
    assert_eq!(v["signatures"][0]["status"], "trusted");
    assert_eq!(v["files"][0]["status"], "ok");
    let (v, _) = json("failed", &gate);
    assert_eq!(
        (&v["exit_code"], &v["sealed"]["verdict"]),
        (&1.into(), &"FAIL".into())
    );
    // Without --require-pass: no gate, exit 0 for any verified folder.
    let (v, err) = json("failed", &[]);
    assert_eq!(
        (&v["exit_code"], &v["require"]),
        (&0.into(), &serde_json::Value::Null)
    );
    // A folder whose name holds an ESC and a bidi override: the document holds them as JSON
    // escapes, never as the characters a terminal would act on, and reads back as the name.
    let odd = "passed\u{1b}]0;x\u{7}\u{202e}";
    std::fs::rename(env.path("passed"), env.path(odd)).unwrap();
    let o = env
        .cmd()
        .args(["verify", odd, "--pubkey", "k.pub", "--json"])
        .output()
        .unwrap();
    std::fs::rename(env.path(odd), env.path("passed")).unwrap();
    let out = String::from_utf8(o.stdout).unwrap();
    assert!(!out.contains(['\u{1b}', '\u{7}', '\u{202e}']), "{out:?}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!((&v["dir"], &v["verified"]), (&odd.into(), &true.into()));
    assert_eq!(err, "");
    // A host name in other letters, or with the root's dot, is the same host.
    verify("passed", &[&gate[..], &["--host", "SIM-H200-VM."]].concat())
        .code(0)
        .stderr("");
    let a = verify("passed", &[&gate[..], &["--host", "gpu-node-17"]].concat()).code(2);
    assert_eq!(
        String::from_utf8_lossy(&a.get_output().stderr),
        "error: --require-pass: the certificate is of host sim-h200-vm, not gpu-node-17\n"
    );
    let a = verify("passed", &[&gate[..], &["--suite", "h200-sxm-8"]].concat()).code(2);
    assert_eq!(
        String::from_utf8_lossy(&a.get_output().stderr),
        "error: --require-pass: the certificate is of suite h200-vm-1, not h200-sxm-8\n"
    );
    // A suite file that takes an embedded suite's name is not that suite; its own digest names
    // it.
    env.write(
        "mine.toml",
        "format_version = 1\nname = \"h200-vm-1\"\nextends = \"base\"\n[node]\ngpu_count = 1\n",
    );
    env.cmd()
        .args([
            "run",
            "mine.toml",
            "--simulate",
            "h200-vm-1",
            "-q",
            "--sign-key",
            "k",
        ])
        .args(["--out", "mine"])
        .assert()
        .code(0);
    let a = verify("mine", &[&gate[..], &["--suite", "h200-vm-1"]].concat()).code(2);
    let err = String::from_utf8_lossy(&a.get_output().stderr).to_string();
    assert!(
        err.starts_with(
            "error: --require-pass: the certificate's suite is named h200-vm-1 but was read from \
             mine.toml, not the embedded suite of that name"
        ),
        "{err}"
    );
    let digest = sha256(&env.path("mine.toml"));
    verify("mine", &[&gate[..], &["--suite-sha256", &digest]].concat())
        .code(0)
        .stderr("");
    let a = verify(
        "passed",
        &[&gate[..], &["--suite-sha256", &digest]].concat(),
    )
    .code(2);
    assert!(String::from_utf8_lossy(&a.get_output().stderr)
        .starts_with("error: --require-pass: the certificate's suite has SHA-256 "),);
    // What it certifies names the suite, beside the node.
    let a = verify("passed", &[]).code(0);
    let out = String::from_utf8_lossy(&a.get_output().stdout).to_string();
    assert!(
        out.contains("\nnode: sim-h200-vm (1x NVIDIA H200); GPU serials: SIM1652000000\nsuite: h200-vm-1 (sha256 "),
        "{out}"
    );
    // A signature that does not verify is 4 whatever it seals.
    let ev = env
        .read("passed/evidence.json")
        .replace("\"h2d\"", "\"h2d \"");
    env.write("passed/evidence.json", &ev);
    verify("passed", &["--require-pass", "--allow-simulated"]).code(4);
}
