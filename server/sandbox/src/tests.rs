//! Unit tests: configuration, plans, carving, denial diagnosis, decisions and status. The
//! helper itself runs in the end-to-end tests (`tests/cli/sandbox.rs`), which have the real
//! `dsh` binary to launch it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::diagnose::{NETWORK_OFF, denials};
use crate::plan::{Layers, Plan, PlanInputs, carve};
use crate::policy::{ConfigError, Feature, SandboxConfig, SandboxPolicy};
use crate::probe::{Availability, Support};
use crate::runtime::Sandbox;

fn both() -> Support {
    Support {
        landlock: Availability::available("Landlock ABI 7".to_owned()),
        userns: Availability::available("namespaces".to_owned()),
    }
}

fn plan_for(workspace: &Path, layers: Layers) -> Plan {
    let inputs = PlanInputs {
        workspace: workspace.to_path_buf(),
        tmp: None,
        hidden: Vec::new(),
        home: None,
        path: Vec::new(),
        toolchain_vars: Vec::new(),
        runtime_dir: None,
    };
    Plan::build(&SandboxConfig::default(), layers, &inputs)
}

#[test]
fn policies_and_features_parse_by_name() {
    assert_eq!("workspace-write".parse(), Ok(SandboxPolicy::WorkspaceWrite));
    assert_eq!("read-only".parse(), Ok(SandboxPolicy::ReadOnly));
    assert_eq!("full".parse(), Ok(SandboxPolicy::Full));
    assert_eq!("landlock".parse(), Ok(Feature::Landlock));
    assert_eq!("userns".parse(), Ok(Feature::Userns));
    assert!(matches!("none".parse::<SandboxPolicy>(), Err(ConfigError::Policy(_))));
    assert!(matches!("seccomp".parse::<Feature>(), Err(ConfigError::Feature(_))));
    let list: Vec<&str> = SandboxConfig::split_list("A, B:C,,").collect();
    assert_eq!(list, ["A", "B", "C"]);
}

#[test]
fn the_provider_key_and_bad_names_are_refused_as_command_variables() {
    let mut config = SandboxConfig { env: vec!["CARGO_HOME".to_owned()], ..Default::default() };
    assert_eq!(config.validate(&["DEEPSEEK_API_KEY"]), Ok(()));
    config.env.push("DEEPSEEK_API_KEY".to_owned());
    assert!(matches!(config.validate(&["DEEPSEEK_API_KEY"]), Err(ConfigError::Forbidden(_))));
    config.env = vec!["1BAD".to_owned()];
    assert!(matches!(config.validate(&[]), Err(ConfigError::EnvName(_))));
    let config = SandboxConfig { read: vec![PathBuf::from("rel")], ..Default::default() };
    assert!(matches!(config.validate(&[]), Err(ConfigError::RelativeRead(_))));
}

#[test]
fn a_workspace_write_plan_writes_the_workspace_and_the_private_tmp_only() {
    let root = tempfile::tempdir().unwrap();
    let root = root.path().canonicalize().unwrap();
    for dir in ["workspace", "tmp", "home/.cargo", "home/.rustup", "state"] {
        std::fs::create_dir_all(root.join(dir)).unwrap();
    }
    std::fs::write(root.join("home/.cargo/credentials.toml"), "token").unwrap();
    let inputs = PlanInputs {
        workspace: root.join("workspace"),
        tmp: Some(root.join("tmp")),
        hidden: vec![root.join("state")],
        home: Some(root.join("home")),
        path: vec![root.join("home/.cargo/bin"), PathBuf::from("relative")],
        toolchain_vars: Vec::new(),
        runtime_dir: None,
    };
    let layers = Layers { landlock: true, namespaces: true };
    let plan = Plan::build(&SandboxConfig::default(), layers, &inputs);
    assert_eq!(plan.write, vec![root.join("tmp"), root.join("workspace")]);
    assert!(plan.read.contains(&root.join("home/.cargo")));
    assert!(plan.read.contains(&root.join("home/.rustup")));
    assert!(plan.read.contains(&PathBuf::from("/usr")));
    assert!(!plan.read.contains(&root.join("home")));
    assert!(plan.hide.contains(&root.join("state")));
    assert!(plan.hide.contains(&root.join("home/.cargo/credentials.toml")));
    assert!(plan.cover.is_empty(), "Landlock keeps commands out of homes: nothing to cover");
    assert!(plan.may_write(&root.join("workspace/src/a.rs")));
    assert!(!plan.may_write(&root.join("home/.bashrc")));
    assert!(!plan.may_read(&root.join("home/.bashrc")));
    assert!(!plan.may_read(&root.join("home/.cargo/credentials.toml")));
    assert!(plan.may_read(&PathBuf::from("/usr/bin/env")));

    let read_only = SandboxConfig { policy: SandboxPolicy::ReadOnly, ..Default::default() };
    let plan = Plan::build(&read_only, layers, &PlanInputs { tmp: None, ..inputs.clone() });
    assert!(plan.write.is_empty());
    assert!(plan.read.contains(&root.join("workspace")));

    let without_landlock = Layers { landlock: false, namespaces: true };
    let plan = Plan::build(&SandboxConfig::default(), without_landlock, &inputs);
    let home = root.join("home");
    assert!(plan.cover.iter().any(|tree| home.starts_with(tree)), "{:?}", plan.cover);
    assert!(plan.cover.contains(&PathBuf::from("/tmp")));
}

