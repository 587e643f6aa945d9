//! Signing and verification of report directories, including round trips
//! with the real `ssh-keygen` (OpenSSH) binary.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use nodecert::sign::{
    allowed_signers_line, digest_check_command, key_fingerprint, keygen, sign_dir, verify_command,
    verify_dir, write_manifest, FileStatus, ManifestMeta, SigStatus, SignError, Trust,
    MANIFEST_FILE, SIGNATURE_FILE, SIMULATED_WARNING,
};

const SSH_KEYGEN: &str = "ssh-keygen";

/// Fail loudly when OpenSSH is absent: these tests exist to prove interop.
fn ssh_keygen() -> Command {
    let ok = Command::new(SSH_KEYGEN)
        .arg("-?")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok();
    assert!(ok, "ssh-keygen (OpenSSH) is required by these tests");
    Command::new(SSH_KEYGEN)
}

fn report_dir(simulated: bool) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path();
    fs::write(
        p.join("evidence.json"),
        format!(
            "{{\"schema\": 1, \"simulated\": {simulated}, \"gpus\": 8, \"results\": [{{\"test\": \"nccl\", \"busbw_gbps\": 451.2}}]}}\n"
        ),
    )
    .unwrap();
    fs::write(
        p.join("report.html"),
        "<!doctype html><title>nodecert</title><p>PASS: 8 GPUs</p>\n",
    )
    .unwrap();
    fs::write(p.join("report.md"), "# nodecert\n\nPASS: 8 GPUs\n").unwrap();
    dir
}

fn new_key(dir: &Path, name: &str) -> PathBuf {
    let k = dir.join(name);
    keygen(&k, &format!("{name}@test")).unwrap();
    k
}

fn pub_of(key: &Path) -> PathBuf {
    PathBuf::from(format!("{}.pub", key.display()))
}

fn allowed_signers(dir: &Path, entries: &[(&Path, &str)]) -> PathBuf {
    let p = dir.join("allowed_signers");
    let mut text = String::new();
    for (key, id) in entries {
        text.push_str(&allowed_signers_line(&pub_of(key), id).unwrap());
        text.push('\n');
    }
    fs::write(&p, text).unwrap();
    p
}

fn ssh_verify(dir: &Path, sig: &str, signers: &Path, identity: &str) -> bool {
    let out = ssh_keygen()
        .args(["-Y", "verify", "-f"])
        .arg(signers)
        .args(["-I", identity, "-n", "nodecert", "-s"])
        .arg(dir.join(sig))
        .stdin(fs::File::open(dir.join(MANIFEST_FILE)).unwrap())
        .output()
        .unwrap();
    out.status.success()
}

#[test]
fn keygen_writes_0600_key_and_pub_that_ssh_keygen_accepts() {
    let tmp = tempfile::tempdir().unwrap();
    let key = tmp.path().join("id_nodecert");
    let info = keygen(&key, "ops@example.com").unwrap();
    assert_eq!(info.private_key, key);
    assert_eq!(info.public_key, tmp.path().join("id_nodecert.pub"));
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = fs::metadata(&key).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "private key mode {mode:o}");
    }
    let pub_text = fs::read_to_string(&info.public_key).unwrap();
    assert_eq!(pub_text, format!("{}\n", info.public_key_line));
    assert!(pub_text.starts_with("ssh-ed25519 AAAA"));
    assert!(pub_text.trim_end().ends_with(" ops@example.com"));
    assert!(fs::read_to_string(&key)
        .unwrap()
        .starts_with("-----BEGIN OPENSSH PRIVATE KEY-----\n"));

    for f in [&info.public_key, &key] {
        let out = ssh_keygen().arg("-l").arg("-f").arg(f).output().unwrap();
        assert!(out.status.success(), "ssh-keygen -l -f {}", f.display());
        let line = String::from_utf8(out.stdout).unwrap();
        assert!(
            line.starts_with(&format!("256 {} ", info.fingerprint)),
            "{line} vs {}",
            info.fingerprint
        );
        assert!(line.trim_end().ends_with("(ED25519)"));
    }
    // ssh-keygen derives the same public key from our private key.
    let out = ssh_keygen().arg("-y").arg("-f").arg(&key).output().unwrap();
    assert!(out.status.success());
    let derived = String::from_utf8(out.stdout).unwrap();
    assert_eq!(
        derived.split_whitespace().take(2).collect::<Vec<_>>(),
        info.public_key_line
            .split_whitespace()
            .take(2)
            .collect::<Vec<_>>()
    );
    assert_eq!(key_fingerprint(&key).unwrap(), info.fingerprint);
    assert_eq!(key_fingerprint(&info.public_key).unwrap(), info.fingerprint);
}

