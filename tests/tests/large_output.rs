//! Large step output (issue 9): a step printing tens of megabytes is kept once (its own file
//! under the data root, named by the state file and the transcript), masked on the way, and
//! every reader (`{{.states.x.Output}}`, `awf status`, `-f json`, `awf resume`) still sees the
//! same text, byte for byte.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::path::Path;
use std::path::PathBuf;

use awf_tests::Sandbox;
use awf_tests::data;
use serde_json::Value;

/// Lines printed by the big step: `seq 1 N` is about 20 MB.
const LINES: u64 = 2_800_000;

/// What `seq 1 LINES` prints.
fn seq_text() -> String {
    let mut s = String::with_capacity(21 * 1024 * 1024);
    for i in 1..=LINES {
        s.push_str(&i.to_string());
        s.push('\n');
    }
    s
}

/// Every regular file under `dir`, with its size.
fn files_under(dir: &Path) -> Vec<(PathBuf, u64)> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in entries.flatten() {
        let Ok(m) = e.metadata() else { continue };
        if m.is_dir() {
            out.extend(files_under(&e.path()));
        } else {
            out.push((e.path(), m.len()));
        }
    }
    out
}

fn total_size(dir: &Path) -> u64 {
    files_under(dir).iter().map(|(_, n)| n).sum()
}

fn run_id(r: &awf_tests::Run) -> String {
    r.json().unwrap()["run_id"].as_str().unwrap().to_owned()
}

/// A 20 MB output reaches the next step's template, `-f json` and `awf status -f json`
/// byte-exact, and the data root holds it once (before the fix the state file and the
/// transcript each held a full copy: three times the output).
#[test]
fn a_20_mb_output_reaches_the_next_step_and_every_reader_and_is_stored_once() {
    let sb = Sandbox::new().unwrap();
    let expected = seq_text();
    assert!(expected.len() > 20_000_000);
    // The next step gets the length and the last 40 bytes (a command line cannot hold 20 MB).
    let from = expected.len() - 40;
    let wf = sb
        .write(
            "big.yaml",
            &format!(
                "name: big\nstates:\n  initial: big\n  big:\n    type: step\n    command: seq 1 {LINES}\n    on_success: next\n  next:\n    type: step\n    command: \"printf '%s|' {{{{len .states.big.Output}}}} '{{{{slice .states.big.Output {from}}}}}'\"\n    on_success: done\n  done:\n    type: terminal\n"
            ),
        )
        .unwrap();
    let r = sb
        .run(&["run", wf.to_str().unwrap(), "-f", "json"])
        .unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    let result = r.json().unwrap();
    let big = result["states"]["big"]["output"].as_str().unwrap();
    assert!(
        big == expected,
        "-f json: {} bytes, wanted {}",
        big.len(),
        expected.len()
    );
    let next = result["states"]["next"]["output"].as_str().unwrap();
    assert_eq!(
        next,
        format!("{}|{}|", expected.len(), &expected[from..]),
        "the next step sees the whole output"
    );

    let id = run_id(&r);
    let status = sb.run(&["status", &id, "-f", "json"]).unwrap();
    assert_eq!(status.code, 0, "{}", status.stderr);
    let shown: Value = status.json().unwrap();
    let text = shown["states"]["big"]["output"].as_str().unwrap();
    assert!(text == expected, "status: {} bytes", text.len());

    // One stored copy: the output file (exactly the output), small records around it.
    let root = data(&sb);
    let outputs = files_under(&root.join("outputs").join(&id));
    assert_eq!(outputs.len(), 1, "{outputs:?}");
    assert_eq!(std::fs::read_to_string(&outputs[0].0).unwrap(), expected);
    let total = total_size(&root);
    assert!(
        total < expected.len() as u64 + 1024 * 1024,
        "the data root holds {total} bytes for an output of {} bytes: {:?}",
        expected.len(),
        files_under(&root)
    );
    let state_file = std::fs::read_to_string(root.join(format!("states/{id}.json"))).unwrap();
    let rel = &serde_json::from_str::<Value>(&state_file).unwrap()["output_files"]["big"]["stdout"];
    assert_eq!(root.join(rel.as_str().unwrap()), outputs[0].0);
}

