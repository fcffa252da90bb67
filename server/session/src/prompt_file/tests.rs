//! The front-matter parser and the command expansion: examples, then properties.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use proptest::prelude::*;

use super::*;

#[test]
fn a_skill_file_splits_into_fields_and_body() {
    let parsed = parse_front_matter(
        "---\nname: review\ndescription: \"Reviews a diff: style, tests\"\n# a comment\n\
         allowed-tools:\n  - read_file\n---\n# Review\n\nRead the diff.\n",
    )
    .unwrap();
    assert!(parsed.present);
    assert_eq!(parsed.get("name"), Some("review"));
    assert_eq!(parsed.get("description"), Some("Reviews a diff: style, tests"));
    assert_eq!(parsed.get("allowed-tools"), None, "an empty value is no value");
    assert_eq!(parsed.body, "# Review\n\nRead the diff.\n");
}

#[test]
fn block_scalars_quotes_crlf_and_a_bom_are_read() {
    let parsed = parse_front_matter(
        "\u{feff}---\r\ndescription: >-\r\n  one\r\n  two\r\n\r\nliteral: |\n  a\n  b\n\
         single: 'it''s'\nplain: x # comment\n---\r\nbody",
    )
    .unwrap();
    assert_eq!(parsed.get("description"), Some("one two"));
    assert_eq!(parsed.get("literal"), Some("a\nb"));
    assert_eq!(parsed.get("single"), Some("it's"));
    assert_eq!(parsed.get("plain"), Some("x"));
    assert_eq!(parsed.body, "body");
}

#[test]
fn no_front_matter_is_all_body_and_bad_front_matter_is_a_typed_error() {
    let plain = parse_front_matter("Review $ARGUMENTS\n").unwrap();
    assert!(!plain.present);
    assert_eq!(plain.body, "Review $ARGUMENTS\n");
    assert_eq!(parse_front_matter("").unwrap(), FrontMatter::default());
    assert_eq!(parse_front_matter("---\nname: x\n"), Err(FrontMatterError::Unclosed));
    assert_eq!(
        parse_front_matter("---\nname: x\njust words\n---\n"),
        Err(FrontMatterError::BadLine { line: 3 })
    );
    assert_eq!(
        parse_front_matter("---\nname: \"x\n---\n"),
        Err(FrontMatterError::UnclosedQuote { line: 2 })
    );
    assert_eq!(
        parse_front_matter("---\ntwo words: x\n---\n"),
        Err(FrontMatterError::BadLine { line: 2 })
    );
}

#[test]
fn simple_names() {
    for good in ["review", "a", "fix-tests", "v1.2", "snake_case", "9lives"] {
        assert!(is_simple_name(good), "{good}");
    }
    for bad in ["", "-x", ".hidden", "a/b", "../x", "two words", "é", &"x".repeat(65)] {
        assert!(!is_simple_name(bad), "{bad}");
    }
}

#[test]
fn a_prompt_is_a_command_only_when_it_starts_with_one_slash_and_a_name() {
    assert_eq!(
        parse_prompt("/review  src/a.rs  "),
        PromptText::Command(CommandCall { name: "review", arguments: "src/a.rs" })
    );
    assert_eq!(
        parse_prompt("/review"),
        PromptText::Command(CommandCall { name: "review", arguments: "" })
    );
    assert_eq!(parse_prompt("//review x"), PromptText::Literal("/review x".into()));
    assert_eq!(parse_prompt("/usr/bin is empty"), PromptText::Literal("/usr/bin is empty".into()));
    assert_eq!(parse_prompt("what is /review?"), PromptText::Literal("what is /review?".into()));
    assert_eq!(parse_prompt("/"), PromptText::Literal("/".into()));
}

#[test]
fn arguments_expand_once() {
    assert_eq!(expand_command("Review $ARGUMENTS.", "src/a.rs"), "Review src/a.rs.");
    assert_eq!(
        expand_command("Move $1 to $2, not $3.", "'a b.rs' c.rs"),
        "Move a b.rs to c.rs, not ."
    );
    // Substituted text is never scanned again: no argument expands a placeholder.
    assert_eq!(
        expand_command("Say $1 and $ARGUMENTS", "$ARGUMENTS $1"),
        "Say $ARGUMENTS and $ARGUMENTS $1"
    );
    // A dollar that names nothing stays.
    assert_eq!(expand_command("Costs $5 or $x or $0", ""), "Costs  or $x or $0");
    // A template naming no argument keeps what was typed after it.
    assert_eq!(expand_command("Review the diff.\n", "carefully"), "Review the diff.\n\ncarefully");
    assert_eq!(expand_command("  \n", ""), "");
    assert_eq!(expand_command("", "only args"), "only args");
}

proptest! {
    /// Any text parses or is refused, and a file written with front matter reads back its
    /// fields and body.
    #[test]
    fn any_text_parses_or_is_refused(text in "(\\PC|\n|\r|---\n){0,200}") {
        let _ = parse_front_matter(&text);
    }

    #[test]
    fn written_front_matter_reads_back(
        name in "[a-z][a-z0-9-]{0,20}",
        description in "[A-Za-z0-9 ,.;:()#'\"-]{0,60}",
        body in "\\PC{0,100}",
    ) {
        let quoted = description.replace('\\', "\\\\").replace('"', "\\\"");
        let text = format!("---\nname: {name}\ndescription: \"{quoted}\"\n---\n{body}");
        let parsed = parse_front_matter(&text).unwrap();
        prop_assert_eq!(parsed.fields.get("name").map(String::as_str), Some(name.as_str()));
        prop_assert_eq!(parsed.fields.get("description"), Some(&description));
        prop_assert_eq!(parsed.body, body);
    }

    /// A template without `$` is kept as it is (trimmed), the arguments appended; every
    /// argument of a `$ARGUMENTS` template appears verbatim; expansion never grows past the
    /// template and ten copies of the arguments.
    #[test]
    fn expansion_is_bounded_and_keeps_what_was_typed(
        template in "[^$]{0,80}",
        arguments in "\\PC{0,40}",
    ) {
        let arguments = arguments.trim();
        let expanded = expand_command(&template, arguments);
        prop_assert!(expanded.contains(arguments));
        prop_assert!(expanded.starts_with(template.trim()));
        let with = expand_command(&format!("{template}$ARGUMENTS"), arguments);
        prop_assert!(with.contains(arguments));
        let all = expand_command("$ARGUMENTS$1$2$3$4$5$6$7$8$9", arguments);
        prop_assert!(all.len() <= 10 * arguments.len());
    }

    /// A `//` prompt is always literal with one slash dropped; a command's name is simple.
    #[test]
    fn parse_prompt_is_total(text in "\\PC{0,60}") {
        match parse_prompt(&text) {
            PromptText::Command(call) => {
                prop_assert!(is_simple_name(call.name));
                prop_assert!(text.starts_with('/') && !text.starts_with("//"));
            }
            PromptText::Literal(literal) => {
                if let Some(rest) = text.strip_prefix("//") {
                    prop_assert_eq!(literal.as_ref(), format!("/{rest}"));
                } else {
                    prop_assert_eq!(literal.as_ref(), text.as_str());
                }
            }
        }
    }
}
