//! Checkpoint benchmark: a generated workspace (10,000 files, ~100 MB, nested directories), the
//! cost of a checkpoint when nothing changed and when 10 files changed, side by side in the
//! same run with what a peer does — `git add -A && git write-tree` into a shadow repository
//! (`GIT_DIR=<tmp>/shadow.git GIT_WORK_TREE=<workspace>`, after an initial add) — and the
//! object store's growth for an unchanged tree.
//!
//! `cargo bench -p dsh-checkpoint`. Environment: `DSH_BENCH_FILES` (default 10000),
//! `DSH_BENCH_FILE_BYTES` (mean size, default 10000), `DSH_BENCH_SAMPLES` (default 9),
//! `DSH_BENCH_DIR` (where the temporary directory goes; default the system's).
//!
//! dsh is timed three ways, each with its own state directory: "full walk", a `Checkpointer`
//! opened for the run with watching off (its index read from disk, as git reads its index
//! each run); "kept open", watching off, one `Checkpointer` kept open (its index in memory);
//! and "watched", the daemon's case: one `Checkpointer` per workspace kept open, with its
//! inotify watch (`CheckpointConfig::watch`), examining only what the kernel reported changed.
//! Medians of the samples; the tools' order rotates within a sample so that all see the same
//! page cache and none is always first after the change. At the end the watched checkpoint's
//! root is checked against a full walk's.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use dsh_checkpoint::{CheckpointConfig, Checkpointer, Hash, Walk};

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|value| value.parse().ok()).unwrap_or(default)
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, bound: u64) -> u64 {
        self.next() % bound
    }
}

const WORDS: &[&str] = &[
    "fn",
    "let",
    "mut",
    "struct",
    "impl",
    "self",
    "match",
    "return",
    "value",
    "index",
    "path",
    "error",
    "result",
    "checkpoint",
    "workspace",
    "=>",
    "{",
    "}",
    "(",
    ")",
    ";",
    "::",
    "&",
    "Vec<u8>",
    "String",
    "Option",
    "Some",
    "None",
    "Ok",
    "Err",
    "pub",
    "use",
    "crate",
    "if",
];

/// Source-like text of about `length` bytes.
fn text(rng: &mut Rng, length: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(length + 64);
    while out.len() < length {
        for _ in 0..(4 + rng.below(10)) {
            out.extend_from_slice(WORDS[rng.below(WORDS.len() as u64) as usize].as_bytes());
            out.push(b' ');
        }
        out.extend_from_slice(format!("// {}\n", rng.next()).as_bytes());
    }
    out
}

fn generate(ws: &Path, files: usize, mean_bytes: usize, rng: &mut Rng) -> (Vec<PathBuf>, u64) {
    let mut paths = Vec::with_capacity(files);
    let mut total = 0;
    for index in 0..files {
        // 10 top directories × 10 subdirectories × ~100 files.
        let dir = ws.join(format!("crate{}/src/module{}", index % 10, (index / 10) % 10));
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join(format!("file{index}.rs"));
        let length = mean_bytes / 5 + rng.below(mean_bytes as u64 * 8 / 5) as usize;
        let content = text(rng, length);
        total += content.len() as u64;
        fs::write(&path, content).unwrap();
        paths.push(path);
    }
    fs::write(ws.join(".gitignore"), "target/\n*.log\n").unwrap();
    (paths, total)
}

fn git(shadow: &Path, ws: &Path, args: &[&str]) {
    let output = Command::new("git")
        .args(args)
        .env("GIT_DIR", shadow)
        .env("GIT_WORK_TREE", ws)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", shadow.parent().unwrap())
        .current_dir(ws)
        .output()
        .unwrap();
    assert!(output.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&output.stderr));
}

/// What opencode does per step: stage everything, write the tree.
fn git_snapshot(shadow: &Path, ws: &Path) -> Duration {
    let start = Instant::now();
    git(shadow, ws, &["add", "-A", "."]);
    git(shadow, ws, &["write-tree"]);
    start.elapsed()
}

