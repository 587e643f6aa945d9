//! Signing and verification of report directories, including round trips
//! with the real `ssh-keygen` (OpenSSH) binary.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use nodecert::sign::{
    allowed_signers_line, digest_check_command, key_fingerprint, keygen, sign_dir,
    signing_key_info, verify_command, verify_dir, write_manifest, FileStatus, ManifestMeta,
    SigStatus, SignError, Trust, MANIFEST_FILE, SIGNATURE_FILE, SIMULATED_WARNING,
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

/// A real node's report folder with its manifest written (not yet signed).
fn manifested_dir() -> tempfile::TempDir {
    let dir = report_dir(false);
    write_manifest(
        dir.path(),
        &["evidence.json", "report.html", "report.md"],
        &ManifestMeta::default(),
    )
    .unwrap();
    dir
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

/// When the public key cannot be written (here its name is one byte over NAME_MAX), the private
/// key written just before is removed: no half pair is left.
#[test]
fn keygen_leaves_no_private_key_without_its_public_key() {
    let tmp = tempfile::tempdir().unwrap();
    let key = tmp.path().join("k".repeat(252));
    assert!(keygen(&key, "ops@example.com").is_err());
    assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 0);
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
    // A public key file of two keys is refused whichever comes first: trusting its first
    // alone would make the order of the lines decide.
    let other = new_key(keys.path(), "other");
    let both = keys.path().join("both.pub");
    for order in [[&other, &key], [&key, &other]] {
        let text: String = order
            .iter()
            .map(|k| fs::read_to_string(pub_of(k)).unwrap())
            .collect();
        fs::write(&both, text).unwrap();
        let e = verify_dir(dir.path(), &Trust::PublicKey(both.clone())).unwrap_err();
        assert!(e.to_string().contains("2 keys in one file"), "{e}");
    }
}

