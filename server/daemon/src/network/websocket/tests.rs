//! One WebSocket message, one line: line breaks between tokens become spaces, and a raw line
//! break inside a string keeps the request invalid.

#![allow(clippy::expect_used)]

use dsh_protocol::jsonrpc::{Id, Request, raw};
use serde_json::{Value, json};

use super::one_line;

fn line(text: &str) -> String {
    let mut bytes = text.as_bytes().to_vec();
    one_line(&mut bytes);
    String::from_utf8(bytes).expect("still UTF-8")
}

#[test]
fn a_message_written_over_several_lines_is_the_same_request_on_one() {
    let params = json!({"text": "a \"quoted\" word\nand an escaped break \\ at the end\\"});
    let request = Request::new(Id::Number(7), "session/prompt", raw(&params)).to_line();
    let request: Value = serde_json::from_str(&request).expect("a request");
    let pretty = serde_json::to_string_pretty(&request).expect("JSON");
    for text in [pretty, request.to_string()] {
        let text = text.replace('\n', "\r\n");
        let one = line(&text);
        assert!(!one.contains(['\n', '\r']), "{one}");
        assert_eq!(serde_json::from_str::<Value>(&one).expect("one line"), request);
    }
}

#[test]
fn a_raw_line_break_inside_a_string_stays_an_error() {
    for text in [
        "{\"text\":\"a\nb\"}",
        "{\"text\":\"a\rb\"}",
        // After an escaped quote the string goes on.
        "{\"text\":\"q\\\"\nb\"}",
        // An escaped backslash ends the escape: the quote after it ends the string, the break
        // after that is between tokens... and the one inside the next string is not.
        "{\"a\":\"x\\\\\",\n\"b\":\"c\nd\"}",
    ] {
        assert!(serde_json::from_str::<Value>(text).is_err(), "{text:?} parses as it is");
        let one = line(text);
        assert!(!one.contains(['\n', '\r']), "{one:?}");
        assert!(serde_json::from_str::<Value>(&one).is_err(), "{text:?} became {one:?}");
    }
}
