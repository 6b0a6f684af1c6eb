//! `awf diagram`: a workflow as a Graphviz DOT graph.
//!
//! Shapes: command `box`, agent rounded `box`, parallel `diamond`, for_each/while `hexagon`,
//! operation `box3d`, call_workflow `folder`, terminal `oval` (success filled light green;
//! failure double-bordered and filled light red). Edges: `on_success` solid, `on_failure`
//! `style=dashed, color=red`, transitions labelled with their `when`, parallel branches and
//! loop bodies dotted, the loop's `on_complete` labelled `complete`. An invisible `__start__`
//! point leads to the initial state. Each parallel state's branches sit inside a dashed
//! `cluster_<name>` subgraph labelled `<name> branches` (as in AWF (Go)).
//!
//! Source: spec/workflow.md §4.2 (`awf diagram`).

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

use awf_domain::AwfError;
use awf_domain::ErrorCode;
use awf_domain::workflow::State;
use awf_domain::workflow::StateKind;
use awf_domain::workflow::TerminalStatus;
use awf_domain::workflow::Workflow;

use crate::cli::DiagramArgs;
use crate::cli::Direction;
use crate::ctx::Ctx;
use crate::errors::CliError;
use crate::errors::Outcome;
use crate::wiring;

/// Rendering options.
#[derive(Debug, Clone)]
pub struct DiagramOptions {
    /// `rankdir`.
    pub direction: Direction,
    /// State drawn with a thick orange border.
    pub highlight: Option<String>,
    /// States of a workflow with errors whose `type:` names no step type: name → the type
    /// as written ([`LoadedWorkflow::unknown_types`]). Each is drawn as a plain node (no
    /// shape of a kind, never a terminal), and `-f json` gives it that type.
    ///
    /// [`LoadedWorkflow::unknown_types`]: awf_domain::ports::repository::LoadedWorkflow::unknown_types
    pub unknown_types: BTreeMap<String, String>,
}

