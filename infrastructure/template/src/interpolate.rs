//! [`GoTemplates`]: the [`Interpolator`] port over gtmpl-ng (Go `text/template`).
//!
//! Source: spec/workflow.md §2.1–2.9 and §7.1; decisions.md (both namespace forms, both
//! casings, `readFile` relative to the workflow directory).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::PoisonError;
use std::time::Duration;

use awf_domain::ports::template::Evaluation;
use awf_domain::ports::template::Interpolator;
use awf_domain::ports::template::RenderMode;
use awf_domain::ports::template::StopCheck;
use awf_domain::ports::template::TemplateError;
use awf_domain::scope::Scope;
use gtmpl_ng::Context;
use gtmpl_ng::ExecError;
use gtmpl_ng::Limits;
use gtmpl_ng::ParseError;
use gtmpl_ng::Template;

use crate::data;
use crate::functions::AWF_FUNCS;
use crate::functions::SideData;
use crate::scan;
use crate::scan::Prepared;

/// Longest error text passed on; engine messages can quote whole values.
const MAX_MESSAGE: usize = 300;

/// Renders AWF templates with Go `text/template` semantics (gtmpl-ng).
///
/// The root holds `inputs`, `states`, `workflow`, `env`, `context`, `awf`, and `loop` /
/// `error` where the scope has them. Namespaces work with and without the leading dot
/// (`{{.inputs.x}}`, `{{inputs.x}}`), and struct fields in PascalCase and snake_case
/// (`{{.states.s.ExitCode}}`, `{{states.s.exit_code}}`). A missing map key or field is
/// [`TemplateError::Undefined`] with its path (`undefined variable: inputs.missing`).
///
/// Each render is bounded: 10 s of wall time, 64 MiB of output, 1 000 000 iterations
/// per `range` and 10 000 000 in total. Blocks plus parentheses nested more than 64 deep are
/// refused before parsing (`expression nested too deeply (more than 64 levels)`): the parser
/// is recursive and would overflow the stack.
///
/// Divergences from AWF (Go), listed in docs/compatibility.md: `{{.loop.Parent}}` at top
/// level prints `<no value>` (Go: `<nil>`); `.workflow.StartedAt` is RFC 3339 text in UTC;
/// JSON integers print as integers (Go: `1e+06` for 1000000); `readFile` resolves relative
/// paths against the workflow file's directory.
///
/// Source: spec/workflow.md §2.1–2.9, §7.1.
///
/// Parsed templates are kept (by their text, `CACHED` at most, shared by the clones of a
/// renderer): a loop body, a retried step and the checks before a run parse each text once.
/// gtmpl-ng lexes every parse on a thread of its own; when the OS refuses that thread (the
/// process limit) the parse fails with a template error instead of a panic.
#[derive(Clone)]
pub struct GoTemplates {
    limits: Limits,
    parsed: Arc<Mutex<HashMap<String, Arc<Template>>>>,
}

impl std::fmt::Debug for GoTemplates {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GoTemplates")
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

/// Parsed templates kept by one renderer at most; past it the cache starts over (the texts
/// come from workflow files, so a long-lived server that loads many of them stays bounded).
pub const CACHED: usize = 4096;

impl Default for GoTemplates {
    fn default() -> Self {
        Self::new()
    }
}

impl GoTemplates {
    /// A renderer with the default bounds (see the type docs).
    pub fn new() -> Self {
        let limits = Limits::default()
            .with_iterations(1_000_000)
            .with_total_iterations(10_000_000)
            .with_output_bytes(64 * 1024 * 1024)
            .with_function_output(64 * 1024 * 1024)
            .with_deadline(Duration::from_secs(10));
        Self {
            limits,
            parsed: Arc::default(),
        }
    }

