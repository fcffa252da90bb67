//! Unit tests of the approx-v1 tokenizer.

use proptest::prelude::*;

use super::*;

const ENGLISH: &str = "The quick brown fox jumps over the lazy dog. Caching works on the rendered \
token sequence, not on the raw JSON body, so key order and whitespace do not matter while the \
message contents do. Keep the system prompt and the tools byte-stable.";

#[test]
fn pieces_concatenate_back_to_the_text() {
    for text in [ENGLISH, "你好，世界", "a  b\t\n\nc", "x = 12345 + 6;", "😀😀 emoji", ""]
    {
        assert_eq!(pieces(text).concat(), text);
    }
}

#[test]
fn english_density_is_about_four_characters_per_token() {
    let density = ENGLISH.chars().count() as f64 / count(ENGLISH) as f64;
    assert!((3.0..=4.5).contains(&density), "density {density}");
}

#[test]
fn cjk_text_is_one_token_per_character() {
    let text = "缓存命中的前缀必须完全相同";
    assert_eq!(count(text), text.chars().count() as u64);
}

#[test]
fn pre_tokens_follow_the_fixed_split_rule() {
    assert_eq!(pre_tokens("hello  world 1234!"), ["hello", " ", " world", " ", "123", "4", "!"]);
    assert_eq!(pieces(" hello"), [" hel", "lo"]);
    assert_eq!(pieces("😀"), ["😀"]);
}

#[test]
fn markers_are_single_tokens_distinct_from_text() {
    let tokens = tokenize(&[
        Segment::Marker(Marker::Bos),
        Segment::Text("⟦BOS⟧".to_owned()),
        Segment::Marker(Marker::Eos),
    ]);
    assert_eq!(tokens[0], Token(1));
    assert_eq!(tokens.last(), Some(&Token(7)));
    assert!(tokens[1..tokens.len() - 1].iter().all(|token| token.0 >= 1 << 63));
}

fn segment() -> impl Strategy<Value = Segment> {
    prop_oneof![
        Just(Segment::Marker(Marker::User)),
        Just(Segment::Marker(Marker::Eos)),
        "[a-z 你好,.!\\n]{0,12}".prop_map(Segment::Text),
    ]
}

proptest! {
    #[test]
    fn tokens_of_a_segment_prefix_are_a_prefix_of_the_extension(
        head in proptest::collection::vec(segment(), 0..8),
        tail in proptest::collection::vec(segment(), 0..8),
    ) {
        let short = tokenize(&head);
        let mut extended = head.clone();
        extended.extend(tail);
        let long = tokenize(&extended);
        prop_assert!(long.starts_with(&short));
    }
}
