//! The job's key: only the processes of one job, which can read it, take part in its fabric.
//!
//! Rank 0 listens on every interface, as root, on a port anyone can guess from the job id. Without
//! a key, anyone on the cluster network who claimed a rank before the real one arrived could send
//! a low figure (and that node would be drained) or stop the run. So the rendezvous is a mutual
//! challenge: each side sends a fresh random nonce and proves it holds the key with an HMAC-SHA256
//! over the job, the rank, the world size and both nonces ([`JobKey::proof`]); the key itself never
//! travels. Where the key comes from is the scheduler's business: `fleet slurm --fabric` writes a
//! new one per job into the job's shared folder (mode 0600), `fleet k8s --fabric` puts one in a
//! Secret mounted read-only (mode 0400), `fleet simulate --fabric` writes one beside its nodes;
//! [`KEY_ENV`] names the file.
//!
//! What it does not do: messages after the handshake (figures, verdicts, aborts) are not
//! authenticated one by one, so someone who can rewrite the packets of an open TCP connection
//! between two nodes could still change them. That takes a place on the path, not just on the
//! network.

use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// The variable that names the key file.
pub const KEY_ENV: &str = "NODECERT_FABRIC_KEY_FILE";
/// The environment variable that names, besides this process's user and root, the one user
/// whose key file is accepted (a uid): the Slurm script sets it to the owner of the key it
/// just wrote, which on an NFS folder that squashes root is not root.
pub const KEY_OWNER_ENV: &str = "NODECERT_FABRIC_KEY_OWNER";
/// The shortest key, in bytes (after surrounding white space is trimmed).
pub const MIN_KEY: usize = 16;
/// The largest key file, in bytes.
pub const MAX_KEY_FILE: u64 = 4096;
/// Random bytes in a nonce and in a generated key.
pub const NONCE_BYTES: usize = 32;

/// Who proves: rank 0 answering a hello, or a joining rank answering rank 0's challenge. The
/// two proofs differ in this word, so one side's proof can never be replayed as the other's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Root,
    Rank,
}

/// A job's shared secret. Its bytes are never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct JobKey(Vec<u8>);

impl std::fmt::Debug for JobKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "JobKey({} bytes)", self.0.len())
    }
}

impl JobKey {
    /// A key from its bytes, surrounding ASCII white space trimmed (a file's final newline);
    /// at least [`MIN_KEY`] bytes.
    pub fn new(bytes: &[u8]) -> Result<JobKey, String> {
        let b = bytes.trim_ascii();
        if b.len() < MIN_KEY {
            return Err(format!(
                "a key of {} bytes is too short (at least {MIN_KEY})",
                b.len()
            ));
        }
        Ok(JobKey(b.to_vec()))
    }

    /// A new random key, as the text a key file holds: [`NONCE_BYTES`] random bytes in hex,
    /// and a newline.
    pub fn generate() -> Result<String, String> {
        Ok(format!("{}\n", hex::encode(nonce()?)))
    }

    /// Read the key file at `path`: a regular file (a link to one is followed: Kubernetes mounts
    /// a Secret's files as links), at most [`MAX_KEY_FILE`] bytes, readable by its owner alone
    /// (as ssh insists of a private key): a key others can read proves nothing.
    pub fn read(path: &Path) -> Result<JobKey, String> {
        JobKey::read_owned(path, None)
    }

    /// [`JobKey::read`], accepting besides this process's user and root the owner `also` (a
    /// uid). The owner is checked of the file and, where `path` is a link, of the link too: in
    /// a shared folder anyone may plant a file of mode 0600 of their own, or a link of theirs to
    /// a 0600 file of ours whose contents they know (an `authorized_keys`).
    pub fn read_owned(path: &Path, also: Option<u32>) -> Result<JobKey, String> {
        JobKey::read_as(path, crate::fsio::trust::euid(), also)
    }

