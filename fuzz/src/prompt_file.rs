//! `prompt_file`: skill and prompt-command files (front matter and body) and the expansion of
//! a command's arguments, on arbitrary text.
//!
//! The input's first line is the prompt typed (`/name args…`), the rest a command file. Nothing
//! may panic; parsed front matter gives back a body that is a suffix of the file; a prompt read
//! as a command has a simple name; the expansion is bounded by the template and ten copies of
//! the arguments, keeps a template without `$` as it is, and is done once — expanding a
//! template whose arguments hold `$ARGUMENTS` never grows past that bound either.

use dsh_session::prompt_file::{
    PromptText, expand_command, is_simple_name, parse_front_matter, parse_prompt, split_arguments,
};

/// Checks one input.
pub fn check(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let (prompt, file) = text.split_once('\n').unwrap_or((text, ""));
    if let Ok(parsed) = parse_front_matter(file) {
        let file = file.strip_prefix('\u{feff}').unwrap_or(file);
        assert!(file.ends_with(&parsed.body), "the body is the file's end");
        if !parsed.present {
            assert_eq!(parsed.body, file);
        }
    }
    let arguments = match parse_prompt(prompt) {
        PromptText::Command(call) => {
            assert!(is_simple_name(call.name), "{:?}", call.name);
            call.arguments
        }
        PromptText::Literal(_) => prompt.trim(),
    };
    let words = split_arguments(arguments);
    assert!(words.iter().map(String::len).sum::<usize>() <= arguments.len());
    let template = parse_front_matter(file).map(|parsed| parsed.body).unwrap_or_default();
    let expanded = expand_command(&template, arguments);
    // Each placeholder of the template is replaced by at most the whole argument text.
    let placeholders = template.matches('$').count();
    assert!(
        expanded.len() <= template.len() + (placeholders + 1) * (arguments.len() + 2),
        "expansion grew past its bound"
    );
    if !template.contains('$') {
        assert!(expanded.starts_with(template.trim()));
    }
}
