//! What `web_fetch` makes of a body: bytes decoded by the charset the response or the page
//! declares (replacement characters for invalid bytes, said), HTML converted to Markdown by
//! `htmd` or stripped to plain text, and everything bounded.
//!
//! Bounds, for any input: the conversion never sees more than [`MAX_CONVERT_BYTES`] (a longer
//! input is cut first, and the result says so); a document nested deeper than [`MAX_DEPTH`]
//! elements is shown as plain text instead — the tree builder's work grows with the depth
//! times the length (it searches the open elements at each tag), the Markdown converter walks
//! the tree recursively (the thread's stack) and indents by depth. The depth is estimated by a
//! pass of the tokenizer before any tree is built, and measured on the tree before it is
//! walked. The plain-text form is made by html5ever's tokenizer alone, which keeps no tree at
//! all: linear in the input. What the model is shown is then cut to the tool's content cap by
//! the caller.

use std::borrow::Cow;
use std::cell::{Cell, RefCell};
use std::rc::Rc;

use html5ever::TokenizerResult;
use html5ever::tendril::StrTendril;
use html5ever::tokenizer::states::RawKind;
use html5ever::tokenizer::{
    BufferQueue, Tag, TagKind, Token, TokenSink, TokenSinkResult, Tokenizer, TokenizerOpts,
};

/// The most bytes of HTML converted (a larger input is cut before conversion).
pub const MAX_CONVERT_BYTES: usize = 8 << 20;

/// The deepest element nesting converted to Markdown; deeper documents are shown as text.
pub const MAX_DEPTH: usize = 128;

/// The Markdown (or text) of an HTML document.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Converted {
    /// The text.
    pub text: String,
    /// Notes for the model about how it was made (cut input, the text fallback).
    pub notes: Vec<String>,
}

/// `html` as Markdown: links, headings, lists, tables and code kept; scripts, styles and other
/// non-content elements left out. Bounded in time and size for any input (see the module).
pub fn html_to_markdown(html: &str) -> Converted {
    let (html, mut notes) = capped(html);
    let html = &*html;
    let estimate = estimated_depth(html);
    if estimate > MAX_DEPTH {
        notes.push(format!(
            "the page nests elements about {estimate} deep (more than {MAX_DEPTH}): shown as text"
        ));
        return Converted { text: text_of(html), notes };
    }
    let converter = htmd::HtmlToMarkdown::builder()
        .skip_tags(vec![
            "script", "style", "noscript", "template", "svg", "canvas", "iframe", "object",
            "embed", "head",
        ])
        .build();
    let tree = match converter.html_to_tree(html) {
        Ok(tree) => tree,
        Err(error) => {
            notes.push(format!("the HTML could not be parsed ({error}): shown as text"));
            return Converted { text: text_of(html), notes };
        }
    };
    let depth = depth(&tree);
    if depth > MAX_DEPTH {
        notes.push(format!(
            "the page nests elements {depth} deep (more than {MAX_DEPTH}): shown as text"
        ));
        return Converted { text: text_of(html), notes };
    }
    Converted { text: converter.tree_to_markdown(&tree), notes }
}

/// `html` as plain text: the text of the document, one line per block, scripts and styles
/// left out. Linear in the input, whatever it is.
pub fn html_to_text(html: &str) -> Converted {
    let (html, notes) = capped(html);
    Converted { text: text_of(&html), notes }
}

/// `html` cut to [`MAX_CONVERT_BYTES`] (at a character boundary), with a note when it was, and
/// without NUL characters: they carry nothing a model reads, and the HTML parser would turn each
/// into U+FFFD (three bytes for one — found by fuzzing: text three times its input).
fn capped(html: &str) -> (Cow<'_, str>, Vec<String>) {
    let (kept, notes) = if html.len() <= MAX_CONVERT_BYTES {
        (html, Vec::new())
    } else {
        let mut end = MAX_CONVERT_BYTES;
        while !html.is_char_boundary(end) {
            end -= 1;
        }
        let note = format!("only the first {end} bytes of {} were converted", html.len());
        (&html[..end], vec![note])
    };
    if kept.contains('\0') {
        (Cow::Owned(kept.replace('\0', "")), notes)
    } else {
        (Cow::Borrowed(kept), notes)
    }
}

/// The depth of the deepest element, walked without recursion.
fn depth(root: &Rc<htmd::Node>) -> usize {
    let mut deepest = 0;
    let mut stack = vec![(Rc::clone(root), 0usize)];
    while let Some((node, depth)) = stack.pop() {
        deepest = deepest.max(depth);
        for child in node.children.borrow().iter() {
            stack.push((Rc::clone(child), depth + 1));
        }
    }
    deepest
}

