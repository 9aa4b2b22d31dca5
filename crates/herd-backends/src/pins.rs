//! The agent CLI versions herd was tested with and how to install them: one table for error
//! messages and `herd doctor`, checked against `.config/agent-clis.tsv` (what the tests install).

/// One tested CLI: its binary, the npm package that has it, the version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pin {
    pub binary: &'static str,
    pub package: &'static str,
    pub version: &'static str,
    /// The variable that points herd at the binary.
    pub var: &'static str,
}

/// Every CLI herd drives for real, with the versions its tests run.
pub const PINS: &[Pin] = &[
    Pin {
        binary: "claude",
        package: "@anthropic-ai/claude-code",
        version: crate::claude::TESTED_VERSION,
        var: "HERD_CLAUDE_BIN",
    },
    Pin {
        binary: "codex",
        package: "@openai/codex",
        version: crate::codex::TESTED_VERSION,
        var: crate::codex::PROGRAM_OVERRIDE_VAR,
    },
    Pin {
        binary: "gemini",
        package: "@google/gemini-cli",
        version: crate::gemini::TESTED_VERSION,
        var: crate::gemini::PROGRAM_OVERRIDE_VAR,
    },
    Pin {
        binary: "codex-acp",
        package: "@zed-industries/codex-acp",
        version: "0.16.0",
        var: "HERD_CODEX_ACP_BIN",
    },
    Pin {
        binary: "claude-code-acp",
        package: "@zed-industries/claude-code-acp",
        version: "0.16.2",
        var: "HERD_CLAUDE_CODE_ACP_BIN",
    },
];

/// The pin of `binary` (a bare name, or a path ending in one).
pub fn pin(binary: &str) -> Option<&'static Pin> {
    let name = std::path::Path::new(binary).file_name()?.to_str()?;
    PINS.iter().find(|p| p.binary == name)
}

/// `npm install -g PACKAGE@VERSION` for `binary`, if herd knows it.
pub fn install_command(binary: &str) -> Option<String> {
    pin(binary).map(|p| format!("npm install -g {}@{}", p.package, p.version))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_is_what_the_tests_install() {
        let tsv = include_str!("../../../.config/agent-clis.tsv");
        let rows: Vec<(&str, &str, &str)> = tsv
            .lines()
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
            .filter_map(|l| {
                let mut f = l.split('\t');
                Some((f.next()?, f.next()?, f.next()?))
            })
            .collect();
        assert_eq!(rows.len(), PINS.len(), "{rows:?}");
        for (binary, package, version) in rows {
            let p = pin(binary).unwrap_or_else(|| panic!("no pin for {binary}"));
            assert_eq!((p.package, p.version), (package, version), "{binary}");
        }
        assert_eq!(
            install_command("/opt/bin/codex").as_deref(),
            Some("npm install -g @openai/codex@0.169.0")
        );
        assert_eq!(install_command("my-agent"), None);
    }
}