    /// [`JobKey::read_owned`] for a reader of uid `me`.
    fn read_as(path: &Path, me: u32, also: Option<u32>) -> Result<JobKey, String> {
        let shown = path.display();
        let trusted = |uid: u32| crate::fsio::trust::trusted_owner(uid, me) || Some(uid) == also;
        let foreign = |what: &str, uid: u32| {
            format!(
                "the job key {shown}: {what} belongs to another user (uid {uid}, this process runs \
                 as {me}): a key someone else wrote proves nothing"
            )
        };
        // Every link on the way is checked and followed through the descriptor it was checked
        // on: a name swapped between a check and an open could not lead elsewhere.
        use crate::fsio::read::TrustedOpenError;
        let f = crate::fsio::read::open_trusting_links(path, &trusted).map_err(|e| match e {
            TrustedOpenError::ForeignLink {
                uid, last: true, ..
            } => foreign("its link", uid),
            TrustedOpenError::ForeignLink { link, uid, .. } => foreign(
                &format!(
                    "the link {} on its way",
                    crate::console::visible(&link.display().to_string())
                ),
                uid,
            ),
            TrustedOpenError::Io(e) => format!("cannot read the job key {shown}: {e}"),
        })?;
        let meta = f
            .metadata()
            .map_err(|e| format!("cannot read the job key {shown}: {e}"))?;
        if !trusted(meta.uid()) {
            return Err(foreign("the file", meta.uid()));
        }
        if meta.mode() & 0o077 != 0 {
            return Err(format!(
                "the job key {shown} can be read by others (mode {:04o}): make it readable by its \
                 owner alone (chmod 600)",
                meta.mode() & 0o7777
            ));
        }
        let mut bytes = Vec::new();
        f.take(MAX_KEY_FILE + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| format!("cannot read the job key {shown}: {e}"))?;
        if bytes.len() as u64 > MAX_KEY_FILE {
            return Err(format!(
                "the job key {shown} is larger than {MAX_KEY_FILE} bytes"
            ));
        }
        JobKey::new(&bytes).map_err(|e| format!("the job key {shown}: {e}"))
    }

    /// The key named by [`KEY_ENV`] in `env`, or why there is none.
    pub fn from_env(env: &dyn Fn(&str) -> Option<String>) -> Result<JobKey, String> {
        match env(KEY_ENV).filter(|v| !v.trim().is_empty()) {
            Some(p) => {
                let also =
                    match env(KEY_OWNER_ENV).filter(|v| !v.trim().is_empty()) {
                        Some(u) => Some(u.trim().parse::<u32>().map_err(|_| {
                            format!("{KEY_OWNER_ENV}={u:?}: a user id, as a number")
                        })?),
                        None => None,
                    };
                JobKey::read_owned(Path::new(p.trim()), also)
            }
            None => Err(format!(
                "{KEY_ENV} is not set: the nodes of a job prove to each other that they belong \
                 to it with a key file only they can read (`fleet slurm --fabric` and `fleet k8s \
                 --fabric` make one; by hand, write `openssl rand -hex 32` to a file of mode 0600 \
                 that every node can read, and name it in {KEY_ENV})"
            )),
        }
    }

    fn mac(
        &self,
        role: Role,
        job: &str,
        rank: usize,
        size: usize,
        a: &[u8],
        b: &[u8],
    ) -> Hmac<Sha256> {
        // HMAC takes a key of any length.
        let mut m = <Hmac<Sha256> as Mac>::new_from_slice(&self.0).expect("HMAC takes any key");
        let role: &[u8] = match role {
            Role::Root => b"root",
            Role::Rank => b"rank",
        };
        // Every field with its length in front: no two different inputs give the same bytes.
        for field in [
            super::rendezvous::MAGIC.as_bytes(),
            role,
            job.as_bytes(),
            &(rank as u64).to_be_bytes(),
            &(size as u64).to_be_bytes(),
            a,
            b,
        ] {
            m.update(&(field.len() as u64).to_be_bytes());
            m.update(field);
        }
        m
    }

