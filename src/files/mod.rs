//! Output files: the one way a command writes a file the user named.
//!
//! Contract: a named output is a regular file or a new name in a folder that exists.
//! Anything else (a device such as `/dev/full`, a symbolic link, a folder, a FIFO, a name in
//! a missing folder) is refused before any work with [`OutputRefused`] (exit 2, naming it):
//! writing beside and renaming over such a target would replace the device node or the link
//! with a regular file instead of writing where it points. The content goes to
//! `NAME.partial` beside the target (created new, never through a link), is synced, and is
//! renamed over the target, so a reader never sees half a file and a failure leaves the
//! previous file in place (the partial removed). The target is checked again just before the
//! rename, for one that changed during a long extraction.

pub mod beneath;

use std::fs::File;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use crate::exit::{Classify, ExitKind};

/// An output path no command will write to.
#[derive(Debug, thiserror::Error)]
#[error(
    "refusing to write {path}: {what}; name a regular file or a new path in an existing folder"
)]
pub struct OutputRefused {
    pub path: PathBuf,
    pub what: String,
}

impl Classify for OutputRefused {
    fn exit_kind(&self) -> ExitKind {
        ExitKind::BadInput
    }
}

/// Why an output could not be written.
#[derive(Debug, thiserror::Error)]
pub enum OutputError {
    #[error(transparent)]
    Refused(#[from] OutputRefused),
    #[error("cannot write {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

impl Classify for OutputError {
    fn exit_kind(&self) -> ExitKind {
        match self {
            OutputError::Refused(e) => e.exit_kind(),
            OutputError::Io { .. } => ExitKind::Runtime,
        }
    }
}

/// Checks that `path` is a regular file, or a new name in a folder that exists.
pub fn check_output(path: &Path) -> Result<(), OutputRefused> {
    let refused = |what: String| OutputRefused {
        path: path.to_path_buf(),
        what,
    };
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_file() => Ok(()),
        Ok(m) if m.file_type().is_symlink() => Err(refused("it is a symbolic link".into())),
        Ok(m) if m.is_dir() => Err(refused("it is a folder".into())),
        Ok(_) => Err(refused(
            "it is not a regular file (a device, FIFO or socket)".into(),
        )),
        Err(_) => {
            let folder = match path.parent() {
                Some(p) if !p.as_os_str().is_empty() => p,
                _ => Path::new("."),
            };
            if folder.is_dir() {
                Ok(())
            } else {
                Err(refused(format!("no folder {}", folder.display())))
            }
        }
    }
}

/// `NAME.partial` beside `out`: where its content is written before the rename.
pub fn partial_path(out: &Path) -> PathBuf {
    let name = out
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "output".into());
    out.with_file_name(format!("{name}.partial"))
}

/// A partial file being written beside its target. Dropped without [`Partial::commit`], it
/// removes itself: a failed command leaves no half file and the previous target untouched.
#[derive(Debug)]
pub struct Partial {
    partial: PathBuf,
    target: PathBuf,
    committed: bool,
}

impl Partial {
    /// Checks `target` and names its partial file (for writers that open it themselves,
    /// such as a video encoder); a stale partial or link of that name is removed.
    pub fn reserve(target: &Path) -> Result<Self, OutputError> {
        check_output(target)?;
        let partial = partial_path(target);
        if std::fs::symlink_metadata(&partial).is_ok() {
            std::fs::remove_file(&partial).map_err(|source| OutputError::Io {
                path: partial.clone(),
                source,
            })?;
        }
        Ok(Self {
            partial,
            target: target.to_path_buf(),
            committed: false,
        })
    }

    /// [`Partial::reserve`], the partial named `STEM.partial.EXT` (for encoders that pick
    /// the container by the file's extension).
    pub fn reserve_keeping_extension(target: &Path) -> Result<Self, OutputError> {
        let mut partial = Self::reserve(target)?;
        if let (Some(stem), Some(ext)) = (target.file_stem(), target.extension()) {
            let name = format!(
                "{}.partial.{}",
                stem.to_string_lossy(),
                ext.to_string_lossy()
            );
            partial.partial = target.with_file_name(name);
            if std::fs::symlink_metadata(&partial.partial).is_ok() {
                std::fs::remove_file(&partial.partial).map_err(|source| OutputError::Io {
                    path: partial.partial.clone(),
                    source,
                })?;
            }
        }
        Ok(partial)
    }

    /// Checks `target` and creates its partial file, new, never through a link.
    pub fn create(target: &Path) -> Result<(Self, File), OutputError> {
        let partial = Self::reserve(target)?;
        let file = create_new(&partial.partial).map_err(|source| OutputError::Io {
            path: partial.partial.clone(),
            source,
        })?;
        Ok((partial, file))
    }

    /// The partial file's path.
    pub fn path(&self) -> &Path {
        &self.partial
    }

    /// The file this partial becomes.
    pub fn target(&self) -> &Path {
        &self.target
    }

    /// Renames the written partial over the target, checked again first.
    pub fn commit(mut self) -> Result<(), OutputError> {
        check_output(&self.target)?;
        std::fs::rename(&self.partial, &self.target).map_err(|source| OutputError::Io {
            path: self.target.clone(),
            source,
        })?;
        self.committed = true;
        Ok(())
    }
}

impl Drop for Partial {
    fn drop(&mut self) {
        if !self.committed {
            let _ = std::fs::remove_file(&self.partial);
        }
    }
}

/// Creates a file that must not exist yet (inside a folder the command made or found
/// empty, as `export` does): never over anything, never through a link.
pub fn create_new(path: &Path) -> std::io::Result<File> {
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
}

/// Writes `content` to `out` the safe way: checked, written beside, synced, renamed.
pub fn write_atomically(out: &Path, content: &[u8]) -> Result<(), OutputError> {
    let (partial, mut file) = Partial::create(out)?;
    file.write_all(content)
        .and_then(|()| file.sync_all())
        .map_err(|source| OutputError::Io {
            path: partial.path().to_path_buf(),
            source,
        })?;
    drop(file);
    partial.commit()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regular_files_and_new_names_are_written_others_refused() {
        let dir = tempfile::tempdir().unwrap();
        let new = dir.path().join("new.html");
        write_atomically(&new, b"one").unwrap();
        write_atomically(&new, b"two").unwrap();
        assert_eq!(std::fs::read(&new).unwrap(), b"two");
        assert!(!partial_path(&new).exists());

        let link = dir.path().join("link.html");
        std::os::unix::fs::symlink(&new, &link).unwrap();
        let e = write_atomically(&link, b"x").unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
        assert_eq!(std::fs::read(&new).unwrap(), b"two");
        assert!(std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink());

        let e = write_atomically(Path::new("/dev/null"), b"x").unwrap_err();
        assert!(e.to_string().contains("not a regular file"), "{e}");
        let e = write_atomically(dir.path(), b"x").unwrap_err();
        assert!(e.to_string().contains("folder"), "{e}");
        let missing = dir.path().join("nowhere/page.html");
        let e = write_atomically(&missing, b"x").unwrap_err();
        assert!(e.to_string().contains("no folder"), "{e}");
        assert_eq!(e.exit_kind(), ExitKind::BadInput);
    }

    #[test]
    fn a_dropped_partial_leaves_the_previous_file() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("rows.csv");
        std::fs::write(&out, b"old").unwrap();
        {
            let (p, mut f) = Partial::create(&out).unwrap();
            f.write_all(b"half").unwrap();
            assert!(p.path().exists());
        }
        assert_eq!(std::fs::read(&out).unwrap(), b"old");
        assert!(!partial_path(&out).exists());
    }
}
