//! Key files: generating, reading, checking the algorithm, and signing (with
//! the RSA workaround).

use std::ffi::OsString;
use std::fs;
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
    write_new(out, pem.as_bytes(), 0o600)?;
    if let Err(e) = write_new(&public, format!("{line}\n").as_bytes(), 0o644) {
        let _ = fs::remove_file(out);
        return Err(e);
    }
    Ok(KeyInfo {
        private_key: out.to_path_buf(),
        public_key: public,
        public_key_line: line,
        fingerprint: key.fingerprint(HashAlg::Sha256).to_string(),
    })
}

fn is_private_pem(text: &str) -> bool {
    text.trim_start()
        .starts_with("-----BEGIN OPENSSH PRIVATE KEY-----")
}

/// Read the public key of a private (OpenSSH format) or public key file.
pub(super) fn read_any_public_key(path: &Path) -> Result<PublicKey, SignError> {
    let bytes = read_limited(path, MAX_KEY_BYTES, "read key")?;
    let text = String::from_utf8(bytes).map_err(|_| key_err(path, "not a text key file"))?;
    if is_private_pem(&text) {
        let k = PrivateKey::from_openssh(&text).map_err(|e| {
            key_err(
                path,
                format!("not an openssh private key: {}", lower(&e).to_lowercase()),
            )
        })?;
        Ok(k.public_key().clone())
    } else {
        let line = text
            .lines()
            .map(str::trim)
            .find(|l| !l.is_empty() && !l.starts_with('#'))
            .ok_or_else(|| key_err(path, "no public key found"))?;
        PublicKey::from_openssh(line).map_err(|e| {
            key_err(
                path,
                format!("not an openssh public key: {}", lower(&e).to_lowercase()),
            )
        })
    }
}

pub(super) fn read_signing_key(path: &Path) -> Result<PrivateKey, SignError> {
    let bytes = read_limited(path, MAX_KEY_BYTES, "read private key")?;
    let text = String::from_utf8(bytes).map_err(|_| key_err(path, "not a text key file"))?;
    if !is_private_pem(&text) {
        return Err(key_err(
            path,
            "not an openssh private key (give the private key, not the .pub)",
        ));
    }
    let key = PrivateKey::from_openssh(&text).map_err(|e| {
        key_err(
            path,
            format!("not an openssh private key: {}", lower(&e).to_lowercase()),
        )
    })?;
    if key.is_encrypted() {
        return Err(SignError::EncryptedKey(path.to_path_buf()));
    }
    check_signing_algorithm(path, &key)?;
    Ok(key)
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
