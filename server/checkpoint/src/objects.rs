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
    /// Objects written to temporary files, not yet synced and renamed into place (see
    /// [`ObjectStore::sync`]).
    pending: Mutex<Vec<Pending>>,
    /// Tests: object writes fail with "no space left on device" while set.
    #[cfg(test)]
    pub(crate) disk_full: std::sync::atomic::AtomicBool,
}

/// An object written to a temporary file, waiting for [`ObjectStore::sync`].
#[derive(Debug)]
struct Pending {
    hash: Hash,
    temp: PathBuf,
    path: PathBuf,
    /// The fan-out directory was created for it (the store's directory needs a sync too).
    new_fan_out: bool,
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
            pending: Mutex::new(Vec::new()),
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
        if let Some((_, error)) = self.sync().into_iter().next() {
            return Err(error);
        }
        Ok(hash)
    }

    /// Writes `bytes` to a temporary file, not synced: the object exists only once
    /// [`ObjectStore::sync`] has synced and renamed it. Syncing many objects at once, in
    /// parallel, costs about one sync instead of one each (the file system commits them
    /// together).
    pub(crate) fn put_unsynced(&self, bytes: &[u8]) -> Result<Hash, ObjectError> {
        let hash = Hash::of(bytes);
        let path = self.path(&hash);
        if fs::symlink_metadata(&path).is_ok() {
            return Ok(hash);
        }
        let fan_out = self.fan_out(&hash);
        let mut new_fan_out = false;
        if fs::symlink_metadata(&fan_out).is_err() {
            create_private_dir(&fan_out).map_err(io_error("creating", &fan_out))?;
            new_fan_out = true;
        }
        #[cfg(test)]
        if self.disk_full.load(Ordering::Relaxed) {
            return Err(ObjectError::Io {
                action: "writing",
                path: fan_out,
                cause: io::Error::from(io::ErrorKind::StorageFull),
            });
        }
        let temp = write_temp(&fan_out, &encode(bytes))?;
        self.lock_pending().push(Pending { hash, temp, path, new_fan_out });
        Ok(hash)
    }

    fn lock_pending(&self) -> std::sync::MutexGuard<'_, Vec<Pending>> {
        self.pending.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Makes every object written since the last sync durable and present: each temporary
    /// file is synced, renamed into place, and each directory touched is synced — the syncs
    /// in parallel. Returns the objects that could not be stored (their temporary files are
    /// removed), with why.
    pub(crate) fn sync(&self) -> Vec<(Hash, ObjectError)> {
        let pending = std::mem::take(&mut *self.lock_pending());
        if pending.is_empty() {
            return Vec::new();
        }
        let synced = parallel(&pending, |pending| {
            File::open(&pending.temp)
                .and_then(|file| file.sync_all())
                .map_err(io_error("syncing", &pending.temp))
        });
        let mut failed = Vec::new();
        let mut dirs = BTreeSet::new();
        for (pending, synced) in pending.iter().zip(synced) {
            let renamed = synced.and_then(|()| {
                fs::rename(&pending.temp, &pending.path)
                    .map_err(io_error("renaming into", &pending.path))
            });
            match renamed {
                Ok(()) => {
                    if let Some(fan_out) = pending.path.parent() {
                        dirs.insert(fan_out.to_path_buf());
                    }
                    if pending.new_fan_out {
                        dirs.insert(self.dir.clone());
                    }
                }
                Err(error) => {
                    let _ = fs::remove_file(&pending.temp);
                    failed.push((pending.hash, error));
                }
            }
        }
        let dirs: Vec<PathBuf> = dirs.into_iter().collect();
        let dir_results = parallel(&dirs, |dir| sync_dir(dir).map_err(io_error("syncing", dir)));
        if let Some(Err(error)) = dir_results.into_iter().find(Result::is_err) {
            // The objects are in place but perhaps not durable: said, not hidden.
            if let Some(first) = pending.first() {
                failed.push((first.hash, error));
            }
        }
        failed
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

/// `work` on every item, on up to 32 threads (syncs wait on the disk, not the processor), the
/// results in order.
fn parallel<T: Sync, R: Send>(items: &[T], work: impl Fn(&T) -> R + Sync) -> Vec<R> {
    const THREADS: usize = 32;
    if items.len() <= 1 {
        return items.iter().map(&work).collect();
    }
    let chunk = items.len().div_ceil(THREADS);
    std::thread::scope(|scope| {
        let handles: Vec<_> = items
            .chunks(chunk)
            .map(|chunk| scope.spawn(|| chunk.iter().map(&work).collect::<Vec<R>>()))
            .collect();
        handles
            .into_iter()
            .flat_map(|handle| {
                handle.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic))
            })
            .collect()
    })
}

/// Writes `bytes` to a new 0600 temporary file in `dir` (not synced) and returns its path.
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
        let written = file.write_all(bytes);
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
