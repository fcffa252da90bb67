//! The images seam: the loop asks it for the bytes of the images a request's messages name
//! (by SHA-256), before it builds the request, and stores through it the image a `read_file`
//! result carries; the serializers write them from the [`ImageData`] it assembles. The daemon implements it over the workspace's object store
//! (`dsh-checkpoint`'s, shared with the checkpoints); the loop knows nothing of how. The log
//! holds only the references, so the fold that builds a request stays pure.

use std::collections::HashMap;
use std::sync::Arc;

use dsh_session::{ImageData, ImageRef, Message, image_refs};

use crate::approval::BoxFuture;

/// Reads images from where they are stored.
pub trait ImageObjects: Send + Sync {
    /// The bytes of `image`, verified against its hash; `Err` says why not (missing, corrupt).
    fn load(&self, image: &ImageRef) -> BoxFuture<'static, Result<Arc<[u8]>, String>>;

    /// Stores `bytes` (an image already checked) once, durably, where [`ImageObjects::load`]
    /// reads: their SHA-256 (lowercase hex). Storing bytes already there writes nothing.
    fn store(&self, bytes: Arc<[u8]>) -> BoxFuture<'static, Result<String, String>>;
}

/// The bytes of every image `messages` name, each read once across the loop's steps: the
/// previous request's images are kept, the others read through `objects`. `Err` names the
/// first image that could not be read, and why.
pub(crate) async fn load_images(
    objects: Option<&Arc<dyn ImageObjects>>,
    cache: &mut HashMap<String, Arc<[u8]>>,
    messages: &[Arc<Message>],
) -> Result<ImageData, (ImageRef, String)> {
    let refs = image_refs(messages);
    if refs.is_empty() {
        cache.clear();
        return Ok(ImageData::default());
    }
    let mut loaded = HashMap::with_capacity(refs.len());
    for image in refs {
        let bytes = match cache.get(&image.sha256) {
            Some(bytes) => Arc::clone(bytes),
            None => match objects {
                Some(objects) => objects.load(image).await.map_err(|why| (image.clone(), why))?,
                None => {
                    return Err((image.clone(), "this loop has no object store".to_owned()));
                }
            },
        };
        loaded.insert(image.sha256.clone(), bytes);
    }
    let data = loaded.iter().map(|(sha, bytes)| (sha.clone(), Arc::clone(bytes))).collect();
    *cache = loaded;
    Ok(data)
}
