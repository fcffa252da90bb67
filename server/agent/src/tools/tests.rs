//! Tests of the built-in tools: each tool's behavior on a temporary workspace, the caps and
//! their notes, process-group killing, workspace confinement and schema stability.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::sys::signal::kill;
use nix::unistd::Pid;
use serde_json::{Value, json};
use tempfile::TempDir;
use tokio_util::sync::CancellationToken;

use super::{Access, ToolConfig, ToolOutput, Toolbox, Workspace};

/// A workspace with a sibling "outside" directory holding a secret the tools must never reach.
struct Fixture {
    workspace: TempDir,
    outside: TempDir,
    toolbox: Toolbox,
}

const SECRET: &str = "top secret outside the workspace\n";

fn fixture() -> Fixture {
    fixture_with(ToolConfig::default())
}

fn fixture_with(config: ToolConfig) -> Fixture {
    let workspace = TempDir::new().unwrap();
    let outside = TempDir::new().unwrap();
    fs::write(outside.path().join("secret.txt"), SECRET).unwrap();
    let toolbox = Toolbox::new(Workspace::new(workspace.path()).unwrap(), config);
    Fixture { workspace, outside, toolbox }
}

impl Fixture {
    fn root(&self) -> PathBuf {
        self.toolbox.workspace().root().to_path_buf()
    }

    fn outside(&self) -> PathBuf {
        fs::canonicalize(self.outside.path()).unwrap()
    }

    fn write(&self, relative: &str, content: &str) {
        let path = self.workspace.path().join(relative);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, content).unwrap();
    }

    fn read(&self, relative: &str) -> String {
        fs::read_to_string(self.workspace.path().join(relative)).unwrap()
    }

    async fn call(&self, name: &str, arguments: Value) -> ToolOutput {
        self.call_raw(name, &arguments.to_string()).await
    }

    async fn call_raw(&self, name: &str, arguments: &str) -> ToolOutput {
        self.toolbox.call(name, arguments, &CancellationToken::new()).await
    }

    /// Asserts the call failed with a message mentioning `needle`, and that nothing of the
    /// outside secret leaked into it.
    async fn refused(&self, name: &str, arguments: Value, needle: &str) {
        let output = self.call(name, arguments.clone()).await;
        assert!(output.is_error, "{name} {arguments} should fail: {output:?}");
        assert!(output.content.contains(needle), "{name} {arguments}: {output:?}");
        assert!(!output.content.contains("top secret"), "{name} {arguments} leaked: {output:?}");
    }

    fn secret_is_untouched(&self) {
        assert_eq!(fs::read_to_string(self.outside().join("secret.txt")).unwrap(), SECRET);
        let mut names: Vec<_> = fs::read_dir(self.outside())
            .unwrap()
            .map(|entry| entry.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert_eq!(names, ["secret.txt"], "something was written outside the workspace");
    }
}

fn ok(output: ToolOutput) -> String {
    assert!(!output.is_error, "unexpected error: {}", output.content);
    output.content
}

fn err(output: ToolOutput) -> String {
    assert!(output.is_error, "unexpected success: {}", output.content);
    output.content
}

// ---------------------------------------------------------------------------------------------
// read_file

#[tokio::test]
async fn read_file_numbers_every_line() {
    let fixture = fixture();
    fixture.write("a.txt", "alpha\nbeta\r\ngamma");
    let content = ok(fixture.call("read_file", json!({"path": "a.txt"})).await);
    assert_eq!(content, "     1\talpha\n     2\tbeta\n     3\tgamma\n");
}

#[tokio::test]
async fn read_file_cuts_a_huge_line_and_says_how_long_it_was() {
    let fixture = fixture();
    let huge = "x".repeat(3_000_000);
    fixture.write("one-line.txt", &format!("{huge}\nshort\n"));
    let content = ok(fixture.call("read_file", json!({"path": "one-line.txt"})).await);
    let lines: Vec<&str> = content.lines().collect();
    assert_eq!(lines.len(), 2, "{}", &content[..200]);
    assert!(
        lines[0].ends_with(" [line cut: 2000 of 3000000 bytes shown]"),
        "{}",
        &lines[0][1990..]
    );
    assert_eq!(lines[1], "     2\tshort");
}

#[tokio::test]
async fn read_file_line_range_is_inclusive_and_noted() {
    let fixture = fixture();
    fixture.write("a.txt", "1\n2\n3\n4\n5\n");
    let content = ok(fixture
        .call("read_file", json!({"path": "a.txt", "start_line": 2, "end_line": 3}))
        .await);
    assert_eq!(content, "     2\t2\n     3\t3\n\n[showing lines 2-3 of 5]");
    let content = ok(fixture.call("read_file", json!({"path": "a.txt", "start_line": 4})).await);
    assert_eq!(content, "     4\t4\n     5\t5\n\n[showing lines 4-5 of 5]");
    let content = ok(fixture.call("read_file", json!({"path": "a.txt", "end_line": 99})).await);
    assert!(content.ends_with("     5\t5\n"), "{content}");
}

#[tokio::test]
async fn read_file_cap_cuts_lines_and_says_how_to_read_on() {
    let config = ToolConfig { read_cap_lines: 3, ..ToolConfig::default() };
    let fixture = fixture_with(config);
    let text: String = (1..=10).map(|number| format!("line {number}\n")).collect();
    fixture.write("long.txt", &text);
    let content = ok(fixture.call("read_file", json!({"path": "long.txt"})).await);
    assert_eq!(
        content,
        "     1\tline 1\n     2\tline 2\n     3\tline 3\n\n[showing lines 1-3 of 10; cut at 3 \
         lines per call; call read_file with start_line=4 to read on]"
    );
    let content = ok(fixture.call("read_file", json!({"path": "long.txt", "start_line": 4})).await);
    assert!(content.starts_with("     4\tline 4\n     5\tline 5\n     6\tline 6\n\n"), "{content}");
    assert!(content.contains("start_line=7"), "{content}");
}

