//! Prompt templates: `${name}` placeholders filled from declared inputs (defaults applied),
//! `$${` for a literal `${`; anything missing or unknown is an error that lists all of it.

use std::collections::BTreeMap;
use std::fmt;

use super::InputDef;

/// Why a template could not be rendered: every missing and unknown name at once.
#[derive(Debug, Clone, Default, PartialEq, Eq, thiserror::Error)]
pub struct TemplateError {
    /// Required inputs that were not given (and have no default).
    pub missing: Vec<String>,
    /// `${x}` in the template that is not a declared input (written as `${x}`), and given
    /// inputs that are not declared (written as `input x`).
    pub unknown: Vec<String>,
}

impl fmt::Display for TemplateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (inputs, placeholders): (Vec<&str>, Vec<&str>) =
            self.unknown.iter().map(String::as_str).partition(|u| u.starts_with("input "));
        let inputs: Vec<&str> = inputs.iter().map(|u| &u["input ".len()..]).collect();
        let mut parts = Vec::new();
        if !self.missing.is_empty() {
            parts.push(format!("missing required input(s): {}", self.missing.join(", ")));
        }
        if !placeholders.is_empty() {
            parts.push(format!("unknown placeholder(s): {}", placeholders.join(", ")));
        }
        if !inputs.is_empty() {
            parts.push(format!("undeclared input(s): {}", inputs.join(", ")));
        }
        if parts.is_empty() {
            parts.push("template error".into());
        }
        f.write_str(&parts.join("; "))
    }
}

/// One piece of a template.
#[derive(Debug, PartialEq)]
enum Piece<'a> {
    Text(&'a str),
    /// `${name}`.
    Var(&'a str),
    /// `${…` with no closing brace: the rest of the template.
    Unclosed(&'a str),
}

fn pieces(template: &str) -> Vec<Piece<'_>> {
    let mut out = Vec::new();
    let mut rest = template;
    while let Some(at) = rest.find("${") {
        if at > 0 && rest[..at].ends_with('$') {
            // `$${` is a literal `${`.
            out.push(Piece::Text(&rest[..at - 1]));
            out.push(Piece::Text("${"));
            rest = &rest[at + 2..];
            continue;
        }
        out.push(Piece::Text(&rest[..at]));
        let after = &rest[at + 2..];
        match after.find('}') {
            Some(end) => {
                out.push(Piece::Var(&after[..end]));
                rest = &after[end + 1..];
            }
            None => {
                out.push(Piece::Unclosed(after));
                rest = "";
            }
        }
    }
    out.push(Piece::Text(rest));
    out
}

/// How an unknown placeholder is listed.
fn show_var(name: &str) -> String {
    format!("${{{name}}}")
}

fn show_unclosed(rest: &str) -> String {
    let head: String = rest.chars().take(20).collect();
    format!("${{{head}… (no closing brace)")
}

/// The placeholders of `template` that are not among `inputs`, as [`TemplateError::unknown`]
/// lists them (in order, once each).
pub(super) fn unknown_placeholders(template: &str, inputs: &[InputDef]) -> Vec<String> {
    let mut unknown = Vec::new();
    for p in pieces(template) {
        let u = match p {
            Piece::Var(v) if !inputs.iter().any(|i| i.name == v) => show_var(v),
            Piece::Unclosed(rest) => show_unclosed(rest),
            _ => continue,
        };
        if !unknown.contains(&u) {
            unknown.push(u);
        }
    }
    unknown
}

/// Fill `template` from `given`, then the inputs' defaults; an optional input with neither is
/// empty. Values are inserted as they are (never expanded again).
pub fn render(
    template: &str,
    inputs: &[InputDef],
    given: &BTreeMap<String, String>,
) -> Result<String, TemplateError> {
    let missing: Vec<String> = inputs
        .iter()
        .filter(|i| i.required && i.default.is_none() && !given.contains_key(&i.name))
        .map(|i| i.name.clone())
        .collect();
    let mut unknown = unknown_placeholders(template, inputs);
    for k in given.keys() {
        if !inputs.iter().any(|i| &i.name == k) {
            unknown.push(format!("input {k}"));
        }
    }
    if !missing.is_empty() || !unknown.is_empty() {
        return Err(TemplateError { missing, unknown });
    }
    let mut out = String::with_capacity(template.len());
    for p in pieces(template) {
        match p {
            Piece::Text(t) => out.push_str(t),
            Piece::Var(v) => {
                let def = inputs.iter().find(|i| i.name == v);
                let value = given.get(v).or(def.and_then(|d| d.default.as_ref()));
                out.push_str(value.map_or("", String::as_str));
            }
            Piece::Unclosed(_) => {}
        }
    }
    Ok(out)
}

/// Text made into a template that renders back to itself: every `${` becomes `$${`.
/// (Prompts imported from formats without templates are literal text.)
pub fn escape(text: &str) -> String {
    text.replace("${", "$${")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_split_escapes_and_unclosed() {
        assert_eq!(
            pieces("a$${b}${c}d${e"),
            vec![
                Piece::Text("a"),
                Piece::Text("${"),
                Piece::Text("b}"),
                Piece::Var("c"),
                Piece::Text("d"),
                Piece::Unclosed("e"),
                Piece::Text(""),
            ]
        );
    }
}