#[test]
fn keygen_refuses_to_overwrite() {
    let tmp = tempfile::tempdir().unwrap();
    let key = tmp.path().join("k");
    keygen(&key, "a").unwrap();
    let before = fs::read(&key).unwrap();
    let err = keygen(&key, "b").unwrap_err();
    assert!(matches!(err, SignError::Exists(_)), "{err}");
    assert!(err.to_string().contains("refusing to overwrite"), "{err}");
    assert_eq!(fs::read(&key).unwrap(), before);
    // Only the .pub present: still refused, and no private key left behind.
    let other = tmp.path().join("k2");
    fs::write(pub_of(&other), "x").unwrap();
    assert!(matches!(keygen(&other, "c"), Err(SignError::Exists(_))));
    assert!(!other.exists());
}

#[test]
fn our_signature_verifies_with_ssh_keygen() {
    let dir = report_dir(false);
    let keys = tempfile::tempdir().unwrap();
    let key = new_key(keys.path(), "vendor");
    let info = sign_dir(dir.path(), &key).unwrap();
    assert!(info.manifest_written);
    assert!(!info.countersignature);
    assert_eq!(info.signature, dir.path().join(SIGNATURE_FILE));
    assert_eq!(info.fingerprint, key_fingerprint(&key).unwrap());

    // Exactly the command we tell customers to run, in a shell.
    let cwd = tempfile::tempdir().unwrap();
    allowed_signers(cwd.path(), &[(&key, "vendor@example.com")]);
    let cmd = verify_command(&dir.path().display().to_string(), "vendor@example.com");
    let out = Command::new("sh")
        .arg("-c")
        .arg(&cmd)
        .current_dir(cwd.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{cmd}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("Good \"nodecert\" signature"));
    // Wrong identity is refused by OpenSSH.
    assert!(!ssh_verify(
        dir.path(),
        SIGNATURE_FILE,
        &cwd.path().join("allowed_signers"),
        "someone@else"
    ));
    // sha256sum -c accepts the manifest as is.
    let cmd = digest_check_command(&dir.path().display().to_string());
    let out = Command::new("sh").arg("-c").arg(&cmd).output().unwrap();
    assert!(
        out.status.success(),
        "{cmd}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    for f in ["evidence.json: OK", "report.html: OK", "report.md: OK"] {
        assert!(stdout.contains(f), "{stdout}");
    }
    // And our own verifier agrees.
    let report = verify_dir(dir.path(), &Trust::PublicKey(pub_of(&key))).unwrap();
    assert!(report.ok(), "{report}");
}