#[tokio::test]
async fn read_file_refuses_binary_and_bad_ranges() {
    let fixture = fixture();
    fixture.write("bin", "abc\0def");
    fixture.write("a.txt", "one\ntwo\n");
    fixture.write("empty.txt", "");
    assert!(err(fixture.call("read_file", json!({"path": "bin"})).await).contains("binary"));
    let message = err(fixture.call("read_file", json!({"path": "a.txt", "start_line": 3})).await);
    assert!(message.contains("past the end") && message.contains("2 lines"), "{message}");
    let message = err(fixture
        .call("read_file", json!({"path": "a.txt", "start_line": 2, "end_line": 1}))
        .await);
    assert!(message.contains("before start_line"), "{message}");
    assert!(
        err(fixture.call("read_file", json!({"path": "a.txt", "start_line": 0})).await)
            .contains("at least 1")
    );
    assert!(
        err(fixture.call("read_file", json!({"path": "nope.txt"})).await).contains("not found")
    );
    assert!(err(fixture.call("read_file", json!({"path": "."})).await).contains("directory"));
    assert_eq!(ok(fixture.call("read_file", json!({"path": "empty.txt"})).await), "(empty file)");
}

// ---------------------------------------------------------------------------------------------
// list_dir

#[tokio::test]
async fn list_dir_sorts_marks_directories_and_skips_git() {
    let fixture = fixture();
    fixture.write("b.txt", "");
    fixture.write("a.txt", "");
    fixture.write("src/main.rs", "");
    fixture.write(".git/HEAD", "");
    fixture.write(".env", "");
    symlink(fixture.root().join("a.txt"), fixture.root().join("link")).unwrap();
    assert_eq!(ok(fixture.call_raw("list_dir", "").await), ".env\na.txt\nb.txt\nlink@\nsrc/");
    assert_eq!(ok(fixture.call("list_dir", json!({"path": "src"})).await), "main.rs");
    fs::create_dir(fixture.root().join("empty")).unwrap();
    assert_eq!(ok(fixture.call("list_dir", json!({"path": "empty"})).await), "(empty directory)");
    assert!(
        err(fixture.call("list_dir", json!({"path": "a.txt"})).await).contains("not a directory")
    );
    assert!(err(fixture.call("list_dir", json!({"path": "missing"})).await).contains("not found"));
}

#[tokio::test]
async fn list_dir_cap_cuts_with_a_note() {
    let config = ToolConfig { output_cap_bytes: 12, ..ToolConfig::default() };
    let fixture = fixture_with(config);
    for name in ["a1", "a2", "a3", "a4", "a5", "a6"] {
        fixture.write(name, "");
    }
    let content = ok(fixture.call("list_dir", json!({})).await);
    assert_eq!(
        content,
        "a1\na2\na3\na4\n[showing 4 of 6 entries; list a subdirectory, or use glob to narrow down]"
    );
}

// ---------------------------------------------------------------------------------------------
// glob

#[tokio::test]
async fn glob_matches_sorted_relative_paths_and_respects_gitignore() {
    let fixture = fixture();
    fixture.write(".gitignore", "target/\n*.log\n");
    fixture.write("src/main.rs", "");
    fixture.write("src/a/lib.rs", "");
    fixture.write("build.rs", "");
    fixture.write("target/debug/gen.rs", "");
    fixture.write("src/trace.log", "");
    fixture.write(".git/hooks/x.rs", "");
    let all = ok(fixture.call("glob", json!({"pattern": "**/*.rs"})).await);
    assert_eq!(all, "build.rs\nsrc/a/lib.rs\nsrc/main.rs");
    let top = ok(fixture.call("glob", json!({"pattern": "*.rs"})).await);
    assert_eq!(top, "build.rs");
    // Relative to the search directory, rendered relative to the workspace; the root's
    // .gitignore still applies below it.
    let in_src = ok(fixture.call("glob", json!({"pattern": "*", "path": "src"})).await);
    assert_eq!(in_src, "src/main.rs");
    let none = ok(fixture.call("glob", json!({"pattern": "*.py"})).await);
    assert_eq!(none, "no files match `*.py` in .");
    // An ignored directory named explicitly is searched.
    let ignored = ok(fixture.call("glob", json!({"pattern": "**/*.rs", "path": "target"})).await);
    assert_eq!(ignored, "target/debug/gen.rs");
    assert!(
        err(fixture.call("glob", json!({"pattern": "a[", "path": "."})).await)
            .contains("invalid glob")
    );
}

#[tokio::test]
async fn glob_cap_cuts_with_a_note() {
    let fixture = fixture();
    for number in 0..1_005 {
        fixture.write(&format!("f{number:04}.txt"), "");
    }
    let content = ok(fixture.call("glob", json!({"pattern": "*.txt"})).await);
    let lines: Vec<&str> = content.lines().collect();
    assert_eq!(lines.len(), 1_001);
    assert_eq!(lines[0], "f0000.txt");
    assert_eq!(lines[999], "f0999.txt");
    assert_eq!(lines[1_000], "[showing 1000 of 1005 files; use a narrower pattern or path]");
}

// ---------------------------------------------------------------------------------------------
// grep

#[tokio::test]
async fn grep_reports_sorted_path_line_text() {
    let fixture = fixture();
    fixture.write(".gitignore", "ignored.txt\n");
    fixture.write("b.rs", "fn b() {}\n// TODO later\n");
    fixture.write("a/z.rs", "// TODO first\nlet x = 1;\n// TODO again\n");
    fixture.write("ignored.txt", "TODO hidden by gitignore\n");
    fixture.write("blob.bin", "TODO\0binary\n");
    fixture.write("notes.md", "TODO in markdown\n");
    let content = ok(fixture.call("grep", json!({"pattern": "TODO"})).await);
    assert_eq!(
        content,
        "a/z.rs:1:// TODO first\na/z.rs:3:// TODO again\nb.rs:2:// TODO later\nnotes.md:1:TODO in markdown"
    );
    let only_rs = ok(fixture.call("grep", json!({"pattern": "TODO", "glob": "*.rs"})).await);
    assert_eq!(only_rs, "a/z.rs:1:// TODO first\na/z.rs:3:// TODO again\nb.rs:2:// TODO later");
    let in_dir = ok(fixture.call("grep", json!({"pattern": "again", "path": "a"})).await);
    assert_eq!(in_dir, "a/z.rs:3:// TODO again");
    let one_file = ok(fixture.call("grep", json!({"pattern": "^fn", "path": "b.rs"})).await);
    assert_eq!(one_file, "b.rs:1:fn b() {}");
    let none = ok(fixture.call("grep", json!({"pattern": "nowhere"})).await);
    assert_eq!(none, "no matches for `nowhere` in .");
    let message = err(fixture.call("grep", json!({"pattern": "("})).await);
    assert!(message.contains("invalid regular expression"), "{message}");
}

