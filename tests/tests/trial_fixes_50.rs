//! A new user's trial, over the real binary:
//!
//! - A step's background processes were killed as soon as the step ended, so "start a server
//!   in one step, test against it in the next" failed (the probe got `000`). What a step that
//!   exits leaves running in the background now lives until the run ends, then is stopped;
//!   a step stopped by its timeout or a cancel still has its whole group stopped at once; a
//!   SIGKILLed awf's watchdog stops them (an untagged one too); under `awf serve` they go at
//!   their own run's end and the other runs keep theirs.
//! - Step commands ran under any `$SHELL`: under `SHELL=/usr/bin/tclsh` (`tclsh -c` does not
//!   run its argument) `echo hi` "succeeded" with no output. A `$SHELL` that is not a
//!   POSIX-family shell is not used: commands run with `/bin/sh`, and the run says so once.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::os::unix::fs::PermissionsExt;
use std::process::Stdio;

use awf_tests::Sandbox;
use awf_tests::http_serve;
use awf_tests::wait_for;
use pretty_assertions::assert_eq;

/// Whether process `pid` runs (not a zombie) with `needle` in its command line: one of this
/// test's own processes (each test starts its `sleep`s with durations no other test uses).
fn running(pid: u32, needle: &str) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| {
        String::from_utf8_lossy(&c)
            .replace('\0', " ")
            .contains(needle)
    })
}

/// The pid a step wrote to `file` in the sandbox, once it is there.
fn pid_in(sb: &Sandbox, file: &str) -> u32 {
    let path = sb.path().join(file);
    let mut pid = None;
    wait_for(&format!("the pid in {file}"), || {
        pid = std::fs::read_to_string(&path)
            .ok()
            .and_then(|t| t.trim().parse::<u32>().ok());
        pid.is_some()
    });
    pid.unwrap()
}

