//! Finding agent definitions on disk: the project's and the user's folders and the Claude /
//! Gemini / Codex ones, precedence and shadowing, and the limits on what is read and followed.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fs::{self, File};
use std::io::{ErrorKind, Read};
use std::path::{Path, PathBuf};

use herd_core::agent::{AgentDef, AgentError, Format, MAX_FILE_BYTES, parse};

/// The most definition files read from one folder (the first, by name).
pub const MAX_FILES_PER_FOLDER: usize = 500;

/// A definition found on disk.
#[derive(Debug, Clone, PartialEq)]
pub struct Found {
    pub def: AgentDef,
    pub format: Format,
    pub path: PathBuf,
    /// What of the original was not mapped, and why.
    pub dropped: Vec<String>,
}

/// Everything [`discover`] found.
#[derive(Debug, Clone, Default)]
pub struct Catalog {
    /// One per name — the winner by precedence — sorted by name.
    pub agents: Vec<Found>,
    /// Shadowed definitions and skipped files (symlinks out of their folder, over the per-folder
    /// cap, unreadable folders).
    pub warnings: Vec<String>,
    /// Files that could not be loaded; each is left out, the others still load.
    pub errors: Vec<AgentError>,
}

impl Catalog {
    pub fn get(&self, name: &str) -> Option<&Found> {
        self.agents.iter().find(|f| f.def.name == name)
    }
}

/// The user's own definitions: `$XDG_CONFIG_HOME/herd/agents`, else `$HOME/.config/herd/agents`.
pub fn user_agents_dir() -> Option<PathBuf> {
    user_agents_dir_from(std::env::var_os("XDG_CONFIG_HOME"), std::env::var_os("HOME"))
}

fn user_agents_dir_from(xdg: Option<OsString>, home: Option<OsString>) -> Option<PathBuf> {
    // The XDG spec: a relative (or empty) XDG_CONFIG_HOME is ignored.
    let config = match xdg.map(PathBuf::from).filter(|p| p.is_absolute()) {
        Some(dir) => dir,
        None => PathBuf::from(home.filter(|h| !h.is_empty())?).join(".config"),
    };
    Some(config.join("herd").join("agents"))
}

/// The format of a definition file, from its folder (`.claude/agents`, `.gemini/agents`,
/// `.codex/agents`) and extension; any other `.yml` / `.yaml` is native.
pub fn format_for(path: &Path) -> Option<Format> {
    let ext = path.extension()?.to_str()?.to_ascii_lowercase();
    let dir = path.parent().filter(|d| d.file_name().is_some_and(|n| n == "agents"));
    let tool = dir.and_then(Path::parent).and_then(Path::file_name).and_then(|n| n.to_str());
    match (tool, ext.as_str()) {
        (Some(".claude"), "md") => Some(Format::Claude),
        (Some(".gemini"), "md") => Some(Format::Gemini),
        (Some(".gemini"), "toml") => Some(Format::GeminiToml),
        (Some(".codex"), "toml") => Some(Format::Codex),
        (_, "yml" | "yaml") => Some(Format::Native),
        _ => None,
    }
}

/// Read and parse one file: refused when over [`MAX_FILE_BYTES`] (before it is read), when not
/// a regular file, or when not UTF-8.
pub fn load_file(path: &Path, format: Format) -> Result<Found, AgentError> {
    let file = path.display().to_string();
    let fail = |msg: String| AgentError::new(&file, msg);
    let meta = fs::metadata(path).map_err(|e| fail(format!("cannot read it: {e}")))?;
    if !meta.is_file() {
        return Err(fail("not a regular file".into()));
    }
    let too_big = |len: u64| format!("the file is {len} bytes; the limit is {MAX_FILE_BYTES}");
    if meta.len() > MAX_FILE_BYTES {
        return Err(fail(too_big(meta.len())));
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    File::open(path)
        .and_then(|f| f.take(MAX_FILE_BYTES + 1).read_to_end(&mut bytes))
        .map_err(|e| fail(format!("cannot read it: {e}")))?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(fail(too_big(bytes.len() as u64)));
    }
    let text = String::from_utf8(bytes).map_err(|e| {
        let at = e.utf8_error().valid_up_to();
        fail(format!("not UTF-8 text (the first bad byte is at offset {at})"))
    })?;
    let loaded = parse(format, &file, &text)?;
    Ok(Found { def: loaded.def, format, path: path.to_path_buf(), dropped: loaded.dropped })
}

/// One folder to scan, and the formats its files are in (earlier extensions win ties).
struct Folder {
    dir: PathBuf,
    kinds: &'static [(&'static str, Format)],
}

const NATIVE: &[(&str, Format)] = &[("yml", Format::Native), ("yaml", Format::Native)];

/// All definitions under `project_root` and `user_dir`, one per name. Precedence: project
/// native > user native > Claude > Gemini (Markdown, then legacy TOML) > Codex.
pub fn discover(project_root: &Path, user_dir: Option<&Path>) -> Catalog {
    let project = project_root.join(".herd").join("agents");
    let mut folders = vec![Folder { dir: project.clone(), kinds: NATIVE }];
    if let Some(user) = user_dir
        && !same_dir(user, &project)
    {
        folders.push(Folder { dir: user.to_path_buf(), kinds: NATIVE });
    }
    let tool = |name: &str| project_root.join(name).join("agents");
    folders.push(Folder { dir: tool(".claude"), kinds: &[("md", Format::Claude)] });
    folders.push(Folder {
        dir: tool(".gemini"),
        kinds: &[("md", Format::Gemini), ("toml", Format::GeminiToml)],
    });
    folders.push(Folder { dir: tool(".codex"), kinds: &[("toml", Format::Codex)] });

    let mut cat = Catalog::default();
    let mut winners: BTreeMap<String, Found> = BTreeMap::new();
    for folder in &folders {
        for (path, format) in scan(folder, &mut cat.warnings) {
            match load_file(&path, format) {
                Err(e) => cat.errors.push(e),
                Ok(found) => match winners.get(&found.def.name) {
                    // The file a native definition was imported from is its source, not a rival.
                    Some(winner) if imported_from(winner, &found.path, project_root) => {}
                    Some(winner) => cat.warnings.push(format!(
                        "agent `{}` in {} is shadowed by {}",
                        found.def.name,
                        found.path.display(),
                        winner.path.display()
                    )),
                    None => {
                        winners.insert(found.def.name.clone(), found);
                    }
                },
            }
        }
    }
    cat.agents = winners.into_values().collect();
    cat
}