#[tokio::test]
async fn glob_and_grep_sort_paths_component_by_component() {
    let fixture = fixture();
    fixture.write("a.rs", "hit\n");
    fixture.write("a/z.rs", "hit\n");
    fixture.write("a-b.rs", "hit\n");
    assert_eq!(
        ok(fixture.call("glob", json!({"pattern": "./**/*.rs"})).await),
        "a/z.rs\na-b.rs\na.rs"
    );
    assert_eq!(
        ok(fixture.call("grep", json!({"pattern": "hit"})).await),
        "a/z.rs:1:hit\na-b.rs:1:hit\na.rs:1:hit"
    );
}

#[tokio::test]
async fn special_files_are_refused_instead_of_blocking() {
    let fixture = fixture();
    let status =
        std::process::Command::new("mkfifo").arg(fixture.root().join("fifo")).status().unwrap();
    assert!(status.success());
    let message = err(fixture.call("read_file", json!({"path": "fifo"})).await);
    assert!(message.contains("not a regular file"), "{message}");
    let message = err(fixture.call("grep", json!({"pattern": "x", "path": "fifo"})).await);
    assert!(message.contains("not a regular file"), "{message}");
    let message = err(fixture.call("write_file", json!({"path": "fifo", "content": "x"})).await);
    assert!(message.contains("not a regular file"), "{message}");
    assert_eq!(ok(fixture.call("grep", json!({"pattern": "x"})).await), "no matches for `x` in .");
}

#[tokio::test]
async fn grep_cap_cuts_with_a_note() {
    let fixture = fixture();
    let text: String = (0..600).map(|number| format!("match {number}\n")).collect();
    fixture.write("many.txt", &text);
    let content = ok(fixture.call("grep", json!({"pattern": "match"})).await);
    let lines: Vec<&str> = content.lines().collect();
    assert_eq!(lines.len(), 501);
    assert_eq!(lines[499], "many.txt:500:match 499");
    assert_eq!(
        lines[500],
        "[stopped after 500 matching lines; more matches not shown; use a narrower pattern, path or glob]"
    );

    let small = fixture_with(ToolConfig { output_cap_bytes: 40, ..ToolConfig::default() });
    small.write("many.txt", &text);
    let content = ok(small.call("grep", json!({"pattern": "match"})).await);
    assert_eq!(
        content,
        "many.txt:1:match 0\nmany.txt:2:match 1\n[stopped after 2 matching lines; more matches \
         not shown; use a narrower pattern, path or glob]"
    );
}

// ---------------------------------------------------------------------------------------------
// write_file and edit_file

#[tokio::test]
async fn write_file_creates_parents_and_reports_bytes() {
    let fixture = fixture();
    let content = ok(fixture
        .call("write_file", json!({"path": "deep/er/new.txt", "content": "hello"}))
        .await);
    assert_eq!(content, "created deep/er/new.txt (5 bytes)");
    assert_eq!(fixture.read("deep/er/new.txt"), "hello");
    let content = ok(fixture
        .call("write_file", json!({"path": "deep/er/new.txt", "content": "héllo!"}))
        .await);
    assert_eq!(content, "wrote deep/er/new.txt (7 bytes)");
    assert_eq!(fixture.read("deep/er/new.txt"), "héllo!");
    assert!(
        err(fixture.call("write_file", json!({"path": "deep", "content": "x"})).await)
            .contains("directory")
    );
}

#[tokio::test]
async fn edit_file_replaces_exactly_one_match() {
    let fixture = fixture();
    fixture.write("a.rs", "fn one() {}\nfn two() {}\n");
    let content = ok(fixture
        .call("edit_file", json!({"path": "a.rs", "old_string": "fn two", "new_string": "fn deux"}))
        .await);
    assert_eq!(content, "edited a.rs (1 replacement at line 2)");
    assert_eq!(fixture.read("a.rs"), "fn one() {}\nfn deux() {}\n");
}

#[tokio::test]
async fn edit_file_with_no_match_says_not_found() {
    let fixture = fixture();
    fixture.write("a.rs", "fn one() {}\n");
    let message = err(fixture
        .call("edit_file", json!({"path": "a.rs", "old_string": "fn  one", "new_string": "x"}))
        .await);
    assert!(message.contains("not found"), "{message}");
    assert_eq!(fixture.read("a.rs"), "fn one() {}\n");
}

#[tokio::test]
async fn edit_file_with_two_matches_says_how_many_and_to_add_context() {
    let fixture = fixture();
    fixture.write("a.rs", "let x = 1;\nlet x = 1;\n");
    let message = err(fixture
        .call("edit_file", json!({"path": "a.rs", "old_string": "let x", "new_string": "let y"}))
        .await);
    assert!(message.contains("occurs 2 times"), "{message}");
    assert!(message.contains("surrounding lines"), "{message}");
    assert_eq!(fixture.read("a.rs"), "let x = 1;\nlet x = 1;\n");
    // Overlapping occurrences are ambiguous too.
    fixture.write("b.txt", "aaa");
    let message = err(fixture
        .call("edit_file", json!({"path": "b.txt", "old_string": "aa", "new_string": "b"}))
        .await);
    assert!(message.contains("occurs 2 times"), "{message}");
    let message = err(fixture
        .call("edit_file", json!({"path": "b.txt", "old_string": "", "new_string": "b"}))
        .await);
    assert!(message.contains("empty"), "{message}");
}

// ---------------------------------------------------------------------------------------------
// run_command