#[test]
fn ssh_keygen_signature_verifies_with_our_code() {
    let dir = manifested_dir();
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
    assert!(ssh_sign_file(dir.path(), &key));
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
        // Appended and truncated bytes too. White space around a signature's
        // armor is not part of it (see crlf_signatures_...), so there the byte
        // appended is a letter and the truncation cuts into the armor.
        let is_sig = name == SIGNATURE_FILE;
        let mut longer = original.clone();
        longer.push(if is_sig { b'x' } else { b'\n' });
        fs::write(&path, &longer).unwrap();
        assert!(
            !verify_dir(dir.path(), &trust).unwrap().ok(),
            "{name}: appended byte"
        );
        let cut = if is_sig { 2 } else { 1 };
        fs::write(&path, &original[..original.len() - cut]).unwrap();
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
        matches!(&r.signatures[0].status, SigStatus::Untrusted { reason }
            if reason.starts_with(&format!("{}:1: ", signers.display()))
                && reason.contains("not allowed to sign namespace nodecert")),
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
    let at = format!("{}:1: ", signers.display());
    assert!(
        matches!(&r.signatures[0].status, SigStatus::Untrusted { reason }
            if reason.starts_with(&at) && reason.contains("outside its validity period")),
        "{r}"
    );
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
    let dir = manifested_dir();
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

// ---------------------------------------------------------------------------
// ECDSA and RSA keys, CRLF files, encrypted and security keys

/// The key types users hold besides Ed25519: ssh-keygen arguments, the
/// SSHSIG signature algorithm expected, and a name for messages.
const OTHER_KEY_TYPES: [(&str, &[&str], &str); 3] = [
    (
        "ecdsa-p256",
        &["-t", "ecdsa", "-b", "256"],
        "ecdsa-sha2-nistp256",
    ),
    (
        "ecdsa-p384",
        &["-t", "ecdsa", "-b", "384"],
        "ecdsa-sha2-nistp384",
    ),
    // 2048 bits keeps RSA key generation short on small CI machines.
    ("rsa", &["-t", "rsa", "-b", "2048"], "rsa-sha2-512"),
];

/// A key made by the real ssh-keygen (`passphrase` empty: unencrypted).
fn openssh_key(dir: &Path, name: &str, type_args: &[&str], passphrase: &str) -> PathBuf {
    let key = dir.join(name);
    let out = ssh_keygen()
        .arg("-q")
        .args(type_args)
        .args(["-N", passphrase, "-C", &format!("{name}@example.com"), "-f"])
        .arg(&key)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "ssh-keygen {type_args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    key
}

/// `ssh-keygen -Y sign` of the manifest in file mode, which writes the first signature
/// beside it; whether that worked.
fn ssh_sign_file(dir: &Path, key: &Path) -> bool {
    ssh_keygen()
        .args(["-Y", "sign", "-n", "nodecert", "-f"])
        .arg(key)
        .arg(dir.join(MANIFEST_FILE))
        .stderr(Stdio::null())
        .status()
        .unwrap()
        .success()
}

/// `ssh-keygen -Y sign` of the manifest, written as `sig` (stdin to stdout, as
/// a customer countersigns with a key nodecert never sees).
fn ssh_sign_into(dir: &Path, key: &Path, sig: &str) {
    let out = ssh_keygen()
        .args(["-Y", "sign", "-n", "nodecert", "-f"])
        .arg(key)
        .stdin(fs::File::open(dir.join(MANIFEST_FILE)).unwrap())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "ssh-keygen -Y sign: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    fs::write(dir.join(sig), out.stdout).unwrap();
}

fn sig_algorithm(path: &Path) -> String {
    let sig = ssh_key::SshSig::from_pem(fs::read(path).unwrap()).unwrap();
    sig.signature().algorithm().as_str().to_string()
}

fn flip_byte(path: &Path, at: usize) -> Vec<u8> {
    let original = fs::read(path).unwrap();
    let mut changed = original.clone();
    changed[at] ^= 0x01;
    fs::write(path, changed).unwrap();
    original
}

#[test]
fn ecdsa_and_rsa_keys_sign_and_verify_both_ways_with_ssh_keygen() {
    let keys = tempfile::tempdir().unwrap();
    let vendor = new_key(keys.path(), "vendor");
    for (name, type_args, algorithm) in OTHER_KEY_TYPES {
        let key = openssh_key(keys.path(), name, type_args, "");
        let id = format!("{name}@example.com");
        let signers = allowed_signers(keys.path(), &[(&key, &id), (&vendor, "vendor@example.com")]);

        // nodecert signs with the ssh-keygen key; ssh-keygen -Y verify accepts.
        let dir = report_dir(false);
        let info = sign_dir(dir.path(), &key).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(info.fingerprint, key_fingerprint(&key).unwrap(), "{name}");
        assert_eq!(sig_algorithm(&info.signature), algorithm, "{name}");
        assert!(
            ssh_verify(dir.path(), SIGNATURE_FILE, &signers, &id),
            "{name}"
        );
        let r = verify_dir(dir.path(), &Trust::PublicKey(pub_of(&key))).unwrap();
        assert!(r.ok(), "{name}: {r}");
        let r = verify_dir(dir.path(), &Trust::AllowedSigners(signers.clone())).unwrap();
        assert!(r.ok(), "{name}: {r}");
        assert_eq!(r.signatures[0].principal.as_deref(), Some(id.as_str()));
        // Tampered: a signed file, then the manifest itself.
        let report = dir.path().join("report.md");
        let original = flip_byte(&report, 2);
        let r = verify_dir(dir.path(), &Trust::PublicKey(pub_of(&key))).unwrap();
        assert!(!r.ok(), "{name}: tampered report.md verified\n{r}");
        fs::write(&report, original).unwrap();
        let manifest = dir.path().join(MANIFEST_FILE);
        let original = flip_byte(&manifest, 40);
        let r = verify_dir(dir.path(), &Trust::PublicKey(pub_of(&key))).unwrap();
        assert!(!r.ok(), "{name}: tampered manifest verified\n{r}");
        assert!(
            matches!(&r.signatures[0].status, SigStatus::Invalid { reason } if reason.contains("does not match")),
            "{name}: {r}"
        );
        assert!(
            !ssh_verify(dir.path(), SIGNATURE_FILE, &signers, &id),
            "{name}"
        );
        fs::write(&manifest, original).unwrap();

        // ssh-keygen -Y sign (file mode) makes the first signature; nodecert verifies it
        // and countersigns beside it.
        let dir = manifested_dir();
        assert!(ssh_sign_file(dir.path(), &key), "{name}");
        assert_eq!(
            sig_algorithm(&dir.path().join(SIGNATURE_FILE)),
            algorithm,
            "{name}"
        );
        let r = verify_dir(dir.path(), &Trust::AllowedSigners(signers.clone())).unwrap();
        assert!(r.ok(), "{name}: {r}");
        assert_eq!(
            r.signatures[0].fingerprint,
            Some(key_fingerprint(&key).unwrap()),
            "{name}"
        );
        assert!(sign_dir(dir.path(), &vendor).unwrap().countersignature);
        let r = verify_dir(dir.path(), &Trust::AllowedSigners(signers.clone())).unwrap();
        assert!(r.ok(), "{name}: {r}");
        assert!(
            r.signatures.iter().all(|s| s.status == SigStatus::Trusted),
            "{name}: {r}"
        );
        // The same key cannot sign twice, whichever tool signed first.
        assert!(
            matches!(
                sign_dir(dir.path(), &key),
                Err(SignError::AlreadySigned { .. })
            ),
            "{name}"
        );

        // The customer's case: nodecert signed with Ed25519, the customer countersigns
        // with ssh-keygen and an ECDSA or RSA key.
        let dir = report_dir(false);
        sign_dir(dir.path(), &vendor).unwrap();
        ssh_sign_into(dir.path(), &key, "nodecert-manifest.txt.2.sig");
        let r = verify_dir(dir.path(), &Trust::AllowedSigners(signers.clone())).unwrap();
        assert!(r.ok(), "{name}: {r}");
        assert_eq!(r.signatures.len(), 2);
        assert!(
            r.signatures.iter().all(|s| s.status == SigStatus::Trusted),
            "{name}: {r}"
        );
        assert_eq!(r.signatures[1].principal.as_deref(), Some(id.as_str()));
        // A changed evidence byte fails both signatures' report.
        let evidence = dir.path().join("evidence.json");
        flip_byte(&evidence, 5);
        let r = verify_dir(dir.path(), &Trust::AllowedSigners(signers.clone())).unwrap();
        assert!(!r.ok(), "{name}: {r}");
        assert!(
            r.problems
                .iter()
                .any(|p| p.starts_with("evidence.json: sha-256 mismatch")),
            "{name}: {r}"
        );
    }
}

#[test]
fn ecdsa_and_rsa_signatures_reject_any_changed_byte() {
    let keys = tempfile::tempdir().unwrap();
    for (name, type_args, _) in OTHER_KEY_TYPES {
        let key = openssh_key(keys.path(), name, type_args, "");
        let dir = report_dir(false);
        write_manifest(dir.path(), &["evidence.json"], &ManifestMeta::default()).unwrap();
        ssh_sign_into(dir.path(), &key, SIGNATURE_FILE);
        let trust = Trust::PublicKey(pub_of(&key));
        assert!(verify_dir(dir.path(), &trust).unwrap().ok(), "{name}");
        let path = dir.path().join(SIGNATURE_FILE);
        let original = fs::read(&path).unwrap();
        // Every byte of the armored signature (a step keeps RSA's long ones quick).
        for i in (0..original.len()).step_by(3) {
            let mut changed = original.clone();
            changed[i] ^= 0x01;
            fs::write(&path, &changed).unwrap();
            let r = verify_dir(dir.path(), &trust).unwrap();
            assert!(!r.ok(), "{name}: signature byte {i} changed unnoticed\n{r}");
        }
        fs::write(&path, &original).unwrap();
        assert!(verify_dir(dir.path(), &trust).unwrap().ok(), "{name}");
    }
}

fn to_crlf(path: &Path) {
    let text = fs::read_to_string(path).unwrap();
    assert!(!text.contains('\r'));
    fs::write(path, text.replace('\n', "\r\n")).unwrap();
}

#[test]
fn crlf_signatures_and_keys_are_accepted_as_openssh_does() {
    let keys = tempfile::tempdir().unwrap();
    let vendor = new_key(keys.path(), "vendor");
    let customer = openssh_key(keys.path(), "customer", &["-t", "ecdsa", "-b", "256"], "");
    let signers = allowed_signers(
        keys.path(),
        &[
            (&vendor, "vendor@example.com"),
            (&customer, "customer@example.com"),
        ],
    );
    let dir = report_dir(false);
    sign_dir(dir.path(), &vendor).unwrap();
    ssh_sign_into(dir.path(), &customer, "nodecert-manifest.txt.2.sig");
    for sig in [SIGNATURE_FILE, "nodecert-manifest.txt.2.sig"] {
        to_crlf(&dir.path().join(sig));
    }
    // nodecert accepts them. (OpenSSH 9.2's ssh-keygen -Y verify does not: "missing
    // header"; the README says to convert such a file back for it.)
    let r = verify_dir(dir.path(), &Trust::AllowedSigners(signers.clone())).unwrap();
    assert!(r.ok(), "{r}");
    assert!(
        r.signatures.iter().all(|s| s.status == SigStatus::Trusted),
        "{r}"
    );

    // Surrounding white space (a trailing blank line, an indented paste) too.
    let p = dir.path().join(SIGNATURE_FILE);
    let crlf = fs::read_to_string(&p).unwrap();
    fs::write(&p, format!("\r\n  {crlf}\r\n\r\n")).unwrap();
    let r = verify_dir(dir.path(), &Trust::AllowedSigners(signers.clone())).unwrap();
    assert!(r.ok(), "{r}");
    // But the signature itself is still checked byte for byte: a changed base64
    // character, a stray carriage return inside, or a rewrapped body fail.
    let body_at = crlf.find('\n').unwrap() + 5;
    for bad in [
        {
            let mut b = crlf.clone().into_bytes();
            b[body_at] ^= 0x01;
            String::from_utf8(b).unwrap()
        },
        crlf.replacen("\r\n", "\r\r\n", 2),
        crlf.replacen("\r\n", "", 2),
    ] {
        fs::write(&p, &bad).unwrap();
        let r = verify_dir(dir.path(), &Trust::AllowedSigners(signers.clone())).unwrap();
        assert!(!r.ok(), "{bad:?} verified\n{r}");
    }
    fs::write(&p, &crlf).unwrap();

    // CRLF public keys, allowed_signers files and private keys.
    to_crlf(&pub_of(&vendor));
    to_crlf(&signers);
    let r = verify_dir(dir.path(), &Trust::PublicKey(pub_of(&vendor))).unwrap();
    assert!(r.ok(), "{r}");
    let r = verify_dir(dir.path(), &Trust::AllowedSigners(signers.clone())).unwrap();
    assert!(r.ok(), "{r}");
    let third = openssh_key(keys.path(), "third", &["-t", "ecdsa", "-b", "384"], "");
    to_crlf(&third);
    let info = sign_dir(dir.path(), &third).unwrap();
    assert_eq!(
        info.signature,
        dir.path().join("nodecert-manifest.txt.3.sig")
    );
    assert_eq!(info.fingerprint, key_fingerprint(&third).unwrap());
}

#[test]
fn encrypted_keys_are_refused_with_a_clear_error() {
    let keys = tempfile::tempdir().unwrap();
    for (name, type_args) in [
        ("ed25519", &["-t", "ed25519"][..]),
        ("ecdsa", &["-t", "ecdsa", "-b", "256"][..]),
    ] {
        let key = openssh_key(keys.path(), name, type_args, "correct horse");
        let dir = report_dir(false);
        let err = sign_dir(dir.path(), &key).unwrap_err();
        assert!(matches!(err, SignError::EncryptedKey(_)), "{name}: {err}");
        let msg = err.to_string();
        assert!(msg.contains("encrypted"), "{msg}");
        assert!(msg.contains("ssh-keygen -Y sign"), "{msg}");
        assert!(!dir.path().join(SIGNATURE_FILE).exists());
        // Its public half still identifies it.
        assert_eq!(
            key_fingerprint(&key).unwrap(),
            key_fingerprint(&pub_of(&key)).unwrap()
        );
    }
}

fn wire_string(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend((bytes.len() as u32).to_be_bytes());
    out.extend(bytes);
}

/// The armored SSHSIG a FIDO token and `ssh-keygen -Y sign` would make over
/// `manifest`, encoded by hand as OpenSSH's sshsig.c and ssh-*-sk.c do.
/// `sign` signs the security key's message: SHA-256(application) || flags ||
/// counter || SHA-256(SSHSIG signed data); it returns the inner signature
/// (64 bytes for Ed25519; mpint r, mpint s for ECDSA).
fn sk_sshsig(
    public: &ssh_key::PublicKey,
    manifest: &[u8],
    flags: u8,
    sign: impl Fn(&[u8]) -> Vec<u8>,
) -> String {
    use base64ct::Encoding;
    use sha2::{Digest, Sha256};
    let counter: u32 = 7;
    let signed =
        ssh_key::SshSig::signed_data("nodecert", ssh_key::HashAlg::Sha512, manifest).unwrap();
    let mut message = Sha256::digest("ssh:").to_vec();
    message.push(flags);
    message.extend(counter.to_be_bytes());
    message.extend(Sha256::digest(&signed));
    let mut sig_blob = Vec::new();
    wire_string(&mut sig_blob, public.algorithm().as_str().as_bytes());
    wire_string(&mut sig_blob, &sign(&message));
    sig_blob.push(flags);
    sig_blob.extend(counter.to_be_bytes());

    let line = public.to_openssh().unwrap();
    let key_blob = base64ct::Base64::decode_vec(line.split(' ').nth(1).unwrap()).unwrap();
    let mut blob = b"SSHSIG".to_vec();
    blob.extend(1u32.to_be_bytes());
    wire_string(&mut blob, &key_blob);
    wire_string(&mut blob, b"nodecert");
    wire_string(&mut blob, b"");
    wire_string(&mut blob, b"sha512");
    wire_string(&mut blob, &sig_blob);
    let b64 = base64ct::Base64::encode_string(&blob);
    let mut pem = String::from("-----BEGIN SSH SIGNATURE-----\n");
    for chunk in b64.as_bytes().chunks(70) {
        pem.push_str(std::str::from_utf8(chunk).unwrap());
        pem.push('\n');
    }
    pem.push_str("-----END SSH SIGNATURE-----\n");
    pem
}

/// Signs a security key's message (see [`sk_sshsig`]).
type SkSigner<'a> = Box<dyn Fn(&[u8]) -> Vec<u8> + 'a>;

#[test]
fn security_keys_cannot_sign_here_but_their_signatures_verify() {
    use signature::Signer;
    use ssh_key::private::{EcdsaKeypair, Ed25519Keypair, KeypairData};
    use ssh_key::public::KeyData;
    use ssh_key::rand_core::OsRng;

    let keys = tempfile::tempdir().unwrap();
    let ed = Ed25519Keypair::random(&mut OsRng);
    let sk_ed = ssh_key::public::SkEd25519::new(ed.public, "ssh:");
    let ec = EcdsaKeypair::random(&mut OsRng, ssh_key::EcdsaCurve::NistP256).unwrap();
    let EcdsaKeypair::NistP256 { public: point, .. } = &ec else {
        unreachable!()
    };
    let sk_ec = ssh_key::public::SkEcdsaSha2NistP256::new(*point, "ssh:");

    // The private key file of a security key holds only a handle: nodecert sends
    // the user to ssh-keygen.
    for (name, data) in [
        (
            "id_ed25519_sk",
            KeypairData::SkEd25519(
                ssh_key::private::SkEd25519::new(sk_ed.clone(), 0x01, vec![9u8; 64]).unwrap(),
            ),
        ),
        (
            "id_ecdsa_sk",
            KeypairData::SkEcdsaSha2NistP256(
                ssh_key::private::SkEcdsaSha2NistP256::new(sk_ec.clone(), 0x01, vec![9u8; 64])
                    .unwrap(),
            ),
        ),
    ] {
        let key = keys.path().join(name);
        let pem = ssh_key::PrivateKey::new(data, "fido@example.com")
            .unwrap()
            .to_openssh(ssh_key::LineEnding::LF)
            .unwrap();
        fs::write(&key, pem.as_bytes()).unwrap();
        let dir = report_dir(false);
        let err = sign_dir(dir.path(), &key).unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, SignError::Key { .. }), "{msg}");
        assert!(msg.contains("security key"), "{msg}");
        assert!(msg.contains("ssh-keygen -Y sign"), "{msg}");
        assert!(!dir.path().join(SIGNATURE_FILE).exists());
    }

    // Signatures made on the token verify, with nodecert as with ssh-keygen.
    let sk_keys: [(&str, ssh_key::PublicKey, SkSigner<'_>); 2] = [
        (
            "sk-ssh-ed25519",
            ssh_key::PublicKey::new(KeyData::SkEd25519(sk_ed), "fido-ed@example.com"),
            Box::new(|m: &[u8]| ed.try_sign(m).unwrap().as_bytes().to_vec()),
        ),
        (
            "sk-ecdsa",
            ssh_key::PublicKey::new(KeyData::SkEcdsaSha2NistP256(sk_ec), "fido-ec@example.com"),
            Box::new(|m: &[u8]| ec.try_sign(m).unwrap().as_bytes().to_vec()),
        ),
    ];
    for (name, public, sign) in sk_keys {
        let pub_file = keys.path().join(format!("{name}.pub"));
        fs::write(&pub_file, format!("{}\n", public.to_openssh().unwrap())).unwrap();
        let id = format!("{name}@example.com");
        let signers = keys.path().join(format!("{name}.allowed_signers"));
        fs::write(
            &signers,
            format!("{}\n", allowed_signers_line(&pub_file, &id).unwrap()),
        )
        .unwrap();
        let dir = report_dir(false);
        write_manifest(
            dir.path(),
            &["evidence.json", "report.md"],
            &ManifestMeta::default(),
        )
        .unwrap();
        let manifest = fs::read(dir.path().join(MANIFEST_FILE)).unwrap();
        let sig = dir.path().join(SIGNATURE_FILE);
        fs::write(&sig, sk_sshsig(&public, &manifest, 0x01, &sign)).unwrap();
        assert!(
            ssh_verify(dir.path(), SIGNATURE_FILE, &signers, &id),
            "{name}"
        );
        let r = verify_dir(dir.path(), &Trust::AllowedSigners(signers.clone())).unwrap();
        assert!(r.ok(), "{name}: {r}");
        assert_eq!(r.signatures[0].principal.as_deref(), Some(id.as_str()));
        // ... in CRLF too.
        to_crlf(&sig);
        let r = verify_dir(dir.path(), &Trust::AllowedSigners(signers.clone())).unwrap();
        assert!(r.ok(), "{name}: {r}");
        // A changed manifest, or any changed byte of the signature, fails.
        let original = flip_byte(&dir.path().join(MANIFEST_FILE), 40);
        let r = verify_dir(dir.path(), &Trust::AllowedSigners(signers.clone())).unwrap();
        assert!(!r.ok(), "{name}: {r}");
        assert!(
            !ssh_verify(dir.path(), SIGNATURE_FILE, &signers, &id),
            "{name}"
        );
        fs::write(dir.path().join(MANIFEST_FILE), original).unwrap();
        let good = sk_sshsig(&public, &manifest, 0x01, &sign);
        for i in (0..good.len()).step_by(2) {
            let mut changed = good.clone().into_bytes();
            changed[i] ^= 0x01;
            fs::write(&sig, &changed).unwrap();
            let r = verify_dir(dir.path(), &Trust::AllowedSigners(signers.clone())).unwrap();
            assert!(!r.ok(), "{name}: byte {i} changed unnoticed\n{r}");
        }
        // Without the user-presence flag (nobody touched the key): refused.
        fs::write(&sig, sk_sshsig(&public, &manifest, 0x00, &sign)).unwrap();
        let r = verify_dir(dir.path(), &Trust::AllowedSigners(signers.clone())).unwrap();
        assert!(!r.ok(), "{name}: {r}");
        assert!(
            matches!(&r.signatures[0].status, SigStatus::Invalid { reason } if reason.contains("user-presence")),
            "{name}: {r}"
        );
    }
}

