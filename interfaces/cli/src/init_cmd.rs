//! `awf init`: creates the project layout with a working example.
//!
//! Project (default): `.awf.yaml`, `.awf/config.yaml`, `.awf/workflows/example.yaml`,
//! `.awf/prompts/example.md`, `.awf/scripts/example.sh` (mode 0755) and an empty
//! `.awf/templates/`. `--global`: `prompts/example.md` and `scripts/example.sh` in the global
//! config dir. Existing files are never overwritten without `--force`: in an initialised
//! project (a `.awf/` directory, as AWF (Go) decides, or any of these files) `awf init` says so,
//! writes nothing and succeeds (exit 0), so re-running it (in CI, say) is harmless.
//!
//! Source: spec/workflow.md §3.13.

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::path::PathBuf;

use awf_domain::AwfError;
use awf_domain::ErrorCode;

use crate::cli::InitArgs;
use crate::ctx::Ctx;
use crate::errors::CliError;
use crate::errors::Outcome;
use crate::json_out;
use crate::wiring;

/// `.awf.yaml`: marks the project root. It carries no settings: awf reads none from it (log
/// level and output format are command-line flags; project settings live in
/// `.awf/config.yaml`), so writing `log_level:` / `output_format:` would only mislead.
const ROOT_FILE: &str = "# awf project root marker. awf reads no settings from this file:\n# use --log-level / --log-format / -f on the command line, and .awf/config.yaml for\n# project settings (inputs, telemetry).\nversion: \"1\"\n";

const CONFIG: &str = "# Project configuration for awf.\n# `inputs` gives default values to workflow inputs (--input on the command line wins).\ninputs: {}\n";

const EXAMPLE_WORKFLOW: &str = r#"# Example workflow created by `awf init`. Try:
#   awf run example
#   awf run example --input name=you -o streaming
#   awf run example --dry-run
name: example
version: "1.0.0"
description: Greets someone, runs a project script, then reports the result
# Every value put into a shell command reaches it as one literal word, so an input holding
# `;`, `$( )` or quotes cannot run as shell code (awf extension; `awf validate` warns where
# a workflow without it puts a value into a command unquoted).
shell_quote: true

inputs:
  - name: name
    type: string
    description: Who to greet
    default: world

hooks:
  workflow_start:
    - log: "Starting example for {{.inputs.name}}"

states:
  initial: greet

  greet:
    type: step
    description: Print a greeting
    command: echo "Hello, {{.inputs.name}}!"
    on_success: script
    on_failure: error

  script:
    type: step
    description: Run .awf/scripts/example.sh (paths are relative to this file)
    script_file: ../scripts/example.sh
    timeout: 30s
    on_success: done
    on_failure: error

  done:
    type: terminal
    status: success
    message: "Greeted {{.inputs.name}}"

  error:
    type: terminal
    status: failure
    message: "The example workflow failed"
"#;

const EXAMPLE_PROMPT: &str = "You are helping with this project.\n\nSay hello to {{.inputs.name}} and suggest one next step.\n";

const EXAMPLE_SCRIPT: &str = "#!/bin/sh\n# Example script for awf. Script files are templates: inputs are filled in before it runs.\nset -eu\necho \"Script ran for {{.inputs.name}} in $(pwd)\"\n";

/// A file `awf init` writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InitFile {
    /// Path relative to the target directory.
    pub rel: &'static str,
    /// Contents.
    pub contents: &'static str,
    /// Mark executable (0755).
    pub executable: bool,
}

/// The project files.
pub fn project_files() -> Vec<InitFile> {
    vec![
        InitFile {
            rel: ".awf.yaml",
            contents: ROOT_FILE,
            executable: false,
        },
        InitFile {
            rel: ".awf/config.yaml",
            contents: CONFIG,
            executable: false,
        },
        InitFile {
            rel: ".awf/workflows/example.yaml",
            contents: EXAMPLE_WORKFLOW,
            executable: false,
        },
        InitFile {
            rel: ".awf/prompts/example.md",
            contents: EXAMPLE_PROMPT,
            executable: false,
        },
        InitFile {
            rel: ".awf/scripts/example.sh",
            contents: EXAMPLE_SCRIPT,
            executable: true,
        },
    ]
}

/// The global files (relative to the global config dir).
pub fn global_files() -> Vec<InitFile> {
    vec![
        InitFile {
            rel: "prompts/example.md",
            contents: EXAMPLE_PROMPT,
            executable: false,
        },
        InitFile {
            rel: "scripts/example.sh",
            contents: EXAMPLE_SCRIPT,
            executable: true,
        },
    ]
}

