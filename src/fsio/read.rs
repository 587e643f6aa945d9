//! Reading files: regular files only, each kind with a size limit (README, "Limits").
//!
//! Files are opened with O_NONBLOCK, so that opening a FIFO does not wait for a writer, then
//! checked with fstat: a FIFO, a device (/dev/zero), a socket or a folder is refused at once.
//! [`open_in`] opens a file named relative to a folder without following any symbolic link
//! under that folder: what `verify` reads of a signed folder stays inside it.

use super::{cstr, cvt, kind_of};
use std::ffi::OsStr;
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;

const KIB: u64 = 1024;
const MIB: u64 = 1024 * KIB;

/// What a file is read as, and so how large it may be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A suite or a file it extends: 1 MiB.
    Suite,
    /// A simulated node description: 1 MiB.
    Node,
    /// evidence.json (also as a baseline or in `diff`): 64 MiB.
    Evidence,
    /// A report template: 1 MiB.
    Template,
    /// A fleet's fleet.json: 1 GiB (a few kilobytes a node, for up to 100,000 nodes).
    Fleet,
    /// A file the kernel or the system gives (/proc, /sys, /etc): 4 MiB, enough for the
    /// /proc/cpuinfo of a thousand CPUs.
    System,
}

impl Kind {
    pub const fn limit(self) -> u64 {
        match self {
            Kind::Suite | Kind::Node | Kind::Template => MIB,
            Kind::System => 4 * MIB,
            Kind::Evidence => 64 * MIB,
            Kind::Fleet => 1024 * MIB,
        }
    }

    pub const fn name(self) -> &'static str {
        match self {
            Kind::Suite => "a suite",
            Kind::Node => "a node description",
            Kind::Evidence => "evidence",
            Kind::Template => "a template",
            Kind::Fleet => "a fleet report",
            Kind::System => "a system file",
        }
    }
}

fn not_regular(mode: libc::mode_t) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!(
            "is {}, not a regular file; nodecert reads only regular files",
            kind_of(mode)
        ),
    )
}

/// Open `fd`'s file if it is a regular file, in blocking mode again.
fn regular(fd: OwnedFd) -> io::Result<File> {
    let st = fstat(&fd)?;
    if st.st_mode & libc::S_IFMT != libc::S_IFREG {
        return Err(not_regular(st.st_mode));
    }
    // SAFETY: valid fd; clears O_NONBLOCK (no effect on regular files, but tidy).
    unsafe {
        let fl = libc::fcntl(fd.as_raw_fd(), libc::F_GETFL);
        if fl >= 0 {
            libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, fl & !libc::O_NONBLOCK);
        }
    }
    Ok(File::from(fd))
}

fn open_at(at: libc::c_int, name: &OsStr, flags: libc::c_int) -> io::Result<OwnedFd> {
    let c = cstr(name)?;
    // SAFETY: a valid C string; the fd is owned below.
    let fd = cvt(unsafe { libc::openat(at, c.as_ptr(), flags | libc::O_CLOEXEC) })?;
    // SAFETY: just opened, owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn link_error(e: io::Error) -> io::Error {
    if e.raw_os_error() == Some(libc::ELOOP) {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            "is a symbolic link, which is not followed here",
        )
    } else {
        e
    }
}

/// Open the regular file at `path` for reading; `follow`: whether its last component may be a
/// symbolic link.
pub fn open(path: &Path, follow: bool) -> io::Result<File> {
    let mut flags = libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOCTTY;
    if !follow {
        flags |= libc::O_NOFOLLOW;
    }
    let fd = open_at(libc::AT_FDCWD, path.as_os_str(), flags).map_err(link_error)?;
    regular(fd)
}

/// Why [`open_trusting_links`] did not open a file.
#[derive(Debug)]
pub enum TrustedOpenError {
    /// The link `link` (the path as walked so far) belongs to `uid`, a user not trusted;
    /// `last`: it is the last name of the path given (not a link on the way).
    ForeignLink {
        link: std::path::PathBuf,
        uid: u32,
        last: bool,
    },
    Io(io::Error),
}

