//! Text rendering of the dry-run plan.
//!
//! Source: spec/workflow.md §3.12 ("Dry run", text layout).

use std::time::Duration;

use awf_application::plan::Plan;
use awf_application::plan::PlanDetails;
use awf_application::plan::PlannedState;
use awf_domain::duration::format_go;
use serde_json::Value;

use crate::cli::Format;

fn value_text(v: &Value) -> String {
    match v {
        Value::Null => "(not set)".to_owned(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn ms(n: u64) -> String {
    format_go(Duration::from_millis(n))
}

/// The plan in a text `-f` form: `quiet` is the workflow name alone on one line (as in
/// AWF (Go)); `table` and `text` are [`render`]. (`json` is the serialized [`Plan`], printed by
/// the caller; here it falls back to text.)
pub fn render_as(plan: &Plan, format: Format) -> String {
    match format {
        Format::Quiet => format!("{}\n", crate::style::printable(&plan.workflow)),
        Format::Text | Format::Table | Format::Json => render(plan),
    }
}

/// Renders the plan: header, inputs, one block per state, and the closing
/// `No commands will be executed (dry-run mode).` line.
pub fn render(plan: &Plan) -> String {
    let mut s = String::new();
    let title = format!("Dry Run: {}", plan.workflow);
    s.push_str(&title);
    s.push('\n');
    s.push_str(&"=".repeat(title.chars().count()));
    s.push('\n');
    if let Some(d) = plan.description.as_deref().filter(|d| !d.is_empty()) {
        s.push_str(d.trim_end());
        s.push('\n');
    }
    s.push('\n');
    if !plan.inputs.is_empty() {
        s.push_str("Inputs:\n");
        for i in &plan.inputs {
            let mark = if i.missing {
                " (required, not given)"
            } else if i.default {
                " (default)"
            } else if i.config {
                " (from .awf/config.yaml)"
            } else {
                ""
            };
            s.push_str(&format!("  {}: {}{mark}\n", i.name, value_text(&i.value)));
        }
        let missing: Vec<&str> = plan
            .inputs
            .iter()
            .filter(|i| i.missing)
            .map(|i| i.name.as_str())
            .collect();
        if !missing.is_empty() {
            let given = missing
                .iter()
                .map(|n| format!("--input {}", awf_domain::shell::input_arg(n)))
                .collect::<Vec<_>>()
                .join(" ");
            s.push_str(&format!(
                "Note: the plan shows {} where the input is read; a run needs {}: {given}\n",
                if missing.len() == 1 {
                    awf_application::plan::missing_placeholder(missing[0])
                } else {
                    "<missing: …>".to_owned()
                },
                if missing.len() == 1 { "it" } else { "them" },
            ));
        }
        s.push('\n');
    }
    let hooks = [
        ("workflow_start", &plan.hooks.workflow_start),
        ("workflow_end", &plan.hooks.workflow_end),
        ("workflow_error", &plan.hooks.workflow_error),
        ("workflow_cancel", &plan.hooks.workflow_cancel),
    ];
    if hooks.iter().any(|(_, h)| !h.is_empty()) {
        s.push_str("Workflow hooks:\n");
        for (name, actions) in hooks {
            for a in actions {
                s.push_str(&format!("  {name}: {a}\n"));
            }
        }
        s.push('\n');
    }
    s.push_str("Execution Plan:\n---------------\n");
    for st in &plan.states {
        render_state(&mut s, st);
        s.push('\n');
    }
    s.push_str("No commands will be executed (dry-run mode).\n");
    // Every value shown (input defaults, commands, hook `log:` texts, messages) may carry
    // control characters: written as escapes, so none reaches the terminal.
    crate::style::printable_text(&s).into_owned()
}

fn render_state(s: &mut String, st: &PlannedState) {
    let line = |s: &mut String, text: String| {
        for (i, l) in text.lines().enumerate() {
            s.push_str(if i == 0 { "    " } else { "      " });
            s.push_str(l);
            s.push('\n');
        }
    };
    let header = match (&st.details, st.index) {
        (PlanDetails::Terminal { status, .. }, _) => format!("[terminal] {} ({status})", st.name),
        (PlanDetails::Parallel { .. }, _) => format!("[parallel] {}", st.name),
        (PlanDetails::ForEach { .. }, _) => format!("[for_each] {}", st.name),
        (PlanDetails::While { .. }, _) => format!("[while] {}", st.name),
        (_, Some(n)) => format!("[{n}] {}", st.name),
        (_, None) => format!("[-] {}", st.name),
    };
    s.push_str(&header);
    s.push('\n');
    if let Some(d) = &st.description {
        line(s, d.clone());
    }
    match &st.details {
        PlanDetails::Command {
            command,
            script_file,
            script,
            dir,
        } => {
            if let Some(c) = command {
                line(s, format!("Command: {}", c.trim_end()));
            }
            if let Some(f) = script_file {
                line(s, format!("Script: {f}"));
            }
            if let Some(c) = script {
                line(s, format!("Command: {}", c.trim_end()));
            }
            if let Some(d) = dir {
                line(s, format!("Dir: {d}"));
            }
        }
        PlanDetails::Agent {
            provider,
            prompt,
            prompt_file,
            mode,
            options,
            mcp_proxy,
        } => {
            line(s, format!("Provider: {provider}"));
            line(s, format!("Mode: {mode}"));
            if let Some(p) = mcp_proxy {
                let mut served = Vec::new();
                if p.intercept_builtins {
                    served.push("built-ins Read, Write, Edit, Bash, Glob, Grep".to_owned());
                }
                if !p.plugin_tools.is_empty() {
                    served.push(format!("plugin tools {}", p.plugin_tools.join(", ")));
                }
                line(
                    s,
                    format!("MCP proxy: {} ({})", p.server, served.join("; ")),
                );
            }
            if let Some(f) = prompt_file {
                line(s, format!("Prompt file: {f}"));
            }
            if let Some(p) = prompt {
                line(s, format!("Prompt: {}", p.trim_end()));
            }
            if !options.is_empty() {
                let opts: Vec<String> = options
                    .iter()
                    .map(|(k, v)| format!("{k}={}", value_text(v)))
                    .collect();
                line(s, format!("Options: {}", opts.join(", ")));
            }
        }
        PlanDetails::Parallel {
            branches,
            strategy,
            max_concurrent,
        } => {
            line(s, format!("Branches: {}", branches.join(", ")));
            line(s, format!("Strategy: {strategy}"));
            if *max_concurrent > 0 {
                line(s, format!("Max concurrent: {max_concurrent}"));
            }
        }
        PlanDetails::ForEach {
            items,
            body,
            max_iterations,
            break_when,
            on_complete,
        } => {
            line(s, "Type: for_each".to_owned());
            line(s, format!("Items: {items}"));
            loop_common(
                s,
                &line,
                body,
                max_iterations,
                break_when.as_deref(),
                on_complete.as_deref(),
            );
        }
        PlanDetails::While {
            condition,
            body,
            max_iterations,
            break_when,
            on_complete,
        } => {
            line(s, "Type: while".to_owned());
            line(s, format!("Condition: {condition}"));
            loop_common(
                s,
                &line,
                body,
                max_iterations,
                break_when.as_deref(),
                on_complete.as_deref(),
            );
        }
        PlanDetails::Operation { operation, inputs } => {
            line(s, format!("Operation: {operation}"));
            for (k, v) in inputs {
                line(s, format!("Input {k}: {}", value_text(v)));
            }
        }
        PlanDetails::CallWorkflow { workflow, inputs } => {
            line(s, format!("Workflow: {workflow}"));
            for (k, v) in inputs {
                line(s, format!("Input {k}: {v}"));
            }
        }
        PlanDetails::Terminal {
            message, exit_code, ..
        } => {
            if let Some(m) = message {
                line(s, format!("Message: {m}"));
            }
            if let Some(c) = exit_code {
                line(s, format!("Exit code: {c}"));
            }
        }
    }
    for h in &st.hooks_pre {
        line(s, format!("Hook (pre): {h}"));
    }
    for h in &st.hooks_post {
        line(s, format!("Hook (post): {h}"));
    }
    if let Some(t) = st.timeout_ms {
        line(s, format!("Timeout: {}", ms(t)));
    }
    if let Some(a) = &st.approval {
        let options: Vec<String> = a
            .options
            .iter()
            .map(|o| format!("{} ({})", o.id, o.kind.as_str()))
            .collect();
        let mut text = format!("Approval: \"{}\" [{}]", a.message, options.join(", "));
        if let Some(t) = a.timeout_ms {
            text.push_str(&format!(", timeout {}", ms(t)));
        }
        if let Some(o) = &a.on_timeout {
            text.push_str(&format!(", on timeout {o}"));
        }
        line(s, text);
    }
    if let Some(r) = &st.retry {
        let mut text = format!("Retry: {} attempts, {} backoff", r.max_attempts, r.backoff);
        if r.initial_delay_ms > 0 {
            text.push_str(&format!(", initial delay {}", ms(r.initial_delay_ms)));
        }
        if let Some(m) = r.max_delay_ms {
            text.push_str(&format!(", max delay {}", ms(m)));
        }
        line(s, text);
    }
    let mut capture = Vec::new();
    if let Some(v) = &st.capture.stdout {
        capture.push(format!("stdout -> {v}"));
    }
    if let Some(v) = &st.capture.stderr {
        capture.push(format!("stderr -> {v}"));
    }
    if let Some(c) = st.capture_max_size {
        capture.push(format!("max {c} bytes"));
    }
    if !capture.is_empty() {
        line(s, format!("Capture: {}", capture.join(", ")));
    }
    if st.continue_on_error {
        line(s, "Continue on error: yes".to_owned());
    }
    for r in &st.routes {
        let inline = r
            .inline_error
            .as_ref()
            .map(|e| (e.message.as_deref(), e.exit_code));
        line(s, route_text(r.on, r.when.as_deref(), &r.target, inline));
    }
}

/// One route out of a state, as `--dry-run` and `--interactive` show it: `→ on_success: b`,
/// `→ when "expr": t`, `→ default: t`, or for an inline `on_failure: {message, status}`
/// (`inline_error`: its message and exit code) `→ on_failure: fail "msg" (exit N)` (exit 3
/// when it sets none).
pub(crate) fn route_text(
    on: &str,
    when: Option<&str>,
    target: &str,
    inline_error: Option<(Option<&str>, Option<i32>)>,
) -> String {
    match (inline_error, when) {
        (Some((message, code)), _) => {
            let msg = message.map(|m| format!(" \"{m}\"")).unwrap_or_default();
            format!("→ {on}: fail{msg} (exit {})", code.unwrap_or(3))
        }
        (None, Some(w)) => format!("→ when \"{w}\": {target}"),
        (None, None) => format!("→ {on}: {target}"),
    }
}

fn loop_common(
    s: &mut String,
    line: &dyn Fn(&mut String, String),
    body: &[String],
    max_iterations: &str,
    break_when: Option<&str>,
    on_complete: Option<&str>,
) {
    line(s, format!("Body: {}", body.join(", ")));
    line(s, format!("Max iterations: {max_iterations}"));
    if let Some(b) = break_when {
        line(s, format!("Break when: {b}"));
    }
    if let Some(c) = on_complete {
        line(s, format!("On complete: {c}"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use awf_application::plan::PlanInput;
    use awf_application::plan::PlanRetry;
    use awf_application::plan::PlanRoute;
    use awf_application::plan::PlanWorkflowHooks;
    use serde_json::json;

    fn state(index: Option<usize>, name: &str, details: PlanDetails) -> PlannedState {
        PlannedState {
            index,
            name: name.into(),
            description: None,
            details,
            hooks_pre: Vec::new(),
            hooks_post: Vec::new(),
            timeout_ms: None,
            retry: None,
            approval: None,
            capture_max_size: None,
            capture: Default::default(),
            continue_on_error: false,
            routes: Vec::new(),
        }
    }

    #[test]
    fn renders_the_spec_layout() {
        let mut first = state(
            Some(1),
            "extract",
            PlanDetails::Command {
                command: Some("cat \"/x\"".into()),
                script_file: None,
                script: None,
                dir: None,
            },
        );
        first.timeout_ms = Some(30_000);
        first.retry = Some(PlanRetry {
            max_attempts: 3,
            backoff: "exponential",
            initial_delay_ms: 1000,
            max_delay_ms: None,
            multiplier: 2.0,
        });
        first.hooks_pre = vec!["log: hi".into()];
        first.routes = vec![
            PlanRoute {
                on: "when",
                when: Some("inputs.count > 5".into()),
                target: "big".into(),
                inline_error: None,
            },
            PlanRoute {
                on: "on_success",
                when: None,
                target: "done".into(),
                inline_error: None,
            },
        ];
        let plan = Plan {
            workflow: "demo".into(),
            identifier: "demo".into(),
            description: Some("A demo".into()),
            inputs: vec![
                PlanInput {
                    name: "file".into(),
                    value: json!("/x"),
                    default: false,
                    config: false,
                    missing: false,
                },
                PlanInput {
                    name: "count".into(),
                    value: json!(10),
                    default: true,
                    config: false,
                    missing: false,
                },
                PlanInput {
                    name: "cc".into(),
                    value: json!("gcc"),
                    default: false,
                    config: true,
                    missing: false,
                },
            ],
            hooks: PlanWorkflowHooks::default(),
            states: vec![
                first,
                state(
                    None,
                    "done",
                    PlanDetails::Terminal {
                        status: "success",
                        message: Some("ok".into()),
                        exit_code: None,
                    },
                ),
            ],
        };
        assert_eq!(
            render(&plan),
            "Dry Run: demo\n=============\nA demo\n\nInputs:\n  file: /x\n  count: 10 (default)\n  cc: gcc (from .awf/config.yaml)\n\n\
             Execution Plan:\n---------------\n\
             [1] extract\n    Command: cat \"/x\"\n    Hook (pre): log: hi\n    Timeout: 30s\n    \
             Retry: 3 attempts, exponential backoff, initial delay 1s\n    → when \"inputs.count > 5\": big\n    \
             → on_success: done\n\n\
             [terminal] done (success)\n    Message: ok\n\n\
             No commands will be executed (dry-run mode).\n"
        );
    }
}