fn chmod(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
}

#[test]
fn private_key_others_may_read_is_refused_as_openssh_refuses_it() {
    let keys = tempfile::tempdir().unwrap();
    let key = new_key(keys.path(), "vendor");
    for mode in [0o644, 0o640, 0o604, 0o660, 0o602, 0o610] {
        chmod(&key, mode);
        let dir = report_dir(false);
        let err = sign_dir(dir.path(), &key).unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, SignError::Key { .. }), "{mode:o}: {msg}");
        assert!(
            msg.contains(&format!("permissions {mode:04o} are too open")),
            "{msg}"
        );
        assert!(
            msg.contains(&format!("chmod 600 {}", key.display())),
            "{msg}"
        );
        assert!(!dir.path().join(SIGNATURE_FILE).exists(), "{mode:o}");
        assert!(!dir.path().join(MANIFEST_FILE).exists(), "{mode:o}");
        // Checked before any work is done (run --sign-key checks the key before the run).
        assert!(signing_key_info(&key).is_err(), "{mode:o}");
    }
    // OpenSSH refuses the same file ("UNPROTECTED PRIVATE KEY FILE").
    chmod(&key, 0o644);
    assert!(!ssh_sign_file(manifested_dir().path(), &key));
    // Reading its public half is not signing: the fingerprint and allowed_signers line still work.
    assert_eq!(
        key_fingerprint(&key).unwrap(),
        key_fingerprint(&pub_of(&key)).unwrap()
    );
    // Modes only the owner can use sign.
    for mode in [0o600, 0o400, 0o700] {
        chmod(&key, mode);
        let dir = report_dir(false);
        sign_dir(dir.path(), &key).unwrap_or_else(|e| panic!("{mode:o}: {e}"));
        assert!(dir.path().join(SIGNATURE_FILE).exists());
    }
}

