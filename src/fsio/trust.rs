//! Whether someone else can redirect a file that another program opens by name, following links.
//!
//! nodecert opens its own files without following links ([`super::write`]), but some files are
//! opened by other programs that follow them: Slurm opens a job's `--output` as the job's user.
//! Such a file is only as safe as the folders on its way. The test is the one OpenSSH's
//! StrictModes makes of the folders above `authorized_keys` (`auth.c`, `safe_path`): each is
//! owned by root or by the user, and nobody else can write to it, except a sticky folder above
//! (as /tmp is), where others can add entries but not rename or remove ours.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

/// This process's effective user id.
pub fn euid() -> u32 {
    // SAFETY: geteuid cannot fail and has no side effects.
    unsafe { libc::geteuid() }
}

/// Whether what `owner` owns may be trusted by `uid`: it is `uid`'s own, or root's.
pub fn trusted_owner(owner: u32, uid: u32) -> bool {
    owner == uid || owner == 0
}

/// Whether nobody but `uid` and root can rename or replace entries of `parent` (links
/// followed): it is owned by one of them, and either writable by nobody else or sticky.
pub fn safe_parent(parent: &Path, uid: u32) -> bool {
    std::fs::metadata(parent).is_ok_and(|m| {
        let mode = m.permissions().mode();
        m.is_dir() && trusted_owner(m.uid(), uid) && (mode & 0o022 == 0 || mode & 0o1000 != 0)
    })
}

