//! Key files: generating, reading, checking the algorithm, and signing (with
//! the RSA workaround).

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use serde::Serialize;
use ssh_key::rand_core::OsRng;
use ssh_key::{Algorithm, EcdsaCurve, HashAlg, LineEnding, PrivateKey, PublicKey, SshSig};

use super::*;

const MAX_KEY_BYTES: u64 = 64 * 1024;

/// A freshly generated key pair.
#[derive(Debug, Clone, Serialize)]
pub struct KeyInfo {
    pub private_key: PathBuf,
    pub public_key: PathBuf,
    /// The `.pub` line, e.g. `ssh-ed25519 AAAA... comment`.
    pub public_key_line: String,
    /// As `ssh-keygen -l` prints it: `SHA256:...`.
    pub fingerprint: String,
}

fn pub_path(out: &Path) -> PathBuf {
    let mut s = OsString::from(out.as_os_str());
    s.push(".pub");
    PathBuf::from(s)
}

fn key_err(path: &Path, reason: impl Into<String>) -> SignError {
    SignError::Key {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

/// Generate an Ed25519 key pair: the OpenSSH private key at `out` (mode 0600,
/// unencrypted) and the public key at `out` + `.pub`. Refuses to overwrite
/// either file.
pub fn keygen(out: &Path, comment: &str) -> Result<KeyInfo, SignError> {
    if comment.chars().any(|c| c.is_control()) {
        return Err(SignError::Comment(
            "must not contain control characters or line breaks".into(),
        ));
    }
    let public = pub_path(out);
    for p in [out, public.as_path()] {
        if p.symlink_metadata().is_ok() {
            return Err(SignError::Exists(p.to_path_buf()));
        }
    }
    let mut key = PrivateKey::random(&mut OsRng, Algorithm::Ed25519)
        .map_err(|e| key_err(out, format!("key generation failed: {}", lower(&e))))?;
    key.set_comment(comment);
    let pem = key
        .to_openssh(LineEnding::LF)
        .map_err(|e| key_err(out, format!("cannot encode private key: {}", lower(&e))))?;
    let line = key
        .public_key()
        .to_openssh()
        .map_err(|e| key_err(&public, format!("cannot encode public key: {}", lower(&e))))?;
    // Both files in one folder, opened once. When the public key cannot be written, the
    // private key is removed only while it is still the file written here.
    let (dir, name) = crate::fsio::split(out).map_err(io_err("create", out))?;
    let pub_name = public.file_name().unwrap_or_default();
    let dir = crate::fsio::write::Dir::open_trusted(dir).map_err(io_err("create", out))?;
    let id = map_new(out, dir.create_new_id(name, pem.as_bytes(), 0o600))?;
    let written = dir.create_new(pub_name, format!("{line}\n").as_bytes(), 0o644);
    if let Err(e) = map_new(&public, written) {
        let _ = dir.remove_if_same(name, id);
        return Err(e);
    }
    Ok(KeyInfo {
        private_key: out.to_path_buf(),
        public_key: public,
        public_key_line: line,
        fingerprint: key.fingerprint(HashAlg::Sha256).to_string(),
    })
}

/// What a key file holds, from its first line.
enum KeyText<'a> {
    /// `-----BEGIN OPENSSH PRIVATE KEY-----`.
    OpenSshPrivate,
    /// Another PEM private key (`RSA PRIVATE KEY`, `EC PRIVATE KEY`, `PRIVATE KEY`, ...): the label.
    PemPrivate(&'a str),
    /// Anything else (a public key line, or not a key).
    Other,
}

fn key_text(text: &str) -> KeyText<'_> {
    let first = text.trim_start().lines().next().unwrap_or("").trim_end();
    match first
        .strip_prefix("-----BEGIN ")
        .and_then(|l| l.strip_suffix("-----"))
    {
        Some("OPENSSH PRIVATE KEY") => KeyText::OpenSshPrivate,
        Some(label) if label.ends_with("PRIVATE KEY") => KeyText::PemPrivate(label),
        _ => KeyText::Other,
    }
}

/// A private key in a PEM format nodecert does not read: what it is and how to convert it.
fn pem_private_key_err(path: &Path, label: &str) -> SignError {
    let what = match label {
        "RSA PRIVATE KEY" => "an rsa private key in pem (pkcs#1) format".to_string(),
        "EC PRIVATE KEY" => "an ecdsa private key in pem (sec1) format".to_string(),
        "DSA PRIVATE KEY" => "a dsa private key in pem format".to_string(),
        "PRIVATE KEY" => "a private key in pem (pkcs#8) format".to_string(),
        "ENCRYPTED PRIVATE KEY" => "an encrypted private key in pem (pkcs#8) format".to_string(),
        other => format!("a pem private key ({other:?})"),
    };
    key_err(
        path,
        format!(
            "{what}, as openssl and `ssh-keygen -m PEM` write it; nodecert reads openssh private keys: \
convert it with `ssh-keygen -p -f {}` (it rewrites the file in the openssh format)",
            super::commands::sh_quote(&path.to_string_lossy())
        ),
    )
}

/// The text of a key file, and its permission bits.
fn read_key_text(path: &Path, what: &'static str) -> Result<(String, u32), SignError> {
    use std::os::unix::fs::PermissionsExt;
    let f = crate::fsio::read::open(path, true).map_err(io_err(what, path))?;
    let mode = f
        .metadata()
        .map_err(io_err(what, path))?
        .permissions()
        .mode();
    let bytes = crate::fsio::read::read_limited(f, MAX_KEY_BYTES, "this file")
        .map_err(io_err(what, path))?;
    let text = String::from_utf8(bytes).map_err(|_| key_err(path, "not a text key file"))?;
    Ok((text, mode))
}

fn parse_private_key(path: &Path, text: &str) -> Result<PrivateKey, SignError> {
    PrivateKey::from_openssh(text)
        .or_else(|e| {
            // One ECDSA key in 256 that OpenSSH wrote has a short scalar (see short_scalar).
            super::short_scalar::armored_body(text)
                .and_then(|body| super::short_scalar::pad_short_scalar(&body))
                .ok_or(e)
                .and_then(|fixed| PrivateKey::from_bytes(&fixed))
        })
        .map_err(|e| {
            key_err(
                path,
                format!("not an openssh private key: {}", lowercase(&e)),
            )
        })
}

/// Read the public key of a private (OpenSSH format) or public key file.
pub(super) fn read_any_public_key(path: &Path) -> Result<PublicKey, SignError> {
    let (text, _) = read_key_text(path, "read key")?;
    match key_text(&text) {
        KeyText::OpenSshPrivate => Ok(parse_private_key(path, &text)?.public_key().clone()),
        KeyText::PemPrivate(label) => Err(pem_private_key_err(path, label)),
        KeyText::Other => {
            let mut lines = text
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty() && !l.starts_with('#'));
            let line = lines
                .next()
                .ok_or_else(|| key_err(path, "no public key found"))?;
            // One key is one signer: a file of several would be trusted by its first alone.
            let more = lines.count();
            if more > 0 {
                return Err(key_err(
                    path,
                    format!(
                        "{} keys in one file: a public key file holds one (trust several \
                         signers with --allowed-signers FILE)",
                        more + 1
                    ),
                ));
            }
            PublicKey::from_openssh(line).map_err(|e| {
                key_err(
                    path,
                    format!("not an openssh public key: {}", lowercase(&e)),
                )
            })
        }
    }
}

