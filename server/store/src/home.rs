//! Where logs live: the state directory (`$DSH_HOME`), one directory per workspace, one file per
//! session.
//!
//! ```text
//! $DSH_HOME/workspaces/<dirname>-<hash>/sessions/<session-id>.jsonl
//! $DSH_HOME/workspaces/<dirname>-<hash>/checkpoints/   (dsh-checkpoint's: objects, index, journal)
//! $DSH_HOME/workspaces/<dirname>-<hash>/checkpoints/objects/   (the workspace's one object
//!                                           store: checkpoints' files and trees, and images)
//! ```
//!
//! `<dirname>` is the last component of the workspace's canonical path (sanitized, for people
//! browsing the directory); `<hash>` is the first 12 hex digits of the SHA-256 of the canonical
//! path, so two workspaces with the same name never share a directory.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use dsh_session::{Event, EventData, FORMAT_VERSION, ParentLink, SessionMeta, SessionPin};
use sha2::{Digest, Sha256};

use crate::error::StoreError;
use crate::fork::fork_log;
use crate::id::SessionId;
use crate::list::{SessionListing, list_sessions_in};
use crate::live::{LiveLog, SyncPolicy, now_ms};
use crate::log::{LogRead, read_log};

/// The extension of session log files.
pub const LOG_EXTENSION: &str = "jsonl";

/// The dsh state directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DshHome {
    root: PathBuf,
}

impl DshHome {
    /// A home at an explicit path.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        DshHome { root: root.into() }
    }

    /// Resolves the home from the process environment: `explicit` (e.g. a `--home` flag), else
    /// `DSH_HOME`, else `$XDG_STATE_HOME/dsh`, else `$HOME/.local/state/dsh`.
    pub fn from_env(explicit: Option<&Path>) -> Result<Self, StoreError> {
        Self::resolve(
            explicit,
            std::env::var_os("DSH_HOME"),
            std::env::var_os("XDG_STATE_HOME"),
            std::env::var_os("HOME"),
        )
    }

    /// [`DshHome::from_env`] with the variables passed in. Empty variables count as unset, and
    /// so does a relative `XDG_STATE_HOME` (the XDG spec says to ignore it).
    pub fn resolve(
        explicit: Option<&Path>,
        dsh_home: Option<OsString>,
        xdg_state_home: Option<OsString>,
        home: Option<OsString>,
    ) -> Result<Self, StoreError> {
        let set = |value: Option<OsString>| value.filter(|v| !v.is_empty()).map(PathBuf::from);
        if let Some(explicit) = explicit {
            return Ok(Self::new(explicit));
        }
        if let Some(dsh_home) = set(dsh_home) {
            return Ok(Self::new(dsh_home));
        }
        if let Some(state) = set(xdg_state_home).filter(|p| p.is_absolute()) {
            return Ok(Self::new(state.join("dsh")));
        }
        match set(home) {
            Some(home) => Ok(Self::new(home.join(".local").join("state").join("dsh"))),
            None => Err(StoreError::NoHome),
        }
    }

    /// The state directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The directory holding every workspace's directory.
    pub fn workspaces_dir(&self) -> PathBuf {
        self.root.join("workspaces")
    }

    /// The daemon's Unix socket (0600).
    pub fn socket(&self) -> PathBuf {
        self.root.join("dsh.sock")
    }

    /// The private directory a starting daemon binds its socket in before moving it to
    /// [`DshHome::socket`] (so no one connects to a half-made socket).
    pub fn socket_staging(&self, pid: u32) -> PathBuf {
        self.root.join(format!(".socket-{pid}"))
    }

    /// The instance lock: one daemon per home.
    pub fn lock_file(&self) -> PathBuf {
        self.root.join("daemon.lock")
    }

    /// The daemon's own log (the stderr of a daemon a client started).
    pub fn daemon_log(&self) -> PathBuf {
        self.root.join("daemon.log")
    }

    /// The bearer token of the network listener.
    pub fn token_file(&self) -> PathBuf {
        self.root.join("token")
    }

    /// The port the browser viewer's network front last listened on (`dsh web`).
    pub fn web_port_file(&self) -> PathBuf {
        self.root.join("web.port")
    }

    /// The DeepSeek API key file older builds kept (read when no variable holds a key).
    pub fn legacy_key_file(&self) -> PathBuf {
        self.root.join("deepseek-api-key")
    }

    /// Where "what the model saw" is written for editors that open files (read-only copies).
    pub fn saw_dir(&self) -> PathBuf {
        self.root.join("saw")
    }

    /// The store of the workspace at `path` (canonicalized, so it must exist).
    pub fn workspace(&self, path: &Path) -> Result<Workspace, StoreError> {
        let canonical = path.canonicalize().map_err(|source| StoreError::Io {
            action: "resolving workspace",
            path: path.to_owned(),
            cause: source,
        })?;
        Ok(self.workspace_canonical(canonical))
    }

    /// The store of a workspace whose path is already canonical (not checked).
    pub fn workspace_canonical(&self, canonical: PathBuf) -> Workspace {
        let dir = self.workspaces_dir().join(workspace_dir_name(&canonical));
        Workspace { canonical, dir }
    }

    /// Finds a session's log by id across all workspaces of this home.
    pub fn find_session(&self, id: &SessionId) -> Result<PathBuf, StoreError> {
        let file_name = format!("{id}.{LOG_EXTENSION}");
        let mut found = Vec::new();
        for dir in self.workspace_dirs()? {
            let candidate = dir.join("sessions").join(&file_name);
            if candidate.is_file() {
                found.push(candidate);
            }
        }
        match found.len() {
            0 => Err(StoreError::SessionNotFound { id: id.to_string(), home: self.root.clone() }),
            1 => Ok(found.remove(0)),
            _ => Err(StoreError::AmbiguousSession { id: id.to_string(), paths: found }),
        }
    }

    /// Summaries of every session of every workspace of this home.
    pub fn list_all_sessions(&self) -> Result<SessionListing, StoreError> {
        let mut all = SessionListing::default();
        for dir in self.workspace_dirs()? {
            let listing = list_sessions_in(&dir.join("sessions"))?;
            all.sessions.extend(listing.sessions);
            all.errors.extend(listing.errors);
        }
        all.sessions.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(all)
    }

    /// The workspace directories under this home that hold checkpoints, sorted, each with its
    /// sessions directory (the workspace's root is in its logs' `session/meta`).
    pub fn checkpointed_workspace_dirs(&self) -> Result<Vec<(PathBuf, PathBuf)>, StoreError> {
        Ok(self
            .workspace_dirs()?
            .into_iter()
            .filter(|dir| dir.join(CHECKPOINTS_DIR).is_dir())
            .map(|dir| (dir.join("sessions"), dir))
            .collect())
    }

    /// Every workspace directory under this home, sorted.
    pub fn workspace_dirs(&self) -> Result<Vec<PathBuf>, StoreError> {
        let root = self.workspaces_dir();
        let entries = match std::fs::read_dir(&root) {
            Ok(entries) => entries,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(source) => {
                return Err(StoreError::Io {
                    action: "listing workspaces",
                    path: root,
                    cause: source,
                });
            }
        };
        let mut dirs = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|source| StoreError::Io {
                action: "listing workspaces",
                path: root.clone(),
                cause: source,
            })?;
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                dirs.push(entry.path());
            }
        }
        dirs.sort();
        Ok(dirs)
    }
}

