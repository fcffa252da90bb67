//! Integration tests of dsh-checkpoint, through its public API on real directories: taking
//! checkpoints (`take.rs`), restoring them (`restore.rs`), faults (`faults.rs`), collection
//! (`collect.rs`), the property test over random sequences of changes (`property.rs`), and
//! the watch's checkpoints against full walks (`watch.rs`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::new_without_default)]

mod collect;
mod faults;
mod property;
mod restore;
mod take;
mod watch;

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use dsh_checkpoint::{CheckpointConfig, Checkpointer};

/// A workspace and a state directory beside it (not inside it), in one temporary directory.
pub struct Fixture {
    pub temp: tempfile::TempDir,
}

impl Fixture {
    pub fn new() -> Fixture {
        let temp = tempfile::tempdir().unwrap();
        fs::create_dir(temp.path().join("ws")).unwrap();
        Fixture { temp }
    }

    pub fn ws(&self) -> PathBuf {
        self.temp.path().join("ws")
    }

    pub fn state(&self) -> PathBuf {
        self.temp.path().join("state")
    }

    pub fn open(&self) -> Checkpointer {
        Checkpointer::open(&self.ws(), &self.state(), CheckpointConfig::default()).unwrap()
    }

    pub fn open_with(&self, config: CheckpointConfig) -> Checkpointer {
        Checkpointer::open(&self.ws(), &self.state(), config).unwrap()
    }

    /// Writes `content` at the workspace-relative `path`, creating parents.
    pub fn write(&self, path: &str, content: &str) {
        write(&self.ws().join(path), content.as_bytes());
    }

    pub fn read(&self, path: &str) -> String {
        fs::read_to_string(self.ws().join(path)).unwrap()
    }

    pub fn objects_bytes(&self) -> u64 {
        dir_bytes(&self.state().join("objects"))
    }
}

pub fn write(path: &Path, content: &[u8]) {
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, content).unwrap();
}

fn dir_bytes(dir: &Path) -> u64 {
    let mut total = 0;
    for entry in fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let metadata = entry.metadata().unwrap();
        total += if metadata.is_dir() { dir_bytes(&entry.path()) } else { metadata.len() };
    }
    total
}

/// What the test itself sees at a path: the oracle checkpoints are compared with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Node {
    File { content: Vec<u8>, mode: u32 },
    Link(Vec<u8>),
}

/// Every file and link below `root` (not following links), skipping `.git` and the paths
/// `skip` says are not tracked. Directories are not listed (they are not tracked).
pub fn snapshot(root: &Path, skip: &dyn Fn(&[u8]) -> bool) -> BTreeMap<Vec<u8>, Node> {
    fn visit(
        root: &Path,
        dir: &Path,
        skip: &dyn Fn(&[u8]) -> bool,
        out: &mut BTreeMap<Vec<u8>, Node>,
    ) {
        for entry in fs::read_dir(dir).unwrap() {
            let entry = entry.unwrap();
            let path = entry.path();
            let relative = path.strip_prefix(root).unwrap().as_os_str().as_bytes().to_vec();
            if entry.file_name() == ".git" || skip(&relative) {
                continue;
            }
            let metadata = fs::symlink_metadata(&path).unwrap();
            if metadata.file_type().is_symlink() {
                let target = fs::read_link(&path).unwrap();
                out.insert(relative, Node::Link(target.as_os_str().as_bytes().to_vec()));
            } else if metadata.is_dir() {
                visit(root, &path, skip, out);
            } else {
                let content = fs::read(&path).unwrap();
                out.insert(
                    relative,
                    Node::File { content, mode: metadata.permissions().mode() & 0o7777 },
                );
            }
        }
    }
    let mut out = BTreeMap::new();
    visit(root, root, skip, &mut out);
    out
}

pub fn paths(list: &[PathBuf]) -> Vec<String> {
    list.iter().map(|path| path.display().to_string()).collect()
}