#[test]
fn pem_private_keys_are_named_with_the_command_that_converts_them() {
    let keys = tempfile::tempdir().unwrap();
    for (name, type_args, said) in [
        (
            "ec.pem",
            &["-t", "ecdsa", "-b", "256", "-m", "PEM"][..],
            "an ecdsa private key in pem (sec1) format",
        ),
        (
            "rsa.pem",
            &["-t", "rsa", "-b", "2048", "-m", "PEM"][..],
            "an rsa private key in pem (pkcs#1) format",
        ),
        (
            "ec.p8",
            &["-t", "ecdsa", "-b", "256", "-m", "PKCS8"][..],
            "a private key in pem (pkcs#8) format",
        ),
    ] {
        let key = openssh_key(keys.path(), name, type_args, "");
        assert!(
            !fs::read_to_string(&key).unwrap().contains("OPENSSH"),
            "{name}"
        );
        let convert = format!("ssh-keygen -p -f {}", key.display());
        let dir = report_dir(false);
        let err = sign_dir(dir.path(), &key).unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, SignError::Key { .. }), "{name}: {msg}");
        assert!(msg.contains(said), "{name}: {msg}");
        assert!(msg.contains(&convert), "{name}: {msg}");
        assert!(!msg.contains(".pub"), "{name}: not a public key: {msg}");
        assert!(!dir.path().join(SIGNATURE_FILE).exists());
        // The other readers of a key file say the same.
        for msg in [
            key_fingerprint(&key).unwrap_err().to_string(),
            allowed_signers_line(&key, "ops@example.com")
                .unwrap_err()
                .to_string(),
            verify_dir(dir.path(), &Trust::PublicKey(key.clone()))
                .unwrap_err()
                .to_string(),
        ] {
            assert!(
                msg.contains(said) && msg.contains(&convert),
                "{name}: {msg}"
            );
        }
        // The command it names does convert the key, which then signs.
        let out = ssh_keygen()
            .args(["-p", "-N", "", "-P", "", "-f"])
            .arg(&key)
            .output()
            .unwrap();
        assert!(out.status.success(), "{name}: {out:?}");
        let info = sign_dir(dir.path(), &key).unwrap();
        assert_eq!(info.fingerprint, key_fingerprint(&pub_of(&key)).unwrap());
    }
    // A public key given as the private key is still told so.
    let key = new_key(keys.path(), "ops");
    let err = sign_dir(report_dir(false).path(), &pub_of(&key)).unwrap_err();
    assert!(err.to_string().contains("not the .pub"), "{err}");
}

