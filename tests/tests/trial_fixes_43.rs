//! Fixes of what a tester found resuming runs after kills, from other directories and over
//! paths: a relative `call_workflow` path was looked up from the resumer's directory (`awf
//! resume` and `POST /api/executions/{id}/resume` alike), so it was not found or another file
//! was; `--storage rel/dir` stayed relative in hints and paths in pasteable hints were not
//! quoted; a start directory reached through a symbolic link was spelled one way by `$PWD`
//! and another by `{{.context.WorkingDir}}`; the finished branches of a parallel block in a
//! loop body ran again after a SIGKILL; replayed steps showed other durations than the live
//! ones. Over the real binary.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::io::BufRead;
use std::io::BufReader;
use std::path::Path;
use std::path::PathBuf;
use std::process::Stdio;

use awf_tests::Sandbox;
use awf_tests::http_serve::Server;
use awf_tests::http_serve::post;
use awf_tests::http_serve::wait_status;
use awf_tests::run_id_in;
use awf_tests::wait_for;
use awf_tests::wait_for_state;
use pretty_assertions::assert_eq;

// ---------------------------------------------------------------------------------------
// 1. Sub-workflows of a resumed run are looked up where the run started.

/// `wf/main.yaml`: `a` fails until `ok` is there, then `call` runs `./sub.yaml` (relative).
const MAIN: &str = "name: main\nstates:\n  initial: a\n  a: {type: step, command: 'test -f ok', on_success: call, on_failure: bad}\n  call:\n    type: call_workflow\n    call_workflow: {workflow: ./sub.yaml}\n    on_success: done\n    on_failure: bad\n  done: {type: terminal}\n  bad: {type: terminal, status: failure}\n";

/// A sub-workflow that appends `who` to `calls.txt` (in the run's directory).
fn sub(who: &str) -> String {
    format!(
        "name: sub\nstates:\n  initial: s\n  s: {{type: step, command: 'echo {who} >> calls.txt', on_success: d}}\n  d: {{type: terminal}}\n"
    )
}

/// The project `proj` (its `wf/main.yaml` and `sub.yaml`, the one the run means) and another
/// directory `other` of the sandbox holding a `sub.yaml` of its own when `decoy`; both
/// absolute with symbolic links resolved.
fn project(sb: &Sandbox, decoy: bool) -> (PathBuf, PathBuf) {
    sb.write("proj/wf/main.yaml", MAIN).unwrap();
    sb.write("proj/sub.yaml", &sub("right")).unwrap();
    std::fs::create_dir_all(sb.path().join("other")).unwrap();
    if decoy {
        sb.write("other/sub.yaml", &sub("wrong")).unwrap();
    }
    (
        sb.path().join("proj").canonicalize().unwrap(),
        sb.path().join("other").canonicalize().unwrap(),
    )
}

/// `awf run wf/main.yaml` in `proj`, which fails at `a`; then `ok` is made there. The run id.
fn fail_in_project(sb: &Sandbox, proj: &Path) -> String {
    let r = sb.run_in(proj, &["run", "wf/main.yaml"]).unwrap();
    assert_eq!(r.code, 3, "{}{}", r.stdout, r.stderr);
    std::fs::write(proj.join("ok"), "").unwrap();
    run_id_in(&r.stderr).unwrap()
}

/// `cd other && awf resume <id>`: `./sub.yaml` is the project's, not `other/sub.yaml`.
#[test]
fn a_relative_sub_workflow_resumed_from_elsewhere_is_the_projects() {
    let sb = Sandbox::new().unwrap();
    let (proj, other) = project(&sb, true);
    let id = fail_in_project(&sb, &proj);
    let r = sb.run_in(&other, &["resume", &id, "--from", "a"]).unwrap();
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert_eq!(
        std::fs::read_to_string(proj.join("calls.txt")).unwrap(),
        "right\n"
    );
    assert!(!other.join("calls.txt").exists());
}

