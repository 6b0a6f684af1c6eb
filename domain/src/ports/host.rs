//! Host: the machine awf runs on, read-only. Every file the engine and the use cases read
//! (script, prompt, role and skill files, `file_exists` input checks, validation's file checks,
//! `@prompts/` references), and what they ask of the operating system (its own process id,
//! whether another process is alive, the host name, the working and temporary directories,
//! the home directory) goes through it; application never touches the file system, processes
//! or the environment directly.
//!
//! Errors are `std::io::Error` as the operating system gave them, so that messages built from
//! them read the same whatever adapter answers.
//!
//! Reference: shared/design/architecture.md ("The run service: the one way in": application
//! never touches files, processes or the environment except through ports).

use std::io;
use std::path::Path;
use std::path::PathBuf;

/// What a path names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// Anything else: a FIFO, a socket, a device.
    Other,
}

/// The facts of one path (symbolic links followed, as `stat(2)`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileMeta {
    /// What it is.
    pub kind: FileKind,
    /// Size in bytes.
    pub len: u64,
}

/// One entry of a directory listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntry {
    /// The entry's full path (the listed directory joined with its name).
    pub path: PathBuf,
    /// What the entry itself is (symbolic links not followed; a link is `Other`).
    pub kind: FileKind,
}

/// Read-only access to the file system and facts about the host.
pub trait Host: Send + Sync {
    /// The facts of `path`, following symbolic links.
    ///
    /// # Errors
    /// The operating system's error (`NotFound` for a missing path or a dangling link).
    fn metadata(&self, path: &Path) -> io::Result<FileMeta>;

    /// Whether `path` itself is a symbolic link (not followed); `false` when it cannot be
    /// examined.
    fn is_symlink(&self, path: &Path) -> bool;

    /// Reads at most `limit` bytes of the file at `path` (a larger file gives its first
    /// `limit` bytes: read `max + 1` to tell a file over `max`).
    ///
    /// # Errors
    /// The operating system's error opening or reading it.
    fn read_limited(&self, path: &Path, limit: u64) -> io::Result<Vec<u8>>;

    /// The whole file at `path` as UTF-8 text.
    ///
    /// # Errors
    /// The operating system's error, or `InvalidData` for text that is not UTF-8.
    fn read_to_string(&self, path: &Path) -> io::Result<String>;

    /// The absolute path with every symbolic link and `.`/`..` resolved.
    ///
    /// # Errors
    /// The operating system's error (the path must exist).
    fn canonicalize(&self, path: &Path) -> io::Result<PathBuf>;

    /// The entries of the directory `dir`, in no particular order (entries that cannot be
    /// examined are left out).
    ///
    /// # Errors
    /// The operating system's error opening the directory.
    fn read_dir(&self, dir: &Path) -> io::Result<Vec<DirEntry>>;

    /// The process's working directory.
    ///
    /// # Errors
    /// The operating system's error (the directory was removed).
    fn current_dir(&self) -> io::Result<PathBuf>;

    /// The directory for temporary files (`$TMPDIR`, else `/tmp`).
    fn temp_dir(&self) -> PathBuf;

    /// The process's home directory (`$HOME` of the process environment), when set.
    fn home_dir(&self) -> Option<PathBuf>;

    /// This process's id.
    fn pid(&self) -> u32;

    /// Whether a process with id `pid` exists on this host and has not exited: a zombie (an
    /// exited process its parent has not reaped yet) is not alive (it holds no file, no
    /// lock, and runs nothing).
    fn process_alive(&self, pid: u32) -> bool;

    /// The program process `pid` runs: the target of `/proc/<pid>/exe` (a ` (deleted)` mark
    /// of a replaced binary dropped), else the first word of `/proc/<pid>/cmdline`; `None`
    /// when neither can be read (no such process, a zombie, no access). The default (a host
    /// that cannot tell) is `None`.
    fn process_program(&self, pid: u32) -> Option<PathBuf> {
        let _ = pid;
        None
    }

    /// The host's name (`/proc/sys/kernel/hostname`, else `/etc/hostname`, trimmed; empty
    /// when neither can be read).
    fn hostname(&self) -> String;

    /// Whether `path` exists (links followed).
    fn exists(&self, path: &Path) -> bool {
        self.metadata(path).is_ok()
    }

    /// Whether `path` is a regular file (links followed).
    fn is_file(&self, path: &Path) -> bool {
        self.metadata(path).is_ok_and(|m| m.kind == FileKind::File)
    }

    /// Whether `path` is a directory (links followed).
    fn is_dir(&self, path: &Path) -> bool {
        self.metadata(path).is_ok_and(|m| m.kind == FileKind::Dir)
    }
}
