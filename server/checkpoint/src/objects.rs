//! [`ObjectStore`]: the content-addressed store of one workspace's checkpoints.
//!
//! Layout: `<dir>/<first two hex digits>/<64 hex digits>`, directories 0700, files 0600. An
//! object file is one format byte then the payload: `0` the bytes as they are, `1` the bytes
//! compressed with zstd (chosen only when it saves at least an eighth). The name is the SHA-256
//! of the *uncompressed* bytes, so equal contents are stored once, whatever their compression;
//! [`ObjectStore::get`] verifies it. Writes go to a temporary file in the same directory, are
//! `fsync`ed, renamed into place, and the directory is `fsync`ed: an object either exists whole
//! or not at all, and putting an object that exists writes nothing.

use std::collections::{BTreeSet, HashSet};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use crate::Hash;
use crate::error::ObjectError;

const RAW: u8 = 0;
const ZSTD: u8 = 1;
/// zstd's level: 3 (its default) compresses source text 3-5x at hundreds of MB/s.
const ZSTD_LEVEL: i32 = 3;
/// Below this size compression cannot save a block of disk; objects are stored as they are.
const COMPRESS_MIN: usize = 512;
/// A temporary file older than this is a crashed writer's leftover, swept by collection.
const STALE_TEMP: Duration = Duration::from_secs(3600);

/// The content-addressed object store of one workspace (see the module docs for the layout).
#[derive(Debug)]
pub struct ObjectStore {
    dir: PathBuf,
    /// Fan-out directories with renames not yet made durable (see [`ObjectStore::sync`]).
    unsynced: Mutex<BTreeSet<PathBuf>>,
    /// Tests: object writes fail with "no space left on device" while set.
    #[cfg(test)]
    pub(crate) disk_full: std::sync::atomic::AtomicBool,
}

/// What [`ObjectStore::sweep`] removed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Swept {
    /// Objects removed.
    pub objects_removed: u64,
    /// Bytes on disk they took.
    pub freed_bytes: u64,
}

static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

fn io_error<'path>(
    action: &'static str,
    path: &'path Path,
) -> impl FnOnce(io::Error) -> ObjectError + 'path {
    move |cause| ObjectError::Io { action, path: path.to_path_buf(), cause }
}

