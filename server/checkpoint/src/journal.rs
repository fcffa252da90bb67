//! The rewind journal: every action of a restore, written and synced before the first one is
//! carried out, removed after the last. A crash in between leaves it for
//! [`crate::Checkpointer::recover`] to replay (each action is idempotent: `files.rs`).
//!
//! The file `rewind-journal` in the state directory: the magic line `dsh-rewind-journal 1\n`,
//! the target root (32 bytes), the action count (u64 LE), the actions, then the SHA-256 of
//! everything before it — a journal torn by a crash while it was written fails the check and is
//! discarded (nothing had been touched yet). Each action: a kind byte, the path (u32 LE length +
//! bytes), then for a file its mode (u32 LE) and content hash, for a link its target (u32 LE
//! length + bytes). The contents themselves are in the object store, and collection keeps the
//! objects a journal names.

use std::fs::{self, OpenOptions};
use std::io::{self, Write as _};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use crate::Hash;
use crate::objects::sync_dir;
use crate::tree::{Reader, put_bytes};

const MAGIC: &[u8] = b"dsh-rewind-journal 1\n";

/// One step of a restore, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Action {
    /// Remove the file or link at the path.
    Remove(Vec<u8>),
    /// Remove the directory at the path if it is empty.
    RemoveDir(Vec<u8>),
    /// Write the file at the path.
    File { path: Vec<u8>, mode: u32, hash: Hash },
    /// Make the path a link.
    Symlink { path: Vec<u8>, target: Vec<u8> },
}

impl Action {
    pub(crate) fn path(&self) -> &[u8] {
        match self {
            Action::Remove(path) | Action::RemoveDir(path) => path,
            Action::File { path, .. } | Action::Symlink { path, .. } => path,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Journal {
    pub(crate) target: Hash,
    pub(crate) actions: Vec<Action>,
}

/// What was found at the journal's path.
pub(crate) enum Found {
    None,
    Torn,
    Journal(Journal),
}

impl Journal {
    fn encode(&self) -> Vec<u8> {
        let mut bytes = Vec::new();
        bytes.extend_from_slice(MAGIC);
        bytes.extend_from_slice(self.target.as_bytes());
        bytes.extend_from_slice(&(self.actions.len() as u64).to_le_bytes());
        for action in &self.actions {
            match action {
                Action::Remove(path) => {
                    bytes.push(1);
                    put_bytes(&mut bytes, path);
                }
                Action::RemoveDir(path) => {
                    bytes.push(2);
                    put_bytes(&mut bytes, path);
                }
                Action::File { path, mode, hash } => {
                    bytes.push(3);
                    put_bytes(&mut bytes, path);
                    bytes.extend_from_slice(&mode.to_le_bytes());
                    bytes.extend_from_slice(hash.as_bytes());
                }
                Action::Symlink { path, target } => {
                    bytes.push(4);
                    put_bytes(&mut bytes, path);
                    put_bytes(&mut bytes, target);
                }
            }
        }
        let checksum = Hash::of(&bytes);
        bytes.extend_from_slice(checksum.as_bytes());
        bytes
    }

    fn decode(bytes: &[u8]) -> Result<Journal, String> {
        if bytes.len() < 32 {
            return Err("truncated".to_owned());
        }
        let (body, checksum) = bytes.split_at(bytes.len() - 32);
        if Hash::of(body).as_bytes()[..] != checksum[..] {
            return Err("checksum mismatch".to_owned());
        }
        let rest = body.strip_prefix(MAGIC).ok_or("not a journal")?;
        let mut reader = Reader { bytes: rest };
        let target = reader.hash()?;
        let count = reader.u64()? as usize;
        let mut actions = Vec::with_capacity(count.min(1 << 20));
        for _ in 0..count {
            let kind = reader.u8()?;
            let path = reader.bytes()?.to_vec();
            actions.push(match kind {
                1 => Action::Remove(path),
                2 => Action::RemoveDir(path),
                3 => Action::File { path, mode: reader.u32()?, hash: reader.hash()? },
                4 => Action::Symlink { path, target: reader.bytes()?.to_vec() },
                other => return Err(format!("unknown action {other}")),
            });
        }
        Ok(Journal { target, actions })
    }

    /// Writes the journal at `path` (0600) and syncs it and its directory: once this returns,
    /// a crash leaves it for recovery.
    pub(crate) fn write(&self, path: &Path) -> io::Result<()> {
        let mut file =
            OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(path)?;
        file.write_all(&self.encode())?;
        file.sync_all()?;
        if let Some(dir) = path.parent() {
            sync_dir(dir)?;
        }
        Ok(())
    }

    pub(crate) fn read(path: &Path) -> io::Result<Found> {
        match fs::read(path) {
            Ok(bytes) => Ok(match Journal::decode(&bytes) {
                Ok(journal) => Found::Journal(journal),
                Err(_) => Found::Torn,
            }),
            Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(Found::None),
            Err(error) => Err(error),
        }
    }

    /// Removes the journal at `path`, durably.
    pub(crate) fn remove(path: &Path) -> io::Result<()> {
        match fs::remove_file(path) {
            Ok(()) => {}
            Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(error) => return Err(error),
        }
        if let Some(dir) = path.parent() {
            sync_dir(dir)?;
        }
        Ok(())
    }
}
