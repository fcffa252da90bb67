//! Unit tests of the crate's pieces: hashes, the object store, the binary formats (trees, the
//! index, the journal), disk full during a checkpoint, and recovery from a crash mid-restore.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs;
use std::path::Path;
use std::sync::atomic::Ordering;

use crate::index::{Index, Meta, Record};
use crate::journal::{Action, Found, Journal};
use crate::tree::{self, Entry, Leaf};
use crate::{CheckpointConfig, Checkpointer, Hash, ObjectError, ObjectStore, Recovered};

#[test]
fn hashes_display_and_parse_as_64_lowercase_hex_digits() {
    let hash = Hash::of(b"hello");
    let text = hash.to_string();
    assert_eq!(text, "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824");
    assert_eq!(text.parse::<Hash>().unwrap(), hash);
    for bad in [
        "",
        "2CF24DBA5FB0A30E26E83B2AC5B9E29E1B161E5C1FA7425E73043362938B9824",
        &text[1..],
        "g".repeat(64).as_str(),
    ] {
        assert!(bad.parse::<Hash>().is_err(), "{bad:?}");
    }
}

#[test]
fn objects_round_trip_compressed_when_it_pays_and_are_written_once() {
    let temp = tempfile::tempdir().unwrap();
    let store = ObjectStore::open(&temp.path().join("objects")).unwrap();
    let text = "fn main() { println!(\"hello\"); }\n".repeat(200).into_bytes();
    let mut state = 0x9e3779b97f4a7c15u64;
    let random: Vec<u8> = (0..4096)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 24) as u8
        })
        .collect();
    for content in [&text, &random, &Vec::new()] {
        let hash = store.put(content).unwrap();
        assert_eq!(hash, Hash::of(content));
        assert_eq!(&store.get(&hash).unwrap(), content);
        assert!(store.contains(&hash));
    }
    let text_hash = Hash::of(&text);
    let size = store.size_on_disk(&text_hash).unwrap();
    assert!(size < text.len() as u64 / 4, "text is compressed: {size} of {}", text.len());
    assert!(store.size_on_disk(&Hash::of(&random)).unwrap() >= random.len() as u64);
    // Putting it again writes nothing: the file is the same one.
    let path =
        temp.path().join("objects").join(&text_hash.to_string()[..2]).join(text_hash.to_string());
    let before = fs::metadata(&path).unwrap();
    store.put(&text).unwrap();
    let after = fs::metadata(&path).unwrap();
    assert_eq!(before.modified().unwrap(), after.modified().unwrap());
    use std::os::unix::fs::MetadataExt;
    assert_eq!(before.ino(), after.ino());
}

#[test]
fn a_corrupt_or_missing_object_is_a_typed_error_naming_it() {
    let temp = tempfile::tempdir().unwrap();
    let store = ObjectStore::open(&temp.path().join("objects")).unwrap();
    let hash = store.put(b"precious content").unwrap();
    let path = temp.path().join("objects").join(&hash.to_string()[..2]).join(hash.to_string());
    fs::write(&path, b"\0tampered content").unwrap();
    let error = store.get(&hash).unwrap_err();
    assert!(
        matches!(error, ObjectError::Corrupt { hash: named, .. } if named == hash),
        "{error:?}"
    );
    assert!(error.to_string().contains(&hash.to_string()));
    fs::remove_file(&path).unwrap();
    assert!(matches!(store.get(&hash), Err(ObjectError::Missing(named)) if named == hash));
}

#[test]
fn trees_encode_deterministically_and_keep_names_as_bytes() {
    let mut manifest = tree::Manifest::new();
    let hash = Hash::of(b"x");
    manifest.insert(b"b\xff/file".to_vec(), Leaf::File { mode: 0o755, hash });
    manifest.insert(b"a".to_vec(), Leaf::Symlink { target: b"../\xfe".to_vec() });
    manifest.insert(b"b\xff/big".to_vec(), Leaf::NotStored { mode: 0o644, size: 1 << 40 });
    let trees = tree::build(&manifest);
    assert_eq!(trees.len(), 2, "the root and one directory");
    let (root, root_bytes) = trees.last().unwrap();
    assert_eq!(*root, Hash::of(root_bytes));
    let entries = tree::decode(root_bytes).unwrap();
    assert_eq!(
        entries[0],
        (b"a".to_vec(), Entry::Leaf(Leaf::Symlink { target: b"../\xfe".to_vec() }))
    );
    assert_eq!(entries[1].0, b"b\xff".to_vec());
    assert!(matches!(entries[1].1, Entry::Dir(_)));
    assert_eq!(tree::build(&manifest), trees, "deterministic");
    assert!(tree::decode(b"not a tree").is_err());
    assert!(tree::decode(&root_bytes[..root_bytes.len() - 1]).is_err(), "truncated");
}