    /// `prepared`'s text parsed, from the cache or parsed now (and kept when it parses).
    fn parse(&self, prepared: &Prepared<'_>) -> Result<Arc<Template>, TemplateError> {
        if prepared.max_depth > scan::MAX_TEMPLATE_NESTING {
            return Err(scan::too_deep(scan::MAX_TEMPLATE_NESTING));
        }
        let text = prepared.text.as_ref();
        let cache = || self.parsed.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(m) = &prepared.misuse {
            return Err(TemplateError::Failed(m.clone()));
        }
        if let Some(t) = cache().get(text) {
            return Ok(Arc::clone(t));
        }
        let mut tmpl = Template::with_limits(self.limits);
        tmpl.add_funcs(&AWF_FUNCS);
        // gtmpl-ng's lexer runs on a thread it spawns with `thread::spawn`, which panics
        // when the OS refuses one.
        let parsed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            awf_domain::quiet_panics::quietly(|| tmpl.parse(text))
        }));
        match parsed {
            Ok(r) => r.map_err(|e| parse_error(&e, prepared))?,
            Err(_) => {
                return Err(TemplateError::Failed(
                    "cannot parse the template: the OS refused a thread (the process limit, \
                     `ulimit -u`, is reached)"
                        .to_owned(),
                ));
            }
        }
        let tmpl = Arc::new(tmpl);
        let mut kept = cache();
        if kept.len() >= CACHED {
            kept.clear();
        }
        kept.insert(text.to_owned(), Arc::clone(&tmpl));
        Ok(tmpl)
    }
}

/// A render prepared against a scope (see [`Interpolator::prepare`]): the parsed template and
/// the data it reads, owned.
struct RenderJob {
    tmpl: Arc<Template>,
    prepared: Prepared<'static>,
    root: gtmpl_ng::Value,
    side: Option<SideData>,
}

impl RenderJob {
    /// Renders under a fresh budget ([`crate::budget`]), `stop` polled by awf's functions.
    fn run(self, stop: Option<StopCheck>) -> Result<String, TemplateError> {
        let _budget = crate::budget::enter(stop);
        let _side = self.side.map(SideData::install);
        self.tmpl
            .render(&Context::from(self.root))
            .map_err(|e| exec_error(e, &self.prepared))
    }
}

impl GoTemplates {
    /// `template` parsed, with the data it reads from `scope`; `Err(text)` when it has no
    /// action (it renders as itself).
    fn job(
        &self,
        template: &str,
        scope: &Scope<'_>,
    ) -> Result<Result<RenderJob, String>, TemplateError> {
        if !template.contains("{{") {
            return Ok(Err(template.to_owned()));
        }
        let prepared = scan::prepare(template);
        // The did-you-mean of an unknown function at run time too (a text `awf validate`
        // did not see: a prompt file's), in the message: run errors carry no hint part.
        let tmpl = self
            .parse(&prepared)
            .map_err(|e| with_function_hint(e, Hint::Inline))?;
        let mut json_items = Vec::new();
        let root = data::root(scope, &prepared.needs, &mut json_items);
        let side = prepared.needs.side_data.then(|| SideData {
            workflow_dir: scope.workflow_dir.to_path_buf(),
            working_dir: std::path::PathBuf::from(&scope.context.working_dir),
            json_items,
            // As `data::root` builds `.states`: only the states the template names.
            states_empty: prepared.needs.states.wants_any()
                && !scope.states.keys().any(|n| prepared.needs.states.wants(n)),
        });
        Ok(Ok(RenderJob {
            tmpl,
            prepared: prepared.into_owned(),
            root,
            side,
        }))
    }
}

impl Interpolator for GoTemplates {
    fn render(&self, template: &str, scope: &Scope<'_>) -> Result<String, TemplateError> {
        match self.job(template, scope)? {
            Err(text) => Ok(text),
            Ok(job) => job.run(None),
        }
    }

    fn render_shell(&self, template: &str, scope: &Scope<'_>) -> Result<String, TemplateError> {
        self.render(&crate::shell::quote_loop_items(template), scope)
    }

    fn render_shell_quoted(
        &self,
        template: &str,
        scope: &Scope<'_>,
    ) -> Result<String, TemplateError> {
        self.render(&crate::shell::quote_values(template), scope)
    }

