//! `Beneath` against a real tree: escapes by `..`, absolute and relative symlinks, hidden
//! paths reached directly or through a link, FIFOs, dangling links, and a rename race.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::*;

fn tree() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    std::fs::create_dir_all(root.join("ws/src")).unwrap();
    std::fs::write(root.join("ws/src/a.txt"), "inside\n").unwrap();
    std::fs::write(root.join("secret.txt"), "outside\n").unwrap();
    (dir, root)
}

#[test]
fn files_inside_are_read_and_links_inside_are_followed() {
    let (_dir, root) = tree();
    symlink("src/a.txt", root.join("ws/link")).unwrap();
    let beneath = Beneath::open(&root.join("ws"), Vec::new()).unwrap();
    assert_eq!(beneath.read(Path::new("src/a.txt"), 100).unwrap(), b"inside\n");
    assert_eq!(beneath.read(Path::new("link"), 100).unwrap(), b"inside\n");
    assert_eq!(beneath.kind(Path::new("src")).unwrap(), Kind::Dir);
    assert_eq!(beneath.kind(Path::new("src/a.txt")).unwrap(), Kind::File(7));
    let names: Vec<_> = beneath.list(Path::new("")).unwrap().into_iter().map(|e| e.name).collect();
    assert!(names.contains(&"src".into()) && names.contains(&"link".into()), "{names:?}");
}

#[test]
fn every_way_out_is_refused() {
    let (_dir, root) = tree();
    symlink(root.join("secret.txt"), root.join("ws/absolute")).unwrap();
    symlink("../secret.txt", root.join("ws/relative")).unwrap();
    symlink("..", root.join("ws/up")).unwrap();
    let beneath = Beneath::open(&root.join("ws"), Vec::new()).unwrap();
    for path in ["../secret.txt", "absolute", "relative", "up/secret.txt"] {
        let error = beneath.read(Path::new(path), 100).unwrap_err();
        assert!(matches!(error, BeneathError::Escapes), "{path}: {error:?}");
        let error = beneath.write(Path::new(path), b"x").unwrap_err();
        assert!(matches!(error, BeneathError::Escapes), "{path}: {error:?}");
    }
    assert_eq!(std::fs::read_to_string(root.join("secret.txt")).unwrap(), "outside\n");
    let error = beneath.write(Path::new("up/new.txt"), b"x").unwrap_err();
    assert!(matches!(error, BeneathError::Escapes), "{error:?}");
    assert!(!root.join("new.txt").exists());
}

#[test]
fn hidden_paths_are_refused_directly_through_links_and_before_they_exist() {
    let (_dir, root) = tree();
    let ws = root.join("ws");
    std::fs::create_dir_all(ws.join(".ssh")).unwrap();
    std::fs::write(ws.join(".ssh/id"), "key").unwrap();
    symlink(".ssh", ws.join("innocent")).unwrap();
    let hidden = vec![ws.join(".ssh"), ws.join(".config/dsh")];
    let beneath = Beneath::open(&ws, hidden).unwrap();
    for path in [".ssh/id", "innocent/id", "./.ssh/id"] {
        let error = beneath.read(Path::new(path), 100).unwrap_err();
        assert!(matches!(error, BeneathError::Hidden(_)), "{path}: {error:?}");
    }
    assert!(matches!(beneath.list(Path::new("innocent")), Err(BeneathError::Hidden(_))));
    let error = beneath.write(Path::new(".config/dsh/config.toml"), b"x").unwrap_err();
    assert!(matches!(error, BeneathError::Hidden(_)), "{error:?}");
    assert!(!ws.join(".config/dsh").exists());
    let error = beneath.write(Path::new("innocent/authorized_keys"), b"x").unwrap_err();
    assert!(matches!(error, BeneathError::Hidden(_)), "{error:?}");
    assert!(!ws.join(".ssh/authorized_keys").exists());
}

#[test]
fn writes_create_parents_and_never_follow_a_dangling_link() {
    let (_dir, root) = tree();
    let ws = root.join("ws");
    let beneath = Beneath::open(&ws, Vec::new()).unwrap();
    assert!(!beneath.write(Path::new("new/deep/file.txt"), b"one").unwrap());
    assert!(beneath.write(Path::new("new/deep/file.txt"), b"two").unwrap());
    assert_eq!(std::fs::read(ws.join("new/deep/file.txt")).unwrap(), b"two");
    symlink("missing.txt", ws.join("dangling")).unwrap();
    let error = beneath.write(Path::new("dangling"), b"x").unwrap_err();
    assert!(matches!(error, BeneathError::Dangling), "{error:?}");
    assert!(!ws.join("missing.txt").exists());
}