/// `winner` is a native definition imported (`herd agents import`) from the file at `path`.
fn imported_from(winner: &Found, path: &Path, project_root: &Path) -> bool {
    winner.def.source.as_ref().is_some_and(|s| {
        let file = Path::new(&s.file);
        let file = if file.is_absolute() { file.to_path_buf() } else { project_root.join(file) };
        file == path || same_dir(&file, path)
    })
}

/// Why `f` cannot run on this machine, if it cannot: a kind of agent herd does not run, or
/// its agent CLI (its own `cli`, else claude) is not installed.
pub fn cannot_run(f: &Found) -> Option<String> {
    use herd_core::BackendKind;
    if !f.def.runnable {
        return Some("a remote agent (kind: remote): herd runs agent CLIs on this machine".into());
    }
    let kind = f.def.cli.unwrap_or(BackendKind::Claude);
    let var = match kind {
        BackendKind::Claude => "HERD_CLAUDE_BIN",
        BackendKind::Codex => herd_backends::codex::PROGRAM_OVERRIDE_VAR,
        BackendKind::Gemini => herd_backends::gemini::PROGRAM_OVERRIDE_VAR,
        // Their program is given with each run.
        BackendKind::Acp | BackendKind::Command => return None,
    };
    let path = std::env::var("PATH").ok();
    let found = herd_backends::resolve_program(
        &kind.to_string(),
        var,
        path.as_deref(),
        std::env::var(var).ok().as_deref(),
    );
    found.err().map(|e| format!("{kind} is not installed here ({e})"))
}

fn same_dir(a: &Path, b: &Path) -> bool {
    match (fs::canonicalize(a), fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

/// The definition files of one folder, in precedence order, with what was skipped as warnings.
fn scan(folder: &Folder, warnings: &mut Vec<String>) -> Vec<(PathBuf, Format)> {
    let dir = &folder.dir;
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == ErrorKind::NotFound => return Vec::new(),
        Err(e) => {
            warnings.push(format!("{}: cannot read the folder: {e}", dir.display()));
            return Vec::new();
        }
    };
    let Ok(real_dir) = fs::canonicalize(dir) else {
        warnings.push(format!("{}: cannot resolve the folder", dir.display()));
        return Vec::new();
    };
    // (kind index, file name, path, format)
    let mut files: Vec<(usize, String, PathBuf, Format)> = Vec::new();
    for entry in entries {
        let Ok(entry) = entry else { continue };
        let name = entry.file_name();
        let lossy = name.to_string_lossy();
        let ext = Path::new(&*lossy).extension().and_then(|e| e.to_str()).map(str::to_lowercase);
        let Some(kind) = folder.kinds.iter().position(|(k, _)| Some(*k) == ext.as_deref()) else {
            continue;
        };
        if lossy.starts_with('.') {
            continue;
        }
        let path = entry.path();
        let Some(name) = name.to_str() else {
            warnings.push(format!("{}: skipped: the file name is not UTF-8", path.display()));
            continue;
        };
        files.push((kind, name.to_string(), path, folder.kinds[kind].1));
    }
    files.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
    if files.len() > MAX_FILES_PER_FOLDER {
        warnings.push(format!(
            "{}: {} definition files; only the first {MAX_FILES_PER_FOLDER} (by name) are read",
            dir.display(),
            files.len()
        ));
        files.truncate(MAX_FILES_PER_FOLDER);
    }
    let mut out = Vec::with_capacity(files.len());
    for (_, _, path, format) in files {
        let is_link = fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_symlink());
        if is_link {
            match fs::canonicalize(&path) {
                Ok(target) if target.starts_with(&real_dir) => {}
                Ok(target) => {
                    warnings.push(format!(
                        "{}: skipped: a symlink to {}, outside {}",
                        path.display(),
                        target.display(),
                        dir.display()
                    ));
                    continue;
                }
                Err(e) => {
                    warnings.push(format!("{}: skipped: a broken symlink ({e})", path.display()));
                    continue;
                }
            }
        }
        match fs::metadata(&path) {
            Ok(m) if m.is_file() => out.push((path, format)),
            Ok(m) if m.is_dir() => {}
            Ok(_) => warnings.push(format!("{}: skipped: not a regular file", path.display())),
            Err(e) => warnings.push(format!("{}: skipped: {e}", path.display())),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_dir_follows_xdg_then_home() {
        let dir = |x: Option<&str>, h: Option<&str>| {
            user_agents_dir_from(x.map(Into::into), h.map(Into::into))
        };
        assert_eq!(dir(Some("/x"), Some("/h")), Some(PathBuf::from("/x/herd/agents")));
        assert_eq!(dir(Some("rel"), Some("/h")), Some(PathBuf::from("/h/.config/herd/agents")));
        assert_eq!(dir(Some(""), Some("/h")), Some(PathBuf::from("/h/.config/herd/agents")));
        assert_eq!(dir(None, None), None);
        assert_eq!(dir(None, Some("")), None);
    }
}
