//! Choosing the shell and preparing what to exec (`$SHELL -c …` or a temp shebang script).

use std::ffi::OsStr;
use std::ffi::OsString;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::path::PathBuf;

use awf_domain::AwfError;
use awf_domain::ErrorCode;
use tempfile::TempPath;

/// The shell used when `$SHELL` is unset, relative, not an executable file, or not a
/// POSIX-family shell.
pub(crate) const FALLBACK_SHELL: &str = "/bin/sh";

/// Prefix of temporary shebang script files.
pub(crate) const SCRIPT_PREFIX: &str = "awf-script-";

/// Picks the shell from a `$SHELL` value: the value itself when it is an absolute path to an
/// executable regular file of a POSIX-family shell
/// ([`is_posix_shell`](awf_domain::interpreter::is_posix_shell): `bash`, `dash`, `zsh`, …),
/// else [`FALLBACK_SHELL`]. Commands are POSIX shell text (and `shell_quote` quotes for a
/// POSIX shell): under `fish` or `csh` their syntax fails, and `tclsh -c 'echo hi'` does not
/// even run its argument (the step "succeeded" having run nothing). The engine warns once
/// per run when `$SHELL` is not one.
///
/// Source: spec/workflow.md §1.5.2; docs/compatibility.md (AWF (Go) runs any `$SHELL`).
pub(crate) fn resolve_shell(value: Option<&OsStr>) -> PathBuf {
    match value {
        Some(v)
            if v.to_str()
                .is_some_and(awf_domain::interpreter::is_posix_shell)
                && is_executable_file(Path::new(v)) =>
        {
            PathBuf::from(v)
        }
        _ => PathBuf::from(FALLBACK_SHELL),
    }
}

fn is_executable_file(path: &Path) -> bool {
    if !path.is_absolute() {
        return false;
    }
    match std::fs::metadata(path) {
        Ok(m) => m.is_file() && m.permissions().mode() & 0o111 != 0,
        Err(_) => false,
    }
}

/// What to exec: a program, its arguments, and the temp script that must outlive the child.
#[derive(Debug)]
pub(crate) struct Invocation {
    /// Program to exec.
    pub(crate) program: OsString,
    /// Arguments after argv[0].
    pub(crate) args: Vec<OsString>,
    /// Temp script file, deleted when dropped (after the child is gone).
    pub(crate) script: Option<TempPath>,
    /// argv[0] when it is not `program` (the name as the command wrote it, as a shell passes).
    pub(crate) arg0: Option<OsString>,
}

impl Invocation {
    /// `<shell> -c <text>`.
    pub(crate) fn shell(shell: PathBuf, text: String) -> Self {
        Self {
            program: shell.into_os_string(),
            args: vec![OsString::from("-c"), OsString::from(text)],
            script: None,
            arg0: None,
        }
    }

    /// `program args…` exec'd directly, no shell.
    pub(crate) fn direct(program: String, args: Vec<String>) -> Self {
        Self {
            program: OsString::from(program),
            args: args.into_iter().map(OsString::from).collect(),
            script: None,
            arg0: None,
        }
    }

    /// A program found on `PATH`, exec'd directly (a shell command with no shell syntax),
    /// with `name`, the word the command used, as argv[0] as a shell would pass it.
    pub(crate) fn program(name: String, program: PathBuf, args: Vec<String>) -> Self {
        Self {
            program: program.into_os_string(),
            args: args.into_iter().map(OsString::from).collect(),
            script: None,
            arg0: Some(OsString::from(name)),
        }
    }

    /// A shebang script written to a temp file (`awf-script-*`, mode 0700) and exec'd directly.
    ///
    /// The file handle is closed before returning, so exec does not fail with `ETXTBSY`
    /// because of our own descriptor.
    ///
    /// Source: spec/workflow.md §1.12.
    /// # Errors
    /// `EXECUTION.COMMAND.FAILED` when the temp file cannot be created or written.
    pub(crate) fn script(contents: &str) -> Result<Self, AwfError> {
        let path = write_script(contents).map_err(|e| {
            AwfError::new(
                ErrorCode::ExecutionCommandFailed,
                format!(
                    "cannot write temporary script in {}: {e}",
                    std::env::temp_dir().display()
                ),
            )
            .with_hint("Check that the temp directory ($TMPDIR) exists and is writable.")
        })?;
        Ok(Self {
            program: path.as_os_str().to_owned(),
            args: Vec::new(),
            script: Some(path),
            arg0: None,
        })
    }
}

