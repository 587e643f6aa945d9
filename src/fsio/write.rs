//! Writing files: regular files only, replaced atomically through a temp file no one can guess
//! or plant, in folders opened without following a symbolic link nodecert did not choose.
//!
//! - A target that exists and is not a regular file (a symbolic link, a device such as
//!   /dev/null, a FIFO, a folder) is refused with a message naming what it is.
//! - The temp file is created in the target's folder under a random name with
//!   O_CREAT|O_EXCL|O_NOFOLLOW, so a link planted in advance is never opened, and it is removed
//!   on any failure (a full disk included).
//! - Folders nodecert creates are created and entered one component at a time without following
//!   links; the last component of a report folder is never a link.
//! - A report folder is locked ([`Dir::lock`], flock) for as long as a command writes there.

use super::{cstr, cvt, kind_of, split};
use std::ffi::OsStr;
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// Mode of the files nodecert writes (reports, evidence, exports), before the umask.
pub const FILE_MODE: u32 = 0o644;

/// An open folder that files are written into by name, relative to it: once opened, renaming or
/// replacing its path does not redirect later writes.
#[derive(Debug)]
pub struct Dir {
    fd: OwnedFd,
    path: PathBuf,
}

fn open_dir_at(at: libc::c_int, path: &OsStr, follow: bool) -> io::Result<OwnedFd> {
    let c = cstr(path)?;
    let mut flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC;
    if !follow {
        flags |= libc::O_NOFOLLOW;
    }
    // SAFETY: a valid C string and flags; the fd returned is owned below.
    let fd = cvt(unsafe { libc::openat(at, c.as_ptr(), flags) })?;
    // SAFETY: `fd` was just opened and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn is_link(path: &Path) -> bool {
    path.symlink_metadata()
        .is_ok_and(|m| m.file_type().is_symlink())
}

fn link_refused(path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!(
            "{} is a symbolic link; nodecert does not write through one: give the folder itself",
            path.display()
        ),
    )
}

/// The most symbolic links one path may pass through (the kernel's MAXSYMLINKS).
pub(crate) const MAX_LINKS: usize = 40;

fn is_trusted_owner(uid: libc::uid_t) -> bool {
    super::trust::trusted_owner(uid, super::trust::euid())
}

