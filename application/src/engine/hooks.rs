//! Workflow and step hooks. Source: spec/workflow.md §1.10.

use awf_domain::AwfError;
use awf_domain::ErrorCode;
use awf_domain::event::LogLevel;
use awf_domain::ports::exec::CommandSpec;
use awf_domain::ports::exec::Program;
use awf_domain::ports::exec::Termination;
use awf_domain::scope::ErrorInfo;
use awf_domain::scope::LoopFrame;
use awf_domain::workflow::HookAction;
use tokio_util::sync::CancellationToken;

use super::Run;

impl Run {
    /// Runs hook actions in order and stops at the first failure.
    ///
    /// `log` actions are interpolated and emitted as info log events (their trailing line
    /// breaks trimmed); `command` actions are
    /// interpolated and run with the shell (no `dir`, no input variables, output discarded).
    ///
    /// # Errors
    /// The first failing action: interpolation error, command that cannot start, non-zero exit
    /// (`` `<command as it ran, shortened>` exited with code N: <stderr's first line> ``,
    /// secrets masked), or
    /// cancellation.
    pub(crate) async fn run_hooks(
        &self,
        actions: &[HookAction],
        step: Option<&str>,
        frame: Option<&LoopFrame>,
        error: Option<&ErrorInfo>,
        token: &CancellationToken,
    ) -> Result<(), AwfError> {
        let path = step.unwrap_or("");
        let iteration = frame.map(|f| f.index);
        // A failed action stops the list: the message says how many did not run (new user:
        // "pre hook failed" said nothing of the actions after it).
        let skipped = |i: usize, e: AwfError| -> AwfError {
            match actions.len() - i - 1 {
                0 => e,
                n => e.map_message(|m| {
                    format!(
                        "{m} (the {n} hook action{} after it did not run)",
                        if n == 1 { "" } else { "s" }
                    )
                }),
            }
        };
        for (i, action) in actions.iter().enumerate() {
            match action {
                HookAction::Log(text) => {
                    let msg = self.render(text, frame, error).map_err(|e| {
                        skipped(
                            i,
                            AwfError::new(
                                ErrorCode::ExecutionTemplateFailed,
                                format!("hook log: {e}"),
                            ),
                        )
                    })?;
                    // A step's Output keeps its last newline: `deploying {{.states.b.Output}}`
                    // printed a blank line after it (new user).
                    let msg = msg.trim_end_matches(['\n', '\r']);
                    self.log(step, LogLevel::Info, msg, path, iteration);
                }
                HookAction::Command(text) => {
                    let cmd = self.render_command(text, frame, error).map_err(|e| {
                        skipped(
                            i,
                            AwfError::new(
                                ErrorCode::ExecutionTemplateFailed,
                                format!("hook command: {e}"),
                            ),
                        )
                    })?;
                    // Which action failed, as it ran (new user: `hook command exited with
                    // code 1` named neither the hook nor its command; then the template's
                    // source was quoted, `{{if .inputs.gate}}…`, not the command that ran).
                    let shown = short_command(&cmd);
                    self.check_shell(&[]);
                    let spec = CommandSpec {
                        program: Program::Shell(cmd),
                        dir: self.default_dir(),
                        env: Vec::new(),
                        timeout: None,
                        capture_limit: None,
                        scope: Some(self.scope.0.clone()),
                    };
                    let out = self.svc.executor.run(spec, None, token.clone()).await?;
                    match out.termination {
                        Termination::Exited if out.exit_code == 0 => {}
                        Termination::Exited => {
                            let msg = match first_line(&out.stderr) {
                                None => format!("`{shown}` exited with code {}", out.exit_code),
                                Some(line) => {
                                    format!("`{shown}` exited with code {}: {line}", out.exit_code)
                                }
                            };
                            return Err(skipped(
                                i,
                                AwfError::new(ErrorCode::ExecutionHookFailed, self.mask(&msg)),
                            ));
                        }
                        Termination::TimedOut | Termination::Cancelled => {
                            return Err(AwfError::new(
                                ErrorCode::ExecutionRunCancelled,
                                self.mask(&format!("`{shown}` cancelled")),
                            ));
                        }
                    }
                }
            }
        }
        Ok(())
    }
}

/// Longest hook command shown in a failure, in characters.
const SHOWN_COMMAND_MAX: usize = 40;

/// A hook command as its failure names it: its first line, cut to [`SHOWN_COMMAND_MAX`]
/// characters, `…` marking a cut (or more lines).
fn short_command(text: &str) -> String {
    let trimmed = text.trim();
    let line = trimmed.lines().next().unwrap_or("");
    let mut shown: String = line.chars().take(SHOWN_COMMAND_MAX).collect();
    if line.chars().count() > SHOWN_COMMAND_MAX || trimmed.lines().nth(1).is_some() {
        shown = shown.trim_end().to_owned();
        shown.push('…');
    }
    shown
}

/// The first non-blank line of a hook command's stderr, trimmed (`…` when more follow).
fn first_line(stderr: &str) -> Option<String> {
    let mut lines = stderr.lines().map(str::trim).filter(|l| !l.is_empty());
    let first = lines.next()?;
    Some(if lines.next().is_some() {
        format!("{first} …")
    } else {
        first.to_owned()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hook_command_is_shown_by_its_first_line_cut_to_forty_characters() {
        assert_eq!(short_command("  exit 1\n"), "exit 1");
        assert_eq!(
            short_command("echo 'pre went wrong' >&2; echo second >&2; exit 1"),
            "echo 'pre went wrong' >&2; echo second >…"
        );
        assert_eq!(short_command("set -e\nmake"), "set -e…");
    }

    #[test]
    fn a_hook_commands_stderr_is_quoted_by_its_first_line() {
        assert_eq!(first_line(""), None);
        assert_eq!(first_line(" \n\n"), None);
        assert_eq!(first_line("\nboom\n"), Some("boom".to_owned()));
        assert_eq!(
            first_line("pre went wrong\nsecond\n"),
            Some("pre went wrong …".to_owned())
        );
    }
}
