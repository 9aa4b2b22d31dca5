//! Where a call's paths really lead: the canonical form of a file tool's path and of each Bash
//! redirection target, which the permission rules match (herd-core does no I/O).

use std::io;
use std::path::{Component, Path, PathBuf};

use herd_core::permission::Call;

/// Symlinks followed at most this many times per path (the kernel's limit).
const MAX_LINKS: usize = 40;

/// Fill in the canonical form of every path of `call`, relative ones against `cwd`. A path
/// that cannot be resolved (a directory it cannot read) stays unresolved: allow rules then do
/// not match it.
pub(crate) fn resolve(call: &mut Call, cwd: &Path) {
    let home = std::env::var_os("HOME").map(PathBuf::from);
    if let Ok(c) = canonical(cwd, Path::new("."), home.as_deref()) {
        call.cwd = Some(c);
    }
    let cwd = call.cwd.clone().unwrap_or_else(|| cwd.to_path_buf());
    for p in call.paths_mut() {
        if let Some(given) = &p.given {
            p.canonical = canonical(&cwd, Path::new(given), home.as_deref()).ok();
        }
    }
}

/// `path` (relative to `cwd`; `~` is `home`) with every symlink resolved, `.` and `..` as the
/// kernel takes them. For a file not yet created: its longest existing ancestor resolved, the
/// rest appended — a dangling symlink is followed to where a write through it would land.
pub fn canonical(cwd: &Path, path: &Path, home: Option<&Path>) -> io::Result<PathBuf> {
    let path = match path.strip_prefix("~") {
        Ok(rest) => home.ok_or_else(|| io::Error::other("no HOME for ~"))?.join(rest),
        Err(_) => path.to_path_buf(),
    };
    let full = if path.is_absolute() { path } else { cwd.join(path) };
    let mut links = 0;
    walk(&full, &mut links)
}

fn walk(full: &Path, links: &mut usize) -> io::Result<PathBuf> {
    let mut out = PathBuf::from("/");
    let mut missing = false;
    for c in full.components() {
        match c {
            Component::RootDir | Component::Prefix(_) | Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(name) => {
                let next = out.join(name);
                if missing {
                    out = next;
                    continue;
                }
                match std::fs::symlink_metadata(&next) {
                    Ok(m) if m.file_type().is_symlink() => {
                        *links += 1;
                        if *links > MAX_LINKS {
                            return Err(io::Error::other("too many levels of symbolic links"));
                        }
                        let target = std::fs::read_link(&next)?;
                        let target = if target.is_absolute() { target } else { out.join(target) };
                        out = walk(&target, links)?;
                    }
                    Ok(_) => out = next,
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {
                        missing = true;
                        out = next;
                    }
                    Err(e) => return Err(e),
                }
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn symlinks_dangling_links_and_dots() {
        let dir = tempfile::tempdir().unwrap();
        let root = canonical(Path::new("/"), dir.path(), None).unwrap();
        std::fs::create_dir(root.join("secret")).unwrap();
        std::fs::write(root.join("secret/key"), "k").unwrap();
        std::os::unix::fs::symlink("secret", root.join("link")).unwrap();
        std::os::unix::fs::symlink(root.join("secret/new"), root.join("dangling")).unwrap();
        let c = |p: &str| canonical(&root, Path::new(p), Some(Path::new("/home/u"))).unwrap();
        assert_eq!(c("link/key"), root.join("secret/key"));
        assert_eq!(c("link/not-yet/deeper"), root.join("secret/not-yet/deeper"));
        assert_eq!(c("dangling"), root.join("secret/new"), "a write lands at the target");
        assert_eq!(c("link/../secret/./key"), root.join("secret/key"));
        assert_eq!(c("nope/../x"), root.join("x"));
        assert_eq!(c("~/.bashrc"), PathBuf::from("/home/u/.bashrc"));
        std::os::unix::fs::symlink("loop", root.join("loop")).unwrap();
        assert!(canonical(&root, Path::new("loop/x"), None).is_err());
    }
}
