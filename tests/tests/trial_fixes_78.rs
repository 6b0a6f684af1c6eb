//! Fixes of a crash/resume trial of `awf run` and `awf resume` (trial 78): a run on a full
//! disk went on with steps it could not record, a damaged journal line was dropped with
//! every line after it, a transcript cut mid-line was appended to, the count of write
//! failures did not match the writes named. Over the real binary with a private data dir.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::path::PathBuf;

use awf_tests::Sandbox;
use awf_tests::run_id_in;
use pretty_assertions::assert_eq;

/// Makes every write of the live process `pid` past `bytes` into any file fail (`prlimit
/// --fsize`: `EFBIG`, "File too large", as a full disk fails them with `ENOSPC`; awf
/// ignores the `SIGXFSZ` that comes with it). Needs no privilege: a process may lower its
/// own user's processes' soft limits.
fn limit_file_size(pid: u32, bytes: u64) {
    let out = std::process::Command::new("prlimit")
        .args(["--pid", &pid.to_string(), &format!("--fsize={bytes}:")])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
}

/// `a`, then a parallel block `p` whose branch `p1` waits for the file `go1`, then prints
/// 9,000 bytes (its journal
/// line needs more room than a full disk has) and whose branch `p2` waits for the file `go`,
/// then `d`; each appends its name to `ran.txt`.
const PAR: &str = "name: par\nstates:\n  initial: a\n  a: {type: step, command: 'echo a >> ran.txt', on_success: p}\n  p:\n    type: parallel\n    parallel: [p1, p2]\n    strategy: all_succeed\n    on_success: d\n  p1: {type: step, command: 'while [ ! -f go1 ]; do sleep 0.05; done; head -c 9000 /dev/zero | tr \"\\0\" x; echo; echo p1 >> ran.txt'}\n  p2: {type: step, command: 'while [ ! -f go ]; do sleep 0.05; done; echo p2 >> ran.txt'}\n  d: {type: step, command: 'echo d >> ran.txt', on_success: done}\n  done: {type: terminal}\n";

fn ran(sb: &Sandbox) -> String {
    std::fs::read_to_string(sb.path().join("ran.txt")).unwrap_or_default()
}