#[test]
fn ssh_keygen_signature_verifies_with_our_code() {
    let dir = report_dir(false);
    write_manifest(
        dir.path(),
        &["evidence.json", "report.html", "report.md"],
        &ManifestMeta::default(),
    )
    .unwrap();
    let keys = tempfile::tempdir().unwrap();
    let key = keys.path().join("openssh_key");
    let st = ssh_keygen()
        .args([
            "-q",
            "-t",
            "ed25519",
            "-N",
            "",
            "-C",
            "auditor@example.com",
            "-f",
        ])
        .arg(&key)
        .status()
        .unwrap();
    assert!(st.success());
    let st = ssh_keygen()
        .args(["-Y", "sign", "-n", "nodecert", "-f"])
        .arg(&key)
        .arg(dir.path().join(MANIFEST_FILE))
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(st.success());
    assert!(dir.path().join(SIGNATURE_FILE).exists());

    let r = verify_dir(dir.path(), &Trust::PublicKey(pub_of(&key))).unwrap();
    assert!(r.ok(), "{r}");
    let signers = allowed_signers(keys.path(), &[(&key, "auditor@example.com")]);
    let r = verify_dir(dir.path(), &Trust::AllowedSigners(signers)).unwrap();
    assert!(r.ok(), "{r}");
    assert_eq!(r.signatures.len(), 1);
    assert_eq!(
        r.signatures[0].principal.as_deref(),
        Some("auditor@example.com")
    );
    assert_eq!(
        r.signatures[0].fingerprint.as_deref(),
        Some(key_fingerprint(&key).unwrap().as_str())
    );
    // A key written by ssh-keygen can also sign with our code (countersignature).
    let ours = new_key(keys.path(), "vendor");
    let info = sign_dir(dir.path(), &ours).unwrap();
    assert!(info.countersignature);
    assert!(!info.manifest_written);
}

#[test]
fn signature_in_another_namespace_is_invalid() {
    let dir = report_dir(false);
    write_manifest(dir.path(), &["evidence.json"], &ManifestMeta::default()).unwrap();
    let keys = tempfile::tempdir().unwrap();
    let key = new_key(keys.path(), "k");
    let st = ssh_keygen()
        .args(["-Y", "sign", "-n", "git", "-f"])
        .arg(&key)
        .arg(dir.path().join(MANIFEST_FILE))
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(st.success());
    let r = verify_dir(dir.path(), &Trust::PublicKey(pub_of(&key))).unwrap();
    assert!(!r.ok());
    assert!(
        matches!(&r.signatures[0].status, SigStatus::Invalid { reason } if reason.contains("namespace")),
        "{r}"
    );
}

#[test]
fn any_changed_byte_of_any_signed_file_fails_verification() {
    let dir = report_dir(true);
    let keys = tempfile::tempdir().unwrap();
    let key = new_key(keys.path(), "vendor");
    sign_dir(dir.path(), &key).unwrap();
    let trust = Trust::PublicKey(pub_of(&key));
    assert!(verify_dir(dir.path(), &trust).unwrap().ok());

    for name in [
        "evidence.json",
        "report.html",
        "report.md",
        MANIFEST_FILE,
        SIGNATURE_FILE,
    ] {
        let path = dir.path().join(name);
        let original = fs::read(&path).unwrap();
        for i in 0..original.len() {
            for mask in [0x01u8, 0x20, 0x80] {
                let mut changed = original.clone();
                changed[i] ^= mask;
                fs::write(&path, &changed).unwrap();
                let r = verify_dir(dir.path(), &trust).unwrap();
                assert!(!r.ok(), "{name}: byte {i} ^ {mask:#x} went unnoticed\n{r}");
                assert!(!r.problems.is_empty());
            }
        }
        // Appended and truncated bytes too.
        let mut longer = original.clone();
        longer.push(b'\n');
        fs::write(&path, &longer).unwrap();
        assert!(
            !verify_dir(dir.path(), &trust).unwrap().ok(),
            "{name}: appended byte"
        );
        fs::write(&path, &original[..original.len() - 1]).unwrap();
        assert!(
            !verify_dir(dir.path(), &trust).unwrap().ok(),
            "{name}: truncated"
        );
        fs::write(&path, &original).unwrap();
        assert!(
            verify_dir(dir.path(), &trust).unwrap().ok(),
            "{name}: restored"
        );
    }
}