/// Whether a process is still running: `kill -0` succeeds and it is not a zombie (a killed
/// orphan may wait for a reaper that never comes in a container).
fn alive(pid: i32) -> bool {
    if kill(Pid::from_raw(pid), None).is_err() {
        return false;
    }
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let state = stat.rsplit_once(") ").map(|(_, rest)| rest.chars().next());
            state != Some(Some('Z'))
        }
        Err(_) => false,
    }
}

/// Waits (up to five seconds) for `pid` to be gone; true if it is.
async fn gone(pid: i32) -> bool {
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        if !alive(pid) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

async fn read_pid(path: &Path) -> i32 {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(text) = fs::read_to_string(path)
            && let Ok(pid) = text.trim().parse()
        {
            return pid;
        }
        assert!(Instant::now() < deadline, "the command never wrote {}", path.display());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn run_command_reports_output_and_exit_code() {
    let fixture = fixture();
    let content =
        ok(fixture.call("run_command", json!({"command": "echo out; echo err >&2"})).await);
    assert_eq!(content, "out\nerr\n[exit code 0]");
    let content =
        err(fixture.call("run_command", json!({"command": "printf partial; exit 3"})).await);
    assert_eq!(content, "partial\n[exit code 3]");
    let content = ok(fixture.call("run_command", json!({"command": "true"})).await);
    assert_eq!(content, "(no output)\n[exit code 0]");
    let content = err(fixture.call("run_command", json!({"command": "kill -9 $$"})).await);
    assert_eq!(content, "(no output)\n[killed by signal 9 (SIGKILL)]");
}

#[tokio::test]
async fn run_command_gets_a_built_environment_not_the_daemons() {
    // Cargo runs tests with variables of its own (CARGO_MANIFEST_DIR...): none may reach a
    // command, which sees PATH, HOME, LANG and TERM at most.
    assert!(std::env::var_os("CARGO_MANIFEST_DIR").is_some());
    let fixture = fixture();
    let content =
        ok(fixture.call("run_command", json!({"command": "env | cut -d= -f1 | sort"})).await);
    let names: Vec<&str> = content.lines().filter(|line| !line.starts_with('[')).collect();
    let allowed = ["PATH", "HOME", "LANG", "TERM", "PWD", "SHLVL", "_", "OLDPWD"];
    assert!(names.iter().all(|name| allowed.contains(name)), "{names:?}");
    assert!(names.contains(&"PATH"), "{names:?}");
}

#[tokio::test]
async fn run_command_runs_in_the_workspace_with_null_stdin() {
    let fixture = fixture();
    let content = ok(fixture.call("run_command", json!({"command": "pwd; cat; echo done"})).await);
    assert_eq!(content, format!("{}\ndone\n[exit code 0]", fixture.root().display()));
}

#[tokio::test]
async fn run_command_output_cap_keeps_head_and_tail() {
    let config = ToolConfig { output_cap_bytes: 20, ..ToolConfig::default() };
    let fixture = fixture_with(config);
    let command = "printf 'HEAD-'; i=0; while [ $i -lt 1000 ]; do printf x; i=$((i+1)); done; printf -- '-TAIL'";
    let content = ok(fixture.call("run_command", json!({"command": command})).await);
    assert_eq!(
        content,
        "HEAD-xxxxx\n[... 990 bytes of output cut; 1010 bytes in total ...]\nxxxxx-TAIL\n[exit code 0]"
    );
}

#[tokio::test]
async fn run_command_timeout_kills_the_whole_process_group() {
    let fixture = fixture();
    let started = Instant::now();
    let output = fixture
        .call(
            "run_command",
            json!({"command": "sleep 30 & echo $! > bg.pid; echo started; sleep 30", "timeout_secs": 1}),
        )
        .await;
    let content = err(output);
    assert!(started.elapsed() < Duration::from_secs(10), "took {:?}", started.elapsed());
    assert_eq!(
        content,
        "started\n[timed out after 1 s; the command and all its processes were killed]"
    );
    let pid = read_pid(&fixture.root().join("bg.pid")).await;
    assert!(gone(pid).await, "background process {pid} survived the timeout");
}

#[tokio::test]
async fn run_command_default_timeout_comes_from_the_config() {
    let config =
        ToolConfig { command_timeout: Duration::from_millis(300), ..ToolConfig::default() };
    let fixture = fixture_with(config);
    let content = err(fixture.call("run_command", json!({"command": "sleep 30"})).await);
    assert_eq!(
        content,
        "(no output)\n[timed out after 300 ms; the command and all its processes were killed]"
    );
}

#[tokio::test]
async fn run_command_cancel_kills_the_whole_process_group_promptly() {
    let fixture = fixture();
    let cancel = CancellationToken::new();
    let toolbox = fixture.toolbox.clone();
    let token = cancel.clone();
    let call = tokio::spawn(async move {
        let arguments = json!({"command": "sleep 30 & echo $! > bg.pid; sleep 30"}).to_string();
        toolbox.call("run_command", &arguments, &token).await
    });
    let pid = read_pid(&fixture.root().join("bg.pid")).await;
    assert!(alive(pid));
    let cancelled_at = Instant::now();
    cancel.cancel();
    let output = tokio::time::timeout(Duration::from_secs(3), call).await.unwrap().unwrap();
    assert!(cancelled_at.elapsed() < Duration::from_secs(2), "took {:?}", cancelled_at.elapsed());
    assert_eq!(
        err(output),
        "(no output)\n[cancelled; the command and all its processes were killed]"
    );
    assert!(gone(pid).await, "background process {pid} survived the cancellation");
}

#[tokio::test]
async fn run_command_dropped_call_kills_the_whole_process_group() {
    let fixture = fixture();
    let arguments = json!({"command": "sleep 30 & echo $! > bg.pid; sleep 30"}).to_string();
    let cancel = CancellationToken::new();
    let call = fixture.toolbox.call("run_command", &arguments, &cancel);
    let pid_file = fixture.root().join("bg.pid");
    let waiter = async {
        let pid = read_pid(&pid_file).await;
        // Keep the call pending for a moment after the pid appeared, then drop it.
        tokio::time::sleep(Duration::from_millis(50)).await;
        pid
    };
    let pid = tokio::select! {
        output = call => panic!("the command finished early: {output:?}"),
        pid = waiter => pid,
    };
    assert!(gone(pid).await, "background process {pid} survived the dropped call");
}

#[tokio::test]
async fn run_command_kills_background_processes_left_behind() {
    let fixture = fixture();
    let started = Instant::now();
    let content =
        ok(fixture.call("run_command", json!({"command": "sleep 30 & echo $! > bg.pid"})).await);
    assert!(started.elapsed() < Duration::from_secs(5), "took {:?}", started.elapsed());
    assert_eq!(
        content,
        "(no output)\n[exit code 0]\n[background processes the command left running were killed]"
    );
    let pid = read_pid(&fixture.root().join("bg.pid")).await;
    assert!(gone(pid).await, "background process {pid} survived");
}

#[tokio::test]
async fn run_command_rejects_bad_arguments() {
    let fixture = fixture();
    assert!(err(fixture.call("run_command", json!({"command": "  "})).await).contains("empty"));
    let message =
        err(fixture.call("run_command", json!({"command": "true", "timeout_secs": 0})).await);
    assert!(message.contains("out of range"), "{message}");
    let message = err(fixture.call("run_command", json!({})).await);
    assert!(message.contains("missing field `command`"), "{message}");
}

// ---------------------------------------------------------------------------------------------
// call errors, access, descriptions

#[tokio::test]
async fn call_turns_every_failure_into_an_error_output() {
    let fixture = fixture();
    let message = err(fixture.call_raw("rm_rf", "{}").await);
    assert!(
        message.starts_with("unknown tool `rm_rf`; available tools: edit_file, glob"),
        "{message}"
    );
    let message = err(fixture.call_raw("read_file", "{\"path\": ").await);
    assert!(message.starts_with("invalid arguments for read_file: "), "{message}");
    let message = err(fixture.call_raw("read_file", "{}").await);
    assert!(message.contains("missing field `path`"), "{message}");
    let message = err(fixture.call_raw("read_file", r#"{"path": "a", "bogus": 1}"#).await);
    assert!(message.contains("unknown field `bogus`"), "{message}");
    let message = err(fixture.call_raw("read_file", "[1]").await);
    assert!(message.starts_with("invalid arguments for read_file: "), "{message}");
    let cancel = CancellationToken::new();
    cancel.cancel();
    let output =
        fixture.toolbox.call("write_file", r#"{"path": "x", "content": "y"}"#, &cancel).await;
    assert!(err(output).contains("cancelled"));
    assert!(!fixture.root().join("x").exists());
}

#[test]
fn access_classes_drive_approvals() {
    let fixture = fixture();
    let toolbox = &fixture.toolbox;
    for name in ["read_file", "list_dir", "glob", "grep"] {
        assert_eq!(toolbox.access(name), Some(Access::Read), "{name}");
    }
    assert_eq!(toolbox.access("write_file"), Some(Access::Write));
    assert_eq!(toolbox.access("edit_file"), Some(Access::Write));
    assert_eq!(toolbox.access("run_command"), Some(Access::Command));
    assert_eq!(toolbox.access("nope"), None);
}

#[test]
fn describe_call_is_one_line_for_approval_prompts() {
    let fixture = fixture();
    let describe =
        |name: &str, arguments: Value| fixture.toolbox.describe_call(name, &arguments.to_string());
    assert_eq!(
        describe("write_file", json!({"path": "src/a.rs", "content": "x".repeat(120)})),
        "write_file src/a.rs (120 bytes)"
    );
    assert_eq!(
        describe("run_command", json!({"command": "cargo test"})),
        "run_command: cargo test"
    );
    assert_eq!(
        describe("run_command", json!({"command": "echo a\necho b"})),
        "run_command: echo a⏎ echo b"
    );
    assert_eq!(describe("edit_file", json!({"path": "a.rs"})), "edit_file a.rs");
    assert_eq!(
        describe("read_file", json!({"path": "a.rs", "start_line": 5, "end_line": 9})),
        "read_file a.rs (lines 5-9)"
    );
    assert_eq!(describe("list_dir", json!({})), "list_dir .");
    assert_eq!(describe("grep", json!({"pattern": "fn", "glob": "*.rs"})), "grep fn in . (*.rs)");
    assert_eq!(
        describe("glob", json!({"pattern": "**/*.rs", "path": "src"})),
        "glob **/*.rs in src"
    );
    assert_eq!(
        fixture.toolbox.describe_call("write_file", "{oops"),
        "write_file (invalid arguments)"
    );
    assert_eq!(fixture.toolbox.describe_call("nope", "{}"), "unknown tool nope");
    // An approval shows the whole command, and no character can hide or reorder what runs.
    let long = describe("run_command", json!({"command": "y".repeat(500)}));
    assert_eq!(long.chars().count(), "run_command: ".len() + 500);
    let spoofed = describe("run_command", json!({"command": "echo ok\u{202e}hs | live lruc"}));
    assert_eq!(spoofed, "run_command: echo ok\\u{202e}hs | live lruc");
}

// ---------------------------------------------------------------------------------------------
// confinement

#[tokio::test]
async fn paths_climbing_out_of_the_workspace_are_refused() {
    let fixture = fixture();
    fixture.write("sub/a.txt", "inside\n");
    let outside_name = fixture.outside().file_name().unwrap().to_str().unwrap().to_owned();
    let sibling_secret = format!("../{outside_name}/secret.txt");
    let absolute_secret = fixture.outside().join("secret.txt").display().to_string();
    for path in [
        "../../etc/passwd",
        "/etc/passwd",
        "sub/../../x",
        sibling_secret.as_str(),
        absolute_secret.as_str(),
    ] {
        fixture.refused("read_file", json!({"path": path}), "outside the workspace").await;
        fixture
            .refused(
                "edit_file",
                json!({"path": path, "old_string": "top", "new_string": "x"}),
                "outside the workspace",
            )
            .await;
    }
    let read = fixture.call("read_file", json!({"path": "/etc/passwd"})).await;
    assert!(!read.content.contains("root:"), "{read:?}");
    for path in ["..", "/", "/etc", "../..", "sub/../.."] {
        fixture.refused("list_dir", json!({"path": path}), "outside the workspace").await;
        fixture
            .refused("glob", json!({"pattern": "*", "path": path}), "outside the workspace")
            .await;
        fixture
            .refused("grep", json!({"pattern": "top", "path": path}), "outside the workspace")
            .await;
    }
    let new_sibling = format!("../{outside_name}/new.txt");
    let new_nested = format!("../{outside_name}/dir/new.txt");
    let absolute_new = fixture.outside().join("abs.txt").display().to_string();
    for path in [
        sibling_secret.as_str(),
        new_sibling.as_str(),
        new_nested.as_str(),
        absolute_new.as_str(),
        "sub/../../escape.txt",
    ] {
        fixture
            .refused(
                "write_file",
                json!({"path": path, "content": "pwned"}),
                "outside the workspace",
            )
            .await;
    }
    fixture.secret_is_untouched();
    assert!(!fixture.root().parent().unwrap().join("escape.txt").exists());
}

#[tokio::test]
async fn absolute_paths_inside_the_workspace_are_allowed() {
    let fixture = fixture();
    fixture.write("sub/a.txt", "inside\n");
    let absolute = fixture.root().join("sub/a.txt").display().to_string();
    assert_eq!(ok(fixture.call("read_file", json!({"path": absolute})).await), "     1\tinside\n");
    let absolute_new = fixture.root().join("sub/b.txt").display().to_string();
    ok(fixture.call("write_file", json!({"path": absolute_new, "content": "b"})).await);
    assert_eq!(fixture.read("sub/b.txt"), "b");
    // `..` that stays inside is fine.
    assert_eq!(
        ok(fixture.call("read_file", json!({"path": "sub/../sub/b.txt"})).await),
        "     1\tb\n"
    );
}

#[tokio::test]
async fn symlinked_file_pointing_outside_is_refused() {
    let fixture = fixture();
    symlink(fixture.outside().join("secret.txt"), fixture.root().join("leak.txt")).unwrap();
    fixture.refused("read_file", json!({"path": "leak.txt"}), "outside the workspace").await;
    fixture
        .refused(
            "write_file",
            json!({"path": "leak.txt", "content": "pwned"}),
            "outside the workspace",
        )
        .await;
    fixture
        .refused(
            "edit_file",
            json!({"path": "leak.txt", "old_string": "top", "new_string": "x"}),
            "outside the workspace",
        )
        .await;
    fixture
        .refused("grep", json!({"pattern": "top", "path": "leak.txt"}), "outside the workspace")
        .await;
    // Searching the workspace does not look through the link.
    assert_eq!(
        ok(fixture.call("grep", json!({"pattern": "top"})).await),
        "no matches for `top` in ."
    );
    assert_eq!(
        ok(fixture.call("glob", json!({"pattern": "**/*"})).await),
        "no files match `**/*` in ."
    );
    assert_eq!(ok(fixture.call("list_dir", json!({})).await), "leak.txt@");
    fixture.secret_is_untouched();
}

#[tokio::test]
async fn symlinked_directory_pointing_outside_is_refused() {
    let fixture = fixture();
    symlink(fixture.outside(), fixture.root().join("out")).unwrap();
    fixture.refused("read_file", json!({"path": "out/secret.txt"}), "outside the workspace").await;
    fixture.refused("list_dir", json!({"path": "out"}), "outside the workspace").await;
    fixture.refused("list_dir", json!({"path": "out/"}), "outside the workspace").await;
    fixture
        .refused("grep", json!({"pattern": "top", "path": "out"}), "outside the workspace")
        .await;
    fixture.refused("glob", json!({"pattern": "*", "path": "out"}), "outside the workspace").await;
    for path in ["out/secret.txt", "out/new.txt", "out/missing/dir/new.txt", "out/../out/new.txt"] {
        fixture
            .refused(
                "write_file",
                json!({"path": path, "content": "pwned"}),
                "outside the workspace",
            )
            .await;
    }
    fixture
        .refused(
            "edit_file",
            json!({"path": "out/secret.txt", "old_string": "top", "new_string": "x"}),
            "outside the workspace",
        )
        .await;
    assert_eq!(
        ok(fixture.call("grep", json!({"pattern": "top"})).await),
        "no matches for `top` in ."
    );
    assert_eq!(
        ok(fixture.call("glob", json!({"pattern": "**/*"})).await),
        "no files match `**/*` in ."
    );
    assert_eq!(ok(fixture.call("list_dir", json!({})).await), "out@");
    fixture.secret_is_untouched();
}

#[tokio::test]
async fn dangling_symlinks_are_not_written_through() {
    let fixture = fixture();
    let target = fixture.outside().join("created-by-link.txt");
    symlink(&target, fixture.root().join("dangling")).unwrap();
    fixture
        .refused("write_file", json!({"path": "dangling", "content": "pwned"}), "dangling symlink")
        .await;
    fixture
        .refused(
            "write_file",
            json!({"path": "dangling/x.txt", "content": "pwned"}),
            "dangling symlink",
        )
        .await;
    assert!(!target.exists());
    fixture.secret_is_untouched();
}

#[tokio::test]
async fn symlinks_inside_the_workspace_are_followed() {
    let fixture = fixture();
    fixture.write("real/a.txt", "real\n");
    symlink(fixture.root().join("real"), fixture.root().join("alias")).unwrap();
    assert_eq!(
        ok(fixture.call("read_file", json!({"path": "alias/a.txt"})).await),
        "     1\treal\n"
    );
    ok(fixture.call("write_file", json!({"path": "alias/b.txt", "content": "b"})).await);
    assert_eq!(fixture.read("real/b.txt"), "b");
    assert_eq!(ok(fixture.call("list_dir", json!({"path": "alias"})).await), "a.txt\nb.txt");
}

#[test]
fn workspace_root_is_canonical() {
    let base = TempDir::new().unwrap();
    fs::create_dir(base.path().join("real")).unwrap();
    symlink(base.path().join("real"), base.path().join("link")).unwrap();
    let workspace = Workspace::new(&base.path().join("link/.")).unwrap();
    assert_eq!(workspace.root(), fs::canonicalize(base.path().join("real")).unwrap());
    assert!(Workspace::new(&base.path().join("missing")).is_err());
}

// ---------------------------------------------------------------------------------------------
// schemas

#[test]
fn schemas_are_deterministic_and_sorted() {
    let first = fixture();
    let second = fixture_with(ToolConfig {
        command_timeout: Duration::from_secs(5),
        output_cap_bytes: 7,
        read_cap_lines: 3,
    });
    let first_json = serde_json::to_string(&first.toolbox.schemas()).unwrap();
    let second_json = serde_json::to_string(&second.toolbox.schemas()).unwrap();
    assert_eq!(first_json, second_json);
    let names: Vec<String> =
        first.toolbox.schemas().into_iter().map(|schema| schema.name).collect();
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(names, sorted);
    for schema in first.toolbox.schemas() {
        assert!(first.toolbox.access(&schema.name).is_some());
        assert_eq!(schema.parameters["type"], "object");
        assert_eq!(schema.parameters["additionalProperties"], false);
        for required in schema.parameters["required"].as_array().unwrap() {
            assert!(schema.parameters["properties"].get(required.as_str().unwrap()).is_some());
        }
    }
}

#[test]
fn schemas_snapshot() {
    let fixture = fixture();
    let actual = serde_json::to_string_pretty(&fixture.toolbox.schemas()).unwrap() + "\n";
    // `UPDATE_EXPECT=1 cargo test` rewrites the snapshot (the expect-test convention).
    if std::env::var_os("UPDATE_EXPECT").is_some() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/src/tools/schemas.snapshot.json");
        fs::write(path, &actual).unwrap();
        return;
    }
    let expected = include_str!("schemas.snapshot.json");
    assert!(
        actual == expected,
        "the tool schemas changed; they are part of the byte-stable request header, so a change \
         invalidates every cached prefix. If it is intended, rerun with UPDATE_EXPECT=1.\n\
         actual:\n{actual}"
    );
}

// ---------------------------------------------------------------------------------------------
// races and hidden paths

/// Another session's command swaps a workspace directory and a symlink to the outside,
/// atomically, in a loop, while this session's file tools run: no tool ever shows the outside
/// file or writes outside, however the race falls (bounded: two seconds of racing).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rename_race_never_leads_a_file_tool_outside() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    let fixture = fixture();
    fixture.write("dir/secret.txt", "inside\n");
    symlink(fixture.outside(), fixture.root().join("swap")).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let swaps = Arc::new(AtomicU64::new(0));
    let racer = {
        let (stop, swaps, root) = (Arc::clone(&stop), Arc::clone(&swaps), fixture.root());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                nix::fcntl::renameat2(
                    nix::fcntl::AT_FDCWD,
                    &root.join("dir"),
                    nix::fcntl::AT_FDCWD,
                    &root.join("swap"),
                    nix::fcntl::RenameFlags::RENAME_EXCHANGE,
                )
                .unwrap();
                swaps.fetch_add(1, Ordering::Relaxed);
            }
        })
    };
    let deadline = Instant::now() + Duration::from_secs(2);
    let mut calls = 0;
    while Instant::now() < deadline {
        let read = fixture.call("read_file", json!({"path": "dir/secret.txt"})).await;
        let grep = fixture.call("grep", json!({"pattern": "secret", "path": "dir"})).await;
        let list = fixture.call("list_dir", json!({"path": "dir"})).await;
        for output in [&read, &grep, &list] {
            assert!(!output.content.contains("top secret"), "leaked: {output:?}");
        }
        let _ = fixture.call("write_file", json!({"path": "dir/new.txt", "content": "w"})).await;
        let _ = fixture.call("write_file", json!({"path": "dir/secret.txt", "content": "x"})).await;
        calls += 1;
    }
    stop.store(true, Ordering::Relaxed);
    racer.join().unwrap();
    assert!(swaps.load(Ordering::Relaxed) > 100, "the racer barely ran");
    assert!(calls > 10, "the tools barely ran ({calls} rounds)");
    fixture.secret_is_untouched();
}