/// Quotes a DOT identifier or label.
pub fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => {}
            // Control and bidirectional characters (a name from the workflow file) as a
            // `\u{1b}` escape, its backslash doubled: DOT shows it, a terminal ignores it.
            c if awf_domain::printable::escaped(c) => {
                out.push('\\');
                out.extend(c.escape_unicode());
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn node_attrs(state: &State) -> Vec<String> {
    let v = |xs: &[&str]| xs.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    match &state.kind {
        StateKind::Command(_) => v(&["shape=box"]),
        StateKind::Agent(_) => v(&["shape=box", "style=rounded"]),
        StateKind::Parallel(_) => v(&["shape=diamond"]),
        StateKind::Loop(_) => v(&["shape=hexagon"]),
        StateKind::Operation(_) => v(&["shape=box3d"]),
        StateKind::CallWorkflow(_) => v(&["shape=folder"]),
        StateKind::Terminal(t) => match t.status {
            TerminalStatus::Success => v(&["shape=oval", "style=filled", "fillcolor=\"#ccffcc\""]),
            TerminalStatus::Failure => v(&[
                "shape=oval",
                "peripheries=2",
                "style=filled",
                "fillcolor=\"#ffcccc\"",
            ]),
        },
    }
}

/// What a node shows: the state's name, or for the failure terminal the loader makes from an
/// inline `on_failure: {message, status}` (`__inline_error_<step>`), its message (else
/// `<step>: on_failure`), never the internal name.
pub fn node_label(state: &State) -> String {
    match awf_domain::workflow::inline_error_step(&state.name) {
        Some(step) => match &state.kind {
            StateKind::Terminal(t) => t
                .message
                .clone()
                .filter(|m| !m.trim().is_empty())
                .unwrap_or_else(|| format!("{step}: on_failure")),
            _ => state.name.clone(),
        },
        None => state.name.clone(),
    }
}

/// The `subgraph "cluster_<name>"` block that draws the branches of parallel state `name`
/// inside a dashed box labelled `<name> branches` (as AWF (Go) does); branches the workflow
/// does not define are left out, and no block is written when none is left.
fn cluster(wf: &Workflow, name: &str, branches: &[String]) -> String {
    let members: Vec<&String> = branches.iter().filter(|b| wf.state(b).is_some()).collect();
    if members.is_empty() {
        return String::new();
    }
    let mut s = format!("  subgraph {} {{\n", quote(&format!("cluster_{name}")));
    s.push_str(&format!(
        "    label={};\n    style=dashed;\n",
        quote(&format!("{name} branches"))
    ));
    for b in members {
        s.push_str(&format!("    {};\n", node_id(wf, b)));
    }
    s.push_str("  }\n");
    s
}

/// A state's DOT node id: its name as users see it ([`Workflow::display_name`]: the inline
/// `on_failure` terminal of step `a` is `"a's on_failure"`, never `__inline_error_a`),
/// quoted, so a `'` or a space in it keeps the DOT valid.
fn node_id(wf: &Workflow, name: &str) -> String {
    quote(&wf.display_name(name))
}

/// Builds the DOT text of `wf`: nodes, then one cluster per parallel state (its branches),
/// then edges. Node ids and edge ends are the states' names as users see them
/// ([`Workflow::display_name`]).
pub fn to_dot(wf: &Workflow, opts: &DiagramOptions) -> String {
    let mut s = format!("digraph {} {{\n", quote(&wf.name));
    s.push_str(&format!("  rankdir={};\n", opts.direction.as_str()));
    s.push_str("  node [fontname=\"Helvetica\"];\n  edge [fontname=\"Helvetica\", fontsize=10];\n");
    s.push_str("  __start__ [shape=point];\n");
    for state in wf.states.values() {
        let mut attrs = vec![format!("label={}", quote(&node_label(state)))];
        if !opts.unknown_types.contains_key(&state.name) {
            attrs.extend(node_attrs(state));
        }
        if opts.highlight.as_deref() == Some(state.name.as_str()) {
            attrs.push("penwidth=3".to_owned());
            attrs.push("color=orange".to_owned());
        }
        s.push_str(&format!(
            "  {} [{}];\n",
            node_id(wf, &state.name),
            attrs.join(", ")
        ));
    }
    for state in wf.states.values() {
        if let StateKind::Parallel(p) = &state.kind {
            s.push_str(&cluster(wf, &state.name, &p.branches));
        }
    }
    s.push_str(&format!("  __start__ -> {};\n", node_id(wf, &wf.initial)));
    for state in wf.states.values() {
        let from = node_id(wf, &state.name);
        let edge = |s: &mut String, to: &str, attrs: &[String]| {
            if attrs.is_empty() {
                s.push_str(&format!("  {from} -> {};\n", node_id(wf, to)));
            } else {
                s.push_str(&format!(
                    "  {from} -> {} [{}];\n",
                    node_id(wf, to),
                    attrs.join(", ")
                ));
            }
        };
        for t in &state.transitions {
            let label = t
                .when
                .as_ref()
                .map_or_else(|| "default".to_owned(), Clone::clone);
            edge(&mut s, &t.goto, &[format!("label={}", quote(&label))]);
        }
        match &state.kind {
            StateKind::Parallel(p) => {
                for b in &p.branches {
                    edge(
                        &mut s,
                        b,
                        &["style=dotted".to_owned(), "label=\"branch\"".to_owned()],
                    );
                }
            }
            StateKind::Loop(l) => {
                for b in &l.body {
                    edge(
                        &mut s,
                        b,
                        &["style=dotted".to_owned(), "label=\"body\"".to_owned()],
                    );
                }
                if let Some(c) = &l.on_complete {
                    edge(&mut s, c, &["label=\"complete\"".to_owned()]);
                }
            }
            _ => {}
        }
        if let Some(to) = &state.on_success {
            edge(&mut s, to, &[]);
        }
        if let Some(to) = &state.on_failure {
            edge(
                &mut s,
                to,
                &["style=dashed".to_owned(), "color=red".to_owned()],
            );
        }
    }
    s.push_str("}\n");
    s
}

/// The graph of `wf` as JSON (`awf diagram -f json`): `{"workflow", "initial", "direction",
/// "highlight", "nodes": [{"name", "label", "type", "terminal_status"?}], "edges": [{"from", "to",
/// "kind": "success" | "failure" | "transition" | "branch" | "body" | "complete", "when"?}],
/// "dot"}`; the same nodes and edges as [`to_dot`], whose text is `dot`. Every state name in
/// it (`initial`, `highlight`, a node's `name`, an edge's `from` and `to`) is the name users
/// see, as the DOT ids are ([`Workflow::display_name`]: `a's on_failure`).
pub fn to_json(wf: &Workflow, opts: &DiagramOptions) -> serde_json::Value {
    use serde_json::json;
    let shown = |name: &str| wf.display_name(name);
    let nodes: Vec<serde_json::Value> = wf
        .states
        .values()
        .map(|st| {
            if let Some(ty) = opts.unknown_types.get(&st.name) {
                return json!({"name": shown(&st.name), "label": node_label(st), "type": ty});
            }
            let mut n = json!({"name": shown(&st.name), "label": node_label(st), "type": st.kind.kind_name()});
            if let StateKind::Terminal(t) = &st.kind {
                n["terminal_status"] = json!(match t.status {
                    TerminalStatus::Success => "success",
                    TerminalStatus::Failure => "failure",
                });
            }
            n
        })
        .collect();
    let mut edges = Vec::new();
    for st in wf.states.values() {
        let from = shown(&st.name);
        for t in &st.transitions {
            edges.push(
                json!({"from": from, "to": shown(&t.goto), "kind": "transition", "when": t.when}),
            );
        }
        let mut edge = |to: &str, kind: &str| {
            edges.push(json!({"from": from, "to": shown(to), "kind": kind}));
        };
        match &st.kind {
            StateKind::Parallel(p) => p.branches.iter().for_each(|b| edge(b, "branch")),
            StateKind::Loop(l) => {
                l.body.iter().for_each(|b| edge(b, "body"));
                if let Some(c) = &l.on_complete {
                    edge(c, "complete");
                }
            }
            _ => {}
        }
        if let Some(to) = &st.on_success {
            edge(to, "success");
        }
        if let Some(to) = &st.on_failure {
            edge(to, "failure");
        }
    }
    json!({
        "workflow": wf.name,
        "initial": shown(&wf.initial),
        "direction": opts.direction.as_str(),
        "highlight": opts.highlight.as_deref().map(shown),
        "nodes": nodes,
        "edges": edges,
        "dot": to_dot(wf, opts),
    })
}

/// Runs `awf diagram`. A `--highlight` state the workflow lacks is a warning on stderr (with a
/// did-you-mean), not an error: as AWF (Go), the graph is drawn without a highlight. An inline
/// `on_failure`'s terminal is named as everywhere else (`a's on_failure`), for `--highlight`
/// too. A workflow `awf validate` rejects is drawn as written, after a warning on stderr that
/// names its first error (an edge may lead to a state it does not declare).
///
/// # Errors
/// Load errors of the workflow; `SYSTEM.IO.WRITE_FAILED` when the output file cannot be
/// written, or when an image format is asked for and Graphviz `dot` is not installed
/// (`SYSTEM.IO.PERMISSION_DENIED` when it cannot be run); `EXECUTION.COMMAND.FAILED` when
/// `dot` fails.
pub fn run(ctx: &Ctx, args: &DiagramArgs) -> Result<Outcome, CliError> {
    let w = wiring::build(ctx.storage.as_deref())?;
    // A file that loads, or one whose decoding found errors (an unknown step type, a field
    // of the wrong type) read again leniently: drawn as written, after the WARN below. Only
    // a file that cannot be read as a workflow at all (YAML syntax) is an error.
    let loaded = w
        .services
        .repository
        .load_for_validation(&args.workflow, None)?;
    if !ctx.quiet {
        warn_if_invalid(ctx, &w, &args.workflow, &loaded.workflow.name);
    }
    let highlight = args
        .highlight
        .as_deref()
        .map(|h| highlighted_state(&loaded.workflow, h));
    if let Some(h) = &args.highlight
        && highlight.as_ref().is_some_and(Option::is_none)
        && !ctx.quiet
    {
        let names: Vec<String> = loaded
            .workflow
            .states
            .keys()
            .map(|n| loaded.workflow.display_name(n))
            .collect();
        let guess = match awf_domain::validate::closest(h, names.iter().map(String::as_str)) {
            Some(c) => format!(" (did you mean '{c}'?)"),
            None => format!(" (states: {})", names.join(", ")),
        };
        let text = format!(
            "--highlight: workflow '{}' has no state '{h}'{guess}; nothing is highlighted",
            loaded.workflow.name
        );
        warn(ctx, &text);
    }
    let opts = DiagramOptions {
        direction: args.direction,
        // An unknown state highlights nothing; the name is kept for `-f json`'s `highlight`.
        highlight: highlight
            .flatten()
            .map(str::to_owned)
            .or_else(|| args.highlight.clone()),
        unknown_types: loaded.unknown_types.clone(),
    };
    let dot = to_dot(&loaded.workflow, &opts);
    match &args.output {
        None if ctx.json() => crate::json_out::print(&to_json(&loaded.workflow, &opts))?,
        None => {
            crate::stdout_check::checked(std::io::stdout().lock().write_all(dot.as_bytes()));
        }
        Some(path) => write_output(path, &dot)?,
    }
    Ok(Outcome::Success)
}

/// The state `--highlight NAME` names: a state of that name, or the inline `on_failure`
/// terminal whose user-facing name it is (`a's on_failure`); `None` when there is none.
fn highlighted_state<'w>(wf: &'w Workflow, name: &str) -> Option<&'w str> {
    wf.state_by_display_name(name).map(|s| s.name.as_str())
}

