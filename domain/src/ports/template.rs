//! Interpolator (Go `text/template` semantics) and ExpressionEvaluator (expr-lang).
//!
//! Source: spec/workflow.md §2.1–2.9 (templates), §2.11 (expressions), §7.1–7.2.

use crate::scope::Scope;

/// Why a template or expression failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    /// A referenced key or field does not exist: message like
    /// `undefined variable: inputs.missing`.
    #[error("undefined variable: {0}")]
    Undefined(String),
    /// Parse error or function error; message is the engine's text.
    #[error("{0}")]
    Failed(String),
}

/// Separates an error's text from a hint in [`ExpressionEvaluator::check`]'s
/// [`TemplateError::Failed`] message: `unknown function "uper"\nhint: did you mean 'upper'?`.
pub const HINT_SEPARATOR: &str = "\nhint: ";

/// Marks, in a failure's message, a run input that was not given and has no default:
/// `… (input "opt" was not given and has no default; …)`. The CLI reads the names after it to
/// ask for them again in its resume hint.
pub const MISSING_INPUT_MARK: &str = "(input \"";

/// What follows the name after [`MISSING_INPUT_MARK`].
pub const MISSING_INPUT_TAIL: &str = "\" was not given and has no default";

/// Answers whether the evaluation in progress is to stop (its run was cancelled): polled by
/// an evaluator between units of work, so that a slow expression or template ends soon
/// after the cancel instead of running to its end.
pub type StopCheck = std::sync::Arc<dyn Fn() -> bool + Send + Sync>;

/// The job of a prepared evaluation (see [`Evaluation`]).
type Job<T> = Box<dyn FnOnce(StopCheck) -> Result<T, TemplateError> + Send>;

/// An expression or template prepared against a [`Scope`]: it owns what it reads (the values
/// the text mentions, copied when it was prepared), so it runs with no lock on the run's state
/// held and on any thread ([`Self::run`]).
///
/// Source: trial finding h4 (a slow `when:` blocked the async runtime's workers).
pub struct Evaluation<T> {
    /// The work is bounded by the size of the data it reads (no loop, no function that
    /// multiplies its input): not worth handing it to another thread.
    pub light: bool,
    job: Job<T>,
}

impl<T> std::fmt::Debug for Evaluation<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Evaluation")
            .field("light", &self.light)
            .finish_non_exhaustive()
    }
}

impl<T: Send + 'static> Evaluation<T> {
    /// An evaluation that runs `job` (given the stop check) when [`Self::run`] is called.
    pub fn new(
        light: bool,
        job: impl FnOnce(StopCheck) -> Result<T, TemplateError> + Send + 'static,
    ) -> Self {
        Self {
            light,
            job: Box::new(job),
        }
    }

    /// An evaluation already done (a light one): [`Self::run`] hands `result` back.
    pub fn ready(result: Result<T, TemplateError>) -> Self {
        Self::new(true, move |_| result)
    }

    /// Runs the evaluation; `stop` is polled between units of work, and a `true` ends it
    /// with a [`TemplateError::Failed`] saying it was stopped.
    ///
    /// # Errors
    /// As the evaluation's own method ([`ExpressionEvaluator::eval_bool`],
    /// [`Interpolator::render`]), and when stopped.
    pub fn run(self, stop: StopCheck) -> Result<T, TemplateError> {
        (self.job)(stop)
    }
}

/// Which of the [`Interpolator`]'s renderings [`Interpolator::prepare`] prepares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RenderMode {
    /// [`Interpolator::render`].
    Plain,
    /// [`Interpolator::render_shell`].
    Shell,
    /// [`Interpolator::render_shell_quoted`].
    ShellQuoted,
}