/// A workspace that holds hidden paths (one that is `$HOME`): the file tools refuse them,
/// existing or not, directly or through a symlink, and searches skip them.
#[tokio::test]
async fn hidden_paths_are_out_of_reach_of_every_file_tool() {
    let workspace = TempDir::new().unwrap();
    let root = fs::canonicalize(workspace.path()).unwrap();
    fs::create_dir_all(root.join("state")).unwrap();
    fs::write(root.join("state/deepseek-api-key"), "sk-hidden-key\n").unwrap();
    fs::create_dir_all(root.join("src")).unwrap();
    fs::write(root.join("src/a.txt"), "sk-hidden-key is not here\n").unwrap();
    symlink(root.join("state"), root.join("innocent")).unwrap();
    let hidden = vec![root.join("state"), root.join(".config/dsh")];
    let toolbox =
        Toolbox::new(Workspace::with_hidden(&root, hidden).unwrap(), ToolConfig::default());
    let call = |name: &'static str, arguments: Value| {
        let toolbox = toolbox.clone();
        async move { toolbox.call(name, &arguments.to_string(), &CancellationToken::new()).await }
    };
    for path in ["state/deepseek-api-key", "innocent/deepseek-api-key"] {
        let output = call("read_file", json!({"path": path})).await;
        assert!(output.is_error && output.content.contains("private to dsh"), "{output:?}");
    }
    let grep = ok(call("grep", json!({"pattern": "sk-hidden"})).await);
    assert_eq!(grep, "src/a.txt:1:sk-hidden-key is not here");
    let glob = ok(call("glob", json!({"pattern": "**/*key*"})).await);
    assert!(glob.starts_with("no files match"), "{glob}");
    let list = ok(call("list_dir", json!({})).await);
    assert!(!list.contains("state"), "{list}");
    let write = call(
        "write_file",
        json!({"path": ".config/dsh/config.toml", "content": "[mcp.servers.x]\ncommand = \"sh\""}),
    )
    .await;
    assert!(write.is_error && write.content.contains("private to dsh"), "{write:?}");
    assert!(!root.join(".config").exists());
}

