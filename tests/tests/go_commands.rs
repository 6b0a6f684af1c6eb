//! Issue 8, "Commands and flags", "Validation and resolution" and `awf diagram` clusters: the
//! behaviours AWF (Go)'s own CLI integration tests expect of the binary (tests/integration/cli,
//! errors, features at 9971294), checked over the built `awf` in a hermetic sandbox.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use awf_tests::Sandbox;
use serde_json::json;

fn sandbox() -> Sandbox {
    Sandbox::new().expect("sandbox")
}

const OK: &str = "name: ok\ndescription: fine\nstates:\n  initial: a\n  a: {type: step, command: echo hi, on_success: done}\n  done: {type: terminal}\n";

// ---- awf init -------------------------------------------------------------------------------

#[test]
fn init_in_an_initialised_project_succeeds_says_so_and_writes_nothing() {
    let sb = sandbox();
    assert_eq!(sb.run(&["init"]).unwrap().code, 0);
    sb.write(".awf/config.yaml", "inputs: {mine: 1}\n").unwrap();
    let again = sb.run(&["init"]).unwrap();
    assert_eq!(again.code, 0, "{}", again.stderr);
    assert!(
        again.stdout.contains("already initialized"),
        "{}",
        again.stdout
    );
    assert!(again.stdout.contains("--force"), "{}", again.stdout);
    assert_eq!(
        std::fs::read_to_string(sb.path().join(".awf/config.yaml")).unwrap(),
        "inputs: {mine: 1}\n"
    );
    // Go's marker is the `.awf` directory alone.
    let bare = sandbox();
    std::fs::create_dir(bare.path().join(".awf")).unwrap();
    let r = bare.run(&["init"]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.contains("already initialized"), "{}", r.stdout);
    assert!(!bare.path().join(".awf.yaml").exists());
    // --force overwrites.
    let forced = sb.run(&["init", "--force"]).unwrap();
    assert_eq!(forced.code, 0, "{}", forced.stderr);
    assert_ne!(
        std::fs::read_to_string(sb.path().join(".awf/config.yaml")).unwrap(),
        "inputs: {mine: 1}\n"
    );
}

// ---- broken project configuration -----------------------------------------------------------

#[test]
fn a_broken_project_config_is_a_user_error_exit_1_naming_the_config() {
    let sb = sandbox();
    sb.write("wf/ok.yaml", OK).unwrap();
    sb.write(".awf/config.yaml", "inputs:\n  a: [\n").unwrap();
    for args in [
        &["config", "show"][..],
        &["run", "wf/ok.yaml"],
        &["run", "wf/ok.yaml", "--dry-run"],
    ] {
        let r = sb.run(args).unwrap();
        assert_eq!(r.code, 1, "{args:?}: {}", r.stderr);
        assert!(
            r.stderr
                .starts_with("[USER.INPUT.INVALID_FORMAT] project configuration: "),
            "{args:?}: {}",
            r.stderr
        );
        assert!(r.stderr.contains("config.yaml"), "{args:?}: {}", r.stderr);
        assert!(r.stderr.contains("line 3"), "{args:?}: {}", r.stderr);
    }
}

// ---- unknown --highlight / --breakpoint names -----------------------------------------------

#[test]
fn an_unknown_highlight_state_is_a_warning_and_the_graph_is_drawn() {
    let sb = sandbox();
    sb.write("wf/ok.yaml", OK).unwrap();
    let r = sb
        .run(&["diagram", "wf/ok.yaml", "--highlight", "nonexistent"])
        .unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.starts_with("digraph"), "{}", r.stdout);
    assert!(r.stdout.trim_end().ends_with('}'), "{}", r.stdout);
    assert!(!r.stdout.contains("penwidth"), "{}", r.stdout);
    assert!(
        r.stderr
            .contains("WARN --highlight: workflow 'ok' has no state 'nonexistent'"),
        "{}",
        r.stderr
    );
}

#[test]
fn an_unknown_breakpoint_is_a_warning_and_the_run_never_pauses_there() {
    let sb = sandbox();
    sb.write("wf/ok.yaml", OK).unwrap();
    let r = sb
        .run(&["run", "wf/ok.yaml", "--interactive", "-b", "zzz"])
        .unwrap();
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    assert!(
        r.stderr
            .contains("WARN --breakpoint: workflow 'ok' has no state 'zzz'"),
        "{}",
        r.stderr
    );
    assert!(!r.stderr.contains("[c]ontinue"), "{}", r.stderr);
    let json = sb
        .run(&["run", "wf/ok.yaml", "-b", "zzz", "-f", "json"])
        .unwrap();
    assert_eq!(json.code, 0, "{}", json.stderr);
    assert_eq!(json.json().unwrap()["states"]["a"]["output"], json!("hi\n"));
}

