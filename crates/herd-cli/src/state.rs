//! Where herd keeps its state: `--state-dir` / `HERD_STATE_DIR`, else `.herd/` in the project
//! root (the nearest ancestor with a `.herd` or `.git`, else the current directory).

use std::path::{Path, PathBuf};

use herd_store::StatePaths;

/// Resolve the state dir for this invocation.
pub fn resolve(explicit: Option<&Path>) -> anyhow::Result<StatePaths> {
    if let Some(p) = explicit {
        return Ok(StatePaths::new(absolute(p)?));
    }
    Ok(StatePaths::new(project_root()?.join(".herd")))
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