/// Writes `files` under `root` (and `extra_dirs`), refusing to overwrite unless `force`.
/// Returns the written paths.
///
/// # Errors
/// `USER.INPUT.VALIDATION_FAILED` naming the existing files (nothing is written then);
/// `SYSTEM.IO.WRITE_FAILED` when a directory or file cannot be written.
pub fn write_files(
    root: &Path,
    files: &[InitFile],
    extra_dirs: &[&str],
    force: bool,
) -> Result<Vec<PathBuf>, CliError> {
    let existing: Vec<String> = files
        .iter()
        .filter(|f| root.join(f.rel).symlink_metadata().is_ok())
        .map(|f| f.rel.to_owned())
        .collect();
    if !existing.is_empty() && !force {
        return Err(CliError::Awf(
            AwfError::new(
                ErrorCode::UserInputValidationFailed,
                format!("already initialized (existing: {})", existing.join(", ")),
            )
            .with_detail("root", root.display().to_string())
            .with_hint("use `awf init --force` to overwrite these files"),
        ));
    }
    let io = |p: &Path, e: std::io::Error| {
        CliError::Awf(
            AwfError::new(
                ErrorCode::SystemIoWriteFailed,
                format!("cannot write {}: {e}", p.display()),
            )
            .with_hint(format!(
                "run `awf init` in a directory you can write (it creates .awf/ in the current \
                 directory), or make {} writable",
                root.display()
            )),
        )
    };
    for d in extra_dirs {
        let p = root.join(d);
        std::fs::create_dir_all(&p).map_err(|e| io(&p, e))?;
    }
    let mut written = Vec::new();
    for f in files {
        let p = root.join(f.rel);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).map_err(|e| io(parent, e))?;
        }
        // Written beside it and renamed over it: a symlink planted at the file's place is
        // replaced, never written through (breaker: `--force` wrote a file outside the
        // project through `.awf/workflows/example.yaml`).
        let tmp = p.with_file_name(format!(
            ".{}.{}.tmp",
            p.file_name()
                .map(|n| n.to_string_lossy())
                .unwrap_or_default(),
            std::process::id()
        ));
        let written_tmp = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)
            .and_then(|mut file| std::io::Write::write_all(&mut file, f.contents.as_bytes()))
            .and_then(|()| {
                if f.executable {
                    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755))
                } else {
                    Ok(())
                }
            })
            .and_then(|()| std::fs::rename(&tmp, &p));
        if let Err(e) = written_tmp {
            let _ = std::fs::remove_file(&tmp);
            return Err(io(&p, e));
        }
        written.push(p);
    }
    Ok(written)
}

/// The files of `files` that exist under `root`, plus `marker_dir` when it is a directory
/// (relative names, in that order): a non-empty answer means "already initialised".
pub fn existing(root: &Path, files: &[InitFile], marker_dir: Option<&str>) -> Vec<String> {
    let mut out: Vec<String> = files
        .iter()
        .filter(|f| root.join(f.rel).symlink_metadata().is_ok())
        .map(|f| f.rel.to_owned())
        .collect();
    if let Some(d) = marker_dir
        && out.is_empty()
        && root.join(d).is_dir()
    {
        out.push(format!("{d}/"));
    }
    out
}

/// Runs `awf init`.
///
/// Already initialised without `--force`: stdout `awf already initialized in '<dir>'
/// (existing: …)` and `Use --force to reinitialize (overwrites these files)`; JSON
/// `{"created": [], "already_initialized": true, "existing": [...]}`; exit 0, nothing written.
///
/// # Errors
/// See [`write_files`]; `SYSTEM.IO.READ_FAILED` when the working directory is unknown.
pub fn run(ctx: &Ctx, args: &InitArgs) -> Result<Outcome, CliError> {
    let w = wiring::build(ctx.storage.as_deref())?;
    if !args.force {
        let (root, found) = if args.global {
            (
                &w.config_dir,
                existing(&w.config_dir, &global_files(), None),
            )
        } else {
            (&w.cwd, existing(&w.cwd, &project_files(), Some(".awf")))
        };
        if !found.is_empty() {
            if ctx.json() {
                json_out::print(&serde_json::json!({
                    "created": [],
                    "already_initialized": true,
                    "existing": found,
                }))?;
            } else if !ctx.quiet {
                let mut out = std::io::stdout().lock();
                let _ = writeln!(
                    out,
                    "awf already initialized in '{}' (existing: {})",
                    root.display(),
                    found.join(", ")
                );
                crate::stdout_check::checked(writeln!(
                    out,
                    "Use --force to reinitialize (overwrites these files)"
                ));
            }
            return Ok(Outcome::Success);
        }
    }
    let written = if args.global {
        write_files(&w.config_dir, &global_files(), &[], args.force)?
    } else {
        write_files(&w.cwd, &project_files(), &[".awf/templates"], args.force)?
    };
    if ctx.json() {
        let paths: Vec<String> = written.iter().map(|p| p.display().to_string()).collect();
        json_out::print(&serde_json::json!({ "created": paths }))?;
    } else if !ctx.quiet {
        let mut out = std::io::stdout().lock();
        for p in &written {
            let shown = p.strip_prefix(&w.cwd).unwrap_or(p);
            crate::stdout_check::checked(writeln!(out, "Created {}", shown.display()));
        }
        if !args.global {
            crate::stdout_check::checked(writeln!(out, "\nTry it: awf run example"));
        }
    }
    Ok(Outcome::Success)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_project_layout_and_refuses_to_overwrite() {
        let dir = tempfile::tempdir().unwrap();
        let written =
            write_files(dir.path(), &project_files(), &[".awf/templates"], false).unwrap();
        assert_eq!(written.len(), 5);
        assert!(dir.path().join(".awf/templates").is_dir());
        let script = dir.path().join(".awf/scripts/example.sh");
        assert_eq!(
            std::fs::metadata(&script).unwrap().permissions().mode() & 0o777,
            0o755
        );
        assert_eq!(
            std::fs::read_to_string(dir.path().join(".awf/workflows/example.yaml")).unwrap(),
            EXAMPLE_WORKFLOW
        );

        std::fs::write(dir.path().join(".awf.yaml"), "mine").unwrap();
        let err = write_files(dir.path(), &project_files(), &[], false).unwrap_err();
        let CliError::Awf(e) = err;
        assert_eq!(e.code(), ErrorCode::UserInputValidationFailed);
        assert!(e.message().contains(".awf.yaml"), "{}", e.message());
        assert_eq!(
            e.hints(),
            ["use `awf init --force` to overwrite these files"]
        );
        assert_eq!(
            std::fs::read_to_string(dir.path().join(".awf.yaml")).unwrap(),
            "mine"
        );

        write_files(dir.path(), &project_files(), &[], true).unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.path().join(".awf.yaml")).unwrap(),
            ROOT_FILE
        );
    }
}