fn dsh_cold(ws: &Path, state: &Path) -> Duration {
    let start = Instant::now();
    let config = CheckpointConfig { watch: false, ..CheckpointConfig::default() };
    let mut checkpointer = Checkpointer::open(ws, state, config).unwrap();
    let checkpoint = checkpointer.checkpoint().unwrap();
    let elapsed = start.elapsed();
    assert!(checkpoint.incomplete.is_none());
    elapsed
}

/// A checkpoint by a checkpointer kept open; `watched` says whether it must have used its
/// watch (past the first two checkpoints, nothing here makes it walk the tree).
fn dsh_open(checkpointer: &mut Checkpointer, watched: bool) -> (Duration, Hash) {
    let start = Instant::now();
    let checkpoint = checkpointer.checkpoint().unwrap();
    let elapsed = start.elapsed();
    assert!(checkpoint.incomplete.is_none());
    if watched {
        assert!(matches!(checkpoint.walk, Walk::Watched { .. }), "{:?}", checkpoint.walk);
    }
    (elapsed, checkpoint.root)
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e3
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

fn edit(paths: &[PathBuf], rng: &mut Rng, count: usize) {
    for _ in 0..count {
        let path = &paths[rng.below(paths.len() as u64) as usize];
        let mut content = fs::read(path).unwrap();
        content.extend_from_slice(format!("// edited {}\n", rng.next()).as_bytes());
        fs::write(path, content).unwrap();
    }
}

fn main() {
    // `cargo bench` passes `--bench`; nothing else is taken from the arguments.
    let files = env_usize("DSH_BENCH_FILES", 10_000);
    let mean_bytes = env_usize("DSH_BENCH_FILE_BYTES", 10_000);
    let samples = env_usize("DSH_BENCH_SAMPLES", 9).max(1);
    let temp = match std::env::var_os("DSH_BENCH_DIR") {
        Some(dir) => tempfile::tempdir_in(dir).unwrap(),
        None => tempfile::tempdir().unwrap(),
    };
    let ws = temp.path().join("ws");
    let shadow = temp.path().join("shadow.git");
    fs::create_dir(&ws).unwrap();
    let mut rng = Rng(0x2545f4914f6cdd1d);

    let start = Instant::now();
    let (paths, total) = generate(&ws, files, mean_bytes, &mut rng);
    println!(
        "workspace: {files} files, {:.1} MB, generated in {:.1} s ({})",
        total as f64 / 1e6,
        start.elapsed().as_secs_f64(),
        temp.path().display()
    );

    git(&shadow, &ws, &["init", "-q"]);
    let git_initial = git_snapshot(&shadow, &ws);
    let states = [temp.path().join("state-cold"), temp.path().join("state-warm")];
    let watched_state = temp.path().join("state-watched");
    let full_config = CheckpointConfig { watch: false, ..CheckpointConfig::default() };
    let mut warm = Checkpointer::open(&ws, &states[1], full_config.clone()).unwrap();
    let mut watched = Checkpointer::open(&ws, &watched_state, CheckpointConfig::default()).unwrap();
    let start = Instant::now();
    dsh_cold(&ws, &states[0]);
    let dsh_initial = start.elapsed();
    dsh_open(&mut warm, false);
    dsh_open(&mut watched, false);
    println!(
        "initial snapshot: dsh {:.0} ms (store {:.1} MB), git {:.0} ms (.git {:.1} MB)",
        ms(dsh_initial),
        dir_bytes(&states[0].join("objects")) as f64 / 1e6,
        ms(git_initial),
        dir_bytes(&shadow) as f64 / 1e6,
    );
    // Past both tools' racy windows (git: files not older than its index; dsh: 2 s), then one
    // run each so both indexes are settled (and the watch's new directories listed once).
    std::thread::sleep(Duration::from_millis(2100));
    git_snapshot(&shadow, &ws);
    dsh_cold(&ws, &states[0]);
    dsh_open(&mut warm, false);
    dsh_open(&mut watched, false);
    dsh_open(&mut watched, true);
    println!("watch: {:?}", watched.watch_status());

    let store_bytes =
        |dirs: &[&Path]| -> u64 { dirs.iter().map(|dir| dir_bytes(&dir.join("objects"))).sum() };
    let all_states = [states[0].as_path(), states[1].as_path(), watched_state.as_path()];
    let store_before = store_bytes(&all_states);
    let unchanged = measure(samples, &mut |_| {}, &mut |tool| match tool {
        Tool::Git => git_snapshot(&shadow, &ws),
        Tool::Cold => dsh_cold(&ws, &states[0]),
        Tool::Warm => dsh_open(&mut warm, false).0,
        Tool::Watched => dsh_open(&mut watched, true).0,
    });
    let growth = store_bytes(&all_states) - store_before;
    unchanged.print("nothing changed: ");
    println!(
        "object store growth, unchanged tree: {growth} bytes over {} checkpoints",
        samples * 3
    );

    // Ten files changed before each sample: every tool sees the same ten changed since its
    // previous run.
    let changed =
        measure(samples, &mut |rng_seed| edit(&paths, &mut Rng(rng_seed), 10), &mut |tool| {
            match tool {
                Tool::Git => git_snapshot(&shadow, &ws),
                Tool::Cold => dsh_cold(&ws, &states[0]),
                Tool::Warm => dsh_open(&mut warm, false).0,
                Tool::Watched => dsh_open(&mut watched, true).0,
            }
        });
    changed.print("10 files changed:");
    // The watched checkpointer's root is the full walk's.
    let (_, watched_root) = dsh_open(&mut watched, true);
    let full_root =
        Checkpointer::open(&ws, &states[0], full_config).unwrap().checkpoint().unwrap().root;
    assert_eq!(watched_root, full_root, "the watched checkpoint differs from a full walk");
    let target = |ratio: f64| if ratio <= 0.5 { "met" } else { "MISSED" };
    println!(
        "target dsh <= 0.5x git (watched, the daemon's case): nothing changed {}, 10 changed {}; \
         full walk: nothing changed {}, 10 changed {}; unchanged growth 0 bytes {}",
        target(unchanged.ratio(Tool::Watched)),
        target(changed.ratio(Tool::Watched)),
        target(unchanged.ratio(Tool::Cold)),
        target(changed.ratio(Tool::Cold)),
        if growth == 0 { "met" } else { "MISSED" },
    );
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Tool {
    Git,
    Cold,
    Warm,
    Watched,
}

const TOOLS: [Tool; 4] = [Tool::Git, Tool::Cold, Tool::Warm, Tool::Watched];

/// Medians per tool.
struct Measured([Duration; 4]);

impl Measured {
    fn get(&self, tool: Tool) -> Duration {
        self.0[TOOLS.iter().position(|other| *other == tool).unwrap()]
    }

    fn ratio(&self, tool: Tool) -> f64 {
        ms(self.get(tool)) / ms(self.get(Tool::Git))
    }

    fn print(&self, label: &str) {
        println!(
            "{label} git {:6.1} ms | dsh full walk {:6.1} ms ({:.2}x), kept open {:6.1} ms ({:.2}x) | dsh watched {:6.2} ms ({:.3}x)",
            ms(self.get(Tool::Git)),
            ms(self.get(Tool::Cold)),
            self.ratio(Tool::Cold),
            ms(self.get(Tool::Warm)),
            self.ratio(Tool::Warm),
            ms(self.get(Tool::Watched)),
            self.ratio(Tool::Watched),
        );
    }
}

/// `samples` rounds: `before` (given a seed), then every tool once, in an order that rotates
/// so that none always runs first (after the change) or last.
fn measure(
    samples: usize,
    before: &mut dyn FnMut(u64),
    run: &mut dyn FnMut(Tool) -> Duration,
) -> Measured {
    let mut times: [Vec<Duration>; 4] = Default::default();
    for sample in 0..samples {
        before(0x9e3779b97f4a7c15 ^ (sample as u64 + 1).wrapping_mul(0x2545f4914f6cdd1d));
        for turn in 0..TOOLS.len() {
            let at = (sample + turn) % TOOLS.len();
            times[at].push(run(TOOLS[at]));
        }
    }
    Measured(times.map(median))
}
