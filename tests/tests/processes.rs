//! Processes and resume through the binary (issue 7): signals, parent-death, daemonised
//! descendants, a second Ctrl-C, `-f json` write errors, stale `.tmp` state files, resume of
//! parallel blocks and loops, and array inputs given to `for_each`.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::process::Stdio;
use std::time::Duration;
use std::time::Instant;

use awf_tests::Sandbox;
use pretty_assertions::assert_eq;
use serde_json::Value;
use serde_json::json;

use awf_tests::data;
use awf_tests::wait_for;
use awf_tests::wait_for_state;

/// Sends signal `sig` (`INT`, `TERM`, `HUP`, `KILL`) to process `pid` with kill(1).
fn signal(pid: u32, sig: &str) {
    let ok = std::process::Command::new("kill")
        .args([&format!("-{sig}"), &pid.to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill -{sig} {pid}");
}

/// A sandbox whose processes all carry `AWF_PROCESS_TEST_MARKER=<unique>` in their
/// environment, so a test can find its own descendants (and only those), wherever they were
/// re-parented to.
fn marked_sandbox() -> (Sandbox, String) {
    let mut sb = Sandbox::new().unwrap();
    let marker = sb
        .path()
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    sb.set_env("AWF_PROCESS_TEST_MARKER", &marker);
    (sb, marker)
}

/// Live processes (zombies excluded) whose environment holds this test's marker, except
/// `except` (the awf process itself while it runs).
fn marked_pids(marker: &str, except: Option<u32>) -> Vec<u32> {
    let needle = format!("AWF_PROCESS_TEST_MARKER={marker}");
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return found;
    };
    for e in entries.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        if Some(pid) == except {
            continue;
        }
        let Ok(environ) = std::fs::read(e.path().join("environ")) else {
            continue;
        };
        if environ.split(|b| *b == 0).any(|v| v == needle.as_bytes()) {
            found.push(pid);
        }
    }
    found
}

