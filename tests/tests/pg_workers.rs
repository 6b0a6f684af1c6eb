//! Many `awf serve --store` workers on one PostgreSQL (issue 15, part 2), over the real
//! binary and a real server (`AWF_TEST_PG_URL`, a database per test): every submitted run
//! executed once and recorded once across three workers; a SIGKILLed worker's runs finish on
//! the others with no completed step run again; cancel through a worker that does not run
//! the run. No timing is asserted: generous timeouts only.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

use std::collections::BTreeSet;
use std::time::Duration;
use std::time::Instant;

use awf_tests::Sandbox;
use awf_tests::http_serve;
use awf_tests::http_serve::Server;
use awf_tests::pg::TestDb;
use awf_tests::pg::psql;

/// Polls `f` every 100 ms until it holds; panics naming `what` after `limit`, with the
/// queue's rows of `db` in the message.
fn wait_long(db: &TestDb, what: &str, limit: Duration, mut f: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !f() {
        if t0.elapsed() > limit {
            let rows = psql(
                &db.url,
                "SELECT status, queue_state, epoch, run_started, count(*), min(error_message) \
                 FROM awf_runs GROUP BY 1, 2, 3, 4",
            );
            panic!("timed out after {limit:?} waiting for {what}; awf_runs:\n{rows}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn count(db: &TestDb, sql: &str) -> usize {
    psql(&db.url, sql).parse().unwrap()
}

/// A sandbox whose `awf` commands use `db` as their store, with `files` as workflows.
fn sandbox(db: &TestDb, files: &[(&str, &str)]) -> Sandbox {
    let mut sb = http_serve::sandbox_with(files);
    sb.set_env("AWF_STORE", &db.url);
    sb
}

fn worker(sb: &Sandbox, extra: &[&str]) -> Server {
    http_serve::start(sb, extra)
}

/// `awf run --submit WORKFLOW --input k=v…`: the printed run id (exit 0).
fn submit(sb: &Sandbox, workflow: &str, inputs: &[&str]) -> String {
    let mut args = vec!["run", "--submit", workflow];
    for i in inputs {
        args.push("--input");
        args.push(i);
    }
    let r = sb.run(&args).unwrap();
    assert_eq!(r.code, 0, "stdout {} stderr {}", r.stdout, r.stderr);
    let id = r.stdout.trim().to_owned();
    assert!(
        !id.is_empty() && !id.contains(char::is_whitespace),
        "{id:?}"
    );
    id
}

fn worker_of(db: &TestDb, run_id: &str) -> String {
    psql(
        &db.url,
        &format!("SELECT coalesce(worker_id, '') FROM awf_runs WHERE run_id = '{run_id}'"),
    )
}

fn pid_of(worker_id: &str) -> u32 {
    worker_id.split(':').nth(1).unwrap().parse().unwrap()
}

#[test]
fn three_workers_execute_sixty_submitted_runs_exactly_once() {
    let db = TestDb::new();
    let ran = tempfile::tempdir().unwrap();
    let file = ran.path().join("ran.txt");
    let wf = format!(
        "name: once\ninputs:\n  - name: n\n    type: string\nstates:\n  initial: a\n  a:\n    type: step\n    command: echo {{{{.inputs.n}}}} >> {}\n    on_success: done\n  done: {{type: terminal}}\n",
        file.display()
    );
    let sb = sandbox(&db, &[("once", &wf)]);
    let workers: Vec<Server> = (0..3)
        .map(|_| worker(&sb, &["--max-runs", "4", "--lease", "10s"]))
        .collect();
    // Half through `awf run --submit`, half through the HTTP API of one of the workers.
    let mut ids = BTreeSet::new();
    for n in 0..60 {
        let id = if n % 2 == 0 {
            submit(&sb, "once", &[&format!("n={n}")])
        } else {
            http_serve::start_run(
                &workers[n % 3],
                "once",
                &format!(r#"{{"inputs": {{"n": "{n}"}}}}"#),
            )
        };
        assert!(ids.insert(id), "run ids are new");
    }
    wait_long(&db, "60 runs done", Duration::from_secs(300), || {
        count(
            &db,
            "SELECT count(*) FROM awf_runs WHERE queue_state = 'done'",
        ) == 60
    });
    // Executed once: 60 lines, each n once.
    let text = std::fs::read_to_string(&file).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 60, "{text}");
    let distinct: BTreeSet<usize> = lines.iter().map(|l| l.trim().parse().unwrap()).collect();
    assert_eq!(distinct, (0..60).collect::<BTreeSet<usize>>());
    // Recorded once: 60 rows, all succeeded, each claimed once (epoch 1).
    assert_eq!(
        count(
            &db,
            "SELECT count(*) FROM awf_runs WHERE parent_run_id IS NULL"
        ),
        60
    );
    assert_eq!(
        count(
            &db,
            "SELECT count(*) FROM awf_runs WHERE status = 'success' AND exit_code = 0 AND epoch = 1"
        ),
        60
    );
    let got: BTreeSet<String> = psql(&db.url, "SELECT run_id FROM awf_runs")
        .lines()
        .map(str::to_owned)
        .collect();
    assert_eq!(got, ids);
    // One RunStarted per run in the event rows, and one RunFinished.
    for kind in ["run_started", "run_finished"] {
        let per_run = psql(
            &db.url,
            &format!(
                "SELECT count(*) FROM awf_runs r WHERE (SELECT count(*) FROM awf_events e \
                 WHERE e.root_run_id = r.run_id AND e.envelope->'event'->>'type' = '{kind}') = 1"
            ),
        );
        assert_eq!(per_run, "60", "{kind}");
    }
    // Every worker registered itself.
    assert_eq!(count(&db, "SELECT count(*) FROM awf_workers"), 3);
    drop(workers);
}

/// A step that writes `start-<name>` to `<dir>/<mark>` when it starts and `<name>` when
/// it completes, after `body` (a shell command).
fn marked_step(dir: &std::path::Path, mark: &str, name: &str, body: &str, next: &str) -> String {
    let f = dir.join(mark);
    let f = f.display();
    format!(
        "  {name}:\n    type: step\n    command: echo start-{name} >> {f}; {body}; echo {name} >> {f}\n    on_success: {next}\n"
    )
}

/// Checks the marks of one run of steps `s1`, `s2`, `s3` killed once: no step started again
/// once a later one had started (the record named it: a resumed run starts there), and each
/// step completed, in order. The step in flight at the kill may have completed twice (its
/// completion was not recorded yet: it runs again, as with `awf resume`).
fn assert_marks_resumed_forward(marks: &str, what: &str) {
    let index = |s: &str| s.trim_start_matches('s').parse::<usize>().unwrap();
    let starts: Vec<usize> = marks
        .lines()
        .filter_map(|l| l.strip_prefix("start-"))
        .map(index)
        .collect();
    assert!(
        starts.windows(2).all(|w| w[0] <= w[1]),
        "{what}: a step started again after a later step had started:\n{marks}"
    );
    let mut done: Vec<usize> = marks
        .lines()
        .filter(|l| !l.starts_with("start-"))
        .map(index)
        .collect();
    assert!(done.windows(2).all(|w| w[0] <= w[1]), "{what}: {marks}");
    done.dedup();
    assert_eq!(done, [1, 2, 3], "{what}: every step completed:\n{marks}");
}

#[test]
fn a_sigkilled_workers_runs_finish_on_the_others_without_rerunning_completed_steps() {
    let db = TestDb::new();
    let out = tempfile::tempdir().unwrap();
    let step =
        |name: &str, next: &str| marked_step(out.path(), "{{.inputs.n}}", name, "sleep 1", next);
    let wf = format!(
        "name: slow\ninputs:\n  - name: n\n    type: string\nstates:\n  initial: s1\n{}{}{}  done: {{type: terminal}}\n",
        step("s1", "s2"),
        step("s2", "s3"),
        step("s3", "done")
    );
    let sb = sandbox(&db, &[("slow", &wf)]);
    let mut a = worker(&sb, &["--max-runs", "4", "--lease", "2s"]);
    let ids: Vec<String> = (0..4)
        .map(|n| submit(&sb, "slow", &[&format!("n={n}")]))
        .collect();
    // A holds all four and has completed a step of at least one of them.
    wait_long(
        &db,
        "worker A to hold four runs mid-way",
        Duration::from_secs(120),
        || {
            count(
                &db,
                "SELECT count(*) FROM awf_runs WHERE queue_state = 'claimed' AND run_started",
            ) == 4
                && (0..4).any(|n| {
                    std::fs::read_to_string(out.path().join(n.to_string()))
                        .is_ok_and(|m| m.lines().any(|l| l == "s1"))
                })
        },
    );
    let a_id = worker_of(&db, &ids[0]);
    assert_eq!(pid_of(&a_id), a.child.id());
    let b = worker(&sb, &["--max-runs", "4", "--lease", "2s"]);
    let c = worker(&sb, &["--max-runs", "4", "--lease", "2s"]);
    a.child.kill().unwrap();
    a.child.wait().unwrap();
    wait_long(
        &db,
        "the four runs done elsewhere",
        Duration::from_secs(180),
        || {
            count(
                &db,
                "SELECT count(*) FROM awf_runs WHERE queue_state = 'done'",
            ) == 4
        },
    );
    for (n, id) in ids.iter().enumerate() {
        let marks = std::fs::read_to_string(out.path().join(n.to_string())).unwrap();
        assert_marks_resumed_forward(&marks, &format!("run {n} ({id})"));
        let row = psql(
            &db.url,
            &format!("SELECT status, worker_id, epoch FROM awf_runs WHERE run_id = '{id}'"),
        );
        let cols: Vec<&str> = row.split('|').collect();
        assert_eq!(cols[0], "success", "{row}");
        assert_ne!(cols[1], a_id, "finished by another worker: {row}");
        assert!(cols[2].parse::<i64>().unwrap() >= 2, "claimed again: {row}");
        // The taken-over run's duration spans both attempts: completed_at − started_at on
        // every surface (GET computes it so; history, status and run_finished store it).
        let d = psql(
            &db.url,
            &format!(
                "SELECT duration_ms - (completed_at_ms - started_at_ms) FROM awf_runs \
                 WHERE run_id = '{id}'"
            ),
        );
        assert_eq!(
            d, "0",
            "run {id}: duration_ms is not completed_at − started_at"
        );
        let v = http_serve::execution(&b, id);
        let finished = psql(
            &db.url,
            &format!(
                "SELECT envelope->'event'->'result'->>'duration_ms' FROM awf_events \
                 WHERE run_id = '{id}' AND kind = 'run_finished' ORDER BY position DESC LIMIT 1"
            ),
        );
        assert_eq!(v["duration_ms"].to_string(), finished, "{v}");
    }
    drop((b, c));
}

/// An open `psql` session holding `LOCK TABLE awf_events IN SHARE MODE` (event rows cannot be
/// inserted, so no batch of the recorder commits) until [`EventsLock::release`] or drop.
struct EventsLock(std::process::Child);

impl EventsLock {
    fn take(url: &str) -> Self {
        use std::io::BufRead;
        use std::io::Write;
        let mut child = std::process::Command::new("psql")
            .args(["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", url])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit())
            .spawn()
            .unwrap();
        let stdin = child.stdin.as_mut().unwrap();
        stdin
            .write_all(b"BEGIN;\nLOCK TABLE awf_events IN SHARE MODE;\nSELECT 'locked';\n")
            .unwrap();
        stdin.flush().unwrap();
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.as_mut().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line.trim(), "locked");
        Self(child)
    }

    fn release(mut self) {
        use std::io::Write;
        if let Some(mut stdin) = self.0.stdin.take() {
            stdin.write_all(b"COMMIT;\n").unwrap();
        }
        assert!(self.0.wait().unwrap().success());
    }
}

impl Drop for EventsLock {
    fn drop(&mut self) {
        drop(self.0.stdin.take());
        let _ = self.0.wait();
    }
}

/// The kill point of CI's "s1 s1 s2 s3" made deterministic: the test holds the recorder's
/// commit back (a lock on `awf_events`) as step s1 ends. A worker must not start s2 before
/// the record says s1 finished and s2 is in progress; a worker that did, SIGKILLed there,
/// left s1 unrecorded, and the worker resuming the run ran s1 again.
#[test]
fn a_worker_starts_a_step_only_once_the_record_says_the_steps_before_it_finished() {
    let db = TestDb::new();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let wait = |f: &str| {
        format!(
            "while [ ! -f {} ]; do sleep 0.05; done",
            d.join(f).display()
        )
    };
    let wf = format!(
        "name: gated\nstates:\n  initial: s1\n{}{}  done: {{type: terminal}}\n",
        marked_step(d, "marks", "s1", &wait("go1"), "s2"),
        marked_step(d, "marks", "s2", &wait("go2"), "done"),
    );
    let sb = sandbox(&db, &[("gated", &wf)]);
    let mut a = worker(&sb, &["--max-runs", "1", "--lease", "2s"]);
    let id = submit(&sb, "gated", &[]);
    let marks = || std::fs::read_to_string(d.join("marks")).unwrap_or_default();
    let has = |m: &str| marks().lines().any(|l| l == m);
    wait_long(&db, "s1 to start", Duration::from_secs(60), || {
        has("start-s1")
            && count(
                &db,
                "SELECT count(*) FROM awf_events WHERE kind = 'step_started'",
            ) == 1
    });
    let lock = EventsLock::take(&db.url);
    std::fs::write(d.join("go1"), "").unwrap();
    // s1 completed, and the batch that records it waits for the lock.
    wait_long(
        &db,
        "s1's record to wait for the lock",
        Duration::from_secs(60),
        || {
            has("s1")
                && count(
                    &db,
                    &format!(
                        "SELECT count(*) FROM pg_stat_activity WHERE datname = '{}' \
                     AND wait_event_type = 'Lock'",
                        db.name
                    ),
                ) >= 1
        },
    );
    // Whatever A would start without waiting for the record, it starts now.
    let t0 = Instant::now();
    while !has("start-s2") && t0.elapsed() < Duration::from_secs(3) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let early = has("start-s2");
    let lock = if early {
        Some(lock)
    } else {
        lock.release();
        wait_long(&db, "s2 to start", Duration::from_secs(60), || {
            has("start-s2")
        });
        None
    };
    a.child.kill().unwrap();
    a.child.wait().unwrap();
    drop(lock);
    let b = worker(&sb, &["--max-runs", "1", "--lease", "2s"]);
    std::fs::write(d.join("go2"), "").unwrap();
    wait_long(&db, "the run done on B", Duration::from_secs(120), || {
        count(
            &db,
            "SELECT count(*) FROM awf_runs WHERE queue_state = 'done'",
        ) == 1
    });
    // s2 was in progress at the kill: it starts again on B; s1 does not.
    assert_eq!(
        marks(),
        "start-s1\ns1\nstart-s2\nstart-s2\ns2\n",
        "s2 started before s1's completion was recorded: {early}"
    );
    assert!(!early, "s2 started before s1's completion was recorded");
    let row = psql(
        &db.url,
        &format!("SELECT status, epoch FROM awf_runs WHERE run_id = '{id}'"),
    );
    assert_eq!(row, "success|2");
    drop(b);
}

/// Rows of workers that died without unregistering (SIGKILL) do not stay in `awf_workers`
/// forever: a worker that starts removes those whose heartbeat is older than an hour.
#[test]
fn a_starting_worker_removes_the_rows_of_workers_dead_for_an_hour() {
    let db = TestDb::new();
    drop(awf_postgres::PgStore::connect(&db.url).unwrap());
    psql(
        &db.url,
        "INSERT INTO awf_workers (worker_id, heartbeat_at, max_runs) VALUES \
         ('gone:1:aaaaaaaa', now() - interval '2 hours', 4), \
         ('quiet:2:bbbbbbbb', now() - interval '5 minutes', 4)",
    );
    let sb = sandbox(&db, &[]);
    let a = worker(&sb, &["--lease", "3s"]);
    let own = format!(":{}:", a.child.id());
    wait_long(&db, "the worker's row", Duration::from_secs(60), || {
        psql(
            &db.url,
            "SELECT string_agg(worker_id, ',') FROM awf_workers",
        )
        .contains(&own)
    });
    let rows = psql(
        &db.url,
        "SELECT string_agg(worker_id, ',' ORDER BY worker_id) FROM awf_workers",
    );
    let ids: Vec<&str> = rows.split(',').collect();
    assert_eq!(ids.len(), 2, "{rows}");
    assert!(
        ids.contains(&"quiet:2:bbbbbbbb"),
        "a recent heartbeat stays: {rows}"
    );
    assert!(ids.iter().any(|i| i.contains(&own)), "{rows}");
    assert!(!rows.contains("gone:1:"), "{rows}");
    drop(a);
}

#[test]
fn cancel_through_another_worker_ends_the_run_cancelled() {
    let db = TestDb::new();
    let wf = "name: long\nstates:\n  initial: wait\n  wait:\n    type: step\n    command: sleep 120\n    on_success: done\n  done: {type: terminal}\n";
    let sb = sandbox(&db, &[("long", wf)]);
    let a = worker(&sb, &["--lease", "3s"]);
    let id = submit(&sb, "long", &[]);
    wait_long(
        &db,
        "worker A to start the run",
        Duration::from_secs(60),
        || {
            count(
                &db,
                &format!("SELECT count(*) FROM awf_runs WHERE run_id = '{id}' AND run_started"),
            ) == 1
        },
    );
    assert_eq!(pid_of(&worker_of(&db, &id)), a.child.id());
    let b = worker(&sb, &["--lease", "3s"]);
    // B does not run it, and answers for it: a recorded run, still running.
    let v = http_serve::execution(&b, &id);
    assert_eq!(v["status"], "running", "{v}");
    let (code, body, _) =
        http_serve::curl(&["-X", "DELETE", &format!("{}/api/executions/{id}", b.base)]);
    assert_eq!(code, 204, "{body}");
    wait_long(&db, "the run cancelled", Duration::from_secs(60), || {
        psql(
            &db.url,
            &format!("SELECT status || '/' || queue_state FROM awf_runs WHERE run_id = '{id}'"),
        ) == "cancelled/done"
    });
    // Both workers now answer that it was cancelled.
    for w in [&a, &b] {
        http_serve::wait_status(w, &id, "cancelled");
    }
    // A run cancelled while still queued never runs.
    drop(a);
    drop(b);
    let blocker = submit(&sb, "long", &[]);
    let c = worker(&sb, &["--max-runs", "1", "--lease", "3s"]);
    wait_long(
        &db,
        "worker C to start the blocker",
        Duration::from_secs(60),
        || {
            count(
                &db,
                &format!(
                    "SELECT count(*) FROM awf_runs WHERE run_id = '{blocker}' AND run_started"
                ),
            ) == 1
        },
    );
    // C is full: this one stays queued.
    let queued = submit(&sb, "long", &[]);
    let (code, body, _) = http_serve::curl(&[
        "-X",
        "DELETE",
        &format!("{}/api/executions/{queued}", c.base),
    ]);
    assert_eq!(code, 204, "{body}");
    assert_eq!(
        psql(
            &db.url,
            &format!("SELECT status || '/' || queue_state FROM awf_runs WHERE run_id = '{queued}'"),
        ),
        "cancelled/done"
    );
}

/// Waits until worker `w` (its process) runs `id`; B is started only then, so B never holds it.
fn started_on(db: &TestDb, id: &str, w: &Server) {
    wait_long(
        db,
        "the first worker to start the run",
        Duration::from_secs(60),
        || {
            count(
                db,
                &format!("SELECT count(*) FROM awf_runs WHERE run_id = '{id}' AND run_started"),
            ) == 1
        },
    );
    assert_eq!(pid_of(&worker_of(db, id)), w.child.id());
}

#[test]
fn sse_from_a_worker_that_does_not_run_the_run_equals_its_event_rows() {
    let db = TestDb::new();
    let wf = "name: three\nstates:\n  initial: a\n  a:\n    type: step\n    command: sleep 1 && echo a\n    on_success: b\n  b:\n    type: step\n    command: echo b\n    on_success: c\n  c:\n    type: step\n    command: echo c\n    on_success: done\n  done:\n    type: terminal\n    message: 'three done: {{.states.c.Output}}'\n";
    let sb = sandbox(&db, &[("three", wf)]);
    let a = worker(&sb, &["--lease", "5s"]);
    let id = submit(&sb, "three", &[]);
    started_on(&db, &id, &a);
    let b = worker(&sb, &["--lease", "5s"]);
    // Followed from B while it runs on A: the stream ends after run_finished.
    let frames = http_serve::follow(&b, &id, &[]);
    assert_eq!(frames.last().unwrap().1, "run_finished", "{frames:?}");
    let rows: Vec<(u64, serde_json::Value)> = psql(
        &db.url,
        &format!(
            "SELECT position || ' ' || envelope::text FROM awf_events WHERE root_run_id = '{id}' \
             ORDER BY position"
        ),
    )
    .lines()
    .map(|l| {
        let (p, j) = l.split_once(' ').unwrap();
        (p.parse().unwrap(), serde_json::from_str(j).unwrap())
    })
    .collect();
    assert_eq!(frames.len(), rows.len(), "{frames:?}");
    for ((fid, name, data), (pos, env)) in frames.iter().zip(&rows) {
        assert_eq!(fid, pos);
        assert_eq!(data, env, "position {pos}");
        assert_eq!(name, env["event"]["type"].as_str().unwrap());
    }
    // From a position (Last-Event-ID): the rest only, on either worker.
    let tail = http_serve::follow(&b, &id, &["-H", "Last-Event-ID: 3"]);
    assert_eq!(tail.first().unwrap().0, 4, "{tail:?}");
    assert_eq!(tail.len(), rows.len() - 3);
    assert_eq!(http_serve::follow(&a, &id, &[]).len(), rows.len());
    // The run as B reads it from the store (recorded): its terminal's message too, as A
    // (which ran it) says it.
    wait_long(&db, "the run done", Duration::from_secs(60), || {
        count(
            &db,
            "SELECT count(*) FROM awf_runs WHERE queue_state = 'done'",
        ) == 1
    });
    let on_b = http_serve::execution(&b, &id);
    assert_eq!(on_b["phase"], "recorded", "{on_b}");
    assert_eq!(on_b["message"], "three done: c", "{on_b}");
    assert_eq!(http_serve::execution(&a, &id)["message"], on_b["message"]);
    // A reconnect after run_finished (nothing left to replay) ends (curl exits 0, not 28
    // for its time limit), on either worker, with no event.
    let last = format!("Last-Event-ID: {}", rows.len());
    let beyond = format!("?after={}", rows.len() + 5);
    for (w, extra, query) in [(&b, Some(last.as_str()), ""), (&a, None, beyond.as_str())] {
        let url = format!("{}/api/executions/{id}/events{query}", w.base);
        let mut args = vec!["-s", "-N", "--max-time", "60"];
        if let Some(h) = extra {
            args.extend(["-H", h]);
        }
        args.push(&url);
        let out = std::process::Command::new("curl")
            .args(&args)
            .output()
            .unwrap();
        assert!(out.status.success(), "the stream ended: {:?}", out.status);
        let body = String::from_utf8_lossy(&out.stdout);
        assert_eq!(http_serve::parse_frames(&body), vec![], "{body}");
    }
}

#[test]
fn an_approval_is_answered_through_another_worker() {
    let db = TestDb::new();
    let out = tempfile::tempdir().unwrap();
    let wf = format!(
        "name: gated\nstates:\n  initial: deploy\n  deploy:\n    type: step\n    command: echo deployed >> {0}/log\n    approval: \"Deploy now?\"\n    on_success: done\n    on_failure: rejected\n  rejected:\n    type: step\n    command: echo rejected >> {0}/log\n    on_success: done\n  done: {{type: terminal}}\n",
        out.path().display()
    );
    let sb = sandbox(&db, &[("gated", &wf)]);
    let a = worker(&sb, &["--lease", "5s"]);
    let id = submit(&sb, "gated", &[]);
    started_on(&db, &id, &a);
    let b = worker(&sb, &["--lease", "5s"]);
    let sql = format!(
        "SELECT envelope->'event'->'request'->>'request_id' FROM awf_events \
         WHERE root_run_id = '{id}' AND envelope->'event'->>'type' = 'interaction_required'"
    );
    let mut rid = String::new();
    wait_long(&db, "the approval request", Duration::from_secs(60), || {
        rid = psql(&db.url, &sql);
        !rid.is_empty()
    });
    // B, which does not run it, lists what it waits on (from the shared store).
    let v = http_serve::execution(&b, &id);
    assert_eq!(v["phase"], "recorded", "{v}");
    let pending = v["pending"].as_array().unwrap();
    assert_eq!(pending.len(), 1, "{v}");
    assert_eq!(pending[0]["request_id"], rid.as_str(), "{v}");
    assert_eq!(pending[0]["kind"], "approval", "{v}");
    assert_eq!(pending[0]["prompt"], "Deploy now?", "{v}");
    let url = format!("{}/api/executions/{id}/respond", b.base);
    // An answer that does not fit: 422 from B, and it stays pending.
    let (code, body, _) = http_serve::post(
        &url,
        &format!(r#"{{"request_id": "{rid}", "option": "maybe"}}"#),
    );
    assert_eq!(code, 422, "{body}");
    let (code, body, _) = http_serve::post(
        &url,
        &format!(r#"{{"request_id": "{rid}", "approved": true}}"#),
    );
    assert_eq!(code, 204, "{body}");
    wait_long(&db, "the run done", Duration::from_secs(60), || {
        psql(
            &db.url,
            &format!("SELECT status || '/' || queue_state FROM awf_runs WHERE run_id = '{id}'"),
        ) == "success/done"
    });
    assert_eq!(
        std::fs::read_to_string(out.path().join("log")).unwrap(),
        "deployed\n"
    );
    // Answered once: a second answer is refused (409).
    let (code, body, _) = http_serve::post(
        &url,
        &format!(r#"{{"request_id": "{rid}", "approved": true}}"#),
    );
    assert_eq!(code, 409, "{body}");
    assert_eq!(
        psql(
            &db.url,
            &format!("SELECT state FROM awf_answers WHERE request_id = '{rid}'")
        ),
        "accepted"
    );
}

/// An approval gate writing `deployed` / `rejected` to `<dir>/log`.
fn gated_workflow(dir: &std::path::Path) -> String {
    format!(
        "name: gated\nstates:\n  initial: deploy\n  deploy:\n    type: step\n    command: echo deployed >> {0}/log\n    approval: \"Deploy now?\"\n    on_success: done\n    on_failure: rejected\n  rejected:\n    type: step\n    command: echo rejected >> {0}/log\n    on_success: done\n  done: {{type: terminal}}\n",
        dir.display()
    )
}

/// The request ids of `id`'s `interaction_required` rows, in log order.
fn asked_ids(db: &TestDb, id: &str) -> Vec<String> {
    psql(
        &db.url,
        &format!(
            "SELECT envelope->'event'->'request'->>'request_id' FROM awf_events \
             WHERE root_run_id = '{id}' AND kind = 'interaction_required' ORDER BY position"
        ),
    )
    .lines()
    .map(str::to_owned)
    .collect()
}

#[test]
fn after_a_takeover_only_the_live_attempts_request_is_pending_and_an_answer_without_id_reaches_it()
{
    let db = TestDb::new();
    let out = tempfile::tempdir().unwrap();
    let sb = sandbox(&db, &[("gated", &gated_workflow(out.path()))]);
    let mut a = worker(&sb, &["--lease", "2s"]);
    let id = submit(&sb, "gated", &[]);
    started_on(&db, &id, &a);
    wait_long(&db, "A's approval request", Duration::from_secs(60), || {
        asked_ids(&db, &id).len() == 1
    });
    let b = worker(&sb, &["--lease", "2s"]);
    a.child.kill().unwrap();
    a.child.wait().unwrap();
    // B takes the run over and its attempt asks again.
    wait_long(
        &db,
        "B's approval request",
        Duration::from_secs(120),
        || asked_ids(&db, &id).len() == 2,
    );
    let asked = asked_ids(&db, &id);
    // The dead attempt's request is closed in the log (cancelled) before the new attempt
    // starts; the live one's is not. (Each attempt asks under ids of its own: see
    // a_taken_over_run_asks_under_a_new_request_id_and_the_old_one_is_refused.)
    let kinds = psql(
        &db.url,
        &format!(
            "SELECT string_agg(kind || coalesce(' ' || (envelope->'event'->>'request_id') || \
             ' ' || (envelope->'event'->'resolution'->>'outcome'), ''), ',' ORDER BY position) \
             FROM awf_events WHERE root_run_id = '{id}' \
             AND kind IN ('interaction_required', 'interaction_resolved', 'run_started')"
        ),
    );
    assert_eq!(
        kinds,
        format!(
            "run_started,interaction_required,interaction_resolved {} cancelled,\
             run_started,interaction_required",
            asked[0]
        )
    );
    // The run's seqs go on across the takeover (no repeat, no gap).
    let seqs: Vec<u64> = psql(
        &db.url,
        &format!(
            "SELECT seq FROM awf_events WHERE root_run_id = '{id}' AND run_id = '{id}' \
             ORDER BY position"
        ),
    )
    .lines()
    .map(|l| l.parse().unwrap())
    .collect();
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>());
    let view = http_serve::execution(&b, &id);
    let pending = view["pending"].as_array().unwrap();
    assert_eq!(pending.len(), 1, "{view}");
    assert_eq!(pending[0]["request_id"], asked[1].as_str(), "{view}");
    // No request id: the one pending request is answered.
    let (code, body, _) = http_serve::post(
        &format!("{}/api/executions/{id}/respond", b.base),
        r#"{"approved": true}"#,
    );
    assert_eq!(code, 204, "{body}");
    wait_long(&db, "the run done", Duration::from_secs(60), || {
        psql(
            &db.url,
            &format!("SELECT status || '/' || queue_state FROM awf_runs WHERE run_id = '{id}'"),
        ) == "success/done"
    });
    assert_eq!(
        std::fs::read_to_string(out.path().join("log")).unwrap(),
        "deployed\n"
    );
}

#[test]
fn workers_reconnect_after_postgresql_restarts_mid_run_and_nothing_is_lost() {
    let server = awf_tests::pg::PrivateServer::start();
    psql(&server.url("postgres"), "CREATE DATABASE w");
    let url = server.url("w");
    let out = tempfile::tempdir().unwrap();
    let step = |name: &str, next: &str| {
        format!(
            "  {name}:\n    type: step\n    command: sleep 1 && echo {name} >> {}/{{{{.inputs.n}}}}\n    on_success: {next}\n",
            out.path().display()
        )
    };
    let wf = format!(
        "name: slow\ninputs:\n  - name: n\n    type: string\nstates:\n  initial: s1\n{}{}{}  done: {{type: terminal}}\n",
        step("s1", "s2"),
        step("s2", "s3"),
        step("s3", "done")
    );
    let mut sb = http_serve::sandbox_with(&[("slow", &wf)]);
    sb.set_env("AWF_STORE", &url);
    // A lease longer than the restart: the runs go on where they are.
    let workers: Vec<Server> = (0..2)
        .map(|_| worker(&sb, &["--max-runs", "4", "--lease", "20s"]))
        .collect();
    let ids: Vec<String> = (0..4)
        .map(|n| submit(&sb, "slow", &[&format!("n={n}")]))
        .collect();
    let started = |u: &str| {
        psql(u, "SELECT count(*) FROM awf_runs WHERE run_started")
            .parse::<usize>()
            .unwrap()
    };
    let t0 = Instant::now();
    while started(&url) < 4 || !(0..4).any(|n| out.path().join(n.to_string()).exists()) {
        assert!(
            t0.elapsed() < Duration::from_secs(120),
            "the runs never started"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    server.stop();
    std::thread::sleep(Duration::from_secs(2));
    server.start_again();
    let t0 = Instant::now();
    loop {
        let done = psql(
            &url,
            "SELECT count(*) FROM awf_runs WHERE queue_state = 'done'",
        );
        if done == "4" {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(180),
            "the runs did not finish after the restart: {}",
            psql(
                &url,
                "SELECT run_id, status, queue_state, epoch FROM awf_runs"
            )
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    for (n, id) in ids.iter().enumerate() {
        let marks = std::fs::read_to_string(out.path().join(n.to_string())).unwrap();
        assert_eq!(marks, "s1\ns2\ns3\n", "run {n} ({id})");
        assert_eq!(
            psql(
                &url,
                &format!("SELECT status FROM awf_runs WHERE run_id = '{id}'")
            ),
            "success"
        );
        // Every event recorded, once: positions 1..n with no gap, one start and one end,
        // three steps finished.
        let row = psql(
            &url,
            &format!(
                "SELECT count(*) || ' ' || max(position) || ' ' || \
                 count(*) FILTER (WHERE envelope->'event'->>'type' = 'run_started') || ' ' || \
                 count(*) FILTER (WHERE envelope->'event'->>'type' = 'run_finished') || ' ' || \
                 count(*) FILTER (WHERE envelope->'event'->>'type' = 'step_finished') \
                 FROM awf_events WHERE root_run_id = '{id}'"
            ),
        );
        let v: Vec<&str> = row.split(' ').collect();
        assert_eq!(v[0], v[1], "gap-free positions: {row}");
        assert_eq!(&v[2..], ["1", "1", "3"], "{row}");
    }
    drop(workers);
}

/// The queue itself, many claimers at once on one table: no run is ever claimed by two of
/// them, and a claim's writes stop counting once another claim took the run.
#[test]
fn concurrent_claims_never_share_a_run_and_a_stale_epoch_changes_nothing() {
    use awf_domain::run::RunId;
    use awf_postgres::queue;
    let db = TestDb::new();
    let store = awf_postgres::PgStore::connect(&db.url).unwrap();
    let pool = store.pool().clone();
    let claims = store
        .block_on(async move {
            for n in 0..200 {
                let req = queue::QueuedRequest {
                    identifier: "w".into(),
                    ..queue::QueuedRequest::default()
                };
                queue::submit(&pool, &RunId(format!("r{n}")), &req)
                    .await
                    .unwrap();
            }
            // A second submit of an id is refused.
            let dup =
                queue::submit(&pool, &RunId("r0".into()), &queue::QueuedRequest::default()).await;
            assert_eq!(
                dup.unwrap_err().code(),
                awf_domain::ErrorCode::UserInputValidationFailed
            );
            let mut tasks = Vec::new();
            for w in 0..8 {
                let pool = pool.clone();
                tasks.push(tokio::spawn(async move {
                    let mut mine = Vec::new();
                    loop {
                        let got =
                            queue::claim(&pool, &format!("w{w}"), 3, Duration::from_secs(60), &[])
                                .await
                                .unwrap();
                        if got.is_empty() {
                            return mine;
                        }
                        mine.extend(got.into_iter().map(|c| (c.run_id.0, w, c.epoch)));
                    }
                }));
            }
            let mut all = Vec::new();
            for t in tasks {
                all.extend(t.await.unwrap());
            }
            all
        })
        .unwrap();
    assert_eq!(claims.len(), 200, "every run claimed once");
    let ids: BTreeSet<&String> = claims.iter().map(|(id, _, _)| id).collect();
    assert_eq!(ids.len(), 200, "no run claimed twice");
    assert!(claims.iter().all(|(_, _, e)| *e == 1));
    // A lease that expired is claimed again (epoch 2); the old holder's writes are refused.
    psql(
        &db.url,
        "UPDATE awf_runs SET lease_until = now() - interval '1 second' WHERE run_id = 'r0'",
    );
    let (_, old_worker, _) = claims.iter().find(|(id, _, _)| id == "r0").unwrap().clone();
    let pool = store.pool().clone();
    store
        .block_on(async move {
            let again = queue::claim(&pool, "taker", 10, Duration::from_secs(60), &[])
                .await
                .unwrap();
            assert_eq!(again.len(), 1);
            assert_eq!((again[0].run_id.0.as_str(), again[0].epoch), ("r0", 2));
            let old = format!("w{old_worker}");
            let r0 = RunId("r0".into());
            let ended = queue::Ended {
                status: "success".into(),
                exit_code: Some(0),
                error_message: None,
            };
            assert!(!queue::finish(&pool, &r0, &old, 1, &ended).await.unwrap());
            assert_eq!(
                queue::mark_started(&pool, &r0, &old, 1).await.unwrap(),
                queue::Marked::Lost
            );
            assert!(
                !queue::release(&pool, &r0, &old, 1, Duration::ZERO)
                    .await
                    .unwrap()
            );
            let held = queue::renew(&pool, &old, Duration::from_secs(60))
                .await
                .unwrap();
            assert!(held.iter().all(|h| h.run_id != r0), "{held:?}");
            assert!(queue::finish(&pool, &r0, "taker", 2, &ended).await.unwrap());
        })
        .unwrap();
    assert_eq!(
        psql(
            &db.url,
            "SELECT status || '/' || queue_state || '/' || worker_id FROM awf_runs WHERE run_id = 'r0'"
        ),
        "success/done/taker"
    );
}

#[test]
fn sigterm_drains_the_workers_runs_cancelled_and_recorded_so() {
    let db = TestDb::new();
    let wf = "name: long\nstates:\n  initial: wait\n  wait:\n    type: step\n    command: sleep 120\n    on_success: done\n  done: {type: terminal}\n";
    let sb = sandbox(&db, &[("long", wf)]);
    let mut a = worker(&sb, &["--lease", "5s", "--drain-timeout", "1s"]);
    let id = submit(&sb, "long", &[]);
    started_on(&db, &id, &a);
    assert_eq!(count(&db, "SELECT count(*) FROM awf_workers"), 1);
    http_serve::sigterm(&a);
    // While its runs drain, the worker still answers: a new run is refused with 503 (it
    // used to close its listener at once, so the request found nobody).
    let run = format!("{}/api/workflows/env/long/run", a.base);
    let mut got = (0, String::new(), String::new());
    awf_tests::wait_for("a 503 while the worker drains", || {
        got = http_serve::post(&run, "{}");
        got.0 == 503
    });
    assert!(got.1.contains("SYSTEM.RESOURCE.EXHAUSTED"), "{got:?}");
    assert_eq!(http_serve::wait_exit(&mut a), Some(0));
    assert_eq!(
        psql(
            &db.url,
            &format!("SELECT status || '/' || queue_state FROM awf_runs WHERE run_id = '{id}'"),
        ),
        "cancelled/done"
    );
    assert_eq!(count(&db, "SELECT count(*) FROM awf_workers"), 0);
    // Its end is in the event rows too.
    assert_eq!(
        count(
            &db,
            &format!(
                "SELECT count(*) FROM awf_events WHERE root_run_id = '{id}' \
                 AND envelope->'event'->>'type' = 'run_finished'"
            ),
        ),
        1
    );
}

/// Starts a worker whose stderr goes to `log` (read back with [`read_log`]).
fn logged_worker(sb: &Sandbox, extra: &[&str], log: &std::path::Path) -> Server {
    let f = std::fs::File::create(log).unwrap();
    http_serve::start_with_stderr(sb, extra, std::process::Stdio::from(f))
}

fn read_log(log: &std::path::Path) -> String {
    std::fs::read_to_string(log).unwrap_or_default()
}

/// A SIGTERMed worker whose writes block (a lock on `awf_events` held by the test) gives up
/// on them once its drain is over and exits, naming the run whose events it could not
/// write. It used to wait 30 s for the recorder's flush, then 30 s more at the exit, and to
/// retry recording the run's end for ever.
#[test]
fn a_draining_worker_whose_writes_block_gives_them_up_and_exits() {
    let db = TestDb::new();
    let wf = "name: long\nstates:\n  initial: wait\n  wait:\n    type: step\n    command: sleep 120\n    on_success: done\n  done: {type: terminal}\n";
    let sb = sandbox(&db, &[("long", wf)]);
    let logs = tempfile::tempdir().unwrap();
    let log = logs.path().join("a.log");
    let mut a = logged_worker(&sb, &["--lease", "5s", "--drain-timeout", "1s"], &log);
    let id = submit(&sb, "long", &[]);
    started_on(&db, &id, &a);
    wait_long(
        &db,
        "the step's start recorded",
        Duration::from_secs(60),
        || {
            count(
                &db,
                &format!(
                    "SELECT count(*) FROM awf_events WHERE root_run_id = '{id}' \
                 AND kind = 'step_started'"
                ),
            ) == 1
        },
    );
    let lock = EventsLock::take(&db.url);
    let t0 = Instant::now();
    http_serve::sigterm(&a);
    // Generous: the drain (1 s), the cancelled run's record waited for (2 s) and one last
    // try of its end (2 s) take about 5 s; the old code took 40 s and more.
    let bound = Duration::from_secs(20);
    let mut code = None;
    while code.is_none() && t0.elapsed() < Duration::from_secs(120) {
        code = a.child.try_wait().unwrap();
        std::thread::sleep(Duration::from_millis(100));
    }
    let took = t0.elapsed();
    drop(lock);
    let stderr = read_log(&log);
    assert!(
        code.is_some() && took < bound,
        "the worker exited after {took:?} ({code:?}); stderr:\n{stderr}"
    );
    assert_eq!(code.unwrap().code(), Some(0), "{stderr}");
    // The worker says it drains, with the run it holds, and when the timeout cancels it (a
    // breaker saw `runs=0` from the HTTP side and no timeout line on a worker).
    let drain = stderr
        .lines()
        .find(|l| l.contains("draining: no more claims"))
        .unwrap_or_else(|| panic!("no drain line:\n{stderr}"));
    assert!(drain.contains("runs=1"), "{drain}");
    assert!(
        stderr.contains("drain timeout reached: cancelling the runs this worker still holds"),
        "{stderr}"
    );
    let warned = stderr
        .lines()
        .find(|l| l.contains("WARN") && l.contains(&id) && l.contains("were not written"))
        .unwrap_or_else(|| panic!("no warning naming run {id}:\n{stderr}"));
    let n: usize = warned
        .split_whitespace()
        .find_map(|t| t.strip_prefix("events="))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("a number of events in {warned:?}"));
    assert!(n >= 1, "{warned}");
}

/// The lines of `log` that name `run_id` and hold `text`.
fn log_lines(log: &std::path::Path, run_id: &str, text: &str) -> Vec<String> {
    read_log(log)
        .lines()
        .filter(|l| l.contains(run_id) && l.contains(text))
        .map(str::to_owned)
        .collect()
}

/// Workers say on stderr (info, by default) which runs they claim, take over, finish and
/// fail, with the run id, the workflow and their worker id.
#[test]
fn workers_log_the_runs_they_claim_take_over_finish_and_fail() {
    let db = TestDb::new();
    let out = tempfile::tempdir().unwrap();
    let slow = format!(
        "name: slow\nstates:\n  initial: s1\n{}  done: {{type: terminal}}\n",
        marked_step(out.path(), "marks", "s1", "sleep 4", "done")
    );
    let bad = "name: bad\nstates:\n  initial: fail\n  fail:\n    type: step\n    command: exit 3\n    on_success: done\n  done: {type: terminal}\n";
    let sb = sandbox(&db, &[("slow", &slow), ("bad", bad)]);
    let logs = tempfile::tempdir().unwrap();
    let (log_a, log_b) = (logs.path().join("a.log"), logs.path().join("b.log"));
    let mut a = logged_worker(&sb, &["--lease", "2s"], &log_a);
    let id = submit(&sb, "slow", &[]);
    started_on(&db, &id, &a);
    let a_id = worker_of(&db, &id);
    wait_long(&db, "A's claim logged", Duration::from_secs(30), || {
        !log_lines(&log_a, &id, "claimed run").is_empty()
    });
    let claimed = log_lines(&log_a, &id, "claimed run").remove(0);
    assert!(
        claimed.contains("INFO") && claimed.contains(&a_id) && claimed.contains("slow"),
        "{claimed}"
    );
    let b = logged_worker(&sb, &["--lease", "2s"], &log_b);
    a.child.kill().unwrap();
    a.child.wait().unwrap();
    wait_long(&db, "the run done on B", Duration::from_secs(120), || {
        psql(
            &db.url,
            &format!("SELECT status || '/' || queue_state FROM awf_runs WHERE run_id = '{id}'"),
        ) == "success/done"
    });
    let b_id = worker_of(&db, &id);
    assert_eq!(pid_of(&b_id), b.child.id());
    let took = log_lines(&log_b, &id, "took over");
    assert_eq!(took.len(), 1, "{}", read_log(&log_b));
    assert!(
        took[0].contains("INFO")
            && took[0].contains(&format!("from worker {a_id}"))
            && took[0].contains(&b_id)
            && took[0].contains("slow"),
        "{}",
        took[0]
    );
    wait_long(&db, "B's end line", Duration::from_secs(30), || {
        !log_lines(&log_b, &id, "finished: success").is_empty()
    });
    // A failing run: its failure is logged with its exit code and error.
    let failed = submit(&sb, "bad", &[]);
    wait_long(
        &db,
        "the failing run logged",
        Duration::from_secs(60),
        || !log_lines(&log_b, &failed, "failed").is_empty(),
    );
    let line = log_lines(&log_b, &failed, "failed").remove(0);
    assert!(line.contains("exit 3") && line.contains(&b_id), "{line}");
    drop(b);
}

/// A run that a worker runs and that parks on a usage limit (a mock LLM answering 429 with
/// a reset 30 minutes ahead) is `waiting` with its reset time in the store (schema 3), in
/// `GET /api/executions/{id}` of any worker, and in `awf status`, as with the embedded store.
#[test]
fn a_run_parked_on_a_worker_keeps_its_status_and_reset_time() {
    let db = TestDb::new();
    let mock = awf_mock_llm::MockLlm::start(serde_json::json!({"rules": [
        {"times": 1, "reply": {"status": 429, "retry_after": 1800, "error_message": "come back later"}}
    ], "default": {"text": "answered after the reset"}}));
    let mut sb = sandbox(
        &db,
        &[(
            "park",
            "name: park\nstates:\n  initial: ask\n  ask: {type: agent, provider: openai_compatible, prompt: hi, usage_limit: {wait: 1s, max_wait: 1h}, on_success: done}\n  done: {type: terminal}\n",
        )],
    );
    sb.set_env("OPENAI_BASE_URL", &format!("{}/v1", mock.url()));
    sb.set_env("OPENAI_MODEL", "mock-model");
    sb.set_env("OPENAI_API_KEY", "sk-mock-key-123");
    let a = worker(&sb, &[]);
    let id = submit(&sb, "park", &[]);
    wait_long(&db, "the run parked", Duration::from_secs(120), || {
        psql(
            &db.url,
            &format!("SELECT queue_state FROM awf_runs WHERE run_id = '{id}'"),
        ) == "done"
    });
    let row = psql(
        &db.url,
        &format!(
            "SELECT status || '|' || coalesce(to_char(waiting_until AT TIME ZONE 'UTC', \
             'YYYY-MM-DD\"T\"HH24:MI:SS'), '') FROM awf_runs WHERE run_id = '{id}'"
        ),
    );
    let (status, until) = row.split_once('|').unwrap();
    assert_eq!(status, "waiting", "{row}");
    assert!(!until.is_empty(), "no waiting_until: {row}");
    // What the embedded store shows, from the worker that ran it and from another one.
    let b = worker(&sb, &[]);
    for w in [&a, &b] {
        let v = http_serve::execution(w, &id);
        assert_eq!(v["status"], "waiting", "{v}");
        let shown = v["waiting_until"].as_str().unwrap_or_else(|| panic!("{v}"));
        assert!(shown.starts_with(until), "{shown} vs {until}");
    }
    let st = sb.run(&["status", &id, "-f", "json"]).unwrap();
    let st = st.json().unwrap();
    assert_eq!(st["status"], "waiting", "{st}");
    assert!(
        st["waiting_until"].as_str().unwrap().starts_with(until),
        "{st}"
    );
    let h = sb.run(&["history", "-f", "json"]).unwrap();
    assert!(h.stdout.contains("waiting"), "{}", h.stdout);
    drop((a, b));
}

#[test]
fn submit_without_a_shared_store_is_a_clear_error() {
    let sb = http_serve::sandbox_with(&[(
        "w",
        "name: w\nstates:\n  initial: a\n  a:\n    type: step\n    command: 'true'\n    on_success: done\n  done: {type: terminal}\n",
    )]);
    let r = sb.run(&["run", "--submit", "w"]).unwrap();
    assert_ne!(r.code, 0);
    assert!(
        r.stderr.contains("USER.INPUT.VALIDATION_FAILED"),
        "{}",
        r.stderr
    );
    assert!(r.stderr.contains("--store"), "{}", r.stderr);
    // Nothing ran.
    assert!(r.stdout.trim().is_empty(), "{}", r.stdout);
}

#[test]
fn a_failed_run_resumed_through_any_worker_is_queued_and_continues_where_it_failed() {
    let db = TestDb::new();
    let out = tempfile::tempdir().unwrap();
    let d = out.path().display();
    let wf = format!(
        "name: flaky\nstates:\n  initial: s1\n  s1:\n    type: step\n    command: echo s1 >> {d}/marks\n    on_success: s2\n  s2:\n    type: step\n    command: test -f {d}/go && echo s2 >> {d}/marks\n    on_success: done\n  done: {{type: terminal}}\n"
    );
    let sb = sandbox(&db, &[("flaky", &wf)]);
    let a = worker(&sb, &["--lease", "5s"]);
    let b = worker(&sb, &["--lease", "5s"]);
    let id = submit(&sb, "flaky", &[]);
    let state = |db: &TestDb| {
        psql(
            &db.url,
            &format!("SELECT status || '/' || queue_state FROM awf_runs WHERE run_id = '{id}'"),
        )
    };
    wait_long(&db, "the run to fail", Duration::from_secs(60), || {
        state(&db) == "failure/done"
    });
    std::fs::write(out.path().join("go"), "").unwrap();
    let (code, body, _) = http_serve::post(&format!("{}/api/executions/{id}/resume", b.base), "{}");
    assert!(code == 200 || code == 202, "{code} {body}");
    wait_long(
        &db,
        "the resumed run to succeed",
        Duration::from_secs(60),
        || state(&db) == "success/done",
    );
    assert_eq!(
        std::fs::read_to_string(out.path().join("marks")).unwrap(),
        "s1\ns2\n"
    );
    // A run that succeeded is not resumed again.
    let (code, body, _) = http_serve::post(&format!("{}/api/executions/{id}/resume", a.base), "{}");
    assert_eq!(code, 409, "{body}");
}

#[test]
fn a_worker_that_cannot_reach_the_store_stops_its_runs_when_their_lease_would_expire() {
    let server = awf_tests::pg::PrivateServer::start();
    psql(&server.url("postgres"), "CREATE DATABASE w");
    let url = server.url("w");
    let wf = "name: long\nstates:\n  initial: wait\n  wait:\n    type: step\n    command: sleep 120\n    on_success: done\n  done: {type: terminal}\n";
    let mut sb = http_serve::sandbox_with(&[("long", wf)]);
    sb.set_env("AWF_STORE", &url);
    let w = worker(&sb, &["--lease", "2s"]);
    let id = submit(&sb, "long", &[]);
    let sleeping = |sb: &Sandbox| {
        sb.processes()
            .iter()
            .any(|p| p.cmdline.contains("sleep 120"))
    };
    let t0 = Instant::now();
    while !sleeping(&sb) {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "the step never started"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // The store goes away for longer than the lease: the worker cannot prove it still holds
    // the run, so it stops it (another worker may take it over once the lease expired).
    server.stop();
    let t0 = Instant::now();
    while sleeping(&sb) {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "the run went on without its lease"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    server.start_again();
    // Back: the run is claimed again (its lease expired) and resumed.
    let t0 = Instant::now();
    loop {
        let row = psql(
            &url,
            &format!("SELECT epoch || '/' || queue_state FROM awf_runs WHERE run_id = '{id}'"),
        );
        if row == "2/claimed" && sleeping(&sb) {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(120),
            "not resumed: {row}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let (code, body, _) =
        http_serve::curl(&["-X", "DELETE", &format!("{}/api/executions/{id}", w.base)]);
    assert_eq!(code, 204, "{body}");
    let t0 = Instant::now();
    while psql(
        &url,
        &format!("SELECT status FROM awf_runs WHERE run_id = '{id}'"),
    ) != "cancelled"
    {
        assert!(t0.elapsed() < Duration::from_secs(60), "not cancelled");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn a_submitted_run_is_checked_at_submit_and_found_by_a_worker_without_the_workflow() {
    let db = TestDb::new();
    let wf = "name: here\ninputs:\n  - name: who\n    type: string\n    required: true\nstates:\n  initial: a\n  a:\n    type: step\n    command: echo hi {{.inputs.who}}\n    on_success: done\n  done: {type: terminal}\n";
    // The submitter's project has the workflow; the worker's search path has none.
    let submitter = sandbox(&db, &[("here", wf)]);
    let elsewhere = sandbox(&db, &[]);
    let _w = worker(&elsewhere, &["--lease", "5s"]);
    let id = submit(&submitter, "here", &["who=ada"]);
    wait_long(&db, "the run done", Duration::from_secs(60), || {
        count(
            &db,
            &format!(
                "SELECT count(*) FROM awf_runs WHERE run_id = '{id}' AND queue_state = 'done'"
            ),
        ) == 1
    });
    assert_eq!(
        psql(
            &db.url,
            &format!("SELECT status FROM awf_runs WHERE run_id = '{id}'"),
        ),
        "success"
    );
    // What `awf run` refuses before starting is refused at submit, and nothing is queued.
    for (args, code) in [
        (vec!["run", "--submit", "nowhere"], "USER."),
        (
            vec!["run", "--submit", "here"],
            "USER.INPUT.VALIDATION_FAILED",
        ),
    ] {
        let r = submitter.run(&args).unwrap();
        assert_ne!(r.code, 0, "{args:?}: {}", r.stdout);
        assert!(r.stderr.contains(code), "{args:?}: {}", r.stderr);
        assert!(r.stdout.trim().is_empty(), "{args:?}: {}", r.stdout);
    }
    assert_eq!(count(&db, "SELECT count(*) FROM awf_runs"), 1);
}

/// The live processes whose environment holds `RUN_MARK=<mark>` (this test's only).
fn run_marked(mark: &str) -> Vec<u32> {
    let needle = format!("RUN_MARK={mark}");
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| {
            let pid = e.file_name().to_str()?.parse::<u32>().ok()?;
            let environ = std::fs::read(e.path().join("environ")).ok()?;
            environ
                .split(|b| *b == 0)
                .any(|v| v == needle.as_bytes())
                .then_some(pid)
        })
        .collect()
}

#[test]
fn a_run_posted_to_a_worker_is_checked_at_post_and_run_by_a_worker_without_the_workflow() {
    let db = TestDb::new();
    let here = "name: here\ninputs:\n  - name: who\n    type: string\n    required: true\n    validation:\n      pattern: '^[a-z]+$'\nstates:\n  initial: a\n  a:\n    type: step\n    command: echo hi {{.inputs.who}}\n    on_success: done\n  done: {type: terminal}\n";
    let long = "name: long\nstates:\n  initial: wait\n  wait:\n    type: step\n    command: sleep 120\n    on_success: done\n  done: {type: terminal}\n";
    let broken = "name: broken\nstates:\n  initial: a\n  a:\n    type: step\n    command: echo a\n    on_success: nowhere\n";
    let home = sandbox(&db, &[("here", here), ("long", long), ("broken", broken)]);
    // The embedded server of the same project: the answers a worker must give too.
    let embedded = worker(&home, &["--store", ""]);
    let a = worker(&home, &["--max-runs", "1", "--lease", "5s"]);
    // What the embedded server refuses before starting, a worker refuses at the POST with
    // the same status and code, and queues nothing.
    for (name, body) in [
        ("here", r"{}"),
        ("here", r#"{"inputs": {"who": "Not Valid"}}"#),
        ("broken", r#"{}"#),
    ] {
        let (want, want_body, _) = http_serve::post(
            &format!("{}/api/workflows/env/{name}/run", embedded.base),
            body,
        );
        let (got, got_body, _) =
            http_serve::post(&format!("{}/api/workflows/env/{name}/run", a.base), body);
        assert_eq!(want, 422, "{name} {body}: {want_body}");
        assert_eq!(got, want, "{name} {body}: {got_body}");
        assert_eq!(
            http_serve::json_of(&got_body)["code"],
            http_serve::json_of(&want_body)["code"],
            "{name} {body}: {got_body} vs {want_body}"
        );
    }
    assert_eq!(count(&db, "SELECT count(*) FROM awf_runs"), 0);
    // A fills its one slot; a run POSTed to it is then taken by B, whose search path has
    // none of these workflows: queued by its file's path, it runs all the same.
    let blocker = http_serve::start_run(&a, "long", "{}");
    started_on(&db, &blocker, &a);
    let id = http_serve::start_run(&a, "here", r#"{"inputs": {"who": "ada"}}"#);
    let elsewhere = sandbox(&db, &[]);
    let b = worker(&elsewhere, &["--lease", "5s"]);
    wait_long(&db, "the run done", Duration::from_secs(60), || {
        count(
            &db,
            &format!(
                "SELECT count(*) FROM awf_runs WHERE run_id = '{id}' AND queue_state = 'done'"
            ),
        ) == 1
    });
    assert_eq!(pid_of(&worker_of(&db, &id)), b.child.id());
    let v = http_serve::execution(&b, &id);
    assert_eq!(v["status"], "completed", "{v}");
}

/// `GET /api/executions`: the ids in the order listed, with their statuses.
fn listed(w: &Server) -> Vec<(String, String)> {
    let (code, body, _) = http_serve::curl(&[&format!("{}/api/executions", w.base)]);
    assert_eq!(code, 200, "{body}");
    http_serve::json_of(&body)["body"]["executions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["execution_id"].as_str().unwrap().to_owned(),
                e["status"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// SIGKILLs the processes of the marks when dropped (a failing test leaves nothing behind).
struct KillMarked(Vec<String>);

impl Drop for KillMarked {
    fn drop(&mut self) {
        for m in &self.0 {
            for pid in run_marked(m) {
                let _ = std::process::Command::new("kill")
                    .args(["-KILL", &pid.to_string()])
                    .status();
            }
        }
    }
}

#[test]
fn a_workers_run_stops_what_its_steps_detached_when_it_ends_and_leaves_other_runs_alone() {
    let db = TestDb::new();
    let wf = "name: detach\ninputs:\n  - name: RUN_MARK\n    type: string\n  - name: END\n    type: string\nstates:\n  initial: start\n  start:\n    type: step\n    command: \"setsid -f sh -c 'touch \\\"ready-$RUN_MARK\\\"; exec sleep 300' >/dev/null 2>&1 </dev/null; while [ ! -f \\\"ready-$RUN_MARK\\\" ]; do sleep 0.01; done; $END\"\n    on_success: done\n  done: {type: terminal}\n";
    let sb = sandbox(&db, &[("detach", wf)]);
    let u = sb
        .path()
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    let (keep, ok) = (format!("{u}-keep"), format!("{u}-ok"));
    let _cleanup = KillMarked(vec![keep.clone(), ok.clone()]);
    let w = worker(&sb, &["--max-runs", "4", "--lease", "10s"]);
    let kept = submit(
        &sb,
        "detach",
        &[&format!("RUN_MARK={keep}"), "END=sleep 300"],
    );
    awf_tests::wait_for("the kept run's detached process", || {
        sb.path().join(format!("ready-{keep}")).exists()
    });
    let id = submit(&sb, "detach", &[&format!("RUN_MARK={ok}"), "END=true"]);
    wait_long(&db, "the run done", Duration::from_secs(60), || {
        psql(
            &db.url,
            &format!("SELECT status || '/' || queue_state FROM awf_runs WHERE run_id = '{id}'"),
        ) == "success/done"
    });
    assert!(sb.path().join(format!("ready-{ok}")).exists());
    awf_tests::wait_for("the finished run's detached process to be stopped", || {
        run_marked(&ok).is_empty()
    });
    // The other run (same worker, still running) keeps its step and its detached sleep.
    assert!(run_marked(&keep).len() >= 2, "{:?}", run_marked(&keep));
    let (code, body, _) =
        http_serve::curl(&["-X", "DELETE", &format!("{}/api/executions/{kept}", w.base)]);
    assert_eq!(code, 204, "{body}");
    awf_tests::wait_for("the cancelled run's detached process to be stopped", || {
        run_marked(&keep).is_empty()
    });
}

const LONG: &str = "name: long\nstates:\n  initial: wait\n  wait:\n    type: step\n    command: sleep 120\n    on_success: done\n  done: {type: terminal}\n";

fn run_done(db: &TestDb, id: &str) {
    wait_long(db, "the run done", Duration::from_secs(60), || {
        count(
            db,
            &format!(
                "SELECT count(*) FROM awf_runs WHERE run_id = '{id}' AND queue_state = 'done'"
            ),
        ) == 1
    });
}

#[test]
fn queued_runs_and_runs_that_failed_before_starting_show_so_over_http_status_and_history() {
    let db = TestDb::new();
    let sb = sandbox(&db, &[("long", LONG), ("gone", LONG)]);
    let a = worker(&sb, &["--max-runs", "1", "--lease", "5s"]);
    let blocker = http_serve::start_run(&a, "long", "{}");
    started_on(&db, &blocker, &a);
    // A is full: these two stay queued.
    let queued = http_serve::start_run(&a, "long", "{}");
    let doomed = submit(&sb, "gone", &[]);
    let v = http_serve::execution(&a, &queued);
    assert_eq!(v["status"], "queued", "{v}");
    assert!(
        listed(&a).contains(&(queued.clone(), "queued".to_owned())),
        "{:?}",
        listed(&a)
    );
    let r = sb.run(&["status", &queued]).unwrap();
    assert_eq!(r.code, 0, "{} {}", r.stdout, r.stderr);
    assert!(
        r.stdout
            .lines()
            .any(|l| l.starts_with("Status:") && l.contains("queued")),
        "{}",
        r.stdout
    );
    let r = sb.run(&["status", &queued, "-f", "json"]).unwrap();
    assert_eq!(r.json().unwrap()["status"], "queued", "{}", r.stdout);
    let r = sb.run(&["history", "-s", "queued", "-f", "json"]).unwrap();
    assert_eq!(r.code, 0, "{} {}", r.stdout, r.stderr);
    let ids: BTreeSet<String> = r
        .json()
        .unwrap()
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            assert_eq!(e["status"], "queued", "{e}");
            e["id"].as_str().unwrap().to_owned()
        })
        .collect();
    assert_eq!(ids, BTreeSet::from([queued.clone(), doomed.clone()]));
    let r = sb.run(&["history"]).unwrap();
    assert!(
        r.stdout
            .lines()
            .any(|l| l.contains(&queued[..8]) && l.contains("queued")),
        "{}",
        r.stdout
    );
    // The workflow `doomed` was queued by is deleted before a worker takes it: the worker
    // fails it before its first step, and it shows as failed with why.
    std::fs::remove_file(sb.path().join("wf/gone.yaml")).unwrap();
    let (code, body, _) = http_serve::curl(&[
        "-X",
        "DELETE",
        &format!("{}/api/executions/{blocker}", a.base),
    ]);
    assert_eq!(code, 204, "{body}");
    let (code, body, _) = http_serve::curl(&[
        "-X",
        "DELETE",
        &format!("{}/api/executions/{queued}", a.base),
    ]);
    assert_eq!(code, 204, "{body}");
    run_done(&db, &doomed);
    let v = http_serve::execution(&a, &doomed);
    assert_eq!(v["status"], "failed", "{v}");
    let why = v["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(why.contains("gone"), "{v}");
    assert_eq!(v["error"]["code"], "USER.INPUT.MISSING_FILE", "{v}");
    let r = sb.run(&["status", &doomed]).unwrap();
    assert_eq!(r.code, 0, "{} {}", r.stdout, r.stderr);
    assert!(
        r.stdout
            .lines()
            .any(|l| l.starts_with("Status:") && l.contains("failed")),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout
            .lines()
            .any(|l| l.starts_with("Error:") && l.contains(&why)),
        "{}",
        r.stdout
    );
    let r = sb.run(&["history", "-s", "failed", "-f", "json"]).unwrap();
    let rows = r.json().unwrap();
    let row = rows
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["id"] == doomed.as_str())
        .unwrap_or_else(|| panic!("{rows}"));
    assert_eq!(row["error_message"], why.as_str(), "{row}");
    // The run cancelled while queued is in the history too, cancelled.
    let r = sb.run(&["status", &queued, "-f", "json"]).unwrap();
    assert_eq!(r.json().unwrap()["status"], "cancelled", "{}", r.stdout);
}

#[test]
fn every_worker_lists_the_runs_in_the_embedded_servers_order() {
    let db = TestDb::new();
    let quick = "name: quick\nstates:\n  initial: a\n  a:\n    type: step\n    command: echo a\n    on_success: done\n  done: {type: terminal}\n";
    let sb = sandbox(&db, &[("long", LONG), ("quick", quick)]);
    let a = worker(&sb, &["--max-runs", "1", "--lease", "5s"]);
    let q1 = http_serve::start_run(&a, "quick", "{}");
    run_done(&db, &q1);
    let q2 = http_serve::start_run(&a, "quick", "{}");
    run_done(&db, &q2);
    let l1 = http_serve::start_run(&a, "long", "{}");
    started_on(&db, &l1, &a);
    let b = worker(&sb, &["--max-runs", "1", "--lease", "5s"]);
    let l2 = http_serve::start_run(&b, "long", "{}");
    started_on(&db, &l2, &b);
    // Both full: queued.
    let l3 = http_serve::start_run(&a, "long", "{}");
    // As the embedded server lists them: the runs in progress first, then the others,
    // newest first in each group; the same on every worker.
    let want = vec![
        (l3, "queued".to_owned()),
        (l2, "running".to_owned()),
        (l1, "running".to_owned()),
        (q2, "completed".to_owned()),
        (q1, "completed".to_owned()),
    ];
    assert_eq!(listed(&a), want);
    assert_eq!(listed(&b), want);
}

#[test]
fn awf_cancel_cancels_a_queued_run_at_once_and_a_running_one_through_its_worker() {
    let db = TestDb::new();
    let sb = sandbox(&db, &[("long", LONG)]);
    let a = worker(&sb, &["--max-runs", "1", "--lease", "5s"]);
    let running = http_serve::start_run(&a, "long", "{}");
    started_on(&db, &running, &a);
    let queued = submit(&sb, "long", &[]);
    // A prefix is enough; a queued run is cancelled at once and never runs.
    let r = sb.run(&["cancel", &queued[..13]]).unwrap();
    assert_eq!(r.code, 0, "{} {}", r.stdout, r.stderr);
    assert_eq!(r.stdout.trim(), format!("cancelled {queued}"));
    assert_eq!(
        psql(
            &db.url,
            &format!("SELECT status || '/' || queue_state FROM awf_runs WHERE run_id = '{queued}'"),
        ),
        "cancelled/done"
    );
    // A running one: its worker stops it.
    let r = sb.run(&["cancel", &running, "-f", "json"]).unwrap();
    assert_eq!(r.code, 0, "{} {}", r.stdout, r.stderr);
    assert_eq!(
        r.json().unwrap()["status"],
        "cancel_requested",
        "{}",
        r.stdout
    );
    wait_long(&db, "the run cancelled", Duration::from_secs(60), || {
        psql(
            &db.url,
            &format!(
                "SELECT status || '/' || queue_state FROM awf_runs WHERE run_id = '{running}'"
            ),
        ) == "cancelled/done"
    });
    http_serve::wait_status(&a, &running, "cancelled");
    // Again: it has ended (cancelled), as a completed or failed run says (exit 0); the
    // same for the one cancelled while queued.
    let r = sb.run(&["cancel", &running]).unwrap();
    assert_eq!(r.code, 0, "{} {}", r.stdout, r.stderr);
    assert_eq!(
        r.stdout.trim(),
        format!("run {running} has ended already (cancelled)")
    );
    for id in [&running, &queued] {
        let r = sb.run(&["cancel", id, "-f", "json"]).unwrap();
        assert_eq!(r.code, 0, "{} {}", r.stdout, r.stderr);
        assert_eq!(r.json().unwrap()["status"], "ended", "{}", r.stdout);
    }
    let r = sb.run(&["cancel", &queued]).unwrap();
    assert_eq!(
        r.stdout.trim(),
        format!("run {queued} has ended already (cancelled)")
    );
    // Unknown id, and no shared store: clear errors.
    let r = sb.run(&["cancel", "ffffffff"]).unwrap();
    assert_ne!(r.code, 0);
    assert!(r.stderr.contains("USER."), "{}", r.stderr);
    // Without the store, `awf cancel` looks among this machine's runs (stop 40): the run is
    // not one of them, and the hint names the flag that reaches it.
    let r = sb.run(&["cancel", &running, "--store", ""]).unwrap();
    assert_ne!(r.code, 0);
    assert!(
        r.stderr.contains("USER.FACADE.RUN_NOT_FOUND"),
        "{}",
        r.stderr
    );
    assert!(
        r.stderr
            .contains("a run of a shared store is cancelled with --store"),
        "{}",
        r.stderr
    );
}

#[test]
fn a_nul_in_a_run_id_or_filter_is_not_found_on_a_worker_not_a_store_error() {
    // PostgreSQL text refuses U+0000: these answered 500 SYSTEM.STORE.UNAVAILABLE (22021).
    let db = TestDb::new();
    let home = sandbox(&db, &[]);
    let w = worker(&home, &[]);
    for (method, path, want) in [
        ("GET", "/api/executions/%00", 404),
        ("GET", "/api/executions/ab%00cd", 404),
        ("DELETE", "/api/executions/%00", 404),
        ("GET", "/api/history?workflow=%00", 200),
        ("GET", "/api/history/stats?workflow=%00", 200),
    ] {
        let (code, body, _) = http_serve::curl(&["-X", method, &format!("{}{path}", w.base)]);
        assert_eq!(code, want, "{method} {path}: {body}");
        assert!(!body.contains("SYSTEM.STORE"), "{method} {path}: {body}");
    }
    let (code, body, _) = http_serve::post(
        &format!("{}/api/executions/%00/respond", w.base),
        r#"{"value": "x"}"#,
    );
    assert!((400..500).contains(&code), "respond: {code} {body}");
    assert!(!body.contains("SYSTEM.STORE"), "respond: {body}");
}

#[test]
fn resuming_a_queued_run_says_it_is_queued() {
    // It said "already completed successfully; nothing to resume".
    let db = TestDb::new();
    let sb = sandbox(&db, &[("long", LONG)]);
    let queued = submit(&sb, "long", &[]);
    let r = sb.run(&["resume", &queued]).unwrap();
    assert_ne!(r.code, 0, "{} {}", r.stdout, r.stderr);
    assert!(r.stderr.contains("is queued"), "{}", r.stderr);
    assert!(!r.stderr.contains("completed successfully"), "{}", r.stderr);
}

/// `ask_missing_inputs` POSTed to a worker: a queued run cannot ask (its worker would hang
/// on a request no worker lists), so a missing required input is refused at once with the
/// 422 a run without it gets, naming the input, and nothing is queued.
#[test]
fn a_worker_refuses_ask_missing_inputs_with_a_missing_input_and_queues_nothing() {
    let db = TestDb::new();
    let wf = "name: needs\ninputs:\n  - name: who\n    type: string\n    required: true\nstates:\n  initial: a\n  a:\n    type: step\n    command: echo hi {{.inputs.who}}\n    on_success: done\n  done: {type: terminal}\n";
    let sb = sandbox(&db, &[("needs", wf)]);
    let a = worker(&sb, &["--lease", "5s"]);
    let (code, body, _) = http_serve::post(
        &format!("{}/api/workflows/env/needs/run", a.base),
        r#"{"ask_missing_inputs": true}"#,
    );
    assert_eq!(code, 422, "{body}");
    let v = http_serve::json_of(&body);
    assert_eq!(v["code"], "USER.INPUT.VALIDATION_FAILED", "{v}");
    assert!(body.contains("who"), "{body}");
    assert!(body.contains("shared store"), "{body}");
    assert_eq!(count(&db, "SELECT count(*) FROM awf_runs"), 0);
    // Given, it runs as usual.
    let id = http_serve::start_run(
        &a,
        "needs",
        r#"{"ask_missing_inputs": true, "inputs": {"who": "x"}}"#,
    );
    http_serve::wait_status(&a, &id, "completed");
}

/// `awf history --stats` on the shared store counts queued (and waiting) runs, in text and
/// JSON (`queued_count`, as /api/history/stats), so that its lines add up to the total.
#[test]
fn history_stats_count_queued_and_waiting_runs_of_the_shared_store() {
    let db = TestDb::new();
    let sb = sandbox(&db, &[("long", LONG)]);
    // No worker: submitted runs stay queued.
    let ids: Vec<String> = (0..4).map(|_| submit(&sb, "long", &[])).collect();
    psql(
        &db.url,
        &format!(
            "UPDATE awf_runs SET status = 'waiting', queue_state = 'done' WHERE run_id = '{}'",
            ids[0]
        ),
    );
    let r = sb.run(&["history", "--stats"]).unwrap();
    assert_eq!(r.code, 0, "{} {}", r.stdout, r.stderr);
    assert!(r.stdout.contains("Total Executions: 4"), "{}", r.stdout);
    assert!(r.stdout.contains("Queued: 3"), "{}", r.stdout);
    assert!(r.stdout.contains("Waiting: 1"), "{}", r.stdout);
    let r = sb.run(&["history", "--stats", "-f", "json"]).unwrap();
    assert_eq!(r.code, 0, "{} {}", r.stdout, r.stderr);
    let v = r.json().unwrap();
    assert_eq!(v["total_executions"], 4, "{v}");
    assert_eq!(v["queued_count"], 3, "{v}");
    assert_eq!(v["waiting_count"], 1, "{v}");
    // None queued or waiting: no such lines.
    psql(
        &db.url,
        "UPDATE awf_runs SET status = 'cancelled', queue_state = 'done'",
    );
    let r = sb.run(&["history", "--stats"]).unwrap();
    assert!(!r.stdout.contains("Queued"), "{}", r.stdout);
    assert!(!r.stdout.contains("Waiting"), "{}", r.stdout);
    assert!(r.stdout.contains("Cancelled: 4"), "{}", r.stdout);
}

/// SIGTERM to a worker holding no run: it unregisters and exits at once (no drain grace, no
/// heartbeat wait). Generous bound: the exit takes milliseconds; the drain's grace is 8 s.
#[test]
fn a_sigtermed_worker_holding_no_run_exits_promptly_and_unregisters() {
    let db = TestDb::new();
    let sb = sandbox(&db, &[("long", LONG)]);
    let mut a = worker(&sb, &["--lease", "5s"]);
    wait_long(
        &db,
        "the worker registered",
        Duration::from_secs(30),
        || count(&db, "SELECT count(*) FROM awf_workers") == 1,
    );
    let t0 = Instant::now();
    http_serve::sigterm(&a);
    assert_eq!(http_serve::wait_exit(&mut a), Some(0));
    let took = t0.elapsed();
    assert!(took < Duration::from_secs(3), "exited after {took:?}");
    assert_eq!(count(&db, "SELECT count(*) FROM awf_workers"), 0);
}

/// `--lease` without a shared store is refused (a USER error naming the flag and the
/// missing `--store`), not accepted silently.
#[test]
fn serve_refuses_lease_without_a_shared_store() {
    let db = TestDb::new();
    let sb = sandbox(&db, &[("long", LONG)]);
    let mut child = sb
        .cmd(&[
            "serve",
            "--addr",
            "127.0.0.1:0",
            "--lease",
            "5s",
            "--store",
            "",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if t0.elapsed() > Duration::from_secs(30) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("awf serve --lease 5s without --store was accepted (still serving)");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("USER.INPUT.VALIDATION_FAILED"), "{stderr}");
    assert!(stderr.contains("--lease"), "{stderr}");
    assert!(stderr.contains("--store"), "{stderr}");
}

/// Runs queued by `awf run --submit` or a POST to a worker are queued by their file's path
/// but shown by their workflow's name (as `awf run` records it) while they wait: `awf
/// history`, `awf status`, `GET /api/executions/{id}`, `/api/history`.
#[test]
fn queued_runs_are_shown_by_their_workflows_name_not_their_path() {
    let db = TestDb::new();
    let long = "name: long\nstates:\n  initial: wait\n  wait:\n    type: step\n    command: sleep 120\n    on_success: done\n  done: {type: terminal}\n";
    let slow = "name: slow\nstates:\n  initial: a\n  a:\n    type: step\n    command: echo hi\n    on_success: done\n  done: {type: terminal}\n";
    let home = sandbox(&db, &[("long", long), ("slow", slow)]);
    let a = worker(&home, &["--max-runs", "1", "--lease", "5s"]);
    // A's one slot is taken: what follows stays queued.
    let blocker = http_serve::start_run(&a, "long", "{}");
    started_on(&db, &blocker, &a);
    let posted = http_serve::start_run(&a, "slow", "{}");
    let submitted = submit(&home, "slow", &[]);
    for id in [&posted, &submitted] {
        assert_eq!(
            psql(
                &db.url,
                &format!(
                    "SELECT status || ' ' || workflow_name FROM awf_runs WHERE run_id = '{id}'"
                ),
            ),
            "queued slow"
        );
        // Still queued by its path.
        assert!(
            psql(
                &db.url,
                &format!("SELECT request->>'identifier' FROM awf_runs WHERE run_id = '{id}'"),
            )
            .ends_with(".yaml"),
            "{id}"
        );
        let s = home.run(&["status", id]).unwrap();
        let line = s
            .stdout
            .lines()
            .find(|l| l.starts_with("Workflow:"))
            .unwrap_or_else(|| panic!("{}", s.stdout));
        assert!(
            line.trim_start_matches("Workflow:")
                .trim()
                .starts_with("slow ("),
            "{line}"
        );
        let v = http_serve::execution(&a, id);
        assert_eq!(v["workflow_name"], "slow", "{v}");
    }
    let h = home.run(&["history"]).unwrap();
    assert!(!h.stdout.contains(".yaml"), "{}", h.stdout);
    let h = home.run(&["history", "-f", "json"]).unwrap();
    for row in h.json().unwrap().as_array().unwrap() {
        assert!(
            !row["workflow_name"].as_str().unwrap().contains(".yaml"),
            "{row}"
        );
    }
    let (code, body, _) = http_serve::curl(&[&format!("{}/api/history", a.base)]);
    assert_eq!(code, 200, "{body}");
    assert!(!body.contains("\"workflow_name\":\"/"), "{body}");
}

/// A worker whose heartbeat came late (its lease expired on the database's clock while its
/// run went on, as on a starved machine) does not take its own run over when it next claims:
/// it claimed it again before (a new epoch fenced its running copy, which cancelled itself,
/// and the run's records disagreed). Simulated by expiring the lease by hand, then waking
/// the claim with a second run.
#[test]
fn a_worker_never_takes_over_a_run_it_is_still_executing() {
    let db = TestDb::new();
    let quick = "name: quick\nstates:\n  initial: a\n  a:\n    type: step\n    command: 'true'\n    on_success: done\n  done: {type: terminal}\n";
    let sb = sandbox(&db, &[("long", LONG), ("quick", quick)]);
    let logs = tempfile::tempdir().unwrap();
    let log = logs.path().join("w.log");
    // A 60 s lease: the heartbeat (every 20 s) does not renew it during the test.
    let w = logged_worker(&sb, &["--max-runs", "2", "--lease", "60s"], &log);
    let long = submit(&sb, "long", &[]);
    started_on(&db, &long, &w);
    let epoch = |id: &str| {
        psql(
            &db.url,
            &format!("SELECT epoch FROM awf_runs WHERE run_id = '{id}'"),
        )
    };
    let before = epoch(&long);
    psql(
        &db.url,
        &format!(
            "UPDATE awf_runs SET lease_until = now() - interval '1 second' WHERE run_id = '{long}'"
        ),
    );
    let quick_id = submit(&sb, "quick", &[]);
    wait_long(&db, "the second run done", Duration::from_secs(60), || {
        psql(
            &db.url,
            &format!(
                "SELECT status || '/' || queue_state FROM awf_runs WHERE run_id = '{quick_id}'"
            ),
        ) == "success/done"
    });
    // The long run was not claimed again: same epoch, still claimed by the same worker,
    // still running, and no takeover logged.
    assert_eq!(epoch(&long), before);
    assert_eq!(pid_of(&worker_of(&db, &long)), w.child.id());
    assert_eq!(
        psql(
            &db.url,
            &format!("SELECT queue_state FROM awf_runs WHERE run_id = '{long}'"),
        ),
        "claimed"
    );
    assert!(
        log_lines(&log, &long, "took over").is_empty(),
        "{}",
        read_log(&log)
    );
    let v = http_serve::execution(&w, &long);
    assert_eq!(v["status"], "running", "{v}");
}

/// A step that sleeps, then prints and leaves a mark: a run cancelled in time leaves neither.
fn slowish(dir: &std::path::Path) -> String {
    let mark = dir.join("ran.txt");
    format!(
        "name: slowish\nstates:\n  initial: a\n  a:\n    type: step\n    command: sleep 1 && echo ran-a >> {m} && echo ran-a\n    on_success: b\n  b:\n    type: step\n    command: echo ran-b >> {m} && echo ran-b\n    on_success: done\n  done: {{type: terminal}}\n",
        m = mark.display()
    )
}

#[test]
fn a_cancel_right_after_submit_always_stops_the_run_before_any_step_output() {
    let db = TestDb::new();
    let mut sb = sandbox(&db, &[]);
    let wf = slowish(sb.path());
    http_serve::add_workflows(&mut sb, &[("slowish", &wf)]);
    let _a = worker(&sb, &["--lease", "3s", "--max-runs", "8"]);
    let _b = worker(&sb, &["--lease", "3s", "--max-runs", "8"]);
    let mut ids = Vec::new();
    for _ in 0..25 {
        let id = submit(&sb, "slowish", &[]);
        let r = sb.run(&["cancel", &id, "-f", "json"]).unwrap();
        assert_eq!(r.code, 0, "{} {}", r.stdout, r.stderr);
        let said = r.json().unwrap()["status"].as_str().unwrap().to_owned();
        assert!(
            said == "cancelled" || said == "cancel_requested",
            "{said}: {}",
            r.stdout
        );
        ids.push(id);
    }
    for id in &ids {
        run_done(&db, id);
    }
    for id in &ids {
        assert_eq!(
            psql(
                &db.url,
                &format!("SELECT status FROM awf_runs WHERE run_id = '{id}'"),
            ),
            "cancelled",
            "run {id}"
        );
    }
    let printed = psql(
        &db.url,
        "SELECT root_run_id || ' ' || kind || ' ' || envelope::text FROM awf_events \
         WHERE kind = 'output_chunk' OR (kind = 'step_finished' AND envelope::text LIKE '%ran-%')",
    );
    assert_eq!(printed, "", "a cancelled run printed");
    assert!(
        !sb.path().join("ran.txt").exists(),
        "{:?}",
        std::fs::read_to_string(sb.path().join("ran.txt"))
    );
}

/// A worker holding one long run (so what is submitted next stays queued), and a run
/// submitted then cancelled while queued, `wait` after its submit: (worker, run id).
fn cancelled_while_queued(db: &TestDb, sb: &Sandbox, wait: Duration) -> (Server, String) {
    let a = worker(sb, &["--max-runs", "1", "--lease", "5s"]);
    let blocker = http_serve::start_run(&a, "long", "{}");
    started_on(db, &blocker, &a);
    let queued = submit(sb, "long", &[]);
    std::thread::sleep(wait);
    let r = sb.run(&["cancel", &queued]).unwrap();
    assert_eq!(r.code, 0, "{} {}", r.stdout, r.stderr);
    assert_eq!(r.stdout.trim(), format!("cancelled {queued}"));
    (a, queued)
}

#[test]
fn the_event_stream_of_a_run_cancelled_while_queued_ends_with_run_finished_cancelled() {
    let db = TestDb::new();
    let sb = sandbox(&db, &[("long", LONG)]);
    let (a, queued) = cancelled_while_queued(&db, &sb, Duration::ZERO);
    let frames = http_serve::follow(&a, &queued, &["--max-time", "60"]);
    let (_, last, data) = frames.last().unwrap_or_else(|| panic!("no frame"));
    assert_eq!(last, "run_finished", "{frames:?}");
    assert_eq!(data["event"]["result"]["status"], "cancelled", "{data}");
    assert_eq!(
        data["event"]["result"]["error"]["code"], "EXECUTION.RUN.CANCELLED",
        "{data}"
    );
}

#[test]
fn a_run_cancelled_while_queued_ended_at_its_cancel_on_every_surface() {
    let db = TestDb::new();
    let sb = sandbox(&db, &[("long", LONG)]);
    let (a, queued) = cancelled_while_queued(&db, &sb, Duration::from_millis(1500));
    let read = || {
        let get = http_serve::execution(&a, &queued);
        let st = sb.run(&["status", &queued, "-f", "json"]).unwrap();
        assert_eq!(st.code, 0, "{} {}", st.stdout, st.stderr);
        let st = st.json().unwrap();
        let h = sb.run(&["history", "-f", "json"]).unwrap();
        let h = h
            .json()
            .unwrap()
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["id"] == queued.as_str())
            .cloned()
            .unwrap();
        (get, st, h)
    };
    let (get, st, h) = read();
    let d = get["duration_ms"]
        .as_u64()
        .unwrap_or_else(|| panic!("{get}"));
    assert!(d >= 1400, "the time it waited until cancelled: {get}");
    assert_eq!(st["duration_ms"].as_u64(), Some(d), "{st}");
    assert_eq!(h["duration_ms"].as_u64(), Some(d), "{h}");
    let end = get["completed_at"]
        .as_str()
        .unwrap_or_else(|| panic!("{get}"));
    assert_eq!(st["completed_at"], end, "{st}");
    assert_eq!(h["completed_at"], end, "{h}");
    assert_eq!(get["error"]["code"], "EXECUTION.RUN.CANCELLED", "{get}");
    assert_eq!(st["error"]["code"], "EXECUTION.RUN.CANCELLED", "{st}");
    assert_eq!(get["status"], "cancelled", "{get}");
    // Fixed: later, the same.
    std::thread::sleep(Duration::from_millis(1500));
    let (get2, st2, h2) = read();
    assert_eq!(get2["duration_ms"].as_u64(), Some(d), "{get2}");
    assert_eq!(st2["duration_ms"].as_u64(), Some(d), "{st2}");
    assert_eq!(h2["duration_ms"].as_u64(), Some(d), "{h2}");
    assert_eq!(get2["completed_at"], end, "{get2}");
}

#[test]
fn resume_list_leaves_out_the_runs_a_live_worker_holds() {
    let db = TestDb::new();
    let failing = "name: failing\nstates:\n  initial: a\n  a:\n    type: step\n    command: exit 3\n    on_success: done\n  done: {type: terminal}\n";
    let sb = sandbox(&db, &[("long", LONG), ("failing", failing)]);
    let a = worker(&sb, &["--max-runs", "4", "--lease", "3s"]);
    let failed = submit(&sb, "failing", &[]);
    run_done(&db, &failed);
    let cancelled = http_serve::start_run(&a, "long", "{}");
    started_on(&db, &cancelled, &a);
    let (code, body, _) = http_serve::curl(&[
        "-X",
        "DELETE",
        &format!("{}/api/executions/{cancelled}", a.base),
    ]);
    assert_eq!(code, 204, "{body}");
    run_done(&db, &cancelled);
    let running = http_serve::start_run(&a, "long", "{}");
    started_on(&db, &running, &a);
    // Past a few renewals: still held, lease current.
    std::thread::sleep(Duration::from_secs(2));
    let r = sb.run(&["resume", "--list", "-f", "json"]).unwrap();
    assert_eq!(r.code, 0, "{} {}", r.stdout, r.stderr);
    let ids: BTreeSet<String> = r
        .json()
        .unwrap()
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["run_id"].as_str().unwrap().to_owned())
        .collect();
    assert!(!ids.contains(&running), "a held run is listed: {ids:?}");
    assert!(ids.contains(&failed) && ids.contains(&cancelled), "{ids:?}");
}

#[test]
fn delete_on_a_worker_takes_a_unique_prefix_as_get_does() {
    let db = TestDb::new();
    let sb = sandbox(&db, &[("long", LONG)]);
    let a = worker(&sb, &["--max-runs", "2", "--lease", "5s"]);
    let id = http_serve::start_run(&a, "long", "{}");
    started_on(&db, &id, &a);
    let (code, body, _) = http_serve::curl(&[
        "-X",
        "DELETE",
        &format!("{}/api/executions/{}", a.base, &id[..13]),
    ]);
    assert_eq!(code, 204, "{body}");
    wait_long(&db, "the run cancelled", Duration::from_secs(60), || {
        psql(
            &db.url,
            &format!("SELECT status || '/' || queue_state FROM awf_runs WHERE run_id = '{id}'"),
        ) == "cancelled/done"
    });
    // No run with that prefix: 404; one that two runs share: 422, as GET answers.
    let (code, body, _) = http_serve::curl(&[
        "-X",
        "DELETE",
        &format!("{}/api/executions/ffffffff", a.base),
    ]);
    assert_eq!(code, 404, "{body}");
    // A recorded run whose id shares the first 8 characters with `id`.
    let common = &id[..8];
    psql(
        &db.url,
        &format!(
            "INSERT INTO awf_runs (run_id, root_run_id, workflow_id, workflow_name, status) \
             VALUES ('{common}-other', '{common}-other', 'long', 'long', 'success')"
        ),
    );
    let url = format!("{}/api/executions/{common}", a.base);
    let (get_code, _, _) = http_serve::curl(&[&url]);
    let (code, body, _) = http_serve::curl(&["-X", "DELETE", &url]);
    assert_eq!(get_code, 422);
    assert_eq!(code, 422, "{body}");
}

#[test]
fn a_cancel_between_a_claim_and_its_start_keeps_the_run_from_starting() {
    use awf_domain::run::RunId;
    use awf_postgres::queue;
    let db = TestDb::new();
    let store = awf_postgres::PgStore::connect(&db.url).unwrap();
    let pool = store.pool().clone();
    let outcome = store
        .block_on(async move {
            let req = queue::QueuedRequest {
                identifier: "w".into(),
                ..queue::QueuedRequest::default()
            };
            let id = RunId("r1".into());
            queue::submit(&pool, &id, &req).await.unwrap();
            let got = queue::claim(&pool, "w1", 1, Duration::from_secs(60), &[])
                .await
                .unwrap();
            assert_eq!(got.len(), 1);
            // Claimed, not started yet: the cancel lands in the window.
            let outcome = queue::request_cancel(&pool, &id).await.unwrap();
            // The worker goes on to mark it started: it must find it cancelled.
            let _ = queue::mark_started(&pool, &id, "w1", got[0].epoch).await;
            outcome
        })
        .unwrap();
    assert_eq!(outcome, queue::CancelOutcome::CancelledQueued);
    assert_eq!(
        psql(
            &db.url,
            "SELECT status || '/' || queue_state || '/' || run_started || '/' || \
             (completed_at_ms IS NOT NULL) FROM awf_runs WHERE run_id = 'r1'",
        ),
        "cancelled/done/false/true"
    );
    // Its log ends as a cancelled run's does.
    assert_eq!(
        psql(
            &db.url,
            "SELECT kind || ' ' || (envelope->'event'->'result'->>'status') FROM awf_events \
             WHERE root_run_id = 'r1' ORDER BY position",
        ),
        "run_finished cancelled"
    );
}

/// A workflow whose step succeeds only with the secret input's real value.
const SECRET_WF: &str = "name: sec\ninputs:\n  - name: api_token\n    type: string\n    required: true\nstates:\n  initial: a\n  a:\n    type: step\n    command: \"echo token={{.inputs.api_token}} && test '{{.inputs.api_token}}' = tok-s3cr3t-value\"\n    on_success: done\n  done: {type: terminal}\n";

/// Whether `text` holds the secret of [`SECRET_WF`]'s runs.
fn leaks(text: &str) -> bool {
    text.contains("tok-s3cr3t-value")
}

/// A secret input of a submitted (or POSTed) run: while it is queued only `awf_runs.request`
/// holds its value (the worker needs it; README says so); `awf status`, `awf history`, `GET
/// /api/executions/{id}` and the run's rows (`awf_events`, the snapshot, `awf_audit`) never
/// show it; the worker runs the step with the real value (the step checks it), and once the
/// run has ended the request keeps it masked (`***`). It used to stay in clear in
/// `awf_runs.request` for good, readable by any user with SELECT on the awf_* tables.
#[test]
fn a_secret_input_is_kept_in_clear_only_in_the_queued_request_and_only_until_the_run_ends() {
    let db = TestDb::new();
    let sb = sandbox(&db, &[("sec", SECRET_WF)]);
    let submitted = submit(&sb, "sec", &["api_token=tok-s3cr3t-value"]);
    let request = |id: &str| {
        psql(
            &db.url,
            &format!("SELECT request::text FROM awf_runs WHERE run_id = '{id}'"),
        )
    };
    // Queued: the worker-to-be needs the value, and only the request holds it.
    assert!(leaks(&request(&submitted)), "{}", request(&submitted));
    for args in [
        vec!["status", submitted.as_str()],
        vec!["status", submitted.as_str(), "-f", "json"],
        vec!["history", "-f", "json"],
    ] {
        let r = sb.run(&args).unwrap();
        assert_eq!(r.code, 0, "{args:?}: {}", r.stderr);
        assert!(
            !leaks(&r.stdout) && !leaks(&r.stderr),
            "{args:?}: {}",
            r.stdout
        );
    }
    // A queued run cancelled before any worker took it needs the value no more.
    let cancelled = submit(&sb, "sec", &["api_token=tok-s3cr3t-value"]);
    let r = sb.run(&["cancel", &cancelled]).unwrap();
    assert_eq!(r.code, 0, "{} {}", r.stdout, r.stderr);
    let req = request(&cancelled);
    assert!(
        !leaks(&req) && req.contains(r#"["api_token", "***"]"#),
        "{req}"
    );
    let w = worker(&sb, &["--lease", "5s"]);
    let posted = http_serve::start_run(&w, "sec", r#"{"inputs":{"api_token":"tok-s3cr3t-value"}}"#);
    for id in [&submitted, &posted] {
        run_done(&db, id);
        let v = http_serve::execution(&w, id);
        // `success` proves the step had the real value.
        assert_eq!(v["status"], "completed", "{v}");
        assert!(!leaks(&v.to_string()), "{v}");
        assert_eq!(v["states"]["a"]["output"], "token=***\n", "{v}");
        for args in [
            vec!["status", id.as_str()],
            vec!["status", id.as_str(), "-f", "json"],
            vec!["history"],
            vec!["history", "-f", "json"],
        ] {
            let r = sb.run(&args).unwrap();
            assert_eq!(r.code, 0, "{args:?}: {}", r.stderr);
            assert!(
                !leaks(&r.stdout) && !leaks(&r.stderr),
                "{args:?}: {}",
                r.stdout
            );
        }
        // Ended: the request keeps the input, masked.
        let req = request(id);
        assert!(
            !leaks(&req) && req.contains(r#"["api_token", "***"]"#),
            "{req}"
        );
    }
    for sql in [
        "SELECT count(*) FROM awf_events WHERE envelope::text LIKE '%tok-s3cr3t-value%'",
        "SELECT count(*) FROM awf_runs WHERE snapshot::text LIKE '%tok-s3cr3t-value%'",
        "SELECT count(*) FROM awf_runs WHERE request::text LIKE '%tok-s3cr3t-value%'",
        "SELECT count(*) FROM awf_audit WHERE line::text LIKE '%tok-s3cr3t-value%'",
    ] {
        assert_eq!(count(&db, sql), 0, "{sql}");
    }
    assert!(count(&db, "SELECT count(*) FROM awf_events") > 0);
    // README's advice: a reader granted every column of awf_runs but `request` still runs
    // `awf status` and `awf history`.
    let role = format!("{}_cols", db.name);
    let server = awf_tests::pg::server_url();
    psql(&server, &format!("CREATE ROLE {role} LOGIN"));
    let columns = psql(
        &db.url,
        "SELECT string_agg(column_name, ', ') FROM information_schema.columns \
         WHERE table_name = 'awf_runs' AND column_name <> 'request'",
    );
    psql(
        &db.url,
        &format!(
            "GRANT SELECT ON awf_schema, awf_events, awf_audit, awf_answers, awf_workers \
             TO {role}; GRANT SELECT ({columns}) ON awf_runs TO {role}"
        ),
    );
    let (scheme, rest) = db.url.split_once("://").unwrap();
    let host = rest.rsplit_once('@').map_or(rest, |(_, h)| h);
    let reader = format!("{scheme}://{role}@{host}");
    for args in [
        vec!["--store", &reader, "status", &submitted],
        vec!["--store", &reader, "history", "-f", "json"],
    ] {
        let r = sb.run(&args).unwrap();
        assert_eq!(r.code, 0, "{args:?}: {} {}", r.stdout, r.stderr);
        assert!(r.stdout.contains(&submitted) || r.stdout.contains("sec"));
    }
    drop((w, db));
    psql(&server, &format!("DROP ROLE {role}"));
}

/// `awf run --submit` with an input the workflow does not declare says what `awf run` says
/// (the same `WARN` line on stderr), queues the run, and the worker runs it (the input
/// reaches no step's environment, as with `awf run`). It used to queue silently, and the
/// worker then failed the run (USER.INPUT.VALIDATION_FAILED).
#[test]
fn submit_warns_about_an_undeclared_input_as_awf_run_does_and_the_worker_runs_it() {
    let db = TestDb::new();
    let sb = sandbox(&db, &[("sec", SECRET_WF)]);
    let args = |submit: bool| {
        let mut a = vec!["run"];
        if submit {
            a.push("--submit");
        }
        a.extend([
            "sec",
            "-i",
            "api_token=tok-s3cr3t-value",
            "-i",
            "undeclared=x",
        ]);
        a
    };
    let warning = "WARN input 'undeclared' is not declared by workflow 'sec'; nothing uses it: \
                   templates may read only declared inputs and commands get only those as \
                   environment variables";
    let direct = sb.run(&args(false)).unwrap();
    assert_eq!(direct.code, 0, "{}", direct.stderr);
    assert!(
        direct.stderr.lines().any(|l| l.trim() == warning),
        "{}",
        direct.stderr
    );
    let r = sb.run(&args(true)).unwrap();
    assert_eq!(r.code, 0, "{} {}", r.stdout, r.stderr);
    assert!(
        r.stderr.lines().any(|l| l.trim() == warning),
        "{}",
        r.stderr
    );
    let id = r.stdout.trim().to_owned();
    // `--log-level error` hides it, as it hides `awf run`'s.
    let quiet = sb
        .run(&[&["--log-level", "error"][..], &args(true)[..]].concat())
        .unwrap();
    assert_eq!(quiet.code, 0, "{}", quiet.stderr);
    assert!(!quiet.stderr.contains("WARN"), "{}", quiet.stderr);
    let _w = worker(&sb, &["--lease", "5s"]);
    run_done(&db, &id);
    assert_eq!(
        psql(
            &db.url,
            &format!(
                "SELECT status || ' ' || coalesce(error_message, '-') FROM awf_runs WHERE run_id = '{id}'"
            ),
        ),
        "success -"
    );
}

/// A run with a secret input taken over from a SIGKILLed worker is resumed with the secret's
/// real value (from the queued request: the run's snapshot keeps it masked), so its next
/// step still gets it.
#[test]
fn a_taken_over_run_still_has_its_secret_input() {
    let db = TestDb::new();
    let out = tempfile::tempdir().unwrap();
    let mark = out.path().join("started");
    let wf = format!(
        "name: sectk\ninputs:\n  - name: api_token\n    type: string\n    required: true\nstates:\n  initial: a\n  a:\n    type: step\n    command: \"test -f {m} || {{ touch {m}; sleep 60; }}\"\n    on_success: b\n  b:\n    type: step\n    command: \"test '{{{{.inputs.api_token}}}}' = tok-s3cr3t-value\"\n    on_success: done\n  done: {{type: terminal}}\n",
        m = mark.display()
    );
    let sb = sandbox(&db, &[("sectk", &wf)]);
    let mut a = worker(&sb, &["--lease", "2s"]);
    let id = submit(&sb, "sectk", &["api_token=tok-s3cr3t-value"]);
    wait_long(
        &db,
        "worker A to start step a",
        Duration::from_secs(60),
        || mark.exists(),
    );
    assert_eq!(pid_of(&worker_of(&db, &id)), a.child.id());
    a.child.kill().unwrap();
    a.child.wait().unwrap();
    let _b = worker(&sb, &["--lease", "2s"]);
    run_done(&db, &id);
    assert_eq!(
        psql(
            &db.url,
            &format!(
                "SELECT status || ' ' || coalesce(error_message, '-') || ' ' || epoch \
                 FROM awf_runs WHERE run_id = '{id}'"
            ),
        ),
        "success - 2"
    );
}

/// A run a worker parked on a usage limit (status `waiting`, `waiting_until` a few seconds
/// ahead) is resumed by a worker once its reset time has come, exactly once (one more claim,
/// one more attempt), at the step it stopped in: the step before it does not run again, and
/// the agent is asked again only after the reset. Workers used to leave it `waiting` for good.
#[test]
fn a_run_parked_on_a_worker_is_resumed_by_a_worker_once_its_reset_comes() {
    let db = TestDb::new();
    let out = tempfile::tempdir().unwrap();
    let marks = out.path().join("marks");
    let mock = awf_mock_llm::MockLlm::start(serde_json::json!({"rules": [
        {"times": 1, "reply": {"status": 429, "retry_after": 4, "error_message": "come back in 4 s"}}
    ], "default": {"text": "answered after the reset"}}));
    let wf = format!(
        "name: park\nstates:\n  initial: s1\n  s1:\n    type: step\n    command: echo s1 >> {m}\n    on_success: ask\n  ask: {{type: agent, provider: openai_compatible, prompt: hi, usage_limit: {{wait: 1s, max_wait: 1h}}, on_success: s3}}\n  s3:\n    type: step\n    command: echo s3 >> {m}\n    on_success: done\n  done: {{type: terminal}}\n",
        m = marks.display()
    );
    let mut sb = sandbox(&db, &[("park", &wf)]);
    sb.set_env("OPENAI_BASE_URL", &format!("{}/v1", mock.url()));
    sb.set_env("OPENAI_MODEL", "mock-model");
    sb.set_env("OPENAI_API_KEY", "sk-mock-key-123");
    let a = worker(&sb, &["--lease", "3s"]);
    let b = worker(&sb, &["--lease", "3s"]);
    let id = submit(&sb, "park", &[]);
    let parked_sql = format!(
        "SELECT (extract(epoch from waiting_until) * 1000)::bigint FROM awf_runs \
         WHERE run_id = '{id}' AND status = 'waiting' AND queue_state = 'done'"
    );
    let mut until_ms = String::new();
    wait_long(&db, "the run parked", Duration::from_secs(60), || {
        until_ms = psql(&db.url, &parked_sql);
        !until_ms.is_empty()
    });
    let until_ms: i64 = until_ms.parse().unwrap();
    let state = || {
        psql(
            &db.url,
            &format!(
                "SELECT status || '/' || queue_state || '/' || epoch FROM awf_runs \
                 WHERE run_id = '{id}'"
            ),
        )
    };
    wait_long(
        &db,
        "the parked run resumed and finished",
        Duration::from_secs(60),
        || state().starts_with("success/done"),
    );
    // One claim to start it, one to resume it: resumed once.
    assert_eq!(state(), "success/done/2");
    assert_eq!(
        count(
            &db,
            &format!(
                "SELECT count(*) FROM awf_events WHERE root_run_id = '{id}' \
                 AND run_id = '{id}' AND kind = 'run_started'"
            )
        ),
        2
    );
    // At the step it stopped in: s1 ran once, the agent was asked twice, the second time
    // once the reset had come (and soon after it).
    assert_eq!(std::fs::read_to_string(&marks).unwrap(), "s1\ns3\n");
    let asked = mock.model_requests();
    assert_eq!(asked.len(), 2, "{asked:?}");
    let again = asked[1]["ts_ms"].as_i64().unwrap();
    assert!(
        again >= until_ms && again - until_ms < 15_000,
        "asked again at {again}, reset at {until_ms}"
    );
    // Nothing more happens to it.
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(state(), "success/done/2");
    assert_eq!(mock.model_requests().len(), 2);
    drop((a, b));
}

/// A run taken over by another worker asks again under a new request id: the dead attempt's
/// id is not the live one's, and an answer to the old id is refused at once (409) instead of
/// answering the new attempt's request. Ids used to be `<run id>:<n>` counted per attempt,
/// so both attempts asked under `<run id>:1`.
#[test]
fn a_taken_over_run_asks_under_a_new_request_id_and_the_old_one_is_refused() {
    let db = TestDb::new();
    let out = tempfile::tempdir().unwrap();
    let sb = sandbox(&db, &[("gated", &gated_workflow(out.path()))]);
    let mut a = worker(&sb, &["--lease", "2s"]);
    let id = submit(&sb, "gated", &[]);
    started_on(&db, &id, &a);
    wait_long(&db, "A's approval request", Duration::from_secs(60), || {
        asked_ids(&db, &id).len() == 1
    });
    let b = worker(&sb, &["--lease", "2s"]);
    a.child.kill().unwrap();
    a.child.wait().unwrap();
    wait_long(
        &db,
        "B's approval request",
        Duration::from_secs(120),
        || asked_ids(&db, &id).len() == 2,
    );
    let asked = asked_ids(&db, &id);
    assert_ne!(asked[0], asked[1], "both attempts asked under one id");
    for rid in &asked {
        assert!(rid.starts_with(&format!("{id}:")), "{rid}");
    }
    let view = http_serve::execution(&b, &id);
    let pending = view["pending"].as_array().unwrap();
    assert_eq!(pending.len(), 1, "{view}");
    assert_eq!(pending[0]["request_id"], asked[1].as_str(), "{view}");
    // The dead attempt's request: 409 at once, and the live one stays pending.
    let url = format!("{}/api/executions/{id}/respond", b.base);
    let t0 = Instant::now();
    let (code, body, _) = http_serve::post(
        &url,
        &format!(r#"{{"request_id": "{}", "approved": false}}"#, asked[0]),
    );
    assert_eq!(code, 409, "{body}");
    assert!(t0.elapsed() < Duration::from_secs(3), "{:?}", t0.elapsed());
    let view = http_serve::execution(&b, &id);
    assert_eq!(
        view["pending"][0]["request_id"],
        asked[1].as_str(),
        "{view}"
    );
    let (code, body, _) = http_serve::post(
        &url,
        &format!(r#"{{"request_id": "{}", "approved": true}}"#, asked[1]),
    );
    assert_eq!(code, 204, "{body}");
    wait_long(&db, "the run done", Duration::from_secs(60), || {
        psql(
            &db.url,
            &format!("SELECT status || '/' || queue_state FROM awf_runs WHERE run_id = '{id}'"),
        ) == "success/done"
    });
    assert_eq!(
        std::fs::read_to_string(out.path().join("log")).unwrap(),
        "deployed\n"
    );
}

/// An answer to the pending request of a run whose worker was SIGKILLed (its lease not yet
/// expired) is refused at once, 409, saying the worker is gone and that another worker
/// resumes the run and asks again; nothing is left for that worker to take. It used to wait
/// 10 s for the dead worker, then answer 409. The run is then taken over, asks again, and
/// that request is answered.
#[test]
fn an_answer_to_a_run_whose_worker_died_is_refused_at_once_saying_so() {
    let db = TestDb::new();
    let out = tempfile::tempdir().unwrap();
    let sb = sandbox(&db, &[("gated", &gated_workflow(out.path()))]);
    let mut a = worker(&sb, &["--lease", "20s"]);
    let id = submit(&sb, "gated", &[]);
    started_on(&db, &id, &a);
    wait_long(&db, "A's approval request", Duration::from_secs(60), || {
        asked_ids(&db, &id).len() == 1
    });
    let rid = asked_ids(&db, &id).remove(0);
    let b = worker(&sb, &["--lease", "20s"]);
    // SIGKILL A, the process this test spawned (its own child handle).
    a.child.kill().unwrap();
    a.child.wait().unwrap();
    let url = format!("{}/api/executions/{id}/respond", b.base);
    let t0 = Instant::now();
    let (code, body, _) = http_serve::post(
        &url,
        &format!(r#"{{"request_id": "{rid}", "approved": true}}"#),
    );
    let took = t0.elapsed();
    assert_eq!(code, 409, "{body}");
    // At once (tens of milliseconds; generous for a loaded machine), not after 10 s.
    assert!(
        took < Duration::from_secs(2),
        "answered after {took:?}: {body}"
    );
    let problem = http_serve::json_of(&body);
    let text = problem.to_string();
    assert!(
        text.contains("worker") && text.contains("gone") && text.contains("asks again"),
        "{problem}"
    );
    // The lease is still A's: the run has not been taken over yet, and no answer is left
    // for whoever takes it.
    assert_eq!(
        count(
            &db,
            &format!("SELECT count(*) FROM awf_answers WHERE request_id = '{rid}'")
        ),
        0
    );
    // Once the lease expires, B resumes the run and asks again; that request is answered.
    wait_long(
        &db,
        "B's approval request",
        Duration::from_secs(120),
        || asked_ids(&db, &id).len() == 2,
    );
    let (code, body, _) = http_serve::post(&url, r#"{"approved": true}"#);
    assert_eq!(code, 204, "{body}");
    wait_long(&db, "the run done", Duration::from_secs(60), || {
        psql(
            &db.url,
            &format!("SELECT status || '/' || queue_state FROM awf_runs WHERE run_id = '{id}'"),
        ) == "success/done"
    });
    assert_eq!(
        std::fs::read_to_string(out.path().join("log")).unwrap(),
        "deployed\n"
    );
}

/// A parked run with a secret input (masked in its record) is resumed by a worker with its
/// real value: the queued request keeps it while the run is parked (it is masked there once
/// the run has ended), where `awf serve`'s resumer, reading only the record, cannot resume
/// it. The request used to be masked when the run parked, and the resumed run went on with
/// `***` as the value.
#[test]
fn a_parked_run_with_a_secret_input_is_resumed_with_it() {
    let db = TestDb::new();
    let out = tempfile::tempdir().unwrap();
    let marks = out.path().join("marks");
    let mock = awf_mock_llm::MockLlm::start(serde_json::json!({"rules": [
        {"times": 1, "reply": {"status": 429, "retry_after": 3, "error_message": "come back in 3 s"}}
    ], "default": {"text": "answered after the reset"}}));
    let wf = format!(
        "name: park\ninputs:\n  - name: api_token\n    type: string\n    required: true\nstates:\n  initial: ask\n  ask: {{type: agent, provider: openai_compatible, prompt: hi, usage_limit: {{wait: 1s, max_wait: 1h}}, on_success: s2}}\n  s2:\n    type: step\n    command: test {{{{.inputs.api_token}}}} = tok-s3cr3t-42 && echo s2 >> {m}\n    on_success: done\n  done: {{type: terminal}}\n",
        m = marks.display()
    );
    let mut sb = sandbox(&db, &[("park", &wf)]);
    sb.set_env("OPENAI_BASE_URL", &format!("{}/v1", mock.url()));
    sb.set_env("OPENAI_MODEL", "mock-model");
    sb.set_env("OPENAI_API_KEY", "sk-mock-key-123");
    let w = worker(&sb, &["--lease", "3s"]);
    let id = submit(&sb, "park", &["api_token=tok-s3cr3t-42"]);
    let state = || {
        psql(
            &db.url,
            &format!(
                "SELECT status || '/' || queue_state || '/' || epoch FROM awf_runs \
                 WHERE run_id = '{id}'"
            ),
        )
    };
    wait_long(&db, "the run parked", Duration::from_secs(60), || {
        state().starts_with("waiting/done")
    });
    // Masked in its record.
    let recorded = psql(
        &db.url,
        &format!("SELECT snapshot->'inputs'->>'api_token' FROM awf_runs WHERE run_id = '{id}'"),
    );
    assert_ne!(recorded, "tok-s3cr3t-42");
    wait_long(
        &db,
        "the parked run resumed and finished",
        Duration::from_secs(60),
        || !state().starts_with("waiting/done") && state().ends_with("done/2"),
    );
    assert_eq!(state(), "success/done/2");
    assert_eq!(std::fs::read_to_string(&marks).unwrap(), "s2\n");
    // Ended: now the queued request masks it too.
    let request = psql(
        &db.url,
        &format!("SELECT request::text FROM awf_runs WHERE run_id = '{id}'"),
    );
    assert!(!request.contains("tok-s3cr3t-42"), "{request}");
    drop(w);
}

/// Waits (60 s at most) for `child`, an awf process of this test, to exit; its exit code and
/// stderr.
fn exit_of(child: &mut std::process::Child) -> (Option<i32>, String) {
    let t0 = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let mut err = String::new();
            if let Some(mut e) = child.stderr.take() {
                std::io::Read::read_to_string(&mut e, &mut err).unwrap();
            }
            return (status.code(), err);
        }
        if t0.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the awf process did not stop within 60 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `db.url` with a password (the test server trusts loopback: it is not checked).
fn with_password(db: &TestDb) -> String {
    db.url.replacen("://postgres@", "://postgres:pw-s3cr3t@", 1)
}

/// Waits until the run `id` (or, `id` empty, the only run) is `running` and in its step
/// `wait`; its id.
fn in_step(db: &TestDb, id: &str) -> String {
    let mut found = String::new();
    wait_long(
        db,
        "the run's step to start",
        Duration::from_secs(60),
        || {
            if psql(
                &db.url,
                "SELECT coalesce(to_regclass('awf_runs')::text, '')",
            )
            .is_empty()
            {
                return false;
            }
            found = psql(
                &db.url,
                &format!(
                    "SELECT coalesce(max(run_id), '') FROM awf_runs WHERE status = 'running' \
                 AND snapshot->>'current_state' = 'wait' AND ('{id}' = '' OR run_id = '{id}')"
                ),
            );
            !found.is_empty()
        },
    );
    found
}

#[test]
fn awf_cancel_and_delete_stop_a_run_of_a_terminal_awf_run_and_hints_keep_the_store_flag() {
    let db = TestDb::new();
    // No AWF_STORE: the store comes from the flag, with a password.
    let sb = http_serve::sandbox_with(&[("long", LONG)]);
    let url = with_password(&db);
    let mut child = sb
        .cmd(&["run", "long", "--store", &url])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let id = in_step(&db, "");
    assert_eq!(
        psql(
            &db.url,
            &format!("SELECT queue_state FROM awf_runs WHERE run_id = '{id}'")
        ),
        "none"
    );
    let r = sb.run(&["cancel", &id, "--store", &url]).unwrap();
    assert_eq!(r.code, 0, "{} {}", r.stdout, r.stderr);
    assert_eq!(
        r.stdout.trim(),
        format!("cancel requested for {id} (the awf process running it stops it)")
    );
    // The terminal process cancels its run as Ctrl-C would, and records it so.
    let (code, stderr) = exit_of(&mut child);
    assert_eq!(code, Some(130), "{stderr}");
    assert!(
        stderr.contains("cancel requested through the store"),
        "{stderr}"
    );
    assert!(stderr.contains("Workflow cancelled."), "{stderr}");
    assert_eq!(
        psql(
            &db.url,
            &format!("SELECT status || '/' || exit_code FROM awf_runs WHERE run_id = '{id}'")
        ),
        "cancelled/130"
    );
    // The resume hint names the store of the flag, its password masked (and quoted: a
    // URL's `*`, `&` or `;` is the shell's).
    let shown = db.url.replacen("://postgres@", "://postgres:***@", 1);
    assert!(
        stderr.contains(&format!(
            "continue it with `awf resume --store '{shown}' {id}`"
        )),
        "{stderr}"
    );
    assert!(!stderr.contains("pw-s3cr3t"), "{stderr}");
    // Following the hint resumes it (the old cancel request does not stop the new attempt),
    // and DELETE through a worker stops the terminal `awf resume` the same way.
    let w = worker(&sb, &["--store", &db.url, "--max-runs", "1"]);
    let mut resumed = sb
        .cmd(&["resume", "--store", &url, &id])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    in_step(&db, &id);
    std::thread::sleep(Duration::from_millis(1500));
    assert!(
        resumed.try_wait().unwrap().is_none(),
        "the resume stopped at once"
    );
    let (status, body, _) =
        http_serve::curl(&["-X", "DELETE", &format!("{}/api/executions/{id}", w.base)]);
    assert!((200..300).contains(&status), "{status} {body}");
    let (code, stderr) = exit_of(&mut resumed);
    assert_eq!(code, Some(130), "{stderr}");
    http_serve::wait_status(&w, &id, "cancelled");
}

#[test]
fn a_run_cancelled_while_queued_is_listed_and_resumed_from_its_start_with_its_inputs() {
    let db = TestDb::new();
    let wf = "name: greet\ninputs:\n  - name: who\n    type: string\n    required: true\nstates:\n  initial: a\n  a: {type: step, command: 'echo hi {{.inputs.who}}', on_success: done}\n  done: {type: terminal}\n";
    let sb = sandbox(&db, &[("greet", wf)]);
    // No worker: it stays queued until cancelled.
    let id = submit(&sb, "greet", &["who=QQ"]);
    let r = sb.run(&["cancel", &id]).unwrap();
    assert_eq!(r.stdout.trim(), format!("cancelled {id}"), "{}", r.stderr);
    // Resumable, so listed.
    let r = sb.run(&["resume", "--list", "-f", "json"]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    let rows = r.json().unwrap();
    let row = rows
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["run_id"] == id.as_str())
        .unwrap_or_else(|| panic!("{id} not listed: {}", r.stdout))
        .clone();
    assert_eq!(row["status"], "cancelled", "{row}");
    // Resumed: it starts from its initial state with its recorded inputs.
    let r = sb.run(&["resume", &id, "-f", "json"]).unwrap();
    assert_eq!(r.code, 0, "{} {}", r.stdout, r.stderr);
    let result = r.json().unwrap();
    assert_eq!(result["status"], "success", "{result}");
    assert_eq!(result["run_id"], id.as_str(), "{result}");
    assert_eq!(
        psql(
            &db.url,
            &format!(
                "SELECT status || '/' || queue_state || '/' || (snapshot->'states'->'a'->>'output') \
                 FROM awf_runs WHERE run_id = '{id}'"
            )
        ),
        "success/none/hi QQ"
    );
    // Done: nothing to resume any more, and no longer listed.
    let r = sb.run(&["resume", "--list", "-f", "quiet"]).unwrap();
    assert!(!r.stdout.contains(&id), "{}", r.stdout);
    // With the store from AWF_STORE (not a flag), hints name no --store.
    let r = sb.run(&["status", "ffffffff"]).unwrap();
    assert!(!r.stderr.contains("--store"), "{}", r.stderr);
}

#[test]
fn ctrl_c_of_a_run_stored_by_the_flag_hints_a_resume_with_the_flag_that_works() {
    let db = TestDb::new();
    let sb = http_serve::sandbox_with(&[("long", LONG)]);
    let url = with_password(&db);
    let mut child = sb
        .cmd(&["run", "long", "--store", &url])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let id = in_step(&db, "");
    // Ctrl-C: SIGINT to this test's own child.
    let sent = std::process::Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
    let (code, stderr) = exit_of(&mut child);
    assert_eq!(code, Some(130), "{stderr}");
    let shown = db.url.replacen("://postgres@", "://postgres:***@", 1);
    let want = format!("continue it with `awf resume --store '{shown}' {id}`");
    assert!(stderr.contains(&want), "{stderr}");
    assert!(!stderr.contains("pw-s3cr3t"), "{stderr}");
    // The hinted command (with the real URL) finds the run: it is running again.
    let mut resumed = sb
        .cmd(&["resume", "--store", &url, &id])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    in_step(&db, &id);
    let _ = resumed.kill();
    let _ = resumed.wait();
}

/// A queued run has not run: `awf status` shows no duration (`-`, as `awf history`), no
/// empty `State:` line, and no exit code in JSON (null, as GET /api/executions/{id} gives).
/// It showed `Duration: 1.398s` (counting), `State:` empty and `"exit_code": 0`.
#[test]
fn a_queued_run_shows_no_duration_no_state_line_and_no_exit_code_everywhere() {
    let db = TestDb::new();
    let sb = sandbox(&db, &[("long", LONG)]);
    let a = worker(&sb, &["--max-runs", "1", "--lease", "5s"]);
    let blocker = http_serve::start_run(&a, "long", "{}");
    started_on(&db, &blocker, &a);
    // A is full: this one stays queued.
    let queued = submit(&sb, "long", &[]);
    std::thread::sleep(Duration::from_millis(1100));

    let r = sb.run(&["status", &queued]).unwrap();
    assert_eq!(r.code, 0, "{} {}", r.stdout, r.stderr);
    let lines: Vec<&str> = r.stdout.lines().collect();
    let duration: Vec<&str> = lines
        .iter()
        .filter(|l| l.starts_with("Duration:"))
        .copied()
        .collect();
    assert_eq!(duration, vec!["Duration:  -"], "{}", r.stdout);
    assert!(
        !lines.iter().any(|l| l.starts_with("State:")),
        "no State line for a run with no state: {}",
        r.stdout
    );

    let r = sb.run(&["status", &queued, "-f", "json"]).unwrap();
    let v = r.json().unwrap();
    assert_eq!(v["status"], "queued", "{v}");
    assert_eq!(v["exit_code"], serde_json::Value::Null, "{v}");
    assert_eq!(v["duration_ms"], serde_json::Value::Null, "{v}");

    let r = sb.run(&["history", "-s", "queued", "-f", "json"]).unwrap();
    let h = r.json().unwrap();
    let row = h
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["id"] == queued.as_str() || e["run_id"] == queued.as_str())
        .cloned()
        .unwrap_or_else(|| panic!("{queued} in {h}"));
    assert_eq!(row["duration_ms"], serde_json::Value::Null, "{row}");

    let g = http_serve::execution(&a, &queued);
    assert_eq!(g["status"], "queued", "{g}");
    assert_eq!(g["exit_code"], serde_json::Value::Null, "{g}");
    assert_eq!(g["duration_ms"], serde_json::Value::Null, "{g}");
    assert_eq!(g["current_step"], "", "{g}");
}

/// The `workflow_name` of `GET /api/executions`(`/{id}`) of a submitted run, by the worker
/// that runs it and by another.
fn names_of(w: &Server, id: &str) -> (String, String) {
    let one = http_serve::execution(w, id)["workflow_name"]
        .as_str()
        .unwrap()
        .to_owned();
    let (code, body, _) = http_serve::curl(&[&format!("{}/api/executions", w.base)]);
    assert_eq!(code, 200, "{body}");
    let listed = http_serve::json_of(&body)["body"]["executions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["execution_id"] == id)
        .unwrap_or_else(|| panic!("{id} listed: {body}"))["workflow_name"]
        .as_str()
        .unwrap()
        .to_owned();
    (one, listed)
}

/// A run submitted by name and queued by its file's absolute path is shown by its
/// workflow's name by every worker: the one that runs it showed the path (GET, the list,
/// its `run_finished` result, its log lines) where another showed the name. `awf status`
/// keeps the path beside the name.
#[test]
fn the_worker_running_a_submitted_run_shows_its_workflows_name_as_every_worker_does() {
    let db = TestDb::new();
    let wf = "name: release\nstates:\n  initial: wait\n  wait:\n    type: step\n    command: sleep 3\n    on_success: done\n  done: {type: terminal}\n";
    let sb = sandbox(&db, &[("release", wf)]);
    let logs = tempfile::tempdir().unwrap();
    let log_a = logs.path().join("a.log");
    let a = logged_worker(&sb, &["--lease", "5s"], &log_a);
    let id = submit(&sb, "release", &[]);
    started_on(&db, &id, &a);
    let b = worker(&sb, &["--lease", "5s"]);
    let running = ("release".to_owned(), "release".to_owned());
    assert_eq!(names_of(&a, &id), running, "the running worker");
    assert_eq!(names_of(&b, &id), running, "another worker");
    run_done(&db, &id);
    http_serve::wait_status(&a, &id, "completed");
    assert_eq!(
        names_of(&a, &id),
        running,
        "the worker that ran it, once ended"
    );
    assert_eq!(names_of(&b, &id), running, "another worker, once ended");

    // The event stream's result names the workflow as `awf run -f json` does.
    let result_workflow = psql(
        &db.url,
        &format!(
            "SELECT envelope->'event'->'result'->>'workflow' FROM awf_events \
             WHERE run_id = '{id}' AND kind = 'run_finished' ORDER BY position DESC LIMIT 1"
        ),
    );
    assert_eq!(result_workflow, "release");

    // The worker's log lines name it too.
    wait_long(&db, "A's end line", Duration::from_secs(30), || {
        !log_lines(&log_a, &id, "finished: success").is_empty()
    });
    for what in ["claimed run", "finished: success"] {
        let line = log_lines(&log_a, &id, what).remove(0);
        assert!(
            line.contains("release") && !line.contains(".yaml"),
            "{what}: {line}"
        );
    }

    // `awf status` shows the name and, beside it, the path.
    let r = sb.run(&["status", &id]).unwrap();
    assert_eq!(r.code, 0, "{} {}", r.stdout, r.stderr);
    let line = r
        .stdout
        .lines()
        .find(|l| l.starts_with("Workflow:"))
        .unwrap_or_default()
        .to_owned();
    assert!(
        line.starts_with("Workflow:  release (/") && line.ends_with("release.yaml)"),
        "{}",
        r.stdout
    );
}

/// The kinds of a run's recorded events, in order.
fn event_kinds(db: &TestDb, id: &str) -> Vec<String> {
    psql(
        &db.url,
        &format!(
            "SELECT kind FROM awf_events WHERE root_run_id = '{id}' AND run_id = '{id}' \
             ORDER BY position"
        ),
    )
    .lines()
    .map(str::to_owned)
    .collect()
}

/// A run whose worker was SIGKILLed mid-step and that was then cancelled (`awf cancel`:
/// `cancel requested`) is ended cancelled by the worker that takes it over, through its
/// engine's cancel path: the same on every surface (row, snapshot, GET, `awf status`,
/// `awf resume --list`) and its log ends with `run_finished`. It used to be marked
/// `cancelled` in its row only: its snapshot said running, with no end time, duration or
/// error, and its log had no `run_finished`.
#[test]
fn a_run_cancelled_after_its_worker_died_is_ended_cancelled_by_the_worker_taking_it_over() {
    let db = TestDb::new();
    let sb = sandbox(&db, &[("long", LONG)]);
    let mut a = worker(&sb, &["--lease", "3s"]);
    let id = submit(&sb, "long", &[]);
    started_on(&db, &id, &a);
    wait_long(&db, "the step started", Duration::from_secs(60), || {
        event_kinds(&db, &id).iter().any(|k| k == "step_started")
    });
    // SIGKILL A, the process this test spawned (its own child handle).
    a.child.kill().unwrap();
    a.child.wait().unwrap();
    let r = sb.run(&["cancel", &id]).unwrap();
    assert_eq!(r.code, 0, "{} {}", r.stdout, r.stderr);
    assert_eq!(
        r.stdout.trim(),
        format!("cancel requested for {id} (its worker stops it)")
    );
    let b = worker(&sb, &["--lease", "3s"]);
    run_done(&db, &id);
    let row = psql(
        &db.url,
        &format!(
            "SELECT status, exit_code, completed_at_ms IS NOT NULL, duration_ms IS NOT NULL, \
               coalesce(error_message, ''), snapshot->>'status' \
             FROM awf_runs WHERE run_id = '{id}'"
        ),
    );
    assert_eq!(
        row, "cancelled|130|t|t|workflow cancelled|cancelled",
        "{row}"
    );
    let kinds = event_kinds(&db, &id);
    assert_eq!(
        kinds.last().map(String::as_str),
        Some("run_finished"),
        "{kinds:?}"
    );
    let result = psql(
        &db.url,
        &format!(
            "SELECT envelope->'event'->'result'->>'status' FROM awf_events \
             WHERE run_id = '{id}' AND kind = 'run_finished' ORDER BY position DESC LIMIT 1"
        ),
    );
    assert_eq!(result, "cancelled");
    let get = http_serve::execution(&b, &id);
    assert_eq!(get["status"], "cancelled", "{get}");
    assert!(get["completed_at"].is_string(), "{get}");
    assert!(get["duration_ms"].is_u64(), "{get}");
    assert_eq!(get["error"]["code"], "EXECUTION.RUN.CANCELLED", "{get}");
    let st = sb.run(&["status", &id, "-f", "json"]).unwrap();
    assert_eq!(st.code, 0, "{} {}", st.stdout, st.stderr);
    let st = st.json().unwrap();
    assert_eq!(st["status"], "cancelled", "{st}");
    assert_eq!(st["completed_at"], get["completed_at"], "{st}");
    assert_eq!(st["duration_ms"], get["duration_ms"], "{st}");
    assert_eq!(st["error"]["code"], "EXECUTION.RUN.CANCELLED", "{st}");
    let text = sb.run(&["status", &id]).unwrap();
    assert!(!text.stdout.contains("running"), "{}", text.stdout);
    let list = sb.run(&["resume", "--list"]).unwrap();
    let line = list
        .stdout
        .lines()
        .find(|l| l.contains(&id[..8]))
        .unwrap_or_default()
        .to_owned();
    assert!(!line.contains("running"), "{}", list.stdout);
    drop(b);
}

/// A run a worker fails before its first step (its workflow file deleted after submit, or
/// replaced by invalid YAML) ended at its failure, the same on every surface: started at its
/// submit time, `completed_at` the failure time, duration = failure − submit, the exit code
/// `awf run` gives for that error, and its log (and an event stream followed while it was
/// queued) ends with a `run_finished` event carrying the failure. It used to have no
/// `run_finished`, `awf status` started it at its failure and ended it at its start (duration
/// 0) while GET and history had no end, and invalid YAML was recorded with exit 1.
#[test]
fn a_run_failed_before_its_first_step_ended_at_its_failure_on_every_surface() {
    let db = TestDb::new();
    let sb = sandbox(&db, &[("long", LONG), ("gone", LONG), ("bad", LONG)]);
    let a = worker(&sb, &["--max-runs", "1", "--lease", "5s"]);
    let blocker = http_serve::start_run(&a, "long", "{}");
    started_on(&db, &blocker, &a);
    // A is full: these two stay queued.
    // A secret input rides along: once the run has ended, its request keeps `***` only.
    let gone = submit(&sb, "gone", &["api_token=tok-gone-s3cr3t"]);
    let bad = submit(&sb, "bad", &[]);
    let follower = {
        let (base, id) = (a.base.clone(), bad.clone());
        std::thread::spawn(move || {
            let url = format!("{base}/api/executions/{id}/events");
            let (code, body, _) = http_serve::curl(&["-N", "--max-time", "90", &url]);
            assert_eq!(code, 200, "{body}");
            http_serve::parse_frames(&body)
        })
    };
    std::thread::sleep(Duration::from_millis(1500));
    std::fs::remove_file(sb.path().join("wf/gone.yaml")).unwrap();
    std::fs::write(sb.path().join("wf/bad.yaml"), "name: bad\nstates: [\n").unwrap();
    // What `awf run` gives for that file.
    let direct = sb.run(&["run", "bad", "--store", ""]).unwrap();
    assert_eq!(direct.code, 2, "{} {}", direct.stdout, direct.stderr);
    let (code, body, _) = http_serve::curl(&[
        "-X",
        "DELETE",
        &format!("{}/api/executions/{blocker}", a.base),
    ]);
    assert_eq!(code, 204, "{body}");
    run_done(&db, &gone);
    run_done(&db, &bad);
    for (id, exit, code) in [
        (&gone, 1, "USER.INPUT.MISSING_FILE"),
        (&bad, 2, "WORKFLOW."),
    ] {
        let get = http_serve::execution(&a, id);
        assert_eq!(get["status"], "failed", "{get}");
        assert!(
            get["error"]["code"]
                .as_str()
                .unwrap_or_default()
                .starts_with(code),
            "{get}"
        );
        let d = get["duration_ms"]
            .as_u64()
            .unwrap_or_else(|| panic!("{get}"));
        assert!(d >= 1400, "the time it waited until it failed: {get}");
        let end = get["completed_at"]
            .as_str()
            .unwrap_or_else(|| panic!("{get}"))
            .to_owned();
        let st = sb.run(&["status", id, "-f", "json"]).unwrap();
        assert_eq!(st.code, 0, "{} {}", st.stdout, st.stderr);
        let st = st.json().unwrap();
        let h = sb.run(&["history", "-f", "json"]).unwrap();
        let h = h
            .json()
            .unwrap()
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["id"] == id.as_str())
            .cloned()
            .unwrap();
        for v in [&st, &h] {
            assert_eq!(v["started_at"], get["started_at"], "{v} {get}");
            assert_eq!(v["completed_at"].as_str(), Some(end.as_str()), "{v}");
            assert_eq!(v["duration_ms"].as_u64(), Some(d), "{v}");
        }
        assert_eq!(st["error"]["code"], get["error"]["code"], "{st}");
        let row = psql(
            &db.url,
            &format!(
                "SELECT exit_code, completed_at_ms - started_at_ms = duration_ms, \
                   started_at_ms = (extract(epoch from submitted_at) * 1000)::bigint \
                 FROM awf_runs WHERE run_id = '{id}'"
            ),
        );
        assert_eq!(row, format!("{exit}|t|t"), "{id}");
        let finished = psql(
            &db.url,
            &format!(
                "SELECT envelope->'event'->'result'->>'status', \
                   envelope->'event'->'result'->>'exit_code', \
                   envelope->'event'->'result'->'error'->>'code', \
                   envelope->'event'->'result'->'error'->>'message' = '{}', \
                   envelope->'event'->'result'->>'workflow' \
                 FROM awf_events WHERE run_id = '{id}' AND kind = 'run_finished'",
                get["error"]["message"]
                    .as_str()
                    .unwrap_or_default()
                    .replace('\'', "''")
            ),
        );
        // The result names the run by its shown name (`GET`'s `workflow_name`), not its file.
        assert_eq!(
            finished,
            format!(
                "failure|{exit}|{}|t|{}",
                get["error"]["code"].as_str().unwrap(),
                get["workflow_name"].as_str().unwrap()
            ),
            "{id}"
        );
    }
    let frames = follower.join().unwrap();
    let (_, last, data) = frames.last().unwrap_or_else(|| panic!("no frame"));
    assert_eq!(last, "run_finished", "{frames:?}");
    assert_eq!(data["event"]["result"]["status"], "failure", "{data}");
    assert_eq!(data["event"]["result"]["exit_code"], 2, "{data}");
    let request = psql(
        &db.url,
        &format!("SELECT request::text FROM awf_runs WHERE run_id = '{gone}'"),
    );
    assert!(
        !request.contains("tok-gone-s3cr3t") && request.contains("***"),
        "{request}"
    );
    // Fixed, both start from their first state: `awf resume` (the masked secret given
    // again) and a worker's `POST …/resume` (a breaker's resume said "state  no longer
    // exists", with no state name, and the worker wrote that error over the run's).
    let quick = "name: long
states:
  initial: wait
  wait:
    type: step
    command: echo again
    on_success: done
  done: {type: terminal}
";
    std::fs::write(sb.path().join("wf/gone.yaml"), quick).unwrap();
    std::fs::write(sb.path().join("wf/bad.yaml"), quick).unwrap();
    let r = sb
        .run(&["resume", &gone, "-f", "json", "--input", "api_token=tok-2"])
        .unwrap();
    assert_eq!(r.code, 0, "{} {}", r.stdout, r.stderr);
    assert_eq!(r.json().unwrap()["status"], "success", "{}", r.stdout);
    let (code, body, _) = http_serve::curl(&[
        "-X",
        "POST",
        "-H",
        "Content-Type: application/json",
        "-d",
        "{}",
        &format!("{}/api/executions/{bad}/resume", a.base),
    ]);
    assert_eq!(code, 200, "{body}");
    run_done(&db, &bad);
    for id in [&gone, &bad] {
        assert_eq!(
            psql(
                &db.url,
                &format!(
                    "SELECT status || '/' || (snapshot->'states'->'wait'->>'output') \
                     FROM awf_runs WHERE run_id = '{id}'"
                )
            ),
            "success/again",
            "{id}"
        );
    }
}

/// The URL of `db` as `role` (trust authentication).
fn url_as(db: &TestDb, role: &str) -> String {
    let (scheme, rest) = db.url.split_once("://").unwrap();
    let host = rest.rsplit_once('@').map_or(rest, |(_, h)| h);
    format!("{scheme}://{role}@{host}")
}

/// `awf serve --store` with a role lacking DELETE on `awf_workers` (every other privilege a
/// worker uses granted) is refused before it registers: exit 4 naming the privilege, and no
/// `awf_workers` row left. It used to pass the check, register its row, then exit 4
/// (`failed to remove the rows of dead workers: permission denied`) leaving the row behind.
#[test]
fn serve_with_a_role_lacking_a_workers_privilege_is_refused_before_it_registers() {
    let db = TestDb::new();
    let sb = sandbox(&db, &[("long", LONG)]);
    let r = sb.run(&["history"]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    let role = format!("{}_nodel", db.name);
    let server = awf_tests::pg::server_url();
    psql(&server, &format!("CREATE ROLE {role} LOGIN"));
    psql(
        &db.url,
        &format!(
            "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {role}; \
             GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO {role}; \
             REVOKE DELETE ON awf_workers FROM {role}"
        ),
    );
    let url = url_as(&db, &role);
    let r = sb
        .run(&["serve", "--store", &url, "--addr", "127.0.0.1:0"])
        .unwrap();
    assert_eq!(r.code, 4, "{} {}", r.stdout, r.stderr);
    assert!(
        r.stderr.contains("SYSTEM.STORE.UNAVAILABLE") && r.stderr.contains("DELETE on awf_workers"),
        "{}",
        r.stderr
    );
    assert_eq!(count(&db, "SELECT count(*) FROM awf_workers"), 0);
    drop(db);
    psql(&server, &format!("DROP ROLE {role}"));
}

/// A worker that fails once its row is written (here removing the rows of dead workers
/// fails: a trigger refuses to delete one) removes its own row before exiting 4.
#[test]
fn a_worker_that_fails_after_registering_removes_its_own_row() {
    let db = TestDb::new();
    let sb = sandbox(&db, &[("long", LONG)]);
    let r = sb.run(&["history"]).unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    psql(
        &db.url,
        "INSERT INTO awf_workers (worker_id, heartbeat_at, max_runs) \
           VALUES ('stuck', now() - interval '2 hours', 1); \
         CREATE FUNCTION awf_keep_stuck() RETURNS trigger LANGUAGE plpgsql AS \
           $$BEGIN IF OLD.worker_id = 'stuck' THEN RAISE EXCEPTION 'kept'; END IF; \
             RETURN OLD; END$$; \
         CREATE TRIGGER awf_keep_stuck BEFORE DELETE ON awf_workers \
           FOR EACH ROW EXECUTE FUNCTION awf_keep_stuck()",
    );
    let r = sb.run(&["serve", "--addr", "127.0.0.1:0"]).unwrap();
    assert_eq!(r.code, 4, "{} {}", r.stdout, r.stderr);
    assert!(r.stderr.contains("dead workers"), "{}", r.stderr);
    assert_eq!(
        psql(
            &db.url,
            "SELECT string_agg(worker_id, ',') FROM awf_workers"
        ),
        "stuck"
    );
}

/// A run an `awf run --store` process is running (queue_state `none`, its advisory lock
/// held) is not queued for a resume by a worker's `POST …/resume`: a breaker's resume was
/// accepted, the run queued and then "cancelled" by `awf cancel` while the terminal process
/// went on and recorded success over it. The resume is refused, the terminal run is left
/// alone and ends as it would.
#[test]
fn a_worker_refuses_to_resume_a_run_an_awf_process_is_running() {
    let db = TestDb::new();
    let sb = sandbox(
        &db,
        &[(
            "nap",
            "name: nap\nstates:\n  initial: wait\n  wait:\n    type: step\n    command: sleep 3\n    on_success: done\n  done: {type: terminal}\n",
        )],
    );
    let w = worker(&sb, &[]);
    let mut child = sb
        .cmd(&["run", "nap"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let id = in_step(&db, "");
    let (code, body, _) = http_serve::curl(&[
        "-X",
        "POST",
        "-H",
        "Content-Type: application/json",
        "-d",
        "{}",
        &format!("{}/api/executions/{id}/resume", w.base),
    ]);
    // 409, as the embedded server answers a resume of a run it is running.
    assert_eq!(code, 409, "{body}");
    assert!(
        body.contains("running on a worker or in an awf process"),
        "{body}"
    );
    assert_eq!(
        http_serve::json_of(&body)["code"],
        "USER.FACADE.INPUT_REJECTED",
        "{body}"
    );
    assert_eq!(
        psql(
            &db.url,
            &format!("SELECT queue_state FROM awf_runs WHERE run_id = '{id}'")
        ),
        "none"
    );
    let (code, stderr) = exit_of(&mut child);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(
        psql(
            &db.url,
            &format!(
                "SELECT status || '/' || queue_state || '/' || exit_code FROM awf_runs \
                 WHERE run_id = '{id}'"
            )
        ),
        "success/none/0"
    );
}

/// `POST …/resume` on a worker of a run cancelled before any worker started it queues it
/// again as the run it was: its submitted inputs, an override on top, its id kept, as `awf
/// resume` starts it (a breaker's resume dropped the submitted inputs and the worker failed
/// the run with "required but not provided"). A secret input masked at the cancel must be
/// given again: 422 naming it, the run left cancelled.
#[test]
fn a_worker_resumes_a_run_cancelled_while_queued_with_its_submitted_inputs() {
    let db = TestDb::new();
    let wf = "name: greet\ninputs:\n  - name: who\n    type: string\n    required: true\n  - name: api_token\n    type: string\n    required: true\n  - name: how\n    type: string\n    default: hi\nstates:\n  initial: a\n  a: {type: step, command: 'echo {{.inputs.how}} {{.inputs.who}} {{.inputs.api_token}}', on_success: done}\n  done: {type: terminal}\n";
    let sb = sandbox(&db, &[("greet", wf)]);
    // No worker yet: it stays queued until cancelled.
    let id = submit(&sb, "greet", &["who=QQ", "api_token=tok-first-1"]);
    let r = sb.run(&["cancel", &id]).unwrap();
    assert_eq!(r.stdout.trim(), format!("cancelled {id}"), "{}", r.stderr);
    let w = worker(&sb, &[]);
    let resume = |body: &str| {
        http_serve::curl(&[
            "-X",
            "POST",
            "-H",
            "Content-Type: application/json",
            "-d",
            body,
            &format!("{}/api/executions/{id}/resume", w.base),
        ])
    };
    // The secret was masked at the cancel: it must be given again.
    let (code, body, _) = resume(r#"{"input_overrides": {"how": "hello"}}"#);
    assert_eq!(code, 422, "{body}");
    assert!(body.contains("api_token"), "{body}");
    assert_eq!(
        psql(
            &db.url,
            &format!("SELECT status || '/' || queue_state FROM awf_runs WHERE run_id = '{id}'")
        ),
        "cancelled/done"
    );
    let (code, body, _) =
        resume(r#"{"input_overrides": {"how": "hello", "api_token": "tok-again-2"}}"#);
    assert_eq!(code, 200, "{body}");
    run_done(&db, &id);
    assert_eq!(
        psql(
            &db.url,
            &format!(
                "SELECT status || '/' || (snapshot->'states'->'a'->>'output') FROM awf_runs \
                 WHERE run_id = '{id}'"
            )
        ),
        "success/hello QQ ***"
    );
}

/// The row, snapshot and last event of a run ended by `awf cancel` / `DELETE` with nobody
/// running it: `status|exit_code|cancel_requested|waiting_until set|completed_at set|error|
/// snapshot status|snapshot waiting_until set|snapshot exit_code`, and its last event's kind
/// and result (`run_finished|cancelled|130|EXECUTION.RUN.CANCELLED`).
fn cancelled_record(db: &TestDb, id: &str) -> (String, String) {
    let row = psql(
        &db.url,
        &format!(
            "SELECT status, exit_code, cancel_requested, waiting_until IS NOT NULL, \
               completed_at_ms IS NOT NULL, coalesce(error_message, ''), snapshot->>'status', \
               snapshot ? 'waiting_until', snapshot->>'exit_code' \
             FROM awf_runs WHERE run_id = '{id}'"
        ),
    );
    let last = psql(
        &db.url,
        &format!(
            "SELECT kind, envelope->'event'->'result'->>'status', \
               envelope->'event'->'result'->>'exit_code', \
               envelope->'event'->'result'->'error'->>'code' \
             FROM awf_events WHERE root_run_id = '{id}' AND run_id = '{id}' \
             ORDER BY position DESC LIMIT 1"
        ),
    );
    (row, last)
}

const CANCELLED_ROW: &str = "cancelled|130|t|f|t|workflow cancelled|cancelled|f|130";
const CANCELLED_END: &str = "run_finished|cancelled|130|EXECUTION.RUN.CANCELLED";

/// A run parked on a usage limit (status `waiting`, a reset time) is cancelled for good by
/// `awf cancel` (`cancelled RUN`, json `cancelled`) and by `DELETE` on a worker (204): row
/// and snapshot `cancelled` with exit code 130 and no reset time, a `run_finished`
/// (cancelled) event, `awf status` and GET say `cancelled`, no worker resumes it once its
/// reset has passed, and `awf resume` still continues it. The same for a run parked by a
/// terminal `awf run --store` (not from the queue). It used to print `run RUN has ended
/// already (waiting)`, DELETE changed nothing, and a worker resumed it at the reset anyway.
#[test]
fn a_run_parked_on_a_usage_limit_is_cancelled_for_good_by_awf_cancel_and_delete() {
    let db = TestDb::new();
    let mock = awf_mock_llm::MockLlm::start(serde_json::json!({"rules": [
        {"times": 3, "reply": {"status": 429, "retry_after": 20, "error_message": "come back in 20 s"}}
    ], "default": {"text": "answered after the reset"}}));
    let mut sb = sandbox(
        &db,
        &[(
            "park",
            "name: park\nstates:\n  initial: ask\n  ask: {type: agent, provider: openai_compatible, prompt: hi, usage_limit: {wait: 1s, max_wait: 1h}, on_success: done}\n  done: {type: terminal}\n",
        )],
    );
    sb.set_env("OPENAI_BASE_URL", &format!("{}/v1", mock.url()));
    sb.set_env("OPENAI_MODEL", "mock-model");
    sb.set_env("OPENAI_API_KEY", "sk-mock-key-123");
    let w = worker(&sb, &[]);
    let by_cli = submit(&sb, "park", &[]);
    let by_delete = submit(&sb, "park", &[]);
    for id in [&by_cli, &by_delete] {
        wait_long(&db, "the run parked", Duration::from_secs(60), || {
            psql(
                &db.url,
                &format!(
                    "SELECT status || '/' || queue_state || '/' || (waiting_until IS NOT NULL) \
                     FROM awf_runs WHERE run_id = '{id}'"
                ),
            ) == "waiting/done/true"
        });
    }
    // By a terminal `awf run --store`: parked too (exit 3), not a row of the queue.
    let r = sb.run(&["run", "park"]).unwrap();
    assert_eq!(r.code, 3, "{} {}", r.stdout, r.stderr);
    let by_terminal = psql(
        &db.url,
        "SELECT run_id FROM awf_runs WHERE queue_state = 'none' AND status = 'waiting'",
    );
    assert!(!by_terminal.is_empty());
    assert_eq!(mock.model_requests().len(), 3);
    let ahead = format!(
        "SELECT count(*) FROM awf_runs WHERE run_id IN ('{by_cli}', '{by_delete}', \
         '{by_terminal}') AND waiting_until > now() + interval '2 seconds'"
    );
    assert_eq!(
        count(&db, &ahead),
        3,
        "a reset is (nearly) due before the cancels"
    );
    let resets = psql(
        &db.url,
        &format!(
            "SELECT max(waiting_until) FROM awf_runs WHERE run_id IN ('{by_cli}', \
             '{by_delete}', '{by_terminal}')"
        ),
    );

    let r = sb.run(&["cancel", &by_cli]).unwrap();
    assert_eq!(r.code, 0, "{} {}", r.stdout, r.stderr);
    assert_eq!(r.stdout.trim(), format!("cancelled {by_cli}"));
    let r = sb.run(&["cancel", &by_terminal, "-f", "json"]).unwrap();
    assert_eq!(r.code, 0, "{} {}", r.stdout, r.stderr);
    assert_eq!(
        r.json().unwrap(),
        serde_json::json!({"run_id": by_terminal, "status": "cancelled"})
    );
    let (status, body, _) = http_serve::curl(&[
        "-X",
        "DELETE",
        &format!("{}/api/executions/{by_delete}", w.base),
    ]);
    assert_eq!(status, 204, "{body}");
    for id in [&by_cli, &by_terminal, &by_delete] {
        let (row, last) = cancelled_record(&db, id);
        assert_eq!(row, CANCELLED_ROW, "{id}");
        assert_eq!(last, CANCELLED_END, "{id}");
        let st = sb.run(&["status", id, "-f", "json"]).unwrap();
        assert_eq!(st.code, 0, "{} {}", st.stdout, st.stderr);
        let st = st.json().unwrap();
        assert_eq!(st["status"], "cancelled", "{st}");
        assert_eq!(st["exit_code"], 130, "{st}");
        assert_eq!(st["error"]["code"], "EXECUTION.RUN.CANCELLED", "{st}");
        assert!(st["waiting_until"].is_null(), "{st}");
        // The same duration as its row (`awf history`) gives.
        let row = psql(
            &db.url,
            &format!("SELECT duration_ms FROM awf_runs WHERE run_id = '{id}'"),
        );
        assert_eq!(st["duration_ms"].to_string(), row, "{st}");
        let get = http_serve::execution(&w, id);
        assert_eq!(get["status"], "cancelled", "{get}");
    }
    // Cancelled again: it has ended (cancelled).
    let r = sb.run(&["cancel", &by_cli]).unwrap();
    assert_eq!(
        r.stdout.trim(),
        format!("run {by_cli} has ended already (cancelled)")
    );
    // Past the resets and a worker's poll (2 s): nobody resumed them.
    wait_long(&db, "the resets passed", Duration::from_secs(60), || {
        psql(
            &db.url,
            &format!("SELECT now() > '{resets}'::timestamptz + interval '4 seconds'"),
        ) == "t"
    });
    for id in [&by_cli, &by_terminal, &by_delete] {
        assert_eq!(cancelled_record(&db, id).0, CANCELLED_ROW, "{id}");
    }
    assert_eq!(mock.model_requests().len(), 3);
    // `awf resume` continues it as any cancelled run: asked again, it succeeds.
    let r = sb.run(&["resume", &by_cli]).unwrap();
    assert_eq!(r.code, 0, "{} {}", r.stdout, r.stderr);
    assert_eq!(
        psql(
            &db.url,
            &format!(
                "SELECT status || '/' || exit_code || '/' || (snapshot->>'status') \
                 FROM awf_runs WHERE run_id = '{by_cli}'"
            )
        ),
        "success/0/success"
    );
    assert_eq!(mock.model_requests().len(), 4);
    drop(w);
}

/// A run of a terminal `awf run --store` whose process was SIGKILLed (row `running`, no
/// worker, nobody holding its lock or polling its cancel request) is ended at once by `awf
/// cancel` (`cancelled RUN (no awf process was running it)`) and by `DELETE` on a worker
/// (204): row and snapshot `cancelled`, exit code 130, a `run_finished` (cancelled) event,
/// `awf status --store` says `cancelled`; `awf resume --store` still resumes it. It used to
/// say `cancel requested … (the awf process running it stops it)` and nothing happened.
#[test]
fn cancelling_a_run_whose_terminal_awf_process_was_killed_ends_it_at_once() {
    let db = TestDb::new();
    let out = tempfile::tempdir().unwrap();
    // Long the first time, quick once resumed (its marker there), so the resume ends.
    let wf = |name: &str| {
        let m = out.path().join(name);
        format!(
            "name: {name}\nstates:\n  initial: wait\n  wait:\n    type: step\n    command: test -f {m} || {{ touch {m}; sleep 30; }}\n    on_success: done\n  done: {{type: terminal}}\n",
            m = m.display()
        )
    };
    let (one, two) = (wf("one"), wf("two"));
    let sb = http_serve::sandbox_with(&[("one", &one), ("two", &two)]);
    let url = db.url.clone();
    let killed = |workflow: &str| {
        let mut child = sb
            .cmd(&["run", workflow, "--store", &url])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let id = in_step(&db, "");
        // SIGKILL that child only (its own handle).
        child.kill().unwrap();
        child.wait().unwrap();
        // PostgreSQL releases its lock once it sees the connection closed.
        wait_long(
            &db,
            "the killed process's lock released",
            Duration::from_secs(30),
            || {
                count(
                    &db,
                    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND database = \
                 (SELECT oid FROM pg_database WHERE datname = current_database())",
                ) == 0
            },
        );
        assert_eq!(
            psql(
                &db.url,
                &format!("SELECT status || '/' || queue_state FROM awf_runs WHERE run_id = '{id}'")
            ),
            "running/none"
        );
        id
    };
    let id = killed("one");
    let r = sb.run(&["cancel", &id, "--store", &url]).unwrap();
    assert_eq!(r.code, 0, "{} {}", r.stdout, r.stderr);
    assert_eq!(
        r.stdout.trim(),
        format!("cancelled {id} (no awf process was running it)")
    );
    let (row, last) = cancelled_record(&db, &id);
    assert_eq!(row, CANCELLED_ROW);
    assert_eq!(last, CANCELLED_END);
    let st = sb
        .run(&["status", &id, "--store", &url, "-f", "json"])
        .unwrap();
    assert_eq!(st.code, 0, "{} {}", st.stdout, st.stderr);
    let st = st.json().unwrap();
    assert_eq!(st["status"], "cancelled", "{st}");
    assert_eq!(st["exit_code"], 130, "{st}");
    assert_eq!(st["error"]["code"], "EXECUTION.RUN.CANCELLED", "{st}");
    let row = psql(
        &db.url,
        &format!("SELECT duration_ms FROM awf_runs WHERE run_id = '{id}'"),
    );
    assert_eq!(st["duration_ms"].to_string(), row, "{st}");
    let r = sb
        .run(&["cancel", &id, "--store", &url, "-f", "json"])
        .unwrap();
    assert_eq!(r.json().unwrap()["status"], "ended", "{}", r.stdout);

    // DELETE on a worker does the same (the other one, killed the same way).
    let other = killed("two");
    let w = worker(&sb, &["--store", &url]);
    let (status, body, _) = http_serve::curl(&[
        "-X",
        "DELETE",
        &format!("{}/api/executions/{other}", w.base),
    ]);
    assert_eq!(status, 204, "{body}");
    let (row, last) = cancelled_record(&db, &other);
    assert_eq!(row, CANCELLED_ROW);
    assert_eq!(last, CANCELLED_END);
    assert_eq!(http_serve::execution(&w, &other)["status"], "cancelled");

    // `awf resume --store` resumes it at its step, which now ends at once.
    for id in [&id, &other] {
        let r = sb.run(&["resume", "--store", &url, id]).unwrap();
        assert_eq!(r.code, 0, "{} {}", r.stdout, r.stderr);
        assert_eq!(
            psql(
                &db.url,
                &format!(
                    "SELECT status || '/' || exit_code || '/' || (snapshot->>'status') \
                     FROM awf_runs WHERE run_id = '{id}'"
                )
            ),
            "success/0/success"
        );
    }
    drop(w);
}

/// Three steps (1 s, 6 s, 1 s), each writing its name to `marks` once done.
fn three_steps(dir: &std::path::Path) -> String {
    format!(
        "name: three\nstates:\n  initial: s1\n{}{}{}  done: {{type: terminal}}\n",
        marked_step(dir, "marks", "s1", "sleep 1", "s2"),
        marked_step(dir, "marks", "s2", "sleep 6", "s3"),
        marked_step(dir, "marks", "s3", "sleep 1", "done")
    )
}

/// `status/queue_state/exit_code/error_message` of run `id` (`-` for NULL).
fn record_of(db: &TestDb, id: &str) -> String {
    psql(
        &db.url,
        &format!(
            "SELECT status || '/' || queue_state || '/' || coalesce(exit_code::text, '-') \
             || '/' || coalesce(error_message, '-') FROM awf_runs WHERE run_id = '{id}'"
        ),
    )
}

/// A worker is SIGKILLed mid-run and at once `awf resume --store` in a terminal completes
/// the run. The terminal took the run out of the queue (`none`, under its advisory lock), so
/// no other worker claims it while it runs it or after: before, worker B looped (took over →
/// "its old holder still holds it" → gave it back → claimed it) and, once the terminal had
/// completed the run, claimed it again and recorded it `failed` (exit 1, "already completed
/// successfully; nothing to resume") over the completed record, so `awf history` and `GET`
/// said failed while `awf status` showed the states completed. Now the record is one
/// consistent `completed` on every surface, and B never touched it.
#[test]
fn a_terminal_resume_of_a_run_whose_worker_died_takes_it_out_of_the_queue_and_it_stays_completed() {
    let db = TestDb::new();
    let out = tempfile::tempdir().unwrap();
    let sb = sandbox(&db, &[("three", &three_steps(out.path()))]);
    let logs = tempfile::tempdir().unwrap();
    let (log_a, log_b) = (logs.path().join("a.log"), logs.path().join("b.log"));
    let mut a = logged_worker(&sb, &["--lease", "6s"], &log_a);
    let id = submit(&sb, "three", &[]);
    started_on(&db, &id, &a);
    // Leases of 6 s: the terminal (started at once) takes the run before B could take A's
    // claim over (with a short lease on a loaded machine B may win that race, legitimately).
    let b = logged_worker(&sb, &["--lease", "6s"], &log_b);
    // In its long step s2.
    wait_long(&db, "the run in s2", Duration::from_secs(60), || {
        std::fs::read_to_string(out.path().join("marks"))
            .is_ok_and(|m| m.lines().any(|l| l == "s1"))
    });
    a.child.kill().unwrap();
    a.child.wait().unwrap();
    let mut child = sb
        .cmd(&["resume", &id])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // While the terminal runs it, the queue does not have it.
    wait_long(
        &db,
        "the run taken out of the queue",
        Duration::from_secs(30),
        || {
            if let Some(st) = child.try_wait().unwrap() {
                let mut err = String::new();
                if let Some(mut e) = child.stderr.take() {
                    std::io::Read::read_to_string(&mut e, &mut err).unwrap();
                }
                panic!(
                    "awf resume ended first ({st}): {err}\nB:\n{}",
                    read_log(&log_b)
                );
            }
            psql(
                &db.url,
                &format!("SELECT queue_state || '/' || status FROM awf_runs WHERE run_id = '{id}'"),
            ) == "none/running"
        },
    );
    let (code, stderr) = exit_of(&mut child);
    let mut stdout = String::new();
    if let Some(mut o) = child.stdout.take() {
        std::io::Read::read_to_string(&mut o, &mut stdout).unwrap();
    }
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("Workflow completed.") || stderr.contains("Workflow completed."),
        "{stdout}\n{stderr}"
    );
    assert_eq!(record_of(&db, &id), "success/none/0/-");
    // Past the expiry of A's lease and several of B's polls: still completed.
    std::thread::sleep(Duration::from_secs(5));
    assert_eq!(record_of(&db, &id), "success/none/0/-");
    for text in ["took over", "claimed run", "failed", "finished", "gave run"] {
        assert!(
            log_lines(&log_b, &id, text).is_empty(),
            "B logged {text:?}:\n{}",
            read_log(&log_b)
        );
    }
    let v = http_serve::execution(&b, &id);
    assert_eq!(v["status"], "completed", "{v}");
    assert_eq!(v["exit_code"], 0, "{v}");
    assert_eq!(v["error"], serde_json::Value::Null, "{v}");
    let r = sb.run(&["status", &id, "-f", "json"]).unwrap();
    let s = r.json().unwrap();
    assert_eq!(
        (s["status"].as_str(), s["run_status"].as_str()),
        (Some("completed"), Some("success")),
        "{}",
        r.stdout
    );
    let r = sb.run(&["history", "-f", "json"]).unwrap();
    let rows = r.json().unwrap();
    let row = rows
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["id"] == id.as_str())
        .unwrap_or_else(|| panic!("{rows}"));
    assert_eq!(row["status"], "completed", "{row}");
    // One run_finished event: nobody recorded another end over it.
    assert_eq!(
        count(
            &db,
            &format!(
                "SELECT count(*) FROM awf_events WHERE run_id = '{id}' AND kind = 'run_finished'"
            )
        ),
        1
    );
    // Every step completed once, forward (s2 again: it was in progress when A died).
    let marks = std::fs::read_to_string(out.path().join("marks")).unwrap();
    assert_marks_resumed_forward(&marks, "the resumed run");
    drop(b);
}

/// A terminal `awf resume --store` that takes a run out of the queue (its worker died) but
/// does not start it (a `--from` state the workflow lacks) gives it back: the queue has it
/// again (`queued`, its record unchanged) and a worker then resumes it to its end.
#[test]
fn a_terminal_resume_that_does_not_start_gives_the_run_back_to_the_queue() {
    let db = TestDb::new();
    let out = tempfile::tempdir().unwrap();
    let sb = sandbox(&db, &[("three", &three_steps(out.path()))]);
    let mut a = worker(&sb, &["--lease", "2s"]);
    let id = submit(&sb, "three", &[]);
    started_on(&db, &id, &a);
    wait_long(&db, "the run in s2", Duration::from_secs(60), || {
        std::fs::read_to_string(out.path().join("marks"))
            .is_ok_and(|m| m.lines().any(|l| l == "s1"))
    });
    a.child.kill().unwrap();
    a.child.wait().unwrap();
    let r = sb.run(&["resume", &id, "--from", "nosuch"]).unwrap();
    assert_ne!(r.code, 0, "{} {}", r.stdout, r.stderr);
    assert!(r.stderr.contains("nosuch"), "{}", r.stderr);
    assert_eq!(
        psql(
            &db.url,
            &format!(
                "SELECT queue_state || '/' || status || '/' || coalesce(worker_id, '-') \
                 FROM awf_runs WHERE run_id = '{id}'"
            )
        ),
        "queued/running/-"
    );
    let b = worker(&sb, &[]);
    run_done(&db, &id);
    assert_eq!(record_of(&db, &id), "success/done/0/-");
    drop(b);
}

/// A queue row whose run has ended already (here: completed, then put back in the queue as
/// the terminal resume used to leave it: queued, or claimed by a dead worker with an expired
/// lease) is never claimed: the worker marks it done, logs that it had ended already, and
/// leaves the run's status, exit code, error and events as recorded. Before, the worker
/// "claimed" it and logged `finished: success` 6 ms later (rewriting the row), or failed it
/// with "already completed successfully; nothing to resume".
#[test]
fn a_worker_takes_an_ended_run_out_of_the_queue_without_rewriting_its_record() {
    let db = TestDb::new();
    let sb = sandbox(
        &db,
        &[(
            "quick",
            "name: quick\nstates:\n  initial: a\n  a: {type: step, command: 'echo hi', on_success: done}\n  done: {type: terminal}\n",
        )],
    );
    let mut w = worker(&sb, &[]);
    let queued = submit(&sb, "quick", &[]);
    let claimed = submit(&sb, "quick", &[]);
    run_done(&db, &queued);
    run_done(&db, &claimed);
    http_serve::sigterm(&w);
    http_serve::wait_exit(&mut w);
    let events = |id: &str| {
        count(
            &db,
            &format!("SELECT count(*) FROM awf_events WHERE run_id = '{id}'"),
        )
    };
    let before = (events(&queued), events(&claimed));
    psql(
        &db.url,
        &format!(
            "UPDATE awf_runs SET queue_state = 'queued', worker_id = NULL, lease_until = NULL \
             WHERE run_id = '{queued}'; \
             UPDATE awf_runs SET queue_state = 'claimed', worker_id = 'dead:1:0', \
               lease_until = now() - interval '1 second' WHERE run_id = '{claimed}'"
        ),
    );
    let logs = tempfile::tempdir().unwrap();
    let log = logs.path().join("w.log");
    let w2 = logged_worker(&sb, &[], &log);
    for id in [&queued, &claimed] {
        run_done(&db, id);
        assert_eq!(record_of(&db, id), "success/done/0/-", "{id}");
        wait_long(&db, "the line saying so", Duration::from_secs(30), || {
            !log_lines(&log, id, "had ended already (success)").is_empty()
        });
        for text in ["took over", "claimed run", "failed", "finished"] {
            assert!(
                log_lines(&log, id, text).is_empty(),
                "{text:?}:\n{}",
                read_log(&log)
            );
        }
        let v = http_serve::execution(&w2, id);
        assert_eq!(v["status"], "completed", "{v}");
        assert_eq!(v["exit_code"], 0, "{v}");
    }
    assert_eq!((events(&queued), events(&claimed)), before);
    // The claim query itself never takes such a row.
    psql(
        &db.url,
        &format!("UPDATE awf_runs SET queue_state = 'queued' WHERE run_id = '{queued}'"),
    );
    let store = awf_postgres::PgStore::connect(&db.url).unwrap();
    let pool = store.pool().clone();
    let got = store
        .block_on(async move {
            awf_postgres::queue::claim(&pool, "w9", 5, Duration::from_secs(60), &[]).await
        })
        .unwrap()
        .unwrap();
    assert!(got.is_empty(), "{got:?}");
    drop(w2);
}

/// `POST /api/executions/{id}/resume` on a worker of a run that is running on a worker, or
/// queued, is 409 `USER.FACADE.INPUT_REJECTED`, what the embedded `awf serve` answers for a
/// run it is running (it was 422 `USER.INPUT.VALIDATION_FAILED`, while the README lists 409).
#[test]
fn resuming_a_queued_or_running_run_on_a_worker_is_409_as_on_the_embedded_server() {
    let db = TestDb::new();
    let sb = sandbox(&db, &[("long", LONG)]);
    let a = worker(&sb, &["--max-runs", "1"]);
    let b = worker(&sb, &["--max-runs", "1"]);
    let running = http_serve::start_run(&a, "long", "{}");
    let other = http_serve::start_run(&a, "long", "{}");
    wait_long(
        &db,
        "each worker running one of the two runs",
        Duration::from_secs(60),
        || {
            count(
                &db,
                "SELECT count(*) FROM awf_runs WHERE run_started AND queue_state = 'claimed'",
            ) == 2
        },
    );
    // Both workers full: this one stays queued.
    let queued = http_serve::start_run(&a, "long", "{}");
    for (id, on) in [(&running, &a), (&running, &b), (&queued, &a), (&queued, &b)] {
        let (code, body, _) =
            http_serve::post(&format!("{}/api/executions/{id}/resume", on.base), "{}");
        assert_eq!(code, 409, "{id} on {}: {body}", on.base);
        let v = http_serve::json_of(&body);
        assert_eq!(v["code"], "USER.FACADE.INPUT_REJECTED", "{body}");
        assert!(
            v["detail"].as_str().unwrap().contains("is still running"),
            "{body}"
        );
    }
    assert_eq!(
        psql(
            &db.url,
            &format!("SELECT queue_state FROM awf_runs WHERE run_id = '{queued}'")
        ),
        "queued"
    );
    for id in [&running, &other, &queued] {
        let _ = http_serve::curl(&["-X", "DELETE", &format!("{}/api/executions/{id}", a.base)]);
    }
}

/// On a worker, `…/events` and `…/respond` took only a full id: a prefix of a run that
/// exists (enough for GET and DELETE) was 404 "no run with id … in this process" (with a
/// hint about a TTL). Now they take a unique prefix on any worker, the run's or another,
/// the events carry the full id, and an ambiguous prefix is GET's 422.
#[test]
fn events_and_respond_on_a_worker_take_a_unique_prefix_as_get_does() {
    let db = TestDb::new();
    let out = tempfile::tempdir().unwrap();
    let wf = format!(
        "name: gated\nstates:\n  initial: deploy\n  deploy:\n    type: step\n    command: echo deployed >> {0}/log\n    approval: \"Deploy now?\"\n    on_success: done\n    on_failure: rejected\n  rejected:\n    type: step\n    command: echo rejected >> {0}/log\n    on_success: done\n  done: {{type: terminal}}\n",
        out.path().display()
    );
    let sb = sandbox(&db, &[("gated", &wf)]);
    let a = worker(&sb, &["--lease", "5s"]);
    let id = submit(&sb, "gated", &[]);
    started_on(&db, &id, &a);
    let b = worker(&sb, &["--lease", "5s"]);
    let sql = format!(
        "SELECT count(*) FROM awf_events \
         WHERE root_run_id = '{id}' AND envelope->'event'->>'type' = 'interaction_required'"
    );
    wait_long(&db, "the approval request", Duration::from_secs(60), || {
        count(&db, &sql) == 1
    });
    let prefix = id[..8].to_owned();
    // Followed by its prefix through B (which does not run it) while it waits.
    let live = {
        let url = format!("{}/api/executions/{prefix}/events", b.base);
        std::thread::spawn(move || http_serve::curl(&["-N", &url]))
    };
    // Answered by its prefix through B (the one pending request: no request_id needed).
    let (code, body, _) = http_serve::post(
        &format!("{}/api/executions/{prefix}/respond", b.base),
        r#"{"approved": true}"#,
    );
    assert_eq!(code, 204, "{body}");
    wait_long(&db, "the run done", Duration::from_secs(60), || {
        psql(
            &db.url,
            &format!("SELECT status || '/' || queue_state FROM awf_runs WHERE run_id = '{id}'"),
        ) == "success/done"
    });
    assert_eq!(
        std::fs::read_to_string(out.path().join("log")).unwrap(),
        "deployed\n"
    );
    let (code, body, ctype) = live.join().unwrap();
    assert_eq!(code, 200, "{body}");
    assert!(ctype.starts_with("text/event-stream"), "{ctype}");
    let by_prefix = http_serve::parse_frames(&body);
    let rows = count(
        &db,
        &format!("SELECT count(*) FROM awf_events WHERE root_run_id = '{id}'"),
    );
    assert_eq!(by_prefix.len(), rows, "{by_prefix:?}");
    assert_eq!(by_prefix.last().unwrap().1, "run_finished", "{by_prefix:?}");
    for (pos, name, data) in &by_prefix {
        assert_eq!(data["run_id"], id.as_str(), "{pos} {name}: {data}");
    }
    // The same stream by prefix on A (which ran it) as by full id on B.
    assert_eq!(http_serve::follow(&a, &prefix, &[]), by_prefix);
    assert_eq!(http_serve::follow(&b, &id, &[]), by_prefix);
    // The run has ended: a later answer through the prefix is 409 naming it, not 404.
    let (code, body, _) = http_serve::post(
        &format!("{}/api/executions/{prefix}/respond", b.base),
        r#"{"approved": true}"#,
    );
    assert_eq!(code, 409, "{body}");
    assert!(body.contains(&id), "{body}");

    // A prefix two runs share: every route answers GET's 422, listing both.
    psql(
        &db.url,
        &format!(
            "INSERT INTO awf_runs (run_id, root_run_id, workflow_id, workflow_name, status) \
             VALUES ('{prefix}-other', '{prefix}-other', 'gated', 'gated', 'success')"
        ),
    );
    let url = format!("{}/api/executions/{prefix}", b.base);
    let (code, get, _) = http_serve::curl(&[&url]);
    assert_eq!(code, 422, "{get}");
    let want = http_serve::json_of(&get);
    assert!(
        get.contains(&id) && get.contains(&format!("{prefix}-other")),
        "{get}"
    );
    let (code, events, _) = http_serve::curl(&[&format!("{url}/events")]);
    assert_eq!(code, 422, "{events}");
    assert_eq!(http_serve::json_of(&events)["detail"], want["detail"]);
    assert_eq!(http_serve::json_of(&events)["hints"], want["hints"]);
    let (code, answer, _) = http_serve::post(&format!("{url}/respond"), r#"{"approved": true}"#);
    assert_eq!(code, 422, "{answer}");
    assert_eq!(http_serve::json_of(&answer)["detail"], want["detail"]);
    // No run with that prefix: 404 on each.
    for path in ["ffffffff/events", "ffffffff/respond"] {
        let url = format!("{}/api/executions/{path}", b.base);
        let (code, body, _) = if path.ends_with("respond") {
            http_serve::post(&url, r#"{"approved": true}"#)
        } else {
            http_serve::curl(&[&url])
        };
        assert_eq!(code, 404, "{path}: {body}");
        assert_eq!(
            http_serve::json_of(&body)["code"],
            "USER.FACADE.RUN_NOT_FOUND"
        );
    }
}

/// `awf serve --store` printed only `AWF API server listening…` and never said it was also
/// a queue worker; on SIGTERM it logged `awf::serve: draining … runs=0` next to
/// `awf_postgres::worker: draining … runs=1` (the HTTP side counted only runs started
/// through its own API). Now a third line names the worker, its store, `--max-runs` and
/// `--lease`, and every drain line of the worker gives the same count.
#[test]
fn a_worker_says_it_is_one_and_its_drain_lines_give_one_count() {
    use std::io::BufRead;
    let db = TestDb::new();
    let sb = sandbox(&db, &[("long", LONG)]);
    let logs = tempfile::tempdir().unwrap();
    let log = logs.path().join("w.log");
    let mut child = sb
        .cmd(&[
            "serve",
            "--addr",
            "127.0.0.1:0",
            "--max-runs",
            "3",
            "--lease",
            "5s",
            "--drain-timeout",
            "1s",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::from(
            std::fs::File::create(&log).unwrap(),
        ))
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut banner = Vec::new();
    for _ in 0..3 {
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        banner.push(line.trim_end().to_owned());
    }
    let base = banner[0]
        .strip_prefix("AWF API server listening on ")
        .unwrap_or_else(|| panic!("{banner:?}"))
        .to_owned();
    let mut w = Server { child, base };
    assert!(banner[1].starts_with("Swagger UI: "), "{banner:?}");
    let line = &banner[2];
    let id = http_serve::start_run(&w, "long", "{}");
    started_on(&db, &id, &w);
    let worker_id = worker_of(&db, &id);
    let store = db.url.split_once('?').map_or(db.url.as_str(), |(u, _)| u);
    assert_eq!(
        line,
        &format!(
            "Queue worker {worker_id} of the shared store {store}: claims queued runs \
             (--max-runs 3, --lease 5s)"
        ),
        "{banner:?}"
    );
    http_serve::sigterm(&w);
    assert_eq!(http_serve::wait_exit(&mut w), Some(0), "{}", read_log(&log));
    drop(out);
    let stderr = read_log(&log);
    let runs_of = |text: &str| -> Vec<String> {
        stderr
            .lines()
            .filter(|l| l.contains(text))
            .map(|l| {
                l.split_whitespace()
                    .find_map(|t| t.strip_prefix("runs="))
                    .unwrap_or_else(|| panic!("no runs= in {l:?}"))
                    .to_owned()
            })
            .collect()
    };
    // The server's line and the worker's both count the run the worker holds.
    assert_eq!(
        runs_of("draining: new runs and resumes are refused"),
        vec!["1"],
        "{stderr}"
    );
    assert_eq!(runs_of("draining: no more claims"), vec!["1"], "{stderr}");
    // The server's and the worker's drain timeouts are the same: when the worker's cancel
    // ends the run first, the server finds nothing left to cancel and says nothing (a race
    // seen in CI); when it says it, it counts the one run.
    let server_cancel = runs_of("drain timeout reached: cancelling the runs still running");
    assert!(
        server_cancel.is_empty() || server_cancel == ["1"],
        "{server_cancel:?}: {stderr}"
    );
    assert_eq!(
        runs_of("drain timeout reached: cancelling the runs this worker still holds"),
        vec!["1"],
        "{stderr}"
    );
    assert!(!stderr.contains("runs=0"), "{stderr}");
    assert_eq!(
        psql(
            &db.url,
            &format!("SELECT status FROM awf_runs WHERE run_id = '{id}'")
        ),
        "cancelled"
    );
}

/// Trial (shared-store SRE): a terminal `awf run --store` SIGKILLed was `running (process
/// gone)` in `awf status --store` and `awf history --store`, but a worker's HTTP views said
/// `running` without `process_gone` (they left process-gone to the queue, which hands a dead
/// worker's runs to another: a terminal run is no worker's). Both now agree.
#[test]
fn a_killed_terminal_run_is_process_gone_in_a_workers_views_too() {
    let db = TestDb::new();
    let sb = sandbox(&db, &[("long", LONG)]);
    let w = worker(&sb, &["--max-runs", "1"]);
    let mut child = sb
        .cmd(&["run", "long"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let id = in_step(&db, "");
    // Alive: neither says gone.
    let v = http_serve::execution(&w, &id);
    assert_eq!(v["status"], "running", "{v}");
    assert_ne!(v["process_gone"], true, "{v}");
    child.kill().unwrap();
    child.wait().unwrap();
    let _ = sb.kill_processes(Some("sleep 120"));
    let r = sb.run(&["status", &id]).unwrap();
    assert!(r.stdout.contains("its awf process is gone"), "{}", r.stdout);
    // The lock of the killed process goes with its connection: the server may take a
    // moment to see the connection closed.
    wait_long(
        &db,
        "the worker to see the run gone",
        Duration::from_secs(30),
        || http_serve::execution(&w, &id)["process_gone"] == true,
    );
    let v = http_serve::execution(&w, &id);
    assert_eq!(v["status"], "running", "{v}");
    let (code, body, _) = http_serve::curl(&[&format!("{}/api/executions", w.base)]);
    assert_eq!(code, 200, "{body}");
    let list = http_serve::json_of(&body);
    let row = list["body"]["executions"]
        .as_array()
        .unwrap_or_else(|| panic!("{body}"))
        .iter()
        .find(|e| e["execution_id"] == id.as_str())
        .cloned()
        .unwrap_or_else(|| panic!("{id} not listed: {list}"));
    assert_eq!(row["process_gone"], true, "{row}");
    let (code, body, _) = http_serve::curl(&[&format!("{}/api/history/stats", w.base)]);
    assert_eq!(code, 200, "{body}");
    let stats = http_serve::json_of(&body);
    assert_eq!(stats["body"]["process_gone_count"], 1, "{stats}");
}