/// Renders templates.
pub trait Interpolator: Send + Sync {
    /// Renders `template` against `scope`. Text without `{{` is returned unchanged.
    ///
    /// Both namespace forms (`{{.inputs.x}}`, `{{inputs.x}}`) and both field casings
    /// (`Output`/`output`) work. Missing keys are errors. Values print with Go `%v` rules;
    /// composite loop items print as compact JSON.
    ///
    /// # Errors
    /// [`TemplateError::Undefined`] for a missing key or field; [`TemplateError::Failed`] for
    /// parse errors and function errors.
    fn render(&self, template: &str, scope: &Scope<'_>) -> Result<String, TemplateError>;

    /// Renders shell command text. Like [`Interpolator::render`], except that a composite
    /// loop item (printed as JSON) inside a double-quoted shell string is escaped for it, so
    /// the shell passes the JSON through intact. The default is plain `render`.
    ///
    /// # Errors
    /// As [`Interpolator::render`].
    fn render_shell(&self, template: &str, scope: &Scope<'_>) -> Result<String, TemplateError> {
        self.render(template, scope)
    }

    /// Renders shell command text under the workflow-level `shell_quote: true` mode: the
    /// output of every value action (`{{.inputs.x}}`, `{{.states.s.Output}}`, `{{.env.X}}`,
    /// `{{.loop.Item}}`, `{{.}}` inside `range`) is quoted for the shell context it lands in
    /// (bare word, inside `'…'`, inside `"…"`, a command substitution, a here-document), so
    /// the shell sees it as one literal word; the literal template text, control actions
    /// (`if`, `range`, `end`, …) and values already passed through `shell_quote` or `escape`
    /// are left as written. The default refuses (an interpolator that cannot quote must not
    /// silently run unquoted values).
    ///
    /// Source: issue 14 ("Safe shell interpolation"); docs/compatibility.md.
    ///
    /// # Errors
    /// As [`Interpolator::render`]; the default always fails with [`TemplateError::Failed`].
    fn render_shell_quoted(
        &self,
        template: &str,
        scope: &Scope<'_>,
    ) -> Result<String, TemplateError> {
        let _ = (template, scope);
        Err(TemplateError::Failed(
            "this interpolator cannot quote shell values (shell_quote: true)".to_owned(),
        ))
    }

    /// Checks that `template` parses, without rendering it.
    ///
    /// # Errors
    /// [`TemplateError::Failed`] with the parse error; the text after [`HINT_SEPARATOR`],
    /// when present, is a hint (a did-you-mean for a function that does not exist).
    fn check(&self, template: &str) -> Result<(), TemplateError>;

    /// Prepares the rendering `mode` of `template` against `scope`, to be run later with no
    /// lock held ([`Evaluation::run`]). The default renders now.
    ///
    /// # Errors
    /// As the rendering, for what is found while preparing (a parse error).
    fn prepare(
        &self,
        template: &str,
        scope: &Scope<'_>,
        mode: RenderMode,
    ) -> Result<Evaluation<String>, TemplateError> {
        Ok(Evaluation::ready(match mode {
            RenderMode::Plain => self.render(template, scope),
            RenderMode::Shell => self.render_shell(template, scope),
            RenderMode::ShellQuoted => self.render_shell_quoted(template, scope),
        }))
    }
}

/// Evaluates expr-lang expressions (`when`, `while`, `break_when`, `max_iterations`).
pub trait ExpressionEvaluator: Send + Sync {
    /// Evaluates a boolean condition. Member access on a state or input that does not exist
    /// yet gives `false` (AWF semantics). `contains(a, b)` is accepted as `a contains b`.
    ///
    /// # Errors
    /// [`TemplateError::Failed`] on syntax errors, non-boolean results and other run-time
    /// errors.
    fn eval_bool(&self, expr: &str, scope: &Scope<'_>) -> Result<bool, TemplateError>;

    /// Evaluates integer arithmetic (`2 * 3 + 1`) with an empty environment; floats are
    /// truncated.
    ///
    /// # Errors
    /// [`TemplateError::Failed`] for non-numeric results, division by zero and syntax errors.
    fn eval_int(&self, expr: &str) -> Result<i64, TemplateError>;

    /// Prepares [`Self::eval_bool`] of `expr` against `scope`, to be run later with no lock
    /// held ([`Evaluation::run`]). The default evaluates now.
    ///
    /// # Errors
    /// As [`Self::eval_bool`], for what is found while preparing (a syntax error).
    fn prepare_bool(
        &self,
        expr: &str,
        scope: &Scope<'_>,
    ) -> Result<Evaluation<bool>, TemplateError> {
        Ok(Evaluation::ready(self.eval_bool(expr, scope)))
    }

    /// Checks that `expr` compiles (load-time validation of `when`, `while`, `break_when`)
    /// and calls only functions the evaluator has.
    ///
    /// # Errors
    /// [`TemplateError::Failed`] with the compile error, or naming a function the evaluator
    /// does not have (a run would fail with `Unknown function`); the text after
    /// [`HINT_SEPARATOR`], when present, is a hint for the user (a did-you-mean).
    fn check(&self, expr: &str) -> Result<(), TemplateError>;
}
