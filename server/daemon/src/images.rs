//! Images given to the model: taken in with a prompt (`session/prompt`'s `attachments`),
//! checked, stored once in the workspace's object store (the checkpoints' store, shared), and
//! named by hash in the `user/message`; read back before a request is built or rebuilt.
//!
//! - Intake ([`Daemon::take_attachments`]): the session's model must read images (its
//!   `images` setting), each attachment must be base64, an image by its magic bytes and at
//!   most [`MAX_IMAGE_BYTES`]; all of it is checked before anything is stored or logged.
//! - The loop reads images through [`Objects`] (the agent's `ImageObjects` seam), and stores
//!   there the image a `read_file` result carries.
//! - Views ("what the model saw", the audit) load every image a log names before they rebuild
//!   its requests ([`load_images`]): the fold stays pure, and a missing or corrupt object is
//!   an error naming the session, the step and the hash — never an image silently left out.

use std::path::Path;
use std::sync::Arc;

use base64::Engine as _;
use dsh_agent::approval::BoxFuture;
use dsh_checkpoint::{Hash, ObjectStore};
use dsh_protocol::Attachment;
use dsh_session::{
    EventData, ImageData, ImageRef, LlmCallConfig, MAX_IMAGE_BYTES, MAX_REQUEST_IMAGE_BYTES,
    check_image, image_bytes, image_count,
};

use crate::checkpoints::WorkspaceCheckpoints;
use crate::daemon::Daemon;
use crate::error::{ApiError, ApiResult};
use crate::live::LiveSession;
use crate::settings::LEGACY_PROFILE;

/// The images an event names (a prompt's, a tool result's).
pub(crate) fn referenced(data: &EventData) -> impl Iterator<Item = &ImageRef> {
    let images: &[ImageRef] = match data {
        EventData::UserMessage(message) => &message.images,
        EventData::ToolResult(result) => &result.images,
        _ => &[],
    };
    images.iter()
}

/// Reads one image from the store in `dir`, verified against its hash; `Err` says why not.
/// Never creates the store (a view must not write).
pub(crate) fn read_image(dir: &Path, image: &ImageRef) -> Result<Vec<u8>, String> {
    let hash: Hash = image.sha256.parse().map_err(|_| "its name is not a SHA-256".to_owned())?;
    if !dir.is_dir() {
        return Err("the workspace has no object store".to_owned());
    }
    let objects = ObjectStore::open(dir).map_err(|error| error.to_string())?;
    objects.get(&hash).map_err(|error| match error {
        dsh_checkpoint::ObjectError::Missing(_) => "missing from the object store".to_owned(),
        error => error.to_string(),
    })
}

/// Loads every image `images` names from the store in `dir` (blocking): the bytes found, and
/// each image that could not be read with why.
pub(crate) fn load_images<'a>(
    dir: Option<&Path>,
    images: impl IntoIterator<Item = &'a ImageRef>,
) -> (ImageData, Vec<(ImageRef, String)>) {
    let mut found = Vec::new();
    let mut failed: Vec<(ImageRef, String)> = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for image in images {
        if !seen.insert(image.sha256.clone()) {
            continue;
        }
        let read = match dir {
            Some(dir) => read_image(dir, image),
            None => Err("the log is not in a state directory: its object store is unknown".into()),
        };
        match read {
            Ok(bytes) => found.push((image.sha256.clone(), Arc::<[u8]>::from(bytes))),
            Err(why) => failed.push((image.clone(), why)),
        }
    }
    (found.into_iter().collect(), failed)
}

/// The loop's images seam over a workspace's object store.
pub(crate) struct Objects(pub(crate) Arc<WorkspaceCheckpoints>);

impl dsh_agent::ImageObjects for Objects {
    fn load(&self, image: &ImageRef) -> BoxFuture<'static, Result<Arc<[u8]>, String>> {
        let dir = self.0.store.objects_dir();
        let image = image.clone();
        Box::pin(async move {
            tokio::task::spawn_blocking(move || read_image(&dir, &image).map(Arc::from))
                .await
                .map_err(|error| format!("reading the image: {error}"))?
        })
    }

    fn store(&self, bytes: Arc<[u8]>) -> BoxFuture<'static, Result<String, String>> {
        let workspace = Arc::clone(&self.0);
        Box::pin(async move {
            tokio::task::spawn_blocking(move || workspace.put_image(&bytes))
                .await
                .map_err(|error| format!("storing the image: {error}"))?
                .map(|hash| hash.to_string())
        })
    }
}