/// The name of a workspace's directory: `<dirname>-<12 hex digits of sha256(path)>`.
pub fn workspace_dir_name(canonical: &Path) -> String {
    let hash = Sha256::digest(canonical.as_os_str().as_encoded_bytes());
    let hex: String = hash.iter().take(6).map(|b| format!("{b:02x}")).collect();
    let name: String = canonical
        .file_name()
        .map(|n| n.to_string_lossy())
        .unwrap_or_default()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') { c } else { '_' })
        .take(48)
        .collect();
    let name = name.trim_start_matches('.');
    let name = if name.is_empty() { "root" } else { name };
    format!("{name}-{hex}")
}

/// The object store's directory in the checkpoints subdirectory.
const OBJECTS_DIR: &str = "objects";

/// The object store of the workspace whose session log is at `log` (by the layout above:
/// `<workspace dir>/sessions/<id>.jsonl`), when the log sits in a state directory.
pub fn objects_dir_of_log(log: &Path) -> Option<PathBuf> {
    let sessions = log.parent()?;
    if sessions.file_name()? != "sessions" {
        return None;
    }
    Some(sessions.parent()?.join(CHECKPOINTS_DIR).join(OBJECTS_DIR))
}

/// A workspace directory's checkpoints subdirectory.
const CHECKPOINTS_DIR: &str = "checkpoints";

/// The session logs of one workspace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Workspace {
    canonical: PathBuf,
    dir: PathBuf,
}

impl Workspace {
    /// The workspace's canonical path.
    pub fn path(&self) -> &Path {
        &self.canonical
    }

    /// Its directory under the home: `workspaces/<dirname>-<hash>`.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Where its session logs are.
    pub fn sessions_dir(&self) -> PathBuf {
        self.dir.join("sessions")
    }

    /// Where its workspace checkpoints are kept (`dsh-checkpoint`'s state directory: the object
    /// store, the metadata index, a rewind's journal).
    pub fn checkpoints_dir(&self) -> PathBuf {
        self.dir.join(CHECKPOINTS_DIR)
    }