/// A `WARN` line on stderr.
fn warn(ctx: &Ctx, text: &str) {
    let _ = writeln!(
        std::io::stderr().lock(),
        "{} {}",
        ctx.err_style.yellow("WARN"),
        crate::style::printable(text)
    );
}

/// Warns when `awf validate` rejects the workflow: its first error, how many others, and
/// the command that lists them (the diagram is still drawn, as written).
fn warn_if_invalid(ctx: &Ctx, w: &wiring::Wiring, identifier: &str, name: &str) {
    let Ok(report) = awf_application::validate_workflow(&w.services, identifier, &w.env) else {
        return;
    };
    let errors: Vec<_> = report
        .diagnostics
        .iter()
        .filter(|d| d.severity == awf_domain::ports::repository::Severity::Error)
        .collect();
    let Some(first) = errors.first() else {
        return;
    };
    let more = match errors.len() - 1 {
        0 => String::new(),
        n => format!(" (and {n} more error(s))"),
    };
    let text = format!(
        "workflow '{name}' is invalid: {}{more}; the diagram shows it as written (`awf validate {}` lists the errors)",
        first.to_error().message(),
        awf_domain::shell::quote_arg(identifier)
    );
    warn(ctx, &text);
}

fn write_output(path: &Path, dot: &str) -> Result<(), CliError> {
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .unwrap_or("dot")
        .to_ascii_lowercase();
    let write_err = |e: std::io::Error| {
        AwfError::new(
            ErrorCode::SystemIoWriteFailed,
            format!("cannot write {}: {e}", path.display()),
        )
    };
    match ext.as_str() {
        "png" | "svg" | "pdf" => {
            let mut child = std::process::Command::new("dot")
                .arg(format!("-T{ext}"))
                .arg("-o")
                .arg(path)
                .stdin(std::process::Stdio::piped())
                .spawn()
                .map_err(|e| {
                    // The tool is missing or cannot be run: a SYSTEM error (exit 4), not a
                    // failed command.
                    let (code, what) = match e.kind() {
                        std::io::ErrorKind::NotFound => (
                            ErrorCode::SystemIoWriteFailed,
                            "Graphviz `dot` is not installed (not found on PATH)".to_owned(),
                        ),
                        std::io::ErrorKind::PermissionDenied => (
                            ErrorCode::SystemIoPermissionDenied,
                            format!("Graphviz `dot` cannot be run: {e}"),
                        ),
                        _ => (
                            ErrorCode::SystemIoWriteFailed,
                            format!("Graphviz `dot` cannot be run: {e}"),
                        ),
                    };
                    AwfError::new(
                        code,
                        format!("cannot write {}: {what}", path.display()),
                    )
                    .with_hint(format!(
                        "install Graphviz (`apt install graphviz`, `brew install graphviz`) to render .{ext}, \
                         or write DOT text instead (-o graph.dot, or no -o)"
                    ))
                })?;
            if let Some(mut stdin) = child.stdin.take() {
                stdin.write_all(dot.as_bytes()).map_err(write_err)?;
            }
            let status = child.wait().map_err(write_err)?;
            if !status.success() {
                return Err(CliError::Awf(
                    AwfError::new(
                        ErrorCode::ExecutionCommandFailed,
                        format!("Graphviz `dot` failed ({status})"),
                    )
                    .with_hint("its message is above; or write a .dot file (-o graph.dot)"),
                ));
            }
            Ok(())
        }
        _ => std::fs::write(path, dot).map_err(|e| CliError::Awf(write_err(e))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use awf_domain::workflow::CommandSource;
    use awf_domain::workflow::CommandStep;
    use awf_domain::workflow::LoopOver;
    use awf_domain::workflow::LoopStep;
    use awf_domain::workflow::MaxIterations;
    use awf_domain::workflow::TerminalState;
    use awf_domain::workflow::Transition;
    use indexmap::IndexMap;

    fn st(name: &str, kind: StateKind) -> State {
        State::new(name, kind)
    }

    fn small() -> Workflow {
        let mut a = st(
            "a",
            StateKind::Command(CommandStep {
                source: CommandSource::Inline("echo".into()),
                dir: None,
            }),
        );
        a.transitions = vec![Transition {
            when: Some("inputs.x == \"y\"".into()),
            goto: "l".into(),
        }];
        a.on_success = Some("done".into());
        a.on_failure = Some("err".into());
        let mut l = st(
            "l",
            StateKind::Loop(LoopStep {
                over: LoopOver::Items("[1]".into()),
                body: vec!["b".into()],
                max_iterations: MaxIterations::Static(3),
                break_when: None,
                on_complete: Some("done".into()),
            }),
        );
        l.description = None;
        let mut b = st(
            "b",
            StateKind::Command(CommandStep {
                source: CommandSource::Inline("x".into()),
                dir: None,
            }),
        );
        b.on_success = Some("l".into());
        let term = |s| {
            StateKind::Terminal(TerminalState {
                status: s,
                message: None,
                exit_code: None,
            })
        };
        let mut states = IndexMap::new();
        for s in [
            a,
            l,
            b,
            st("done", term(TerminalStatus::Success)),
            st("err", term(TerminalStatus::Failure)),
        ] {
            states.insert(s.name.clone(), s);
        }
        Workflow {
            name: "demo".into(),
            version: None,
            description: None,
            author: None,
            tags: Vec::new(),
            inputs: Vec::new(),
            env: Vec::new(),
            initial: "a".into(),
            states,
            hooks: Default::default(),
            outputs: Vec::new(),
            shell_quote: false,
            budget: None,
            source: Default::default(),
        }
    }

    #[test]
    fn dot_output_for_a_small_workflow() {
        let dot = to_dot(
            &small(),
            &DiagramOptions {
                direction: Direction::Lr,
                highlight: Some("b".into()),
                unknown_types: BTreeMap::new(),
            },
        );
        assert_eq!(
            dot,
            r##"digraph "demo" {
  rankdir=LR;
  node [fontname="Helvetica"];
  edge [fontname="Helvetica", fontsize=10];
  __start__ [shape=point];
  "a" [label="a", shape=box];
  "l" [label="l", shape=hexagon];
  "b" [label="b", shape=box, penwidth=3, color=orange];
  "done" [label="done", shape=oval, style=filled, fillcolor="#ccffcc"];
  "err" [label="err", shape=oval, peripheries=2, style=filled, fillcolor="#ffcccc"];
  __start__ -> "a";
  "a" -> "l" [label="inputs.x == \"y\""];
  "a" -> "done";
  "a" -> "err" [style=dashed, color=red];
  "l" -> "b" [style=dotted, label="body"];
  "l" -> "done" [label="complete"];
  "b" -> "l";
}
"##
        );
    }

    /// The inline `on_failure` terminal of step `a` is node `"a's on_failure"` (quoted: the
    /// `'` and the spaces stay one DOT id), in the DOT text and in the JSON's nodes, edges and
    /// `highlight`; never the internal `__inline_error_a`.
    #[test]
    fn an_inline_failure_terminal_is_drawn_under_its_user_facing_name() {
        let mut wf = small();
        wf.states["a"].on_failure = Some("__inline_error_a".into());
        wf.states.shift_remove("err");
        wf.states.insert(
            "__inline_error_a".into(),
            st(
                "__inline_error_a",
                StateKind::Terminal(TerminalState {
                    status: TerminalStatus::Failure,
                    message: Some("a broke".into()),
                    exit_code: Some(4),
                }),
            ),
        );
        let opts = DiagramOptions {
            direction: Direction::Tb,
            highlight: Some("__inline_error_a".into()),
            unknown_types: BTreeMap::new(),
        };
        let dot = to_dot(&wf, &opts);
        assert!(!dot.contains("__inline_error"), "{dot}");
        assert!(
            dot.contains(
                "  \"a's on_failure\" [label=\"a broke\", shape=oval, peripheries=2, style=filled, \
                 fillcolor=\"#ffcccc\", penwidth=3, color=orange];\n"
            ),
            "{dot}"
        );
        assert!(
            dot.contains("  \"a\" -> \"a's on_failure\" [style=dashed, color=red];\n"),
            "{dot}"
        );
        let json = to_json(&wf, &opts);
        assert_eq!(json["highlight"], "a's on_failure");
        assert_eq!(
            json["nodes"][4],
            serde_json::json!({"name": "a's on_failure", "label": "a broke", "type": "terminal", "terminal_status": "failure"})
        );
        assert_eq!(
            json["edges"][2],
            serde_json::json!({"from": "a", "to": "a's on_failure", "kind": "failure"})
        );
        assert!(!json.to_string().contains("__inline_error"), "{json}");
        assert_eq!(
            highlighted_state(&wf, "a's on_failure"),
            Some("__inline_error_a")
        );
    }

    #[test]
    fn quoting_escapes() {
        assert_eq!(quote("a\"b\\c\nd"), "\"a\\\"b\\\\c\\nd\"");
        assert_eq!(quote("s\u{1b}]0;T\u{7}"), r#""s\\u{1b}]0;T\\u{7}""#);
    }
}