#[test]
fn the_index_round_trips_and_a_damaged_one_is_empty() {
    let temp = tempfile::tempdir().unwrap();
    let path = temp.path().join("checkpoint-index");
    let meta = Meta { len: 5, mtime_ns: 1_000, ctime_ns: 2_000, ino: 7, dev: 1, mode: 0o100644 };
    let mut index =
        Index { scan_start_ns: 10_000_000_000, root: Some(Hash::of(b"root")), ..Index::default() };
    index.records.insert(
        b"a\xff".to_vec(),
        Record { meta, leaf: Leaf::File { mode: 0o644, hash: Hash::of(b"a") } },
    );
    index
        .records
        .insert(b"l".to_vec(), Record { meta, leaf: Leaf::Symlink { target: b"t".to_vec() } });
    index.trees.insert(Hash::of(b"tree"));
    index.save(&path).unwrap();
    let loaded = Index::load(&path);
    assert_eq!(loaded.records, index.records);
    assert_eq!(loaded.trees, index.trees);
    assert_eq!(loaded.root, index.root);
    assert!(loaded.trusted(b"a\xff", &meta).is_some());
    assert!(loaded.trusted(b"a\xff", &Meta { len: 6, ..meta }).is_none(), "metadata changed");
    assert!(
        loaded.trusted(b"a\xff", &Meta { ctime_ns: 9_500_000_000, ..meta }).is_none(),
        "too recent"
    );

    let mut bytes = fs::read(&path).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 1;
    fs::write(&path, &bytes).unwrap();
    assert!(Index::load(&path).records.is_empty(), "a damaged index is ignored");
}

fn checkpointer(temp: &Path) -> Checkpointer {
    fs::create_dir_all(temp.join("ws")).unwrap();
    Checkpointer::open(&temp.join("ws"), &temp.join("state"), CheckpointConfig::default()).unwrap()
}

#[test]
fn disk_full_during_a_checkpoint_marks_it_incomplete_and_a_restore_to_it_says_what_is_missing() {
    let temp = tempfile::tempdir().unwrap();
    let ws = temp.path().join("ws");
    let mut checkpointer = checkpointer(temp.path());
    fs::create_dir_all(&ws).unwrap();
    fs::write(ws.join("stored.txt"), "stored before the disk filled").unwrap();
    checkpointer.checkpoint().unwrap();
    fs::write(ws.join("new.txt"), "written while the disk is full").unwrap();
    checkpointer.objects.disk_full.store(true, Ordering::Relaxed);
    let full = checkpointer.checkpoint().unwrap();
    checkpointer.objects.disk_full.store(false, Ordering::Relaxed);
    let incomplete = full.incomplete.clone().unwrap();
    assert!(incomplete.contains("disk full") && incomplete.contains("new.txt"), "{incomplete}");

    fs::remove_file(ws.join("new.txt")).unwrap();
    let plan = checkpointer.plan(&full.root, None).unwrap();
    assert!(!plan.missing_objects.is_empty(), "{plan:?}");
    let error = checkpointer.apply(&plan, true).unwrap_err();
    assert!(error.to_string().contains("missing"), "{error}");

    // Once there is room, the next checkpoint stores what was missed (the index did not vouch
    // for it).
    fs::write(ws.join("new.txt"), "written while the disk is full").unwrap();
    let recovered = checkpointer.checkpoint().unwrap();
    assert!(recovered.incomplete.is_none());
    fs::remove_file(ws.join("new.txt")).unwrap();
    let plan = checkpointer.plan(&recovered.root, None).unwrap();
    checkpointer.apply(&plan, false).unwrap();
    assert_eq!(fs::read_to_string(ws.join("new.txt")).unwrap(), "written while the disk is full");
}