/// The unencrypted OpenSSH private key at `path`, of a type nodecert signs with, readable by its
/// owner only.
pub(super) fn read_signing_key(path: &Path) -> Result<PrivateKey, SignError> {
    let (text, mode) = read_key_text(path, "read private key")?;
    let key = match key_text(&text) {
        KeyText::OpenSshPrivate => parse_private_key(path, &text)?,
        KeyText::PemPrivate(label) => return Err(pem_private_key_err(path, label)),
        KeyText::Other => {
            return Err(key_err(
                path,
                "not an openssh private key (give the private key, not the .pub)",
            ))
        }
    };
    if key.is_encrypted() {
        return Err(SignError::EncryptedKey(path.to_path_buf()));
    }
    check_signing_algorithm(path, &key)?;
    check_private_mode(path, mode)?;
    Ok(key)
}

/// A private key that group or others may read (or write) is refused, as `ssh-keygen -Y sign`
/// refuses it ("UNPROTECTED PRIVATE KEY FILE"): anyone who could read it can sign as its owner,
/// and a certificate signed with it proves nothing.
fn check_private_mode(path: &Path, mode: u32) -> Result<(), SignError> {
    if mode & 0o077 == 0 {
        return Ok(());
    }
    Err(key_err(
        path,
        format!(
            "unprotected private key file: permissions {:04o} are too open, a private key must be \
readable by its owner only (OpenSSH refuses it too); run `chmod 600 {}`, and replace the key if \
others may have copied it",
            mode & 0o7777,
            super::commands::sh_quote(&path.to_string_lossy())
        ),
    ))
}

/// Largest RSA modulus the rsa crate accepts (bits).
pub(super) const MAX_RSA_BITS: usize = 4096;

/// The modulus size of an RSA public key, in bits (0 for other keys).
pub(super) fn rsa_bits(key: &ssh_key::public::KeyData) -> usize {
    key.rsa()
        .and_then(|k| k.n.as_positive_bytes())
        .map_or(0, |n| n.len() * 8)
}

