//! awf host adapters: the real [`Clock`], [`IdGenerator`] and [`Host`] ports of awf-domain.
//!
//! [`SystemClock`] reads the operating system's clocks, [`UuidIds`] makes random v4 UUIDs, and
//! [`OsHost`] reads the file system (never writes) and asks the operating system about
//! processes (`/proc`), the host name and the process environment (`HOME`, `TMPDIR`).
#![deny(clippy::print_stdout, clippy::print_stderr)]

use std::io;
use std::io::Read;
use std::path::Path;
use std::path::PathBuf;
use std::time::Instant;
use std::time::SystemTime;

use awf_domain::ports::Clock;
use awf_domain::ports::Host;
use awf_domain::ports::IdGenerator;
use awf_domain::ports::host::DirEntry;
use awf_domain::ports::host::FileKind;
use awf_domain::ports::host::FileMeta;
use awf_domain::run::RunId;

/// The operating system's clocks (`SystemTime::now`, `Instant::now`).
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    /// The system time to the whole millisecond: what state files, transcripts and event logs
    /// keep, so a step's duration computed live (`awf run`) is the one computed again from its
    /// record (`awf status`, a resume's replay of the earlier attempt).
    fn now(&self) -> SystemTime {
        whole_millis(SystemTime::now())
    }

    fn instant(&self) -> Instant {
        Instant::now()
    }
}

/// `t` with its sub-millisecond part dropped (times before the epoch are left alone).
fn whole_millis(t: SystemTime) -> SystemTime {
    match t.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(d) => {
            SystemTime::UNIX_EPOCH
                + std::time::Duration::new(d.as_secs(), d.subsec_millis() * 1_000_000)
        }
        Err(_) => t,
    }
}

/// The working directory as the user's shell spells it: `pwd` (`$PWD`) when it is an absolute
/// path without `.` or `..` components that names the same directory as the process's
/// working directory (a path through a symbolic link, `/tmp/link` for `/tmp/real`), else the
/// physical path the operating system gives (`getcwd`), as POSIX `pwd -L` and Go's `os.Getwd`
/// choose. One spelling for a run's `{{.context.WorkingDir}}`, the `$PWD` of its steps and
/// its recorded `working_dir`.
///
/// # Errors
/// The operating system's error when the working directory cannot be read (it was removed).
pub fn working_dir(pwd: Option<&str>) -> io::Result<PathBuf> {
    let physical = std::env::current_dir()?;
    let Some(pwd) =
        pwd.filter(|p| p.starts_with('/') && !p.split('/').any(|part| part == "." || part == ".."))
    else {
        return Ok(physical);
    };
    if pwd == physical.as_os_str() {
        return Ok(physical);
    }
    match (std::fs::metadata(pwd), std::fs::metadata(&physical)) {
        (Ok(a), Ok(b)) if same_file(&a, &b) => Ok(PathBuf::from(pwd)),
        _ => Ok(physical),
    }
}

#[cfg(unix)]
fn same_file(a: &std::fs::Metadata, b: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::MetadataExt;
    a.dev() == b.dev() && a.ino() == b.ino()
}

#[cfg(not(unix))]
fn same_file(_: &std::fs::Metadata, _: &std::fs::Metadata) -> bool {
    false
}

/// Random v4 UUIDs for runs, child runs and requests (`3f2a9c1e-…`, 36 characters).
#[derive(Debug, Default, Clone, Copy)]
pub struct UuidIds;

impl IdGenerator for UuidIds {
    fn run_id(&self) -> RunId {
        RunId(uuid::Uuid::new_v4().to_string())
    }

    fn child_run_id(&self, _parent: &RunId) -> RunId {
        RunId(uuid::Uuid::new_v4().to_string())
    }

    fn request_id(&self) -> String {
        uuid::Uuid::new_v4().to_string()
    }
}

/// The real file system (read only) and process facts.
#[derive(Debug, Default, Clone, Copy)]
pub struct OsHost;

fn kind_of(t: std::fs::FileType) -> FileKind {
    if t.is_file() {
        FileKind::File
    } else if t.is_dir() {
        FileKind::Dir
    } else {
        FileKind::Other
    }
}