#[test]
fn a_second_signature_by_the_same_key_is_a_duplicate_not_a_second_party() {
    let keys = tempfile::tempdir().unwrap();
    let vendor = new_key(keys.path(), "vendor");
    let customer = new_key(keys.path(), "customer");
    let signers = allowed_signers(
        keys.path(),
        &[
            (&vendor, "vendor@example.com"),
            (&customer, "customer@example.com"),
        ],
    );
    let trust = Trust::AllowedSigners(signers.clone());
    let second = "nodecert-manifest.txt.2.sig";

    // A copied .sig: the same bytes under a countersignature's name.
    let dir = report_dir(false);
    let first = sign_dir(dir.path(), &vendor).unwrap();
    fs::copy(&first.signature, dir.path().join(second)).unwrap();
    // Each file alone is a valid signature, for OpenSSH too: what lies is the count.
    assert!(ssh_verify(
        dir.path(),
        second,
        &signers,
        "vendor@example.com"
    ));
    for trust in [trust.clone(), Trust::Untrusted] {
        let r = verify_dir(dir.path(), &trust).unwrap();
        assert!(!r.ok(), "{r}");
        assert_eq!(
            r.signatures[1].status,
            SigStatus::Duplicate {
                of: SIGNATURE_FILE.into()
            },
            "{r}"
        );
        assert!(
            r.problems
                .iter()
                .any(|p| p.starts_with(second) && p.contains("not a countersignature")),
            "{r}"
        );
        assert!(
            r.to_string()
                .contains(&format!("signature {second}: duplicate")),
            "{r}"
        );
    }
    assert_eq!(
        verify_dir(dir.path(), &trust).unwrap().signatures[0].status,
        SigStatus::Trusted
    );
    // Nobody countersigns a folder that claims one party twice, not even a real second party.
    let err = sign_dir(dir.path(), &customer).unwrap_err();
    assert!(matches!(err, SignError::NotSignable { .. }), "{err}");
    assert!(err.to_string().contains("not a countersignature"), "{err}");
    assert!(!dir.path().join("nodecert-manifest.txt.3.sig").exists());
    // Without the copy, the real second party countersigns and both count.
    fs::remove_file(dir.path().join(second)).unwrap();
    sign_dir(dir.path(), &customer).unwrap();
    let r = verify_dir(dir.path(), &trust).unwrap();
    assert!(r.ok(), "{r}");
    assert!(r.signatures.iter().all(|s| s.status == SigStatus::Trusted));

    // The same key signing again with ssh-keygen: other bytes (ECDSA), same party.
    let ec = openssh_key(keys.path(), "ec", &["-t", "ecdsa", "-b", "256"], "");
    let ec_signers = allowed_signers(keys.path(), &[(&ec, "ec@example.com")]);
    let dir = report_dir(false);
    sign_dir(dir.path(), &ec).unwrap();
    ssh_sign_into(dir.path(), &ec, second);
    assert_ne!(
        fs::read(dir.path().join(SIGNATURE_FILE)).unwrap(),
        fs::read(dir.path().join(second)).unwrap()
    );
    let r = verify_dir(dir.path(), &Trust::AllowedSigners(ec_signers)).unwrap();
    assert!(!r.ok(), "{r}");
    assert!(
        matches!(&r.signatures[1].status, SigStatus::Duplicate { of } if of == SIGNATURE_FILE),
        "{r}"
    );
    // And nodecert itself never writes one.
    fs::remove_file(dir.path().join(second)).unwrap();
    let err = sign_dir(dir.path(), &ec).unwrap_err();
    assert!(matches!(err, SignError::AlreadySigned { .. }), "{err}");
    assert!(!dir.path().join(second).exists());
}

