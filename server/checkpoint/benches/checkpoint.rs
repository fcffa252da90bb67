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
//! dsh is timed two ways: "cold", a `Checkpointer` opened for the run (its index read from
//! disk, as git reads its index each run), and "warm", the daemon's case (one `Checkpointer`
//! per workspace kept open, its index in memory). The ratio printed is cold's. Medians of the
//! samples; the two tools alternate within a sample so both see the same page cache.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use dsh_checkpoint::{CheckpointConfig, Checkpointer};

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
    let mut checkpointer = Checkpointer::open(ws, state, CheckpointConfig::default()).unwrap();
    let checkpoint = checkpointer.checkpoint().unwrap();
    let elapsed = start.elapsed();
    assert!(checkpoint.incomplete.is_none());
    elapsed
}

fn dsh_warm(checkpointer: &mut Checkpointer) -> Duration {
    let start = Instant::now();
    let checkpoint = checkpointer.checkpoint().unwrap();
    let elapsed = start.elapsed();
    assert!(checkpoint.incomplete.is_none());
    elapsed
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
    let state = temp.path().join("state");
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
    let mut checkpointer = Checkpointer::open(&ws, &state, CheckpointConfig::default()).unwrap();
    let dsh_initial = dsh_warm(&mut checkpointer);
    println!(
        "initial snapshot: dsh {:.0} ms (store {:.1} MB), git {:.0} ms (.git {:.1} MB)",
        ms(dsh_initial),
        dir_bytes(&state.join("objects")) as f64 / 1e6,
        ms(git_initial),
        dir_bytes(&shadow) as f64 / 1e6,
    );
    // Past both tools' racy windows (git: files not older than its index; dsh: 2 s), then one
    // run each so both indexes are settled.
    std::thread::sleep(Duration::from_millis(2100));
    git_snapshot(&shadow, &ws);
    dsh_warm(&mut checkpointer);

    // Nothing changed.
    let store_before = dir_bytes(&state.join("objects"));
    let (mut git_times, mut cold_times, mut warm_times) = (Vec::new(), Vec::new(), Vec::new());
    for sample in 0..samples {
        if sample % 2 == 0 {
            git_times.push(git_snapshot(&shadow, &ws));
            cold_times.push(dsh_cold(&ws, &state));
        } else {
            cold_times.push(dsh_cold(&ws, &state));
            git_times.push(git_snapshot(&shadow, &ws));
        }
        warm_times.push(dsh_warm(&mut checkpointer));
    }
    let growth = dir_bytes(&state.join("objects")) - store_before;
    let (git_unchanged, cold_unchanged, warm_unchanged) =
        (median(git_times), median(cold_times), median(warm_times));
    println!(
        "nothing changed:  dsh {:6.1} ms (warm {:5.1} ms)  git {:6.1} ms  ratio {:.2}x (warm {:.2}x)",
        ms(cold_unchanged),
        ms(warm_unchanged),
        ms(git_unchanged),
        ms(cold_unchanged) / ms(git_unchanged),
        ms(warm_unchanged) / ms(git_unchanged),
    );
    println!(
        "object store growth, unchanged tree: {growth} bytes over {} checkpoints",
        samples * 2
    );

    // Ten files changed, before each run of each tool (the same edits seen by both).
    let (mut git_times, mut cold_times, mut warm_times) = (Vec::new(), Vec::new(), Vec::new());
    for sample in 0..samples {
        edit(&paths, &mut rng, 10);
        if sample % 2 == 0 {
            git_times.push(git_snapshot(&shadow, &ws));
            cold_times.push(dsh_cold(&ws, &state));
        } else {
            cold_times.push(dsh_cold(&ws, &state));
            git_times.push(git_snapshot(&shadow, &ws));
        }
        edit(&paths, &mut rng, 10);
        warm_times.push(dsh_warm(&mut checkpointer));
        // The warm checkpointer's index is the one on disk again for the next cold run.
        git_snapshot(&shadow, &ws);
    }
    let (git_changed, cold_changed, warm_changed) =
        (median(git_times), median(cold_times), median(warm_times));
    println!(
        "10 files changed: dsh {:6.1} ms (warm {:5.1} ms)  git {:6.1} ms  ratio {:.2}x (warm {:.2}x)",
        ms(cold_changed),
        ms(warm_changed),
        ms(git_changed),
        ms(cold_changed) / ms(git_changed),
        ms(warm_changed) / ms(git_changed),
    );
    let target = |ratio: f64| if ratio <= 0.5 { "met" } else { "MISSED" };
    println!(
        "target dsh <= 0.5x git: nothing changed {}, 10 changed {}; unchanged growth 0 bytes {}",
        target(ms(cold_unchanged) / ms(git_unchanged)),
        target(ms(cold_changed) / ms(git_changed)),
        if growth == 0 { "met" } else { "MISSED" },
    );
}