#[test]
fn mismatch_message_names_the_file_and_digests() {
    let dir = report_dir(false);
    let keys = tempfile::tempdir().unwrap();
    let key = new_key(keys.path(), "vendor");
    sign_dir(dir.path(), &key).unwrap();
    fs::write(dir.path().join("report.html"), "<p>FAIL</p>\n").unwrap();
    let r = verify_dir(dir.path(), &Trust::PublicKey(pub_of(&key))).unwrap();
    assert!(!r.ok());
    let f = r.files.iter().find(|f| f.name == "report.html").unwrap();
    assert!(matches!(f.status, FileStatus::Mismatch { .. }));
    assert!(
        r.problems
            .iter()
            .any(|p| p.starts_with("report.html: sha-256 mismatch (manifest ")),
        "{r}"
    );
    // The other files are still reported fine.
    assert!(r
        .files
        .iter()
        .filter(|f| f.name != "report.html")
        .all(|f| f.status == FileStatus::Ok));
    // sha256sum -c notices too.
    let out = Command::new("sh")
        .arg("-c")
        .arg(digest_check_command(&dir.path().display().to_string()))
        .output()
        .unwrap();
    assert!(!out.status.success());
}

#[test]
fn wrong_key_fails() {
    let dir = report_dir(false);
    let keys = tempfile::tempdir().unwrap();
    let key = new_key(keys.path(), "vendor");
    let other = new_key(keys.path(), "mallory");
    sign_dir(dir.path(), &key).unwrap();

    let r = verify_dir(dir.path(), &Trust::PublicKey(pub_of(&other))).unwrap();
    assert!(!r.ok(), "{r}");
    assert!(matches!(
        r.signatures[0].status,
        SigStatus::Untrusted { .. }
    ));
    assert!(r.problems.iter().any(|p| p.contains("trusted")), "{r}");

    let signers = allowed_signers(keys.path(), &[(&other, "mallory@example.com")]);
    let r = verify_dir(dir.path(), &Trust::AllowedSigners(signers.clone())).unwrap();
    assert!(!r.ok(), "{r}");
    assert!(!ssh_verify(
        dir.path(),
        SIGNATURE_FILE,
        &signers,
        "mallory@example.com"
    ));

    // The right key, but allowed for another namespace only.
    let line = allowed_signers_line(&pub_of(&key), "vendor@example.com")
        .unwrap()
        .replace("namespaces=\"nodecert\"", "namespaces=\"git\"");
    fs::write(&signers, format!("{line}\n")).unwrap();
    let r = verify_dir(dir.path(), &Trust::AllowedSigners(signers.clone())).unwrap();
    assert!(!r.ok(), "{r}");
    assert!(
        matches!(&r.signatures[0].status, SigStatus::Untrusted { reason } if reason.contains("namespace")),
        "{r}"
    );
    assert!(!ssh_verify(
        dir.path(),
        SIGNATURE_FILE,
        &signers,
        "vendor@example.com"
    ));

    // Expired entry.
    let line = allowed_signers_line(&pub_of(&key), "vendor@example.com")
        .unwrap()
        .replace(
            "namespaces=\"nodecert\"",
            "namespaces=\"nodecert\",valid-before=\"20200101Z\"",
        );
    fs::write(&signers, format!("{line}\n")).unwrap();
    let r = verify_dir(dir.path(), &Trust::AllowedSigners(signers.clone())).unwrap();
    assert!(!r.ok(), "{r}");
    assert!(!ssh_verify(
        dir.path(),
        SIGNATURE_FILE,
        &signers,
        "vendor@example.com"
    ));
}

