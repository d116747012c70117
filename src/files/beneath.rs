//! The station's own folders (recordings), opened once and never left: every file
//! operation on what is beneath them goes through [`Beneath`].
//!
//! Contract: [`Beneath::open`] opens a folder the configuration names (a link *there* is
//! followed: the recordings may live on another disk); from it, every name is resolved
//! relative to that open folder with `O_NOFOLLOW` (`openat`, `statat`, `unlinkat`), so a
//! symbolic link inside it is never followed: a linked recording folder or a linked
//! `audio.wav` is reported as a link ([`Kind::Link`], or an error naming it), and removing
//! one removes the link, never what it points to. Retention, repair and a withdrawal's
//! purge use it, and the recorder creates its folder ([`Beneath::create_folder`]) and every
//! file in it ([`Beneath::create_new`], `write_atomically`) through the folder's descriptor.
//!
//! Why descriptors and not path checks: checking each component and then opening by path
//! leaves a window in which a link can be put in; a descriptor of the folder cannot be
//! redirected.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, OFlags};

/// What a name in a folder is, seen without following it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    Folder,
    File,
    Link,
    Other,
}

/// An open folder of the station's and the path it was opened by (for messages).
pub struct Beneath {
    fd: OwnedFd,
    path: PathBuf,
}

fn err(e: rustix::io::Errno) -> io::Error {
    io::Error::from(e)
}

impl Beneath {
    /// Opens folder `path` (a link naming the folder itself is followed).
    pub fn open(path: &Path) -> io::Result<Self> {
        let fd = rustix::fs::open(
            path,
            OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(err)?;
        Ok(Self {
            fd,
            path: path.to_path_buf(),
        })
    }

    /// The path the folder was opened by (for messages only).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `name` under this folder's path (for messages only).
    pub fn shown(&self, name: impl AsRef<OsStr>) -> PathBuf {
        self.path.join(name.as_ref())
    }

    /// What `name` is, without following it; `None` when nothing has that name.
    pub fn kind(&self, name: impl AsRef<OsStr>) -> io::Result<Option<Kind>> {
        match rustix::fs::statat(&self.fd, name.as_ref(), AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => Ok(Some(kind_of(FileType::from_raw_mode(st.st_mode)))),
            Err(rustix::io::Errno::NOENT) => Ok(None),
            Err(e) => Err(err(e)),
        }
    }

    /// The names in the folder with their kinds (`.` and `..` left out), sorted.
    pub fn entries(&self) -> io::Result<Vec<(OsString, Kind)>> {
        let dup = rustix::fs::openat(
            &self.fd,
            ".",
            OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(err)?;
        let mut dir = rustix::fs::Dir::read_from(&dup).map_err(err)?;
        let mut out = Vec::new();
        while let Some(entry) = dir.read() {
            let entry = entry.map_err(err)?;
            let name = entry.file_name().to_bytes();
            if name == b"." || name == b".." {
                continue;
            }
            let name: OsString =
                <OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(name).to_os_string();
            let kind = match self.kind(&name)? {
                Some(k) => k,
                None => continue,
            };
            out.push((name, kind));
        }
        out.sort();
        Ok(out)
    }

    /// Opens folder `name` in this one; a link there is refused (`ELOOP`/`ENOTDIR` as an
    /// error naming it as a link).
    pub fn folder(&self, name: impl AsRef<OsStr>) -> io::Result<Beneath> {
        let name = name.as_ref();
        let fd = rustix::fs::openat(
            &self.fd,
            name,
            OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::RDONLY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| self.link_error(name, e))?;
        Ok(Beneath {
            fd,
            path: self.path.join(name),
        })
    }

    /// Creates folder `name` in this one and opens it: `mkdirat` refuses a name that exists
    /// (a link included), so the folder returned is the one just made.
    pub fn create_folder(&self, name: impl AsRef<OsStr>) -> io::Result<Beneath> {
        let name = name.as_ref();
        rustix::fs::mkdirat(&self.fd, name, Mode::from_raw_mode(0o750)).map_err(err)?;
        self.folder(name)
    }

    /// Creates regular file `name` in this folder, new (any existing name, a link included,
    /// is refused), open for reading and writing.
    pub fn create_new(&self, name: impl AsRef<OsStr>) -> io::Result<File> {
        let fd = rustix::fs::openat(
            &self.fd,
            name.as_ref(),
            OFlags::RDWR | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o640),
        )
        .map_err(err)?;
        Ok(File::from(fd))
    }

    /// Opens regular file `name` in this folder for reading (and writing with `write`);
    /// a link or anything but a regular file is refused.
    pub fn file(&self, name: impl AsRef<OsStr>, write: bool) -> io::Result<File> {
        let name = name.as_ref();
        let access = if write { OFlags::RDWR } else { OFlags::RDONLY };
        let fd = rustix::fs::openat(
            &self.fd,
            name,
            access | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK,
            Mode::empty(),
        )
        .map_err(|e| self.link_error(name, e))?;
        let st = rustix::fs::fstat(&fd).map_err(err)?;
        if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
            return Err(io::Error::other(format!(
                "{} is not a regular file",
                self.shown(name).display()
            )));
        }
        // Back to blocking (NONBLOCK only kept a FIFO from hanging the open).
        rustix::fs::fcntl_setfl(&fd, access).map_err(err)?;
        Ok(File::from(fd))
    }

