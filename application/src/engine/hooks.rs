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
    /// `log` actions are interpolated and emitted as info log events; `command` actions are
    /// interpolated and run with the shell (no `dir`, no input variables, output discarded).
    ///
    /// # Errors
    /// The first failing action: interpolation error, command that cannot start, non-zero exit
    /// (`hook command exited with code N: <stderr>`), or cancellation.
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
                    self.log(step, LogLevel::Info, &msg, path, iteration);
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
                            let stderr = out.stderr.trim();
                            let msg = if stderr.is_empty() {
                                format!("hook command exited with code {}", out.exit_code)
                            } else {
                                format!("hook command exited with code {}: {stderr}", out.exit_code)
                            };
                            return Err(skipped(
                                i,
                                AwfError::new(ErrorCode::ExecutionHookFailed, self.mask(&msg)),
                            ));
                        }
                        Termination::TimedOut | Termination::Cancelled => {
                            return Err(AwfError::new(
                                ErrorCode::ExecutionRunCancelled,
                                "hook command cancelled",
                            ));
                        }
                    }
                }
            }
        }
        Ok(())
    }
}