/// Finding 1: on a full disk awf went on starting steps whose completion it could not
/// record, said `Workflow completed.`, and `awf resume` ran them all again. Now a step does
/// not start once a step's end could not be recorded: the run stops, exit 4,
/// `SYSTEM.IO.WRITE_FAILED`, the hint to free space and resume; once space is freed the
/// resume does not run again the steps whose end was recorded.
#[test]
fn a_run_whose_steps_cannot_be_recorded_stops_and_its_resume_skips_the_recorded_ones() {
    let sb = Sandbox::new().unwrap();
    sb.write("par.yaml", PAR).unwrap();
    let mut child = sb
        .cmd(&["run", "par.yaml"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    awf_tests::wait_for_state(&sb, "the run to be in p", |v| {
        v["current_state"] == "p" && v["states"]["a"]["status"] == "completed"
    });
    // The journal can take no line more (nor any record file grow).
    let journal = awf_tests::data(&sb).join(format!(
        "states/{}.journal",
        awf_tests::wait_for_state(&sb, "the run", |v| v["current_state"] == "p")
    ));
    let size = std::fs::metadata(&journal).map_or(0, |m| m.len());
    limit_file_size(child.id(), size);
    std::fs::write(sb.path().join("go1"), "").unwrap();
    // p1's end cannot be written: once awf says so, p2 ends, and d must not start.
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut all = String::new();
        for line in std::io::BufRead::lines(std::io::BufReader::new(stderr)) {
            let line = line.unwrap();
            if line.contains("cannot write the state journal") {
                let _ = tx.send(());
            }
            all.push_str(&line);
            all.push('\n');
        }
        all
    });
    rx.recv_timeout(std::time::Duration::from_secs(30))
        .expect("a warning that the journal cannot be written");
    std::fs::write(sb.path().join("go"), "").unwrap();
    let status = child.wait().unwrap();
    let err = reader.join().unwrap();
    assert_eq!(status.code(), Some(4), "{err}");
    assert_eq!(ran(&sb), "a\np1\np2\n", "d ran: {err}");
    let id = run_id_in(&err).unwrap();
    assert!(
        err.contains("  ✗ d (")
            && err.contains(
                "the run's record could not be written, so it stopped before its next step: cannot write the state journal "
            )
            && err.contains("File too large"),
        "{err}"
    );
    assert!(
        err.contains("Workflow failed: [SYSTEM.IO.WRITE_FAILED]"),
        "{err}"
    );
    assert!(!err.contains("Workflow completed"), "{err}");
    assert!(
        err.contains("Hint: free disk space or make the data root ")
            && err.contains(&format!("`awf resume {id}`")),
        "{err}"
    );

    // A new process has no limit.
    let r = sb.run(&["resume", &id]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    // a's end was recorded: it does not run again; the block whose end was not does.
    let after = ran(&sb);
    assert!(after.starts_with("a\np1\np2\n"), "{after}");
    assert_eq!(after.matches('a').count(), 1, "{after}");
    assert!(
        after.ends_with("d\n") && after.matches('d').count() == 1,
        "{after}"
    );
}

/// Two steps (a few tenths of a second each: batches of their own), then a third that waits
/// for the file `go`: a run stopped in `c` has a journal
/// of several lines.
const WAITS: &str = "name: waits\nstates:\n  initial: a\n  a: {type: step, command: 'sleep 0.3; echo a >> ran.txt', on_success: b}\n  b: {type: step, command: 'sleep 0.3; echo b >> ran.txt', on_success: c}\n  c: {type: step, command: 'while [ ! -f go ]; do sleep 0.05; done; echo c >> ran.txt', on_success: done}\n  done: {type: terminal}\n";

/// Runs [`WAITS`] and SIGKILLs it in `c`; its run id and journal.
fn killed_in_c(sb: &Sandbox) -> (String, PathBuf) {
    sb.write("waits.yaml", WAITS).unwrap();
    let mut child = sb
        .cmd(&["run", "waits.yaml"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let id = awf_tests::wait_for_state(sb, "the run to be in c", |v| {
        v["current_state"] == "c" && v["states"]["b"]["status"] == "completed"
    });
    child.kill().unwrap();
    child.wait().unwrap();
    let journal = awf_tests::data(sb).join(format!("states/{id}.journal"));
    assert!(std::fs::read_to_string(&journal).unwrap().lines().count() >= 3);
    (id, journal)
}

/// Finding 2: a damaged line in the middle of a run's journal dropped it and every line after
/// it without a word (`awf status` showed no states, `awf resume` ran the completed steps
/// again). Now it is an error naming the journal, with the hint to move it aside; a torn
/// last line (a kill in the middle of a write) is still read past.
#[test]
fn a_journal_damaged_before_its_last_line_is_an_error() {
    let sb = Sandbox::new().unwrap();
    let (id, journal) = killed_in_c(&sb);
    let text = std::fs::read_to_string(&journal).unwrap();

    // A torn last line: the lines before it are read.
    std::fs::write(&journal, format!("{text}{{\"status\":\"run")).unwrap();
    let s = sb.run(&["status", &id, "-f", "json"]).unwrap();
    assert_eq!(s.code, 0, "{}", s.stderr);
    assert_eq!(s.json().unwrap()["states"]["b"]["status"], "completed");

    // A damaged line with lines after it: an error, not a silent loss.
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    lines[1] = lines[1].replacen("\"status\":\"running\"", "\"status\":\"runn\u{1}ng\"X", 1);
    std::fs::write(&journal, lines.join("\n") + "\n").unwrap();
    let path = journal.display().to_string();
    for args in [vec!["status", id.as_str()], vec!["resume", id.as_str()]] {
        let r = sb.run(&args).unwrap();
        assert_eq!(r.code, 4, "{args:?}: {}{}", r.stdout, r.stderr);
        assert!(
            r.stderr.contains(&format!(
                "[SYSTEM.IO.READ_FAILED] cannot read the state journal {path}: line 2 of "
            )) && r
                .stderr
                .contains(&format!("move it aside (`mv {path} {path}.broken`)")),
            "{args:?}: {}",
            r.stderr
        );
    }
    assert_eq!(ran(&sb), "a\nb\n");
}