    /// The workspace's one content-addressed object store (`dsh-checkpoint`'s `ObjectStore`):
    /// the checkpoints' objects and the images its sessions' logs name.
    pub fn objects_dir(&self) -> PathBuf {
        self.checkpoints_dir().join(OBJECTS_DIR)
    }

    /// The log of session `id` (which may not exist).
    pub fn session_path(&self, id: &SessionId) -> PathBuf {
        self.sessions_dir().join(format!("{id}.{LOG_EXTENSION}"))
    }

    /// Creates session `id` (its `session/meta` stamped now) and opens it for writing.
    pub fn create_session(
        &self,
        id: &SessionId,
        policy: SyncPolicy,
    ) -> Result<LiveLog, StoreError> {
        self.create_session_at(id, now_ms(), policy)
    }

    /// [`Workspace::create_session`] with the meta's time given.
    pub fn create_session_at(
        &self,
        id: &SessionId,
        time_ms: u64,
        policy: SyncPolicy,
    ) -> Result<LiveLog, StoreError> {
        self.create_pinned_at(id, time_ms, policy, None, None)
    }

    /// A new log whose `session/meta` carries `pin`: the log appears atomically, pin included.
    fn create_pinned_at(
        &self,
        id: &SessionId,
        time_ms: u64,
        policy: SyncPolicy,
        pin: Option<SessionPin>,
        parent: Option<ParentLink>,
    ) -> Result<LiveLog, StoreError> {
        let meta = SessionMeta {
            format_version: FORMAT_VERSION,
            session_id: id.to_string(),
            workspace: self.canonical.to_string_lossy().into_owned(),
            forked_from: None,
            pin,
            parent,
        };
        let event = Event { seq: 0, time: time_ms, data: EventData::SessionMeta(meta) };
        LiveLog::create_with(&self.session_path(id), vec![event], policy)
    }

    /// Creates a session with a freshly generated id (retrying on the unlikely collision).
    pub fn create_new_session(&self, policy: SyncPolicy) -> Result<LiveLog, StoreError> {
        self.create_pinned_session(policy, None)
    }

    /// [`Workspace::create_new_session`], its `session/meta` carrying `pin` (what the session is
    /// pinned to is in the log from its first byte: a restart before any request keeps it).
    pub fn create_pinned_session(
        &self,
        policy: SyncPolicy,
        pin: Option<SessionPin>,
    ) -> Result<LiveLog, StoreError> {
        self.create_child_session(policy, pin, None)
    }

    /// [`Workspace::create_pinned_session`] for the child session of a `task` call: its
    /// `session/meta` names `parent` too (a top-level session: `None`).
    pub fn create_child_session(
        &self,
        policy: SyncPolicy,
        pin: Option<SessionPin>,
        parent: Option<ParentLink>,
    ) -> Result<LiveLog, StoreError> {
        let mut rng = fastrand::Rng::new();
        let mut attempts = 0;
        loop {
            let time_ms = now_ms();
            let id = SessionId::generate(time_ms, &mut rng);
            match self.create_pinned_at(&id, time_ms, policy, pin.clone(), parent.clone()) {
                Err(StoreError::SessionExists { .. }) if attempts < 8 => attempts += 1,
                result => return result,
            }
        }
    }

    /// Opens session `id` for writing (lock, torn-tail recovery, fold): see [`LiveLog::open`].
    pub fn open_session(&self, id: &SessionId, policy: SyncPolicy) -> Result<LiveLog, StoreError> {
        let path = self.session_path(id);
        if !path.is_file() {
            return Err(StoreError::SessionNotFound {
                id: id.to_string(),
                home: self.sessions_dir(),
            });
        }
        LiveLog::open(&path, policy)
    }

    /// Reads session `id` without locking or recovering it: see [`read_log`].
    pub fn read_session(&self, id: &SessionId) -> Result<LogRead, StoreError> {
        read_log(&self.session_path(id))
    }

    /// Forks session `parent` of this workspace into `new_id`: see [`crate::fork_events`].
    pub fn fork_session(
        &self,
        parent: &SessionId,
        at_seq: Option<u64>,
        new_id: &SessionId,
        policy: SyncPolicy,
    ) -> Result<LiveLog, StoreError> {
        fork_log(&self.session_path(parent), at_seq, new_id, now_ms(), policy, None)
    }

    /// The session logs of this workspace, oldest id first (without reading them).
    pub fn session_logs(&self) -> Result<Vec<PathBuf>, StoreError> {
        crate::list::session_logs_in(&self.sessions_dir())
    }

    /// Summaries of every session of this workspace, oldest id first.
    pub fn list_sessions(&self) -> Result<SessionListing, StoreError> {
        list_sessions_in(&self.sessions_dir())
    }
}