impl From<io::Error> for TrustedOpenError {
    fn from(e: io::Error) -> Self {
        TrustedOpenError::Io(e)
    }
}

/// The owner, type, device and inode of the open file `fd` (an O_PATH one included).
fn fstat(fd: &OwnedFd) -> io::Result<libc::stat> {
    // SAFETY: zeroed stat is a valid out-parameter; valid fd.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    cvt(unsafe { libc::fstat(fd.as_raw_fd(), &mut st) })?;
    Ok(st)
}

/// The target of the link `fd` (opened O_PATH|O_NOFOLLOW): read through that descriptor, so it
/// is the target of the link whose owner was checked, whatever is at its name now.
fn read_link_fd(fd: &OwnedFd) -> io::Result<std::ffi::OsString> {
    use std::os::unix::ffi::OsStringExt;
    let mut buf = vec![0u8; 4096];
    // SAFETY: an empty C string and a buffer of buf.len() bytes.
    let n = unsafe {
        libc::readlinkat(
            fd.as_raw_fd(),
            c"".as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    let n = usize::try_from(n).map_err(|_| io::Error::last_os_error())?;
    if n >= buf.len() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "a link whose target is longer than 4095 bytes",
        ));
    }
    buf.truncate(n);
    Ok(std::ffi::OsString::from_vec(buf))
}

/// Open the regular file at `path` for reading, following only the links whose owner `trusted`
/// accepts, wherever they are on the way (a link to a folder included). The path is walked one
/// name at a time, as the kernel walks it, through the descriptors of the folders entered, and
/// each link is read through the descriptor its owner was checked on: nothing can be swapped
/// between the check and the open (a file others may rename in a shared folder, swapped for a
/// link of theirs to a file of ours, is not read).
pub fn open_trusting_links(
    path: &Path,
    trusted: &dyn Fn(u32) -> bool,
) -> Result<File, TrustedOpenError> {
    use std::collections::VecDeque;
    use std::path::{Component, PathBuf};
    let names = super::walk_names;
    let root = |abs: bool| {
        open_at(
            libc::AT_FDCWD,
            OsStr::new(if abs { "/" } else { "." }),
            libc::O_PATH | libc::O_DIRECTORY,
        )
    };
    let mut at = root(path.is_absolute())?;
    let mut walked = PathBuf::from(if path.is_absolute() { "/" } else { "" });
    let mut pending: VecDeque<std::ffi::OsString> = names(path).into();
    if pending.is_empty() {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "names no file").into());
    }
    let mut links = 0;
    while let Some(name) = pending.pop_front() {
        // The path as resolved so far, for messages.
        if name == ".." && matches!(walked.components().next_back(), Some(Component::Normal(_))) {
            walked.pop();
        } else {
            walked.push(&name);
        }
        // As a folder first: an automount point (an autofs home) is mounted only when looked
        // up as a folder; O_PATH alone would give the empty mount point. What is not a folder
        // (a link, the file) is then looked at as itself.
        let fd = match open_at(
            at.as_raw_fd(),
            &name,
            libc::O_PATH | libc::O_NOFOLLOW | libc::O_DIRECTORY,
        ) {
            Err(e) if e.raw_os_error() == Some(libc::ENOTDIR) => {
                open_at(at.as_raw_fd(), &name, libc::O_PATH | libc::O_NOFOLLOW)?
            }
            r => r?,
        };
        let st = fstat(&fd)?;
        match st.st_mode & libc::S_IFMT {
            libc::S_IFLNK => {
                if !trusted(st.st_uid) {
                    return Err(TrustedOpenError::ForeignLink {
                        link: walked,
                        uid: st.st_uid,
                        last: pending.is_empty(),
                    });
                }
                links += 1;
                if links > super::write::MAX_LINKS {
                    return Err(io::Error::from_raw_os_error(libc::ELOOP).into());
                }
                let target = PathBuf::from(read_link_fd(&fd)?);
                if target.is_absolute() {
                    at = root(true)?;
                    walked = PathBuf::from("/");
                } else {
                    walked.pop();
                }
                for n in names(&target).into_iter().rev() {
                    pending.push_front(n);
                }
            }
            // A folder last: the walk ends in it, and the path names no file (below).
            libc::S_IFDIR => at = fd,
            _ if pending.is_empty() => {
                // The last name: opened for reading without following a link, and it must be
                // the file just looked at.
                let f = open_at(
                    at.as_raw_fd(),
                    &name,
                    libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_NOFOLLOW,
                )
                .map_err(link_error)?;
                let now = fstat(&f)?;
                if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino) {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidInput,
                        "was replaced while it was opened",
                    )
                    .into());
                }
                return Ok(regular(f)?);
            }
            _ => {
                return Err(io::Error::new(
                    io::ErrorKind::NotADirectory,
                    format!("{} is not a folder", walked.display()),
                )
                .into())
            }
        }
    }
    // A folder last, or a link to "/" or "." last: the path names a folder.
    Err(io::Error::new(
        io::ErrorKind::InvalidInput,
        "is a folder, not a regular file; nodecert reads only regular files",
    )
    .into())
}

