//! The file system boundary: every file nodecert writes goes through [`write`], every file it
//! reads from a user (suite, node, evidence, keys, manifest, templates) through [`read`].
//!
//! nodecert runs as root on machines other people own, in output folders that are often shared.
//! So it replaces only regular files, never follows a symbolic link it did not choose, creates
//! temp files under names no one can guess (O_CREAT|O_EXCL|O_NOFOLLOW), removes them on any
//! failure, locks a report folder for as long as it writes there, and reads only regular files of
//! bounded size (a FIFO or /dev/zero given as a suite is refused at once, not read forever).

pub mod read;
pub mod trust;
pub mod write;

use std::io;
use std::path::Path;

/// What a file that is not a regular file is, for messages ("a named pipe (FIFO)").
pub(crate) fn kind_of(mode: libc::mode_t) -> &'static str {
    match mode & libc::S_IFMT {
        libc::S_IFREG => "a regular file",
        libc::S_IFDIR => "a folder",
        libc::S_IFLNK => "a symbolic link",
        libc::S_IFIFO => "a named pipe (FIFO)",
        libc::S_IFCHR => "a character device",
        libc::S_IFBLK => "a block device",
        libc::S_IFSOCK => "a socket",
        _ => "not a regular file",
    }
}

/// The names the kernel looks up, one at a time, to walk `p`: its normal components and '..'
/// ("/" and "." are where the walk starts or stays).
pub(crate) fn walk_names(p: &Path) -> Vec<std::ffi::OsString> {
    use std::path::Component;
    p.components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_os_string()),
            Component::ParentDir => Some("..".into()),
            _ => None,
        })
        .collect()
}

pub(crate) fn cstr(s: &std::ffi::OsStr) -> io::Result<std::ffi::CString> {
    use std::os::unix::ffi::OsStrExt;
    std::ffi::CString::new(s.as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a NUL byte in a file name"))
}

pub(crate) fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// The folder of `path` ("." for a bare name) and its last component.
pub(crate) fn split(path: &Path) -> io::Result<(&Path, &std::ffi::OsStr)> {
    let name = path.file_name().ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            "names no file (it ends in '..' or '/')",
        )
    })?;
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    Ok((dir, name))
}