    fn prepare(
        &self,
        template: &str,
        scope: &Scope<'_>,
        mode: RenderMode,
    ) -> Result<Evaluation<String>, TemplateError> {
        if !template.contains("{{") {
            return Ok(Evaluation::ready(Ok(template.to_owned())));
        }
        let text = match mode {
            RenderMode::Plain => std::borrow::Cow::Borrowed(template),
            RenderMode::Shell => crate::shell::quote_loop_items(template),
            RenderMode::ShellQuoted => crate::shell::quote_values(template),
        };
        match self.job(&text, scope)? {
            Err(text) => Ok(Evaluation::ready(Ok(text))),
            Ok(job) => Ok(Evaluation::new(scan::light_template(&text), move |stop| {
                job.run(Some(stop))
            })),
        }
    }

    fn check(&self, template: &str) -> Result<(), TemplateError> {
        if !template.contains("{{") {
            return Ok(());
        }
        let prepared = scan::prepare(template);
        self.parse(&prepared)
            .map(|_| ())
            .map_err(|e| with_unclosed_hint(with_function_hint(e, Hint::Separate), &prepared))
    }
}

/// Go's template builtins, beside [`AWF_FUNCS`].
const BUILTIN_FUNCS: [&str; 19] = [
    "and", "or", "not", "len", "index", "print", "printf", "println", "html", "js", "urlquery",
    "eq", "ne", "lt", "le", "gt", "ge", "call", "slice",
];

/// Names other template languages (Liquid, Jinja, Ruby, sprig, Go's `strings`) give the
/// functions awf has, with awf's name: too far from it for the edit distance (`upcase` is
/// three edits from `upper`).
const OTHER_NAMES: &[(&str, &str)] = &[
    ("upcase", "upper"),
    ("uppercase", "upper"),
    ("toUpper", "upper"),
    ("downcase", "lower"),
    ("lowercase", "lower"),
    ("toLower", "lower"),
    ("strip", "trim"),
    ("chomp", "trim"),
    ("length", "len"),
    ("size", "len"),
    ("count", "len"),
    ("quote", "shell_quote"),
    ("squote", "shell_quote"),
    ("shellescape", "shell_quote"),
    ("toJSON", "json"),
    ("to_json", "json"),
    ("tojson", "json"),
    ("coalesce", "default"),
];

/// The function awf has that an unknown `name` most likely means: its name in another
/// template language ([`OTHER_NAMES`], any case), else the closest name by edits, else the
/// one equal to it without case and underscores (`Shell_Quote`).
pub(crate) fn function_meant(name: &str) -> Option<&'static str> {
    let names = || AWF_FUNCS.iter().map(|(n, _)| *n).chain(BUILTIN_FUNCS);
    OTHER_NAMES
        .iter()
        .find(|(other, _)| other.eq_ignore_ascii_case(name))
        .map(|(_, ours)| *ours)
        .or_else(|| awf_domain::validate::closest(name, names()))
        .or_else(|| {
            let bare = |n: &str| n.replace('_', "").to_ascii_lowercase();
            names().find(|n| bare(n) == bare(name))
        })
        .filter(|m| *m != name)
}

/// Where [`with_function_hint`] puts its did-you-mean.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Hint {
    /// After [`HINT_SEPARATOR`](awf_domain::ports::template::HINT_SEPARATOR), for `check`
    /// (validation shows it as the finding's hint).
    Separate,
    /// At the end of the message in parentheses, for `render` (a run's error).
    Inline,
}

/// A parse error naming a function that does not exist gets the function meant
/// ([`function_meant`]) as a did-you-mean (new user: `trimspace`, then `upcase`, got none,
/// where an expression's typo gets one), at validation and at run time alike.
fn with_function_hint(e: TemplateError, how: Hint) -> TemplateError {
    let TemplateError::Failed(text) = &e else {
        return e;
    };
    let Some(name) = text
        .split("function ")
        .nth(1)
        .and_then(|rest| rest.strip_suffix(" not defined"))
        .map(|n| n.trim_matches('"'))
    else {
        return e;
    };
    match (function_meant(name), how) {
        (Some(c), Hint::Separate) => TemplateError::Failed(format!(
            "{text}{}did you mean '{c}'?",
            awf_domain::ports::template::HINT_SEPARATOR
        )),
        (Some(c), Hint::Inline) => TemplateError::Failed(format!("{text} (did you mean '{c}'?)")),
        (None, _) => e,
    }
}