#[test]
fn carving_leaves_hidden_paths_and_symlinks_out_and_keeps_the_rest() {
    let root = tempfile::tempdir().unwrap();
    let root = root.path().canonicalize().unwrap();
    for dir in ["var/lib/dsh", "var/lib/apt", "var/cache", "etc"] {
        std::fs::create_dir_all(root.join(dir)).unwrap();
    }
    std::fs::write(root.join("var/lib/file"), "").unwrap();
    std::os::unix::fs::symlink("/", root.join("var/lib/escape")).unwrap();
    let mut rules = carve(&[root.join("var"), root.join("etc")], &[root.join("var/lib/dsh")]);
    rules.sort();
    assert_eq!(
        rules,
        vec![
            root.join("etc"),
            root.join("var/cache"),
            root.join("var/lib/apt"),
            root.join("var/lib/file"),
        ]
    );
    assert!(carve(&[root.join("var/lib/dsh/x")], &[root.join("var/lib/dsh")]).is_empty());
}

#[test]
fn denied_writes_reads_and_network_are_named() {
    let workspace = Path::new("/work/space");
    let mut plan = plan_for(workspace, Layers { landlock: true, namespaces: true });
    plan.write = vec![workspace.to_path_buf(), PathBuf::from("/tmp/dsh-tmp-1")];
    plan.read = vec![PathBuf::from("/etc"), PathBuf::from("/usr")];
    plan.hide = vec![PathBuf::from("/home/u/.local/state/dsh")];
    let policy = SandboxPolicy::WorkspaceWrite;
    let output = "\
sh: 1: cannot create /etc/hosts: Permission denied
touch: cannot touch '/tmp/x': Permission denied
sh: 1: cannot create ../sibling/f: Read-only file system
cat: /home/u/.local/state/dsh/deepseek-api-key: Permission denied
PermissionError: [Errno 13] Permission denied: '/work/space/ok.txt'
curl: (7) Failed to connect to 127.0.0.1 port 8080 after 0 ms: Could not connect to server
";
    assert_eq!(
        denials(output, &plan, policy, workspace),
        vec![
            "write outside the workspace denied: /etc/hosts".to_owned(),
            "write outside the workspace denied: /tmp/x".to_owned(),
            "write outside the workspace denied: /work/sibling/f".to_owned(),
            "read outside the paths commands may read denied: /home/u/.local/state/dsh/deepseek-api-key"
                .to_owned(),
        ]
    );
    let network = "OSError: [Errno 101] Network is unreachable\n";
    assert_eq!(denials(network, &plan, policy, workspace), vec![NETWORK_OFF.to_owned()]);
    let landlock_tcp = "  File \"<string>\", line 1, in <module>\n    socket.create_connection((\"127.0.0.1\", 80))\nPermissionError: [Errno 13] Permission denied\n";
    assert_eq!(denials(landlock_tcp, &plan, policy, workspace), vec![NETWORK_OFF.to_owned()]);
    plan.network = true;
    assert!(denials(network, &plan, policy, workspace).is_empty());
    let read_only = denials(
        "touch: cannot touch './a': Permission denied\nsh: 1: cannot create b.txt: Permission denied\n",
        &plan,
        SandboxPolicy::ReadOnly,
        Path::new("/elsewhere"),
    );
    assert_eq!(
        read_only,
        vec![
            "write denied (read-only sandbox): /elsewhere/a".to_owned(),
            "write denied (read-only sandbox): /elsewhere/b.txt".to_owned(),
        ]
    );
    assert!(denials("error: no such file\n", &plan, policy, workspace).is_empty());
    // What a covered tree looks like in the mount namespace: missing.
    let covered = "sh: 1: cannot create /home/u/.bashrc: Directory nonexistent\n\
                   cat: /usr/share/none: No such file or directory\n\
                   cat: /home/u/notes: No such file or directory\n";
    assert_eq!(
        denials(covered, &plan, policy, workspace),
        vec![
            "write outside the workspace denied: /home/u/.bashrc".to_owned(),
            "read outside the paths commands may read denied: /home/u/notes".to_owned(),
        ]
    );
}

