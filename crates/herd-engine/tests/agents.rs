//! Discovery of agent definitions in temporary projects: precedence and shadowing, and the
//! safety limits (size, symlinks out of the folder, files per folder, UTF-8, names, FIFOs).

use std::fs;
use std::path::{Path, PathBuf};

use herd_core::BackendKind;
use herd_core::agent::{Format, MAX_FILE_BYTES};
use herd_engine::agents::{MAX_FILES_PER_FOLDER, discover, format_for, load_file};

fn write(root: &Path, rel: &str, text: &str) -> PathBuf {
    let path = root.join(rel);
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(&path, text).unwrap();
    path
}

fn claude(name: &str) -> String {
    format!("---\nname: {name}\ndescription: from claude\n---\nPrompt of {name}.\n")
}

/// Messages with the temporary root written as `<root>`.
fn show(root: &Path, lines: impl IntoIterator<Item = String>) -> Vec<String> {
    let root = root.display().to_string();
    lines.into_iter().map(|l| l.replace(&root, "<root>")).collect()
}

fn fixture(rel: &str) -> String {
    let path = format!("{}/../herd-core/tests/fixtures/agents/{rel}", env!("CARGO_MANIFEST_DIR"));
    fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

#[test]
fn precedence_and_shadowing() {
    let tmp = tempfile::tempdir().unwrap();
    let (root, user) = (tmp.path().join("proj"), tmp.path().join("user"));
    write(&root, ".herd/agents/rev.yml", "description: project\n");
    write(&user, "rev.yml", "description: user\n");
    write(&user, "mine.yml", "description: user only\ncli: codex\n");
    write(&root, ".claude/agents/rev.md", &claude("rev"));
    write(&root, ".claude/agents/helper.md", &claude("helper"));
    write(&root, ".gemini/agents/helper.md", "---\nname: helper\n---\nGemini.\n");
    write(&root, ".gemini/agents/old.toml", "name = \"old\"\n[prompts]\nsystem_prompt = \"x\"\n");
    write(&root, ".gemini/agents/gem.md", "---\nname: gem\n---\n");
    write(&root, ".gemini/agents/gem.toml", "name = \"gem\"\n");
    write(&root, ".codex/agents/rev.toml", "name = \"rev\"\ndeveloper_instructions = \"x\"\n");
    write(&root, ".codex/agents/cx.toml", "name = \"cx\"\ndeveloper_instructions = \"x\"\n");
    write(&root, ".claude/agents/notes.txt", "not a definition");

    let cat = discover(&root, Some(&user));
    assert_eq!(cat.errors, vec![]);
    let got: Vec<_> = cat
        .agents
        .iter()
        .map(|f| (f.def.name.as_str(), f.format, f.def.description.as_deref()))
        .collect();
    assert_eq!(
        got,
        [
            ("cx", Format::Codex, None),
            ("gem", Format::Gemini, None),
            ("helper", Format::Claude, Some("from claude")),
            ("mine", Format::Native, Some("user only")),
            ("old", Format::GeminiToml, None),
            ("rev", Format::Native, Some("project")),
        ]
    );
    assert_eq!(cat.get("mine").unwrap().def.cli, Some(BackendKind::Codex));
    assert_eq!(cat.get("rev").unwrap().path, root.join(".herd/agents/rev.yml"));
    assert_eq!(
        show(tmp.path(), cat.warnings),
        [
            "agent `rev` in <root>/user/rev.yml is shadowed by <root>/proj/.herd/agents/rev.yml",
            "agent `rev` in <root>/proj/.claude/agents/rev.md is shadowed by \
             <root>/proj/.herd/agents/rev.yml",
            "agent `helper` in <root>/proj/.gemini/agents/helper.md is shadowed by \
             <root>/proj/.claude/agents/helper.md",
            "agent `gem` in <root>/proj/.gemini/agents/gem.toml is shadowed by \
             <root>/proj/.gemini/agents/gem.md",
            "agent `rev` in <root>/proj/.codex/agents/rev.toml is shadowed by \
             <root>/proj/.herd/agents/rev.yml",
        ]
    );
}

#[test]
fn no_folders_no_agents() {
    let tmp = tempfile::tempdir().unwrap();
    let cat = discover(tmp.path(), Some(&tmp.path().join("missing")));
    assert!(cat.agents.is_empty() && cat.warnings.is_empty() && cat.errors.is_empty());
}

#[test]
fn broken_files_are_reported_and_the_rest_still_load() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    write(root, ".claude/agents/good.md", &claude("good"));
    write(root, ".claude/agents/homoglyph.md", &fixture("claude/broken/homoglyph.md"));
    write(root, ".claude/agents/traversal.md", &fixture("claude/broken/bad-name.md"));
    write(root, ".herd/agents/unknown-key.yml", &fixture("native/broken/unknown-key.yml"));
    fs::write(root.join(".claude/agents/latin1.md"), b"---\nname: caf\xe9\n---\n").unwrap();

    let cat = discover(root, None);
    assert_eq!(cat.agents.iter().map(|f| f.def.name.as_str()).collect::<Vec<_>>(), ["good"]);
    let errors = show(root, cat.errors.iter().map(ToString::to_string));
    assert_eq!(errors.len(), 4, "{errors:#?}");
    assert!(errors[0].starts_with("<root>/.herd/agents/unknown-key.yml:3: colour: unknown field"));
    assert!(errors[1].starts_with(
        "<root>/.claude/agents/homoglyph.md:2: name: \"rеviewer\" contains the non-ASCII character"
    ));
    assert_eq!(
        errors[2],
        "<root>/.claude/agents/latin1.md: not UTF-8 text (the first bad byte is at offset 13)"
    );
    assert!(errors[3].starts_with(
        "<root>/.claude/agents/traversal.md:2: name: \"../../etc/passwd\" contains '/'"
    ));
}

