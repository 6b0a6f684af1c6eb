//! Fixes of trial leftovers of `awf validate`, over the real binary: a NUL byte written in an
//! agent's prompt (which a CLI agent gets on its command line) is an error at its line; a
//! `prompt_file` whose template does not parse is reported naming the file (an inline
//! prompt's is an error); `index .loop.Item "name"` over a loop of plain items is an error;
//! and a workflow's `budget:` counts what its sub-workflows' agent steps spent.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use awf_mock_llm::MockLlm;
use awf_tests::Sandbox;
use pretty_assertions::assert_eq;
use serde_json::Value;
use serde_json::json;

/// `awf validate <file>` of `yaml` written as `file`: (exit code, stderr).
fn validate(sb: &Sandbox, file: &str, yaml: &str) -> (i32, String) {
    sb.write(file, yaml).unwrap();
    let r = sb.run(&["validate", file]).unwrap();
    (r.code, r.stderr)
}

/// Item 1: a NUL byte in a `claude` step's prompt (YAML `"\0"`) is an error at the prompt's
/// line with the YAML hint; `awf run` refuses it before starting, as a command's.
#[test]
fn a_nul_byte_in_a_cli_agent_s_prompt_is_an_error_at_its_line() {
    let sb = Sandbox::new().unwrap();
    let yaml = "name: n\nstates:\n  initial: a\n  a:\n    type: agent\n    provider: claude\n    prompt: \"colour \\033[1m here\"\n    on_success: done\n  done: {type: terminal}\n";
    let (code, stderr) = validate(&sb, "n.yaml", yaml);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains(
            "n.yaml:7:5: error [WORKFLOW.VALIDATION.INVALID_STATE] states.a.prompt: the prompt holds a NUL byte (at byte 8), which no command line can carry (the agent's CLI gets it as an argument): the run would fail here\n  Hint: in a YAML double-quoted string `\\0` is a NUL byte: write `\\\\0` for a backslash then `0`, or use single quotes or a block scalar (`|`), where a backslash is itself"
        ),
        "{stderr}"
    );
    let r = sb.run(&["run", "n.yaml"]).unwrap();
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(
        r.stderr
            .contains("states.a.prompt: the prompt holds a NUL byte"),
        "{}",
        r.stderr
    );
    // Sent as JSON (openai_compatible), a NUL byte is no problem.
    let (code, stderr) = validate(
        &sb,
        "h.yaml",
        &yaml.replace("provider: claude", "provider: openai_compatible"),
    );
    assert_eq!(code, 0, "{stderr}");
    assert!(!stderr.contains("NUL"), "{stderr}");
}