fn clip(mut s: String) -> String {
    if s.len() > MAX_MESSAGE {
        let mut end = MAX_MESSAGE;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
        s.push('…');
    }
    s
}

fn parse_error(e: &ParseError, prepared: &Prepared<'_>) -> TemplateError {
    let text = match e {
        ParseError::WithContext(ctx, msg) => {
            let col = prepared.original_col(ctx.line, ctx.col);
            format!(
                "template parse error at line {}, column {col}: {msg}",
                ctx.line
            )
        }
        other => format!("template parse error: {other}"),
    };
    TemplateError::Failed(clip(text))
}

/// A parse error of a text with an unclosed action gets a hint naming it (after
/// [`HINT_SEPARATOR`](awf_domain::ports::template::HINT_SEPARATOR), unless it has a hint
/// already): the parser reads on past the `{{` and names whatever it stumbles on (`bad
/// character "`), which did not say what was wrong (new user).
fn with_unclosed_hint(e: TemplateError, prepared: &Prepared<'_>) -> TemplateError {
    let TemplateError::Failed(text) = &e else {
        return e;
    };
    if text.contains(awf_domain::ports::template::HINT_SEPARATOR) {
        return e;
    }
    match unclosed_action(prepared) {
        Some((line, col)) => TemplateError::Failed(format!(
            "{text}{}a `{{{{` without its closing `}}}}` (line {line}, column {col}): close the \
             action, or write a literal `{{{{` as {{{{\"{{{{\"}}}}",
            awf_domain::ports::template::HINT_SEPARATOR
        )),
        None => e,
    }
}

/// Where the first `{{` with no `}}` after it is in `prepared`'s text (line, and column in
/// bytes of the text as written, both 1-based); `None` when every action is closed.
fn unclosed_action(prepared: &Prepared<'_>) -> Option<(usize, usize)> {
    let text = prepared.text.as_ref();
    let mut at = 0;
    while let Some(i) = text.get(at..)?.find("{{") {
        let open = at + i;
        match text.get(open + 2..)?.find("}}") {
            Some(j) => at = open + 2 + j + 2,
            None => {
                let before = text.get(..open)?;
                let line = before.matches('\n').count() + 1;
                let col = open - before.rfind('\n').map_or(0, |n| n + 1) + 1;
                return Some((line, prepared.original_col(line, col)));
            }
        }
    }
    None
}

/// The source text a node occupies: `line` and `col` are 1-based (`col` in bytes), `len`
/// in bytes.
fn node_text(text: &str, line: usize, col: usize, len: usize) -> Option<&str> {
    let line_text = text.split('\n').nth(line.checked_sub(1)?)?;
    let start = col.checked_sub(1)?;
    line_text.get(start..start.checked_add(len)?)
}

/// The path of a field chain as the user wrote it, without the leading `$.`/`.`, cut after
/// `field` when it occurs (the first missing segment). In a pipeline or a call (`.inputs.opt
/// | default "none"`), the first field chain that holds `field` (trial: the path was `opt`
/// alone, which did not say it was an input).
fn path_to(node: &str, field: &str) -> String {
    // A field of nil has no name to look for (`field` empty): the first chain, as in
    // `awfShellDq (.loop.Parent.Item)`, the rewrite of a reference inside double quotes
    // (breaker: the message named nothing).
    if let Some(chain) = node
        .split(|c: char| c.is_whitespace() || matches!(c, '|' | '(' | ')'))
        .filter(|t| t.starts_with('.') || t.starts_with("$."))
        .find(|t| field.is_empty() || t.split('.').any(|s| s == field))
        && chain != node.trim()
    {
        return path_to(chain, field);
    }
    let trimmed = node
        .trim()
        .trim_start_matches('$')
        .trim_start_matches('.')
        .trim();
    let segments: Vec<&str> = trimmed.split('.').collect();
    let plain = segments
        .iter()
        .all(|s| !s.is_empty() && s.bytes().all(scan::is_ident_char));
    if !plain {
        return field.to_owned();
    }
    match segments.iter().position(|s| *s == field) {
        Some(at) => segments[..=at].join("."),
        None => segments.join("."),
    }
}