/// Without a file of that name in the resumer's directory it is found too, and a sub-workflow
/// that is really gone is reported with the run's directories, not the resumer's.
#[test]
fn a_missing_sub_workflow_on_resume_names_the_runs_directories() {
    let sb = Sandbox::new().unwrap();
    let (proj, other) = project(&sb, false);
    let id = fail_in_project(&sb, &proj);
    let r = sb.run_in(&other, &["resume", &id, "--from", "a"]).unwrap();
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert_eq!(
        std::fs::read_to_string(proj.join("calls.txt")).unwrap(),
        "right\n"
    );
    // Started again and failed again at `a`; then its sub-workflow is removed.
    std::fs::remove_file(proj.join("ok")).unwrap();
    let id = fail_in_project(&sb, &proj);
    std::fs::remove_file(proj.join("sub.yaml")).unwrap();
    let r = sb.run_in(&other, &["resume", &id, "--from", "a"]).unwrap();
    assert_eq!(r.code, 2, "{}{}", r.stdout, r.stderr);
    let hint = format!(
        "Hint: a relative path is looked up from the working directory ({}) and from the calling workflow's directory ({})",
        proj.display(),
        proj.join("wf").display()
    );
    assert!(r.stderr.contains(&hint), "{}", r.stderr);
    assert!(
        !r.stderr.contains(&other.display().to_string()),
        "{}",
        r.stderr
    );
}

/// `awf serve` started in `dir` (its `PWD` too), on a free loopback port; killed on drop.
fn serve_in(sb: &Sandbox, dir: &Path) -> Server {
    let mut child = sb
        .cmd(&["serve", "--addr", "127.0.0.1:0"])
        .current_dir(dir)
        .env("PWD", dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let base = line
        .trim()
        .strip_prefix("AWF API server listening on ")
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
        .to_owned();
    Server { child, base }
}

/// The same through `POST /api/executions/{id}/resume` of a server running in another
/// directory (with a `sub.yaml` of its own there).
#[test]
fn a_relative_sub_workflow_resumed_over_http_is_the_projects() {
    let sb = Sandbox::new().unwrap();
    let (proj, other) = project(&sb, true);
    let id = fail_in_project(&sb, &proj);
    let s = serve_in(&sb, &other);
    let (code, body, _) = post(&format!("{}/api/executions/{id}/resume", s.base), "");
    assert_eq!(code, 200, "{body}");
    wait_status(&s, &id, "completed");
    assert_eq!(
        std::fs::read_to_string(proj.join("calls.txt")).unwrap(),
        "right\n"
    );
    assert!(!other.join("calls.txt").exists());
}

// ---------------------------------------------------------------------------------------
// 2, 3. Paths in hints: absolute, and shell-quoted where a command is to be pasted.

/// `a` fails until `ok` is there (in the run's directory).
const FAIL: &str = "name: fail\nstates:\n  initial: a\n  a: {type: step, command: 'test -f ok', on_success: done}\n  done: {type: terminal}\n";

/// A relative `--storage` is named as an absolute path in the resume hint (quoted, with its
/// space and `$`), and that hint pasted in another directory finds the run.
#[test]
fn a_relative_storage_is_absolute_and_quoted_in_the_resume_hint() {
    let sb = Sandbox::new().unwrap();
    sb.write("fail.yaml", FAIL).unwrap();
    let here = sb.path().canonicalize().unwrap();
    let r = sb
        .run_in(&here, &["--storage", "my $tore", "run", "fail.yaml"])
        .unwrap();
    assert_eq!(r.code, 3, "{}{}", r.stdout, r.stderr);
    let id = run_id_in(&r.stderr).unwrap();
    let store = format!("'{}/my $tore'", here.display());
    let want = format!("Hint: continue it with `awf resume --storage {store} {id}`\n");
    assert!(r.stderr.contains(&want), "{}", r.stderr);
    // Pasted elsewhere, through a shell, as shown.
    std::fs::write(here.join("ok"), "").unwrap();
    let elsewhere = here.join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    let pasted = format!(
        "{} resume --storage {store} {id}",
        awf_tests::awf_bin().display()
    );
    let mut sh = std::process::Command::new("sh");
    sh.args(["-c", &pasted]).current_dir(&elsewhere);
    for (k, v) in sb.cmd(&[]).get_envs() {
        match v {
            Some(v) => sh.env(k, v),
            None => sh.env_remove(k),
        };
    }
    let out = sh.output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!elsewhere.join("my $tore").exists());
}

