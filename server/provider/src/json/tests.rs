//! Tests of the JSON writer: strings come out as `serde_json` writes them.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use proptest::prelude::*;

use super::put_str;

proptest! {
    /// The fast string writer is `serde_json`'s, byte for byte: quotes, backslashes, every
    /// control character, multi-byte characters, at every offset within a block.
    #[test]
    fn strings_are_written_exactly_as_serde_json_writes_them(
        pieces in proptest::collection::vec(
            prop_oneof![
                "[a-z ]{0,20}",
                "[\"\\\\/]{1,3}",
                proptest::char::range('\u{0}', '\u{1f}').prop_map(String::from),
                Just("\u{7f}\u{80}é€😀\u{2028}".to_owned()),
                any::<String>(),
            ],
            0..12,
        )
    ) {
        let text: String = pieces.concat();
        let mut ours = Vec::new();
        put_str(&mut ours, &text);
        prop_assert_eq!(ours, serde_json::to_vec(&text).unwrap());
    }
}

/// Every ASCII byte at every offset of a sixteen-byte block and of its two words, and in the
/// tail after the last whole block, among bytes that need no escape and beside one that does:
/// the scan flags exactly the bytes `serde_json` escapes, and each is written in its form.
#[test]
fn every_ascii_byte_at_every_offset_is_written_as_serde_json_writes_it() {
    for byte in 0u8..0x80 {
        for offset in 0..40 {
            for neighbour in ["a", "\"", "\n", "é"] {
                let mut text = "x".repeat(offset);
                text.push(char::from(byte));
                text.push_str(neighbour);
                text.push_str("yyyyyyyyy");
                let mut ours = Vec::new();
                put_str(&mut ours, &text);
                assert_eq!(ours, serde_json::to_vec(&text).unwrap(), "{text:?}");
            }
        }
    }
}

/// Blocks made only of bytes written as six (`\u00xx`), two (`\n`) or mixed: the staging
/// buffer holds a block's longest form, whole blocks and the tail alike.
#[test]
fn blocks_of_the_longest_forms_are_written_as_serde_json_writes_them() {
    for len in 0..50 {
        for text in
            ["\u{1}".repeat(len), "\n".repeat(len), "\u{1f}\"".repeat(len), "é\u{0}".repeat(len)]
        {
            let mut ours = Vec::new();
            put_str(&mut ours, &text);
            assert_eq!(ours, serde_json::to_vec(&text).unwrap(), "{text:?}");
        }
    }
}