#[test]
fn untrusted_mode_checks_but_never_verifies() {
    let dir = report_dir(false);
    let keys = tempfile::tempdir().unwrap();
    let key = new_key(keys.path(), "vendor");
    sign_dir(dir.path(), &key).unwrap();
    let r = verify_dir(dir.path(), &Trust::Untrusted).unwrap();
    assert!(!r.ok());
    assert_eq!(r.signatures.len(), 1);
    assert!(matches!(
        r.signatures[0].status,
        SigStatus::Untrusted { .. }
    ));
    assert!(r.files.iter().all(|f| f.status == FileStatus::Ok));
    assert!(
        r.problems.iter().any(|p| p.contains("no trusted signer")),
        "{r}"
    );
}

#[test]
fn missing_file_fails() {
    let dir = report_dir(false);
    let keys = tempfile::tempdir().unwrap();
    let key = new_key(keys.path(), "vendor");
    sign_dir(dir.path(), &key).unwrap();
    fs::remove_file(dir.path().join("report.md")).unwrap();
    let r = verify_dir(dir.path(), &Trust::PublicKey(pub_of(&key))).unwrap();
    assert!(!r.ok());
    let f = r.files.iter().find(|f| f.name == "report.md").unwrap();
    assert_eq!(f.status, FileStatus::Missing);
    assert!(r.problems.iter().any(|p| p == "report.md: missing"), "{r}");

    // Missing manifest and missing signature are failures too.
    let dir = report_dir(false);
    sign_dir(dir.path(), &key).unwrap();
    fs::remove_file(dir.path().join(SIGNATURE_FILE)).unwrap();
    let r = verify_dir(dir.path(), &Trust::PublicKey(pub_of(&key))).unwrap();
    assert!(!r.ok());
    assert!(r.problems.iter().any(|p| p.contains("not signed")), "{r}");
    sign_dir(dir.path(), &key).unwrap();
    fs::remove_file(dir.path().join(MANIFEST_FILE)).unwrap();
    let r = verify_dir(dir.path(), &Trust::PublicKey(pub_of(&key))).unwrap();
    assert!(!r.ok());
    assert!(r.manifest.is_none());
    assert!(
        r.problems
            .iter()
            .any(|p| p == "nodecert-manifest.txt: missing"),
        "{r}"
    );
    // Signing refuses to write a fresh manifest beside old signatures.
    assert!(sign_dir(dir.path(), &key).is_err());
}

#[test]
fn stray_signature_like_files_fail_but_unlisted_files_are_notes() {
    let dir = report_dir(false);
    let keys = tempfile::tempdir().unwrap();
    let key = new_key(keys.path(), "vendor");
    sign_dir(dir.path(), &key).unwrap();
    let trust = Trust::PublicKey(pub_of(&key));

    fs::write(dir.path().join("run.log"), "log\n").unwrap();
    let r = verify_dir(dir.path(), &trust).unwrap();
    assert!(r.ok(), "{r}");
    assert!(r.notes.iter().any(|n| n.contains("run.log")), "{r}");

    for stray in [
        "nodecert-manifest.txt.bak",
        "nodecert-manifest.txt.x.sig",
        "evidence.json.sig",
    ] {
        fs::write(dir.path().join(stray), "x").unwrap();
        let r = verify_dir(dir.path(), &trust).unwrap();
        assert!(!r.ok(), "{stray}\n{r}");
        assert!(r.problems.iter().any(|p| p.starts_with(stray)), "{r}");
        fs::remove_file(dir.path().join(stray)).unwrap();
    }
    // A garbage file with a countersignature name is an invalid signature.
    fs::write(dir.path().join("nodecert-manifest.txt.2.sig"), "garbage").unwrap();
    let r = verify_dir(dir.path(), &trust).unwrap();
    assert!(!r.ok(), "{r}");
    assert!(matches!(r.signatures[1].status, SigStatus::Invalid { .. }));
    // ... and blocks countersigning.
    let second = new_key(keys.path(), "second");
    assert!(matches!(
        sign_dir(dir.path(), &second),
        Err(SignError::NotSignable { .. })
    ));
}