/// A damaged state file's hint moves it aside with a command that pastes: both paths quoted.
#[test]
fn the_damaged_state_file_hint_quotes_its_paths() {
    let sb = Sandbox::new().unwrap();
    sb.write("fail.yaml", FAIL).unwrap();
    let here = sb.path().canonicalize().unwrap();
    let r = sb
        .run_in(&here, &["--storage", "st dir", "run", "fail.yaml"])
        .unwrap();
    let id = run_id_in(&r.stderr).unwrap();
    let file = here
        .join("st dir")
        .join("states")
        .join(format!("{id}.json"));
    std::fs::write(&file, "{\"run_id\": ").unwrap();
    let _ = std::fs::remove_file(file.with_extension("journal"));
    let r = sb
        .run_in(&here, &["--storage", "st dir", "status", &id])
        .unwrap();
    assert_ne!(r.code, 0, "{}", r.stderr);
    let want = format!("(`mv '{0}' '{0}.broken'`)", file.display());
    assert!(r.stderr.contains(&want), "{}", r.stderr);
}

// ---------------------------------------------------------------------------------------
// 4. A start directory reached through a symbolic link.

/// `a` notes what its shell and templates say and fails until `ok` is there; `b` notes them
/// again.
const WHERE: &str = "name: where\nstates:\n  initial: a\n  a: {type: step, command: 'echo \"sh=$PWD pwd=$(pwd) ctx={{.context.WorkingDir}} env={{.env.PWD}}\" > first.txt && test -f ok', on_success: b}\n  b: {type: step, command: 'echo \"sh=$PWD pwd=$(pwd) ctx={{.context.WorkingDir}} env={{.env.PWD}}\" > then.txt', on_success: done}\n  done: {type: terminal}\n";

/// Started from `link` (a symbolic link to `real`), a run's `$PWD`, `pwd`,
/// `{{.context.WorkingDir}}` and `{{.env.PWD}}` all say `link`, as its recorded directory
/// does; resumed from elsewhere, they still do.
#[test]
fn a_directory_through_a_symlink_is_spelled_as_the_user_typed_it() {
    let sb = Sandbox::new().unwrap();
    sb.write("where.yaml", WHERE).unwrap();
    let here = sb.path().canonicalize().unwrap();
    std::fs::create_dir(here.join("real")).unwrap();
    let link = here.join("link");
    std::os::unix::fs::symlink(here.join("real"), &link).unwrap();
    let r = sb
        .run_in(&link, &["run", here.join("where.yaml").to_str().unwrap()])
        .unwrap();
    assert_eq!(r.code, 3, "{}{}", r.stdout, r.stderr);
    let id = run_id_in(&r.stderr).unwrap();
    let l = link.display();
    let want = format!("sh={l} pwd={l} ctx={l} env={l}\n");
    assert_eq!(
        std::fs::read_to_string(here.join("real/first.txt")).unwrap(),
        want
    );
    let st = sb.run(&["status", &id, "-f", "json"]).unwrap();
    assert_eq!(
        st.json().unwrap()["working_dir"],
        link.display().to_string(),
        "{}",
        st.stdout
    );
    std::fs::write(here.join("real/ok"), "").unwrap();
    let r = sb.run_in(&here, &["resume", &id]).unwrap();
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert_eq!(
        std::fs::read_to_string(here.join("real/then.txt")).unwrap(),
        want
    );
}

// ---------------------------------------------------------------------------------------
// 5. A parallel block in a loop body, awf killed mid-iteration.

/// Over items x and y, block `par` runs `fast` and `slow`; each appends to `runs.txt` when it
/// runs; `slow` of item y writes `slow-y.started` and waits for `go`.
const LOOP_OF_BLOCK: &str = r#"
name: lb
states:
  initial: each
  each:
    type: for_each
    items: '["x", "y"]'
    body: [par]
    on_complete: done
  par:
    type: parallel
    parallel: [fast, slow]
    strategy: all_succeed
  fast:
    type: step
    command: "echo fast-{{.loop.Item}} >> runs.txt"
  slow:
    type: step
    command: "echo slow-{{.loop.Item}} >> runs.txt; if [ {{.loop.Item}} = y ]; then touch slow-y.started; while [ ! -f go ]; do sleep 0.05; done; fi"
  done: { type: terminal }
"#;