impl Host for OsHost {
    fn metadata(&self, path: &Path) -> io::Result<FileMeta> {
        let m = std::fs::metadata(path)?;
        Ok(FileMeta {
            kind: kind_of(m.file_type()),
            len: m.len(),
        })
    }

    fn is_symlink(&self, path: &Path) -> bool {
        std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink())
    }

    fn read_limited(&self, path: &Path, limit: u64) -> io::Result<Vec<u8>> {
        let mut bytes = Vec::new();
        std::fs::File::open(path)?
            .take(limit)
            .read_to_end(&mut bytes)?;
        Ok(bytes)
    }

    fn read_to_string(&self, path: &Path) -> io::Result<String> {
        std::fs::read_to_string(path)
    }

    fn canonicalize(&self, path: &Path) -> io::Result<PathBuf> {
        std::fs::canonicalize(path)
    }

    fn read_dir(&self, dir: &Path) -> io::Result<Vec<DirEntry>> {
        Ok(std::fs::read_dir(dir)?
            .flatten()
            .filter_map(|e| {
                let kind = kind_of(e.file_type().ok()?);
                Some(DirEntry {
                    path: e.path(),
                    kind,
                })
            })
            .collect())
    }

    /// As [`working_dir`] with the process's `$PWD`.
    fn current_dir(&self) -> io::Result<PathBuf> {
        working_dir(std::env::var("PWD").ok().as_deref())
    }

    fn temp_dir(&self) -> PathBuf {
        std::env::temp_dir()
    }

    fn home_dir(&self) -> Option<PathBuf> {
        std::env::var_os("HOME").map(PathBuf::from)
    }

    fn pid(&self) -> u32 {
        std::process::id()
    }

    fn process_alive(&self, pid: u32) -> bool {
        // `/proc/<pid>/stat` is `pid (comm) S …`: the state follows the last `)` (a command
        // name may hold one). `Z` (zombie) and `X` (dead) have exited: a run whose awf was
        // SIGKILLed showed as live until the zombie was reaped, seconds later (trial).
        match std::fs::read(Path::new("/proc").join(pid.to_string()).join("stat")) {
            Ok(stat) => {
                let after = stat
                    .iter()
                    .rposition(|b| *b == b')')
                    .map_or(&stat[..], |i| &stat[i + 1..]);
                let state = after.iter().find(|b| !b.is_ascii_whitespace());
                !matches!(state, Some(b'Z' | b'X'))
            }
            // No stat to read (not Linux, /proc not mounted): the directory's existence.
            Err(_) => Path::new("/proc").join(pid.to_string()).exists(),
        }
    }

    fn process_program(&self, pid: u32) -> Option<PathBuf> {
        let proc_dir = Path::new("/proc").join(pid.to_string());
        if let Ok(exe) = std::fs::read_link(proc_dir.join("exe")) {
            let text = exe.to_string_lossy();
            return Some(match text.strip_suffix(" (deleted)") {
                Some(kept) => PathBuf::from(kept),
                None => exe,
            });
        }
        let cmdline = std::fs::read(proc_dir.join("cmdline")).ok()?;
        let first = cmdline
            .split(|b| *b == 0)
            .next()
            .filter(|a| !a.is_empty())?;
        Some(PathBuf::from(String::from_utf8_lossy(first).into_owned()))
    }

    fn hostname(&self) -> String {
        std::fs::read_to_string(Path::new("/proc/sys/kernel/hostname"))
            .or_else(|_| std::fs::read_to_string("/etc/hostname"))
            .map(|s| s.trim().to_owned())
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// An exited child not yet reaped (a zombie) is not alive; a running one is.
    #[test]
    fn a_zombie_is_not_alive() {
        let h = OsHost;
        assert!(h.process_alive(std::process::id()));
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        // Not reaped: it stays a zombie until `wait`.
        let mut waited = 0;
        while h.process_alive(pid) && waited < 500 {
            std::thread::sleep(std::time::Duration::from_millis(10));
            waited += 1;
        }
        assert!(!h.process_alive(pid), "a zombie counted as alive");
        assert!(Path::new("/proc").join(pid.to_string()).exists());
        child.wait().unwrap();
        let mut sleeper = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        assert!(h.process_alive(sleeper.id()));
        sleeper.kill().unwrap();
        sleeper.wait().unwrap();
    }

    #[test]
    fn process_program_names_the_binary_of_a_live_process_only() {
        let h = OsHost;
        assert_eq!(
            h.process_program(std::process::id()),
            Some(std::env::current_exe().unwrap())
        );
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let program = h.process_program(child.id()).unwrap();
        assert_eq!(program.file_name().unwrap(), "sleep");
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(h.process_program(child.id()), None);
    }

    #[test]
    fn files_are_read_as_the_operating_system_sees_them() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("a.txt");
        std::fs::write(&f, "hello world").unwrap();
        std::fs::create_dir(d.path().join("sub")).unwrap();
        std::os::unix::fs::symlink(d.path().join("gone"), d.path().join("link")).unwrap();
        let h = OsHost;
        assert_eq!(
            h.metadata(&f).unwrap(),
            FileMeta {
                kind: FileKind::File,
                len: 11
            }
        );
        assert!(h.is_dir(&d.path().join("sub")) && !h.is_file(&d.path().join("sub")));
        assert_eq!(h.read_limited(&f, 5).unwrap(), b"hello");
        assert_eq!(h.read_to_string(&f).unwrap(), "hello world");
        let link = d.path().join("link");
        assert!(h.is_symlink(&link) && !h.exists(&link));
        assert_eq!(
            h.metadata(&link).unwrap_err().kind(),
            io::ErrorKind::NotFound
        );
        let mut names: Vec<(String, FileKind)> = h
            .read_dir(d.path())
            .unwrap()
            .into_iter()
            .map(|e| {
                (
                    e.path.file_name().unwrap().to_string_lossy().into_owned(),
                    e.kind,
                )
            })
            .collect();
        names.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(
            names,
            vec![
                ("a.txt".to_owned(), FileKind::File),
                ("link".to_owned(), FileKind::Other),
                ("sub".to_owned(), FileKind::Dir)
            ]
        );
        assert_eq!(
            h.canonicalize(&d.path().join("sub/../a.txt")).unwrap(),
            std::fs::canonicalize(&f).unwrap()
        );
    }

    #[test]
    fn this_process_is_alive_and_ids_are_fresh() {
        let h = OsHost;
        assert!(h.process_alive(h.pid()));
        // Beyond the kernel's pid_max (at most 2^22): no such process.
        assert!(!h.process_alive(u32::MAX));
        let a = UuidIds.run_id();
        assert_eq!(a.0.len(), 36);
        assert_ne!(a, UuidIds.child_run_id(&a));
        assert_ne!(UuidIds.request_id(), UuidIds.request_id());
    }

    /// The working directory keeps the spelling of a `$PWD` through a symbolic link to it
    /// (what the shell shows), and falls back to the physical path when `$PWD` names another
    /// directory, is relative, or holds `..`.
    #[test]
    fn the_working_dir_is_pwd_when_it_names_the_same_directory() {
        let physical = std::env::current_dir().unwrap();
        let d = tempfile::tempdir().unwrap();
        let link = d.path().join("here");
        std::os::unix::fs::symlink(&physical, &link).unwrap();
        let elsewhere = d.path().join("elsewhere");
        std::os::unix::fs::symlink(d.path(), &elsewhere).unwrap();
        let at = |p: &Path| working_dir(Some(p.to_str().unwrap())).unwrap();
        assert_eq!(at(&link), link);
        assert_eq!(at(&elsewhere), physical);
        assert_eq!(at(&link.join("..").join("here")), physical);
        assert_eq!(working_dir(Some("here")).unwrap(), physical);
        assert_eq!(working_dir(None).unwrap(), physical);
    }

    /// Wall times are whole milliseconds, as records keep them.
    #[test]
    fn the_clock_gives_whole_milliseconds() {
        let t = SystemClock.now();
        let d = t.duration_since(SystemTime::UNIX_EPOCH).unwrap();
        assert_eq!(d.subsec_nanos() % 1_000_000, 0);
        assert!(SystemTime::now().duration_since(t).unwrap() < std::time::Duration::from_secs(5));
    }
}
