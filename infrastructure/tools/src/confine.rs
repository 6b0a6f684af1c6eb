//! Confinement of every path to the workspace root, after resolving symbolic links.
//!
//! Paths are first resolved by name (for clear errors), then every file is opened with the
//! kernel's help beneath a directory fd held for the root (`openat2` with `RESOLVE_BENEATH`),
//! so a directory or file swapped for a symbolic link between the check and the use cannot
//! lead outside: there is no check-then-use gap.

use std::ffi::OsString;
use std::io;
use std::os::fd::OwnedFd;
use std::sync::Arc;

use rustix::fs::FileType;
use rustix::fs::Mode;
use rustix::fs::OFlags;
use rustix::fs::ResolveFlags;
use rustix::fs::Stat;
use std::path::Component;
use std::path::Path;
use std::path::PathBuf;

/// Refuses what is neither a regular file nor a directory (a FIFO would block the reader
/// forever; a socket or device is not a file to edit).
///
/// # Errors
/// A sentence naming what `real` is.
pub(crate) fn regular(given: &str, real: &Path) -> Result<(), String> {
    use std::os::unix::fs::FileTypeExt as _;
    let ft = std::fs::metadata(real)
        .map_err(|e| format!("{given}: {e}"))?
        .file_type();
    if ft.is_file() || ft.is_dir() {
        return Ok(());
    }
    let what = if ft.is_fifo() {
        "a FIFO (named pipe)"
    } else if ft.is_socket() {
        "a socket"
    } else if ft.is_block_device() || ft.is_char_device() {
        "a device"
    } else {
        "not a regular file"
    };
    Err(format!("{given} is {what}, not a regular file: refused"))
}

/// A canonical workspace root. Paths are resolved against it and must stay inside it; files
/// are opened beneath `fd`, a directory fd opened once for the root.
#[derive(Debug, Clone)]
pub struct Root {
    path: PathBuf,
    fd: Arc<OwnedFd>,
}

impl PartialEq for Root {
    fn eq(&self, other: &Self) -> bool {
        self.path == other.path
    }
}

impl Eq for Root {}

/// A directory opened beneath the root (read-only, so that it can be fsynced) and the name of
/// an entry in it.
#[derive(Debug)]
pub(crate) struct InDir {
    pub(crate) dir: OwnedFd,
    pub(crate) name: OsString,
}

/// The sentence for an error of a kernel-confined open.
fn open_error(given: &str, e: rustix::io::Errno) -> String {
    match e {
        rustix::io::Errno::XDEV => format!(
            "{given} leads outside the workspace root (through a symbolic link, possibly one swapped in while it was opened): access refused"
        ),
        rustix::io::Errno::LOOP => {
            format!("{given}: a path component is (or just became) a symbolic link: refused")
        }
        rustix::io::Errno::NOSYS => format!(
            "{given}: openat2 is unavailable on this kernel (Linux 5.6 or later is needed); the file tools refuse to run unconfined"
        ),
        e => format!("{given}: {}", io::Error::from(e)),
    }
}

/// Whether `st` is a regular file; if not, a sentence naming what it is.
pub(crate) fn regular_stat(given: &str, st: &Stat) -> Result<(), String> {
    let what = match FileType::from_raw_mode(st.st_mode) {
        FileType::RegularFile => return Ok(()),
        FileType::Directory => return Err(format!("{given} is a directory, not a file")),
        FileType::Fifo => "a FIFO (named pipe)",
        FileType::Socket => "a socket",
        FileType::BlockDevice | FileType::CharacterDevice => "a device",
        _ => "not a regular file",
    };
    Err(format!("{given} is {what}, not a regular file: refused"))
}

/// Where a write goes: the canonical target, and whether it exists now.
#[derive(Debug)]
pub(crate) struct WriteTarget {
    /// Canonical path of the file to write (through its existing, canonical ancestor).
    pub(crate) path: PathBuf,
    /// Whether the file exists (then it is a regular file).
    pub(crate) exists: bool,
}

