//! Collection under a budget: the oldest checkpoints go first, and a restore to one says so.

use std::fs;

use dsh_checkpoint::RestoreError;

use crate::Fixture;

/// Content that does not compress, so sizes on disk are predictable.
fn noise(seed: u64, length: usize) -> Vec<u8> {
    let mut state = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    (0..length)
        .map(|_| {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (state >> 56) as u8
        })
        .collect()
}

fn write_noise(fixture: &Fixture, path: &str, seed: u64, length: usize) {
    crate::write(&fixture.ws().join(path), &noise(seed, length));
}

#[test]
fn over_the_budget_the_oldest_checkpoints_are_dropped_and_a_restore_to_one_is_refused() {
    let fixture = Fixture::new();
    let mut checkpointer = fixture.open();
    let mut roots = Vec::new();
    for version in 0..5u64 {
        write_noise(&fixture, "data.txt", version, 10_000);
        fixture.write("same.txt", "shared by every checkpoint\n");
        roots.push(checkpointer.checkpoint().unwrap().root);
    }
    let newest_first: Vec<_> = roots.iter().rev().copied().collect();
    // Room for about three versions of data.txt.
    let collected = checkpointer.collect(&newest_first, 33_000, &[]).unwrap();
    assert_eq!(collected.kept, newest_first[..3]);
    assert_eq!(collected.dropped, newest_first[3..]);
    assert!(collected.objects_removed >= 4, "{collected:?}");
    assert!(collected.freed_bytes >= 20_000, "{collected:?}");
    assert!(collected.store_bytes <= 33_000, "{collected:?}");
    assert!(!checkpointer.objects().contains(&roots[0]));
    assert!(checkpointer.objects().contains(&roots[2]));

    let plan = checkpointer.plan(&roots[0], None).unwrap();
    assert!(plan.missing_objects.contains(&roots[0]), "{plan:?}");
    assert!(plan.restored.is_empty() && plan.deleted.is_empty(), "nothing planned blind");
    let error = checkpointer.apply(&plan, true).unwrap_err();
    assert!(matches!(error, RestoreError::MissingObjects(_)), "{error:?}");
    assert!(error.to_string().contains(&roots[0].to_string()), "{error}");

    // A kept one still restores.
    let plan = checkpointer.plan(&roots[2], None).unwrap();
    checkpointer.apply(&plan, false).unwrap();
    assert_eq!(fs::read(fixture.ws().join("data.txt")).unwrap(), noise(2, 10_000));
}

#[test]
fn unreferenced_objects_are_swept_but_the_current_state_is_kept() {
    let fixture = Fixture::new();
    let mut checkpointer = fixture.open();
    write_noise(&fixture, "a.txt", 1, 5_000);
    let old = checkpointer.checkpoint().unwrap();
    write_noise(&fixture, "a.txt", 2, 5_000);
    let current = checkpointer.checkpoint().unwrap();
    // No session references any checkpoint any more.
    let collected = checkpointer.collect(&[], 0, &[]).unwrap();
    assert!(collected.kept.is_empty());
    assert!(!checkpointer.objects().contains(&old.root));
    assert!(checkpointer.objects().contains(&current.root), "the current state stays");
    // The next checkpoint trusts the index for a.txt and must still be restorable.
    fixture.write("b.txt", "b");
    let next = checkpointer.checkpoint().unwrap();
    fs::remove_file(fixture.ws().join("a.txt")).unwrap();
    let plan = checkpointer.plan(&next.root, None).unwrap();
    assert!(plan.missing_objects.is_empty(), "{plan:?}");
    checkpointer.apply(&plan, false).unwrap();
    assert_eq!(fs::read(fixture.ws().join("a.txt")).unwrap(), noise(2, 5_000));
}

#[test]
fn an_object_named_as_kept_survives_a_collection_that_keeps_no_checkpoint() {
    let fixture = Fixture::new();
    let mut checkpointer = fixture.open();
    write_noise(&fixture, "a.txt", 1, 5_000);
    let old = checkpointer.checkpoint().unwrap();
    // An image a session's log names, put in the same store by someone else.
    let image = checkpointer.objects().put(&noise(7, 20_000)).unwrap();
    let stray = checkpointer.objects().put(&noise(8, 20_000)).unwrap();
    write_noise(&fixture, "a.txt", 2, 5_000);
    checkpointer.checkpoint().unwrap();
    let collected = checkpointer.collect(&[], 0, &[image]).unwrap();
    assert!(!checkpointer.objects().contains(&old.root), "{collected:?}");
    assert!(!checkpointer.objects().contains(&stray), "an unnamed object is swept");
    assert_eq!(checkpointer.objects().get(&image).unwrap(), noise(7, 20_000));
}