/// The key types nodecert signs with: Ed25519, ECDSA P-256/P-384, RSA (as
/// rsa-sha2-512, as `ssh-keygen -Y sign` does). Security keys sign only on
/// their token, so they are sent to `ssh-keygen -Y sign`.
fn check_signing_algorithm(path: &Path, key: &PrivateKey) -> Result<(), SignError> {
    let algorithm = key.algorithm();
    match &algorithm {
        Algorithm::Ed25519 => Ok(()),
        Algorithm::Ecdsa {
            curve: EcdsaCurve::NistP256 | EcdsaCurve::NistP384,
        } => Ok(()),
        Algorithm::Rsa { .. } => {
            let bits = rsa_bits(key.public_key().key_data());
            if bits > MAX_RSA_BITS {
                return Err(key_err(
                    path,
                    format!(
                        "rsa keys of more than {MAX_RSA_BITS} bits are not supported (this one has {bits}); sign with `ssh-keygen -Y sign -n {NAMESPACE}`, or use an ed25519 key"
                    ),
                ));
            }
            Ok(())
        }
        sk if is_security_key(sk) => Err(key_err(
            path,
            format!(
                "{algorithm} is a security key (FIDO): its private half never leaves the token, so nodecert cannot sign with it; \
sign with `ssh-keygen -Y sign -n {NAMESPACE} -f KEY < DIR/{MANIFEST_FILE} > DIR/{MANIFEST_FILE}.N.sig` \
(N = 2, 3, ... for a countersignature, or {SIGNATURE_FILE} for the first) and check it with `nodecert verify`"
            ),
        )),
        other => Err(key_err(
            path,
            format!(
                "key type {other} is not supported for signing (use ed25519, ecdsa nistp256/nistp384 or rsa)"
            ),
        )),
    }
}

/// Check that `key` is a private key [`sign_dir`] can use, before any work is
/// done with it. Returns its fingerprint and its comment.
pub fn signing_key_info(key: &Path) -> Result<(String, String), SignError> {
    let k = read_signing_key(key)?;
    Ok((
        k.fingerprint(HashAlg::Sha256).to_string(),
        k.comment().to_string(),
    ))
}

/// The SHA256 fingerprint (`SHA256:...`, as `ssh-keygen -l` prints it) of a
/// private or public key file.
pub fn key_fingerprint(key: &Path) -> Result<String, SignError> {
    Ok(read_any_public_key(key)?
        .fingerprint(HashAlg::Sha256)
        .to_string())
}

pub(super) fn is_security_key(algorithm: &Algorithm) -> bool {
    matches!(
        algorithm,
        Algorithm::SkEd25519 | Algorithm::SkEcdsaSha2NistP256
    )
}

/// An SSHSIG over `manifest` in [`NAMESPACE`], SHA-512 message hash.
pub(super) fn sign_manifest(key: &PrivateKey, manifest: &[u8]) -> Result<SshSig, ssh_key::Error> {
    match key.key_data().rsa() {
        Some(rsa_key) => sign_rsa(rsa_key, key.public_key().key_data(), manifest),
        None => key.sign(NAMESPACE, HashAlg::Sha512, manifest),
    }
}

/// RSA signing with rsa-sha2-512, as `ssh-keygen -Y sign` does. ssh-key 0.6.7
/// cannot do it itself: it builds the private key from p twice instead of p
/// and q, so the rsa crate rejects it.
fn sign_rsa(
    key: &ssh_key::private::RsaKeypair,
    public: &ssh_key::public::KeyData,
    manifest: &[u8],
) -> Result<SshSig, ssh_key::Error> {
    use rsa::signature::{SignatureEncoding, Signer};
    let uint = |m: &ssh_key::Mpint| rsa::BigUint::try_from(m);
    let private = rsa::RsaPrivateKey::from_components(
        uint(&key.public.n)?,
        uint(&key.public.e)?,
        uint(&key.private.d)?,
        vec![uint(&key.private.p)?, uint(&key.private.q)?],
    )
    .map_err(|_| ssh_key::Error::Crypto)?;
    let signed = SshSig::signed_data(NAMESPACE, HashAlg::Sha512, manifest)?;
    let signature = rsa::pkcs1v15::SigningKey::<sha2::Sha512>::new(private)
        .try_sign(&signed)
        .map_err(|_| ssh_key::Error::Crypto)?;
    let signature = ssh_key::Signature::new(
        Algorithm::Rsa {
            hash: Some(HashAlg::Sha512),
        },
        signature.to_vec(),
    )?;
    SshSig::new(public.clone(), NAMESPACE, HashAlg::Sha512, signature)
}
