//! What a watched path resolves to through every symlink, component by component, and
//! which directories must be watched to see any of those links change.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::io;
use std::path::{Component, Path, PathBuf};

/// As many symlinks as Linux follows in one lookup before `ELOOP`.
const MAX_LINKS: usize = 40;

/// A path resolved through its symlinks.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Resolved {
    /// The file the path names now (it may not exist).
    pub(super) file: PathBuf,
    /// The directories whose entries decide what the path names: each symlink's own
    /// directory, and the file's.
    pub(super) dirs: BTreeSet<PathBuf>,
    /// Every path the lookup went through (links, their targets, the file): an event on
    /// one of these, or on a directory holding one, may change the result.
    pub(super) traversed: BTreeSet<PathBuf>,
}

/// Resolves `path` component by component, as the kernel does: a symlink anywhere in it
/// (a file link, `..data -> ..2026_11_23`, `current -> releases/7`) is replaced by its
/// target, relative to the link's directory. A missing component ends the lookup there:
/// the rest is appended unresolved.
///
/// # Errors
///
/// `io::ErrorKind::InvalidInput` after [`MAX_LINKS`] links (a loop), or the error of
/// reading a link or of making `path` absolute.
pub(super) fn resolve(path: &Path) -> io::Result<Resolved> {
    let absolute = std::path::absolute(path)?;
    let mut pending: Vec<OsString> = Vec::new();
    let mut current = PathBuf::new();
    push_components(&absolute, &mut current, &mut pending);
    let mut out = Resolved::default();
    let mut links = 0;
    while let Some(name) = pending.pop() {
        if name == ".." {
            current.pop();
            continue;
        }
        let next = current.join(&name);
        out.traversed.insert(next.clone());
        match std::fs::symlink_metadata(&next) {
            Ok(meta) if meta.file_type().is_symlink() => {
                links += 1;
                if links > MAX_LINKS {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidInput,
                        format!("more than {MAX_LINKS} symbolic links (a loop?)"),
                    ));
                }
                out.dirs.insert(current.clone());
                let target = std::fs::read_link(&next)?;
                push_components(&target, &mut current, &mut pending);
            }
            Ok(_) => current = next,
            Err(_) => {
                // Missing (or unreadable): the rest cannot be resolved now.
                current = next;
                while let Some(rest) = pending.pop() {
                    if rest == ".." {
                        current.pop();
                    } else {
                        current.push(rest);
                    }
                }
            }
        }
    }
    if let Some(dir) = current.parent() {
        out.dirs.insert(dir.to_path_buf());
    }
    out.traversed.insert(current.clone());
    out.file = current;
    Ok(out)
}

/// Queues `path`'s components (in reverse, so `pop` yields them in order) after
/// resetting `current` to the root for an absolute `path`. `..` is queued too: taken in
/// turn, it pops the resolved path before it (the physical parent, as the kernel does).
fn push_components(path: &Path, current: &mut PathBuf, pending: &mut Vec<OsString>) {
    let mut names = Vec::new();
    for component in path.components() {
        match component {
            Component::Prefix(_) | Component::RootDir => {
                names.clear();
                current.clear();
                current.push(component.as_os_str());
            }
            Component::CurDir => {}
            // Resolved in turn, on what precedes it: the physical parent.
            Component::ParentDir => names.push(OsString::from("..")),
            Component::Normal(name) => names.push(name.to_owned()),
        }
    }
    pending.extend(names.into_iter().rev());
}

#[cfg(all(test, unix))]
mod tests {
    use std::os::unix::fs::symlink;

    use super::*;

    fn tempdir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("ors-resolve-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir.canonicalize().unwrap()
    }

    #[test]
    fn a_kubernetes_configmap_resolves_through_both_links_and_watches_their_directories() {
        let dir = tempdir("k8s");
        std::fs::create_dir(dir.join("..2026_11_23_1")).unwrap();
        std::fs::write(dir.join("..2026_11_23_1/sampling.toml"), "x").unwrap();
        symlink("..2026_11_23_1", dir.join("..data")).unwrap();
        symlink("..data/sampling.toml", dir.join("sampling.toml")).unwrap();
        let r = resolve(&dir.join("sampling.toml")).unwrap();
        assert_eq!(r.file, dir.join("..2026_11_23_1/sampling.toml"));
        assert_eq!(
            r.dirs,
            BTreeSet::from([dir.clone(), dir.join("..2026_11_23_1")])
        );
        assert!(r.traversed.contains(&dir.join("..data")));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn parent_components_after_a_link_are_physical_and_loops_are_refused() {
        let dir = tempdir("dots");
        std::fs::create_dir_all(dir.join("releases/7/conf")).unwrap();
        symlink("releases/7/conf", dir.join("current")).unwrap();
        let r = resolve(&dir.join("current/../sampling.toml")).unwrap();
        assert_eq!(r.file, dir.join("releases/7/sampling.toml"));
        symlink("loop-b", dir.join("loop-a")).unwrap();
        symlink("loop-a", dir.join("loop-b")).unwrap();
        let err = resolve(&dir.join("loop-a")).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
        // A missing directory ends the lookup: the rest is kept as written.
        let r = resolve(&dir.join("gone/x/sampling.toml")).unwrap();
        assert_eq!(r.file, dir.join("gone/x/sampling.toml"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