/// Item 2: a `prompt_file` (relative to the workflow's directory, as a run reads it) whose
/// template does not parse is a warning naming the file, and the summary says the run fails
/// there; a run fails at that step with EXECUTION.TEMPLATE.FAILED. The same text inline is an
/// error.
#[test]
fn a_prompt_file_whose_template_does_not_parse_is_reported_naming_the_file() {
    let sb = Sandbox::new().unwrap();
    sb.write("wf/prompts/ask.md", "Review {{.inputs.x | upcase}} now\n")
        .unwrap();
    let yaml = "name: p\ninputs:\n  - {name: x, default: a}\nstates:\n  initial: a\n  a:\n    type: agent\n    provider: openai_compatible\n    prompt_file: prompts/ask.md\n    on_success: done\n  done: {type: terminal}\n";
    sb.write("wf/p.yaml", yaml).unwrap();
    let v = sb.run(&["validate", "wf/p.yaml"]).unwrap();
    let (code, stderr) = (v.code, v.stderr);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stderr.contains(
            "warning [WORKFLOW.VALIDATION.INVALID_REFERENCE] states.a.prompt_file: prompt file prompts/ask.md: template does not parse: template parse error at line 1, column 22: function upcase not defined (the step fails when it runs)\n  Hint: did you mean 'upper'?"
        ),
        "{stderr}"
    );
    assert_eq!(
        v.stdout,
        "Workflow 'wf/p.yaml' has no errors, but its run will fail at states.a.prompt_file (1 warning)\n"
    );
    // The run fails at the step, before any call (no provider is configured at all).
    let r = sb.run(&["run", "wf/p.yaml", "-f", "json"]).unwrap();
    let doc = r.json().unwrap();
    assert_eq!(r.code, 3, "{doc:#}");
    assert!(
        doc["states"]["a"]["error"]
            .as_str()
            .unwrap()
            .contains("resolve prompt file contents"),
        "{doc:#}"
    );
    // A file that parses: nothing to say.
    sb.write("wf/prompts/ask.md", "Review {{.inputs.x | upper}} now\n")
        .unwrap();
    let (code, stderr) = validate(&sb, "wf/p.yaml", yaml);
    assert_eq!(code, 0, "{stderr}");
    assert!(!stderr.contains("prompt_file"), "{stderr}");
    // Inline, the same template is an error at the prompt's line.
    let (code, stderr) = validate(
        &sb,
        "wf/i.yaml",
        &yaml.replace(
            "prompt_file: prompts/ask.md",
            "prompt: \"Review {{.inputs.x | upcase}} now\"",
        ),
    );
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains(
            "i.yaml:9:21: error [WORKFLOW.VALIDATION.INVALID_REFERENCE] states.a.prompt: template does not parse: template parse error at line 1, column 22: function upcase not defined\n  Hint: did you mean 'upper'?"
        ),
        "{stderr}"
    );
}

const PLAIN_ITEMS: &str = "name: l\nstates:\n  initial: each\n  each:\n    type: for_each\n    items: [api, web]\n    body: [s]\n    on_complete: done\n  s:\n    type: step\n    command: echo {{index .loop.Item \"name\"}}\n  done: {type: terminal}\n";

/// Item 3: `index .loop.Item "name"` over a loop listing plain strings fails the run at the
/// step; `awf validate` says so at the command's line, and a run refuses it; items from a
/// template are left to the run.
#[test]
fn an_index_of_a_plain_loop_item_is_an_error() {
    let sb = Sandbox::new().unwrap();
    let (code, stderr) = validate(&sb, "l.yaml", PLAIN_ITEMS);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains(
            "l.yaml:11:19: error [WORKFLOW.VALIDATION.INVALID_REFERENCE] states.s.command: loop reference \"{{index .loop.Item \"name\"}}\" in states.s.command: the items of loop \"each\" are plain values (strings, numbers or booleans), so `.loop.Item` has no key \"name\": the step would fail at every item\n  Hint: `.loop.Item` is the item itself (`{{.loop.Item}}`); to loop over records, list objects as items (`items: [{name: a}]`) and read a field from the item's JSON, e.g. in a command `echo {{shell_quote .loop.Item}} | jq -r .name`"
        ),
        "{stderr}"
    );
    let r = sb.run(&["run", "l.yaml"]).unwrap();
    assert_eq!(r.code, 2, "{}", r.stderr);
    // From a template, the items are not known before the run.
    let templated = PLAIN_ITEMS
        .replace(
            "name: l\n",
            "name: l\ninputs:\n  - {name: list, default: '[\"a\"]'}\n",
        )
        .replace("items: [api, web]", "items: \"{{.inputs.list}}\"");
    let (code, stderr) = validate(&sb, "t.yaml", &templated);
    assert_eq!(code, 0, "{stderr}");
    assert!(!stderr.contains("has no key"), "{stderr}");
}

/// A sandbox whose `openai_compatible` steps talk to `mock` (model `mock-model`).
fn openai_sandbox(mock: &MockLlm) -> Sandbox {
    let mut sb = Sandbox::new().unwrap();
    sb.set_env("OPENAI_BASE_URL", &format!("{}/v1", mock.url()));
    sb.set_env("OPENAI_MODEL", "mock-model");
    sb.set_env("OPENAI_API_KEY", "sk-mock-key-123");
    sb
}

