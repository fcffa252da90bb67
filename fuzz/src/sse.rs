//! `sse`: the provider's SSE decoder, chunk decoder and message assembler on arbitrary bytes
//! cut at arbitrary points.
//!
//! Input layout: the first byte's low three bits say how many cut points follow (two bytes
//! each, little-endian, taken modulo the stream's length + 1); the rest is the stream. So a
//! file starting with `0` (0x30) is a plain stream with no cuts.
//!
//! No panic; the stream fed whole, fed one byte at a time and fed in the chunks the cuts make
//! decode to the same events and the same partial state, or all fail, in which case what each
//! run returned before failing is a prefix of the byte-at-a-time events. The data events then
//! go through the chunk decoder, and its deltas through the assembler, up to `[DONE]` or the
//! first error; and the same through the Anthropic Messages decoder, up to `message_stop`.

use dsh_provider::{
    ChunkDecoder, Decoded, MessageAssembler, MessagesDecoder, SseDecoder, SseEvent,
};

/// The events of `bytes` fed in the pieces `cuts` (ascending offsets) make, whether the
/// decoder failed, and whether it holds a partial event at the end.
fn decode(bytes: &[u8], cuts: &[usize]) -> (Vec<SseEvent>, bool, bool) {
    let mut decoder = SseDecoder::new();
    let mut events = Vec::new();
    let mut start = 0;
    for &end in cuts.iter().chain([bytes.len()].iter()) {
        match decoder.feed(&bytes[start..end]) {
            Ok(more) => events.extend(more),
            Err(_) => return (events, true, false),
        }
        start = end;
    }
    let partial = decoder.has_partial();
    (events, false, partial)
}

/// Checks one input.
pub fn check(data: &[u8]) {
    let Some((&head, rest)) = data.split_first() else { return };
    let count = usize::from(head & 7).min(rest.len() / 2);
    let (cut_bytes, stream) = rest.split_at(count * 2);
    let mut cuts: Vec<usize> = cut_bytes
        .chunks_exact(2)
        .map(|pair| usize::from(u16::from_le_bytes([pair[0], pair[1]])) % (stream.len() + 1))
        .collect();
    cuts.sort_unstable();

    let whole = decode(stream, &[]);
    let bytewise = decode(stream, &(1..stream.len()).collect::<Vec<_>>());
    let chunked = decode(stream, &cuts);
    assert_eq!(whole.1, bytewise.1, "failing depends on the chunking");
    assert_eq!(chunked.1, bytewise.1, "failing depends on the chunking");
    if bytewise.1 {
        assert!(bytewise.0.starts_with(&whole.0) && bytewise.0.starts_with(&chunked.0));
    } else {
        assert_eq!(whole, bytewise, "one feed and byte-at-a-time feeds decode differently");
        assert_eq!(chunked, bytewise, "the cuts {cuts:?} change the decoding");
    }

    let mut chunks = ChunkDecoder::new();
    let mut assembler = MessageAssembler::new();
    for event in &bytewise.0 {
        let SseEvent::Data(data) = event else { continue };
        match chunks.decode(data) {
            Ok(Decoded::Deltas(deltas)) => deltas.iter().for_each(|delta| assembler.push(delta)),
            Ok(Decoded::Done(_finish)) => break,
            Ok(Decoded::Ping) => {}
            Err(_) => break,
        }
    }
    let _message = assembler.finish();

    let mut messages = MessagesDecoder::new();
    let mut assembler = MessageAssembler::new();
    for event in &bytewise.0 {
        let SseEvent::Data(data) = event else { continue };
        match messages.decode(data) {
            Ok(Decoded::Deltas(deltas)) => deltas.iter().for_each(|delta| assembler.push(delta)),
            Ok(Decoded::Ping) => {}
            Ok(Decoded::Done(_)) | Err(_) => break,
        }
    }
    let _message = assembler.finish();
}