// ---------------------------------------------------------------------------
// What verification reads, and where it stops

/// `text` with a comment line of `pad` bytes after its first line: a manifest stays valid
/// (comments with unknown keys are ignored) and signed as a whole.
fn padded_manifest(dir: &Path, pad: usize) {
    let p = dir.join(MANIFEST_FILE);
    let text = fs::read_to_string(&p).unwrap();
    let (first, rest) = text.split_once('\n').unwrap();
    let filler = "x".repeat(pad.saturating_sub(text.len() + "# padding: \n".len()));
    fs::write(&p, format!("{first}\n# padding: {filler}\n{rest}")).unwrap();
}

/// Whether `ssh-keygen -Y verify` accepts the folder's first signature as made by `key`.
fn ssh_verify_key(dir: &Path, key: &Path) -> bool {
    let signers = allowed_signers(key.parent().unwrap(), &[]);
    let line = allowed_signers_line(&pub_of(key), "k@example.com").unwrap();
    fs::write(&signers, format!("{line}\n")).unwrap();
    ssh_verify(dir, SIGNATURE_FILE, &signers, "k@example.com")
}

#[test]
fn a_manifest_up_to_4_mib_and_a_signature_up_to_64_kib_are_read_and_larger_ones_refused() {
    let keys = tempfile::tempdir().unwrap();
    let key = new_key(keys.path(), "vendor");
    let trust = Trust::PublicKey(pub_of(&key));

    // A 3 MiB manifest, signed by ssh-keygen: verified.
    let dir = manifested_dir();
    padded_manifest(dir.path(), 3 << 20);
    assert!(ssh_sign_file(dir.path(), &key));
    let r = verify_dir(dir.path(), &trust).unwrap();
    assert!(r.ok(), "{r}");

    // A signature followed by 60 KiB of blank lines, which OpenSSH ignores: verified.
    let sig = dir.path().join(SIGNATURE_FILE);
    let signature = fs::read_to_string(&sig).unwrap();
    fs::write(&sig, format!("{signature}{}", "\n".repeat(60 << 10))).unwrap();
    assert!(ssh_verify_key(dir.path(), &key));
    let r = verify_dir(dir.path(), &trust).unwrap();
    assert!(r.ok(), "{r}");
    // One byte over 64 KiB: not read.
    let over = (64 << 10) + 1 - signature.len();
    fs::write(&sig, format!("{signature}{}", "\n".repeat(over))).unwrap();
    assert_eq!(fs::metadata(&sig).unwrap().len(), (64 << 10) + 1);
    let r = verify_dir(dir.path(), &trust).unwrap();
    assert!(!r.ok(), "{r}");
    assert!(
        matches!(&r.signatures[0].status, SigStatus::Invalid { reason } if reason.contains("larger than the 64 KiB limit")),
        "{r}"
    );

    // A manifest one byte over 4 MiB: a problem that says so, not "missing".
    let dir = manifested_dir();
    padded_manifest(dir.path(), (4 << 20) + 1);
    assert_eq!(
        fs::metadata(dir.path().join(MANIFEST_FILE)).unwrap().len(),
        (4 << 20) + 1
    );
    let r = verify_dir(dir.path(), &Trust::Untrusted).unwrap();
    assert!(r.manifest.is_none());
    assert!(
        r.problems
            .iter()
            .any(|p| p.starts_with(MANIFEST_FILE) && p.contains("larger than the 4 MiB limit")),
        "{r}"
    );
}

