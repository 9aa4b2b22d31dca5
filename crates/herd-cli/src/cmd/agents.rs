//! `herd agents list|show|validate|import`: the definitions herd finds in this project and the
//! user's config dir, and one-way, idempotent import of other tools' agent files.

use std::io::Write;
use std::path::Path;

use herd_core::agent::{AgentDef, Format, Source, to_native_yaml};
use herd_engine::agents::{
    Catalog, Found, cannot_run, discover, format_for, load_file, user_agents_dir,
};
use serde_json::json;

use crate::cli::AgentsCommand;
use crate::{UsageError, exit, state};

/// Discover, printing warnings and per-file errors to stderr.
pub fn catalog(root: &Path) -> Catalog {
    let cat = discover(root, user_agents_dir().as_deref());
    for w in &cat.warnings {
        eprintln!("herd: warning: {w}");
    }
    for e in &cat.errors {
        eprintln!("herd: warning: skipped {e}");
    }
    cat
}

fn origin(f: &Found) -> String {
    match f.format {
        Format::Native => "native".into(),
        other => format!("from {other}: {}", f.path.display()),
    }
}

pub fn run(cmd: AgentsCommand) -> anyhow::Result<u8> {
    let root = state::project_root()?;
    let mut out = std::io::stdout().lock();
    match cmd {
        AgentsCommand::List { json } => {
            let cat = catalog(&root);
            if json {
                let v: Vec<_> = cat
                    .agents
                    .iter()
                    .map(|f| {
                        let why = cannot_run(f);
                        json!({"name": f.def.name, "cli": f.def.cli.map(|c| c.to_string()),
                               "description": f.def.description, "source": origin(f),
                               "path": f.path, "runnable": why.is_none(),
                               "not_runnable_because": why})
                    })
                    .collect();
                writeln!(out, "{}", serde_json::Value::Array(v))?;
            } else if cat.agents.is_empty() {
                writeln!(
                    out,
                    "no agent definitions (looked in .herd/agents, .claude/agents, .gemini/agents, .codex/agents and the user config dir)"
                )?;
            } else {
                for f in &cat.agents {
                    let cli = f.def.cli.map_or_else(|| "-".into(), |c| c.to_string());
                    let note = cannot_run(f)
                        .map(|why| format!(" (cannot run here: {why})"))
                        .unwrap_or_default();
                    writeln!(
                        out,
                        "{:<24} {:<8} {}{note}\n{:<24} {:<8} {}",
                        f.def.name,
                        cli,
                        f.def.description.as_deref().unwrap_or(""),
                        "",
                        "",
                        origin(f)
                    )?;
                }
            }
            Ok(exit::COMPLETED)
        }
        AgentsCommand::Show { name, json } => {
            let cat = catalog(&root);
            let f = cat.get(&name).ok_or_else(|| {
                UsageError(format!("no agent named {name:?} (see herd agents list)"))
            })?;
            if json {
                writeln!(
                    out,
                    "{}",
                    json!({"definition": f.def, "source": origin(f), "path": f.path, "dropped": f.dropped})
                )?;
            } else {
                writeln!(out, "# {} ({})", f.def.name, origin(f))?;
                write!(out, "{}", to_native_yaml(&f.def))?;
                for d in &f.dropped {
                    writeln!(out, "# dropped: {d}")?;
                }
            }
            Ok(exit::COMPLETED)
        }
        AgentsCommand::Validate { paths } => {
            let mut bad = 0usize;
            if paths.is_empty() {
                let cat = discover(&root, user_agents_dir().as_deref());
                for w in &cat.warnings {
                    writeln!(out, "warning: {w}")?;
                }
                for e in &cat.errors {
                    writeln!(out, "error: {e}")?;
                }
                bad = cat.errors.len();
                writeln!(out, "{} valid, {bad} invalid", cat.agents.len())?;
            } else {
                for p in &paths {
                    let format = format_for(p).unwrap_or(Format::Native);
                    match load_file(p, format) {
                        Ok(f) => writeln!(
                            out,
                            "ok: {} ({} agent {})",
                            p.display(),
                            f.format,
                            f.def.name
                        )?,
                        Err(e) => {
                            bad += 1;
                            writeln!(out, "error: {e}")?;
                        }
                    }
                }
            }
            Ok(if bad > 0 { exit::USAGE } else { exit::COMPLETED })
        }
        AgentsCommand::Import { from, file, update, dry_run } => {
            import(&root, &from, file.as_deref(), update, dry_run)
        }
    }
}

