//! "What the model saw" as a file an editor can open: the text `dsh saw SESSION --step N`
//! prints, written read-only (0400) into a private (0700) directory under the daemon's state
//! directory (`DshHome::saw_dir`). A copy is rebuilt from the log on every request, so old
//! copies are only clutter: they are removed after a day.

use std::path::{Path, PathBuf};
use std::time::Duration;

/// How long a "what the model saw" file is kept: copies older than this are removed when the
/// next one is written (each is rebuilt from the log on request anyway).
const SAW_KEEP: Duration = Duration::from_secs(24 * 60 * 60);

/// Removes the saw files of `dir` older than [`SAW_KEEP`] (best effort).
fn remove_old_saw_files(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let old = entry
            .metadata()
            .and_then(|metadata| metadata.modified())
            .is_ok_and(|modified| modified.elapsed().is_ok_and(|age| age > SAW_KEEP));
        if old && entry.file_name().to_string_lossy().ends_with(".txt") {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// Writes what the model saw to `<home>/saw/<session>-step<N>.txt`, read-only (0400) in a 0700
/// directory; an older copy is replaced, copies older than a day removed.
pub(crate) fn write_read_only(
    home: &Path,
    session_id: &str,
    step: u64,
    content: &str,
) -> std::io::Result<PathBuf> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    let dir = dsh_daemon::startup::DshHome::new(home).saw_dir();
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&dir)?;
    // Private whatever the umask, or an older directory's mode, says.
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o700))?;
    let safe: String = session_id
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '_' })
        .collect();
    let path = dir.join(format!("{safe}-step{step}.txt"));
    let temp = dir.join(format!(".{safe}-step{step}.txt.{}", std::process::id()));
    let _ = std::fs::remove_file(&temp);
    {
        use std::io::Write;
        let mut file =
            std::fs::OpenOptions::new().write(true).create_new(true).mode(0o400).open(&temp)?;
        file.write_all(content.as_bytes())?;
        file.sync_all()?;
    }
    std::fs::rename(&temp, &path)?;
    remove_old_saw_files(&dir);
    Ok(path)
}