#[test]
fn a_listed_file_or_manifest_that_is_a_link_is_unreadable_not_missing() {
    let dir = manifested_dir();
    let p = dir.path();
    let elsewhere = tempfile::tempdir().unwrap();
    fs::write(
        elsewhere.path().join("report.md"),
        "# nodecert\n\nPASS: 8 GPUs\n",
    )
    .unwrap();
    fs::remove_file(p.join("report.md")).unwrap();
    std::os::unix::fs::symlink(elsewhere.path().join("report.md"), p.join("report.md")).unwrap();
    let r = verify_dir(p, &Trust::Untrusted).unwrap();
    let md = r.files.iter().find(|f| f.name == "report.md").unwrap();
    assert!(
        matches!(md.status, FileStatus::Unreadable { .. }),
        "{:?}",
        md.status
    );
    assert!(!r.problems.iter().any(|x| x == "report.md: missing"), "{r}");

    // The manifest itself through a link: not read, and not called missing.
    let m = elsewhere.path().join(MANIFEST_FILE);
    fs::rename(p.join(MANIFEST_FILE), &m).unwrap();
    std::os::unix::fs::symlink(&m, p.join(MANIFEST_FILE)).unwrap();
    let r = verify_dir(p, &Trust::Untrusted).unwrap();
    assert!(r.manifest.is_none(), "{r}");
    let said: Vec<&String> = r
        .problems
        .iter()
        .filter(|x| x.starts_with(&format!("{MANIFEST_FILE}:")))
        .collect();
    assert_eq!(said.len(), 1, "{r}");
    assert_ne!(said[0], &format!("{MANIFEST_FILE}: missing"), "{r}");
}

#[test]
fn evidence_is_cross_checked_only_when_it_matches_and_must_agree_with_the_manifest() {
    // Listed but missing: one problem, the missing file, and no failed read of it.
    let dir = manifested_dir();
    fs::remove_file(dir.path().join("evidence.json")).unwrap();
    let r = verify_dir(dir.path(), &Trust::Untrusted).unwrap();
    let about: Vec<&String> = r
        .problems
        .iter()
        .filter(|x| x.contains("evidence.json"))
        .collect();
    assert_eq!(about, ["evidence.json: missing"], "{r}");

    // Simulated evidence under a manifest edited to say real results: refused by name.
    let dir = report_dir(true);
    let meta = ManifestMeta {
        nodecert_version: "9.9.9".into(),
        simulated: Some(true),
    };
    write_manifest(dir.path(), &["evidence.json", "report.md"], &meta).unwrap();
    let path = dir.path().join(MANIFEST_FILE);
    let text = fs::read_to_string(&path).unwrap();
    let edited: String = text
        .replace("\n# simulated: true\n", "\n# simulated: false\n")
        .lines()
        .filter(|l| *l != SIMULATED_WARNING)
        .map(|l| format!("{l}\n"))
        .collect();
    assert_ne!(edited, text);
    fs::write(&path, edited).unwrap();
    let r = verify_dir(dir.path(), &Trust::Untrusted).unwrap();
    assert_eq!(r.simulated, Some(false), "{r}");
    assert!(
        r.problems.iter().any(|x| x
            == &format!(
                "evidence.json: says simulated: true but {MANIFEST_FILE} says simulated: false"
            )),
        "{r}"
    );
}

#[test]
fn allowed_signers_validity_periods_are_honoured() {
    let keys = tempfile::tempdir().unwrap();
    let key = new_key(keys.path(), "vendor");
    let dir = report_dir(false);
    sign_dir(dir.path(), &key).unwrap();
    let line = allowed_signers_line(&pub_of(&key), "vendor@example.com").unwrap();
    let (who, rest) = line.split_once(" namespaces=\"nodecert\" ").unwrap();
    for (option, trusted) in [
        ("valid-after=\"20200101\"", true),
        ("valid-after=\"29990101\"", false),
        ("valid-before=\"29990101\"", true),
        ("valid-before=\"20200101\"", false),
    ] {
        let signers = keys.path().join("allowed_signers");
        fs::write(
            &signers,
            format!("{who} namespaces=\"nodecert\",{option} {rest}\n"),
        )
        .unwrap();
        let r = verify_dir(dir.path(), &Trust::AllowedSigners(signers.clone())).unwrap();
        assert_eq!(r.ok(), trusted, "{option}: {r}");
        if !trusted {
            assert!(
                matches!(&r.signatures[0].status, SigStatus::Untrusted { reason } if reason.contains("outside its validity period")),
                "{option}: {r}"
            );
        }
        // OpenSSH agrees.
        assert_eq!(
            ssh_verify(dir.path(), SIGNATURE_FILE, &signers, "vendor@example.com"),
            trusted,
            "{option}"
        );
    }
}

#[test]
fn signatures_nodecert_cannot_check_are_named_and_never_verify() {
    let keys = tempfile::tempdir().unwrap();
    // RSA up to 4096 bits is checked; above, and ECDSA on P-521, are left to ssh-keygen.
    for (name, args, supported, says) in [
        ("rsa-4096", &["-t", "rsa", "-b", "4096"][..], true, ""),
        (
            "rsa-4160",
            &["-t", "rsa", "-b", "4160"][..],
            false,
            "rsa keys of more than 4096 bits (this one: 4160)",
        ),
        (
            "ecdsa-p521",
            &["-t", "ecdsa", "-b", "521"][..],
            false,
            "signatures by ecdsa-sha2-nistp521 keys are not supported",
        ),
    ] {
        let key = openssh_key(keys.path(), name, args, "");
        let id = format!("{name}@example.com");
        let signers = allowed_signers(keys.path(), &[(&key, &id)]);
        let dir = manifested_dir();
        assert!(ssh_sign_file(dir.path(), &key), "{name}");
        assert!(
            ssh_verify(dir.path(), SIGNATURE_FILE, &signers, &id),
            "{name}"
        );
        let r = verify_dir(dir.path(), &Trust::AllowedSigners(signers)).unwrap();
        assert_eq!(r.ok(), supported, "{name}: {r}");
        if !supported {
            assert!(
                matches!(&r.signatures[0].status, SigStatus::Unsupported { reason } if reason.contains(says)),
                "{name}: {r}"
            );
        }
    }
}

