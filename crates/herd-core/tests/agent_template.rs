//! Prompt templates: placeholders, defaults, `$${` escapes, and errors that list everything
//! wrong at once.

use std::collections::BTreeMap;

use herd_core::agent::{InputDef, TemplateError, render};

fn input(name: &str, required: bool, default: Option<&str>) -> InputDef {
    InputDef { name: name.into(), required, default: default.map(Into::into), ..Default::default() }
}

fn given(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

#[test]
fn fills_given_values_then_defaults() {
    let inputs = [
        input("target", true, None),
        input("focus", false, Some("bugs")),
        input("note", false, None),
    ];
    let out =
        render("Review ${target} for ${focus}.${note}", &inputs, &given(&[("target", "src/")]));
    assert_eq!(out.unwrap(), "Review src/ for bugs.");
    let out = render("${focus}", &inputs, &given(&[("target", "t"), ("focus", "speed")]));
    assert_eq!(out.unwrap(), "speed");
}

#[test]
fn values_are_not_expanded_again() {
    let inputs = [input("a", true, None), input("b", false, Some("B"))];
    let out = render("${a}", &inputs, &given(&[("a", "${b} $${x}")]));
    assert_eq!(out.unwrap(), "${b} $${x}");
}

#[test]
fn dollar_dollar_brace_is_a_literal() {
    assert_eq!(
        render("cost: $5, $${HOME}, $$", &[], &BTreeMap::new()).unwrap(),
        "cost: $5, ${HOME}, $$"
    );
}

#[test]
fn every_problem_is_listed() {
    let inputs = [input("a", true, None), input("b", true, None), input("c", true, Some("C"))];
    let e = render("${a} ${x} ${y} ${x} ${b", &inputs, &given(&[("zz", "1")])).unwrap_err();
    assert_eq!(
        e,
        TemplateError {
            missing: vec!["a".into(), "b".into()],
            unknown: vec![
                "${x}".into(),
                "${y}".into(),
                "${b… (no closing brace)".into(),
                "input zz".into()
            ],
        }
    );
    insta::assert_snapshot!(e, @"missing required input(s): a, b; unknown placeholder(s): ${x}, ${y}, ${b… (no closing brace); undeclared input(s): zz");
}

#[test]
fn a_required_input_is_missing_even_when_the_template_does_not_use_it() {
    let e = render("plain", &[input("a", true, None)], &BTreeMap::new()).unwrap_err();
    insta::assert_snapshot!(e, @"missing required input(s): a");
}