impl Dir {
    /// Open an existing folder without letting another user's symbolic link redirect it: every
    /// component is entered with O_NOFOLLOW; a link on the way is followed only when root or the
    /// user running nodecert owns it (the system's own, such as /var/run, or the operator's), by
    /// reading that very link (opened O_PATH, so it cannot be swapped between the owner check and
    /// the read) and resolving its target the same way. A link owned by anyone else is refused:
    /// whoever could plant it could point root's write anywhere.
    pub fn open_trusted(path: &Path) -> io::Result<Dir> {
        use std::collections::VecDeque;
        use std::os::unix::ffi::OsStrExt;
        let root = || open_dir_at(libc::AT_FDCWD, OsStr::new("/"), false);
        let mut fd = if path.has_root() {
            root()?
        } else {
            open_dir_at(libc::AT_FDCWD, OsStr::new("."), false)?
        };
        let mut pending: VecDeque<std::ffi::OsString> = path
            .components()
            .filter(|c| {
                !matches!(
                    c,
                    std::path::Component::RootDir | std::path::Component::CurDir
                )
            })
            .map(|c| c.as_os_str().to_os_string())
            .collect();
        let mut walked = PathBuf::new();
        let mut links = 0;
        while let Some(name) = pending.pop_front() {
            walked.push(&name);
            let e = match open_dir_at(fd.as_raw_fd(), &name, false) {
                Ok(next) => {
                    fd = next;
                    continue;
                }
                Err(e) => e,
            };
            let c = cstr(&name)?;
            // SAFETY: a valid fd and C string; the fd returned is owned below.
            let lfd = match cvt(unsafe {
                libc::openat(
                    fd.as_raw_fd(),
                    c.as_ptr(),
                    libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC,
                )
            }) {
                Ok(l) => unsafe { OwnedFd::from_raw_fd(l) },
                Err(_) => return Err(e),
            };
            // SAFETY: a valid fd and a zeroed stat buffer.
            let mut st: libc::stat = unsafe { std::mem::zeroed() };
            cvt(unsafe { libc::fstat(lfd.as_raw_fd(), &mut st) })?;
            if st.st_mode & libc::S_IFMT != libc::S_IFLNK {
                return Err(e);
            }
            if !is_trusted_owner(st.st_uid) {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "{} is a symbolic link owned by another user (uid {}); nodecert follows \
                         only links owned by root or by you on the way to a file it writes: \
                         give the real folder",
                        walked.display(),
                        st.st_uid
                    ),
                ));
            }
            links += 1;
            if links > MAX_LINKS {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("{}: too many symbolic links", path.display()),
                ));
            }
            let mut buf = vec![0u8; libc::PATH_MAX as usize];
            // SAFETY: an O_PATH fd of the link itself, an empty path, a buffer of its length.
            let n = unsafe {
                libc::readlinkat(
                    lfd.as_raw_fd(),
                    c"".as_ptr(),
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                )
            };
            if n < 0 {
                return Err(io::Error::last_os_error());
            }
            buf.truncate(n as usize);
            let target = Path::new(OsStr::from_bytes(&buf));
            if target.has_root() {
                fd = root()?;
            }
            for c in target.components().rev().filter(|c| {
                !matches!(
                    c,
                    std::path::Component::RootDir | std::path::Component::CurDir
                )
            }) {
                pending.push_front(c.as_os_str().to_os_string());
            }
        }
        Ok(Dir {
            fd,
            path: path.to_path_buf(),
        })
    }

    /// Open an existing folder as given (links in it are the caller's choice).
    pub fn open(path: &Path) -> io::Result<Dir> {
        Ok(Dir {
            fd: open_dir_at(libc::AT_FDCWD, path.as_os_str(), true)?,
            path: path.to_path_buf(),
        })
    }

    /// Open the folder `path`, creating what is missing of it. The folders above it are reached
    /// as [`Dir::open_trusted`] reaches them (a link on the way is followed only when root or the
    /// user running nodecert owns it), and every component created here, and the last one in any
    /// case, is entered without following a symbolic link.
    pub fn create_all(path: &Path) -> io::Result<Dir> {
        // Without a trailing '/', which would make the kernel follow a last component that is a
        // link whatever O_NOFOLLOW says.
        let normal: PathBuf = path.components().collect();
        let path = if normal.as_os_str().is_empty() {
            Path::new(".")
        } else {
            normal.as_path()
        };
        let Ok((parent, name)) = split(path) else {
            // ".", "/" or a path ending in "..": nothing to create.
            return Dir::open_trusted(path);
        };
        let parent_dir = match Dir::open_trusted(parent) {
            Ok(d) => d,
            Err(e) if e.kind() == io::ErrorKind::NotFound => Dir::create_all(parent)?,
            Err(e) => return Err(e),
        };
        let c = cstr(name)?;
        // SAFETY: a valid fd and C string.
        if unsafe { libc::mkdirat(parent_dir.fd.as_raw_fd(), c.as_ptr(), 0o755) } < 0 {
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::AlreadyExists {
                return Err(e);
            }
        }
        match open_dir_at(parent_dir.fd.as_raw_fd(), name, false) {
            Ok(fd) => Ok(Dir {
                fd,
                path: path.to_path_buf(),
            }),
            Err(_) if is_link(path) => Err(link_refused(path)),
            Err(e) => Err(e),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A path that names this very folder for reading whatever its own path names now:
    /// `/proc/self/fd/N` of the open handle, the kernel's link to the folder itself. What a
    /// command reads of the folder it holds (the files it signs) is then what it writes beside,
    /// even if the folder's path is swapped for another folder and back in between. An error
    /// where /proc is not mounted (or its link does not name this folder): reading by path
    /// instead would give that up unseen.
    pub fn read_root(&self) -> io::Result<PathBuf> {
        self.read_root_in(Path::new("/proc/self/fd"))
    }

    /// [`Dir::read_root`] with the process's descriptors under `fds`.
    fn read_root_in(&self, fds: &Path) -> io::Result<PathBuf> {
        use std::os::unix::fs::MetadataExt;
        let proc = fds.join(self.fd.as_raw_fd().to_string());
        // SAFETY: a valid fd and a zeroed stat buffer.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        cvt(unsafe { libc::fstat(self.fd.as_raw_fd(), &mut st) })?;
        match std::fs::metadata(&proc) {
            Ok(m) if m.dev() == st.st_dev as u64 && m.ino() == st.st_ino as u64 => Ok(proc),
            _ => Err(io::Error::other(format!(
                "{} cannot be read through the folder nodecert holds ({} does not name it: is \
                 /proc mounted?), and reading it by its path would let someone who swaps the \
                 folder choose what is read",
                self.path.display(),
                proc.display()
            ))),
        }
    }

    /// The text of the regular file `name` here, read as `kind` through this folder and never
    /// through a link ([`Dir::open_file`]).
    pub fn read_to_string(&self, name: &OsStr, kind: super::read::Kind) -> io::Result<String> {
        super::read::file_to_string(self.open_file(name)?, kind)
    }

    /// Whether the path this folder was opened by still names it (the same device and inode,
    /// links the operator chose followed). Writes go through the open folder whatever its path
    /// names now; this refuses to go on when the folder was renamed away or another put in its
    /// place, so that what is read by path (the files a manifest lists) is what is written
    /// beside, and the operator is told where the files went rather than finding them missing.
    pub fn check_in_place(&self) -> io::Result<()> {
        use std::os::unix::fs::MetadataExt;
        // SAFETY: a valid fd and a zeroed stat buffer.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        cvt(unsafe { libc::fstat(self.fd.as_raw_fd(), &mut st) })?;
        match std::fs::metadata(&self.path) {
            Ok(m) if m.dev() == st.st_dev as u64 && m.ino() == st.st_ino as u64 => Ok(()),
            _ => Err(io::Error::other(format!(
                "{} is no longer the folder nodecert locked: it was moved or replaced while \
                 nodecert was writing there, so nothing more is written; the files written so \
                 far stay in the folder that was moved",
                self.path.display()
            ))),
        }
    }

    /// [`Dir::replace`] for a report folder: only while its path still names it
    /// ([`Dir::check_in_place`]), and then through this handle, never by path.
    pub fn replace_in_place(&self, name: &OsStr, bytes: &[u8]) -> io::Result<()> {
        self.check_in_place()?;
        self.replace(name, bytes)
    }

    /// [`Dir::create_new`] for a report folder (a signature), as [`Dir::replace_in_place`].
    pub fn create_new_in_place(&self, name: &OsStr, bytes: &[u8], mode: u32) -> io::Result<()> {
        self.check_in_place()?;
        self.create_new(name, bytes, mode)
    }

    /// Take the folder's advisory lock (flock, exclusive) without waiting: another nodecert that
    /// writes here holds it, so this fails with [`io::ErrorKind::WouldBlock`]. Released when the
    /// returned lock (or the process) ends.
    pub fn lock(self) -> io::Result<LockedDir> {
        // SAFETY: a valid fd.
        cvt(unsafe { libc::flock(self.fd.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) })?;
        Ok(LockedDir(self))
    }

    /// What is at `name` in this folder, without following a link: None when nothing is.
    fn stat(&self, name: &OsStr) -> io::Result<Option<libc::stat>> {
        let c = cstr(name)?;
        // SAFETY: zeroed stat is a valid out-parameter.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: valid fd, C string and out-pointer.
        let r = unsafe {
            libc::fstatat(
                self.fd.as_raw_fd(),
                c.as_ptr(),
                &mut st,
                libc::AT_SYMLINK_NOFOLLOW,
            )
        };
        if r < 0 {
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::NotFound => Ok(None),
                _ => Err(e),
            };
        }
        Ok(Some(st))
    }

    /// Refuse a target that exists and is not a regular file.
    pub fn check_target(&self, name: &OsStr) -> io::Result<()> {
        match self.stat(name)? {
            Some(st) if st.st_mode & libc::S_IFMT != libc::S_IFREG => {
                Err(not_regular(&self.path.join(name), st.st_mode))
            }
            _ => Ok(()),
        }
    }

    /// Open the regular file `name` here for reading, through this folder and never through a
    /// link: what a command reads of the folder it holds is what is in it.
    pub fn open_file(&self, name: &OsStr) -> io::Result<File> {
        super::read::open_in_fd(self.fd.as_raw_fd(), name)
    }

    /// Whether `name` exists here (as anything, links not followed).
    pub fn exists(&self, name: &OsStr) -> io::Result<bool> {
        Ok(self.stat(name)?.is_some())
    }

    /// Create `name` (which must not exist, as anything) and write `bytes` to it, with `mode`.
    /// On failure the file is removed.
    pub fn create_new(&self, name: &OsStr, bytes: &[u8], mode: u32) -> io::Result<()> {
        self.create_new_id(name, bytes, mode).map(|_| ())
    }

    /// [`Dir::create_new`], and which file it created, for [`Dir::remove_if_same`] to undo it.
    pub fn create_new_id(&self, name: &OsStr, bytes: &[u8], mode: u32) -> io::Result<FileId> {
        use std::os::unix::fs::MetadataExt;
        let c = cstr(name)?;
        let mut f = self.open_new(&c, mode)?;
        let id = match f.metadata() {
            Ok(m) => FileId(m.dev(), m.ino()),
            Err(e) => {
                self.unlink(&c);
                return Err(e);
            }
        };
        if let Err(e) = f.write_all(bytes).and_then(|_| f.sync_all()) {
            let _ = self.remove_if_same(name, id);
            return Err(e);
        }
        Ok(id)
    }

    /// Remove `name` here only if it is still the file `id` (links not followed): undo a file
    /// this process created without removing one someone put at its name since. Whether it
    /// was removed.
    pub fn remove_if_same(&self, name: &OsStr, id: FileId) -> io::Result<bool> {
        match self.stat(name)? {
            Some(st) if FileId(st.st_dev, st.st_ino) == id => {
                self.unlink(&cstr(name)?);
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    /// Replace (or create) the regular file `name` with `bytes`, atomically.
    pub fn replace(&self, name: &OsStr, bytes: &[u8]) -> io::Result<()> {
        self.replace_with(name, FILE_MODE, |f| f.write_all(bytes))
    }

    /// Replace (or create) the regular file `name` with what `fill` writes, atomically: a temp
    /// file with a random name in this folder, synced, then renamed over the target. The temp
    /// file is removed when anything fails.
    pub fn replace_with(
        &self,
        name: &OsStr,
        mode: u32,
        fill: impl FnOnce(&mut File) -> io::Result<()>,
    ) -> io::Result<()> {
        self.check_target(name)?;
        let (tmp, mut f) = self.temp_for(name, mode)?;
        let r = fill(&mut f).and_then(|_| f.sync_all());
        drop(f);
        if let Err(e) = r {
            self.unlink(&tmp);
            return Err(e);
        }
        // Again, just before: what was checked may have been swapped meanwhile. A link put there
        // now is replaced itself by the rename, not followed.
        let target = cstr(name)?;
        let r = self.check_target(name).and_then(|_| {
            // SAFETY: valid fds and C strings.
            cvt(unsafe {
                libc::renameat(
                    self.fd.as_raw_fd(),
                    tmp.as_ptr(),
                    self.fd.as_raw_fd(),
                    target.as_ptr(),
                )
            })
            .map(|_| ())
        });
        if r.is_err() {
            self.unlink(&tmp);
        }
        r
    }

    fn open_new(&self, name: &std::ffi::CStr, mode: u32) -> io::Result<File> {
        let flags =
            libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC;
        // SAFETY: valid fd and C string; the fd returned is owned below.
        let fd = cvt(unsafe {
            libc::openat(
                self.fd.as_raw_fd(),
                name.as_ptr(),
                flags,
                mode as libc::c_uint,
            )
        })?;
        // SAFETY: just opened, owned by nobody else.
        Ok(unsafe { File::from_raw_fd(fd) })
    }

    /// A new temp file for `name`: `.NAME.RANDOM.tmp`, created exclusively.
    fn temp_for(&self, name: &OsStr, mode: u32) -> io::Result<(std::ffi::CString, File)> {
        let mut last = None;
        for _ in 0..16 {
            let mut t = Vec::from(&b"."[..]);
            // Keep the name short enough for NAME_MAX whatever the target's length.
            t.extend(name.as_bytes().iter().take(200));
            t.extend(format!(".{}.tmp", random_hex()).as_bytes());
            let c = cstr(OsStr::from_bytes(&t))?;
            match self.open_new(&c, mode) {
                Ok(f) => return Ok((c, f)),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| io::Error::other("no free temp name")))
    }

    /// Remove the file `name` here if it exists (a link is removed, never followed): a report
    /// that no longer belongs to the evidence beside it.
    pub fn remove(&self, name: &OsStr) -> io::Result<()> {
        let c = cstr(name)?;
        // SAFETY: valid fd and C string.
        match cvt(unsafe { libc::unlinkat(self.fd.as_raw_fd(), c.as_ptr(), 0) }) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            r => r.map(|_| ()),
        }
    }

    fn unlink(&self, name: &std::ffi::CStr) {
        // SAFETY: valid fd and C string.
        unsafe { libc::unlinkat(self.fd.as_raw_fd(), name.as_ptr(), 0) };
    }
}

/// Which file a name held when this process created it: its device and inode numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileId(u64, u64);

/// A report folder this process holds the lock of.
#[derive(Debug)]
pub struct LockedDir(Dir);

impl std::ops::Deref for LockedDir {
    type Target = Dir;
    fn deref(&self) -> &Dir {
        &self.0
    }
}

/// 16 random bytes as hex, from the kernel (getrandom); the clock and a counter if that fails,
/// which O_EXCL still makes safe (a guessed name is refused, never followed).
fn random_hex() -> String {
    let mut b = [0u8; 16];
    // SAFETY: a valid buffer of that length.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
    if n != b.len() as isize {
        static COUNT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default();
        let c = COUNT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        b.copy_from_slice(&(t ^ ((c as u128) << 64) ^ std::process::id() as u128).to_le_bytes());
    }
    hex::encode(b)
}

fn not_regular(path: &Path, mode: libc::mode_t) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!(
            "{} is {}, not a regular file; nodecert writes only regular files",
            path.display(),
            kind_of(mode)
        ),
    )
}

