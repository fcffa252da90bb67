//! Images the model sees: the reference a log holds ([`ImageRef`]), the bytes a request is
//! written with ([`ImageData`]), and what an image is ([`sniff`]).
//!
//! A log never holds an image's bytes. A `user/message` (or a tool result) names each image by
//! the SHA-256 of its bytes, its size and its media type; the bytes are in the workspace's
//! object store (`docs/log.md`, "Images"). The fold stays pure: whoever builds or rebuilds a
//! request loads the objects its messages name first and hands them in as an [`ImageData`];
//! the serializers read them from there. A request whose images are not all present is never
//! sent ([`GenerateRequest::missing_image`](crate::GenerateRequest::missing_image)).

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::message::Message;

/// An image a message carries: what the log holds instead of its bytes.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema, ts_rs::TS), ts(optional_fields))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ImageRef {
    /// SHA-256 (lowercase hex) of the image's bytes: its name in the object store.
    pub sha256: String,
    /// Its size in bytes.
    pub size: u64,
    /// Its media type, from its magic bytes: `image/png`, `image/jpeg`, `image/gif` or
    /// `image/webp`.
    pub media_type: String,
    /// The name it was given (a file name), for people; not model-visible.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// The image formats a model can be given, by their magic bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ImageFormat {
    /// PNG.
    Png,
    /// JPEG.
    Jpeg,
    /// GIF (87a or 89a).
    Gif,
    /// WebP (RIFF container).
    Webp,
}

impl ImageFormat {
    /// Its media type.
    pub fn media_type(self) -> &'static str {
        match self {
            ImageFormat::Png => "image/png",
            ImageFormat::Jpeg => "image/jpeg",
            ImageFormat::Gif => "image/gif",
            ImageFormat::Webp => "image/webp",
        }
    }

    /// The format of a media type this build sends, if it is one.
    pub fn of_media_type(media_type: &str) -> Option<ImageFormat> {
        [ImageFormat::Png, ImageFormat::Jpeg, ImageFormat::Gif, ImageFormat::Webp]
            .into_iter()
            .find(|format| format.media_type() == media_type)
    }
}

/// The media types models are given, as a sentence's list.
pub const IMAGE_MEDIA_TYPES: &str = "image/png, image/jpeg, image/gif, image/webp";

/// The largest image taken (bytes before encoding): 3 MB, below every provider's own limit
/// (Anthropic's Messages API takes 5 MB an image, OpenAI's 20 MB) and small enough that its
/// base64 fits in one API request line (the daemon reads lines of at most 4 MiB).
pub const MAX_IMAGE_BYTES: u64 = 3_000_000;

/// Why bytes are not an image a model can be given.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ImageError {
    /// Empty, or no known image signature.
    #[error(
        "{name} is not an image a model reads (its first bytes are no PNG, JPEG, GIF or WebP \
         signature; the name is not looked at)"
    )]
    NotAnImage {
        /// What was given (a file name, or `attachment N`).
        name: String,
    },
    /// Over [`MAX_IMAGE_BYTES`].
    #[error("{name} is {size} bytes, over the limit of {limit} bytes for an image")]
    TooLarge {
        /// What was given.
        name: String,
        /// Its size.
        size: u64,
        /// The limit.
        limit: u64,
    },
}

/// The format of `bytes`, by their magic bytes alone (never a name).
pub fn sniff(bytes: &[u8]) -> Option<ImageFormat> {
    if bytes.starts_with(b"\x89PNG\r\n\x1a\n") {
        Some(ImageFormat::Png)
    } else if bytes.starts_with(&[0xff, 0xd8, 0xff]) {
        Some(ImageFormat::Jpeg)
    } else if bytes.starts_with(b"GIF87a") || bytes.starts_with(b"GIF89a") {
        Some(ImageFormat::Gif)
    } else if bytes.len() >= 12 && bytes.starts_with(b"RIFF") && &bytes[8..12] == b"WEBP" {
        Some(ImageFormat::Webp)
    } else {
        None
    }
}