#[test]
fn a_fifo_or_an_oversized_file_is_refused_without_blocking() {
    let (_dir, root) = tree();
    let ws = root.join("ws");
    nix::unistd::mkfifo(&ws.join("fifo"), Mode::from_bits_truncate(0o600)).unwrap();
    symlink("/dev/zero", ws.join("zero")).unwrap();
    let beneath = Beneath::open(&ws, Vec::new()).unwrap();
    let started = Instant::now();
    assert!(matches!(beneath.read(Path::new("fifo"), 100), Err(BeneathError::NotRegular)));
    assert!(matches!(read_regular(&ws.join("fifo"), 100), Err(BeneathError::NotRegular)));
    assert!(matches!(read_regular(&ws.join("zero"), 100), Err(BeneathError::NotRegular)));
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(matches!(beneath.read(Path::new("src/a.txt"), 3), Err(BeneathError::TooLarge(3))));
}

/// A racer swaps a directory of the root and a symlink to the outside, atomically, in a loop
/// (as a command in another session can): no read ever returns the outside file and no write
/// ever lands outside.
#[test]
fn a_rename_race_never_moves_a_read_or_a_write_outside() {
    let (_dir, root) = tree();
    let ws = root.join("ws");
    std::fs::create_dir_all(ws.join("dir")).unwrap();
    std::fs::write(ws.join("dir/secret.txt"), "inside\n").unwrap();
    std::fs::create_dir_all(root.join("outside")).unwrap();
    std::fs::write(root.join("outside/secret.txt"), "outside\n").unwrap();
    symlink(root.join("outside"), ws.join("swap")).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let racer = {
        let (stop, ws) = (Arc::clone(&stop), ws.clone());
        std::thread::spawn(move || {
            let mut swaps = 0_u64;
            while !stop.load(Ordering::Relaxed) {
                nix::fcntl::renameat2(
                    nix::fcntl::AT_FDCWD,
                    &ws.join("dir"),
                    nix::fcntl::AT_FDCWD,
                    &ws.join("swap"),
                    nix::fcntl::RenameFlags::RENAME_EXCHANGE,
                )
                .unwrap();
                swaps += 1;
            }
            swaps
        })
    };
    let beneath = Beneath::open(&ws, Vec::new()).unwrap();
    let deadline = Instant::now() + Duration::from_secs(2);
    let (mut reads, mut writes) = (0, 0);
    while Instant::now() < deadline {
        if let Ok(bytes) = beneath.read(Path::new("dir/secret.txt"), 100) {
            assert_eq!(bytes, b"inside\n", "a read followed the swapped link out");
            reads += 1;
        }
        if beneath.write(Path::new("dir/written.txt"), b"w").is_ok() {
            writes += 1;
        }
    }
    stop.store(true, Ordering::Relaxed);
    let swaps = racer.join().unwrap();
    assert!(swaps > 100, "the racer barely ran ({swaps} swaps)");
    assert!(reads > 0 && writes > 0, "nothing got through ({reads} reads, {writes} writes)");
    assert!(!root.join("outside/written.txt").exists(), "a write landed outside");
    assert_eq!(std::fs::read_to_string(root.join("outside/secret.txt")).unwrap(), "outside\n");
}

#[test]
fn nothing_is_created_in_a_hidden_path_reached_through_a_link() {
    let (_dir, root) = tree();
    let ws = root.join("ws");
    symlink(".", ws.join("d")).unwrap();
    let beneath = Beneath::open(&ws, vec![ws.join(".aws"), ws.join(".netrc")]).unwrap();
    for path in ["d/.aws/credentials", "d/.netrc", "d/d/.aws"] {
        let error = beneath.write(Path::new(path), b"x").unwrap_err();
        assert!(matches!(error, BeneathError::Hidden(_)), "{path}: {error:?}");
    }
    assert!(!ws.join(".aws").exists() && !ws.join(".netrc").exists());
}
