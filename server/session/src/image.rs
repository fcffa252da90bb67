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
}