/// Killed (SIGKILL) while `slow` of item y runs and `fast` of item y had finished: the resume
/// keeps `fast` of y (it runs once per item) and runs `slow` of y again.
#[test]
fn a_finished_branch_of_a_block_in_a_loop_is_kept_after_a_kill() {
    let sb = Sandbox::new().unwrap();
    sb.write("lb.yaml", LOOP_OF_BLOCK).unwrap();
    let mut awf = sb
        .cmd(&["run", "lb.yaml"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for("slow of y started", || {
        sb.path().join("slow-y.started").exists()
    });
    // `fast` of y finished and is recorded so (what the resume reads).
    let id = wait_for_state(&sb, "fast of y recorded", |v| {
        v["loop_position"]["iteration"] == 1
            && v["loop_position"]["branches_completed"] == serde_json::json!(["fast"])
    });
    awf.kill().unwrap();
    awf.wait().unwrap();
    wait_for("the killed run's processes gone", || {
        sb.processes().is_empty()
    });
    std::fs::write(sb.path().join("go"), "").unwrap();
    let r = sb.run(&["resume", &id]).unwrap();
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert!(
        r.stderr
            .contains("branch fast of par completed before the resume; kept"),
        "{}",
        r.stderr
    );
    let runs = std::fs::read_to_string(sb.path().join("runs.txt")).unwrap();
    let count = |what: &str| runs.lines().filter(|l| *l == what).count();
    assert_eq!(
        [
            count("fast-x"),
            count("slow-x"),
            count("fast-y"),
            count("slow-y")
        ],
        [1, 1, 1, 2],
        "{runs}"
    );
}

// ---------------------------------------------------------------------------------------
// 6. Durations of replayed steps.

/// Eight quick steps, then `last`, which fails until `ok` is there.
fn eight_steps() -> String {
    let mut y = String::from("name: eight\nstates:\n  initial: s1\n");
    for i in 1..=8 {
        y.push_str(&format!(
            "  s{i}: {{type: step, command: 'echo {i}', on_success: {}}}\n",
            if i == 8 {
                "last".to_owned()
            } else {
                format!("s{}", i + 1)
            }
        ));
    }
    y.push_str(
        "  last: {type: step, command: 'test -f ok', on_success: done}\n  done: {type: terminal}\n",
    );
    y
}

/// The `✓ sN (…)` lines of `text`.
fn done_lines(text: &str) -> Vec<String> {
    text.lines()
        .filter(|l| l.trim_start().starts_with("✓ s"))
        .map(str::to_owned)
        .collect()
}

/// The lines a resume replays from the earlier attempt show the durations the live run
/// showed, and `awf status` and the resume's `-f json` give those same durations.
#[test]
fn replayed_steps_keep_their_recorded_durations() {
    let sb = Sandbox::new().unwrap();
    sb.write("eight.yaml", &eight_steps()).unwrap();
    let r = sb.run(&["run", "eight.yaml"]).unwrap();
    assert_eq!(r.code, 3, "{}{}", r.stdout, r.stderr);
    let id = run_id_in(&r.stderr).unwrap();
    let live = done_lines(&r.stderr);
    assert_eq!(live.len(), 8, "{}", r.stderr);
    let ms = |line: &str| -> u64 {
        match line.rsplit_once('(').unwrap().1 {
            "0s)" => 0,
            d => d
                .strip_suffix("ms)")
                .map_or_else(|| panic!("not in ms: {line}"), |n| n.parse().unwrap()),
        }
    };
    let live_ms: Vec<u64> = live.iter().map(|l| ms(l)).collect();
    let st = sb.run(&["status", &id, "-f", "json"]).unwrap();
    let st = st.json().unwrap();
    let recorded: Vec<u64> = (1..=8)
        .map(|i| {
            st["states"][format!("s{i}")]["duration_ms"]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert_eq!(recorded, live_ms);
    std::fs::write(sb.path().join("ok"), "").unwrap();
    let r = sb.run(&["resume", &id]).unwrap();
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    let (replayed, _) = r.stderr.split_once("Workflow resumed:").unwrap();
    assert_eq!(done_lines(replayed), live);
    let st = sb.run(&["status", &id, "-f", "json"]).unwrap();
    let st = st.json().unwrap();
    let after: Vec<u64> = (1..=8)
        .map(|i| {
            st["states"][format!("s{i}")]["duration_ms"]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert_eq!(after, live_ms);
}