/// Replace (or create) the regular file at `path` atomically. Its folder must exist, and is
/// reached through no link of another user ([`Dir::open_trusted`]).
pub fn replace(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let (dir, name) = split(path)?;
    Dir::open_trusted(dir)?.replace(name, bytes)
}

/// [`replace`], readable by its owner alone (mode 0600): a file that holds a secret.
pub fn replace_private(path: &Path, bytes: &[u8]) -> io::Result<()> {
    replace_private_owner(path, bytes).map(|_| ())
}

/// [`replace_private`], and the owner (uid) of the file written, as the file system holds it
/// (read from the open file, not again by path: an NFS folder that squashes root makes it
/// another user's).
pub fn replace_private_owner(path: &Path, bytes: &[u8]) -> io::Result<u32> {
    use std::os::unix::fs::MetadataExt;
    let (dir, name) = split(path)?;
    let mut owner = None;
    Dir::open_trusted(dir)?.replace_with(name, 0o600, |f| {
        f.write_all(bytes)?;
        owner = Some(f.metadata()?.uid());
        Ok(())
    })?;
    owner.ok_or_else(|| io::Error::other("the file's owner was not read"))
}

/// Create the file at `path`, which must not exist, with `mode`. Its folder must exist.
pub fn create_new(path: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
    let (dir, name) = split(path)?;
    Dir::open_trusted(dir)?.create_new(name, bytes, mode)
}