#[test]
fn countersignature_is_written_beside_and_both_are_reported() {
    let dir = report_dir(false);
    let keys = tempfile::tempdir().unwrap();
    let vendor = new_key(keys.path(), "vendor");
    let customer = new_key(keys.path(), "customer");
    let first = sign_dir(dir.path(), &vendor).unwrap();
    let manifest_before = fs::read(dir.path().join(MANIFEST_FILE)).unwrap();
    let sig_before = fs::read(&first.signature).unwrap();

    let second = sign_dir(dir.path(), &customer).unwrap();
    assert!(second.countersignature);
    assert!(!second.manifest_written);
    assert_eq!(
        second.signature,
        dir.path().join("nodecert-manifest.txt.2.sig")
    );
    assert_eq!(
        fs::read(dir.path().join(MANIFEST_FILE)).unwrap(),
        manifest_before
    );
    assert_eq!(fs::read(&first.signature).unwrap(), sig_before);

    // Same key twice is an error and writes nothing.
    let err = sign_dir(dir.path(), &vendor).unwrap_err();
    assert!(matches!(err, SignError::AlreadySigned { .. }), "{err}");
    assert!(err.to_string().contains("already signed"), "{err}");
    assert!(!dir.path().join("nodecert-manifest.txt.3.sig").exists());

    let signers = allowed_signers(
        keys.path(),
        &[
            (&vendor, "vendor@example.com"),
            (&customer, "customer@example.com"),
        ],
    );
    let r = verify_dir(dir.path(), &Trust::AllowedSigners(signers.clone())).unwrap();
    assert!(r.ok(), "{r}");
    assert_eq!(r.signatures.len(), 2);
    assert_eq!(r.signatures[0].file, SIGNATURE_FILE);
    assert_eq!(r.signatures[1].file, "nodecert-manifest.txt.2.sig");
    assert_eq!(
        r.signatures[0].principal.as_deref(),
        Some("vendor@example.com")
    );
    assert_eq!(
        r.signatures[1].principal.as_deref(),
        Some("customer@example.com")
    );
    assert!(r.signatures.iter().all(|s| s.status == SigStatus::Trusted));
    assert_eq!(
        r.signatures[1].fingerprint,
        Some(key_fingerprint(&customer).unwrap())
    );
    // OpenSSH accepts both.
    assert!(ssh_verify(
        dir.path(),
        SIGNATURE_FILE,
        &signers,
        "vendor@example.com"
    ));
    assert!(ssh_verify(
        dir.path(),
        "nodecert-manifest.txt.2.sig",
        &signers,
        "customer@example.com"
    ));

    // Trusting only the customer still verifies; the vendor's is noted as untrusted.
    let r = verify_dir(dir.path(), &Trust::PublicKey(pub_of(&customer))).unwrap();
    assert!(r.ok(), "{r}");
    assert!(matches!(
        r.signatures[0].status,
        SigStatus::Untrusted { .. }
    ));

    // Removing the first signature while a countersignature remains is noticed.
    fs::remove_file(&first.signature).unwrap();
    let r = verify_dir(dir.path(), &Trust::PublicKey(pub_of(&customer))).unwrap();
    assert!(!r.ok(), "{r}");
}

#[test]
fn simulated_flag_surfaces_in_manifest_and_report() {
    let keys = tempfile::tempdir().unwrap();
    let key = new_key(keys.path(), "vendor");
    for simulated in [true, false] {
        let dir = report_dir(simulated);
        sign_dir(dir.path(), &key).unwrap();
        let text = fs::read_to_string(dir.path().join(MANIFEST_FILE)).unwrap();
        assert!(
            text.contains(&format!("\n# simulated: {simulated}\n")),
            "{text}"
        );
        assert_eq!(text.contains(SIMULATED_WARNING), simulated, "{text}");
        if simulated {
            assert!(text.contains("not a certification of real hardware"));
        }
        let r = verify_dir(dir.path(), &Trust::PublicKey(pub_of(&key))).unwrap();
        assert!(r.ok(), "{r}");
        assert_eq!(r.simulated, Some(simulated));
        assert_eq!(r.manifest.as_ref().unwrap().simulated, simulated);
        assert_eq!(
            r.to_string().contains("SIMULATED RESULTS"),
            simulated,
            "{r}"
        );
    }
}

