//! Start-up and per-step costs (issue 9), checked by what awf asks of the kernel, never by
//! time: `awf list` reads each workflow file once (it validates the parse it shows), commands
//! that never wait start no thread, and a run's printer writes each event's stderr lines in one
//! `write`. The system calls are those of this test's own awf, traced with `strace -f`.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::path::Path;
use std::process::Command;

use awf_tests::Sandbox;

/// A chain of `n` `true` steps named `name`.
fn chain(name: &str, n: usize) -> String {
    let mut s = format!("name: {name}\nstates:\n  initial: s0\n");
    for i in 0..n {
        let next = if i + 1 < n {
            format!("s{}", i + 1)
        } else {
            "done".to_owned()
        };
        s.push_str(&format!(
            "  s{i}:\n    type: step\n    command: 'true'\n    on_success: {next}\n"
        ));
    }
    s.push_str("  done:\n    type: terminal\n");
    s
}

/// Runs `awf <args>` of `sb` under `strace -f -e trace=<calls>`; gives the outcome and the
/// trace's lines. Fails (never skips) when strace cannot run.
fn traced(sb: &Sandbox, calls: &str, args: &[&str]) -> (awf_tests::Run, Vec<String>) {
    let awf = sb.cmd(args);
    let log = sb.path().join("strace.log");
    let mut c = Command::new("strace");
    c.args(["-f", "-qq", "-s", "256", "-e"])
        .arg(format!("trace={calls}"))
        .arg("-o")
        .arg(&log)
        .arg(awf.get_program())
        .args(awf.get_args())
        .current_dir(sb.path())
        .stdin(std::process::Stdio::null());
    for (k, v) in awf.get_envs() {
        match v {
            Some(v) => c.env(k, v),
            None => c.env_remove(k),
        };
    }
    let out = c
        .output()
        .expect("strace runs (it is needed for these tests: apt-get install strace)");
    let trace = std::fs::read_to_string(&log).expect("strace wrote its log");
    (
        awf_tests::Run::from(out),
        trace.lines().map(str::to_owned).collect(),
    )
}

/// The trace lines that open `path`.
fn opens_of<'a>(trace: &'a [String], path: &Path) -> Vec<&'a String> {
    let quoted = format!("\"{}\"", path.display());
    trace
        .iter()
        .filter(|l| l.contains("open") && l.contains(&quoted))
        .collect()
}

/// The trace lines that create a thread or process.
fn clones(trace: &[String]) -> Vec<&String> {
    trace
        .iter()
        .filter(|l| l.contains("clone(") || l.contains("clone3("))
        .collect()
}