impl Root {
    /// Canonicalizes `dir`, which must be an existing directory.
    ///
    /// # Errors
    /// A sentence saying why `dir` cannot be the root.
    pub fn new(dir: &Path) -> Result<Self, String> {
        let path = dir
            .canonicalize()
            .map_err(|e| format!("workspace root {}: {e}", dir.display()))?;
        if !path.is_dir() {
            return Err(format!(
                "workspace root {} is not a directory",
                dir.display()
            ));
        }
        let fd = rustix::fs::open(
            &path,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| format!("workspace root {}: {}", dir.display(), io::Error::from(e)))?;
        // Check once that the kernel confines opens (openat2, Linux 5.6+): refuse to start
        // rather than run unconfined.
        rustix::fs::openat2(
            &fd,
            ".",
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
            ResolveFlags::BENEATH,
        )
        .map_err(|e| {
            format!(
                "workspace root {}",
                open_error(&dir.display().to_string(), e)
            )
        })?;
        Ok(Self {
            path,
            fd: Arc::new(fd),
        })
    }

    /// `real` (a path under the root) relative to the root; `.` for the root itself.
    fn relative<'a>(&self, given: &str, real: &'a Path) -> Result<&'a Path, String> {
        let rel = real
            .strip_prefix(&self.path)
            .map_err(|_| self.outside(given, real))?;
        Ok(if rel.as_os_str().is_empty() {
            Path::new(".")
        } else {
            rel
        })
    }

    /// Opens `real` (a path under the root, normally from [`Root::existing`]) read-only,
    /// beneath the root fd: symbolic links are followed only while they stay beneath the root,
    /// checked by the kernel at open time. Refuses what is not a regular file (a FIFO is
    /// opened non-blocking, then refused).
    ///
    /// # Errors
    /// A sentence: outside the root, not a regular file, an I/O error, no `openat2`.
    pub(crate) fn open_read(&self, given: &str, real: &Path) -> Result<std::fs::File, String> {
        let rel = self.relative(given, real)?;
        let fd = rustix::fs::openat2(
            &*self.fd,
            rel,
            OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOCTTY | OFlags::NONBLOCK,
            Mode::empty(),
            ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS,
        )
        .map_err(|e| self.open_read_error(given, rel, e))?;
        let stat = rustix::fs::fstat(&fd).map_err(|e| open_error(given, e))?;
        regular_stat(given, &stat)?;
        Ok(std::fs::File::from(fd))
    }

    /// The sentence for a failed read-only open of `rel`: a unix socket (which `open` refuses
    /// with `ENXIO`) is named as what it is, like a FIFO or a device.
    fn open_read_error(&self, given: &str, rel: &Path, e: rustix::io::Errno) -> String {
        if e == rustix::io::Errno::NXIO
            && let Ok(fd) = rustix::fs::openat2(
                &*self.fd,
                rel,
                OFlags::PATH | OFlags::CLOEXEC,
                Mode::empty(),
                ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS,
            )
            && let Ok(st) = rustix::fs::fstat(&fd)
            && let Err(what) = regular_stat(given, &st)
        {
            return what;
        }
        open_error(given, e)
    }

    /// The modification time of the regular file `real` (a path under the root), taken
    /// through an `O_PATH` fd opened beneath the root (links followed only while they stay
    /// beneath it); `None` when it is not a regular file beneath the root.
    pub(crate) fn mtime_beneath(&self, real: &Path) -> Option<std::time::SystemTime> {
        let rel = self.relative("", real).ok()?;
        let fd = rustix::fs::openat2(
            &*self.fd,
            rel,
            OFlags::PATH | OFlags::CLOEXEC,
            Mode::empty(),
            ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS,
        )
        .ok()?;
        let st = rustix::fs::fstat(&fd).ok()?;
        if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
            return None;
        }
        let secs = u64::try_from(st.st_mtime).unwrap_or(0);
        let nanos = u32::try_from(st.st_mtime_nsec).unwrap_or(0);
        Some(std::time::UNIX_EPOCH + std::time::Duration::new(secs, nanos))
    }

    /// Opens the directory holding `real` (a canonical path under the root) beneath the root,
    /// one component at a time with no symbolic link allowed (the canonical path has none, so
    /// one met here was swapped in), creating missing directories (mode 0755, less the
    /// umask) when `create`.
    ///
    /// # Errors
    /// A sentence: outside the root, a component became a link, an I/O error, no `openat2`.
    pub(crate) fn open_parent(
        &self,
        given: &str,
        real: &Path,
        create: bool,
    ) -> Result<InDir, String> {
        let rel = self.relative(given, real)?;
        let name = rel
            .file_name()
            .ok_or_else(|| format!("{given} names no file"))?
            .to_owned();
        let dir_flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
        let strict =
            ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS;
        let mut dir = rustix::fs::openat2(&*self.fd, ".", dir_flags, Mode::empty(), strict)
            .map_err(|e| open_error(given, e))?;
        for c in rel.parent().unwrap_or(Path::new("")).components() {
            let Component::Normal(part) = c else {
                if matches!(c, Component::CurDir) {
                    continue;
                }
                return Err(format!("{given}: cannot resolve"));
            };
            let next = match rustix::fs::openat2(&dir, part, dir_flags, Mode::empty(), strict) {
                Err(rustix::io::Errno::NOENT) if create => {
                    match rustix::fs::mkdirat(&dir, part, Mode::from_raw_mode(0o755)) {
                        Ok(()) | Err(rustix::io::Errno::EXIST) => {}
                        Err(e) => return Err(open_error(given, e)),
                    }
                    rustix::fs::openat2(&dir, part, dir_flags, Mode::empty(), strict)
                }
                r => r,
            };
            dir = next.map_err(|e| open_error(given, e))?;
        }
        Ok(InDir { dir, name })
    }

    /// Opens the directory `real` (a canonical path under the root, normally from
    /// [`Root::dir`]) for listing, beneath the root with no symbolic link allowed on the way
    /// (the canonical path has none, so one met here was swapped in).
    ///
    /// # Errors
    /// A sentence: outside the root, a component became a link, an I/O error.
    pub(crate) fn open_dir(&self, given: &str, real: &Path) -> Result<OwnedFd, String> {
        let rel = self.relative(given, real)?;
        rustix::fs::openat2(
            &*self.fd,
            rel,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
            ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
        )
        .map_err(|e| open_error(given, e))
    }

    /// The canonical root.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `p` made absolute against the root (lexically; nothing resolved yet).
    fn absolute(&self, p: &str) -> PathBuf {
        let p = Path::new(p);
        if p.is_absolute() {
            p.to_path_buf()
        } else {
            self.path.join(p)
        }
    }

    fn contains(&self, canonical: &Path) -> bool {
        canonical.starts_with(&self.path)
    }

    fn outside(&self, given: &str, real: &Path) -> String {
        if real.as_os_str() == Path::new(given).as_os_str() {
            format!(
                "{given} is outside the workspace root {}: access refused",
                self.path.display()
            )
        } else {
            format!(
                "{given} resolves to {} (symbolic links and `..` resolved), which is outside the workspace root {}: access refused",
                real.display(),
                self.path.display()
            )
        }
    }

    /// Resolves an existing path (file or directory) for reading.
    ///
    /// # Errors
    /// A sentence: empty path, does not exist (dangling link named), outside the root.
    pub(crate) fn existing(&self, given: &str) -> Result<PathBuf, String> {
        if given.is_empty() {
            return Err("the path is empty".to_owned());
        }
        let abs = self.absolute(given);
        let real = match abs.canonicalize() {
            Ok(r) => r,
            Err(e) => return Err(self.unresolved(given, &abs, &e)),
        };
        if !self.contains(&real) {
            return Err(self.outside(given, &real));
        }
        Ok(real)
    }

    /// Resolves an existing directory (Bash `cwd`, Glob and Grep bases).
    ///
    /// # Errors
    /// As [`Root::existing`], or not a directory.
    pub(crate) fn dir(&self, given: &str) -> Result<PathBuf, String> {
        let real = self.existing(given)?;
        if !real.is_dir() {
            return Err(format!("{given} is not a directory"));
        }
        Ok(real)
    }

    fn unresolved(&self, given: &str, abs: &Path, e: &io::Error) -> String {
        // A path whose `..` lead out of the root is refused as such, whether or not it
        // exists: "does not exist" for `../../etc/passwd` read as a false answer (breaker).
        let lexical = lexical(abs);
        if !self.contains(&lexical) {
            return self.outside(given, &lexical);
        }
        if e.kind() == io::ErrorKind::NotFound {
            if let Ok(target) = std::fs::read_link(abs) {
                return format!(
                    "{given} is a symbolic link to {}, which does not exist",
                    target.display()
                );
            }
            return format!("{given} does not exist");
        }
        format!("{given}: {e}")
    }

    /// Resolves a file to write: an existing regular file (through symbolic links that stay
    /// inside the root), or a new file whose deepest existing ancestor is a directory inside
    /// the root and whose remaining components hold no `..`.
    ///
    /// # Errors
    /// A sentence: empty path, a dangling symbolic link (never written through), a
    /// directory, outside the root, `..` below a missing directory.
    pub(crate) fn for_write(&self, given: &str) -> Result<WriteTarget, String> {
        if given.is_empty() {
            return Err("the path is empty".to_owned());
        }
        let abs = self.absolute(given);
        if std::fs::symlink_metadata(&abs).is_ok() {
            let real = abs.canonicalize().map_err(|e| {
                if e.kind() == io::ErrorKind::NotFound {
                    match std::fs::read_link(&abs) {
                        Ok(t) => format!(
                            "{given} is a symbolic link to {}, which does not exist: refusing to write through a dangling link",
                            t.display()
                        ),
                        Err(_) => format!(
                            "{given} goes through a dangling symbolic link: refusing to write through it"
                        ),
                    }
                } else {
                    format!("{given}: {e}")
                }
            })?;
            if !self.contains(&real) {
                return Err(self.outside(given, &real));
            }
            if real.is_dir() {
                return Err(format!("{given} is a directory, not a file"));
            }
            regular(given, &real)?;
            return Ok(WriteTarget {
                path: real,
                exists: true,
            });
        }
        // The file does not exist: find its deepest existing ancestor.
        let mut cur: &Path = &abs;
        let ancestor = loop {
            let Some(parent) = cur.parent() else {
                return Err(format!("{given} has no existing parent directory"));
            };
            if std::fs::symlink_metadata(parent).is_ok() {
                break parent;
            }
            cur = parent;
        };
        // The part that does not exist yet must be plain names.
        let rest = abs
            .strip_prefix(ancestor)
            .map_err(|_| format!("{given}: cannot resolve"))?;
        if rest
            .components()
            .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir))
        {
            return Err(format!(
                "{given}: `..` below a directory that does not exist"
            ));
        }
        let real_ancestor = ancestor.canonicalize().map_err(|e| {
            if e.kind() == io::ErrorKind::NotFound {
                format!(
                    "{given} goes through a dangling symbolic link ({}): refusing to write through it",
                    ancestor.display()
                )
            } else {
                format!("{given}: {e}")
            }
        })?;
        if !self.contains(&real_ancestor) {
            return Err(self.outside(given, &real_ancestor.join(rest)));
        }
        if !real_ancestor.is_dir() {
            return Err(format!(
                "{given}: {} is not a directory",
                ancestor.display()
            ));
        }
        let mut path = real_ancestor;
        for c in rest.components() {
            if let Component::Normal(n) = c {
                path.push(n);
            }
        }
        Ok(WriteTarget {
            path,
            exists: false,
        })
    }
}

/// `path` (absolute) with `.` and `..` taken by their text (`/a/b/../c` is `/a/c`; `..` at
/// `/` stays there), symbolic links not followed.
fn lexical(path: &Path) -> PathBuf {
    use std::path::Component;
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other.as_os_str()),
        }
    }
    out
}