#[test]
fn a_missing_layer_degrades_the_sandbox_and_asks_for_every_command() {
    let full_support = both();
    let sandbox = Sandbox::with_support(
        SandboxConfig::default(),
        Some("/x".into()),
        Vec::new(),
        full_support.clone(),
    );
    let status = sandbox.status();
    assert!(!status.approval_required);
    assert!(status.warnings.is_empty(), "{:?}", status.warnings);
    assert_eq!(status.in_force.len(), 3, "{:?}", status.in_force);

    let config = SandboxConfig { without: [Feature::Landlock].into(), ..Default::default() };
    let sandbox = Arc::new(Sandbox::with_support(
        config,
        Some("/x".into()),
        Vec::new(),
        full_support.clone(),
    ));
    let status = sandbox.status();
    assert!(status.approval_required);
    assert!(
        status.warnings.iter().any(|w| w.contains("no Landlock (turned off by the configuration)")),
        "{:?}",
        status.warnings
    );
    assert!(status.features[0].available && !status.features[0].used);
    let workspace = tempfile::tempdir().unwrap();
    let session = sandbox.session(workspace.path()).unwrap();
    assert!(session.confines());
    assert!(session.approval_required());
    assert_eq!(session.label(), "workspace-write (degraded: no landlock)");
    assert!(session.tmp().is_some_and(Path::is_dir));
    assert!(session.prompt_text().contains("the user approves every command"));

    let config = SandboxConfig {
        without: [Feature::Landlock, Feature::Userns].into(),
        ..Default::default()
    };
    let sandbox = Arc::new(Sandbox::with_support(
        config,
        Some("/x".into()),
        Vec::new(),
        full_support.clone(),
    ));
    let session = sandbox.session(workspace.path()).unwrap();
    assert!(!session.confines());
    assert!(session.approval_required());
    assert!(session.prompt_text().contains("unconfined"));

    let full = SandboxConfig { policy: SandboxPolicy::Full, ..Default::default() };
    let sandbox =
        Arc::new(Sandbox::with_support(full, Some("/x".into()), Vec::new(), full_support));
    let session = sandbox.session(workspace.path()).unwrap();
    assert!(!session.confines());
    assert!(!session.approval_required());
    assert_eq!(session.label(), "full (unconfined)");
    assert!(session.tmp().is_none());
}

#[test]
fn commands_get_a_built_environment_never_the_daemons() {
    let sandbox = Arc::new(Sandbox::with_support(
        SandboxConfig { env: vec!["DSH_SANDBOX_TEST_ALLOWED".to_owned()], ..Default::default() },
        Some("/usr/bin/dsh".into()),
        Vec::new(),
        both(),
    ));
    let workspace = tempfile::tempdir().unwrap();
    let session = sandbox.session(workspace.path()).unwrap();
    let command = session.shell("echo hi", false);
    assert_eq!(command.get_program(), "/usr/bin/dsh");
    let args: Vec<_> = command.get_args().map(|a| a.to_string_lossy().into_owned()).collect();
    assert_eq!(args[0], "sandbox-exec");
    assert_eq!(&args[args.len() - 4..], ["--", "sh", "-c", "echo hi"]);
    let names: Vec<_> = command
        .get_envs()
        .filter(|(_, v)| v.is_some())
        .map(|(k, _)| k.to_string_lossy().into_owned())
        .collect();
    assert!(
        names
            .iter()
            .all(|name| ["PATH", "HOME", "LANG", "TERM", "TMPDIR"].contains(&name.as_str())),
        "{names:?}"
    );
    assert!(names.contains(&"TMPDIR".to_owned()));
    let unconfined = session.shell("echo hi", true);
    assert_eq!(unconfined.get_program(), "sh");
}
