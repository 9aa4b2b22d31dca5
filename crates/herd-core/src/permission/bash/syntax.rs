//! The walk over tree-sitter-bash's tree: every command node, every redirection, and the
//! constructs through which bash could run code no command node shows.

use tree_sitter::{Node, Parser};

use super::words::{text, word};
use super::{BashLine, Command, PathRef, Redirect, commands};
use crate::permission::pattern::Word;

/// Deeper trees are not walked (unprovable).
const MAX_TREE_DEPTH: usize = 200;
/// `bash -c "bash -c '…'"` deeper than this is unprovable.
pub(super) const MAX_CODE_DEPTH: usize = 8;
/// More commands than this are not listed (unprovable).
const MAX_COMMANDS: usize = 4096;

/// Where the walk is: the code's text, the assignments in force, how deep in code strings,
/// and whether what it finds is only a guess (arguments of a tool herd does not model).
#[derive(Debug, Clone, Copy)]
pub(super) struct Ctx<'s> {
    pub src: &'s str,
    pub inherited: &'s [Word],
    pub depth: usize,
    pub guess: bool,
}

pub(super) struct Walk<'o> {
    out: &'o mut BashLine,
}

impl<'o> Walk<'o> {
    pub fn new(out: &'o mut BashLine) -> Self {
        Self { out }
    }

    /// Record why the line cannot be proven (guesses never make it so).
    pub fn unprovable(&mut self, why: impl Into<String>, guess: bool) {
        let why = why.into();
        if !guess && !self.out.unprovable.contains(&why) {
            self.out.unprovable.push(why);
        }
    }

    pub fn push(&mut self, cmd: Command) {
        if self.out.commands.len() >= MAX_COMMANDS {
            self.unprovable(format!("the line runs more than {MAX_COMMANDS} commands"), false);
        } else if !self.out.commands.contains(&cmd) {
            self.out.commands.push(cmd);
        }
    }

    /// Parse `code` and walk it: the line itself, or the code string of `sh -c`, `eval`…
    pub fn code(&mut self, code: &str, inherited: &[Word], depth: usize, guess: bool) {
        if depth > MAX_CODE_DEPTH {
            self.unprovable(format!("code strings nest deeper than {MAX_CODE_DEPTH}"), guess);
            return;
        }
        // tree-sitter-bash 0.25's scanner reads out of bounds on some non-ASCII characters
        // (`{` then U+41E20 crashes it). Bash gives them no meaning of their own (they are
        // word characters), so the parser sees `.` per byte; byte offsets stay the same and
        // every word's text is read from the line itself.
        let ascii: String =
            code.bytes().map(|b| if b.is_ascii() { b as char } else { '.' }).collect();
        let mut parser = Parser::new();
        let tree = match parser.set_language(&tree_sitter_bash::LANGUAGE.into()) {
            Ok(()) => parser.parse(&ascii, None),
            Err(_) => None,
        };
        let Some(tree) = tree else {
            self.unprovable("the bash parser gave no answer", guess);
            return;
        };
        let cx = Ctx { src: code, inherited, depth, guess };
        self.node(tree.root_node(), &cx, 0);
    }