/// Elements a start tag of which never opens a level the estimate counts: void elements, and
/// those whose end tag is optional (a new one closes the last: `<li>`, `<p>`, table rows).
const FLAT: &[&str] = &[
    "area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param", "source",
    "track", "wbr", "p", "li", "dt", "dd", "tr", "td", "th", "option", "optgroup", "thead",
    "tbody", "tfoot", "colgroup", "caption", "rb", "rt", "rp", "rtc", "html", "head", "body",
];

/// Counts open elements the way a tree would nest them, roughly: start tags open a level
/// (but [`FLAT`] ones), end tags close one.
#[derive(Default)]
struct DepthSink {
    open: Cell<usize>,
    deepest: Cell<usize>,
}

impl TokenSink for DepthSink {
    type Handle = ();

    fn process_token(&self, token: Token, _line: u64) -> TokenSinkResult<()> {
        let Token::TagToken(tag) = token else { return TokenSinkResult::Continue };
        let name: &str = &tag.name;
        match tag.kind {
            TagKind::StartTag if !tag.self_closing && !FLAT.contains(&name) => {
                self.open.set(self.open.get() + 1);
                self.deepest.set(self.deepest.get().max(self.open.get()));
            }
            TagKind::EndTag if !FLAT.contains(&name) => {
                self.open.set(self.open.get().saturating_sub(1));
            }
            _ => {}
        }
        raw_state(&tag)
    }
}

/// How deep `html` nests, estimated by its tags alone (no tree).
fn estimated_depth(html: &str) -> usize {
    let tokenizer = tokenize(DepthSink::default(), html);
    tokenizer.sink.deepest.get()
}

/// Runs the tokenizer over the whole of `html` into `sink`.
fn tokenize<Sink: TokenSink<Handle = ()>>(sink: Sink, html: &str) -> Tokenizer<Sink> {
    let tokenizer = Tokenizer::new(sink, TokenizerOpts::default());
    let input = BufferQueue::default();
    input.push_back(StrTendril::from_slice(html));
    // `feed` runs to the end of the input unless the sink asks it to stop (a script to run,
    // an encoding to switch to), which these sinks never do; each round consumes input.
    while let TokenizerResult::Script(()) | TokenizerResult::EncodingIndicator(_) =
        tokenizer.feed(&input)
    {
        if input.is_empty() {
            break;
        }
    }
    tokenizer.end();
    tokenizer
}

/// The tokenizer state after a start tag, as a browser's: these elements' content is raw
/// text, so that a `<` in a script is not taken for a tag.
fn raw_state(tag: &Tag) -> TokenSinkResult<()> {
    if tag.kind != TagKind::StartTag {
        return TokenSinkResult::Continue;
    }
    match &*tag.name {
        "script" => TokenSinkResult::RawData(RawKind::ScriptData),
        "style" | "xmp" | "iframe" | "noembed" | "noframes" => {
            TokenSinkResult::RawData(RawKind::Rawtext)
        }
        "title" | "textarea" => TokenSinkResult::RawData(RawKind::Rcdata),
        "plaintext" => TokenSinkResult::Plaintext,
        _ => TokenSinkResult::Continue,
    }
}

/// Elements whose start and end break a line in the text form.
const BLOCKS: &[&str] = &[
    "address",
    "article",
    "aside",
    "blockquote",
    "br",
    "dd",
    "div",
    "dl",
    "dt",
    "figcaption",
    "figure",
    "footer",
    "form",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "header",
    "hr",
    "li",
    "main",
    "nav",
    "ol",
    "p",
    "pre",
    "section",
    "table",
    "title",
    "tr",
    "ul",
];

/// Elements whose content is not text a reader sees.
/// (Not `head`: its end tag is optional, and a page that leaves it out would lose its body.)
const HIDDEN: &[&str] = &["script", "style", "noscript", "template", "svg"];

/// Collects the text of a document from the tokenizer's tokens.
#[derive(Default)]
struct TextSink {
    /// The text so far.
    out: RefCell<String>,
    /// The hidden element being skipped, if any (its name), and how many are open.
    hidden: RefCell<Option<(String, usize)>>,
    /// Open `pre` elements: whitespace is kept inside them.
    pre: Cell<usize>,
    /// Whether the last thing written was a space (or nothing on this line yet).
    spaced: Cell<bool>,
}

impl TextSink {
    /// Ends the line, keeping at most one blank line between blocks.
    fn break_line(&self) {
        let mut out = self.out.borrow_mut();
        while out.ends_with(' ') {
            out.pop();
        }
        if !out.is_empty() && !out.ends_with("\n\n") {
            out.push('\n');
        }
        self.spaced.set(true);
    }