// ---- diagram: parallel branches in a cluster ------------------------------------------------

#[test]
fn diagram_draws_parallel_branches_inside_a_subgraph_cluster() {
    let sb = sandbox();
    sb.write(
        "wf/par.yaml",
        "name: par\nstates:\n  initial: fan\n  fan:\n    type: parallel\n    parallel: [left, right]\n    strategy: all_succeed\n    on_success: done\n  left: {type: step, command: echo l}\n  right: {type: step, command: echo r}\n  after: {type: step, command: echo a, on_success: done}\n  done: {type: terminal}\n",
    )
    .unwrap();
    let r = sb.run(&["diagram", "wf/par.yaml"]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    let start = r
        .stdout
        .find("subgraph \"cluster_fan\" {")
        .unwrap_or_else(|| panic!("no cluster:\n{}", r.stdout));
    let block = &r.stdout[start..];
    let block = &block[..block.find('}').unwrap()];
    assert!(block.contains("label=\"fan branches\";"), "{block}");
    assert!(block.contains("style=dashed;"), "{block}");
    assert!(block.contains("\"left\";"), "{block}");
    assert!(block.contains("\"right\";"), "{block}");
    assert!(!block.contains("\"after\""), "{block}");
    assert!(!block.contains("\"done\""), "{block}");
}

// ---- hints ----------------------------------------------------------------------------------

#[test]
fn a_command_not_found_names_the_missing_program() {
    let sb = sandbox();
    sb.write(
        "wf/nf.yaml",
        "name: nf\nstates:\n  initial: a\n  a: {type: step, command: nonexistentcommand12345 --flag, on_success: done}\n  done: {type: terminal}\n",
    )
    .unwrap();
    let r = sb.run(&["run", "wf/nf.yaml"]).unwrap();
    assert_eq!(r.code, 3, "{}", r.stderr);
    assert!(
        r.stderr
            .contains("Hint: exit code 127: `nonexistentcommand12345` was not found"),
        "{}",
        r.stderr
    );
    assert!(
        r.stderr.contains("which nonexistentcommand12345"),
        "{}",
        r.stderr
    );
    let j = sb.run(&["run", "wf/nf.yaml", "-f", "json"]).unwrap();
    let doc = j.json().unwrap();
    assert_eq!(
        doc["error"]["details"]["command"],
        json!("nonexistentcommand12345"),
        "{doc}"
    );
}

#[test]
fn a_workflow_path_not_found_points_at_awf_list_or_a_similar_sibling() {
    let sb = sandbox();
    sb.write("wf/deploy.yaml", OK).unwrap();
    let far = sb.run(&["run", "wf/zzzzzzzzzzzz.yaml"]).unwrap();
    assert_eq!(far.code, 1, "{}", far.stderr);
    assert!(
        far.stderr.starts_with("[USER.INPUT.MISSING_FILE]"),
        "{}",
        far.stderr
    );
    assert!(
        far.stderr.contains("Hint: run `awf list`"),
        "{}",
        far.stderr
    );
    let near = sb.run(&["run", "wf/deplyo.yaml"]).unwrap();
    assert_eq!(near.code, 1, "{}", near.stderr);
    assert!(
        near.stderr.contains("did you mean 'deploy.yaml'?"),
        "{}",
        near.stderr
    );
}

#[test]
fn config_show_without_a_config_points_at_awf_init() {
    let sb = sandbox();
    let r = sb.run(&["config", "show"]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stdout
            .contains("Run 'awf init' to create .awf/config.yaml"),
        "{}",
        r.stdout
    );
}

// ---- {{.awf.*}} directories in commands -----------------------------------------------------

#[test]
fn awf_dirs_in_a_command_prefer_the_project_file_then_the_global_one() {
    let sb = sandbox();
    // As AWF (Go): `<global dir>/<file>` becomes `<workflow dir>/../scripts|prompts/<file>`
    // (`.awf/scripts/…` for `.awf/workflows/`) when that file exists. Both copies of one
    // script: the project's wins; a file only in the global dir is found there.
    sb.write(".awf/scripts/both.sh", "echo project-copy\n")
        .unwrap();
    sb.write("config/awf/scripts/both.sh", "echo global-copy\n")
        .unwrap();
    sb.write("config/awf/prompts/only-global.md", "global prompt\n")
        .unwrap();
    sb.write(
        ".awf/workflows/dirs.yaml",
        "name: dirs\nstates:\n  initial: s\n  s: {type: step, command: \"sh {{.awf.scripts_dir}}/both.sh\", on_success: p}\n  p: {type: step, command: \"cat {{.awf.prompts_dir}}/only-global.md\", on_success: done}\n  done: {type: terminal}\n",
    )
    .unwrap();
    let r = sb.run(&["run", "dirs", "-f", "json"]).unwrap();
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    let doc = r.json().unwrap();
    assert_eq!(
        doc["states"]["s"]["output"],
        json!("project-copy\n"),
        "{doc}"
    );
    assert_eq!(
        doc["states"]["p"]["output"],
        json!("global prompt\n"),
        "{doc}"
    );
}

// ---- awf run <workflow> --help --------------------------------------------------------------

#[test]
fn run_help_for_a_workflow_shows_its_description_and_input_table() {
    let sb = sandbox();
    sb.write(
        "wf/deploy.yaml",
        "name: deploy\ndescription: Deploy the app\ninputs:\n  - name: branch\n    type: string\n    required: true\n    description: Git branch to deploy\n  - name: count\n    type: integer\n    default: 30\n  - name: dry\n    type: boolean\n    default: true\n    description: \"  Only pretend  \"\nstates:\n  initial: a\n  a: {type: step, command: echo hi, on_success: done}\n  done: {type: terminal}\n",
    )
    .unwrap();
    let r = sb.run(&["run", "wf/deploy.yaml", "--help"]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    let lines: Vec<&str> = r.stdout.lines().collect();
    assert_eq!(lines[0], "Description: Deploy the app", "{}", r.stdout);
    assert_eq!(lines[1], "");
    assert_eq!(lines[2], "Input Parameters:");
    assert_eq!(
        lines[3],
        "  NAME    TYPE     REQUIRED  DEFAULT  DESCRIPTION"
    );
    assert_eq!(
        lines[4],
        "  branch  string   yes       -        Git branch to deploy"
    );
    assert_eq!(
        lines[5],
        "  count   integer  no        30       No description"
    );
    assert_eq!(
        lines[6],
        "  dry     boolean  no        true     Only pretend"
    );
    // The usual run help follows.
    assert!(r.stdout.contains("Usage: awf run"), "{}", r.stdout);
    assert!(r.stdout.contains("--dry-run"), "{}", r.stdout);

    sb.write("wf/plain.yaml", OK).unwrap();
    let plain = sb.run(&["run", "wf/plain.yaml", "-h"]).unwrap();
    assert_eq!(plain.code, 0, "{}", plain.stderr);
    assert!(
        plain
            .stdout
            .starts_with("Description: fine\n\nNo input parameters\n"),
        "{}",
        plain.stdout
    );
}

#[test]
fn run_help_for_a_missing_or_broken_workflow_is_an_error() {
    let sb = sandbox();
    let missing = sb.run(&["run", "no-such-workflow", "--help"]).unwrap();
    assert_eq!(missing.code, 1, "{}", missing.stdout);
    assert!(
        missing
            .stderr
            .starts_with("[USER.FACADE.WORKFLOW_NOT_FOUND]"),
        "{}",
        missing.stderr
    );
    assert!(!missing.stdout.contains("Usage:"), "{}", missing.stdout);
    sb.write("wf/broken.yaml", "name: [\n").unwrap();
    let broken = sb.run(&["run", "wf/broken.yaml", "--help"]).unwrap();
    assert_eq!(broken.code, 2, "{}", broken.stdout);
    assert!(
        broken.stderr.starts_with("[WORKFLOW.PARSE.YAML_SYNTAX]"),
        "{}",
        broken.stderr
    );
    // Plain `awf run --help` stays clap's help.
    let generic = sb.run(&["run", "--help"]).unwrap();
    assert_eq!(generic.code, 0);
    assert!(
        generic.stdout.contains("Usage: awf run"),
        "{}",
        generic.stdout
    );
}

// ---- awf validate: files and field casing ---------------------------------------------------

#[test]
fn validate_reports_a_missing_or_directory_prompt_file() {
    let sb = sandbox();
    std::fs::create_dir_all(sb.path().join("wf/prompts/adir")).unwrap();
    sb.write("wf/prompts/real.md", "Say hi\n").unwrap();
    sb.write(
        "wf/pf.yaml",
        "name: pf\nstates:\n  initial: a\n  a:\n    type: agent\n    provider: claude\n    prompt_file: prompts/missing.md\n    on_success: b\n  b:\n    type: agent\n    provider: claude\n    prompt_file: prompts/adir\n    on_success: c\n  c:\n    type: agent\n    provider: claude\n    prompt_file: prompts/real.md\n    on_success: d\n  d:\n    type: agent\n    provider: claude\n    prompt_file: \"prompts/{{.inputs.topic}}.md\"\n    on_success: done\n  done: {type: terminal}\n",
    )
    .unwrap();
    let r = sb.run(&["validate", "wf/pf.yaml"]).unwrap();
    assert_ne!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    let all = format!("{}{}", r.stdout, r.stderr);
    assert!(
        all.contains("[USER.INPUT.MISSING_FILE] states.a.prompt_file: prompt_file not found: prompts/missing.md"),
        "{all}"
    );
    assert!(
        all.contains("states.b.prompt_file: prompt_file is a directory, not a file: prompts/adir"),
        "{all}"
    );
    assert!(!all.contains("states.c.prompt_file"), "{all}");
    // A templated path is known only at run time.
    assert!(!all.contains("states.d.prompt_file"), "{all}");
    let j = sb.run(&["validate", "wf/pf.yaml", "-f", "json"]).unwrap();
    let doc = j.json().unwrap();
    assert_eq!(doc["valid"], json!(false), "{doc}");
}

#[test]
fn validate_reports_missing_and_skill_md_less_skills_and_warns_on_empty_ones() {
    let sb = sandbox();
    sb.write(".awf/skills/good/SKILL.md", "Review carefully.\n")
        .unwrap();
    sb.write(".awf/skills/blank/SKILL.md", "---\nname: blank\n---\n\n")
        .unwrap();
    std::fs::create_dir_all(sb.path().join(".awf/skills/nomd")).unwrap();
    sb.write(
        "wf/sk.yaml",
        "name: sk\nstates:\n  initial: a\n  a:\n    type: agent\n    provider: claude\n    prompt: hi\n    skills: [good, blank, nomd, ghost]\n    on_success: done\n  done: {type: terminal}\n",
    )
    .unwrap();
    let r = sb.run(&["validate", "wf/sk.yaml"]).unwrap();
    assert_ne!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    let all = format!("{}{}", r.stdout, r.stderr);
    assert!(
        all.contains(
            "error [USER.INPUT.MISSING_SKILL] states.a.skills.2: skill \"nomd\" has no SKILL.md"
        ),
        "{all}"
    );
    assert!(
        all.contains(
            "error [USER.INPUT.MISSING_SKILL] states.a.skills.3: skill \"ghost\" not found"
        ),
        "{all}"
    );
    assert!(
        all.contains("warning [USER.INPUT.MISSING_SKILL] states.a.skills.1: skill \"blank\" has empty content"),
        "{all}"
    );
    assert!(!all.contains("\"good\""), "{all}");
    // Only the good skill: valid.
    sb.write(
        "wf/ok-skill.yaml",
        "name: ok-skill\nstates:\n  initial: a\n  a:\n    type: agent\n    provider: claude\n    prompt: hi\n    skills: [good]\n    on_success: done\n  done: {type: terminal}\n",
    )
    .unwrap();
    let ok = sb.run(&["validate", "wf/ok-skill.yaml"]).unwrap();
    assert_eq!(ok.code, 0, "{}\n{}", ok.stdout, ok.stderr);
}

#[test]
fn validate_reports_a_state_field_in_a_casing_that_matches_no_field() {
    let sb = sandbox();
    sb.write(
        "wf/case.yaml",
        "name: case\nstates:\n  initial: a\n  a: {type: step, command: echo hi, on_success: b}\n  b: {type: step, command: \"echo {{.states.a.OUTPUT}} {{.states.a.output}} {{.states.a.Output}} {{.states.a.exit_code}}\", on_success: done}\n  done: {type: terminal}\n",
    )
    .unwrap();
    let r = sb.run(&["validate", "wf/case.yaml"]).unwrap();
    assert_eq!(r.code, 2, "{}\n{}", r.stdout, r.stderr);
    let all = format!("{}{}", r.stdout, r.stderr);
    assert!(
        all.contains("invalid state property \"OUTPUT\" in \"states.a.OUTPUT\""),
        "{all}"
    );
    assert!(
        all.contains("Hint: field names are case-sensitive: write 'Output' (or 'output')"),
        "{all}"
    );
    assert_eq!(all.matches("invalid state property").count(), 1, "{all}");
    // The run agrees: the field is undefined there too.
    let run = sb.run(&["run", "wf/case.yaml"]).unwrap();
    assert_eq!(run.code, 2, "{}", run.stderr);
}