/// Open the regular file `name` in the folder open as `at`, never through a link.
pub(crate) fn open_in_fd(at: libc::c_int, name: &OsStr) -> io::Result<File> {
    let fd = open_at(
        at,
        name,
        libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_NOFOLLOW,
    )
    .map_err(link_error)?;
    regular(fd)
}

/// Open the regular file `rel` ('/'-separated, no '..') under the folder `dir`, following no
/// symbolic link below `dir`.
pub fn open_in(dir: &Path, rel: &str) -> io::Result<File> {
    let mut at = open_at(
        libc::AT_FDCWD,
        dir.as_os_str(),
        libc::O_RDONLY | libc::O_DIRECTORY,
    )?;
    let parts: Vec<&str> = rel.split('/').collect();
    for (i, part) in parts.iter().enumerate() {
        if part.is_empty() || *part == "." || *part == ".." {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "names a path outside the folder or an empty component",
            ));
        }
        let last = i + 1 == parts.len();
        let flags = libc::O_RDONLY
            | libc::O_NOFOLLOW
            | if last {
                libc::O_NONBLOCK | libc::O_NOCTTY
            } else {
                libc::O_DIRECTORY
            };
        let next = open_at(at.as_raw_fd(), OsStr::new(part), flags).map_err(|e| {
            if e.raw_os_error() == Some(libc::ENOTDIR) && !last {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("{part} is not a folder (a symbolic link is not followed here)"),
                )
            } else {
                link_error(e)
            }
        })?;
        if last {
            return regular(next);
        }
        at = next;
    }
    unreachable!("split yields at least one part")
}

/// Everything `f` holds, at most `limit` bytes: more is an error.
pub fn read_limited(mut f: impl Read, limit: u64, what: &str) -> io::Result<Vec<u8>> {
    let mut buf = Vec::new();
    (&mut f).take(limit + 1).read_to_end(&mut buf)?;
    if buf.len() as u64 > limit {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("larger than the {} limit for {what}", format_limit(limit)),
        ));
    }
    Ok(buf)
}

fn format_limit(b: u64) -> String {
    if b >= MIB && b % MIB == 0 {
        format!("{} MiB", b / MIB)
    } else if b >= KIB && b % KIB == 0 {
        format!("{} KiB", b / KIB)
    } else {
        format!("{b} bytes")
    }
}

/// The bytes of the regular file at `path`, read as `kind` (links followed: the caller named it).
pub fn read(path: &Path, kind: Kind) -> io::Result<Vec<u8>> {
    read_limited(open(path, true)?, kind.limit(), kind.name())
}

/// The text of the regular file at `path`, read as `kind`.
pub fn read_to_string(path: &Path, kind: Kind) -> io::Result<String> {
    text(read(path, kind)?)
}

