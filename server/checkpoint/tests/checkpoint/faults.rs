//! Faults met while restoring: the workspace changing under a planned restore.

use std::fs;
use std::os::unix::fs::symlink;

use dsh_checkpoint::RestoreError;

use crate::{Fixture, paths};

#[test]
fn a_link_swapped_in_after_planning_stops_the_restore_part_way_and_nothing_is_written_through() {
    let fixture = Fixture::new();
    let ws = fixture.ws();
    let outside = fixture.temp.path().join("outside");
    fs::create_dir(&outside).unwrap();
    fixture.write("a.txt", "a1\n");
    fixture.write("m/file.txt", "m1\n");
    fixture.write("z.txt", "z1\n");
    let mut checkpointer = fixture.open();
    let checkpoint = checkpointer.checkpoint().unwrap();
    fixture.write("a.txt", "a2\n");
    fixture.write("m/file.txt", "m2\n");
    fixture.write("z.txt", "z2\n");
    let plan = checkpointer.plan(&checkpoint.root, None).unwrap();
    assert_eq!(paths(&plan.restored), ["a.txt", "m/file.txt", "z.txt"]);

    // Between the plan and its application, `m` becomes a link out of the workspace.
    fs::remove_dir_all(ws.join("m")).unwrap();
    symlink(&outside, ws.join("m")).unwrap();
    let error = checkpointer.apply(&plan, false).unwrap_err();
    let RestoreError::PartWay(state) = &error else { panic!("expected part-way, got {error:?}") };
    assert_eq!(paths(&state.done), ["a.txt"]);
    assert_eq!(state.failed.display().to_string(), "m/file.txt");
    assert_eq!(paths(&state.not_reached), ["z.txt"]);
    let message = error.to_string();
    assert!(message.contains("m/file.txt") && message.contains("symbolic link"), "{message}");
    assert_eq!(fs::read_dir(&outside).unwrap().count(), 0, "nothing written outside");
    assert_eq!(fixture.read("a.txt"), "a1\n", "done");
    assert_eq!(fixture.read("z.txt"), "z2\n", "not reached: untouched");
    assert!(!fixture.state().join("rewind-journal").exists(), "the failure was reported");
}

#[test]
fn a_directory_with_untracked_files_in_place_of_a_file_blocks_the_restore() {
    let fixture = Fixture::new();
    let ws = fixture.ws();
    fixture.write(".gitignore", "*.log\n");
    fixture.write("out", "a file\n");
    let mut checkpointer = fixture.open();
    let checkpoint = checkpointer.checkpoint().unwrap();
    fs::remove_file(ws.join("out")).unwrap();
    fixture.write("out/tracked.txt", "tracked\n");
    fixture.write("out/debug.log", "the user's ignored log\n");
    let plan = checkpointer.plan(&checkpoint.root, None).unwrap();
    assert_eq!(paths(&plan.created), ["out"]);
    assert_eq!(plan.blocked.len(), 1);
    assert!(plan.blocked[0].reason.contains("untracked"), "{:?}", plan.blocked);
    assert!(matches!(checkpointer.apply(&plan, true), Err(RestoreError::Blocked(_))));
    assert_eq!(fixture.read("out/debug.log"), "the user's ignored log\n");
    assert_eq!(fixture.read("out/tracked.txt"), "tracked\n");
}