    fn push_text(&self, text: &str) {
        let mut out = self.out.borrow_mut();
        if self.pre.get() > 0 {
            out.push_str(text);
            self.spaced.set(text.ends_with(char::is_whitespace));
            return;
        }
        for character in text.chars() {
            if character.is_whitespace() {
                if !self.spaced.get() {
                    out.push(' ');
                    self.spaced.set(true);
                }
            } else {
                out.push(character);
                self.spaced.set(false);
            }
        }
    }

    fn tag(&self, tag: &Tag) -> TokenSinkResult<()> {
        let name: &str = &tag.name;
        let mut hidden = self.hidden.borrow_mut();
        if let Some((open, count)) = hidden.as_mut() {
            if open == name {
                match tag.kind {
                    TagKind::StartTag if !tag.self_closing => *count += 1,
                    TagKind::EndTag => *count -= 1,
                    TagKind::StartTag => {}
                }
                if *count == 0 {
                    *hidden = None;
                }
            }
            return raw_state(tag);
        }
        if tag.kind == TagKind::StartTag && HIDDEN.contains(&name) && !tag.self_closing {
            *hidden = Some((name.to_owned(), 1));
        }
        drop(hidden);
        if name == "pre" {
            match tag.kind {
                TagKind::StartTag => self.pre.set(self.pre.get() + 1),
                TagKind::EndTag => self.pre.set(self.pre.get().saturating_sub(1)),
            }
        }
        if BLOCKS.contains(&name) {
            self.break_line();
        }
        raw_state(tag)
    }
}

impl TokenSink for TextSink {
    type Handle = ();

    fn process_token(&self, token: Token, _line: u64) -> TokenSinkResult<()> {
        match token {
            Token::TagToken(tag) => return self.tag(&tag),
            Token::CharacterTokens(text) if self.hidden.borrow().is_none() => self.push_text(&text),
            _ => {}
        }
        TokenSinkResult::Continue
    }
}

/// The text of `html` (already capped).
fn text_of(html: &str) -> String {
    let tokenizer = tokenize(TextSink::default(), html);
    let text = tokenizer.sink.out.take();
    let lines: Vec<&str> = text.lines().map(str::trim_end).collect();
    let mut out = String::with_capacity(text.len());
    let mut blank = true;
    for line in lines {
        if line.trim().is_empty() {
            if !blank {
                out.push('\n');
            }
            blank = true;
            continue;
        }
        out.push_str(line);
        out.push('\n');
        blank = false;
    }
    out.trim().to_owned()
}

/// A body decoded to text: the charset declared by the response's `Content-Type`, else by a
/// byte-order mark or (for HTML) a `<meta>` in the first kilobytes, else UTF-8. Invalid bytes
/// become U+FFFD.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decoded {
    /// The text.
    pub text: String,
    /// The encoding used (`UTF-8`, `windows-1252`…).
    pub encoding: &'static str,
    /// Whether invalid bytes were replaced.
    pub replaced: bool,
}

/// Decodes `body` as [`Decoded`] says. `content_type` is the response's header, if any.
pub fn decode(body: &[u8], content_type: Option<&str>, html: bool) -> Decoded {
    let declared = content_type
        .and_then(charset_param)
        .or_else(|| if html { meta_charset(body) } else { None })
        .and_then(|label| encoding_rs::Encoding::for_label(label.as_bytes()));
    let encoding = declared.unwrap_or(encoding_rs::UTF_8);
    // A byte-order mark beats a declaration (as in browsers); `decode` sniffs it.
    let (text, used, replaced) = encoding.decode(body);
    Decoded { text: text.into_owned(), encoding: used.name(), replaced }
}

/// The `charset` parameter of a media type.
fn charset_param(content_type: &str) -> Option<String> {
    content_type.split(';').skip(1).find_map(|parameter| {
        let (name, value) = parameter.split_once('=')?;
        name.trim()
            .eq_ignore_ascii_case("charset")
            .then(|| value.trim().trim_matches('"').to_owned())
    })
}

