//! OpenSSH writes an ECDSA private scalar as an mpint, without leading zero bytes, so about one
//! key in 256 holds a scalar one byte (or more) shorter than its curve. ssh-key 0.6.7 reads
//! exactly the curve's size and refuses such a key ("length invalid"); RustCrypto/SSH fixed it
//! after 0.6 (PR #356). Until nodecert moves to that release, such a key is rewritten here with
//! its scalar left-padded with zeros (the same number) before ssh-key decodes it.
//!
//! The binary layout (OpenSSH's PROTOCOL.key): `"openssh-key-v1\0"`, string cipher, string kdf,
//! string kdf options, uint32 key count, the public keys as strings, then the private section as
//! one string: uint32 check, uint32 check, string key type, for ECDSA string curve, string public
//! point, mpint scalar, then string comment and padding bytes 1, 2, 3, ... up to the cipher's
//! block (8 for `none`).

use base64ct::Encoding;

const MAGIC: &[u8] = b"openssh-key-v1\0";
const BLOCK: usize = 8;

/// The body of an armored `OPENSSH PRIVATE KEY`, decoded; `None` if `text` is not one.
pub(super) fn armored_body(text: &str) -> Option<Vec<u8>> {
    let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
    if lines.next()? != "-----BEGIN OPENSSH PRIVATE KEY-----" {
        return None;
    }
    let mut b64 = String::new();
    for line in lines {
        if line == "-----END OPENSSH PRIVATE KEY-----" {
            return base64ct::Base64::decode_vec(&b64).ok();
        }
        b64.push_str(line);
    }
    None
}

struct Cursor<'a>(&'a [u8]);

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if n > self.0.len() {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }
    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_be_bytes(self.take(4)?.try_into().ok()?))
    }
    fn string(&mut self) -> Option<&'a [u8]> {
        let n = usize::try_from(self.u32()?).ok()?;
        self.take(n)
    }
}

fn put_string(out: &mut Vec<u8>, s: &[u8]) {
    // Every field comes from a key file of at most 64 KiB, so its length fits a u32.
    out.extend_from_slice(&(s.len() as u32).to_be_bytes());
    out.extend_from_slice(s);
}

/// The scalar size of an ECDSA key type nodecert signs with.
fn scalar_size(key_type: &[u8]) -> Option<usize> {
    match key_type {
        b"ecdsa-sha2-nistp256" => Some(32),
        b"ecdsa-sha2-nistp384" => Some(48),
        _ => None,
    }
}

