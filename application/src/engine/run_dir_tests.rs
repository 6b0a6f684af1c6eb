//! The run's working directory: where commands without a `dir` run, what `RunStarted` records,
//! and where a resumed run goes on (the directory it started in, not the resumer's).

use super::*;
use pretty_assertions::assert_eq;

use awf_domain::ports::facade::ResumeFrom;
use awf_domain::ports::fakes::FakeHost;

/// `cmd` with a `dir` of its own.
fn cmd_in(name: &str, command: &str, dir: &str, on_success: &str) -> State {
    let mut s = cmd(name, command, Some(on_success), None);
    s.kind = StateKind::Command(CommandStep {
        source: CommandSource::Inline(command.into()),
        dir: Some(dir.into()),
    });
    s
}

/// The `working_dir` of the run's `RunStarted` event.
fn started_in(events: &[EventEnvelope]) -> Option<String> {
    events.iter().find_map(|e| match &e.event {
        RunEvent::RunStarted { working_dir, .. } => working_dir.clone(),
        _ => None,
    })
}

#[tokio::test]
async fn commands_run_in_the_runs_directory_unless_they_set_their_own() {
    let wf = workflow(
        "w",
        "a",
        vec![
            cmd("a", "step a", Some("b"), None),
            cmd_in("b", "step b", "sub", "c"),
            cmd_in("c", "step c", "/elsewhere", "done"),
            terminal("done", TerminalStatus::Success),
        ],
    );
    let exec = Arc::new(
        FakeExecutor::new()
            .on("step a", [FakeCommand::ok("")])
            .on("step b", [FakeCommand::ok("")])
            .on("step c", [FakeCommand::ok("")]),
    );
    let f = facade(
        FakeRepository::new().with(wf),
        Arc::clone(&exec),
        FakeExpressions::new(),
    );
    let mut req = request("w", &[]);
    req.working_dir = PathBuf::from("/proj");
    let (events, result) = run_all(&f, req).await;
    assert_eq!(result.status, RunStatus::Success);
    assert_eq!(
        exec.calls().into_iter().map(|c| c.dir).collect::<Vec<_>>(),
        [
            Some(PathBuf::from("/proj")),
            Some(PathBuf::from("/proj/sub")),
            Some(PathBuf::from("/elsewhere")),
        ]
    );
    assert_eq!(started_in(&events).as_deref(), Some("/proj"));
}

/// A resume facade over a host where `dirs` exist.
fn resume_facade_on(
    exec: Arc<FakeExecutor>,
    store: Arc<MemStore>,
    wf: Workflow,
    dirs: &[&str],
) -> Facade {
    let host = dirs.iter().fold(FakeHost::default(), |h, d| h.dir(*d));
    Facade::new(Services {
        state_store: Some(store),
        host: Arc::new(host),
        ..Services::fakes(FakeRepository::new().with(wf), exec)
    })
}

/// The store of run `run-1`, failed at `b` of [`three_steps`], started in `dir`.
fn failed_at_b_in(dir: Option<&str>) -> Arc<MemStore> {
    let store = Arc::new(MemStore::default());
    let mut snap = snapshot(
        &[
            ("a", StepStatus::Completed, 1),
            ("b", StepStatus::Failed, 2),
        ],
        "b",
        serde_json::Map::new(),
    );
    snap.working_dir = dir.map(PathBuf::from);
    store.0.lock().unwrap().insert("run-1".into(), snap);
    store
}

/// `resume_request` from `dir` (its `PWD` too).
fn resume_from(dir: &str) -> awf_domain::ports::facade::ResumeRequest {
    let mut req = resume_request(ResumeFrom::Current, &[]);
    req.working_dir = PathBuf::from(dir);
    req.env = vec![("PWD".into(), dir.into())];
    req
}

#[tokio::test]
async fn a_resumed_run_goes_on_in_the_directory_it_started_in() {
    let exec = Arc::new(
        FakeExecutor::new()
            .on("step b", [FakeCommand::ok("")])
            .on("step c", [FakeCommand::ok("")]),
    );
    let store = failed_at_b_in(Some("/a"));
    let f = resume_facade_on(
        Arc::clone(&exec),
        Arc::clone(&store),
        three_steps(),
        &["/a", "/b"],
    );
    let h = f.resume_run(resume_from("/b")).await.expect("resumes");
    let (events, result) = drain(h).await;
    assert_eq!(result.status, RunStatus::Success);
    assert_eq!(
        exec.calls().into_iter().map(|c| c.dir).collect::<Vec<_>>(),
        [Some(PathBuf::from("/a")), Some(PathBuf::from("/a"))]
    );
    assert_eq!(started_in(&events).as_deref(), Some("/a"));
}

#[tokio::test]
async fn a_run_recorded_without_a_directory_resumes_in_the_resumers() {
    let exec = Arc::new(
        FakeExecutor::new()
            .on("step b", [FakeCommand::ok("")])
            .on("step c", [FakeCommand::ok("")]),
    );
    let f = resume_facade_on(
        Arc::clone(&exec),
        failed_at_b_in(None),
        three_steps(),
        &["/b"],
    );
    let h = f.resume_run(resume_from("/b")).await.expect("resumes");
    let (events, _) = drain(h).await;
    assert_eq!(
        exec.calls().into_iter().map(|c| c.dir).collect::<Vec<_>>(),
        [Some(PathBuf::from("/b")), Some(PathBuf::from("/b"))]
    );
    // From now on the run has a directory: where this attempt ran.
    assert_eq!(started_in(&events).as_deref(), Some("/b"));
}

#[tokio::test]
async fn a_resume_whose_directory_is_gone_is_refused_and_runs_nothing() {
    let exec = Arc::new(FakeExecutor::new());
    let f = resume_facade_on(
        Arc::clone(&exec),
        failed_at_b_in(Some("/a")),
        three_steps(),
        &["/b"],
    );
    let Err(e) = f.resume_run(resume_from("/b")).await else {
        panic!("resumed in a directory that is gone");
    };
    assert_eq!(e.code(), ErrorCode::UserInputValidationFailed);
    assert!(
        e.message()
            .contains("started in /a, which no longer exists"),
        "{e}"
    );
    assert!(exec.calls().is_empty());
}