#[test]
fn oversize_files_are_refused_unread() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let limit = MAX_FILE_BYTES as usize;
    let head = claude("edge");
    write(root, ".claude/agents/edge.md", &format!("{head}{}", "x".repeat(limit - head.len())));
    write(root, ".claude/agents/big.md", &format!("{}{}", claude("big"), "x".repeat(limit)));
    // Sparse: 8 GiB that would take long to read, refused from its metadata alone.
    let huge = fs::File::create(root.join(".claude/agents/huge.md")).unwrap();
    huge.set_len(8 << 30).unwrap();
    let cat = discover(root, None);
    assert_eq!(cat.agents.len(), 1, "a file of exactly the limit loads");
    let errors = show(root, cat.errors.iter().map(ToString::to_string));
    assert_eq!(
        errors,
        [
            "<root>/.claude/agents/big.md: the file is 262202 bytes; the limit is 262144",
            "<root>/.claude/agents/huge.md: the file is 8589934592 bytes; the limit is 262144",
        ]
    );
}

#[test]
fn symlinks_out_of_the_folder_are_skipped() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let outside = write(root, "elsewhere/secret.md", &claude("secret"));
    let dir = root.join(".claude/agents");
    write(root, ".claude/agents/target.txt", &claude("inside"));
    std::os::unix::fs::symlink(&outside, dir.join("escape.md")).unwrap();
    std::os::unix::fs::symlink("../../elsewhere/secret.md", dir.join("relative.md")).unwrap();
    std::os::unix::fs::symlink("target.txt", dir.join("inside.md")).unwrap();
    std::os::unix::fs::symlink("nowhere.md", dir.join("broken.md")).unwrap();

    let cat = discover(root, None);
    assert_eq!(cat.agents.iter().map(|f| f.def.name.as_str()).collect::<Vec<_>>(), ["inside"]);
    assert_eq!(cat.errors, vec![]);
    let real = fs::canonicalize(root).unwrap().display().to_string();
    let warnings: Vec<_> =
        show(root, cat.warnings).into_iter().map(|w| w.replace(&real, "<root>")).collect();
    assert_eq!(warnings.len(), 3, "{warnings:#?}");
    assert!(warnings[0].starts_with("<root>/.claude/agents/broken.md: skipped: a broken symlink"));
    assert_eq!(
        warnings[1..],
        [
            "<root>/.claude/agents/escape.md: skipped: a symlink to <root>/elsewhere/secret.md, \
             outside <root>/.claude/agents",
            "<root>/.claude/agents/relative.md: skipped: a symlink to <root>/elsewhere/secret.md, \
             outside <root>/.claude/agents",
        ]
    );
}

#[test]
fn at_most_so_many_files_per_folder() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    for i in 0..=MAX_FILES_PER_FOLDER {
        write(root, &format!(".codex/agents/a{i:04}.toml"), &format!("name = \"a{i:04}\"\n"));
    }
    let cat = discover(root, None);
    assert_eq!(cat.agents.len(), MAX_FILES_PER_FOLDER);
    assert!(cat.get("a0500").is_none());
    assert_eq!(
        show(root, cat.warnings),
        ["<root>/.codex/agents: 501 definition files; only the first 500 (by name) are read"]
    );
}

#[test]
fn fifos_and_folders_are_not_read() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    fs::create_dir_all(root.join(".herd/agents/dir.yml")).unwrap();
    let fifo = root.join(".herd/agents/pipe.yml");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status();
    let cat = discover(root, None);
    assert!(cat.agents.is_empty() && cat.errors.is_empty());
    if made.is_ok_and(|s| s.success()) {
        assert_eq!(
            show(root, cat.warnings),
            ["<root>/.herd/agents/pipe.yml: skipped: not a regular file"]
        );
        let e = load_file(&fifo, Format::Native).unwrap_err();
        assert_eq!(e.message, "not a regular file");
    }
}

#[test]
fn load_file_reads_every_fixture_format() {
    let dir =
        PathBuf::from(format!("{}/../herd-core/tests/fixtures/agents", env!("CARGO_MANIFEST_DIR")));
    for (rel, format, name) in [
        ("native/reviewer.yml", Format::Native, "reviewer"),
        ("claude/code-reviewer.md", Format::Claude, "code-reviewer"),
        ("gemini/security-auditor.md", Format::Gemini, "security-auditor"),
        ("gemini-toml/legacy.toml", Format::GeminiToml, "legacy"),
        ("codex/reviewer.toml", Format::Codex, "reviewer"),
    ] {
        let found = load_file(&dir.join(rel), format).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((found.def.name.as_str(), found.format), (name, format));
    }
}

#[test]
fn formats_by_folder_and_extension() {
    for (path, want) in [
        ("p/.claude/agents/x.md", Some(Format::Claude)),
        ("p/.gemini/agents/x.md", Some(Format::Gemini)),
        ("p/.gemini/agents/x.toml", Some(Format::GeminiToml)),
        ("p/.codex/agents/x.toml", Some(Format::Codex)),
        ("p/.herd/agents/x.yml", Some(Format::Native)),
        ("/home/u/.config/herd/agents/x.YAML", Some(Format::Native)),
        ("x.yml", Some(Format::Native)),
        ("p/.claude/agents/x.toml", None),
        ("p/.claude/x.md", None),
        ("notes.md", None),
        ("p/.codex/agents/noext", None),
    ] {
        assert_eq!(format_for(Path::new(path)), want, "{path}");
    }
}
