//! The PEM armor of SSH signatures, in the exact form OpenSSH writes.

use ssh_key::{Algorithm, LineEnding, PublicKey, SshSig};

const SIG_BEGIN: &str = "-----BEGIN SSH SIGNATURE-----\n";
const SIG_END: &str = "-----END SSH SIGNATURE-----\n";
/// Base64 characters per line of an armored SSH signature (OpenSSH's sshsig.c).
const SIG_LINE_WIDTH: usize = 70;
/// Flag of a security key signature: the user touched the key.
pub(super) const SK_USER_PRESENT: u8 = 0x01;

/// An armored signature as OpenSSH reads it: without the ASCII white space
/// around it, CRLF line breaks as LF, ending in one LF. Nothing else changes:
/// a lone carriage return or a space inside stays, and fails the form check.
pub(super) fn normalize_armor(bytes: &[u8]) -> Vec<u8> {
    let trimmed = bytes.trim_ascii();
    let mut out = Vec::with_capacity(trimmed.len() + 1);
    let mut i = 0;
    while i < trimmed.len() {
        if trimmed[i] == b'\r' && trimmed.get(i + 1) == Some(&b'\n') {
            i += 1;
            continue;
        }
        out.push(trimmed[i]);
        i += 1;
    }
    out.push(b'\n');
    out
}

/// Armor `raw` as `ssh-keygen -Y sign` does.
fn armor(raw: &[u8]) -> String {
    use base64ct::Encoding;
    let b64 = base64ct::Base64::encode_string(raw);
    let mut s = String::from(SIG_BEGIN);
    for line in b64.as_bytes().chunks(SIG_LINE_WIDTH) {
        s.push_str(std::str::from_utf8(line).unwrap_or_default());
        s.push('\n');
    }
    s.push_str(SIG_END);
    s
}

/// True when `text` (normalized) is exactly what OpenSSH writes for `sig`.
pub(super) fn is_canonical_armor(sig: &SshSig, text: &[u8]) -> bool {
    if sig
        .to_pem(LineEnding::LF)
        .is_ok_and(|canon| canon.as_bytes() == text)
    {
        return true;
    }
    // ssh-key 0.6 re-encodes sk-ecdsa signatures with the flags and counter
    // inside the signature string, unlike OpenSSH; for those, encode as
    // OpenSSH does (sshsig.c, ssh-ecdsa-sk.c) and compare.
    if sig.algorithm() != Algorithm::SkEcdsaSha2NistP256 {
        return false;
    }
    sk_ecdsa_sshsig_bytes(sig).is_some_and(|raw| armor(&raw).as_bytes() == text)
}

fn put_string(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend((bytes.len() as u32).to_be_bytes());
    out.extend(bytes);
}

/// The SSHSIG blob of an sk-ecdsa signature as OpenSSH encodes it.
fn sk_ecdsa_sshsig_bytes(sig: &SshSig) -> Option<Vec<u8>> {
    let data = sig.signature_bytes();
    let split = data.len().checked_sub(5)?;
    let mut inner = Vec::new();
    put_string(&mut inner, sig.algorithm().as_str().as_bytes());
    put_string(&mut inner, &data[..split]);
    inner.extend(&data[split..]);
    let key = PublicKey::from(sig.public_key().clone()).to_bytes().ok()?;
    let mut out = b"SSHSIG".to_vec();
    out.extend(sig.version().to_be_bytes());
    put_string(&mut out, &key);
    put_string(&mut out, sig.namespace().as_bytes());
    put_string(&mut out, sig.reserved());
    put_string(&mut out, sig.hash_alg().as_str().as_bytes());
    put_string(&mut out, &inner);
    Some(out)
}

/// The flags byte of a security key signature (ssh-key keeps flags and
/// counter at the end of the signature bytes).
pub(super) fn sk_flags(sig: &SshSig) -> u8 {
    let data = sig.signature_bytes();
    data.len()
        .checked_sub(5)
        .and_then(|i| data.get(i))
        .copied()
        .unwrap_or(0)
}