#[test]
fn list_reads_each_workflow_file_once_and_starts_no_thread() {
    let mut sb = Sandbox::new().unwrap();
    let dir = sb.path().join("wf");
    sb.set_env("AWF_WORKFLOWS_PATH", &dir.display().to_string());
    let mut files = Vec::new();
    for i in 0..4 {
        let text = chain(&format!("w{i}"), 3).replace(
            "states:",
            &format!("version: \"1.{i}\"\ndescription: workflow {i}\nstates:"),
        );
        files.push(sb.write(&format!("wf/w{i}.yaml"), &text).unwrap());
    }
    // Parses, fails validation: still read once, and marked.
    let broken = chain("wbad", 2).replace("on_success: done", "on_success: nowhere");
    files.push(sb.write("wf/wbad.yaml", &broken).unwrap());
    let (run, trace) = traced(
        &sb,
        "openat,open,clone,clone3,readlink,readlinkat",
        &["list"],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let lines: Vec<&str> = run.stdout.lines().collect();
    assert_eq!(lines.len(), 6, "{}", run.stdout);
    assert!(lines[0].starts_with("NAME"), "{}", run.stdout);
    assert!(
        lines[1].contains("w0") && lines[1].contains("1.0") && lines[1].contains("workflow 0"),
        "{}",
        run.stdout
    );
    assert!(
        lines[5].contains("wbad") && lines[5].contains("BROKEN: [WORKFLOW.VALIDATION."),
        "{}",
        run.stdout
    );
    for f in &files {
        assert_eq!(
            opens_of(&trace, f).len(),
            1,
            "{} is read once: {:#?}",
            f.display(),
            opens_of(&trace, f)
        );
    }
    assert_eq!(
        clones(&trace),
        Vec::<&String>::new(),
        "no thread for `list`"
    );
    // A workflow that calls no other has no call cycle to look for: its file's real path
    // (a `readlink` of each of its components) is not resolved.
    let resolved: Vec<&String> = trace
        .iter()
        .filter(|l| {
            l.contains("readlink") && files.iter().any(|f| l.contains(&*f.display().to_string()))
        })
        .collect();
    assert_eq!(
        resolved,
        Vec::<&String>::new(),
        "no realpath of a workflow without calls"
    );
}

/// Many workflows are read and validated side by side (issue 9: `awf list` of 20 workflows
/// against `just --list`): each file still read once, the entries in the order a lone thread
/// gives (by name), a broken one marked where it stands.
#[test]
fn a_long_list_reads_each_file_once_and_keeps_its_order() {
    let mut sb = Sandbox::new().unwrap();
    let dir = sb.path().join("wf");
    sb.set_env("AWF_WORKFLOWS_PATH", &dir.display().to_string());
    let mut files = Vec::new();
    let mut names = Vec::new();
    for i in 0..30 {
        let name = format!("w{i:02}");
        let text = if i == 17 {
            chain(&name, 2).replace("on_success: done", "on_success: nowhere")
        } else {
            chain(&name, 3)
        };
        files.push(sb.write(&format!("wf/{name}.yaml"), &text).unwrap());
        names.push(name);
    }
    let (run, trace) = traced(&sb, "openat,open", &["list", "-f", "json"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let v: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    let listed: Vec<&str> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(listed, names.iter().map(String::as_str).collect::<Vec<_>>());
    for (i, e) in v.as_array().unwrap().iter().enumerate() {
        let broken = e["error"]
            .as_str()
            .is_some_and(|m| m.contains("WORKFLOW.VALIDATION."));
        assert_eq!(broken, i == 17, "{e}");
    }
    for f in &files {
        assert_eq!(opens_of(&trace, f).len(), 1, "{} is read once", f.display());
    }
}

#[test]
fn validate_starts_no_thread_and_reports_as_before() {
    let sb = Sandbox::new().unwrap();
    sb.write("ten.yaml", &chain("ten", 9)).unwrap();
    sb.write(
        "bad.yaml",
        &chain("bad", 2).replace("on_success: done", "on_success: nowhere"),
    )
    .unwrap();
    let (ok, trace) = traced(&sb, "clone,clone3", &["validate", "ten.yaml"]);
    assert_eq!(ok.code, 0, "{}", ok.stderr);
    assert_eq!(
        clones(&trace),
        Vec::<&String>::new(),
        "no thread for `validate`"
    );
    let (bad, trace) = traced(&sb, "clone,clone3", &["validate", "bad.yaml"]);
    assert_ne!(bad.code, 0);
    assert!(
        format!("{}{}", bad.stdout, bad.stderr).contains("nowhere"),
        "{bad:?}"
    );
    assert_eq!(clones(&trace), Vec::<&String>::new());
}

#[test]
fn a_run_writes_each_step_line_to_stderr_in_one_write() {
    const STEPS: usize = 30;
    let sb = Sandbox::new().unwrap();
    sb.write("chain.yaml", &chain("chain", STEPS)).unwrap();
    let (run, trace) = traced(&sb, "write,writev", &["run", "chain.yaml"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    // The step lines are as before: `→ s<i>` and `✓ s<i> (…)`, in order.
    let started: Vec<&str> = run
        .stderr
        .lines()
        .filter(|l| l.trim_start().starts_with("→ s"))
        .collect();
    assert_eq!(started.len(), STEPS, "{}", run.stderr);
    assert_eq!(started[0], "  → s0");
    let finished = run
        .stderr
        .lines()
        .filter(|l| l.trim_start().starts_with("✓ s"))
        .count();
    assert_eq!(finished, STEPS, "{}", run.stderr);
    // One write per event: a started and a finished line per step, plus the few lines of
    // the start and the summary (before: one write per formatted piece, about 8 a step).
    let to_stderr = trace
        .iter()
        .filter(|l| {
            let call = l.split_once(' ').map_or("", |(_, c)| c.trim_start());
            call.starts_with("write(2,") || call.starts_with("writev(2,")
        })
        .count();
    assert!(
        to_stderr <= 2 * STEPS + 20,
        "{to_stderr} writes to stderr for {STEPS} steps"
    );
}

/// A run's steps take the `posix_spawn` path (no working directory given, the environment
/// built once) when they run in the directory awf runs in, as a run's steps do unless they
/// set `dir:` or were resumed from elsewhere: since runs record their directory, every step
/// was given it and started through std's `Command` instead (a `chdir` and about 60 more
/// system calls a step; a 200-step shell chain 1.12x slower). A step whose `dir:` is another
/// directory still gets it.
#[test]
fn steps_in_awfs_own_directory_are_not_given_it() {
    const STEPS: usize = 10;
    let sb = Sandbox::new().unwrap();
    sb.write("chain.yaml", &chain("chain", STEPS)).unwrap();
    let (run, trace) = traced(&sb, "chdir", &["run", "chain.yaml"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let chdirs: Vec<&String> = trace.iter().filter(|l| l.contains("chdir(")).collect();
    assert!(chdirs.is_empty(), "{chdirs:#?}");

    std::fs::create_dir(sb.path().join("sub")).unwrap();
    sb.write(
        "sub.yaml",
        "name: sub\nstates:\n  initial: a\n  a:\n    type: step\n    command: 'true'\n    dir: sub\n    on_success: done\n  done:\n    type: terminal\n",
    )
    .unwrap();
    let (run, trace) = traced(&sb, "chdir", &["run", "sub.yaml"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let sub = sb.path().join("sub").canonicalize().unwrap();
    let into_sub = trace
        .iter()
        .filter(|l| l.contains("chdir(") && l.contains(&format!("\"{}\"", sub.display())))
        .count();
    assert_eq!(into_sub, 1, "{trace:#?}");
}
