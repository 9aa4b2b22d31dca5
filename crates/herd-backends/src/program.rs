//! Finding an agent CLI's binary: an explicit override (`HERD_CLAUDE_BIN`, …) or a PATH search.
//! The caller passes the variables in, so this stays testable without touching the environment.

use std::path::{Path, PathBuf};

/// The binary could not be found.
#[derive(Debug, thiserror::Error)]
pub enum ProgramNotFound {
    #[error("{var}={path} does not name an executable file")]
    BadOverride { var: String, path: String },
    #[error("`{name}` was not found on PATH (install it, or set {var} to its location)")]
    NotOnPath { name: String, var: String },
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Resolve `name`: `override_bin` if set (it must exist), else the first executable on `path_var`.
pub fn resolve_program(
    name: &str,
    var: &str,
    path_var: Option<&str>,
    override_bin: Option<&str>,
) -> Result<PathBuf, ProgramNotFound> {
    if let Some(o) = override_bin.filter(|o| !o.is_empty()) {
        let p = PathBuf::from(o);
        if p.components().count() == 1 && !o.starts_with('.') {
            // A bare name: search PATH for it.
            return resolve_program(o, var, path_var, None);
        }
        return if is_executable(&p) {
            Ok(p)
        } else {
            Err(ProgramNotFound::BadOverride { var: var.into(), path: o.into() })
        };
    }
    if name.contains('/') {
        let p = PathBuf::from(name);
        return if is_executable(&p) {
            // Absolute, so a child started in another directory still finds it.
            Ok(std::path::absolute(&p).unwrap_or(p))
        } else {
            Err(ProgramNotFound::NotOnPath { name: name.into(), var: var.into() })
        };
    }
    path_var
        .into_iter()
        .flat_map(std::env::split_paths)
        .map(|dir| dir.join(name))
        .find(|p| is_executable(p))
        .ok_or_else(|| ProgramNotFound::NotOnPath { name: name.into(), var: var.into() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_on_path_and_honours_override() {
        let found = resolve_program("sh", "X", Some("/nonexistent:/bin:/usr/bin"), None).unwrap();
        assert!(found.ends_with("sh"));
        let over = resolve_program("claude", "HERD_CLAUDE_BIN", Some(""), Some("/bin/sh")).unwrap();
        assert_eq!(over, PathBuf::from("/bin/sh"));
        let err =
            resolve_program("claude", "HERD_CLAUDE_BIN", Some("/nonexistent"), None).unwrap_err();
        assert_eq!(
            err.to_string(),
            "`claude` was not found on PATH (install it, or set HERD_CLAUDE_BIN to its location)"
        );
        let bad = resolve_program("claude", "HERD_CLAUDE_BIN", None, Some("/no/such")).unwrap_err();
        assert_eq!(bad.to_string(), "HERD_CLAUDE_BIN=/no/such does not name an executable file");
    }
}