/// The field read of a loop item in `path` (`loop.Item.name`, `loop.Parent.item.port`):
/// `.loop.Item` is text in a template, so such a read always fails.
fn loop_item_field(path: &str) -> Option<&str> {
    let mut parts = path.split('.');
    if parts.next()? != "loop" {
        return None;
    }
    let item = parts.find(|p| !matches!(*p, "Parent" | "parent"))?;
    if !matches!(item, "Item" | "item") {
        return None;
    }
    parts.next().filter(|f| !f.is_empty())
}

fn exec_error(e: ExecError, prepared: &Prepared<'_>) -> TemplateError {
    // A function ended by the render's budget: that reason, whole, with its hint.
    if let Some(x) = crate::budget::Exceeded::in_text(&e.to_string()) {
        return x.error("template");
    }
    let text = prepared.text.as_ref();
    let ExecError::Structured(s) = &e else {
        return TemplateError::Failed(clip(format!("template error: {e}")));
    };
    let ctx = &s.context;
    let node = node_text(text, ctx.line, ctx.col, ctx.len).unwrap_or("");
    let undefined = if let Some(rest) = s.message.strip_prefix("no field `") {
        Some(path_to(node, rest.split('`').next().unwrap_or("")))
    } else if s.message == "only maps and objects have fields" {
        Some(path_to(node, ""))
    } else {
        None
    };
    if let Some(path) = undefined {
        return match loop_item_field(&path) {
            Some(f) => TemplateError::Failed(format!(
                "undefined variable: {path} (`.loop.Item` is the item as text: an object item \
                 is its JSON text){}{}",
                awf_domain::ports::template::HINT_SEPARATOR,
                awf_domain::validate::loop_item_field_hint(f)
            )),
            None => TemplateError::Undefined(path),
        };
    }
    // `index` names the whole map it searched; keep only the key.
    let message = match s.message.strip_prefix("unable to get ") {
        Some(rest) => {
            let key = rest.split(" in ").next().unwrap_or(rest);
            // `index .loop.Item "name"`: the item is text (a new user).
            let on_item = node
                .split(|c: char| c.is_whitespace() || matches!(c, '(' | ')' | '|'))
                .any(|t| {
                    loop_item_field(&format!("{}.x", t.trim_start_matches(['$', '.']))).is_some()
                });
            if on_item {
                format!(
                    "index: no entry for key {key} (`.loop.Item` is the item as text: an object item is its JSON text){}{}",
                    awf_domain::ports::template::HINT_SEPARATOR,
                    awf_domain::validate::loop_item_field_hint(key.trim_matches('"'))
                )
            } else {
                format!("index: no entry for key {key}")
            }
        }
        None => s.message.clone(),
    };
    // A function's hint (readFile's) is kept whole after the clipped message.
    let (message, hint) = match message.split_once(awf_domain::ports::template::HINT_SEPARATOR) {
        Some((m, h)) => (
            m.to_owned(),
            format!("{}{h}", awf_domain::ports::template::HINT_SEPARATOR),
        ),
        None => (message, String::new()),
    };
    TemplateError::Failed(format!(
        "{}{hint}",
        clip(format!(
            "template error at line {}, column {}: {message}",
            ctx.line,
            prepared.original_col(ctx.line, ctx.col)
        ))
    ))
}

#[cfg(test)]
#[path = "interpolate_tests.rs"]
mod tests;