/// `bytes` (an unencrypted openssh-key-v1 key) with a short ECDSA scalar padded to its curve's
/// size; `None` when there is nothing to pad (another key type, an encrypted key, a scalar of
/// full size) or the key is not well formed (ssh-key then says why).
pub(super) fn pad_short_scalar(bytes: &[u8]) -> Option<Vec<u8>> {
    let mut r = Cursor(bytes);
    if r.take(MAGIC.len())? != MAGIC {
        return None;
    }
    let cipher = r.string()?;
    let kdf = r.string()?;
    let kdf_options = r.string()?;
    if cipher != b"none" || kdf != b"none" || r.u32()? != 1 {
        return None;
    }
    let public = r.string()?;
    let private = r.string()?;
    if !r.0.is_empty() {
        return None;
    }

    let mut p = Cursor(private);
    let check1 = p.u32()?;
    let check2 = p.u32()?;
    let key_type = p.string()?;
    let size = scalar_size(key_type)?;
    let curve = p.string()?;
    let point = p.string()?;
    let scalar = p.string()?;
    let comment = p.string()?;
    // What is left must be OpenSSH's padding; anything else is not ours to rewrite.
    if p.0.len() >= BLOCK || p.0.iter().enumerate().any(|(i, &b)| b as usize != i + 1) {
        return None;
    }
    // Only a field shorter than the curve's size is what ssh-key refuses. As an mpint it may
    // still start with a zero (before a byte whose top bit is set): the number is what follows.
    if scalar.len() >= size {
        return None;
    }
    let scalar = &scalar[scalar.iter().take_while(|&&b| b == 0).count()..];
    if scalar.is_empty() {
        return None;
    }

    let mut section = Vec::with_capacity(private.len() + size);
    section.extend_from_slice(&check1.to_be_bytes());
    section.extend_from_slice(&check2.to_be_bytes());
    put_string(&mut section, key_type);
    put_string(&mut section, curve);
    put_string(&mut section, point);
    let mut padded = vec![0u8; size - scalar.len()];
    padded.extend_from_slice(scalar);
    put_string(&mut section, &padded);
    put_string(&mut section, comment);
    let pad = (BLOCK - section.len() % BLOCK) % BLOCK;
    section.extend((1..=pad).map(|i| i as u8));

    let mut out = Vec::with_capacity(bytes.len() + size);
    out.extend_from_slice(MAGIC);
    put_string(&mut out, cipher);
    put_string(&mut out, kdf);
    put_string(&mut out, kdf_options);
    out.extend_from_slice(&1u32.to_be_bytes());
    put_string(&mut out, public);
    put_string(&mut out, &section);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ssh_key::{Algorithm, EcdsaCurve, LineEnding, PrivateKey};

    /// `key` as OpenSSH writes it: the scalar as an mpint, leading zeros stripped.
    fn as_openssh_writes(key: &PrivateKey) -> Vec<u8> {
        let text = key.to_openssh(LineEnding::LF).unwrap();
        let bytes = armored_body(&text).unwrap();
        let mut r = Cursor(&bytes);
        r.take(MAGIC.len()).unwrap();
        let head: Vec<&[u8]> = (0..3).map(|_| r.string().unwrap()).collect();
        assert_eq!(r.u32(), Some(1));
        let public = r.string().unwrap();
        let mut p = Cursor(r.string().unwrap());
        let (c1, c2) = (p.u32().unwrap(), p.u32().unwrap());
        let fields: Vec<&[u8]> = (0..3).map(|_| p.string().unwrap()).collect();
        let scalar = p.string().unwrap();
        let comment = p.string().unwrap();
        let first = scalar.iter().position(|&b| b != 0).unwrap();
        let mut minimal = scalar[first..].to_vec();
        if minimal[0] >= 0x80 {
            minimal.insert(0, 0);
        }
        let mut section = [c1.to_be_bytes(), c2.to_be_bytes()].concat();
        for f in fields {
            put_string(&mut section, f);
        }
        put_string(&mut section, &minimal);
        put_string(&mut section, comment);
        let pad = (BLOCK - section.len() % BLOCK) % BLOCK;
        section.extend((1..=pad).map(|i| i as u8));
        let mut out = MAGIC.to_vec();
        for h in head {
            put_string(&mut out, h);
        }
        out.extend_from_slice(&1u32.to_be_bytes());
        put_string(&mut out, public);
        put_string(&mut out, &section);
        out
    }

    /// A random key of `curve` whose scalar starts with `zeros` zero bytes, then a byte whose
    /// top bit is clear (`short`) or set (`!short`: OpenSSH writes a zero before it, so the
    /// mpint is one byte longer).
    fn key_with_scalar(curve: EcdsaCurve, zeros: usize, short: bool) -> PrivateKey {
        let mut rng = ssh_key::rand_core::OsRng;
        loop {
            let key = PrivateKey::random(&mut rng, Algorithm::Ecdsa { curve }).unwrap();
            let ecdsa = key.key_data().ecdsa().unwrap();
            let scalar = match ecdsa {
                ssh_key::private::EcdsaKeypair::NistP256 { private, .. } => private.as_slice(),
                ssh_key::private::EcdsaKeypair::NistP384 { private, .. } => private.as_slice(),
                _ => unreachable!(),
            };
            // Exactly `zeros` zero bytes: one more (1 key in 256) shortens the scalar again,
            // and the tests that count its padding would fail by chance.
            if scalar[..zeros].iter().all(|&b| b == 0)
                && scalar[zeros] != 0
                && (scalar[zeros] < 0x80) == short
            {
                return key;
            }
        }
    }

    #[test]
    fn a_short_scalar_is_padded_to_the_same_key() {
        for curve in [EcdsaCurve::NistP256, EcdsaCurve::NistP384] {
            let key = key_with_scalar(curve, 1, true);
            let short = as_openssh_writes(&key);
            assert!(
                PrivateKey::from_bytes(&short).is_err(),
                "ssh-key 0.6.7 refuses a short scalar; if it reads it now, drop this module"
            );
            let fixed = pad_short_scalar(&short).expect("padded");
            let read = PrivateKey::from_bytes(&fixed).unwrap();
            assert_eq!(read, key);
            assert_eq!(read.comment(), key.comment());
        }
    }

    #[test]
    fn a_short_scalar_key_with_a_comment_of_any_length_is_read() {
        // The rewritten section is padded again to the cipher's block, which ssh-key checks:
        // a comment of each length modulo 8 leaves a different padding.
        let mut key = key_with_scalar(EcdsaCurve::NistP256, 1, true);
        for comment in ["", "a", "ab", "abc", "ops@", "ops@n", "ops@no", "ops@nod"] {
            key.set_comment(comment);
            let fixed = pad_short_scalar(&as_openssh_writes(&key)).expect("padded");
            let read = PrivateKey::from_bytes(&fixed).expect(comment);
            assert_eq!(read, key);
            assert_eq!(read.comment(), comment);
        }
    }

    #[test]
    fn keys_of_full_size_and_other_types_are_left_alone() {
        let mut rng = ssh_key::rand_core::OsRng;
        // A scalar of full length (33 bytes as an mpint), and one whose leading zero byte is
        // followed by a byte with its top bit set (32 bytes as an mpint): ssh-key reads both.
        for key in [
            key_with_scalar(EcdsaCurve::NistP256, 0, false),
            key_with_scalar(EcdsaCurve::NistP256, 1, false),
        ] {
            let bytes = as_openssh_writes(&key);
            assert_eq!(PrivateKey::from_bytes(&bytes).unwrap(), key);
            assert_eq!(pad_short_scalar(&bytes), None);
        }
        let ed = PrivateKey::random(&mut rng, Algorithm::Ed25519).unwrap();
        let bytes = armored_body(&ed.to_openssh(LineEnding::LF).unwrap()).unwrap();
        assert_eq!(pad_short_scalar(&bytes), None);
    }

    #[test]
    fn malformed_input_is_refused_not_rewritten() {
        let key = key_with_scalar(EcdsaCurve::NistP256, 1, true);
        let short = as_openssh_writes(&key);
        // Every truncation, and trailing bytes, are not a key to rewrite.
        for n in 0..short.len() {
            assert_eq!(pad_short_scalar(&short[..n]), None, "truncated at {n}");
        }
        let mut long = short.clone();
        long.push(0);
        assert_eq!(pad_short_scalar(&long), None);
        // Padding that is not 1, 2, 3, ... is not OpenSSH's.
        // (A P-256 key with a 31-byte scalar field and no comment has one padding byte.)
        let mut bad = short.clone();
        let last = bad.len() - 1;
        assert_eq!(bad[last], 1);
        bad[last] = 0x55;
        assert_eq!(pad_short_scalar(&bad), None);
        // A key that names a cipher or a kdf is not plain text, whatever its section looks like.
        for (cipher, kdf) in [(&b"aes256-ctr"[..], &b"none"[..]), (b"none", b"bcrypt")] {
            let mut r = Cursor(&short);
            r.take(MAGIC.len()).unwrap();
            let _ = (r.string(), r.string());
            let mut claimed = MAGIC.to_vec();
            put_string(&mut claimed, cipher);
            put_string(&mut claimed, kdf);
            claimed.extend_from_slice(r.0);
            assert_eq!(pad_short_scalar(&claimed), None);
        }
        // An encrypted key is not touched.
        let mut enc = MAGIC.to_vec();
        put_string(&mut enc, b"aes256-ctr");
        assert_eq!(pad_short_scalar(&enc), None);
        assert_eq!(armored_body("not a key"), None);
        assert_eq!(
            armored_body("-----BEGIN OPENSSH PRIVATE KEY-----\nAAAA\n"),
            None
        );
    }
}
