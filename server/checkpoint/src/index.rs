//! The metadata index (git's index idea): for every tracked path, the metadata it had when it
//! was last read and what was recorded for it, so a checkpoint re-reads only files whose
//! metadata changed.
//!
//! A path is trusted — its recorded state reused without reading the file — only when its
//! length, mtime, ctime, inode, device and mode all equal the recorded ones *and* its mtime and
//! ctime are more than [`RACY_NS`] before the scan that recorded it started: a file written in
//! the same clock tick as it was read could otherwise change without its metadata showing it
//! (the ctime too, because tools that preserve mtimes — `cp -p`, `rsync -t` — can set an old
//! mtime, but nobody can set a ctime).
//!
//! The file `checkpoint-index` (beside `objects/`): the magic line `dsh-index 1\n`, the scan
//! start (i64 ns), the root (flag byte + 32 bytes), the entry count (u64) and the entries
//! (path, metadata, leaf), the count and hashes of the trees known to be stored, then the
//! SHA-256 of everything before it. Written to a temporary file and renamed. A missing,
//! corrupt or unreadable index is not an error: every file is read again.

use std::collections::{HashMap, HashSet};
use std::fs::{self, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;

use crate::Hash;
use crate::tree::{Leaf, Reader, put_bytes};

const MAGIC: &[u8] = b"dsh-index 1\n";
/// How long before a scan's start a file's mtime must be for the scan's record to vouch for it.
pub(crate) const RACY_NS: i64 = 2_000_000_000;

/// The metadata a path is compared by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Meta {
    pub(crate) len: u64,
    pub(crate) mtime_ns: i64,
    pub(crate) ctime_ns: i64,
    pub(crate) ino: u64,
    pub(crate) dev: u64,
    pub(crate) mode: u32,
}

impl Meta {
    pub(crate) fn of(metadata: &fs::Metadata) -> Meta {
        Meta {
            len: metadata.len(),
            mtime_ns: metadata.mtime().saturating_mul(1_000_000_000) + metadata.mtime_nsec(),
            ctime_ns: metadata.ctime().saturating_mul(1_000_000_000) + metadata.ctime_nsec(),
            ino: metadata.ino(),
            dev: metadata.dev(),
            mode: metadata.mode(),
        }
    }

    // The casts are identities on Linux x86-64 but not elsewhere (`st_mode` is `u16` on macOS).
    #[allow(clippy::unnecessary_cast)]
    pub(crate) fn of_stat(stat: &nix::sys::stat::FileStat) -> Meta {
        Meta {
            len: stat.st_size as u64,
            mtime_ns: (stat.st_mtime as i64).saturating_mul(1_000_000_000)
                + stat.st_mtime_nsec as i64,
            ctime_ns: (stat.st_ctime as i64).saturating_mul(1_000_000_000)
                + stat.st_ctime_nsec as i64,
            ino: stat.st_ino as u64,
            dev: stat.st_dev as u64,
            mode: stat.st_mode as u32,
        }
    }

    /// A meta that never matches a file: its record is not trusted next time (its object
    /// could not be written).
    pub(crate) fn smudged(self) -> Meta {
        Meta { mtime_ns: i64::MAX, ..self }
    }
}

/// Paths hashed with FxHash (rustc's): the index is looked up once per tracked file, and paths
/// are the user's own, so no adversary picks colliding keys.
#[derive(Default, Clone, Copy)]
pub(crate) struct PathHasher(u64);

impl std::hash::Hasher for PathHasher {
    fn write(&mut self, bytes: &[u8]) {
        const SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            let mut word = [0u8; 8];
            word.copy_from_slice(chunk);
            self.0 = (self.0.rotate_left(5) ^ u64::from_le_bytes(word)).wrapping_mul(SEED);
        }
        for byte in chunks.remainder() {
            self.0 = (self.0.rotate_left(5) ^ u64::from(*byte)).wrapping_mul(SEED);
        }
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// The index's map: path bytes to record.
pub(crate) type Records = HashMap<Vec<u8>, Record, std::hash::BuildHasherDefault<PathHasher>>;

/// One path's record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Record {
    pub(crate) meta: Meta,
    pub(crate) leaf: Leaf,
}

/// The index as loaded or about to be written.
#[derive(Debug, Default)]
pub(crate) struct Index {
    /// When the scan that wrote it started (ns since the epoch); 0 if there was none.
    pub(crate) scan_start_ns: i64,
    /// The root of the checkpoint it describes.
    pub(crate) root: Option<Hash>,
    pub(crate) records: Records,
    /// Tree objects known to be in the store (those of `root`).
    pub(crate) trees: HashSet<Hash>,
}