    fn node(&mut self, n: Node, cx: &Ctx, level: usize) {
        if level > MAX_TREE_DEPTH {
            self.unprovable(format!("the line nests deeper than {MAX_TREE_DEPTH}"), cx.guess);
            return;
        }
        if n.is_error() || n.is_missing() {
            let why = "the line does not parse cleanly: bash may read it differently";
            self.unprovable(why, cx.guess);
        }
        match n.kind() {
            "command" => self.command(n, cx),
            "declaration_command" | "unset_command" => self.declaration(n, cx),
            "file_redirect" => self.redirect(n, cx),
            "heredoc_redirect" => self.heredoc(n, cx),
            "variable_assignment" => self.assignment(n, cx),
            "arithmetic_expansion" => self.arithmetic(n, cx),
            "c_style_for_statement" => {
                for i in 0..n.child_count() as u32 {
                    if matches!(
                        n.field_name_for_child(i),
                        Some("initializer" | "condition" | "update")
                    ) && let Some(c) = n.child(i)
                    {
                        self.arithmetic(c, cx);
                    }
                }
            }
            "compound_statement" if n.child(0).is_some_and(|c| c.kind() == "((") => {
                self.arithmetic(n, cx)
            }
            "subscript" => {
                if let Some(i) = n.child_by_field_name("index") {
                    self.arithmetic(i, cx);
                }
            }
            "expansion" => self.expansion(n, cx),
            "test_command" => self.test(n, cx),
            _ => {}
        }
        for i in 0..n.child_count() as u32 {
            if let Some(c) = n.child(i) {
                self.node(c, cx, level + 1);
            }
        }
    }

    fn command(&mut self, n: Node, cx: &Ctx) {
        let mut assignments = cx.inherited.to_vec();
        let mut argv = Vec::new();
        for i in 0..n.child_count() as u32 {
            let Some(c) = n.child(i) else { continue };
            match c.kind() {
                "variable_assignment" => assignments.push(assignment_word(c, cx.src)),
                "command_name" => argv.push(word(c, cx.src)),
                _ if n.field_name_for_child(i) == Some("argument") => argv.push(word(c, cx.src)),
                _ => {}
            }
        }
        if !argv.is_empty() {
            commands::expand(self, argv, assignments, cx);
        }
    }

    /// `declare`, `typeset`, `local`, `export`, `readonly`, `unset`: commands of their own.
    fn declaration(&mut self, n: Node, cx: &Ctx) {
        let Some(keyword) = n.child(0) else { return };
        let mut argv = vec![Word::text(text(keyword, cx.src))];
        for i in 0..n.named_child_count() as u32 {
            let Some(c) = n.named_child(i) else { continue };
            argv.push(match c.kind() {
                "variable_assignment" => assignment_word(c, cx.src),
                _ => word(c, cx.src),
            });
        }
        commands::expand(self, argv, cx.inherited.to_vec(), cx);
    }

    fn redirect(&mut self, n: Node, cx: &Ctx) {
        let mut op = None;
        for i in 0..n.child_count() as u32 {
            if let Some(c) = n.child(i).filter(|c| !c.is_named()) {
                op = Some(c.kind());
                break;
            }
        }
        let target = n.child_by_field_name("destination").map(|d| word(d, cx.src));
        let write = match (op, &target) {
            (Some(">" | ">>" | ">|" | "&>" | "&>>"), _) => true,
            // `>&2` duplicates a descriptor; `>&file` is `&>file`.
            (Some(">&"), Some(t)) => {
                !t.literal().is_some_and(|l| l == "-" || l.chars().all(|c| c.is_ascii_digit()))
            }
            (Some("<" | "<&" | "<&-" | ">&-"), _) => false,
            _ => {
                self.unprovable(format!("an unknown redirection {:?}", text(n, cx.src)), cx.guess);
                false
            }
        };
        if !write {
            return;
        }
        let target = target.unwrap_or_else(Word::unknown);
        let given = target.literal();
        let harmless = given.as_deref().is_some_and(|g| {
            matches!(g, "/dev/null" | "/dev/stdout" | "/dev/stderr")
                || g.strip_prefix("/dev/fd/").is_some_and(|n| n.chars().all(|c| c.is_ascii_digit()))
        });
        if !harmless {
            let r = Redirect { target, path: PathRef { given, canonical: None } };
            if !self.out.writes.contains(&r) {
                self.out.writes.push(r);
            }
        }
    }