/// Waits until no process of this test (by marker) is left.
fn wait_none_left(marker: &str, what: &str) {
    let t0 = Instant::now();
    loop {
        let left = marked_pids(marker, None);
        if left.is_empty() {
            return;
        }
        if t0.elapsed() > Duration::from_secs(15) {
            for pid in &left {
                let _ = std::process::Command::new("kill")
                    .args(["-KILL", &pid.to_string()])
                    .status();
            }
            panic!("{what}: processes left behind: {left:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// An `awf` process started by a test; SIGKILLed when dropped unfinished (a failing test
/// leaves no run behind).
struct Awf(std::process::Child);

impl Awf {
    fn id(&self) -> u32 {
        self.0.id()
    }

    fn wait(&mut self) -> std::process::ExitStatus {
        self.0.wait().unwrap()
    }
}

impl Drop for Awf {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// Starts `awf run <file>` in the background, its output discarded.
fn spawn_run(sb: &Sandbox, file: &str) -> Awf {
    Awf(sb
        .cmd(&["run", file])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap())
}

/// `program` (a launcher: `nohup`, `sh -c '… exec awf'`) in the sandbox's directory, with
/// its environment (the one `sb.cmd` gives awf) and stdin closed.
fn launcher(sb: &Sandbox, program: &str) -> std::process::Command {
    let awf = sb.cmd(&[]);
    let mut c = std::process::Command::new(program);
    c.current_dir(sb.path()).stdin(Stdio::null());
    for (k, v) in awf.get_envs() {
        match v {
            Some(v) => c.env(k, v),
            None => c.env_remove(k),
        };
    }
    c
}

fn read(sb: &Sandbox, rel: &str) -> String {
    std::fs::read_to_string(sb.path().join(rel)).unwrap_or_default()
}

/// The `item=` lines a run printed on stdout.
fn items(stdout: &str) -> Vec<String> {
    stdout
        .lines()
        .filter_map(|l| l.strip_prefix("[OUT] item="))
        .map(str::to_owned)
        .collect()
}

const ARRAY_LOOP: &str = r#"
name: arr
inputs:
  - name: targets
    type: array
    default: [x, y]
states:
  initial: loop
  loop:
    type: for_each
    items: "{{.inputs.targets}}"
    body: [work]
    on_complete: done
  work:
    type: step
    command: "echo item={{.loop.Item}}"
  done: { type: terminal }
"#;

#[test]
fn array_input_to_for_each_runs_one_iteration_per_element() {
    let sb = Sandbox::new().unwrap();
    sb.write("arr.yaml", ARRAY_LOOP).unwrap();
    // The default.
    let r = sb.run(&["run", "arr.yaml", "-o", "streaming"]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(items(&r.stdout), vec!["x", "y"]);
    // --input as a comma-separated list and as JSON (an element with a space stays whole).
    let r = sb
        .run(&[
            "run",
            "arr.yaml",
            "-o",
            "streaming",
            "--input",
            "targets=a,b,c",
        ])
        .unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(items(&r.stdout), vec!["a", "b", "c"]);
    let r = sb
        .run(&[
            "run",
            "arr.yaml",
            "-o",
            "streaming",
            "--input",
            r#"targets=["a b","c"]"#,
        ])
        .unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(items(&r.stdout), vec!["a b", "c"]);
    // The lowercase form without the leading dot, with trim markers.
    sb.write(
        "arr2.yaml",
        &ARRAY_LOOP.replace("{{.inputs.targets}}", "{{- inputs.targets -}}"),
    )
    .unwrap();
    let r = sb.run(&["run", "arr2.yaml", "-o", "streaming"]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(items(&r.stdout), vec!["x", "y"]);
    // A value from the project configuration.
    sb.write(".awf/config.yaml", "inputs:\n  targets: [p, q, r]\n")
        .unwrap();
    let r = sb.run(&["run", "arr.yaml", "-o", "streaming"]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(items(&r.stdout), vec!["p", "q", "r"]);
}

const PARALLEL_RESUME: &str = r#"
name: par
states:
  initial: p
  p:
    type: parallel
    parallel: [a, b]
    strategy: all_succeed
    on_success: done
  a:
    type: step
    command: echo a >> log
  b:
    type: step
    command: "echo b-start >> log; while [ ! -f go ]; do sleep 0.05; done; echo b >> log"
  done: { type: terminal }
"#;

#[test]
fn resume_after_a_cancel_inside_a_parallel_block_keeps_the_completed_branches() {
    let sb = Sandbox::new().unwrap();
    sb.write("par.yaml", PARALLEL_RESUME).unwrap();
    let mut child = spawn_run(&sb, "par.yaml");
    let run_id = wait_for_state(&sb, "branch a recorded as completed", |v| {
        v["states"]["a"]["status"] == json!("completed")
    });
    wait_for("branch b started", || read(&sb, "log").contains("b-start"));
    signal(child.id(), "INT");
    assert_eq!(child.wait().code(), Some(130));
    std::fs::write(sb.path().join("go"), "").unwrap();
    let r = sb.run(&["resume", &run_id, "-f", "json"]).unwrap();
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    let doc = r.json().unwrap();
    assert_eq!(doc["states"]["a"]["status"], json!("completed"));
    assert_eq!(doc["states"]["b"]["status"], json!("completed"));
    // Branch a ran once; b (cancelled) ran again. (a and b run concurrently: sort the lines.)
    let log = read(&sb, "log");
    let mut lines: Vec<&str> = log.lines().collect();
    lines.sort_unstable();
    assert_eq!(lines, vec!["a", "b", "b-start", "b-start"]);
}

const LOOP_RESUME: &str = r#"
name: fe
states:
  initial: loop
  loop:
    type: for_each
    items: '["1", "2", "3"]'
    body: [work]
    on_complete: done
  work:
    type: step
    command: "echo {{.loop.Item}} >> log; if [ {{.loop.Item}} = 2 ]; then while [ ! -f go ]; do sleep 0.05; done; fi"
  done: { type: terminal }
"#;

#[test]
fn resume_after_a_cancel_inside_a_for_each_keeps_the_completed_iterations() {
    let sb = Sandbox::new().unwrap();
    sb.write("fe.yaml", LOOP_RESUME).unwrap();
    let mut child = spawn_run(&sb, "fe.yaml");
    let run_id = wait_for_state(&sb, "the loop at iteration 1", |v| {
        awf_tests::loop_levels(&v["loop_position"]) == json!({"state": "loop", "iteration": 1})
    });
    wait_for("item 2 started", || read(&sb, "log") == "1\n2\n");
    signal(child.id(), "INT");
    assert_eq!(child.wait().code(), Some(130));
    std::fs::write(sb.path().join("go"), "").unwrap();
    let r = sb.run(&["resume", &run_id, "-f", "json"]).unwrap();
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    assert_eq!(
        r.json().unwrap()["states"]["loop"]["output"],
        json!("completed 3 iterations")
    );
    // Item 1 completed before the cancel and is not run again; item 2 was interrupted.
    assert_eq!(read(&sb, "log"), "1\n2\n2\n3\n");
}

const SLOW: &str = r#"
name: slow
states:
  initial: work
  work:
    type: step
    command: "echo started > started; sleep 300; echo after"
    on_success: done
  done: { type: terminal }
"#;

#[test]
fn sighup_cancels_the_run_like_sigterm() {
    let (sb, marker) = marked_sandbox();
    sb.write("slow.yaml", SLOW).unwrap();
    let mut child = spawn_run(&sb, "slow.yaml");
    wait_for("the step started", || read(&sb, "started") == "started\n");
    signal(child.id(), "HUP");
    assert_eq!(child.wait().code(), Some(129));
    wait_none_left(&marker, "after SIGHUP");
    let h = sb.run(&["history", "-f", "json"]).unwrap();
    let rows: Value = serde_json::from_str(&h.stdout).unwrap();
    assert_eq!(rows[0]["status"], json!("cancelled"), "{rows}");
    assert_eq!(rows[0]["exit_code"], json!(129), "{rows}");
}

/// `nohup awf run …`: awf started with SIGHUP ignored keeps it ignored (a breaker saw the
/// run cancelled, exit 129, by the hang-up nohup is for), and so does its step.
#[test]
fn a_run_started_under_nohup_outlives_a_hangup() {
    let (sb, _marker) = marked_sandbox();
    sb.write(
        "nap.yaml",
        "name: nap\nstates:\n  initial: work\n  work:\n    type: step\n    command: \"echo started > started; sleep 1; grep SigIgn /proc/self/status > ign\"\n    on_success: done\n  done: { type: terminal }\n",
    )
    .unwrap();
    let awf = sb.cmd(&["run", "nap.yaml"]);
    let mut c = launcher(&sb, "nohup");
    c.arg(awf.get_program())
        .args(awf.get_args())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut child = c.spawn().unwrap();
    wait_for("the step started", || read(&sb, "started") == "started\n");
    signal(child.id(), "HUP");
    assert_eq!(child.wait().unwrap().code(), Some(0));
    let ign = read(&sb, "ign");
    let mask = u64::from_str_radix(ign.trim_start_matches("SigIgn:").trim(), 16).unwrap();
    assert_ne!(mask & 1, 0, "the step's SIGHUP is not ignored: {ign}");
}

const QUICK: &str = r#"
name: quick
states:
  initial: work
  work:
    type: step
    command: echo hi
    on_success: done
  done: { type: terminal }
"#;

/// Runs `awf <args>` with stdout on `/dev/full`; returns (exit code, stderr).
fn to_full_disk(sb: &Sandbox, args: &[&str]) -> (Option<i32>, String) {
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap();
    let out = sb
        .cmd(args)
        .stdout(Stdio::from(full))
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn json_output_that_cannot_be_written_is_an_error_exit() {
    let sb = Sandbox::new().unwrap();
    sb.write("quick.yaml", QUICK).unwrap();
    // Recorded once, so history has a row to print.
    assert_eq!(sb.run(&["run", "quick.yaml"]).unwrap().code, 0);
    for args in [
        &["run", "quick.yaml", "-f", "json"][..],
        &["history", "-f", "json"],
        &["history", "--stats", "-f", "json"],
        &["validate", "quick.yaml", "-f", "json"],
        &["run", "quick.yaml", "--dry-run", "-f", "json"],
    ] {
        let (code, stderr) = to_full_disk(&sb, args);
        assert_eq!(code, Some(4), "{args:?}: {stderr}");
        assert!(
            stderr.contains("SYSTEM.IO.WRITE_FAILED"),
            "{args:?}: {stderr}"
        );
    }
    // A pipe whose reader has gone away is not a failure to write, as in text output and
    // in ripgrep (`awf history -f json | head -c 10`, breaker): the command's own exit code.
    let mut child = sb
        .cmd(&["run", "quick.yaml", "-f", "json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(!String::from_utf8_lossy(&out.stderr).contains("SYSTEM.IO.WRITE_FAILED"));
    // A writable stdout still exits 0.
    let r = sb.run(&["run", "quick.yaml", "-f", "json"]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(r.json().unwrap()["status"], json!("success"));
}

#[test]
fn step_processes_die_when_awf_is_killed() {
    for command in [
        // No shell syntax: exec'd directly.
        "sleep 300",
        // Through the shell, which execs the last command.
        "echo started > started; exec sleep 300",
        // A process the shell forked (a grandchild of awf): stopped by the watchdog.
        "echo started > started; sleep 300; echo after",
    ] {
        let (sb, marker) = marked_sandbox();
        sb.write(
            "slow.yaml",
            &SLOW.replace(
                "\"echo started > started; sleep 300; echo after\"",
                &format!("\"{command}\""),
            ),
        )
        .unwrap();
        let mut child = spawn_run(&sb, "slow.yaml");
        let awf = child.id();
        wait_for("the step's process", || {
            marked_pids(&marker, Some(awf)).iter().any(|pid| {
                std::fs::read(format!("/proc/{pid}/cmdline"))
                    .is_ok_and(|c| c.starts_with(b"sleep\x00300"))
            })
        });
        signal(awf, "KILL");
        child.wait();
        wait_none_left(&marker, command);
    }
}

/// A binary deleted during the run (an upgrade, a cleaned build directory) still has its
/// watchdog stop the steps' processes when awf is SIGKILLed: the shell waiting in the
/// watchdog's place execs the binary through the descriptor it holds (breaker: 6 of 6 runs
/// left the step's shell and its `sleep`s alive).
#[test]
fn step_processes_die_with_an_awf_whose_binary_was_deleted() {
    let (sb, marker) = marked_sandbox();
    sb.write("slow.yaml", SLOW).unwrap();
    let bin = sb.path().join("awf-copy");
    std::fs::copy(awf_tests::awf_bin(), &bin).unwrap();
    let mut child = Awf(launcher(&sb, &bin.to_string_lossy())
        .args(["run", "slow.yaml"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap());
    let awf = child.id();
    wait_for("the step's process", || {
        marked_pids(&marker, Some(awf)).iter().any(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| c.starts_with(b"sleep\x00300"))
        })
    });
    std::fs::remove_file(&bin).unwrap();
    signal(awf, "KILL");
    child.wait();
    wait_none_left(&marker, "awf's binary deleted");
}

const DAEMON_THEN_WAIT: &str = r#"
name: daemon
states:
  initial: work
  work:
    type: step
    command: "setsid sh -c 'touch ready; exec sleep 300' >/dev/null 2>&1 </dev/null & while [ ! -f ready ]; do sleep 0.01; done; sleep 300"
    on_success: done
  done: { type: terminal }
"#;

#[test]
fn a_daemonised_descendant_does_not_survive_a_cancel() {
    let (sb, marker) = marked_sandbox();
    sb.write("daemon.yaml", DAEMON_THEN_WAIT).unwrap();
    let mut child = spawn_run(&sb, "daemon.yaml");
    wait_for("the daemon", || sb.path().join("ready").exists());
    signal(child.id(), "INT");
    assert_eq!(child.wait().code(), Some(130));
    wait_none_left(&marker, "after the cancel");
}

const DAEMON_THEN_END: &str = r#"
name: daemon-end
states:
  initial: start
  start:
    type: step
    command: "setsid sh -c 'touch ready; exec sleep 300' >/dev/null 2>&1 </dev/null & while [ ! -f ready ]; do sleep 0.01; done"
    on_success: check
  check:
    type: step
    command: "echo checked"
    on_success: done
  done: { type: terminal }
"#;

#[test]
fn a_daemonised_descendant_does_not_survive_the_end_of_the_run() {
    let (sb, marker) = marked_sandbox();
    sb.write("daemon.yaml", DAEMON_THEN_END).unwrap();
    let r = sb.run(&["run", "daemon.yaml"]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(sb.path().join("ready").exists());
    wait_none_left(&marker, "after the run");
}

const TERM_IGNORING: &str = r#"
name: stubborn
states:
  initial: work
  work:
    type: step
    command: "trap 'echo term >> got' TERM; echo started > started; while true; do sleep 0.05; done"
    on_success: done
  done: { type: terminal }
"#;

#[test]
fn a_second_ctrl_c_stops_at_once_instead_of_waiting_out_the_grace() {
    let (sb, marker) = marked_sandbox();
    sb.write("stubborn.yaml", TERM_IGNORING).unwrap();
    let mut child = spawn_run(&sb, "stubborn.yaml");
    wait_for("the step started", || sb.path().join("started").exists());
    let first = Instant::now();
    signal(child.id(), "INT");
    // The step got SIGTERM and ignores it: awf is now in the 5 s grace period.
    wait_for("the step saw SIGTERM", || read(&sb, "got").contains("term"));
    // A person's second Ctrl-C: the same signal again within 100 ms is taken for one
    // delivered twice (`timeout` forwards a Ctrl-C to awf and to its process group).
    if let Some(left) = Duration::from_millis(150).checked_sub(first.elapsed()) {
        std::thread::sleep(left);
    }
    signal(child.id(), "INT");
    assert_eq!(child.wait().code(), Some(130));
    // Without the second Ctrl-C awf cannot exit before the grace period (5 s) has passed.
    assert!(
        first.elapsed() < Duration::from_secs(5),
        "awf waited out the grace period: {:?}",
        first.elapsed()
    );
    wait_none_left(&marker, "after the second Ctrl-C");
}

const LOOP_OF_PARALLEL: &str = r#"
name: loop-par
states:
  initial: loop
  loop:
    type: for_each
    items: '["1", "2"]'
    body: [p]
    on_complete: done
  p:
    type: parallel
    parallel: [a, b]
    strategy: all_succeed
  a:
    type: step
    command: "echo a{{.loop.Item}} >> log"
  b:
    type: step
    command: "echo b{{.loop.Item}} >> log; if [ {{.loop.Item}} = 2 ]; then while [ ! -f go ]; do sleep 0.05; done; fi"
  done: { type: terminal }
"#;

#[test]
fn resume_inside_a_parallel_block_in_a_loop_body_keeps_its_completed_branches() {
    let sb = Sandbox::new().unwrap();
    sb.write("lp.yaml", LOOP_OF_PARALLEL).unwrap();
    let mut child = spawn_run(&sb, "lp.yaml");
    // Branch a of iteration 2 is recorded as completed: it started after the block of
    // iteration 1 completed.
    let run_id = wait_for_state(&sb, "a of iteration 2 recorded", |v| {
        awf_tests::loop_levels(&v["loop_position"]) == json!({"state": "loop", "iteration": 1})
            && v["states"]["a"]["status"] == json!("completed")
            && v["states"]["a"]["started_at"].as_str() >= v["states"]["p"]["completed_at"].as_str()
    });
    wait_for("b of iteration 2 started", || {
        read(&sb, "log").contains("b2")
    });
    signal(child.id(), "INT");
    assert_eq!(child.wait().code(), Some(130));
    std::fs::write(sb.path().join("go"), "").unwrap();
    let r = sb.run(&["resume", &run_id, "-f", "json"]).unwrap();
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    let log = read(&sb, "log");
    let mut lines: Vec<&str> = log.lines().collect();
    lines.sort_unstable();
    // Iteration 1 is not run again; in iteration 2 only b (interrupted) runs again.
    assert_eq!(lines, vec!["a1", "a2", "b1", "b2", "b2"]);
}

#[test]
fn a_state_temp_file_left_by_a_killed_awf_is_removed_at_the_next_start() {
    let sb = Sandbox::new().unwrap();
    sb.write("quick.yaml", QUICK).unwrap();
    assert_eq!(sb.run(&["run", "quick.yaml"]).unwrap().code, 0);
    // What a SIGKILL between write and rename leaves: a temp file named by the dead writer.
    let mut gone = std::process::Command::new("true").spawn().unwrap();
    let dead = gone.id();
    gone.wait().unwrap();
    let states = data(&sb).join("states");
    let tmp = states.join(format!(".awf-{dead}-x1y2z3.tmp"));
    std::fs::write(&tmp, "{\"partial\":").unwrap();
    // Where this release writes them: removed by the next run (which lists only that
    // directory, not one entry per run ever recorded).
    let in_tmp = states.join(".tmp").join(format!(".awf-{dead}-a4b5c6.tmp"));
    std::fs::write(&in_tmp, "{\"partial\":").unwrap();
    assert_eq!(sb.run(&["run", "quick.yaml"]).unwrap().code, 0);
    assert!(!in_tmp.exists(), "stale temp file kept by a run");
    // Where earlier releases wrote them: removed when the history is read.
    let r = sb.run(&["history"]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(!tmp.exists(), "stale temp file kept");
    // The committed state file is untouched.
    let json_files = std::fs::read_dir(&states)
        .unwrap()
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "json"))
        .count();
    assert_eq!(json_files, 2);
}

const NESTED_LOOPS: &str = r#"
name: nested
states:
  initial: outer
  outer:
    type: for_each
    items: '["1", "2"]'
    body: [inner]
    on_complete: done
  inner:
    type: for_each
    items: '["a", "b", "c"]'
    body: [work]
  work:
    type: step
    command: "echo {{.loop.Parent.Item}}{{.loop.Item}} >> log; if [ {{.loop.Parent.Item}}{{.loop.Item}} = 2b ]; then while [ ! -f go ]; do sleep 0.05; done; fi"
  done: { type: terminal }
"#;

#[test]
fn resume_inside_nested_loops_keeps_the_completed_iterations_of_both() {
    let sb = Sandbox::new().unwrap();
    sb.write("nested.yaml", NESTED_LOOPS).unwrap();
    let mut child = spawn_run(&sb, "nested.yaml");
    let run_id = wait_for_state(&sb, "outer 2, inner b", |v| {
        awf_tests::loop_levels(&v["loop_position"])
            == json!({"state": "outer", "iteration": 1,
                      "inner": {"state": "inner", "iteration": 1}})
    });
    wait_for("2b started", || read(&sb, "log").ends_with("2b\n"));
    signal(child.id(), "INT");
    assert_eq!(child.wait().code(), Some(130));
    std::fs::write(sb.path().join("go"), "").unwrap();
    let r = sb.run(&["resume", &run_id, "-f", "json"]).unwrap();
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    assert_eq!(read(&sb, "log"), "1a\n1b\n1c\n2a\n2b\n2b\n2c\n");
}

const PARALLEL_AFTER_A_STEP: &str = r#"
name: par2
states:
  initial: first
  first:
    type: step
    command: echo first >> log
    on_success: p
  p:
    type: parallel
    parallel: [a, b]
    strategy: all_succeed
    on_success: done
  a:
    type: step
    command: echo a >> log
  b:
    type: step
    command: "echo b-start >> log; while [ ! -f go ]; do sleep 0.05; done; echo b >> log"
  done: { type: terminal }
"#;

#[test]
fn resume_after_awf_was_killed_inside_a_parallel_block_keeps_the_completed_branches() {
    let (sb, marker) = marked_sandbox();
    sb.write("par2.yaml", PARALLEL_AFTER_A_STEP).unwrap();
    let mut child = spawn_run(&sb, "par2.yaml");
    let run_id = wait_for_state(&sb, "branch a recorded as completed", |v| {
        v["states"]["a"]["status"] == json!("completed")
    });
    wait_for("branch b started", || read(&sb, "log").contains("b-start"));
    signal(child.id(), "KILL");
    child.wait();
    wait_none_left(&marker, "after SIGKILL");
    std::fs::write(sb.path().join("go"), "").unwrap();
    let r = sb.run(&["resume", &run_id, "-f", "json"]).unwrap();
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    let log = read(&sb, "log");
    let mut lines: Vec<&str> = log.lines().collect();
    lines.sort_unstable();
    assert_eq!(lines, vec!["a", "b", "b-start", "b-start", "first"]);
}

const PARALLEL_WITH_A_LOOP: &str = r#"
name: par-loop
states:
  initial: p
  p:
    type: parallel
    parallel: [a, each]
    strategy: all_succeed
    on_success: done
  a:
    type: step
    command: echo a >> log
  each:
    type: for_each
    items: '["1", "2", "3"]'
    body: [work]
  work:
    type: step
    command: "echo {{.loop.Item}} >> log; if [ {{.loop.Item}} = 2 ]; then while [ ! -f go ]; do sleep 0.05; done; fi"
  done: { type: terminal }
"#;

#[test]
fn resume_inside_a_loop_branch_of_a_parallel_block_keeps_the_completed_iterations() {
    let sb = Sandbox::new().unwrap();
    sb.write("pl.yaml", PARALLEL_WITH_A_LOOP).unwrap();
    let mut child = spawn_run(&sb, "pl.yaml");
    let run_id = wait_for_state(&sb, "the loop branch at iteration 1, a done", |v| {
        awf_tests::loop_levels(&v["loop_position"]) == json!({"state": "each", "iteration": 1})
            && v["states"]["a"]["status"] == json!("completed")
    });
    wait_for("item 2 started", || read(&sb, "log").contains("2\n"));
    signal(child.id(), "INT");
    assert_eq!(child.wait().code(), Some(130));
    std::fs::write(sb.path().join("go"), "").unwrap();
    let r = sb.run(&["resume", &run_id, "-f", "json"]).unwrap();
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    let log = read(&sb, "log");
    let mut lines: Vec<&str> = log.lines().collect();
    lines.sort_unstable();
    // a once, item 1 once, item 2 (interrupted) twice, item 3 once.
    assert_eq!(lines, vec!["1", "2", "2", "3", "a"]);
}

/// A step's command starts with every signal at its default disposition but those awf was
/// started ignoring (`trap '' QUIT USR1` before `exec awf`, as `nohup` does for HUP): those
/// stay ignored, as with a shell running the command itself; SIGPIPE, which awf ignores for
/// itself, is back to its default. (The spawn gives the dispositions in one set since issue
/// 9; this is what it gave before, signal by signal.)
#[test]
fn a_step_inherits_the_signals_awf_was_started_ignoring_and_nothing_else() {
    let sb = Sandbox::new().unwrap();
    sb.write(
        "sig.yaml",
        "name: sig\nstates:\n  initial: s\n  s:\n    type: step\n    command: grep SigIgn /proc/self/status\n    on_success: done\n  done:\n    type: terminal\n",
    )
    .unwrap();
    let ignored = |prelude: &str| -> u64 {
        let mut c = launcher(&sb, "sh");
        c.arg("-c")
            .arg(format!("{prelude} exec \"$0\" run -o streaming sig.yaml"))
            .arg(sb.cmd(&[]).get_program());
        let out = c.output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "{text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let hex = text
            .lines()
            .find_map(|l| l.strip_prefix("[OUT] SigIgn:"))
            .unwrap_or_else(|| panic!("no SigIgn line in {text}"));
        u64::from_str_radix(hex.trim(), 16).unwrap()
    };
    let bit = |sig: i32| 1u64 << (sig - 1);
    let plain = ignored("");
    assert_eq!(plain & (bit(3) | bit(10) | bit(13)), 0, "{plain:x}");
    let trapped = ignored("trap '' QUIT USR1;");
    assert_eq!(
        trapped & (bit(3) | bit(10)),
        bit(3) | bit(10),
        "{trapped:x}"
    );
    assert_eq!(trapped & bit(13), 0, "SIGPIPE ignored: {trapped:x}");
    // Nothing else differs.
    assert_eq!(
        trapped & !(bit(3) | bit(10)),
        plain,
        "{trapped:x} vs {plain:x}"
    );
}

/// `awf <args>` in `sb` under `ulimit -u <limit>`; as `nobody` when this test runs as root
/// (exempt from the limit; `sb` must then be readable by others).
fn limited(sb: &Sandbox, limit: u32, args: &[&str]) -> std::process::Command {
    let awf = sb.cmd(args);
    let uid = std::process::Command::new("id").arg("-u").output().unwrap();
    let root = String::from_utf8_lossy(&uid.stdout).trim() == "0";
    let mut c = launcher(sb, if root { "runuser" } else { "bash" });
    if root {
        c.args(["-u", "nobody", "--", "bash"]);
    }
    c.args(["-c", &format!("ulimit -u {limit} && exec \"$@\""), "bash"])
        .arg(awf.get_program())
        .args(awf.get_args());
    c
}

/// Under a process limit too low for its threads (`ulimit -u`), `awf run` says so with
/// SYSTEM.RESOURCE.EXHAUSTED (exit 4) before starting anything: it used to panic in tokio
/// (which cannot start a worker) or hang while unwinding. As root (exempt from the limit)
/// the run is made as `nobody`.
#[test]
fn a_process_limit_too_low_for_awf_is_an_error_not_a_crash_or_a_hang() {
    use std::os::unix::fs::PermissionsExt;
    let sb = Sandbox::new().unwrap();
    sb.write("quick.yaml", QUICK).unwrap();
    std::fs::set_permissions(sb.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let child = limited(&sb, 5, &["run", "quick.yaml"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let Ok(out) = rx.recv_timeout(Duration::from_secs(60)) else {
        signal(pid, "KILL");
        panic!("awf hung under `ulimit -u 5`");
    };
    let out = out.unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{stderr}");
    assert!(
        stderr.contains("[SYSTEM.RESOURCE.EXHAUSTED] cannot start awf's threads"),
        "{stderr}"
    );
    assert!(stderr.contains("ulimit -u"), "{stderr}");
    assert!(!stderr.contains("crashed"), "{stderr}");
    // `validate` runs on one thread, but its template parser lexes on a thread of its own:
    // refused, that is a template error, not a crash (a breaker saw a panic, exit 101).
    sb.write(
        "loop.yaml",
        "name: loop\nstates:\n  initial: l\n  l: {type: for_each, items: '[\"a\"]', body: [b], on_complete: done}\n  b: {type: step, command: 'echo {{.loop.Item}}'}\n  done: {type: terminal}\n",
    )
    .unwrap();
    let out = limited(&sb, 1, &["validate", "loop.yaml"])
        .output()
        .unwrap();
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(matches!(out.status.code(), Some(0 | 2)), "{all}");
    assert!(
        !all.contains("crashed") && !all.contains("panicked"),
        "{all}"
    );
}
