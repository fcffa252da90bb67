//! Tests of the SSE decoder: tricky framings, and a property that chunking never matters.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use proptest::prelude::*;

use super::{SseDecoder, SseEvent};

fn decode_whole(bytes: &[u8]) -> Vec<SseEvent> {
    SseDecoder::new().feed(bytes).unwrap()
}

fn decode_chunked(bytes: &[u8], cuts: &[usize]) -> Vec<SseEvent> {
    let mut decoder = SseDecoder::new();
    let mut events = Vec::new();
    let mut start = 0;
    for &cut in cuts {
        events.extend(decoder.feed(&bytes[start..cut]).unwrap());
        start = cut;
    }
    events.extend(decoder.feed(&bytes[start..]).unwrap());
    events
}

fn data(text: &str) -> SseEvent {
    SseEvent::Data(text.to_owned())
}

#[test]
fn data_events_are_dispatched_at_blank_lines() {
    let events = decode_whole(b"data: {\"a\":1}\n\ndata: [DONE]\n\n");
    assert_eq!(events, vec![data("{\"a\":1}"), data("[DONE]")]);
}

#[test]
fn crlf_and_lone_cr_line_endings_decode_like_lf() {
    let expected = vec![data("one"), data("two")];
    assert_eq!(decode_whole(b"data: one\r\n\r\ndata: two\r\n\r\n"), expected);
    assert_eq!(decode_whole(b"data: one\r\rdata: two\r\r"), expected);
}

#[test]
fn a_crlf_split_between_feeds_is_one_line_ending() {
    let events = decode_chunked(b"data: one\r\n\r\ndata: two\r\n\r\n", &[10, 11, 12]);
    assert_eq!(events, vec![data("one"), data("two")]);
}

#[test]
fn comments_are_reported_separately_and_do_not_end_events() {
    let events = decode_whole(b": keep-alive\n\ndata: a\n: mid\ndata: b\n\n");
    assert_eq!(
        events,
        vec![
            SseEvent::Comment(" keep-alive".to_owned()),
            SseEvent::Comment(" mid".to_owned()),
            data("a\nb"),
        ]
    );
}

#[test]
fn multi_line_data_is_joined_with_newlines() {
    assert_eq!(decode_whole(b"data: a\ndata:b\ndata\ndata:  c\n\n"), vec![data("a\nb\n\n c")]);
}

#[test]
fn a_utf8_character_split_across_feeds_survives() {
    let bytes = "data: 你好🙂\n\n".as_bytes();
    for cut in 1..bytes.len() {
        assert_eq!(decode_chunked(bytes, &[cut]), vec![data("你好🙂")], "cut at {cut}");
    }
}

#[test]
fn other_fields_and_empty_events_are_ignored() {
    let events = decode_whole(b"event: x\nid: 3\nretry: 10\n\n\n\ndata: a\n\n");
    assert_eq!(events, vec![data("a")]);
}

#[test]
fn an_unterminated_event_stays_partial() {
    let mut decoder = SseDecoder::new();
    assert_eq!(decoder.feed(b"data: a\n").unwrap(), vec![]);
    assert!(decoder.has_partial());
    assert_eq!(decoder.feed(b"\n").unwrap(), vec![data("a")]);
    assert!(!decoder.has_partial());
}

#[test]
fn a_leading_byte_order_mark_is_skipped() {
    assert_eq!(decode_whole(b"\xEF\xBB\xBFdata: a\n\n"), vec![data("a")]);
}

#[test]
fn invalid_utf8_is_a_decode_error() {
    let error = SseDecoder::new().feed(b"data: \xFF\n\n").unwrap_err();
    assert!(matches!(error, crate::ProviderError::Decode(_)), "{error:?}");
}

/// One event of a generated stream: data lines or a comment.
#[derive(Clone, Debug)]
enum Item {
    Data(Vec<String>),
    Comment(String),
}

fn line_text() -> impl Strategy<Value = String> {
    // No line terminators inside a line; everything else, including multi-byte characters.
    proptest::collection::vec(
        prop_oneof![
            Just('a'),
            Just(' '),
            Just(':'),
            Just('{'),
            Just('"'),
            Just('é'),
            Just('你'),
            Just('🙂')
        ],
        0..12,
    )
    .prop_map(|chars| chars.into_iter().collect())
}

fn item() -> impl Strategy<Value = Item> {
    prop_oneof![
        proptest::collection::vec(line_text(), 1..4).prop_map(Item::Data),
        line_text().prop_map(Item::Comment),
    ]
}

fn render(items: &[Item], ending: &str) -> (Vec<u8>, Vec<SseEvent>) {
    let mut bytes = String::new();
    let mut expected = Vec::new();
    for item in items {
        match item {
            Item::Data(lines) => {
                for line in lines {
                    bytes.push_str(&format!("data: {line}{ending}"));
                }
                bytes.push_str(ending);
                expected.push(SseEvent::Data(lines.join("\n")));
            }
            Item::Comment(text) => {
                bytes.push_str(&format!(":{text}{ending}"));
                expected.push(SseEvent::Comment(text.clone()));
            }
        }
    }
    (bytes.into_bytes(), expected)
}

proptest! {
    #[test]
    fn any_chunking_of_a_valid_stream_decodes_to_the_same_events(
        items in proptest::collection::vec(item(), 0..8),
        ending in prop_oneof![Just("\n"), Just("\r\n"), Just("\r")],
        raw_cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..10),
    ) {
        let (bytes, expected) = render(&items, ending);
        let mut cuts: Vec<usize> = raw_cuts.iter().map(|index| index.index(bytes.len() + 1)).collect();
        cuts.sort_unstable();
        prop_assert_eq!(&decode_whole(&bytes), &expected);
        prop_assert_eq!(decode_chunked(&bytes, &cuts), expected);
    }
}