/// An ignore file that is a FIFO (nobody ever writes to it) or a link to `/dev/zero` neither
/// stalls a search nor fills memory: it counts as absent, and the rest of the rules apply.
#[tokio::test]
async fn an_ignore_file_that_is_a_fifo_or_a_device_stalls_no_search() {
    let fixture = fixture();
    fixture.write("a/found.txt", "needle\n");
    fixture.write("b/.gitignore", "skipped.txt\n");
    fixture.write("b/skipped.txt", "needle\n");
    nix::unistd::mkfifo(&fixture.root().join(".gitignore"), nix::sys::stat::Mode::S_IRWXU).unwrap();
    symlink("/dev/zero", fixture.root().join("a/.ignore")).unwrap();
    let started = Instant::now();
    let grep = tokio::time::timeout(
        Duration::from_secs(20),
        fixture.call("grep", json!({"pattern": "needle"})),
    )
    .await
    .expect("grep stalled on the FIFO");
    assert_eq!(ok(grep), "a/found.txt:1:needle");
    let glob = fixture.call("glob", json!({"pattern": "**/*.txt"})).await;
    assert_eq!(ok(glob), "a/found.txt");
    assert!(started.elapsed() < Duration::from_secs(20));
}

// ---------------------------------------------------------------------------------------------
// update_plan