/// Why a user other than `uid` and root could redirect a file that another program opens by
/// name in the folder `dir`, following links (plant a link there, or swap a folder or a link on
/// the way); `None` when none could. The path is walked as the kernel walks it, one name at a
/// time, each link followed where it leads (a link reached through another link included):
/// every link must be owned by `uid` or root, every folder a name is looked up in must be one
/// only they can change ([`safe_parent`]), and `dir` itself must be writable by nobody else,
/// sticky or not: a sticky folder still lets others create the name first.
pub fn others_can_redirect_in(dir: &Path, uid: u32) -> Option<String> {
    use super::write::MAX_LINKS;
    use std::collections::VecDeque;
    use std::path::PathBuf;
    let trusted = |owner: u32| trusted_owner(owner, uid);
    let names = super::walk_names;
    let abs = match std::path::absolute(dir) {
        Ok(a) => a,
        Err(e) => return Some(format!("{}: {e}", dir.display())),
    };
    let unsafe_folder = |p: &Path| {
        format!(
            "{}, a folder on its way, can be changed by others",
            p.display()
        )
    };
    let mut at = PathBuf::from("/");
    if !safe_parent(&at, uid) {
        return Some(unsafe_folder(&at));
    }
    let mut pending: VecDeque<std::ffi::OsString> = names(&abs).into();
    let mut links = 0;
    while let Some(name) = pending.pop_front() {
        if name == ".." {
            // Back to a folder already entered (the walk holds no link).
            at.pop();
            continue;
        }
        let next = at.join(&name);
        let m = match std::fs::symlink_metadata(&next) {
            Ok(m) => m,
            Err(e) => return Some(format!("cannot read {}: {e}", next.display())),
        };
        if m.file_type().is_symlink() {
            if !trusted(m.uid()) {
                return Some(format!(
                    "{} is a link that belongs to uid {}",
                    next.display(),
                    m.uid()
                ));
            }
            links += 1;
            if links > MAX_LINKS {
                return Some(format!("{}: more than {MAX_LINKS} links", abs.display()));
            }
            let target = match std::fs::read_link(&next) {
                Ok(t) => t,
                Err(e) => return Some(format!("cannot read the link {}: {e}", next.display())),
            };
            if target.is_absolute() {
                at = PathBuf::from("/");
            }
            for n in names(&target).into_iter().rev() {
                pending.push_front(n);
            }
            continue;
        }
        if !m.is_dir() {
            return Some(format!("{} is not a folder", next.display()));
        }
        // A folder the walk goes on in: nobody else may swap what it holds.
        if !pending.is_empty() && !safe_parent(&next, uid) {
            return Some(unsafe_folder(&next));
        }
        at = next;
    }
    // The folder itself (or "/", or what the links led to).
    match std::fs::metadata(&at) {
        Err(e) => Some(format!("cannot read {}: {e}", at.display())),
        Ok(m) if !m.is_dir() => Some(format!("{} is not a folder", at.display())),
        Ok(m) if !trusted(m.uid()) => Some(format!("{} belongs to uid {}", at.display(), m.uid())),
        Ok(m) if m.permissions().mode() & 0o022 != 0 => Some(format!(
            "{} can be written by others (mode {:04o})",
            at.display(),
            m.permissions().mode() & 0o7777
        )),
        Ok(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{chown, lchown, symlink};

    fn mode(p: &Path, m: u32) {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap();
    }

    /// What any user running the tests can check for itself (no owner changed): the modes of
    /// the folder and of the folders on its way, links, '..', and what is not a folder.
    #[test]
    fn modes_and_links_on_the_way_for_whoever_runs_it() {
        let me = euid();
        let t = tempfile::tempdir().unwrap();
        let top = t.path().join("top");
        let out = top.join("out");
        std::fs::create_dir_all(&out).unwrap();
        for p in [&top, &out] {
            mode(p, 0o755);
        }
        assert_eq!(others_can_redirect_in(&out, me), None);
        mode(&out, 0o770);
        assert!(others_can_redirect_in(&out, me)
            .unwrap()
            .ends_with("can be written by others (mode 0770)"));
        mode(&out, 0o1777);
        assert!(others_can_redirect_in(&out, me).is_some());
        mode(&out, 0o755);
        mode(&top, 0o777);
        assert!(others_can_redirect_in(&out, me)
            .unwrap()
            .contains("top, a folder on its way"));
        mode(&top, 0o1777);
        assert_eq!(others_can_redirect_in(&out, me), None);
        mode(&top, 0o755);
        // Links: followed, relative ones from their folder; a link in a folder others can
        // write could be swapped.
        let rel = top.join("rel");
        symlink("../top/./out", &rel).unwrap();
        assert_eq!(others_can_redirect_in(&rel, me), None);
        let open = t.path().join("open");
        std::fs::create_dir(&open).unwrap();
        mode(&open, 0o777);
        symlink(&out, open.join("link")).unwrap();
        assert!(others_can_redirect_in(&open.join("link"), me).is_some());
        let chain = top.join("chain");
        symlink(open.join("link"), &chain).unwrap();
        assert!(others_can_redirect_in(&chain, me)
            .unwrap()
            .contains("open, a folder on its way"));
        let looped = top.join("loop");
        symlink(&looped, &looped).unwrap();
        assert!(others_can_redirect_in(&looped, me)
            .unwrap()
            .ends_with("more than 40 links"));
        // As many links as the kernel follows (40) are followed; one more is too many.
        let mut next = out.clone();
        for i in 0..41 {
            let l = top.join(format!("hop{i}"));
            symlink(&next, &l).unwrap();
            next = l;
        }
        assert_eq!(others_can_redirect_in(&top.join("hop39"), me), None);
        assert!(others_can_redirect_in(&top.join("hop40"), me)
            .unwrap()
            .ends_with("more than 40 links"));
        assert_eq!(others_can_redirect_in(&top.join("out/../out"), me), None);
        assert!(others_can_redirect_in(&top.join("none"), me)
            .unwrap()
            .starts_with("cannot read"));
        std::fs::write(top.join("file"), "x").unwrap();
        assert!(others_can_redirect_in(&top.join("file"), me)
            .unwrap()
            .ends_with("is not a folder"));
    }

    /// A user (uid 1000 here) is safe in its own folder in a sticky /tmp, and not once another
    /// user can write the folder, or a folder above it, or owns it or a link on the way.
    #[test]
    fn a_folder_is_safe_only_when_nobody_else_can_change_its_way() {
        if euid() != 0 {
            eprintln!("skipped: changing owners needs root");
            return;
        }
        let me = 1000;
        let t = tempfile::tempdir().unwrap();
        let top = t.path().join("top");
        let out = top.join("out");
        std::fs::create_dir_all(&out).unwrap();
        for p in [&top, &out] {
            chown(p, Some(me), None).unwrap();
            mode(p, 0o755);
        }
        // tempdir's own folder is root's, 0700, under sticky /tmp.
        assert_eq!(others_can_redirect_in(&out, me), None);
        // Root's job may not trust that user's folder: the user could plant a link for it.
        assert!(others_can_redirect_in(&out, 0).is_some());

        mode(&out, 0o775);
        let why = others_can_redirect_in(&out, me).unwrap();
        assert!(
            why.ends_with("can be written by others (mode 0775)"),
            "{why}"
        );
        // Sticky is not enough for the folder itself: others could create the name first.
        mode(&out, 0o1777);
        assert!(others_can_redirect_in(&out, me).is_some());
        mode(&out, 0o755);

        // A folder above that others can write, unless it is sticky.
        mode(&top, 0o777);
        let why = others_can_redirect_in(&out, me).unwrap();
        assert!(why.contains("a folder on its way"), "{why}");
        mode(&top, 0o1777);
        assert_eq!(others_can_redirect_in(&out, me), None);
        mode(&top, 0o755);

        // Owned by someone else.
        chown(&out, Some(4242), None).unwrap();
        let why = others_can_redirect_in(&out, me).unwrap();
        assert!(why.ends_with("belongs to uid 4242"), "{why}");
        chown(&out, Some(me), None).unwrap();

        // A link on the way owned by someone else; one of ours is followed and judged by what
        // it leads to.
        let link = t.path().join("link");
        symlink(&out, &link).unwrap();
        lchown(&link, Some(4242), None).unwrap();
        let why = others_can_redirect_in(&link, me).unwrap();
        assert!(why.ends_with("is a link that belongs to uid 4242"), "{why}");
        lchown(&link, Some(me), None).unwrap();
        assert_eq!(others_can_redirect_in(&link, me), None);
        mode(&out, 0o777);
        assert!(others_can_redirect_in(&link, me).is_some());
        mode(&out, 0o755);

        // A link whose own folder others can write: they could swap the link.
        let open = t.path().join("open");
        std::fs::create_dir(&open).unwrap();
        mode(&open, 0o777);
        let swap = open.join("link");
        symlink(&out, &swap).unwrap();
        let why = others_can_redirect_in(&swap, me).unwrap();
        assert!(why.contains("a folder on its way"), "{why}");
        // A link of ours to a folder in that open folder: others could swap the folder.
        let inner = open.join("inner");
        std::fs::create_dir(&inner).unwrap();
        chown(&inner, Some(me), None).unwrap();
        mode(&inner, 0o755);
        let to_inner = t.path().join("to-inner");
        symlink(&inner, &to_inner).unwrap();
        let why = others_can_redirect_in(&to_inner, me).unwrap();
        assert!(why.contains("open, a folder on its way"), "{why}");
        // A link of ours that leads to someone else's link (its owner can point it anywhere
        // later): refused at that link.
        let theirs = t.path().join("theirs");
        symlink(&out, &theirs).unwrap();
        lchown(&theirs, Some(4242), None).unwrap();
        let mine = top.join("mine");
        symlink(&theirs, &mine).unwrap();
        lchown(&mine, Some(me), None).unwrap();
        let why = others_can_redirect_in(&mine, me).unwrap();
        assert!(
            why.ends_with("theirs is a link that belongs to uid 4242"),
            "{why}"
        );
        // Relative links and '..' are walked as the kernel walks them.
        let rel = top.join("rel");
        symlink("../top/./out", &rel).unwrap();
        lchown(&rel, Some(me), None).unwrap();
        assert_eq!(others_can_redirect_in(&rel, me), None);
        assert_eq!(others_can_redirect_in(&top.join("out/../out"), me), None);

        // What is not there, or not a folder.
        assert!(others_can_redirect_in(&top.join("none"), me)
            .unwrap()
            .starts_with("cannot read"));
        let file = top.join("file");
        std::fs::write(&file, "x").unwrap();
        assert!(others_can_redirect_in(&file, me)
            .unwrap()
            .ends_with("is not a folder"));
    }
}