    /// A here-document with an unquoted tag expands its body: its substitutions run.
    fn heredoc(&mut self, n: Node, cx: &Ctx) {
        let start = (0..n.child_count() as u32)
            .filter_map(|i| n.child(i))
            .find(|c| c.kind() == "heredoc_start");
        if start.is_some_and(|s| text(s, cx.src).contains(['\'', '"', '\\'])) {
            return;
        }
        for i in 0..n.child_count() as u32 {
            let Some(body) = n.child(i).filter(|c| c.kind() == "heredoc_body") else { continue };
            let t = text(body, cx.src);
            if (t.contains("$(") || t.contains('`'))
                && !has_descendant(body, &["command_substitution"])
            {
                self.unprovable("a here-document runs substitutions herd cannot read", cx.guess);
            }
        }
    }

    /// `PS4=…`, `BASH_ENV=…`, `BASH_FUNC_x%%=…`: bash runs the value.
    fn assignment(&mut self, n: Node, cx: &Ctx) {
        if let Some(name) = n.child_by_field_name("name") {
            commands::check_variable(self, text(name, cx.src), cx);
        }
    }

    fn arithmetic(&mut self, n: Node, cx: &Ctx) {
        let vars =
            ["variable_name", "simple_expansion", "expansion", "command_substitution", "word"];
        if has_descendant(n, &vars) {
            let why = "arithmetic on a variable's value (bash runs `a[$(…)]` found in it)";
            self.unprovable(why, cx.guess);
        }
    }

    /// `${!x}` (indirection), `${x@P}` (prompt expansion), `${x:$off}` (arithmetic).
    fn expansion(&mut self, n: Node, cx: &Ctx) {
        let kids: Vec<Node> = (0..n.child_count() as u32).filter_map(|i| n.child(i)).collect();
        let t = text(n, cx.src);
        let indirect = kids.get(1).is_some_and(|k| k.kind() == "!");
        let substring = kids
            .iter()
            .position(|k| k.kind() == ":")
            .is_some_and(|at| kids[at..].iter().any(|k| k.is_named() && k.kind() != "number"));
        if indirect || t.ends_with("@P}") || substring {
            let why = "an indirect, prompt or substring expansion that can run a variable's value";
            self.unprovable(why, cx.guess);
        }
    }

    /// `[[ $x -eq 1 ]]` evaluates arithmetic; `-v 'a[…]'` a subscript.
    fn test(&mut self, n: Node, cx: &Ctx) {
        let double = text(n, cx.src).starts_with("[[");
        let mut stack = vec![n];
        while let Some(e) = stack.pop() {
            let op = (0..e.child_count() as u32)
                .filter_map(|i| e.child(i))
                .find(|c| c.kind() == "test_operator")
                .map(|c| text(c, cx.src));
            let risky = match op {
                Some("-eq" | "-ne" | "-lt" | "-le" | "-gt" | "-ge") => {
                    double
                        && has_descendant(
                            e,
                            &[
                                "variable_name",
                                "simple_expansion",
                                "expansion",
                                "word",
                                "command_substitution",
                                "string",
                                "raw_string",
                            ],
                        )
                }
                Some("-v") => text(e, cx.src).contains('['),
                _ => false,
            };
            if risky {
                self.unprovable("a test that evaluates a variable's value as arithmetic", cx.guess);
            }
            stack.extend((0..e.named_child_count() as u32).filter_map(|i| e.named_child(i)));
        }
    }
}

/// `NAME=value` as one word.
fn assignment_word(n: Node, src: &str) -> Word {
    let mut w = Word::default();
    match n.child_by_field_name("value") {
        Some(v) => {
            w.push_text(super::words::span(src, n.start_byte(), v.start_byte()));
            w.append(&word(v, src));
        }
        None => w.push_text(text(n, src)),
    }
    w
}

fn has_descendant(n: Node, kinds: &[&str]) -> bool {
    let mut stack = vec![n];
    while let Some(e) = stack.pop() {
        if kinds.contains(&e.kind()) {
            return true;
        }
        stack.extend((0..e.child_count() as u32).filter_map(|i| e.child(i)));
    }
    false
}
