//! Tree objects: one per directory, git-like, and the flat manifest a checkpoint is compared by.
//!
//! Encoding (deterministic: equal directories give equal bytes, hence equal hashes): the magic
//! line `dsh-tree 1\n`, then the entries sorted by name bytes, each:
//!
//! ```text
//! kind u8 | name length u32 LE | name bytes | payload
//!   1 file       payload: mode u32 LE (permission bits) | content hash (32 bytes)
//!   2 symlink    payload: target length u32 LE | target bytes
//!   3 directory  payload: subtree hash (32 bytes)
//!   4 not stored payload: mode u32 LE | size u64 LE      (over the size cap, or unreadable)
//! ```
//!
//! Names and link targets are raw bytes (non-UTF-8 names are kept exactly); a name is never
//! empty and never contains `/`.

use std::collections::BTreeMap;

use crate::Hash;

const MAGIC: &[u8] = b"dsh-tree 1\n";

/// A tracked path's state: what a checkpoint records and a restore recreates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Leaf {
    /// A regular file: its permission bits and the hash of its content.
    File { mode: u32, hash: Hash },
    /// A symbolic link (never followed): its target bytes.
    Symlink { target: Vec<u8> },
    /// A file whose content is not stored (over the size cap, or unreadable): not restorable.
    NotStored { mode: u32, size: u64 },
}

/// Every tracked path (relative, components joined by `/`, as bytes) and its state.
pub(crate) type Manifest = BTreeMap<Vec<u8>, Leaf>;

/// One directory's entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Entry {
    Leaf(Leaf),
    Dir(Hash),
}

pub(crate) fn encode(entries: &[(&[u8], &Entry)]) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(MAGIC.len() + entries.len() * 64);
    bytes.extend_from_slice(MAGIC);
    for (name, entry) in entries {
        let kind = match entry {
            Entry::Leaf(Leaf::File { .. }) => 1,
            Entry::Leaf(Leaf::Symlink { .. }) => 2,
            Entry::Dir(_) => 3,
            Entry::Leaf(Leaf::NotStored { .. }) => 4,
        };
        bytes.push(kind);
        put_bytes(&mut bytes, name);
        match entry {
            Entry::Leaf(Leaf::File { mode, hash }) => {
                bytes.extend_from_slice(&mode.to_le_bytes());
                bytes.extend_from_slice(hash.as_bytes());
            }
            Entry::Leaf(Leaf::Symlink { target }) => put_bytes(&mut bytes, target),
            Entry::Dir(hash) => bytes.extend_from_slice(hash.as_bytes()),
            Entry::Leaf(Leaf::NotStored { mode, size }) => {
                bytes.extend_from_slice(&mode.to_le_bytes());
                bytes.extend_from_slice(&size.to_le_bytes());
            }
        }
    }
    bytes
}

pub(crate) fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    out.extend_from_slice(bytes);
}

/// A reader over a byte slice, for the crate's binary formats.
pub(crate) struct Reader<'a> {
    pub(crate) bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    pub(crate) fn take(&mut self, count: usize) -> Result<&'a [u8], String> {
        if self.bytes.len() < count {
            return Err("truncated".to_owned());
        }
        let (head, rest) = self.bytes.split_at(count);
        self.bytes = rest;
        Ok(head)
    }

    pub(crate) fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }

    pub(crate) fn u32(&mut self) -> Result<u32, String> {
        let mut buffer = [0u8; 4];
        buffer.copy_from_slice(self.take(4)?);
        Ok(u32::from_le_bytes(buffer))
    }

    pub(crate) fn u64(&mut self) -> Result<u64, String> {
        let mut buffer = [0u8; 8];
        buffer.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(buffer))
    }

    pub(crate) fn i64(&mut self) -> Result<i64, String> {
        Ok(self.u64()? as i64)
    }

    pub(crate) fn hash(&mut self) -> Result<Hash, String> {
        let mut buffer = [0u8; 32];
        buffer.copy_from_slice(self.take(32)?);
        Ok(Hash::from_bytes(buffer))
    }

    pub(crate) fn bytes(&mut self) -> Result<&'a [u8], String> {
        let length = self.u32()? as usize;
        self.take(length)
    }
}