/// The tool's own agent files (native definitions that shadow them do not hide them here).
/// Symlinks are skipped: an import copies what is in the project, nothing it points at.
fn foreign_files(root: &Path, from: &str, formats: &[Format]) -> Vec<Found> {
    let dir = root.join(format!(".{from}")).join("agents");
    let Ok(entries) = std::fs::read_dir(&dir) else { return Vec::new() };
    let mut paths: Vec<_> = entries.flatten().map(|e| e.path()).collect();
    paths.sort();
    let mut out = Vec::new();
    for p in paths.into_iter().take(herd_engine::agents::MAX_FILES_PER_FOLDER) {
        if p.is_symlink() {
            eprintln!("herd: warning: skipped symlink {}", p.display());
            continue;
        }
        let Some(format) = format_for(&p).filter(|f| formats.contains(f)) else { continue };
        match load_file(&p, format) {
            Ok(f) => out.push(f),
            Err(e) => eprintln!("herd: warning: skipped {e}"),
        }
    }
    out
}

fn import(
    root: &Path,
    from: &str,
    file: Option<&Path>,
    update: bool,
    dry_run: bool,
) -> anyhow::Result<u8> {
    let formats: &[Format] = match from {
        "claude" => &[Format::Claude],
        "gemini" => &[Format::Gemini, Format::GeminiToml],
        _ => &[Format::Codex],
    };
    let found: Vec<Found> = match file {
        Some(f) => {
            let format = format_for(f).filter(|k| formats.contains(k)).unwrap_or(formats[0]);
            vec![load_file(f, format).map_err(|e| UsageError(e.to_string()))?]
        }
        None => foreign_files(root, from, formats),
    };
    let dir = root.join(".herd").join("agents");
    let now = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
    let mut out = std::io::stdout().lock();
    if found.is_empty() {
        writeln!(out, "nothing to import from {from}")?;
    }
    for f in found {
        let rel = f.path.strip_prefix(root).unwrap_or(&f.path).display().to_string();
        let mut def: AgentDef = f.def.clone();
        let extra = def.source.take().map(|s| s.extra).unwrap_or_default();
        def.source = Some(Source {
            from: f.format.to_string(),
            file: rel.clone(),
            imported_at: None,
            extra,
        });
        let target = dir.join(format!("{}.yml", def.name));
        let stamped = |d: &AgentDef| {
            let mut d = d.clone();
            if let Some(s) = d.source.as_mut() {
                s.imported_at = Some(now.clone());
            }
            to_native_yaml(&d)
        };
        let action = match load_file(&target, Format::Native) {
            Err(_) if !target.exists() => "created",
            Ok(existing) => {
                let mut ex = existing.def.clone();
                if let Some(s) = ex.source.as_mut() {
                    s.imported_at = None;
                }
                if ex == def {
                    "unchanged"
                } else if update {
                    "updated"
                } else {
                    "kept (the native file differs, e.g. edited locally; --update overwrites it)"
                }
            }
            Err(_) if update => "updated",
            Err(_) => "kept (the native file does not parse; --update overwrites it)",
        };
        if !dry_run && matches!(action, "created" | "updated") {
            std::fs::create_dir_all(&dir)?;
            let tmp = target.with_extension("yml.partial");
            std::fs::write(&tmp, stamped(&def))?;
            std::fs::rename(&tmp, &target)?;
        }
        let would = if dry_run { "would be " } else { "" };
        writeln!(out, "{}: {would}{action} ({rel} -> .herd/agents/{}.yml)", def.name, def.name)?;
        for d in &f.dropped {
            writeln!(out, "  dropped: {d}")?;
        }
    }
    Ok(exit::COMPLETED)
}