#[test]
fn a_journal_left_by_a_crash_mid_restore_is_completed_by_recover() {
    let temp = tempfile::tempdir().unwrap();
    let ws = temp.path().join("ws");
    let mut checkpointer = checkpointer(temp.path());
    fs::create_dir_all(ws.join("dir")).unwrap();
    for name in ["a", "b", "dir/c"] {
        fs::write(ws.join(name), format!("{name} at the checkpoint")).unwrap();
    }
    let checkpoint = checkpointer.checkpoint().unwrap();
    for name in ["a", "b", "dir/c"] {
        fs::write(ws.join(name), format!("{name} changed")).unwrap();
    }
    fs::write(ws.join("created"), "created since").unwrap();
    let plan = checkpointer.plan(&checkpoint.root, None).unwrap();
    let wanted = tree::flatten(&checkpointer.objects, &checkpoint.root).unwrap().manifest;
    let actions = super::restore::tests_actions(&checkpointer, &plan, &wanted);
    assert_eq!(actions.len(), 4);
    // The daemon wrote the journal, carried out two actions and was killed.
    Journal { target: checkpoint.root, actions: actions.clone() }
        .write(&checkpointer.journal_path())
        .unwrap();
    let root = crate::files::Root::open(&ws).unwrap();
    for action in &actions[..2] {
        match action {
            Action::Remove(path) => root.remove(path).unwrap(),
            Action::File { path, mode, hash } => {
                root.write_file(path, &checkpointer.objects.get(hash).unwrap(), *mode).unwrap()
            }
            other => panic!("unexpected action {other:?}"),
        }
    }
    // The write in progress when it was killed left its temporary file.
    fs::write(ws.join("dir/.dsh-restore-4242-7"), "half written").unwrap();
    let recovered = checkpointer.recover().unwrap().unwrap();
    assert!(!ws.join("dir/.dsh-restore-4242-7").exists(), "the leftover is removed");
    let Recovered::Completed { target, paths } = recovered else { panic!("{recovered:?}") };
    assert_eq!(target, checkpoint.root);
    assert_eq!(paths.len(), 4, "every action replayed, the done ones again");
    assert!(!checkpointer.journal_path().exists());
    assert_eq!(checkpointer.checkpoint().unwrap().root, checkpoint.root);
    assert!(checkpointer.recover().unwrap().is_none(), "nothing left to recover");
}

#[test]
fn a_journal_torn_while_it_was_written_is_discarded() {
    let temp = tempfile::tempdir().unwrap();
    let mut checkpointer = checkpointer(temp.path());
    let journal = Journal {
        target: Hash::of(b"target"),
        actions: vec![
            Action::Remove(b"x".to_vec()),
            Action::Symlink { path: b"l\xff".to_vec(), target: b"t".to_vec() },
        ],
    };
    let path = checkpointer.journal_path();
    journal.write(&path).unwrap();
    let Found::Journal(read) = Journal::read(&path).unwrap() else { panic!("not read back") };
    assert_eq!(read, journal);
    let bytes = fs::read(&path).unwrap();
    fs::write(&path, &bytes[..bytes.len() - 5]).unwrap();
    assert!(matches!(checkpointer.recover().unwrap(), Some(Recovered::Discarded)));
    assert!(!path.exists());
}

#[test]
fn replaying_a_finished_journal_that_replaced_a_directory_by_a_file_is_harmless() {
    let temp = tempfile::tempdir().unwrap();
    let ws = temp.path().join("ws");
    let mut checkpointer = checkpointer(temp.path());
    fs::write(ws.join("x"), "x was a file").unwrap();
    let checkpoint = checkpointer.checkpoint().unwrap();
    fs::remove_file(ws.join("x")).unwrap();
    fs::create_dir_all(ws.join("x/sub")).unwrap();
    fs::write(ws.join("x/sub/a"), "now a directory").unwrap();
    let plan = checkpointer.plan(&checkpoint.root, None).unwrap();
    let wanted = tree::flatten(&checkpointer.objects, &checkpoint.root).unwrap().manifest;
    let actions = super::restore::tests_actions(&checkpointer, &plan, &wanted);
    let journal = Journal { target: checkpoint.root, actions };
    // Killed after the last action, before the journal was removed: replayed from the start.
    journal.write(&checkpointer.journal_path()).unwrap();
    assert!(matches!(checkpointer.recover().unwrap(), Some(Recovered::Completed { .. })));
    assert_eq!(fs::read_to_string(ws.join("x")).unwrap(), "x was a file");
    journal.write(&checkpointer.journal_path()).unwrap();
    let again = checkpointer.recover().unwrap().unwrap();
    assert!(matches!(again, Recovered::Completed { .. }), "{again:?}");
    assert_eq!(fs::read_to_string(ws.join("x")).unwrap(), "x was a file");
}

#[test]
fn a_file_replaced_after_the_walk_saw_it_is_not_read() {
    use crate::checkpoint::{Read, read_capped};
    let dir = tempfile::tempdir().unwrap();
    let (inside, outside) = (dir.path().join("inside"), dir.path().join("outside"));
    fs::write(&inside, "the workspace's\n").unwrap();
    fs::write(&outside, "a secret\n").unwrap();
    let seen = Meta::of(&fs::symlink_metadata(&inside).unwrap());
    assert!(matches!(read_capped(&inside, 1024, &seen), Ok(Read::Content(..))));
    // What the path names now is another file (as after a directory on it was swapped).
    fs::rename(&outside, &inside).unwrap();
    let read = read_capped(&inside, 1024, &seen);
    assert!(read.as_ref().is_err_and(|error| error.to_string().contains("replaced")));
}