impl Index {
    /// The record of `path` if `meta` lets it be trusted.
    pub(crate) fn trusted(&self, path: &[u8], meta: &Meta) -> Option<&Record> {
        let record = self.records.get(path)?;
        let vouched_before = self.scan_start_ns.saturating_sub(RACY_NS);
        (record.meta == *meta && meta.mtime_ns < vouched_before && meta.ctime_ns < vouched_before)
            .then_some(record)
    }

    /// Loads the index at `path`; anything wrong with it gives the empty index.
    pub(crate) fn load(path: &Path) -> Index {
        fs::read(path).ok().and_then(|bytes| decode(&bytes).ok()).unwrap_or_default()
    }

    /// Writes the index to `path` atomically (temporary file, rename). Not fsynced: losing it
    /// only means reading files again.
    pub(crate) fn save(&self, path: &Path) -> std::io::Result<()> {
        let bytes = self.encode();
        let temp = path.with_extension(format!("tmp-{}", std::process::id()));
        let mut file =
            OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(&temp)?;
        file.write_all(&bytes)?;
        drop(file);
        fs::rename(&temp, path)
    }

    fn encode(&self) -> Vec<u8> {
        let mut bytes = Vec::with_capacity(64 + self.records.len() * 120);
        bytes.extend_from_slice(MAGIC);
        bytes.extend_from_slice(&self.scan_start_ns.to_le_bytes());
        match &self.root {
            Some(root) => {
                bytes.push(1);
                bytes.extend_from_slice(root.as_bytes());
            }
            None => bytes.push(0),
        }
        bytes.extend_from_slice(&(self.records.len() as u64).to_le_bytes());
        for (path, record) in &self.records {
            put_bytes(&mut bytes, path);
            let meta = &record.meta;
            for value in [meta.len, meta.mtime_ns as u64, meta.ctime_ns as u64, meta.ino, meta.dev]
            {
                bytes.extend_from_slice(&value.to_le_bytes());
            }
            bytes.extend_from_slice(&meta.mode.to_le_bytes());
            match &record.leaf {
                Leaf::File { mode, hash } => {
                    bytes.push(1);
                    bytes.extend_from_slice(&mode.to_le_bytes());
                    bytes.extend_from_slice(hash.as_bytes());
                }
                Leaf::Symlink { target } => {
                    bytes.push(2);
                    put_bytes(&mut bytes, target);
                }
                Leaf::NotStored { mode, size } => {
                    bytes.push(4);
                    bytes.extend_from_slice(&mode.to_le_bytes());
                    bytes.extend_from_slice(&size.to_le_bytes());
                }
            }
        }
        bytes.extend_from_slice(&(self.trees.len() as u64).to_le_bytes());
        for tree in &self.trees {
            bytes.extend_from_slice(tree.as_bytes());
        }
        let checksum = Hash::of(&bytes);
        bytes.extend_from_slice(checksum.as_bytes());
        bytes
    }
}

fn decode(bytes: &[u8]) -> Result<Index, String> {
    if bytes.len() < 32 {
        return Err("truncated".to_owned());
    }
    let (body, checksum) = bytes.split_at(bytes.len() - 32);
    if Hash::of(body).as_bytes()[..] != checksum[..] {
        return Err("checksum mismatch".to_owned());
    }
    let Some(rest) = body.strip_prefix(MAGIC) else {
        return Err("not an index".to_owned());
    };
    let mut reader = Reader { bytes: rest };
    let scan_start_ns = reader.i64()?;
    let root = match reader.u8()? {
        0 => None,
        _ => Some(reader.hash()?),
    };
    let count = reader.u64()? as usize;
    let mut records = Records::with_capacity_and_hasher(count.min(1 << 24), Default::default());
    for _ in 0..count {
        let path = reader.bytes()?.to_vec();
        let meta = Meta {
            len: reader.u64()?,
            mtime_ns: reader.i64()?,
            ctime_ns: reader.i64()?,
            ino: reader.u64()?,
            dev: reader.u64()?,
            mode: reader.u32()?,
        };
        let leaf = match reader.u8()? {
            1 => Leaf::File { mode: reader.u32()?, hash: reader.hash()? },
            2 => Leaf::Symlink { target: reader.bytes()?.to_vec() },
            4 => Leaf::NotStored { mode: reader.u32()?, size: reader.u64()? },
            other => return Err(format!("unknown record kind {other}")),
        };
        records.insert(path, Record { meta, leaf });
    }
    let tree_count = reader.u64()? as usize;
    let mut trees = HashSet::with_capacity(tree_count.min(1 << 24));
    for _ in 0..tree_count {
        trees.insert(reader.hash()?);
    }
    Ok(Index { scan_start_ns, root, records, trees })
}