pub(crate) fn decode(bytes: &[u8]) -> Result<Vec<(Vec<u8>, Entry)>, String> {
    let Some(rest) = bytes.strip_prefix(MAGIC) else {
        return Err("not a tree object".to_owned());
    };
    let mut reader = Reader { bytes: rest };
    let mut entries = Vec::new();
    while !reader.bytes.is_empty() {
        let kind = reader.u8()?;
        let name = reader.bytes()?.to_vec();
        if name.is_empty() || name.contains(&b'/') || name == b"." || name == b".." {
            return Err(format!("invalid entry name {:?}", String::from_utf8_lossy(&name)));
        }
        let entry = match kind {
            1 => Entry::Leaf(Leaf::File { mode: reader.u32()?, hash: reader.hash()? }),
            2 => Entry::Leaf(Leaf::Symlink { target: reader.bytes()?.to_vec() }),
            3 => Entry::Dir(reader.hash()?),
            4 => Entry::Leaf(Leaf::NotStored { mode: reader.u32()?, size: reader.u64()? }),
            other => return Err(format!("unknown entry kind {other}")),
        };
        entries.push((name, entry));
    }
    Ok(entries)
}

/// The trees of a manifest (its paths and leaves, in any order), built bottom-up: `(hash,
/// encoded bytes)` of every directory, the root last.
pub(crate) fn build<'a>(
    manifest: impl IntoIterator<Item = (&'a Vec<u8>, &'a Leaf)>,
) -> Vec<(Hash, Vec<u8>)> {
    #[derive(Default)]
    struct Node<'a> {
        leaves: Vec<(&'a [u8], Entry)>,
        dirs: BTreeMap<&'a [u8], Node<'a>>,
    }
    let mut root = Node::default();
    for (path, leaf) in manifest {
        let mut node = &mut root;
        let mut components = path.split(|&byte| byte == b'/').peekable();
        while let Some(component) = components.next() {
            if components.peek().is_none() {
                node.leaves.push((component, Entry::Leaf(leaf.clone())));
            } else {
                node = node.dirs.entry(component).or_default();
            }
        }
    }
    fn finish(node: Node<'_>, out: &mut Vec<(Hash, Vec<u8>)>) -> Hash {
        let mut entries = node.leaves;
        for (name, child) in node.dirs {
            let hash = finish(child, out);
            entries.push((name, Entry::Dir(hash)));
        }
        entries.sort_by(|left, right| left.0.cmp(right.0));
        let borrowed: Vec<(&[u8], &Entry)> =
            entries.iter().map(|(name, entry)| (*name, entry)).collect();
        let bytes = encode(&borrowed);
        let hash = Hash::of(&bytes);
        out.push((hash, bytes));
        hash
    }
    let mut out = Vec::new();
    finish(root, &mut out);
    out
}

/// Joins a directory prefix (possibly empty) and a name with `/`.
pub(crate) fn join(prefix: &[u8], name: &[u8]) -> Vec<u8> {
    if prefix.is_empty() {
        return name.to_vec();
    }
    let mut path = Vec::with_capacity(prefix.len() + 1 + name.len());
    path.extend_from_slice(prefix);
    path.push(b'/');
    path.extend_from_slice(name);
    path
}

/// The manifest of the checkpoint `root`, read from the store, and the tree objects that were
/// missing (their subtrees are absent from the manifest). Every tree object read is also
/// returned, for collection's marking.
pub(crate) fn flatten(
    objects: &crate::ObjectStore,
    root: &Hash,
) -> Result<Flattened, crate::ObjectError> {
    let mut flattened = Flattened::default();
    let mut pending = vec![(Vec::new(), *root)];
    while let Some((prefix, hash)) = pending.pop() {
        let bytes = match objects.get(&hash) {
            Ok(bytes) => bytes,
            Err(crate::ObjectError::Missing(hash)) => {
                flattened.missing_trees.push(hash);
                continue;
            }
            Err(error) => return Err(error),
        };
        flattened.trees.push(hash);
        let entries =
            decode(&bytes).map_err(|reason| crate::ObjectError::Corrupt { hash, reason })?;
        for (name, entry) in entries {
            let path = join(&prefix, &name);
            match entry {
                Entry::Leaf(leaf) => {
                    flattened.manifest.insert(path, leaf);
                }
                Entry::Dir(subtree) => pending.push((path, subtree)),
            }
        }
    }
    Ok(flattened)
}

/// What [`flatten`] found.
#[derive(Debug, Default)]
pub(crate) struct Flattened {
    pub(crate) manifest: Manifest,
    pub(crate) trees: Vec<Hash>,
    pub(crate) missing_trees: Vec<Hash>,
}