/// Masking works across the whole stream (secrets split between reads included), and no
/// stored file holds the secret.
#[test]
fn a_secret_inside_a_large_output_is_masked_everywhere() {
    let mut sb = Sandbox::new().unwrap();
    let secret = "s3cr3t-Value-42xyz";
    sb.set_env("MY_SECRET_TOKEN", secret);
    let lines = 1_200_000;
    let wf = sb
        .write(
            "sec.yaml",
            &format!(
                "name: sec\nstates:\n  initial: big\n  big:\n    type: step\n    command: yes \"$MY_SECRET_TOKEN\" | head -n {lines}\n    on_success: done\n  done:\n    type: terminal\n"
            ),
        )
        .unwrap();
    let r = sb
        .run(&["run", wf.to_str().unwrap(), "-f", "json"])
        .unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    let expected = "***\n".repeat(lines);
    let out = r.json().unwrap()["states"]["big"]["output"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(out == expected, "-f json: {} bytes", out.len());
    let id = run_id(&r);
    let status = sb.run(&["status", &id, "-f", "json"]).unwrap();
    let text = status.json().unwrap()["states"]["big"]["output"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(text == expected, "status: {} bytes", text.len());
    for (path, _) in files_under(&data(&sb)) {
        let bytes = std::fs::read(&path).unwrap();
        assert!(
            !bytes.windows(secret.len()).any(|w| w == secret.as_bytes()),
            "{} holds the secret",
            path.display()
        );
    }
    assert_eq!(files_under(&data(&sb).join("outputs").join(&id)).len(), 1);
}

/// `awf resume` continues after a failed step with the earlier step's large output intact
/// (read back from its file), and the finished run still holds it once.
#[test]
fn resume_keeps_a_large_output_it_does_not_run_again() {
    let sb = Sandbox::new().unwrap();
    let marker = sb.path().join("fixed");
    let wf = sb
        .write(
            "res.yaml",
            &format!(
                "name: res\nstates:\n  initial: big\n  big:\n    type: step\n    command: seq 1 {LINES}\n    on_success: check\n  check:\n    type: step\n    command: \"test -f {} && echo {{{{len .states.big.Output}}}}\"\n    on_success: done\n  done:\n    type: terminal\n",
                marker.display()
            ),
        )
        .unwrap();
    let expected = seq_text();
    let r = sb
        .run(&["run", wf.to_str().unwrap(), "-f", "json"])
        .unwrap();
    assert_ne!(r.code, 0, "the check fails first: {}", r.stderr);
    let id = run_id(&r);
    std::fs::write(&marker, "").unwrap();
    let again = sb.run(&["resume", &id, "-f", "json"]).unwrap();
    assert_eq!(again.code, 0, "{}", again.stderr);
    let res = again.json().unwrap();
    assert_eq!(
        res["states"]["check"]["output"],
        format!("{}\n", expected.len())
    );
    let status = sb.run(&["status", &id, "-f", "json"]).unwrap();
    let text = status.json().unwrap()["states"]["big"]["output"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        text == expected,
        "status after resume: {} bytes",
        text.len()
    );
    let root = data(&sb);
    assert_eq!(files_under(&root.join("outputs").join(&id)).len(), 1);
    assert!(total_size(&root) < expected.len() as u64 + 1024 * 1024);
}

/// `capture.max_size` bounds what is kept (in memory and on disk); the rest is only streamed.
#[test]
fn the_capture_cap_bounds_the_stored_copy() {
    let sb = Sandbox::new().unwrap();
    let wf = sb
        .write(
            "cap.yaml",
            &format!(
                "name: cap\nstates:\n  initial: big\n  big:\n    type: step\n    command: seq 1 {LINES}\n    capture: {{max_size: 100000}}\n    on_success: done\n  done:\n    type: terminal\n"
            ),
        )
        .unwrap();
    let expected = seq_text();
    let r = sb
        .run(&["run", wf.to_str().unwrap(), "-o", "streaming"])
        .unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    // Streaming still shows every byte (each line with its `[OUT] ` prefix).
    assert!(
        r.stdout.len() > expected.len(),
        "{} bytes streamed",
        r.stdout.len()
    );
    let root = data(&sb);
    let states = files_under(&root.join("states"));
    assert_eq!(states.len(), 1, "{states:?}");
    let id = states[0]
        .0
        .file_stem()
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned();
    let status = sb.run(&["status", &id, "-f", "json"]).unwrap();
    assert_eq!(
        status.json().unwrap()["states"]["big"]["output"]
            .as_str()
            .unwrap(),
        &expected[..100_000]
    );
    let outputs = files_under(&root.join("outputs").join(&id));
    assert_eq!(outputs.len(), 1, "{outputs:?}");
    assert_eq!(outputs[0].1, 100_000);
    assert!(total_size(&root) < 1024 * 1024, "{:?}", files_under(&root));
}

/// A step command printing its own parent-death signal (`prctl(PR_GET_PDEATHSIG)`).
const PDEATHSIG: &str = "/usr/bin/python3 -c 'import ctypes; v = ctypes.c_int(); ctypes.CDLL(None).prctl(2, ctypes.byref(v)); print(v.value)'";

/// Issue 9: while the watchdog runs (it stops a killed awf's steps), children get no
/// parent-death signal, so they are spawned with `posix_spawn` instead of a full `fork`;
/// when the watchdog is gone, later children get the signal again.
#[test]
fn children_get_a_parent_death_signal_only_when_no_watchdog_runs() {
    let sb = Sandbox::new().unwrap();
    let ready = sb.path().join("ready");
    let go = sb.path().join("go");
    // `gate` holds the run until the test saw the watchdog (it starts beside the run, so a
    // first step could be spawned before it is there, and rightly get the signal).
    let wf = sb
        .write(
            "pd.yaml",
            &format!(
                "name: pd\nstates:\n  initial: gate\n  gate:\n    type: step\n    command: \"while [ ! -f {} ]; do sleep 0.01; done\"\n    on_success: first\n  first:\n    type: step\n    command: \"{}\"\n    on_success: wait\n  wait:\n    type: step\n    command: \"while [ ! -f {} ]; do sleep 0.01; done\"\n    on_success: after\n  after:\n    type: step\n    command: \"{}\"\n    on_success: done\n  done:\n    type: terminal\n",
                ready.display(),
                PDEATHSIG.replace('"', "\\\""),
                go.display(),
                PDEATHSIG.replace('"', "\\\""),
            ),
        )
        .unwrap();
    let child = sb
        .cmd(&["run", wf.to_str().unwrap(), "-f", "json"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = std::time::Instant::now();
    let wait_for = |what: &str, f: &dyn Fn(&[awf_tests::SandboxProcess]) -> Option<u32>| -> u32 {
        loop {
            let procs = sb.processes();
            if let Some(p) = f(&procs) {
                return p;
            }
            assert!(
                t0.elapsed() < std::time::Duration::from_secs(60),
                "{what}: {procs:?}"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    };
    let watchdog = wait_for("no watchdog and gate step", &|procs| {
        let w = procs.iter().find(|p| p.cmdline.ends_with(" __watchdog"))?;
        let gated = procs.iter().any(|p| {
            p.cmdline
                .contains(&format!("while [ ! -f {}", ready.display()))
        });
        gated.then_some(w.pid)
    });
    std::fs::write(&ready, "").unwrap();
    // `first` ran with the watchdog; kill it while `wait` runs.
    wait_for("no waiting step", &|procs| {
        procs
            .iter()
            .find(|p| {
                p.cmdline
                    .contains(&format!("while [ ! -f {}", go.display()))
            })
            .map(|p| p.pid)
    });
    let killed = std::process::Command::new("kill")
        .args(["-KILL", &watchdog.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    // SIGKILL is delivered asynchronously: on a loaded machine the next step could be spawned
    // while the watchdog still runs (and rightly get no signal). Go on once it is dead (a
    // zombie has no command line).
    wait_for("the watchdog outlived SIGKILL", &|procs| {
        (!procs
            .iter()
            .any(|p| p.pid == watchdog && p.cmdline.ends_with(" __watchdog")))
        .then_some(0)
    });
    std::fs::write(&go, "").unwrap();
    let r = awf_tests::Run::from(child.wait_with_output().unwrap());
    assert_eq!(r.code, 0, "{}", r.stderr);
    let res = r.json().unwrap();
    assert_eq!(res["states"]["first"]["output"], "0\n", "with the watchdog");
    assert_eq!(
        res["states"]["after"]["output"], "9\n",
        "without it (SIGKILL)"
    );
}

/// Issue 9 with issue 7's guarantee: the watchdog (now told nothing per step) still stops a
/// killed awf's steps, a process of the step's group that cleared its environment (so it
/// carries no tag) included.
#[test]
fn a_killed_awf_s_step_group_dies_even_without_tags() {
    let sb = Sandbox::new().unwrap();
    let pid_file = sb.path().join("pid");
    let wf = sb
        .write(
            "kill.yaml",
            &format!(
                "name: kill\nstates:\n  initial: s\n  s:\n    type: step\n    command: \"env -i /bin/sleep 300 & echo $! > {}; wait\"\n    on_success: done\n  done:\n    type: terminal\n",
                pid_file.display()
            ),
        )
        .unwrap();
    let mut child = sb
        .cmd(&["run", wf.to_str().unwrap()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let t0 = std::time::Instant::now();
    let pid = loop {
        if let Some(p) = std::fs::read_to_string(&pid_file)
            .ok()
            .and_then(|t| t.trim().parse::<u32>().ok())
            && std::fs::read(format!("/proc/{p}/cmdline"))
                .is_ok_and(|c| c.starts_with(b"/bin/sleep\x00300"))
        {
            break p;
        }
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(60),
            "the step never started its sleep"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    // It carries no tag: only its process group ties it to the step.
    let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
    assert!(!environ.windows(15).any(|w| w == b"AWF_PROCESS_TAG"));
    child.kill().unwrap();
    child.wait().unwrap();
    let t0 = std::time::Instant::now();
    while std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| !c.is_empty()) {
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(30),
            "the step's untagged sleep {pid} outlived the killed awf"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// An `awf run` inside a step, whose own step runs: when the outer awf is killed, the outer
/// watchdog kills the inner awf, and the inner watchdog (which carries no outer tag, so the
/// outer one leaves it alone) kills the inner step's process.
#[test]
fn a_killed_awf_s_nested_awf_run_leaves_nothing_behind() {
    let sb = Sandbox::new().unwrap();
    let pid_file = sb.path().join("pid");
    let inner = sb
        .write(
            "inner.yaml",
            &format!(
                "name: inner\nstates:\n  initial: s\n  s:\n    type: step\n    command: \"/bin/sleep 300 & echo $! > {}; wait\"\n    on_success: done\n  done:\n    type: terminal\n",
                pid_file.display()
            ),
        )
        .unwrap();
    let outer = sb
        .write(
            "outer.yaml",
            &format!(
                "name: outer\nstates:\n  initial: s\n  s:\n    type: step\n    command: {} run {}\n    on_success: done\n  done:\n    type: terminal\n",
                awf_tests::awf_bin().display(),
                inner.display()
            ),
        )
        .unwrap();
    let mut child = sb
        .cmd(&["run", outer.to_str().unwrap()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let t0 = std::time::Instant::now();
    let pid = loop {
        if let Some(p) = std::fs::read_to_string(&pid_file)
            .ok()
            .and_then(|t| t.trim().parse::<u32>().ok())
            && std::fs::read(format!("/proc/{p}/cmdline"))
                .is_ok_and(|c| c.starts_with(b"/bin/sleep\x00300"))
        {
            break p;
        }
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(60),
            "the inner step never started its sleep"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    child.kill().unwrap();
    child.wait().unwrap();
    let t0 = std::time::Instant::now();
    while std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| !c.is_empty()) {
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(30),
            "the inner step's sleep {pid} outlived the killed outer awf"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let t0 = std::time::Instant::now();
    while !sb.processes().is_empty() {
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(30),
            "left behind: {:?}",
            sb.processes()
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}