/// [`read_to_string`] of the file at `path` itself, never of what a link there points to (a
/// file in a folder others can write).
pub fn read_to_string_no_link(path: &Path, kind: Kind) -> io::Result<String> {
    text(read_limited(open(path, false)?, kind.limit(), kind.name())?)
}

/// The text of the open file `f`, read as `kind`.
pub fn file_to_string(f: File, kind: Kind) -> io::Result<String> {
    text(read_limited(f, kind.limit(), kind.name())?)
}

fn text(bytes: Vec<u8>) -> io::Result<String> {
    String::from_utf8(bytes).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            "stream did not contain valid UTF-8",
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;
    use std::time::{Duration, Instant};

    use crate::testutil::mkfifo;

    /// Links are followed wherever they are on the way, each only where its owner is trusted;
    /// what is not a regular file, or leads nowhere, is an error, never a panic.
    #[test]
    fn open_trusting_links_follows_trusted_links_and_names_a_foreign_one() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path();
        std::fs::create_dir_all(d.join("a/b")).unwrap();
        std::fs::write(d.join("a/b/key"), "k").unwrap();
        symlink("a/b", d.join("tob")).unwrap();
        symlink("../b/key", d.join("a/b/rel")).unwrap();
        symlink(d.join("tob/rel"), d.join("chain")).unwrap();
        symlink("/", d.join("root")).unwrap();
        symlink(".", d.join("here")).unwrap();
        symlink("nowhere", d.join("dangling")).unwrap();
        symlink("loop", d.join("loop")).unwrap();
        mkfifo(&d.join("fifo"));
        let all = |_: u32| true;
        let read = |p: &Path, trusted: &dyn Fn(u32) -> bool| {
            open_trusting_links(p, trusted).map(|mut f| {
                let mut s = String::new();
                f.read_to_string(&mut s).unwrap();
                s
            })
        };
        for p in [
            "a/b/key",
            "tob/key",
            "a/b/rel",
            "chain",
            "a/../a/b/key",
            "here/chain",
        ] {
            assert_eq!(read(&d.join(p), &all).unwrap(), "k", "{p}");
        }
        // Relative to the working folder too.
        let rel = d.join("a/b/key").strip_prefix("/").unwrap().to_path_buf();
        let up = "../".repeat(std::env::current_dir().unwrap().components().count());
        assert_eq!(read(&Path::new(&up).join(rel), &all).unwrap(), "k");
        let me = crate::fsio::trust::euid();
        let not_me = move |uid: u32| uid != me;
        assert_eq!(
            read(&d.join("a/b/key"), &not_me).unwrap(),
            "k",
            "no link on the way"
        );
        match read(&d.join("chain"), &not_me) {
            Err(TrustedOpenError::ForeignLink { link, uid, last }) => {
                assert_eq!((link, uid, last), (d.join("chain"), me, true));
            }
            other => panic!("{other:?}"),
        }
        match read(&d.join("tob/key"), &not_me) {
            Err(TrustedOpenError::ForeignLink { link, last, .. }) => {
                assert_eq!((link, last), (d.join("tob"), false));
            }
            other => panic!("{other:?}"),
        }
        // The link named is where it is, the path resolved so far: after an absolute link the
        // walk starts again at "/", after a relative one in the link's folder.
        fn first_only(calls: &std::cell::Cell<u32>) -> impl Fn(u32) -> bool + '_ {
            move |_| {
                calls.set(calls.get() + 1);
                calls.get() == 1
            }
        }
        let calls = std::cell::Cell::new(0);
        match read(&d.join("chain"), &first_only(&calls)) {
            Err(TrustedOpenError::ForeignLink { link, last, .. }) => {
                assert_eq!((link, last), (d.join("tob"), false));
            }
            other => panic!("{other:?}"),
        }
        let calls = std::cell::Cell::new(0);
        match read(&d.join("tob/rel"), &first_only(&calls)) {
            Err(TrustedOpenError::ForeignLink { link, last, .. }) => {
                assert_eq!((link, last), (d.join("a/b/rel"), true));
            }
            other => panic!("{other:?}"),
        }
        for (p, says) in [
            ("root", "is a folder"),
            ("here", "is a folder"),
            ("a", "a folder"),
            ("fifo", "not a regular file"),
            ("a/b/key/x", "is not a folder"),
            ("dangling", "No such file"),
            ("loop", "Too many levels"),
        ] {
            match read(&d.join(p), &all) {
                Err(TrustedOpenError::Io(e)) => assert!(e.to_string().contains(says), "{p}: {e}"),
                other => panic!("{p}: {other:?}"),
            }
        }
        assert!(matches!(
            read(Path::new(""), &all),
            Err(TrustedOpenError::Io(_))
        ));
        // As many links as the kernel follows (40) are followed; one more is too many.
        let mut next = d.join("a/b/key");
        for i in 0..41 {
            let l = d.join(format!("hop{i}"));
            symlink(&next, &l).unwrap();
            next = l;
        }
        assert_eq!(read(&d.join("hop39"), &all).unwrap(), "k");
        match read(&d.join("hop40"), &all) {
            Err(TrustedOpenError::Io(e)) => {
                assert!(e.to_string().contains("Too many levels"), "{e}")
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_fifo_is_refused_at_once() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("suite.toml");
        mkfifo(&p);
        let start = Instant::now();
        let e = read(&p, Kind::Suite).unwrap_err();
        assert!(e.to_string().contains("named pipe (FIFO)"), "{e}");
        assert!(start.elapsed() < Duration::from_secs(2));
        let e = open_in(t.path(), "suite.toml").unwrap_err();
        assert!(e.to_string().contains("FIFO"), "{e}");
    }

    /// What a command reads of the folder it holds: a regular file only, never through a link,
    /// and a FIFO refused at once (not waited on for a writer).
    #[test]
    fn a_folders_own_file_is_read_through_it_never_through_a_link() {
        let t = tempfile::tempdir().unwrap();
        let dir = crate::fsio::write::Dir::open(t.path()).unwrap();
        std::fs::write(t.path().join("report.md"), "mine").unwrap();
        let mut s = String::new();
        dir.open_file("report.md".as_ref())
            .unwrap()
            .read_to_string(&mut s)
            .unwrap();
        assert_eq!(s, "mine");
        symlink(t.path().join("report.md"), t.path().join("link.md")).unwrap();
        let e = dir.open_file("link.md".as_ref()).unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
        mkfifo(&t.path().join("fifo"));
        let start = Instant::now();
        let e = dir.open_file("fifo".as_ref()).unwrap_err();
        assert!(e.to_string().contains("FIFO"), "{e}");
        assert!(start.elapsed() < Duration::from_secs(2));
    }

    #[test]
    fn a_device_is_refused() {
        let e = read(Path::new("/dev/zero"), Kind::Evidence).unwrap_err();
        assert!(e.to_string().contains("character device"), "{e}");
    }

    #[test]
    fn a_file_over_its_limit_is_refused() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("big.toml");
        std::fs::write(&p, vec![b'#'; (Kind::Suite.limit() + 1) as usize]).unwrap();
        let e = read(&p, Kind::Suite).unwrap_err();
        assert_eq!(e.to_string(), "larger than the 1 MiB limit for a suite");
    }

    #[test]
    fn open_in_follows_no_link_below_the_folder() {
        let t = tempfile::tempdir().unwrap();
        let outside = t.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        std::fs::write(outside.join("secret"), "x").unwrap();
        let dir = t.path().join("cert");
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        std::fs::write(dir.join("sub/ok"), "fine").unwrap();
        symlink(outside.join("secret"), dir.join("file")).unwrap();
        symlink(&outside, dir.join("linked")).unwrap();
        assert!(open_in(&dir, "sub/ok").is_ok());
        let e = open_in(&dir, "file").unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
        assert!(open_in(&dir, "linked/secret").is_err());
        assert!(open_in(&dir, "../outside/secret").is_err());
    }
}