/// The charset a page's `<meta charset=…>` or `<meta http-equiv content="…; charset=…">`
/// declares in its first 4 KiB (a simplified form of the HTML prescan).
fn meta_charset(body: &[u8]) -> Option<String> {
    let head = &body[..body.len().min(4096)];
    let head = String::from_utf8_lossy(head).to_ascii_lowercase();
    let at = head.find("charset")?;
    let rest = head[at + "charset".len()..].trim_start();
    let rest = rest.strip_prefix('=')?.trim_start().trim_start_matches(['"', '\'']);
    let label: String = rest
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | ':' | '.'))
        .collect();
    (!label.is_empty()).then_some(label)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn markdown_keeps_headings_links_and_lists_and_drops_scripts() {
        let html = "<html><head><title>T</title><style>p{}</style></head><body>\
                    <h1>Hello</h1><p>See <a href=\"https://example.com/a\">the docs</a>.</p>\
                    <ul><li>one</li><li>two</li></ul><script>alert(1)</script></body></html>";
        let converted = html_to_markdown(html);
        assert!(converted.notes.is_empty(), "{:?}", converted.notes);
        let text = converted.text;
        assert!(text.starts_with("# Hello"), "{text}");
        assert!(text.contains("[the docs](https://example.com/a)"), "{text}");
        assert!(text.contains("*   one") || text.contains("- one") || text.contains("* one"));
        assert!(!text.contains("alert"), "{text}");
        assert!(!text.contains("p{}"), "{text}");
    }

    #[test]
    fn text_strips_tags_scripts_and_collapses_space() {
        let html = "<title>Page</title><script>if (a < b) { x() }</script>\
                    <style>body { color: red }</style>\
                    <h1>Big   title</h1><p>first\n  paragraph with <b>bold</b></p>\
                    <pre>keep   this\n  spacing</pre><p>&amp; more</p>";
        let text = html_to_text(html).text;
        assert_eq!(
            text,
            "Page\n\nBig title\n\nfirst paragraph with bold\n\nkeep   this\n  spacing\n\n& more"
        );
    }

    #[test]
    fn deep_nesting_falls_back_to_text_without_exhausting_the_stack() {
        let depth = 100_000;
        let html = format!(
            "{}deep{}",
            "<div><blockquote>".repeat(depth),
            "</blockquote></div>".repeat(depth)
        );
        // A small stack, as the blocking pool's threads have: the conversion must not recurse
        // on the input's depth.
        let converted = std::thread::Builder::new()
            .stack_size(2 << 20)
            .spawn(move || html_to_markdown(&html))
            .map(|thread| thread.join())
            .ok()
            .and_then(Result::ok);
        let converted = converted.unwrap_or_else(|| panic!("the conversion crashed"));
        assert_eq!(converted.text, "deep");
        assert!(converted.notes[0].contains("shown as text"), "{:?}", converted.notes);
    }

    #[test]
    fn nesting_at_the_limit_still_converts_on_a_small_stack() {
        let html = format!(
            "{}deep{}",
            "<blockquote>".repeat(MAX_DEPTH - 3),
            "</blockquote>".repeat(MAX_DEPTH - 3)
        );
        let converted = std::thread::Builder::new()
            .stack_size(2 << 20)
            .spawn(move || html_to_markdown(&html))
            .map(|thread| thread.join())
            .ok()
            .and_then(Result::ok);
        let converted = converted.unwrap_or_else(|| panic!("the conversion crashed"));
        assert!(converted.notes.is_empty(), "{:?}", converted.notes);
        assert!(converted.text.starts_with("> > > "), "{}", &converted.text[..40]);
    }

    #[test]
    fn an_empty_page_gives_empty_markdown() {
        assert_eq!(html_to_markdown("<html><body><script>x()</script></body></html>").text, "");
        assert_eq!(html_to_text("<div>  </div>").text, "");
    }

    #[test]
    fn charsets_come_from_the_header_then_the_page_then_utf8() {
        let latin1 = b"caf\xe9";
        let decoded = decode(latin1, Some("text/plain; charset=ISO-8859-1"), false);
        assert_eq!((decoded.text.as_str(), decoded.replaced), ("café", false));
        let page = b"<meta charset=\"windows-1252\"><p>caf\xe9</p>";
        let decoded = decode(page, Some("text/html"), true);
        assert_eq!(decoded.encoding, "windows-1252");
        assert!(decoded.text.contains("café"));
        let decoded = decode(b"ok \xff\xfe bad", Some("text/plain"), false);
        assert!(decoded.replaced);
        assert_eq!(decoded.text, "ok \u{fffd}\u{fffd} bad");
        let decoded = decode("naïve".as_bytes(), None, false);
        assert_eq!(
            (decoded.text.as_str(), decoded.encoding, decoded.replaced),
            ("naïve", "UTF-8", false)
        );
    }

    #[test]
    fn oversized_input_is_cut_before_conversion_and_said() {
        let html = "<p>x</p>".repeat(MAX_CONVERT_BYTES / 8 + 10);
        let converted = html_to_text(&html);
        assert!(
            converted.notes[0].starts_with(&format!("only the first {MAX_CONVERT_BYTES} bytes"))
        );
    }
}