fn write_script(contents: &str) -> std::io::Result<TempPath> {
    let mut file = tempfile::Builder::new()
        .prefix(SCRIPT_PREFIX)
        .permissions(std::fs::Permissions::from_mode(0o700))
        .tempfile()?;
    file.write_all(contents.as_bytes())?;
    // umask may have cleared bits; make sure the owner can execute it.
    file.as_file()
        .set_permissions(std::fs::Permissions::from_mode(0o700))?;
    // Closes the descriptor; the path stays and is removed on drop.
    Ok(file.into_temp_path())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shell_falls_back_when_unset_relative_or_missing() {
        assert_eq!(resolve_shell(None), PathBuf::from("/bin/sh"));
        assert_eq!(
            resolve_shell(Some(OsStr::new("bash"))),
            PathBuf::from("/bin/sh")
        );
        assert_eq!(
            resolve_shell(Some(OsStr::new("/nonexistent/awf/shell"))),
            PathBuf::from("/bin/sh")
        );
        assert_eq!(
            resolve_shell(Some(OsStr::new(""))),
            PathBuf::from("/bin/sh")
        );
        // A directory is not an executable file.
        assert_eq!(
            resolve_shell(Some(OsStr::new("/"))),
            PathBuf::from("/bin/sh")
        );
    }

    #[test]
    fn shell_kept_when_absolute_executable() {
        assert_eq!(
            resolve_shell(Some(OsStr::new("/bin/sh"))),
            PathBuf::from("/bin/sh")
        );
        for posix in ["/bin/bash", "/bin/dash"] {
            if Path::new(posix).exists() {
                assert_eq!(resolve_shell(Some(OsStr::new(posix))), PathBuf::from(posix));
            }
        }
    }

    /// An executable that is not a POSIX-family shell is not used (trial: `SHELL=tclsh` ran
    /// nothing and reported success).
    #[test]
    fn a_non_posix_shell_falls_back_to_bin_sh() -> std::io::Result<()> {
        let dir = tempfile::tempdir()?;
        for name in ["fish", "tclsh", "csh", "python3"] {
            let path = dir.path().join(name);
            std::fs::write(&path, "#!/bin/sh\nexit 0\n")?;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))?;
            assert_eq!(
                resolve_shell(Some(path.as_os_str())),
                PathBuf::from("/bin/sh"),
                "{name}"
            );
        }
        // The same executable named as a POSIX shell is used.
        let bash = dir.path().join("bash5");
        std::fs::write(&bash, "#!/bin/sh\nexit 0\n")?;
        std::fs::set_permissions(&bash, std::fs::Permissions::from_mode(0o755))?;
        assert_eq!(resolve_shell(Some(bash.as_os_str())), bash);
        Ok(())
    }

    #[test]
    fn non_executable_file_is_rejected() -> std::io::Result<()> {
        let file = tempfile::NamedTempFile::new()?;
        file.as_file()
            .set_permissions(std::fs::Permissions::from_mode(0o644))?;
        assert_eq!(
            resolve_shell(Some(file.path().as_os_str())),
            PathBuf::from("/bin/sh")
        );
        Ok(())
    }

    #[test]
    fn script_file_is_0700_with_prefix_and_removed_on_drop() -> Result<(), AwfError> {
        let inv = Invocation::script("#!/bin/sh\necho hi\n")?;
        let path = PathBuf::from(&inv.program);
        let meta = std::fs::metadata(&path)
            .map_err(|e| AwfError::new(ErrorCode::SystemInternal, e.to_string()))?;
        assert_eq!(meta.permissions().mode() & 0o777, 0o700);
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        assert!(name.starts_with("awf-script-"), "{name}");
        assert_eq!(
            std::fs::read_to_string(&path).ok().as_deref(),
            Some("#!/bin/sh\necho hi\n")
        );
        assert!(inv.args.is_empty());
        drop(inv);
        assert!(!path.exists());
        Ok(())
    }
}