/// Whether a file can be written at `path`: its folder exists and the path is absent or a
/// regular file. The error says why not, for a message before any work is done.
pub fn check_target(path: &Path) -> io::Result<()> {
    let (dir, name) = split(path)?;
    let d = Dir::open_trusted(dir).map_err(|e| match e.kind() {
        io::ErrorKind::NotFound => io::Error::new(
            io::ErrorKind::NotFound,
            format!("folder {} does not exist", dir.display()),
        ),
        _ => e,
    })?;
    d.check_target(name)
}

/// Whether `a` and `b` name the same existing file (same device and inode, links followed).
pub fn same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (a.metadata(), b.metadata()) {
        (Ok(x), Ok(y)) => x.dev() == y.dev() && x.ino() == y.ino(),
        _ => false,
    }
}

/// Whether `a` and `b` are the same existing folder.
pub fn same_dir(a: &Path, b: &Path) -> bool {
    same_file(a, b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
            .collect();
        v.sort();
        v
    }

    use crate::testutil::mkfifo;

    /// What a command reads of the folder it holds is in that folder, whatever its path names
    /// later: moved away and another folder put at its path, the folder held is still read
    /// (and no longer written, since its path no longer names it).
    #[test]
    fn the_read_root_reads_the_folder_held() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("report");
        std::fs::create_dir(&p).unwrap();
        std::fs::write(p.join("evidence.json"), "judged").unwrap();
        let d = Dir::open(&p).unwrap();
        assert_eq!(
            std::fs::read_to_string(d.read_root().unwrap().join("evidence.json")).unwrap(),
            "judged"
        );
        // Where /proc is not there (or names another folder), no path is offered instead.
        let e = d.read_root_in(&t.path().join("no-proc")).unwrap_err();
        assert!(e.to_string().contains("is /proc mounted?"), "{e}");
        std::fs::create_dir(t.path().join("fds")).unwrap();
        symlink(
            t.path(),
            t.path().join("fds").join(d.fd.as_raw_fd().to_string()),
        )
        .unwrap();
        assert!(d.read_root_in(&t.path().join("fds")).is_err());
        std::fs::rename(&p, t.path().join("moved")).unwrap();
        std::fs::create_dir(&p).unwrap();
        std::fs::write(p.join("evidence.json"), "forged").unwrap();
        let root = d.read_root().unwrap();
        assert_ne!(root, p);
        assert_eq!(
            std::fs::read_to_string(root.join("evidence.json")).unwrap(),
            "judged"
        );
        let kind = super::super::read::Kind::Evidence;
        assert_eq!(
            d.read_to_string("evidence.json".as_ref(), kind).unwrap(),
            "judged"
        );
        assert!(d.check_in_place().is_err());
        // Through the folder, never a link in it.
        std::fs::remove_file(t.path().join("moved/evidence.json")).unwrap();
        symlink(
            p.join("evidence.json"),
            t.path().join("moved/evidence.json"),
        )
        .unwrap();
        assert!(d.read_to_string("evidence.json".as_ref(), kind).is_err());
    }

    /// What this process created is undone only while the name still holds it: a file moved
    /// in over it since stays.
    #[test]
    fn only_the_file_created_here_is_removed() {
        let t = tempfile::tempdir().unwrap();
        let d = Dir::open(t.path()).unwrap();
        let id = d.create_new_id("key".as_ref(), b"secret", 0o600).unwrap();
        let other = d.create_new_id("other".as_ref(), b"x", 0o600).unwrap();
        assert_ne!(id, other);
        // Someone renames their file over it.
        std::fs::write(t.path().join("theirs"), "theirs").unwrap();
        std::fs::rename(t.path().join("theirs"), t.path().join("key")).unwrap();
        assert!(!d.remove_if_same("key".as_ref(), id).unwrap());
        assert_eq!(
            std::fs::read_to_string(t.path().join("key")).unwrap(),
            "theirs"
        );
        // A link at the name is not followed to the file it names.
        std::fs::remove_file(t.path().join("key")).unwrap();
        symlink(t.path().join("other"), t.path().join("key")).unwrap();
        assert!(!d.remove_if_same("key".as_ref(), other).unwrap());
        assert!(t.path().join("other").exists() && t.path().join("key").exists());
        // The file itself is removed; a name that holds nothing is left as it is.
        assert!(d.remove_if_same("other".as_ref(), other).unwrap());
        assert!(!t.path().join("other").exists());
        assert!(!d.remove_if_same("none".as_ref(), other).unwrap());
    }

    #[test]
    fn replaces_a_regular_file_and_leaves_no_temp_file() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("a.json");
        replace(&p, b"one").unwrap();
        replace(&p, b"two").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"two");
        assert_eq!(names(t.path()), ["a.json"]);
    }

    #[test]
    fn a_symlink_target_is_refused_and_its_target_untouched() {
        let t = tempfile::tempdir().unwrap();
        let victim = t.path().join("victim");
        std::fs::write(&victim, "precious").unwrap();
        let link = t.path().join("out.xml");
        symlink(&victim, &link).unwrap();
        let e = replace(&link, b"x").unwrap_err();
        assert!(e.to_string().contains("a symbolic link"), "{e}");
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
        assert!(link.symlink_metadata().unwrap().file_type().is_symlink());
        assert_eq!(names(t.path()), ["out.xml", "victim"]);
    }

    #[test]
    fn a_fifo_or_a_folder_target_is_refused() {
        let t = tempfile::tempdir().unwrap();
        let fifo = t.path().join("null");
        mkfifo(&fifo);
        let e = replace(&fifo, b"x").unwrap_err();
        assert!(e.to_string().contains("named pipe (FIFO)"), "{e}");
        assert!(check_target(&fifo).is_err());
        std::fs::create_dir(t.path().join("d")).unwrap();
        let e = replace(&t.path().join("d"), b"x").unwrap_err();
        assert!(e.to_string().contains("a folder"), "{e}");
        assert_eq!(names(t.path()), ["d", "null"]);
    }

    #[test]
    fn a_failed_write_removes_its_temp_file_and_keeps_the_old_one() {
        let t = tempfile::tempdir().unwrap();
        let d = Dir::open(t.path()).unwrap();
        d.replace(OsStr::new("e.json"), b"old").unwrap();
        let e = d
            .replace_with(OsStr::new("e.json"), FILE_MODE, |f| {
                f.write_all(b"half")?;
                Err(io::Error::from_raw_os_error(libc::ENOSPC))
            })
            .unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOSPC));
        assert_eq!(names(t.path()), ["e.json"]);
        assert_eq!(std::fs::read(t.path().join("e.json")).unwrap(), b"old");
    }

    #[test]
    fn a_planted_link_at_the_old_temp_name_is_not_followed() {
        let t = tempfile::tempdir().unwrap();
        let victim = t.path().join("victim");
        std::fs::write(&victim, "precious").unwrap();
        // The name the old code used: ".NAME.tmp.PID".
        let planted = t
            .path()
            .join(format!(".evidence.json.tmp.{}", std::process::id()));
        symlink(&victim, &planted).unwrap();
        replace(&t.path().join("evidence.json"), b"{}").unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
        // Temp names are random: two writes never use the same one.
        assert_ne!(random_hex(), random_hex());
    }

    #[test]
    fn created_folders_are_not_entered_through_links() {
        let t = tempfile::tempdir().unwrap();
        let d = Dir::create_all(&t.path().join("a/b/c")).unwrap();
        d.replace(OsStr::new("f"), b"1").unwrap();
        assert!(t.path().join("a/b/c/f").is_file());
        let elsewhere = t.path().join("elsewhere");
        std::fs::create_dir(&elsewhere).unwrap();
        symlink(&elsewhere, t.path().join("link")).unwrap();
        let e = Dir::create_all(&t.path().join("link")).unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
        let mut slash = t.path().join("link").into_os_string();
        slash.push("/");
        assert!(Dir::create_all(Path::new(&slash)).is_err());
    }

    #[test]
    fn a_report_folder_renamed_away_and_replaced_gets_no_more_writes() {
        let t = tempfile::tempdir().unwrap();
        let r = t.path().join("r");
        let d = Dir::create_all(&r).unwrap().lock().unwrap();
        d.replace_in_place(OsStr::new("evidence.json"), b"1")
            .unwrap();
        // Someone who can write the parent moves the locked folder away and puts a real
        // folder (another run's, maybe signed) in its place.
        std::fs::rename(&r, t.path().join("moved")).unwrap();
        std::fs::create_dir(&r).unwrap();
        std::fs::write(r.join("evidence.json"), "theirs").unwrap();
        let e = d
            .replace_in_place(OsStr::new("evidence.json"), b"2")
            .unwrap_err();
        assert!(
            e.to_string()
                .contains("no longer the folder nodecert locked"),
            "{e}"
        );
        let e = d
            .create_new_in_place(OsStr::new("nodecert-manifest.txt.sig"), b"s", 0o644)
            .unwrap_err();
        assert!(e.to_string().contains("moved or replaced"), "{e}");
        assert_eq!(names(&r), ["evidence.json"]);
        assert_eq!(
            std::fs::read_to_string(r.join("evidence.json")).unwrap(),
            "theirs"
        );
        assert_eq!(
            std::fs::read_to_string(t.path().join("moved/evidence.json")).unwrap(),
            "1"
        );
        // A link put there instead, even to the moved folder, is not the path's folder either
        // unless it leads to the very folder locked: then the write is harmless and goes on.
        std::fs::remove_file(r.join("evidence.json")).unwrap();
        std::fs::remove_dir(&r).unwrap();
        let elsewhere = t.path().join("elsewhere");
        std::fs::create_dir(&elsewhere).unwrap();
        symlink(&elsewhere, &r).unwrap();
        assert!(d
            .replace_in_place(OsStr::new("evidence.json"), b"3")
            .is_err());
        assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0);
        std::fs::remove_file(&r).unwrap();
        symlink(t.path().join("moved"), &r).unwrap();
        d.replace_in_place(OsStr::new("evidence.json"), b"4")
            .unwrap();
        assert_eq!(
            std::fs::read_to_string(t.path().join("moved/evidence.json")).unwrap(),
            "4"
        );
    }

    #[test]
    fn a_locked_folder_cannot_be_locked_again() {
        let t = tempfile::tempdir().unwrap();
        let first = Dir::open(t.path()).unwrap().lock().unwrap();
        let e = Dir::open(t.path()).unwrap().lock().unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
        drop(first);
        Dir::open(t.path()).unwrap().lock().unwrap();
    }

    #[test]
    fn create_new_never_replaces() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("k");
        create_new(&p, b"1", 0o600).unwrap();
        assert_eq!(
            create_new(&p, b"2", 0o600).unwrap_err().kind(),
            io::ErrorKind::AlreadyExists
        );
        assert_eq!(std::fs::read(&p).unwrap(), b"1");
    }
}