#[tokio::test]
async fn update_plan_answers_briefly_and_refuses_what_breaks_the_rules() {
    let fixture = fixture();
    assert_eq!(fixture.toolbox.access("update_plan"), Some(Access::Plan));
    let plan = json!({"plan": [
        {"step": "Read the code", "status": "completed"},
        {"step": "Fix it", "status": "in_progress"},
        {"step": "Test", "status": "pending"}]});
    let output = fixture.call("update_plan", plan.clone()).await;
    assert_eq!(output, ToolOutput::success("Plan updated: 1 of 3 steps completed.".to_owned()));
    assert_eq!(
        fixture.toolbox.describe_call("update_plan", &plan.to_string()),
        "update_plan (3 steps)"
    );
    let two = json!({"plan": [
        {"step": "a", "status": "in_progress"}, {"step": "b", "status": "in_progress"}]});
    let output = fixture.call("update_plan", two).await;
    assert!(output.is_error);
    assert_eq!(
        output.content,
        "update_plan refused: at most one step may be in_progress at a time, and steps 1, 2 \
         are: mark the others pending or completed; the plan is unchanged"
    );
    let cases = [
        (json!({"plan": [{"step": "", "status": "pending"}]}), "step 1 has no text"),
        (json!({"plan": [{"step": "a", "status": "done"}]}), "unknown variant `done`"),
        (json!({"plan": [{"step": "a", "status": "pending", "note": 1}]}), "unknown field `note`"),
        (json!({"steps": []}), "unknown field `steps`"),
        (json!({"plan": vec![json!({"step": "s", "status": "pending"}); 51]}), "at most 50 steps"),
    ];
    for (arguments, needle) in cases {
        let output = fixture.call("update_plan", arguments.clone()).await;
        assert!(output.is_error && output.content.contains(needle), "{arguments}: {output:?}");
    }
    let cleared = fixture.call("update_plan", json!({"plan": []})).await;
    assert_eq!(cleared, ToolOutput::success("Plan cleared.".to_owned()));
}

