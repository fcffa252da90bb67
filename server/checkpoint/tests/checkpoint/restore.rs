//! Restoring checkpoints: every kind of change undone, conflicts, links never written through.

use std::ffi::OsStr;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{PermissionsExt, symlink};

use dsh_checkpoint::RestoreError;

use crate::{Fixture, paths, snapshot};

fn tracked(path: &[u8]) -> bool {
    !path.ends_with(b".log")
}

#[test]
fn a_restore_undoes_writes_creates_deletes_moves_chmods_links_and_kind_changes() {
    let fixture = Fixture::new();
    let ws = fixture.ws();
    fixture.write(".gitignore", "*.log\n");
    fixture.write("edited.txt", "original\n");
    fixture.write("deleted.txt", "deleted later\n");
    fixture.write("moved.txt", "moved later\n");
    fixture.write("script.sh", "#!/bin/sh\n");
    fs::set_permissions(ws.join("script.sh"), fs::Permissions::from_mode(0o755)).unwrap();
    fixture.write("becomes_dir", "a file first\n");
    fixture.write("dir_becomes_file/inner.txt", "inside\n");
    fixture.write("link_target.txt", "target\n");
    symlink("link_target.txt", ws.join("link")).unwrap();
    fixture.write("keep.log", "ignored, before\n");
    let mut checkpointer = fixture.open();
    let checkpoint = checkpointer.checkpoint().unwrap();
    let before = snapshot(&ws, &|path| !tracked(path));

    fixture.write("edited.txt", "changed by sed\n");
    fs::remove_file(ws.join("deleted.txt")).unwrap();
    fs::rename(ws.join("moved.txt"), ws.join("new_place.txt")).unwrap();
    fs::set_permissions(ws.join("script.sh"), fs::Permissions::from_mode(0o644)).unwrap();
    fs::remove_file(ws.join("becomes_dir")).unwrap();
    fixture.write("becomes_dir/child.txt", "now a directory\n");
    fs::remove_dir_all(ws.join("dir_becomes_file")).unwrap();
    fixture.write("dir_becomes_file", "now a file\n");
    fs::remove_file(ws.join("link")).unwrap();
    symlink("elsewhere", ws.join("link")).unwrap();
    fixture.write("created/deep/file.txt", "created\n");
    fixture.write("keep.log", "ignored, after\n");
    let latest = checkpointer.checkpoint().unwrap();

    let plan = checkpointer.plan(&checkpoint.root, Some(&latest.root)).unwrap();
    assert_eq!(paths(&plan.restored), ["edited.txt", "link", "script.sh"]);
    assert_eq!(
        paths(&plan.created),
        ["becomes_dir", "deleted.txt", "dir_becomes_file/inner.txt", "moved.txt"]
    );
    assert_eq!(
        paths(&plan.deleted),
        ["becomes_dir/child.txt", "created/deep/file.txt", "dir_becomes_file", "new_place.txt"]
    );
    assert!(plan.conflicts.is_empty(), "{:?}", plan.conflicts);
    assert!(plan.missing_objects.is_empty() && plan.blocked.is_empty());
    assert_eq!(plan.before.root, latest.root, "the state before is the latest state");
    // Planning touches nothing.
    assert_eq!(fixture.read("edited.txt"), "changed by sed\n");

    let applied = checkpointer.apply(&plan, false).unwrap();
    assert_eq!(applied.restored, plan.restored);
    assert_eq!(snapshot(&ws, &|path| !tracked(path)), before);
    assert_eq!(fixture.read("keep.log"), "ignored, after\n", "ignored files are untouched");
    assert!(!ws.join("created").exists(), "directories left empty are removed");
    assert!(!ws.join("state").exists());
    assert_eq!(checkpointer.checkpoint().unwrap().root, checkpoint.root);

    // And undone: the state before the restore comes back.
    let undo = checkpointer.plan(&plan.before.root, Some(&checkpoint.root)).unwrap();
    checkpointer.apply(&undo, false).unwrap();
    assert_eq!(checkpointer.checkpoint().unwrap().root, latest.root);
    assert_eq!(fixture.read("new_place.txt"), "moved later\n");
}