/// Checks that `bytes` (given as `name`) are an image a model can be given: a known format by
/// its magic bytes, at most [`MAX_IMAGE_BYTES`].
pub fn check_image(name: &str, bytes: &[u8]) -> Result<ImageFormat, ImageError> {
    let size = bytes.len() as u64;
    let format = sniff(bytes).ok_or_else(|| ImageError::NotAnImage { name: name.to_owned() })?;
    if size > MAX_IMAGE_BYTES {
        return Err(ImageError::TooLarge { name: name.to_owned(), size, limit: MAX_IMAGE_BYTES });
    }
    Ok(format)
}

/// The width and height in pixels of an image of `format`, read from its header (`None` when
/// the header is cut short or not understood). Cheap: PNG's `IHDR`, GIF's screen descriptor,
/// WebP's `VP8`/`VP8L`/`VP8X` chunk, JPEG's first start-of-frame marker.
pub fn pixel_size(format: ImageFormat, bytes: &[u8]) -> Option<(u32, u32)> {
    let u16_be = |at: usize| Some(u16::from_be_bytes(bytes.get(at..at + 2)?.try_into().ok()?));
    let u16_le = |at: usize| Some(u16::from_le_bytes(bytes.get(at..at + 2)?.try_into().ok()?));
    let u24_le = |at: usize| {
        let b = bytes.get(at..at + 3)?;
        Some(u32::from(b[0]) | u32::from(b[1]) << 8 | u32::from(b[2]) << 16)
    };
    match format {
        ImageFormat::Png => {
            if bytes.get(12..16)? != b"IHDR" {
                return None;
            }
            let width = u32::from_be_bytes(bytes.get(16..20)?.try_into().ok()?);
            let height = u32::from_be_bytes(bytes.get(20..24)?.try_into().ok()?);
            Some((width, height))
        }
        ImageFormat::Gif => Some((u32::from(u16_le(6)?), u32::from(u16_le(8)?))),
        ImageFormat::Webp => match bytes.get(12..16)? {
            b"VP8X" => Some((u24_le(24)? + 1, u24_le(27)? + 1)),
            b"VP8L" => {
                let bits = u32::from_le_bytes(bytes.get(21..25)?.try_into().ok()?);
                Some(((bits & 0x3fff) + 1, ((bits >> 14) & 0x3fff) + 1))
            }
            b"VP8 " => Some((u32::from(u16_le(26)? & 0x3fff), u32::from(u16_le(28)? & 0x3fff))),
            _ => None,
        },
        ImageFormat::Jpeg => {
            // Segments from after SOI: a marker, its length, its payload; the first SOFn
            // (not DHT C4, JPG C8 or DAC CC) holds the precision, then height and width.
            let mut at = 2;
            loop {
                while *bytes.get(at)? != 0xff {
                    at += 1;
                }
                while *bytes.get(at)? == 0xff {
                    at += 1;
                }
                let marker = *bytes.get(at)?;
                at += 1;
                if matches!(marker, 0xd0..=0xd9 | 0x01) {
                    continue;
                }
                let length = usize::from(u16_be(at)?);
                if matches!(marker, 0xc0..=0xcf) && !matches!(marker, 0xc4 | 0xc8 | 0xcc) {
                    return Some((u32::from(u16_be(at + 5)?), u32::from(u16_be(at + 3)?)));
                }
                at += length;
            }
        }
    }
}

/// The most bytes of images one request carries (counting each time one is carried): as
/// base64 a request holds a third more, and Anthropic refuses a request body over 32 MB — so a
/// request over this would be refused by the provider, not by us, and be held in memory whole.
pub const MAX_REQUEST_IMAGE_BYTES: u64 = 20_000_000;

/// How many bytes of images `messages` carry, counting each time one is carried.
pub fn image_bytes<'a>(messages: impl IntoIterator<Item = &'a Arc<Message>>) -> u64 {
    messages
        .into_iter()
        .map(|message| match &**message {
            Message::User { images, .. } | Message::Tool { images, .. } => {
                images.iter().map(|image| image.size).sum()
            }
            _ => 0,
        })
        .sum()
}