    /// The proof that `role` holds this key, for the hello of `rank` in a world of `size` of
    /// `job`: HMAC-SHA256 over those and the nonces, the asker's nonce (`theirs`) first.
    pub fn proof(
        &self,
        role: Role,
        job: &str,
        rank: usize,
        size: usize,
        theirs: &[u8],
        mine: &[u8],
    ) -> Vec<u8> {
        self.mac(role, job, rank, size, theirs, mine)
            .finalize()
            .into_bytes()
            .to_vec()
    }

    /// Whether `given` is the proof [`JobKey::proof`] would make (compared in constant time).
    #[allow(clippy::too_many_arguments)]
    pub fn verify(
        &self,
        role: Role,
        job: &str,
        rank: usize,
        size: usize,
        theirs: &[u8],
        mine: &[u8],
        given: &[u8],
    ) -> bool {
        self.mac(role, job, rank, size, theirs, mine)
            .verify_slice(given)
            .is_ok()
    }
}

/// [`NONCE_BYTES`] bytes from the operating system's random source.
pub fn nonce() -> Result<[u8; NONCE_BYTES], String> {
    let mut n = [0u8; NONCE_BYTES];
    getrandom::getrandom(&mut n).map_err(|e| format!("no random numbers from the system: {e}"))?;
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn key(s: &str) -> JobKey {
        JobKey::new(s.as_bytes()).unwrap()
    }

    #[test]
    fn a_proof_holds_only_for_the_same_key_role_job_rank_size_and_nonces() {
        let k = key("0123456789abcdef0123");
        let p = k.proof(Role::Rank, "j", 2, 4, b"n0", b"n1");
        assert_eq!(p.len(), 32);
        assert!(k.verify(Role::Rank, "j", 2, 4, b"n0", b"n1", &p));
        let other = key("0123456789abcdef0124");
        assert!(!other.verify(Role::Rank, "j", 2, 4, b"n0", b"n1", &p));
        assert!(!k.verify(Role::Root, "j", 2, 4, b"n0", b"n1", &p));
        assert!(!k.verify(Role::Rank, "k", 2, 4, b"n0", b"n1", &p));
        assert!(!k.verify(Role::Rank, "j", 3, 4, b"n0", b"n1", &p));
        assert!(!k.verify(Role::Rank, "j", 2, 5, b"n0", b"n1", &p));
        assert!(!k.verify(Role::Rank, "j", 2, 4, b"n1", b"n0", &p));
        assert!(!k.verify(Role::Rank, "j", 2, 4, b"n0", b"n2", &p));
        // The fields are length-prefixed: moving a byte from one field to the next changes it.
        assert!(!k.verify(Role::Rank, "j", 2, 4, b"n", b"0n1", &p));
        assert!(!k.verify(Role::Rank, "j", 2, 4, b"n0", b"n1", &p[..31]));
    }

    #[test]
    fn keys_are_trimmed_long_enough_and_never_printed() {
        assert_eq!(key("  0123456789abcdef\n"), key("0123456789abcdef"));
        let e = JobKey::new(b"short\n").unwrap_err();
        assert!(e.contains("5 bytes is too short"), "{e}");
        let k = key("0123456789abcdef-secret");
        assert_eq!(format!("{k:?}"), "JobKey(23 bytes)");
        let g = JobKey::generate().unwrap();
        assert_eq!(g.len(), 2 * NONCE_BYTES + 1);
        assert_ne!(g, JobKey::generate().unwrap());
        JobKey::new(g.as_bytes()).unwrap();
    }

    #[test]
    fn a_key_file_must_be_its_owners_alone_small_and_regular() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("key");
        std::fs::write(&p, "0123456789abcdef0123\n").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = JobKey::read(&p).unwrap_err();
        assert!(e.contains("can be read by others (mode 0644)"), "{e}");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(JobKey::read(&p).unwrap(), key("0123456789abcdef0123"));
        // A link to it is followed (a Kubernetes Secret's files are links).
        let l = d.path().join("link");
        std::os::unix::fs::symlink(&p, &l).unwrap();
        assert_eq!(JobKey::read(&l).unwrap(), key("0123456789abcdef0123"));
        // At most 4096 bytes: that many is a key, one more is refused.
        std::fs::write(&p, vec![b'a'; MAX_KEY_FILE as usize]).unwrap();
        assert_eq!(JobKey::read(&p).unwrap().0.len(), MAX_KEY_FILE as usize);
        std::fs::write(&p, vec![b'a'; MAX_KEY_FILE as usize + 1]).unwrap();
        let e = JobKey::read(&p).unwrap_err();
        assert!(e.contains("larger than 4096 bytes"), "{e}");
        let e = JobKey::read(d.path()).unwrap_err();
        assert!(e.contains("not a regular file"), "{e}");
        let env = |_: &str| None;
        let e = JobKey::from_env(&env).unwrap_err();
        assert!(e.starts_with("NODECERT_FABRIC_KEY_FILE is not set"), "{e}");
        let path = l.display().to_string();
        std::fs::write(&p, "0123456789abcdef0123").unwrap();
        let env = move |k: &str| (k == KEY_ENV).then(|| path.clone());
        assert_eq!(JobKey::from_env(&env).unwrap(), key("0123456789abcdef0123"));
        // A key of another user's (planted in a shared folder, mode 0600 and all) is refused:
        // only root can give a file away, so this part needs it (CI runs as root).
        if unsafe { libc::geteuid() } == 0 {
            std::os::unix::fs::chown(&p, Some(12345), None).unwrap();
            let e = JobKey::read(&p).unwrap_err();
            assert!(
                e.contains("the file belongs to another user (uid 12345, this process runs as 0)"),
                "{e}"
            );
            // The owner the job's script names (root squashed to another uid) is accepted.
            assert!(JobKey::read_owned(&p, Some(12345)).is_ok());
            let path = p.display().to_string();
            let env = move |k: &str| match k {
                KEY_ENV => Some(path.clone()),
                KEY_OWNER_ENV => Some("12345".to_string()),
                _ => None,
            };
            assert_eq!(JobKey::from_env(&env).unwrap(), key("0123456789abcdef0123"));
            // A link of another user's to a 0600 file of ours is refused, though the file
            // itself would be accepted.
            let mine = d.path().join("authorized_keys");
            std::fs::write(&mine, "0123456789abcdef0123\n").unwrap();
            std::fs::set_permissions(&mine, std::fs::Permissions::from_mode(0o600)).unwrap();
            let planted = d.path().join("planted");
            std::os::unix::fs::symlink(&mine, &planted).unwrap();
            assert!(
                JobKey::read(&planted).is_ok(),
                "a link of our own is followed"
            );
            std::os::unix::fs::lchown(&planted, Some(12345), None).unwrap();
            let e = JobKey::read(&planted).unwrap_err();
            assert!(
                e.contains("its link belongs to another user (uid 12345"),
                "{e}"
            );
            // As a reader who is not root (uid 1000): its own key and root's are accepted, a
            // third user's is not, nor a link of a third user's.
            std::os::unix::fs::chown(&p, Some(1000), None).unwrap();
            assert!(JobKey::read_as(&p, 1000, None).is_ok());
            std::os::unix::fs::chown(&p, Some(0), None).unwrap();
            assert!(JobKey::read_as(&p, 1000, None).is_ok());
            std::os::unix::fs::chown(&p, Some(12345), None).unwrap();
            let e = JobKey::read_as(&p, 1000, None).unwrap_err();
            assert!(e.contains("uid 12345, this process runs as 1000"), "{e}");
            assert!(JobKey::read_as(&p, 1000, Some(12345)).is_ok());
            std::os::unix::fs::lchown(&planted, Some(1000), None).unwrap();
            std::os::unix::fs::chown(&mine, Some(1000), None).unwrap();
            assert!(JobKey::read_as(&planted, 1000, None).is_ok());
            std::os::unix::fs::lchown(&planted, Some(12345), None).unwrap();
            assert!(JobKey::read_as(&planted, 1000, None).is_err());
        }
    }
}
