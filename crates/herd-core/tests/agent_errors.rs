//! Every broken fixture (`tests/fixtures/agents/*/broken/`) is rejected, with a message that
//! names file, line and field: snapshots of each.

use herd_core::agent::{Format, parse};

fn broken(dir: &str, format: Format) {
    let root = format!("{}/tests/fixtures/agents/{dir}/broken", env!("CARGO_MANIFEST_DIR"));
    let mut files: Vec<_> = std::fs::read_dir(&root)
        .unwrap_or_else(|e| panic!("{root}: {e}"))
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    assert!(!files.is_empty());
    for path in files {
        let stem = path.file_stem().unwrap().to_str().unwrap().to_string();
        let name = path.file_name().unwrap().to_str().unwrap();
        let file = format!("{dir}/broken/{name}");
        let text = std::fs::read_to_string(&path).unwrap();
        let err = match parse(format, &file, &text) {
            Ok(l) => panic!("{file} was accepted: {l:?}"),
            Err(e) => e,
        };
        assert_eq!(err.file, file);
        insta::assert_snapshot!(format!("{dir}__{stem}"), err.to_string());
    }
}

#[test]
fn native() {
    broken("native", Format::Native);
}

#[test]
fn claude() {
    broken("claude", Format::Claude);
}

#[test]
fn gemini() {
    broken("gemini", Format::Gemini);
}

#[test]
fn gemini_toml() {
    broken("gemini-toml", Format::GeminiToml);
}

#[test]
fn codex() {
    broken("codex", Format::Codex);
}

#[test]
fn oversize_text_is_refused() {
    let text = format!("name: big\nprompt: {}\n", "x".repeat(300 * 1024));
    let e = parse(Format::Native, "big.yml", &text).unwrap_err();
    insta::assert_snapshot!(e.to_string(), @"big.yml: the file is 307219 bytes; the limit is 262144");
}
