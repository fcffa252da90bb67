//! Taking checkpoints: what is tracked, what an unchanged workspace costs, what is reported.

use std::fs;
use std::os::unix::fs::symlink;
use std::time::Duration;

use dsh_checkpoint::CheckpointConfig;

use crate::{Fixture, paths};

#[test]
fn an_unchanged_workspace_gives_the_same_root_and_writes_nothing() {
    let fixture = Fixture::new();
    for index in 0..50 {
        fixture.write(
            &format!("src/module{}/file{index}.rs", index % 5),
            &"fn main() {}\n".repeat(index),
        );
    }
    let mut checkpointer = fixture.open();
    let first = checkpointer.checkpoint().unwrap();
    assert_eq!(first.files, 50);
    assert_eq!(first.changed.len(), 50, "the first checkpoint lists every path");
    let bytes_after_first = fixture.objects_bytes();
    let second = checkpointer.checkpoint().unwrap();
    assert_eq!(second.root, first.root);
    assert!(second.changed.is_empty(), "{:?}", second.changed);
    assert_eq!(fixture.objects_bytes(), bytes_after_first, "an unchanged tree writes 0 bytes");
    // A fresh checkpointer (the index loaded from its file) agrees.
    let third = fixture.open().checkpoint().unwrap();
    assert_eq!(third.root, first.root);
    assert!(third.changed.is_empty());
    assert_eq!(fixture.objects_bytes(), bytes_after_first);
}

#[test]
fn settled_files_are_not_read_again_and_changed_ones_are() {
    let fixture = Fixture::new();
    for index in 0..20 {
        fixture.write(&format!("f{index}"), &format!("content {index}\n"));
    }
    let mut checkpointer = fixture.open();
    checkpointer.checkpoint().unwrap();
    // Past the window in which metadata cannot vouch for a file.
    std::thread::sleep(Duration::from_millis(2100));
    let all_read_again = checkpointer.checkpoint().unwrap();
    assert_eq!(all_read_again.read, 20, "files written within the window are read again");
    let settled = checkpointer.checkpoint().unwrap();
    assert_eq!(settled.read, 0);
    fixture.write("f3", "content 3, edited\n");
    fixture.write("f4", "content 4\n"); // rewritten, same content: read, but not changed
    let edited = checkpointer.checkpoint().unwrap();
    assert_eq!(edited.read, 2);
    assert_eq!(paths(&edited.changed), ["f3"]);
    assert_ne!(edited.root, settled.root);
}

#[test]
fn ignored_files_and_git_are_not_tracked_hidden_files_are() {
    let fixture = Fixture::new();
    fixture.write(".gitignore", "*.log\nbuild/\n");
    fixture.write("sub/.ignore", "secret.txt\n");
    fixture.write("app.log", "noise");
    fixture.write("build/out.o", "object");
    fixture.write("sub/secret.txt", "ignored by .ignore");
    fixture.write(".git/HEAD", "ref: refs/heads/main\n");
    fixture.write(".env", "TOKEN=1");
    fixture.write(".github/workflows/ci.yml", "on: push");
    fixture.write("sub/kept.txt", "kept");
    let mut checkpointer = fixture.open();
    let checkpoint = checkpointer.checkpoint().unwrap();
    assert_eq!(
        paths(&checkpoint.changed),
        [".env", ".github/workflows/ci.yml", ".gitignore", "sub/.ignore", "sub/kept.txt"]
    );
}

#[test]
fn the_state_directory_inside_the_workspace_is_never_tracked() {
    let fixture = Fixture::new();
    fixture.write("a.txt", "a");
    let state = fixture.ws().join(".dsh-state");
    let mut checkpointer =
        dsh_checkpoint::Checkpointer::open(&fixture.ws(), &state, CheckpointConfig::default())
            .unwrap();
    let first = checkpointer.checkpoint().unwrap();
    let second = checkpointer.checkpoint().unwrap();
    assert_eq!(paths(&first.changed), ["a.txt"]);
    assert_eq!(second.root, first.root);
    assert_eq!(second.files, 1);
}

#[test]
fn files_over_the_cap_are_listed_not_stored() {
    let fixture = Fixture::new();
    fixture.write("small", "s");
    fixture.write("big.bin", &"x".repeat(2000));
    let mut checkpointer =
        fixture.open_with(CheckpointConfig { max_file_size: 1000, ..CheckpointConfig::default() });
    let checkpoint = checkpointer.checkpoint().unwrap();
    assert_eq!(checkpoint.too_large, [("big.bin".into(), 2000)]);
    assert_eq!(checkpoint.files, 2);
    assert!(checkpoint.incomplete.is_none());
    assert!(fixture.objects_bytes() < 1000, "the big file's content is not stored");
}

#[test]
fn links_are_recorded_as_links_never_followed() {
    let fixture = Fixture::new();
    let outside = fixture.temp.path().join("outside");
    fs::create_dir(&outside).unwrap();
    fs::write(outside.join("secret"), "outside").unwrap();
    symlink(&outside, fixture.ws().join("escape")).unwrap();
    symlink("missing-target", fixture.ws().join("dangling")).unwrap();
    let mut checkpointer = fixture.open();
    let checkpoint = checkpointer.checkpoint().unwrap();
    assert_eq!(paths(&checkpoint.changed), ["dangling", "escape"]);
    assert!(checkpoint.incomplete.is_none());
}

#[test]
fn the_store_is_private() {
    use std::os::unix::fs::PermissionsExt;
    let fixture = Fixture::new();
    fixture.write("a", "a");
    fixture.open().checkpoint().unwrap();
    let mode = |path: &std::path::Path| fs::metadata(path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&fixture.state()), 0o700);
    assert_eq!(mode(&fixture.state().join("objects")), 0o700);
    for fan_out in fs::read_dir(fixture.state().join("objects")).unwrap() {
        let fan_out = fan_out.unwrap().path();
        assert_eq!(mode(&fan_out), 0o700);
        for object in fs::read_dir(&fan_out).unwrap() {
            assert_eq!(mode(&object.unwrap().path()), 0o600);
        }
    }
    assert_eq!(mode(&fixture.state().join("checkpoint-index")), 0o600);
}