#[test]
fn manifest_meta_and_evidence_must_agree() {
    let dir = report_dir(true);
    let meta = ManifestMeta {
        nodecert_version: "9.9.9".into(),
        simulated: Some(false),
    };
    let err = write_manifest(dir.path(), &["evidence.json"], &meta).unwrap_err();
    assert!(err.to_string().contains("evidence.json"), "{err}");
    assert!(!dir.path().join(MANIFEST_FILE).exists());

    // Evidence without the flag: taken from the metadata.
    fs::write(dir.path().join("evidence.json"), "{\"schema\": 1}\n").unwrap();
    assert!(write_manifest(dir.path(), &["evidence.json"], &ManifestMeta::default()).is_err());
    let meta = ManifestMeta {
        nodecert_version: "9.9.9".into(),
        simulated: Some(true),
    };
    write_manifest(dir.path(), &["evidence.json", "report.md"], &meta).unwrap();
    let text = fs::read_to_string(dir.path().join(MANIFEST_FILE)).unwrap();
    assert!(text.starts_with("# format: nodecert-manifest-1\n# nodecert-version: 9.9.9\n"));
    assert!(text.contains(SIMULATED_WARNING));
    assert!(!text.contains("report.html"));

    // evidence.json must be listed, names must be plain relative paths.
    assert!(write_manifest(dir.path(), &["report.md"], &meta).is_err());
    assert!(write_manifest(dir.path(), &["evidence.json", "../x"], &meta).is_err());
    assert!(write_manifest(dir.path(), &["evidence.json", "nope.txt"], &meta).is_err());

    // A signed manifest is never rewritten.
    let keys = tempfile::tempdir().unwrap();
    let key = new_key(keys.path(), "vendor");
    sign_dir(dir.path(), &key).unwrap();
    let err = write_manifest(dir.path(), &["evidence.json"], &meta).unwrap_err();
    assert!(err.to_string().contains("already signed"), "{err}");
}

#[test]
fn signing_refuses_altered_reports() {
    let dir = report_dir(false);
    write_manifest(
        dir.path(),
        &["evidence.json", "report.html", "report.md"],
        &ManifestMeta::default(),
    )
    .unwrap();
    fs::write(dir.path().join("report.md"), "edited\n").unwrap();
    let keys = tempfile::tempdir().unwrap();
    let key = new_key(keys.path(), "vendor");
    let err = sign_dir(dir.path(), &key).unwrap_err();
    assert!(
        err.to_string().contains("report.md: sha-256 mismatch"),
        "{err}"
    );
    assert!(!dir.path().join(SIGNATURE_FILE).exists());
    // A public key is not a signing key.
    let err = sign_dir(dir.path(), &pub_of(&key)).unwrap_err();
    assert!(err.to_string().contains("private key"), "{err}");
}

#[test]
fn allowed_signers_line_is_accepted_by_openssh_format() {
    let keys = tempfile::tempdir().unwrap();
    let key = new_key(keys.path(), "vendor");
    let line = allowed_signers_line(&pub_of(&key), "vendor@example.com").unwrap();
    assert!(line.starts_with("vendor@example.com namespaces=\"nodecert\" ssh-ed25519 AAAA"));
    assert!(allowed_signers_line(&pub_of(&key), "two words").is_err());
    assert!(allowed_signers_line(&pub_of(&key), "*").is_err());
    assert!(allowed_signers_line(&pub_of(&key), "").is_err());
}