impl Daemon {
    /// Checks and stores the images given with a prompt of `live` on `call`: refused, before
    /// anything is stored or logged, when the model does not read images or an attachment is
    /// no image a model reads. The references its `user/message` names, in order.
    pub(crate) async fn take_attachments(
        &self,
        live: &LiveSession,
        call: &LlmCallConfig,
        attachments: Vec<Attachment>,
    ) -> ApiResult<Vec<ImageRef>> {
        if attachments.is_empty() {
            return Ok(Vec::new());
        }
        let root = live.toolbox.workspace().root().to_path_buf();
        let config = self.config_for(&root)?;
        let profile_name = call.profile.as_deref().unwrap_or(LEGACY_PROFILE);
        let profile = config.profile(profile_name).ok();
        let reads_images = profile.as_ref().is_some_and(|profile| profile.images(&call.model));
        if !reads_images {
            return Err(ApiError::invalid_params(format!(
                "model {} of profile {profile_name} does not read images (set `images = true` \
                 for it in your configuration when it does, docs/config.md); nothing was logged",
                call.model
            )));
        }
        let mut checked = Vec::with_capacity(attachments.len());
        for (index, attachment) in attachments.into_iter().enumerate() {
            let shown =
                attachment.name.clone().unwrap_or_else(|| format!("attachment {}", index + 1));
            // Base64 of the limit is a third longer: a longer text is refused before decoding.
            let encoded_limit = MAX_IMAGE_BYTES.div_ceil(3) * 4;
            if attachment.data.len() as u64 > encoded_limit {
                return Err(ApiError::invalid_params(format!(
                    "{shown} is over the limit of {MAX_IMAGE_BYTES} bytes for an image"
                )));
            }
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(attachment.data.as_bytes())
                .map_err(|error| {
                    ApiError::invalid_params(format!("{shown}: its data is not base64 ({error})"))
                })?;
            let format = check_image(&shown, &bytes)
                .map_err(|error| ApiError::invalid_params(error.to_string()))?;
            checked.push((attachment.name, format, bytes));
        }
        // What the next request would carry: the conversation's images and these. More than the
        // model takes, or than one request carries, is refused here, before anything is logged
        // (else the prompt would be logged and its first step fail).
        let max_images =
            profile.as_ref().map_or(0, |profile| profile.max_images(&call.model)) as usize;
        let (carried, bytes) = live
            .handle
            .query(|s| {
                let messages = s.messages();
                (image_count(&messages), image_bytes(&messages))
            })
            .await
            .map_err(ApiError::from_agent)?;
        let adding: u64 = checked.iter().map(|(_, _, bytes)| bytes.len() as u64).sum();
        if carried + checked.len() > max_images {
            return Err(ApiError::invalid_params(format!(
                "the conversation carries {carried} images and the prompt {} more, over the {max_images} \
                 one request to model {} takes (its `max_images`): compact the session first; \
                 nothing was logged",
                checked.len(),
                call.model
            )));
        }
        if bytes + adding > MAX_REQUEST_IMAGE_BYTES {
            return Err(ApiError::invalid_params(format!(
                "the conversation carries {bytes} bytes of images and the prompt {adding} more, \
                 over the {MAX_REQUEST_IMAGE_BYTES} bytes of images one request carries: compact \
                 the session first; nothing was logged"
            )));
        }
        let workspace = self.checkpoints.workspace(&root);
        let stored = tokio::task::spawn_blocking(move || {
            checked
                .into_iter()
                .map(|(name, format, bytes)| {
                    let hash = workspace.put_image(&bytes)?;
                    Ok(ImageRef {
                        sha256: hash.to_string(),
                        size: bytes.len() as u64,
                        media_type: format.media_type().to_owned(),
                        name,
                    })
                })
                .collect::<Result<Vec<ImageRef>, String>>()
        })
        .await
        .map_err(|error| ApiError::store(format!("storing images: {error}")))?;
        stored.map_err(ApiError::store)
    }
}

/// `session/object`: the bytes of an object the session's log names (an image of a prompt or
/// a tool result), for a front to show. Only those: any other hash, even one in the store, is
/// refused (`objectNotFound`) — the store holds every session's files and images of the
/// workspace, and a client asking about one session sees only what that session names.
pub(crate) async fn session_object(
    daemon: std::sync::Arc<Daemon>,
    params: dsh_protocol::SessionObjectParams,
) -> ApiResult<dsh_protocol::SessionObjectResult> {
    use dsh_protocol::code;
    let sha256 = params.sha256;
    let wanted = sha256.clone();
    let named = crate::handlers::with_events(&daemon, &params.session_id, move |events| {
        events
            .iter()
            .flat_map(|event| referenced(&event.data))
            .find(|image| image.sha256 == wanted)
            .cloned()
    })
    .await?;
    let Some(image) = named else {
        return Err(ApiError::new(
            code::OBJECT_NOT_FOUND,
            format!("session {} names no object {sha256}", params.session_id),
        ));
    };
    if image.size > MAX_IMAGE_BYTES {
        return Err(ApiError::new(
            code::OBJECT_NOT_FOUND,
            format!("object {sha256} is over the limit of {MAX_IMAGE_BYTES} bytes"),
        ));
    }
    let dir = dsh_store::objects_dir_of_log(&daemon.session_path(&params.session_id)?);
    let session = params.session_id;
    crate::handlers::blocking(move || {
        let read = match dir {
            Some(dir) => read_image(&dir, &image),
            None => Err("the log is not in a state directory: its object store is unknown".into()),
        };
        let bytes = read.map_err(|why| {
            ApiError::new(
                code::OBJECT_NOT_FOUND,
                format!("session {session}: object {sha256} cannot be read: {why}"),
            )
        })?;
        Ok(dsh_protocol::SessionObjectResult {
            media_type: image.media_type,
            size: bytes.len() as u64,
            data: base64::engine::general_purpose::STANDARD.encode(&bytes),
        })
    })
    .await
}