/// How many images `messages` carry, counting each time one is carried (a request writes an
/// image once per message that names it).
pub fn image_count<'a>(messages: impl IntoIterator<Item = &'a Arc<Message>>) -> usize {
    messages
        .into_iter()
        .map(|message| match &**message {
            Message::User { images, .. } | Message::Tool { images, .. } => images.len(),
            _ => 0,
        })
        .sum()
}

/// The bytes of the images a request carries, by SHA-256: loaded from the object store before
/// the request is built (or rebuilt), read by the serializers. Shared: cloning is cheap.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ImageData(Arc<BTreeMap<String, Arc<[u8]>>>);

impl ImageData {
    /// The bytes named `sha256`, when loaded.
    pub fn get(&self, sha256: &str) -> Option<&[u8]> {
        self.0.get(sha256).map(|bytes| &bytes[..])
    }

    /// How many images it holds.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl FromIterator<(String, Arc<[u8]>)> for ImageData {
    fn from_iter<I: IntoIterator<Item = (String, Arc<[u8]>)>>(iter: I) -> Self {
        ImageData(Arc::new(iter.into_iter().collect()))
    }
}

/// Every image the messages carry, in order, each once (by hash).
pub fn image_refs<'a>(messages: impl IntoIterator<Item = &'a Arc<Message>>) -> Vec<&'a ImageRef> {
    let mut seen = std::collections::BTreeSet::new();
    let mut refs = Vec::new();
    for message in messages {
        if let Message::User { images, .. } | Message::Tool { images, .. } = &**message {
            for image in images {
                if seen.insert(image.sha256.as_str()) {
                    refs.push(image);
                }
            }
        }
    }
    refs
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn formats_are_told_by_their_magic_bytes_not_their_names() {
        assert_eq!(sniff(b"\x89PNG\r\n\x1a\nrest"), Some(ImageFormat::Png));
        assert_eq!(sniff(&[0xff, 0xd8, 0xff, 0xe0]), Some(ImageFormat::Jpeg));
        assert_eq!(sniff(b"GIF89a..."), Some(ImageFormat::Gif));
        assert_eq!(sniff(b"RIFF\0\0\0\0WEBPVP8 "), Some(ImageFormat::Webp));
        assert_eq!(sniff(b"RIFF\0\0\0\0WAVEfmt "), None, "another RIFF file");
        assert_eq!(sniff(b"\x89PN"), None, "cut short");
        assert_eq!(sniff(b""), None);
        let error =
            check_image("cat.png", b"<svg xmlns=\"http://www.w3.org/2000/svg\"/>").unwrap_err();
        assert_eq!(error, ImageError::NotAnImage { name: "cat.png".to_owned() });
        assert!(error.to_string().contains("cat.png"), "{error}");
        assert_eq!(ImageFormat::of_media_type("image/webp"), Some(ImageFormat::Webp));
        assert_eq!(ImageFormat::of_media_type("image/svg+xml"), None);
    }

    #[test]
    fn an_image_over_the_limit_is_refused_with_the_limit() {
        let mut big = b"\x89PNG\r\n\x1a\n".to_vec();
        big.resize(MAX_IMAGE_BYTES as usize + 1, 0);
        let error = check_image("big.png", &big).unwrap_err();
        assert_eq!(
            error,
            ImageError::TooLarge {
                name: "big.png".to_owned(),
                size: MAX_IMAGE_BYTES + 1,
                limit: MAX_IMAGE_BYTES
            }
        );
        assert!(error.to_string().contains(&MAX_IMAGE_BYTES.to_string()), "{error}");
        big.truncate(MAX_IMAGE_BYTES as usize);
        assert_eq!(check_image("big.png", &big), Ok(ImageFormat::Png));
    }

    #[test]
    fn image_refs_lists_each_image_once_and_a_request_names_the_one_it_lacks() {
        let image = |sha: &str| ImageRef {
            sha256: sha.repeat(64),
            size: 3,
            media_type: "image/png".to_owned(),
            name: None,
        };
        let messages = vec![
            Arc::new(Message::User { content: "a".into(), images: vec![image("a"), image("b")] }),
            Arc::new(Message::Tool {
                call_id: "c".into(),
                content: "x".into(),
                images: vec![image("a")],
            }),
        ];
        let refs: Vec<&str> = image_refs(&messages).iter().map(|i| &i.sha256[..1]).collect();
        assert_eq!(refs, ["a", "b"]);
        let header = crate::EpochHeader::new(
            crate::LlmCallConfig {
                model: "m".into(),
                profile: None,
                wire: None,
                max_tokens: 1,
                thinking: false,
                reasoning_effort: None,
                temperature: None,
                top_p: None,
                response_format: None,
            },
            None,
            Vec::new(),
        );
        let mut request = crate::GenerateRequest::new(header, messages);
        assert_eq!(request.missing_image().map(|i| &i.sha256[..1]), Some("a"));
        request.images = [("a".repeat(64), Arc::<[u8]>::from(&b"png"[..]))].into_iter().collect();
        assert_eq!(request.missing_image().map(|i| &i.sha256[..1]), Some("b"));
    }

    #[test]
    fn pixel_sizes_are_read_from_each_formats_header() {
        let png = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\x01\x40\0\0\0\xf0\x08\x06\0\0\0";
        assert_eq!(pixel_size(ImageFormat::Png, png), Some((320, 240)));
        assert_eq!(pixel_size(ImageFormat::Png, &png[..20]), None, "cut short");
        assert_eq!(pixel_size(ImageFormat::Gif, b"GIF89a\x10\x00\x20\x00"), Some((16, 32)));
        // A JPEG: SOI, an APP0 segment to skip, then SOF0 (precision 8, height 480, width 640).
        let jpeg = [
            &[0xff, 0xd8, 0xff, 0xe0, 0x00, 0x04, 0xaa, 0xbb][..],
            &[0xff, 0xc0, 0x00, 0x11, 0x08, 0x01, 0xe0, 0x02, 0x80, 0x03],
        ]
        .concat();
        assert_eq!(pixel_size(ImageFormat::Jpeg, &jpeg), Some((640, 480)));
        assert_eq!(pixel_size(ImageFormat::Jpeg, &jpeg[..9]), None);
        // WebP, extended: canvas width and height minus one, 24-bit little-endian.
        let mut webp = b"RIFF\0\0\0\0WEBPVP8X\x0a\0\0\0\0\0\0\0".to_vec();
        webp.extend_from_slice(&[0x3f, 0x01, 0x00, 0xef, 0x00, 0x00]);
        assert_eq!(pixel_size(ImageFormat::Webp, &webp), Some((320, 240)));
        // Lossless: 14 bits each, minus one, after the signature byte.
        let bits: u32 = 319 | (239 << 14);
        let mut lossless = b"RIFF\0\0\0\0WEBPVP8L\0\0\0\0\x2f".to_vec();
        lossless.extend_from_slice(&bits.to_le_bytes());
        assert_eq!(pixel_size(ImageFormat::Webp, &lossless), Some((320, 240)));
    }

    #[test]
    fn image_count_counts_each_time_an_image_is_carried() {
        let image = ImageRef {
            sha256: "a".repeat(64),
            size: 3,
            media_type: "image/png".to_owned(),
            name: None,
        };
        let messages = vec![
            Arc::new(Message::User { content: "a".into(), images: vec![image.clone()] }),
            Arc::new(Message::System { content: "s".into() }),
            Arc::new(Message::Tool {
                call_id: "c".into(),
                content: "x".into(),
                images: vec![image],
            }),
        ];
        assert_eq!(image_count(&messages), 2);
        assert_eq!(image_refs(&messages).len(), 1);
    }
}