#[test]
fn a_user_edit_since_the_last_checkpoint_is_a_conflict_unless_forced() {
    let fixture = Fixture::new();
    fixture.write("agent.txt", "v1\n");
    fixture.write("user.txt", "v1\n");
    fixture.write("untouched.txt", "same\n");
    let mut checkpointer = fixture.open();
    let step1 = checkpointer.checkpoint().unwrap();
    fixture.write("agent.txt", "v2 by the agent\n");
    fixture.write("user.txt", "v2 by the agent\n");
    let latest = checkpointer.checkpoint().unwrap();
    // The user edits in their editor; the agent's checkpoint does not know.
    fixture.write("user.txt", "v3 by the user\n");
    fixture.write("user_new.txt", "the user's new file\n");

    let plan = checkpointer.plan(&step1.root, Some(&latest.root)).unwrap();
    assert_eq!(paths(&plan.conflicts), ["user.txt", "user_new.txt"]);
    let error = checkpointer.apply(&plan, false).unwrap_err();
    match &error {
        RestoreError::Conflicts(conflicts) => assert_eq!(paths(conflicts), paths(&plan.conflicts)),
        other => panic!("expected conflicts, got {other:?}"),
    }
    assert!(error.to_string().contains("user.txt"), "{error}");
    assert_eq!(fixture.read("agent.txt"), "v2 by the agent\n", "refused: nothing touched");

    checkpointer.apply(&plan, true).unwrap();
    assert_eq!(fixture.read("agent.txt"), "v1\n");
    assert_eq!(fixture.read("user.txt"), "v1\n");
    assert!(!fixture.ws().join("user_new.txt").exists());
    // The user's version is in the state before, so even a forced restore can be undone.
    let undo = checkpointer.plan(&plan.before.root, None).unwrap();
    checkpointer.apply(&undo, false).unwrap();
    assert_eq!(fixture.read("user.txt"), "v3 by the user\n");
}

#[test]
fn a_directory_that_became_a_link_out_of_the_workspace_is_never_written_through() {
    let fixture = Fixture::new();
    let ws = fixture.ws();
    let outside = fixture.temp.path().join("outside");
    fs::create_dir(&outside).unwrap();
    fs::write(outside.join("config.txt"), "outside, must not change\n").unwrap();
    fixture.write("config/config.txt", "inside\n");
    fixture.write("config/other.txt", "other\n");
    let mut checkpointer = fixture.open();
    let checkpoint = checkpointer.checkpoint().unwrap();
    fs::remove_dir_all(ws.join("config")).unwrap();
    symlink(&outside, ws.join("config")).unwrap();

    let plan = checkpointer.plan(&checkpoint.root, None).unwrap();
    assert_eq!(paths(&plan.deleted), ["config"]);
    assert_eq!(paths(&plan.created), ["config/config.txt", "config/other.txt"]);
    checkpointer.apply(&plan, false).unwrap();
    assert_eq!(
        fs::read_to_string(outside.join("config.txt")).unwrap(),
        "outside, must not change\n"
    );
    assert!(!outside.join("other.txt").exists());
    assert!(fs::symlink_metadata(ws.join("config")).unwrap().is_dir());
    assert_eq!(fixture.read("config/config.txt"), "inside\n");
}

#[test]
fn a_file_that_became_a_link_out_of_the_workspace_is_replaced_as_a_link() {
    let fixture = Fixture::new();
    let ws = fixture.ws();
    let outside = fixture.temp.path().join("outside.txt");
    fs::write(&outside, "outside, must not change\n").unwrap();
    fixture.write("settings.json", "{}\n");
    let mut checkpointer = fixture.open();
    let checkpoint = checkpointer.checkpoint().unwrap();
    fs::remove_file(ws.join("settings.json")).unwrap();
    symlink(&outside, ws.join("settings.json")).unwrap();
    let plan = checkpointer.plan(&checkpoint.root, None).unwrap();
    assert_eq!(paths(&plan.restored), ["settings.json"]);
    checkpointer.apply(&plan, false).unwrap();
    assert_eq!(fs::read_to_string(&outside).unwrap(), "outside, must not change\n");
    assert!(fs::symlink_metadata(ws.join("settings.json")).unwrap().is_file());
    assert_eq!(fixture.read("settings.json"), "{}\n");
}