/// SIGKILLs, when dropped, each `(pid, needle)` still running: a failing test leaves none
/// of its processes behind.
struct Reap(Vec<(u32, &'static str)>);

impl Drop for Reap {
    fn drop(&mut self) {
        for (pid, needle) in &self.0 {
            if running(*pid, needle) {
                let _ = std::process::Command::new("kill")
                    .args(["-KILL", &pid.to_string()])
                    .status();
            }
        }
    }
}

/// An `awf` child SIGKILLed and reaped when dropped unfinished.
struct Awf(std::process::Child);

impl Drop for Awf {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// The trial's example, on a port the server picks itself (written to `port`).
const SERVER: &str = r#"
name: server
states:
  initial: start
  start:
    type: step
    command: "python3 server.py >/dev/null 2>&1 & echo $! > server.pid; while [ ! -s port ] && kill -0 $! 2>/dev/null; do sleep 0.05; done; echo started"
    timeout: 60s
    on_success: probe
  probe:
    type: step
    command: "curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:$(cat port)/"
    on_success: done
  done: { type: terminal }
"#;

const SERVER_PY: &str = "import http.server, os\n\
s = http.server.HTTPServer(('127.0.0.1', 0), http.server.SimpleHTTPRequestHandler)\n\
with open('port.tmp', 'w') as f:\n    f.write(str(s.server_port))\n\
os.rename('port.tmp', 'port')\n\
s.serve_forever()\n";

/// Trial: the probe got `000`, the server having been killed with the step that started it.
#[test]
fn a_server_started_by_a_step_serves_the_next_step_and_stops_with_the_run() {
    let sb = Sandbox::new().unwrap();
    sb.write("server.yaml", SERVER).unwrap();
    sb.write("server.py", SERVER_PY).unwrap();
    let r = sb.run(&["run", "server.yaml", "-f", "json"]).unwrap();
    let pid = pid_in(&sb, "server.pid");
    let _reap = Reap(vec![(pid, "server.py")]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    let v = r.json().unwrap();
    assert_eq!(v["states"]["start"]["output"], "started\n");
    assert_eq!(v["states"]["probe"]["output"], "200");
    // The run is over: the server was stopped (and reaped) before awf exited.
    assert!(
        !running(pid, "server.py"),
        "the server {pid} outlived its run"
    );
}

/// A kept background process, and one of a step stopped by its timeout: the next step finds
/// the first running and the second gone (at the timeout, not at the run's end).
const TIMEOUT: &str = r#"
name: timeout
states:
  initial: keep
  keep:
    type: step
    command: "sleep 3171 >/dev/null 2>&1 & echo $! > kept.pid"
    on_success: slow
  slow:
    type: step
    command: "sleep 3172 >/dev/null 2>&1 & echo $! > slow.pid; exec sleep 3173"
    timeout: 1s
    on_failure: check
  check:
    type: step
    command: "for f in kept slow; do p=$(cat $f.pid); if grep -q 317 /proc/$p/cmdline 2>/dev/null; then echo $f=alive; else echo $f=gone; fi; done"
    on_success: done
  done: { type: terminal }
"#;

#[test]
fn a_timed_out_steps_background_process_is_stopped_at_once_and_a_kept_one_is_not() {
    let sb = Sandbox::new().unwrap();
    sb.write("timeout.yaml", TIMEOUT).unwrap();
    let r = sb.run(&["run", "timeout.yaml", "-f", "json"]).unwrap();
    let (kept, slow) = (pid_in(&sb, "kept.pid"), pid_in(&sb, "slow.pid"));
    let _reap = Reap(vec![(kept, "sleep 3171"), (slow, "sleep 3172")]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    let v = r.json().unwrap();
    assert_eq!(v["states"]["slow"]["status"], "failed", "{v}");
    assert_eq!(v["states"]["check"]["output"], "kept=alive\nslow=gone\n");
    assert!(!running(kept, "sleep 3171"), "{kept} outlived the run");
}

/// A cancel (Ctrl-C) stops the running step's background process and the kept ones of
/// earlier steps.
const CANCEL: &str = r#"
name: cancel
states:
  initial: keep
  keep:
    type: step
    command: "sleep 3174 >/dev/null 2>&1 & echo $! > kept.pid"
    on_success: wait
  wait:
    type: step
    command: "sleep 3175 >/dev/null 2>&1 & echo $! > waiting.pid; exec sleep 3176"
    on_success: done
  done: { type: terminal }
"#;

#[test]
fn a_cancel_stops_the_running_and_the_kept_background_processes() {
    let sb = Sandbox::new().unwrap();
    sb.write("cancel.yaml", CANCEL).unwrap();
    let mut awf = Awf(sb
        .cmd(&["run", "cancel.yaml"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap());
    let (kept, waiting) = (pid_in(&sb, "kept.pid"), pid_in(&sb, "waiting.pid"));
    let _reap = Reap(vec![(kept, "sleep 3174"), (waiting, "sleep 3175")]);
    wait_for("both background sleeps", || {
        running(kept, "sleep 3174") && running(waiting, "sleep 3175")
    });
    let ok = std::process::Command::new("kill")
        .args(["-INT", &awf.0.id().to_string()])
        .status()
        .unwrap();
    assert!(ok.success());
    assert_eq!(awf.0.wait().unwrap().code(), Some(130));
    assert!(
        !running(waiting, "sleep 3175"),
        "the cancelled step's {waiting} lives on"
    );
    assert!(
        !running(kept, "sleep 3174"),
        "the kept {kept} outlived the cancelled run"
    );
}

/// A step that leaves two processes in its group (one that cleared its environment, so it
/// carries no `AWF_PROCESS_TAG`), then a step that waits.
const KILLED: &str = r#"
name: killed
states:
  initial: keep
  keep:
    type: step
    command: "env -i /bin/sleep 3177 >/dev/null 2>&1 & echo $! > untagged.pid; sleep 3178 >/dev/null 2>&1 & echo $! > tagged.pid"
    on_success: wait
  wait:
    type: step
    command: "touch waiting; exec sleep 3179"
    on_success: done
  done: { type: terminal }
"#;

/// awf SIGKILLed while a later step runs: its watchdog stops the kept background processes,
/// the untagged one too (awf told it their process group).
#[test]
fn a_killed_awf_s_watchdog_stops_the_kept_background_processes() {
    let sb = Sandbox::new().unwrap();
    sb.write("killed.yaml", KILLED).unwrap();
    let mut awf = Awf(sb
        .cmd(&["run", "killed.yaml"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap());
    let (untagged, tagged) = (pid_in(&sb, "untagged.pid"), pid_in(&sb, "tagged.pid"));
    let _reap = Reap(vec![(untagged, "sleep 3177"), (tagged, "sleep 3178")]);
    wait_for("the second step", || sb.path().join("waiting").exists());
    assert!(running(untagged, "sleep 3177") && running(tagged, "sleep 3178"));
    let environ = std::fs::read(format!("/proc/{untagged}/environ")).unwrap();
    assert!(!environ.windows(15).any(|w| w == b"AWF_PROCESS_TAG"));
    awf.0.kill().unwrap();
    awf.0.wait().unwrap();
    wait_for("the kept background processes to die with awf", || {
        !running(untagged, "sleep 3177") && !running(tagged, "sleep 3178")
    });
}

/// Under `awf serve`: a step leaves `sleep` running, the next waits for `go-<tag>`.
const SERVED: &str = r#"
name: served
inputs:
  - name: tag
    type: string
states:
  initial: keep
  keep:
    type: step
    command: "sleep 3180 >/dev/null 2>&1 & echo $! > bg-$tag.pid"
    on_success: wait
  wait:
    type: step
    command: "while [ ! -f go-$tag ]; do sleep 0.05; done; p=$(cat bg-$tag.pid); grep -q 3180 /proc/$p/cmdline && echo alive"
    on_success: done
  done: { type: terminal }
"#;

#[test]
fn under_serve_a_runs_background_processes_go_at_its_end_and_other_runs_keep_theirs() {
    let sb = http_serve::sandbox_with(&[("served", SERVED)]);
    let s = http_serve::start(&sb, &[]);
    let a = http_serve::start_run(&s, "served", r#"{"inputs": {"tag": "a"}}"#);
    let b = http_serve::start_run(&s, "served", r#"{"inputs": {"tag": "b"}}"#);
    let (pa, pb) = (pid_in(&sb, "bg-a.pid"), pid_in(&sb, "bg-b.pid"));
    let _reap = Reap(vec![(pa, "sleep 3180"), (pb, "sleep 3180")]);
    std::fs::write(sb.path().join("go-a"), "").unwrap();
    let run = http_serve::wait_status(&s, &a, "completed");
    assert_eq!(run["states"]["wait"]["output"], "alive\n", "{run}");
    wait_for("run a's background sleep to be stopped", || {
        !running(pa, "sleep 3180")
    });
    assert!(
        running(pb, "sleep 3180"),
        "run b's background sleep {pb} was stopped"
    );
    assert_eq!(http_serve::execution(&s, &b)["status"], "running");
    std::fs::write(sb.path().join("go-b"), "").unwrap();
    let run = http_serve::wait_status(&s, &b, "completed");
    assert_eq!(run["states"]["wait"]["output"], "alive\n", "{run}");
    wait_for("run b's background sleep to be stopped", || {
        !running(pb, "sleep 3180")
    });
}

/// A step of the run itself and one of a sub-workflow, each printing the shell it runs under.
const SHELLS: &[(&str, &str)] = &[
    (
        "shells",
        "name: shells\nstates:\n  initial: a\n  a: {type: step, command: 'echo \"$0\"; [ 1 = 1 ] && echo posix', on_success: b}\n  b: {type: step, command: echo hi, on_success: c}\n  c: {type: call_workflow, workflow: shells-child, on_success: done}\n  done: {type: terminal}\n",
    ),
    (
        "shells-child",
        "name: shells-child\nstates:\n  initial: s\n  s: {type: step, command: 'echo \"child $0\" > child.txt', on_success: done}\n  done: {type: terminal}\n",
    ),
];

/// A stand-in for a non-POSIX shell: it ignores its arguments and exits 0, as `tclsh -c`
/// does with a command (so a command given to it never runs, and "succeeds").
fn fake_shell(sb: &Sandbox, name: &str) -> String {
    let path = sb.path().join("bin").join(name);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, "#!/bin/sh\nexit 0\n").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path.display().to_string()
}

const WARNING: &str =
    "is not a POSIX shell (sh, bash, dash, zsh, ksh, …): commands run with /bin/sh instead";

/// Trial: `SHELL=/usr/bin/tclsh` ran nothing and reported success. Non-POSIX shells are not
/// used; the run says so once (two steps and a sub-workflow's step), naming `$SHELL`.
#[test]
fn a_non_posix_shell_is_not_used_and_the_run_says_so_once() {
    let mut sb = http_serve::sandbox_with(SHELLS);
    let mut shells = vec![fake_shell(&sb, "tclsh"), fake_shell(&sb, "fish")];
    if std::path::Path::new("/usr/bin/python3").exists() {
        shells.push("/usr/bin/python3".to_owned());
    }
    for shell in shells {
        sb.set_env("SHELL", &shell);
        let r = sb.run(&["run", "shells", "-f", "json"]).unwrap();
        assert_eq!(r.code, 0, "{shell}: {}{}", r.stdout, r.stderr);
        let v = r.json().unwrap();
        assert_eq!(v["states"]["a"]["output"], "/bin/sh\nposix\n", "{shell}");
        assert_eq!(v["states"]["b"]["output"], "hi\n", "{shell}");
        assert_eq!(
            std::fs::read_to_string(sb.path().join("child.txt")).unwrap(),
            "child /bin/sh\n",
            "{shell}"
        );
        let warning = format!("SHELL={shell} {WARNING}");
        assert_eq!(
            r.stderr.matches(&warning).count(),
            1,
            "{shell}: {}",
            r.stderr
        );
        // The terminal output says it too.
        let r = sb.run(&["run", "shells"]).unwrap();
        assert_eq!(r.code, 0, "{}", r.stderr);
        assert_eq!(
            (r.stdout.matches(&warning).count() + r.stderr.matches(&warning).count()),
            1,
            "{shell}: {}{}",
            r.stdout,
            r.stderr
        );
    }
}

/// bash and dash (`/bin/sh`) are used as before, without a word.
#[test]
fn a_posix_shell_is_used_as_before() {
    let mut sb = http_serve::sandbox_with(SHELLS);
    for shell in ["/bin/bash", "/bin/dash", "/bin/sh"] {
        if !std::path::Path::new(shell).exists() {
            continue;
        }
        sb.set_env("SHELL", shell);
        let r = sb.run(&["run", "shells", "-f", "json"]).unwrap();
        assert_eq!(r.code, 0, "{shell}: {}{}", r.stdout, r.stderr);
        let v = r.json().unwrap();
        assert_eq!(
            v["states"]["a"]["output"],
            format!("{shell}\nposix\n"),
            "{shell}"
        );
        assert!(!r.stderr.contains("POSIX shell"), "{shell}: {}", r.stderr);
    }
}