// ---------------------------------------------------------------------------------------------
// web_fetch (its behavior against a server is in web/tests.rs)

#[test]
fn web_fetch_is_class_web_changes_no_file_and_is_described_whole() {
    let fixture = fixture();
    assert_eq!(fixture.toolbox.access("web_fetch"), Some(Access::Web));
    assert!(!super::may_change_files("web_fetch"));
    let url = format!("https://example.com/{}?q=\u{202e}x", "a".repeat(300));
    let arguments = json!({"url": url, "format": "text"}).to_string();
    let described = fixture.toolbox.describe_call("web_fetch", &arguments);
    // The whole URL (a person approves where the request goes), invisible characters escaped.
    assert_eq!(
        described,
        format!("web_fetch https://example.com/{}?q=\\u{{202e}}x (text)", "a".repeat(300))
    );
    let default = fixture.toolbox.describe_call("web_fetch", r#"{"url": "https://a.example/"}"#);
    assert_eq!(default, "web_fetch https://a.example/ (markdown)");
}

#[tokio::test]
async fn read_file_tells_an_image_by_its_bytes_and_keeps_it_only_within_the_limit() {
    let fixture = fixture();
    // A GIF named .txt: an image (the name is not looked at); 10x20 pixels.
    let mut gif = b"GIF89a\x0a\x00\x14\x00".to_vec();
    gif.extend_from_slice(&[0; 40]);
    fs::write(fixture.root().join("notes.txt"), &gif).unwrap();
    let output = fixture.call("read_file", json!({"path": "notes.txt"})).await;
    assert!(!output.is_error, "{}", output.content);
    assert_eq!(output.content, "notes.txt: image/gif, 50 bytes, 10x20 pixels");
    let image = output.image.unwrap();
    assert_eq!(image.bytes.as_deref(), Some(&gif[..]));
    let seen = output.seen.unwrap();
    assert_eq!(seen.sha256, dsh_provider::sha256_hex(&gif));
    assert_eq!(seen.text, None);
    // Over the limit: described, hashed whole, its bytes not kept.
    let mut big = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\x02\0\0\0\x03".to_vec();
    big.resize(dsh_session::MAX_IMAGE_BYTES as usize + 10, 1);
    fs::write(fixture.root().join("big.png"), &big).unwrap();
    let output = fixture.call("read_file", json!({"path": "big.png"})).await;
    let image = output.image.unwrap();
    assert_eq!((image.size, image.pixels, image.bytes), (big.len() as u64, Some((2, 3)), None));
    assert_eq!(output.seen.unwrap().sha256, dsh_provider::sha256_hex(&big));
    // A text file still reads as lines (its first bytes were looked at, then read on).
    fixture.write("a.txt", "one\ntwo\n");
    let output = fixture.call("read_file", json!({"path": "a.txt"})).await;
    assert_eq!(output.content, "     1\tone\n     2\ttwo\n");
    assert!(output.image.is_none());
}