#[test]
fn an_untracked_link_in_the_way_blocks_the_restore_before_anything_is_touched() {
    let fixture = Fixture::new();
    let ws = fixture.ws();
    let outside = fixture.temp.path().join("outside");
    fs::create_dir(&outside).unwrap();
    fixture.write(".gitignore", "vendor\n");
    fixture.write("vendor-copy.txt", "v1\n");
    fixture.write("edited.txt", "v1\n");
    let mut checkpointer = fixture.open();
    // Checkpointed while `vendor/lib.txt` was tracked (no ignore rule for it yet).
    fixture.write(".gitignore", "");
    fixture.write("vendor/lib.txt", "lib\n");
    let checkpoint = checkpointer.checkpoint().unwrap();
    // Now `vendor` is ignored and a link out of the workspace.
    fixture.write(".gitignore", "vendor\n");
    fs::remove_dir_all(ws.join("vendor")).unwrap();
    symlink(&outside, ws.join("vendor")).unwrap();
    fixture.write("edited.txt", "v2\n");

    let plan = checkpointer.plan(&checkpoint.root, None).unwrap();
    assert_eq!(paths(&plan.created), ["vendor/lib.txt"]);
    assert_eq!(plan.blocked.len(), 1, "{:?}", plan.blocked);
    assert!(plan.blocked[0].reason.contains("symbolic link"), "{:?}", plan.blocked);
    let error = checkpointer.apply(&plan, true).unwrap_err();
    assert!(matches!(error, RestoreError::Blocked(_)), "{error:?}");
    assert_eq!(fixture.read("edited.txt"), "v2\n", "nothing touched");
    assert_eq!(fs::read_dir(&outside).unwrap().count(), 0, "nothing written outside");
}

#[test]
fn read_only_files_and_directories_are_restored_with_their_modes() {
    let fixture = Fixture::new();
    let ws = fixture.ws();
    fixture.write("locked/readonly.txt", "v1\n");
    fs::set_permissions(ws.join("locked/readonly.txt"), fs::Permissions::from_mode(0o444)).unwrap();
    let mut checkpointer = fixture.open();
    let checkpoint = checkpointer.checkpoint().unwrap();
    fs::set_permissions(ws.join("locked/readonly.txt"), fs::Permissions::from_mode(0o644)).unwrap();
    fixture.write("locked/readonly.txt", "v2\n");
    fs::set_permissions(ws.join("locked/readonly.txt"), fs::Permissions::from_mode(0o400)).unwrap();
    fixture.write("locked/new.txt", "new\n");
    fs::set_permissions(ws.join("locked"), fs::Permissions::from_mode(0o555)).unwrap();

    let plan = checkpointer.plan(&checkpoint.root, None).unwrap();
    checkpointer.apply(&plan, false).unwrap();
    let mode = |path: &str| fs::metadata(ws.join(path)).unwrap().permissions().mode() & 0o7777;
    assert_eq!(fixture.read("locked/readonly.txt"), "v1\n");
    assert_eq!(mode("locked/readonly.txt"), 0o444);
    assert!(!ws.join("locked/new.txt").exists());
    assert_eq!(mode("locked"), 0o555, "the directory's mode is put back");
    fs::set_permissions(ws.join("locked"), fs::Permissions::from_mode(0o755)).unwrap();
}

#[test]
fn binary_and_non_utf8_names_round_trip() {
    let fixture = Fixture::new();
    let ws = fixture.ws();
    let names: [&[u8]; 4] = [b"caf\xe9.txt", b"\xff\xfe", b"new\nline", b"tab\tand space "];
    for (index, name) in names.iter().enumerate() {
        let path = ws.join(OsStr::from_bytes(name));
        fs::write(&path, [0u8, 159, 146, 150, index as u8]).unwrap();
    }
    fs::create_dir(ws.join(OsStr::from_bytes(b"dir\x80"))).unwrap();
    fs::write(ws.join(OsStr::from_bytes(b"dir\x80/\xc3\x28")), b"\0binary\0").unwrap();
    symlink(OsStr::from_bytes(b"target\xfe"), ws.join(OsStr::from_bytes(b"link\xfe"))).unwrap();
    let mut checkpointer = fixture.open();
    let checkpoint = checkpointer.checkpoint().unwrap();
    assert_eq!(checkpoint.files, 6);
    let before = snapshot(&ws, &|_| false);
    for name in names {
        fs::remove_file(ws.join(OsStr::from_bytes(name))).unwrap();
    }
    fs::remove_dir_all(ws.join(OsStr::from_bytes(b"dir\x80"))).unwrap();
    fs::remove_file(ws.join(OsStr::from_bytes(b"link\xfe"))).unwrap();
    let plan = checkpointer.plan(&checkpoint.root, None).unwrap();
    assert_eq!(plan.created.len(), 6);
    checkpointer.apply(&plan, false).unwrap();
    assert_eq!(snapshot(&ws, &|_| false), before);
}
