//! Confinement of every path to the workspace root, after resolving symbolic links.

use std::io;
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

/// A canonical workspace root. Paths are resolved against it and must stay inside it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Root {
    path: PathBuf,
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
        Ok(Self { path })
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