/// `awf run <file> -f json` of `yaml` written as `file`: (exit code, document).
fn run_json(sb: &Sandbox, file: &str, yaml: &str) -> (i32, Value) {
    let r = sb.run_workflow(file, yaml, &["-f", "json"]).unwrap();
    let doc = r
        .json()
        .unwrap_or_else(|e| panic!("{e}\n{}\n{}", r.stdout, r.stderr));
    (r.code, doc)
}

const CHILD: &str = "name: child\nstates:\n  initial: c1\n  c1: {type: agent, provider: openai_compatible, prompt: child one, on_success: c2}\n  c2: {type: agent, provider: openai_compatible, prompt: child two, on_success: done}\n  done: {type: terminal}\n";

/// Item 4: the workflow's `budget:` counts its sub-workflows' agent calls. After a call whose
/// child spent past the parent's budget, the parent's next agent step does not start; and
/// inside the child, an agent step does not start once the parent's budget is spent. (Not a
/// defect: the run tree shares one spend, and the child checks its callers' budgets.)
#[test]
fn a_workflow_budget_counts_the_spend_of_its_sub_workflows() {
    // 18 tokens a call.
    let mock =
        MockLlm::start(json!({"default": {"text": "ok", "usage": {"input": 11, "output": 7}}}));
    let sb = openai_sandbox(&mock);
    sb.write("child.yaml", CHILD).unwrap();
    // The child's two calls start (0, then 18 tokens spent, under 30); `after` does not
    // (36 spent).
    let (code, doc) = run_json(
        &sb,
        "parent.yaml",
        "name: parent\nbudget: {tokens: 30}\nstates:\n  initial: call\n  call:\n    type: call_workflow\n    workflow: child.yaml\n    on_success: after\n  after: {type: agent, provider: openai_compatible, prompt: parent, on_success: done}\n  done: {type: terminal}\n",
    );
    assert_eq!(code, 3, "{doc:#}");
    assert_eq!(
        doc["error"]["code"],
        json!("EXECUTION.BUDGET.EXCEEDED"),
        "{doc:#}"
    );
    // Both child calls ran (18 < 30 before the second); the parent's `after` did not.
    assert_eq!(mock.model_requests().len(), 2, "{doc:#}");
    assert_eq!(
        doc["states"]["call"]["status"],
        json!("completed"),
        "{doc:#}"
    );
    assert_eq!(doc["states"]["after"]["status"], json!("failed"), "{doc:#}");
    assert!(
        doc["states"]["after"]["error"].as_str().unwrap().contains(
            "step after not started: the workflow's budget of 30 tokens is spent (36 tokens so far"
        ),
        "{doc:#}"
    );
    assert_eq!(doc["spend"]["tokens"], json!(36), "{doc:#}");

    // The parent spent 18 first: the child's first call starts (18 < 30), its second does
    // not (36 >= 30), by the parent's budget.
    let (code, doc) = run_json(
        &sb,
        "first.yaml",
        "name: first\nbudget: {tokens: 30}\nstates:\n  initial: ask\n  ask: {type: agent, provider: openai_compatible, prompt: parent, on_success: call}\n  call:\n    type: call_workflow\n    workflow: child.yaml\n    on_success: done\n  done: {type: terminal}\n",
    );
    assert_ne!(code, 0, "{doc:#}");
    assert_eq!(mock.model_requests().len(), 4, "{doc:#}");
    assert_eq!(doc["states"]["call"]["status"], json!("failed"), "{doc:#}");
    assert!(
        doc.to_string().contains(
            "step c2 not started: the workflow's budget of 30 tokens is spent (36 tokens so far"
        ),
        "{doc:#}"
    );
    assert_eq!(doc["spend"]["tokens"], json!(36), "{doc:#}");
}