#[test]
fn unlisted_files_are_noted_only_when_there_are_some_and_a_manifest_to_miss_them() {
    let keys = tempfile::tempdir().unwrap();
    let key = new_key(keys.path(), "vendor");
    let dir = report_dir(false);
    sign_dir(dir.path(), &key).unwrap();
    let trust = Trust::PublicKey(pub_of(&key));
    let r = verify_dir(dir.path(), &trust).unwrap();
    assert!(r.ok() && r.notes.is_empty(), "{r}");
    fs::write(dir.path().join("extra.txt"), "x").unwrap();
    let r = verify_dir(dir.path(), &trust).unwrap();
    assert!(r.ok(), "{r}");
    assert_eq!(
        r.notes,
        ["not covered by the manifest (unsigned): extra.txt"]
    );
    // No manifest: nothing is "not covered", the folder is simply not signed.
    let plain = tempfile::tempdir().unwrap();
    fs::write(plain.path().join("x.txt"), "x").unwrap();
    let r = verify_dir(plain.path(), &Trust::Untrusted).unwrap();
    assert!(r.notes.is_empty(), "{r}");
    assert!(!r.ok());
}

#[test]
fn signing_lists_the_pages_present_and_always_the_evidence() {
    let keys = tempfile::tempdir().unwrap();
    let key = new_key(keys.path(), "ops");
    // No HTML page: the manifest lists what is there.
    let dir = report_dir(true);
    fs::remove_file(dir.path().join("report.html")).unwrap();
    sign_dir(dir.path(), &key).unwrap();
    let m = fs::read_to_string(dir.path().join(MANIFEST_FILE)).unwrap();
    let listed: Vec<&str> = m
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| &l[66..])
        .collect();
    assert_eq!(listed, ["evidence.json", "report.md"]);
    // No evidence: refused by name, nothing written.
    let dir = report_dir(true);
    fs::remove_file(dir.path().join("evidence.json")).unwrap();
    let e = sign_dir(dir.path(), &key).unwrap_err().to_string();
    assert!(e.contains("evidence.json"), "{e}");
    assert!(!dir.path().join(MANIFEST_FILE).exists());
}

/// About one ECDSA key in 256 that ssh-keygen makes has a private scalar with a leading zero,
/// which OpenSSH writes one byte short (an mpint). Such a key signs, and ssh-keygen verifies it.
#[test]
fn an_ecdsa_key_with_a_short_scalar_signs() {
    use std::os::unix::fs::PermissionsExt;
    let keys = tempfile::tempdir().unwrap();
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/keys");
    let key = keys.path().join("short");
    fs::copy(fixture.join("ecdsa-p256-short-scalar"), &key).unwrap();
    fs::copy(fixture.join("ecdsa-p256-short-scalar.pub"), pub_of(&key)).unwrap();
    fs::set_permissions(&key, fs::Permissions::from_mode(0o600)).unwrap();
    // The fixture is what it claims: ssh-key alone refuses it.
    let text = fs::read_to_string(&key).unwrap();
    assert!(ssh_key::PrivateKey::from_openssh(&text).is_err());

    let id = "short-scalar@test";
    let signers = allowed_signers(keys.path(), &[(&key, id)]);
    let dir = report_dir(false);
    let info = sign_dir(dir.path(), &key).unwrap();
    assert_eq!(sig_algorithm(&info.signature), "ecdsa-sha2-nistp256");
    assert!(ssh_verify(dir.path(), SIGNATURE_FILE, &signers, id));
    let r = verify_dir(dir.path(), &Trust::AllowedSigners(signers)).unwrap();
    assert!(r.ok(), "{r}");
    // Its public half is the one ssh-keygen derives.
    assert_eq!(
        key_fingerprint(&key).unwrap(),
        key_fingerprint(&pub_of(&key)).unwrap()
    );
}

/// A manifest that lists a file of a terabyte (sparse, so it costs nothing to plant in a node's
/// folder) is answered at once, the file unread: verification and `fleet report` cannot be
/// held for hours by one folder.
#[test]
fn a_listed_file_larger_than_a_report_folder_holds_is_not_read() {
    let dir = report_dir(false);
    let huge = fs::File::create(dir.path().join("pad.bin")).unwrap();
    huge.set_len(1 << 40).unwrap();
    let e = write_manifest(
        dir.path(),
        &["evidence.json", "report.md", "pad.bin"],
        &ManifestMeta::default(),
    )
    .unwrap_err();
    assert!(e.to_string().contains("not read"), "{e}");
    // A manifest written by hand that lists it: one problem, the file left unread.
    write_manifest(
        dir.path(),
        &["evidence.json", "report.md"],
        &ManifestMeta::default(),
    )
    .unwrap();
    let m = dir.path().join(MANIFEST_FILE);
    let mut text = fs::read_to_string(&m).unwrap();
    text.push_str(&format!("{}  pad.bin\n", "a".repeat(64)));
    fs::write(&m, text).unwrap();
    let t0 = std::time::Instant::now();
    let r = verify_dir(dir.path(), &Trust::Untrusted).unwrap();
    assert!(!r.ok());
    let pad = r.files.iter().find(|f| f.name == "pad.bin").unwrap();
    assert!(
        matches!(&pad.status, FileStatus::Unreadable { reason } if reason.contains("not read")),
        "{:?}",
        pad.status
    );
    assert!(t0.elapsed().as_secs() < 60, "{:?}", t0.elapsed());
}
