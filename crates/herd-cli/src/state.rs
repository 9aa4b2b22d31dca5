//! Where herd keeps its state and whose project a command works in: `--state-dir` /
//! `HERD_STATE_DIR`, else `.herd/` in the project root (the nearest ancestor with `.herd` or `.git`).

use std::path::{Path, PathBuf};

/// The state dir for this invocation.
pub fn resolve(explicit: Option<&Path>) -> anyhow::Result<PathBuf> {
    if let Some(p) = explicit {
        return absolute(p);
    }
    Ok(project_root()?.join(".herd"))
}

/// The project root: the nearest ancestor of the current directory with `.herd` or `.git`.
pub fn project_root() -> anyhow::Result<PathBuf> {
    let cwd = std::env::current_dir()?;
    let root = cwd
        .ancestors()
        .find(|d| d.join(".herd").is_dir() || d.join(".git").exists())
        .unwrap_or(&cwd);
    Ok(root.to_path_buf())
}

fn absolute(p: &Path) -> anyhow::Result<PathBuf> {
    Ok(if p.is_absolute() { p.to_path_buf() } else { std::env::current_dir()?.join(p) })
}