impl ObjectStore {
    /// Opens the store in `dir`, creating it (0700) if needed.
    pub fn open(dir: &Path) -> Result<ObjectStore, ObjectError> {
        create_private_dir(dir).map_err(io_error("creating", dir))?;
        Ok(ObjectStore {
            dir: dir.to_path_buf(),
            unsynced: Mutex::new(BTreeSet::new()),
            #[cfg(test)]
            disk_full: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// The store's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn fan_out(&self, hash: &Hash) -> PathBuf {
        let hex = hash.to_string();
        self.dir.join(&hex[..2])
    }

    fn path(&self, hash: &Hash) -> PathBuf {
        let hex = hash.to_string();
        self.dir.join(&hex[..2]).join(&hex)
    }

    /// Whether the object is in the store.
    pub fn contains(&self, hash: &Hash) -> bool {
        fs::symlink_metadata(self.path(hash)).is_ok()
    }

    /// Stores `bytes` durably and returns their hash. Writes nothing if the object exists.
    pub fn put(&self, bytes: &[u8]) -> Result<Hash, ObjectError> {
        let hash = self.put_unsynced(bytes)?;
        self.sync()?;
        Ok(hash)
    }

    /// Stores `bytes` (the file itself `fsync`ed) but leaves the rename's durability to
    /// [`ObjectStore::sync`], so a checkpoint writing many objects syncs each directory once.
    pub(crate) fn put_unsynced(&self, bytes: &[u8]) -> Result<Hash, ObjectError> {
        let hash = Hash::of(bytes);
        let path = self.path(&hash);
        if fs::symlink_metadata(&path).is_ok() {
            return Ok(hash);
        }
        let fan_out = self.fan_out(&hash);
        if fs::symlink_metadata(&fan_out).is_err() {
            create_private_dir(&fan_out).map_err(io_error("creating", &fan_out))?;
            self.mark_unsynced(self.dir.clone());
        }
        #[cfg(test)]
        if self.disk_full.load(Ordering::Relaxed) {
            return Err(ObjectError::Io {
                action: "writing",
                path: fan_out,
                cause: io::Error::from(io::ErrorKind::StorageFull),
            });
        }
        let encoded = encode(bytes);
        let temp = write_temp(&fan_out, &encoded)?;
        if let Err(cause) = fs::rename(&temp, &path) {
            let _ = fs::remove_file(&temp);
            return Err(ObjectError::Io { action: "renaming into", path, cause });
        }
        self.mark_unsynced(fan_out);
        Ok(hash)
    }

    fn mark_unsynced(&self, dir: PathBuf) {
        match self.unsynced.lock() {
            Ok(mut unsynced) => {
                unsynced.insert(dir);
            }
            Err(poisoned) => {
                poisoned.into_inner().insert(dir);
            }
        }
    }

    /// Makes every rename since the last sync durable (`fsync` of each directory touched).
    pub(crate) fn sync(&self) -> Result<(), ObjectError> {
        let dirs = match self.unsynced.lock() {
            Ok(mut unsynced) => std::mem::take(&mut *unsynced),
            Err(poisoned) => std::mem::take(&mut *poisoned.into_inner()),
        };
        // Fan-out directories first, the store's own directory (new fan-outs) last.
        for dir in dirs.iter().rev() {
            sync_dir(dir).map_err(io_error("syncing", dir))?;
        }
        Ok(())
    }

    /// The object's uncompressed bytes, verified against its hash.
    pub fn get(&self, hash: &Hash) -> Result<Vec<u8>, ObjectError> {
        let path = self.path(hash);
        let stored = match fs::read(&path) {
            Ok(stored) => stored,
            Err(cause) if cause.kind() == io::ErrorKind::NotFound => {
                return Err(ObjectError::Missing(*hash));
            }
            Err(cause) => return Err(ObjectError::Io { action: "reading", path, cause }),
        };
        let corrupt = |reason: String| ObjectError::Corrupt { hash: *hash, reason };
        let bytes = match stored.split_first() {
            Some((&RAW, payload)) => payload.to_vec(),
            Some((&ZSTD, payload)) => {
                let mut bytes = Vec::new();
                zstd::stream::Decoder::new(payload)
                    .and_then(|mut decoder| decoder.read_to_end(&mut bytes))
                    .map_err(|error| corrupt(format!("zstd: {error}")))?;
                bytes
            }
            Some((tag, _)) => return Err(corrupt(format!("unknown format byte {tag}"))),
            None => return Err(corrupt("empty file".to_owned())),
        };
        if Hash::of(&bytes) != *hash {
            return Err(corrupt(format!("its content hashes to {}", Hash::of(&bytes))));
        }
        Ok(bytes)
    }

    /// The bytes the object takes on disk (its file's length), `None` if absent.
    pub fn size_on_disk(&self, hash: &Hash) -> Option<u64> {
        fs::symlink_metadata(self.path(hash)).ok().map(|metadata| metadata.len())
    }

    /// The store's total size on disk (the sum of its object files' lengths) and object count.
    pub fn total_size(&self) -> Result<(u64, u64), ObjectError> {
        let mut bytes = 0;
        let mut objects = 0;
        self.for_each_object(|_, _, length| {
            bytes += length;
            objects += 1;
            Ok(())
        })?;
        Ok((bytes, objects))
    }

    /// Removes every object not in `marked` (and temporary files older than an hour: a crashed
    /// writer's leftovers). The caller holds the workspace's checkpoint lock: no object is
    /// being written meanwhile.
    pub fn sweep(&self, marked: &HashSet<Hash>) -> Result<Swept, ObjectError> {
        let mut swept = Swept::default();
        let mut touched = BTreeSet::new();
        self.for_each_object(|path, hash, length| {
            let keep = hash.is_some_and(|hash| marked.contains(&hash));
            let stale_temp = hash.is_none() && is_stale(path);
            if (hash.is_some() && !keep) || stale_temp {
                fs::remove_file(path).map_err(io_error("removing", path))?;
                if hash.is_some() {
                    swept.objects_removed += 1;
                    swept.freed_bytes += length;
                }
                if let Some(parent) = path.parent() {
                    touched.insert(parent.to_path_buf());
                }
            }
            Ok(())
        })?;
        for dir in touched {
            sync_dir(&dir).map_err(io_error("syncing", &dir))?;
        }
        Ok(swept)
    }

    /// Calls `visit(path, hash, length)` for every file under the fan-out directories; `hash`
    /// is `None` for files that are not objects (temporary files).
    fn for_each_object(
        &self,
        mut visit: impl FnMut(&Path, Option<Hash>, u64) -> Result<(), ObjectError>,
    ) -> Result<(), ObjectError> {
        let fan_outs = fs::read_dir(&self.dir).map_err(io_error("listing", &self.dir))?;
        for fan_out in fan_outs {
            let fan_out = fan_out.map_err(io_error("listing", &self.dir))?;
            let fan_out_path = fan_out.path();
            let name = fan_out.file_name();
            if name.len() != 2 || !fan_out.file_type().is_ok_and(|kind| kind.is_dir()) {
                continue;
            }
            let files = fs::read_dir(&fan_out_path).map_err(io_error("listing", &fan_out_path))?;
            for file in files {
                let file = file.map_err(io_error("listing", &fan_out_path))?;
                let path = file.path();
                let Ok(metadata) = file.metadata() else { continue };
                if !metadata.is_file() {
                    continue;
                }
                let hash = file.file_name().to_str().and_then(|name| name.parse::<Hash>().ok());
                visit(&path, hash, metadata.len())?;
            }
        }
        Ok(())
    }
}

fn is_stale(path: &Path) -> bool {
    fs::symlink_metadata(path)
        .and_then(|metadata| metadata.modified())
        .ok()
        .and_then(|modified| SystemTime::now().duration_since(modified).ok())
        .is_some_and(|age| age > STALE_TEMP)
}

fn encode(bytes: &[u8]) -> Vec<u8> {
    if bytes.len() >= COMPRESS_MIN
        && let Ok(compressed) = zstd::bulk::compress(bytes, ZSTD_LEVEL)
        && compressed.len() <= bytes.len() - bytes.len() / 8
    {
        let mut encoded = Vec::with_capacity(compressed.len() + 1);
        encoded.push(ZSTD);
        encoded.extend_from_slice(&compressed);
        return encoded;
    }
    let mut encoded = Vec::with_capacity(bytes.len() + 1);
    encoded.push(RAW);
    encoded.extend_from_slice(bytes);
    encoded
}

/// Writes `bytes` to a new 0600 temporary file in `dir`, `fsync`ed, and returns its path.
fn write_temp(dir: &Path, bytes: &[u8]) -> Result<PathBuf, ObjectError> {
    loop {
        let nanos = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|elapsed| elapsed.subsec_nanos())
            .unwrap_or(0);
        let name = format!(
            ".tmp-{}-{}-{nanos}",
            std::process::id(),
            TEMP_COUNTER.fetch_add(1, Ordering::Relaxed)
        );
        let path = dir.join(name);
        let mut file = match OpenOptions::new().write(true).create_new(true).mode(0o600).open(&path)
        {
            Ok(file) => file,
            Err(cause) if cause.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(cause) => return Err(ObjectError::Io { action: "creating", path, cause }),
        };
        let written = file.write_all(bytes).and_then(|()| file.sync_data());
        if let Err(cause) = written {
            drop(file);
            let _ = fs::remove_file(&path);
            return Err(ObjectError::Io { action: "writing", path, cause });
        }
        return Ok(path);
    }
}

/// Creates `dir` (and missing parents) with mode 0700.
pub(crate) fn create_private_dir(dir: &Path) -> io::Result<()> {
    fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)
}

/// `fsync`s a directory, making the renames and creations in it durable.
pub(crate) fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}