    /// Reads regular file `name` whole as text.
    pub fn read_to_string(&self, name: impl AsRef<OsStr>) -> io::Result<String> {
        io::read_to_string(self.file(name, false)?)
    }

    /// When regular file `name` was last modified.
    pub fn modified(&self, name: impl AsRef<OsStr>) -> io::Result<std::time::SystemTime> {
        self.file(name, false)?.metadata()?.modified()
    }

    /// Replaces regular file `name` with `bytes`: written to `name.partial` (created new,
    /// never through a link), synced, renamed over `name` within this folder.
    pub fn write_atomically(&self, name: &str, bytes: &[u8]) -> io::Result<()> {
        use std::io::Write as _;
        let partial = format!("{name}.partial");
        let _ = self.remove_file(&partial);
        let fd = rustix::fs::openat(
            &self.fd,
            partial.as_str(),
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o640),
        )
        .map_err(err)?;
        let mut f = File::from(fd);
        let written = f.write_all(bytes).and_then(|()| f.sync_all());
        if let Err(e) = written {
            let _ = self.remove_file(&partial);
            return Err(e);
        }
        rustix::fs::renameat(&self.fd, partial.as_str(), &self.fd, name).map_err(err)
    }

    /// Removes `name` when it is a file or a link (the link itself: never what it points
    /// to). `Ok(false)` when nothing has that name.
    pub fn remove_file(&self, name: impl AsRef<OsStr>) -> io::Result<bool> {
        match rustix::fs::unlinkat(&self.fd, name.as_ref(), AtFlags::empty()) {
            Ok(()) => Ok(true),
            Err(rustix::io::Errno::NOENT) => Ok(false),
            Err(e) => Err(err(e)),
        }
    }

    /// Removes folder `name` and everything in it without following any link (a link is
    /// removed as a link). Returns the links it removed, whose targets it left as they
    /// were, so the caller can say so.
    pub fn remove_all(&self, name: impl AsRef<OsStr>) -> io::Result<Vec<PathBuf>> {
        let name = name.as_ref();
        let mut links = Vec::new();
        match self.kind(name)? {
            None => return Ok(links),
            Some(Kind::Folder) => {
                let inner = self.folder(name)?;
                for (n, k) in inner.entries()? {
                    match k {
                        Kind::Folder => links.extend(inner.remove_all(&n)?),
                        Kind::Link => {
                            links.push(inner.shown(&n));
                            inner.remove_file(&n)?;
                        }
                        Kind::File | Kind::Other => {
                            inner.remove_file(&n)?;
                        }
                    }
                }
                rustix::fs::unlinkat(&self.fd, name, AtFlags::REMOVEDIR).map_err(err)?;
            }
            Some(Kind::Link) => {
                links.push(self.shown(name));
                self.remove_file(name)?;
            }
            Some(_) => {
                self.remove_file(name)?;
            }
        }
        Ok(links)
    }

    fn link_error(&self, name: &OsStr, e: rustix::io::Errno) -> io::Error {
        let is_link = matches!(self.kind(name), Ok(Some(Kind::Link)));
        if is_link {
            io::Error::other(format!(
                "{} is a symbolic link: not followed (the station works only beneath {})",
                self.shown(name).display(),
                self.path.display()
            ))
        } else {
            err(e)
        }
    }
}

fn kind_of(t: FileType) -> Kind {
    match t {
        FileType::Directory => Kind::Folder,
        FileType::RegularFile => Kind::File,
        FileType::Symlink => Kind::Link,
        _ => Kind::Other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_beneath_are_never_followed() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("recordings");
        let outside = tmp.path().join("outside");
        std::fs::create_dir_all(root.join("s-1")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("audio.wav"), b"keep").unwrap();
        std::fs::write(root.join("s-1/video.avi"), b"v").unwrap();
        std::os::unix::fs::symlink(outside.join("audio.wav"), root.join("s-1/audio.wav")).unwrap();
        std::os::unix::fs::symlink(&outside, root.join("s-2")).unwrap();
        let b = Beneath::open(&root).unwrap();
        let names: Vec<_> = b.entries().unwrap();
        assert_eq!(
            names,
            vec![("s-1".into(), Kind::Folder), ("s-2".into(), Kind::Link)]
        );
        let e = b.folder("s-2").err().unwrap();
        assert!(e.to_string().contains("symbolic link"), "{e}");
        let s1 = b.folder("s-1").unwrap();
        assert!(s1.file("audio.wav", true).is_err());
        assert_eq!(s1.read_to_string("video.avi").unwrap(), "v");
        let links = b.remove_all("s-1").unwrap();
        assert_eq!(links, vec![root.join("s-1/audio.wav")]);
        let links = b.remove_all("s-2").unwrap();
        assert_eq!(links, vec![root.join("s-2")]);
        assert_eq!(std::fs::read(outside.join("audio.wav")).unwrap(), b"keep");
        assert!(b.entries().unwrap().is_empty());
    }
}
