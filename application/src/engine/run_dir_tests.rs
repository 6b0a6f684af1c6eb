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

/// A run resumed from another directory loads its workflow (and so its sub-workflows) and
/// the project configuration as seen from the directory it started in: the resumer's
/// directory had another file under the same relative name, and another `inputs:`.
#[tokio::test]
async fn a_resumed_run_looks_its_workflows_and_config_up_where_it_started() {
    let exec = Arc::new(
        FakeExecutor::new()
            .on("step b", [FakeCommand::ok("")])
            .on("step c", [FakeCommand::ok("")]),
    );
    let mut there = three_steps();
    there.inputs = vec![InputDef {
        name: "x".into(),
        ty: InputType::String,
        description: None,
        required: false,
        default: None,
        validation: InputValidation::default(),
    }];
    let mut here = there.clone();
    here.states
        .insert("b".into(), cmd("b", "wrong b", Some("c"), None));
    let config = awf_domain::ports::repository::ProjectConfig {
        inputs: serde_json::Map::from_iter([("x".to_owned(), serde_json::json!("from a"))]),
        ..Default::default()
    };
    let repo =
        FakeRepository::new()
            .with(here)
            .rooted("/a", FakeRepository::new().with(there), config);
    let f = Facade::new(Services {
        state_store: Some(failed_at_b_in(Some("/a"))),
        host: Arc::new(FakeHost::default().dir("/a").dir("/b")),
        ..Services::fakes(
            repo,
            Arc::clone(&exec) as Arc<dyn awf_domain::ports::CommandExecutor>,
        )
    });
    let mut req = resume_from("/b");
    req.config_inputs = serde_json::Map::from_iter([("x".to_owned(), serde_json::json!("from b"))]);
    let h = f.resume_run(req).await.expect("resumes");
    let (_, result) = drain(h).await;
    assert_eq!(result.status, RunStatus::Success);
    assert_eq!(
        exec.calls()
            .into_iter()
            .map(|c| (c.program, c.env))
            .collect::<Vec<_>>(),
        [
            (
                awf_domain::ports::exec::Program::Shell("step b".into()),
                vec![("x".to_owned(), "from a".to_owned())]
            ),
            (
                awf_domain::ports::exec::Program::Shell("step c".into()),
                vec![("x".to_owned(), "from a".to_owned())]
            ),
        ]
    );
}

/// Resumed from its own directory, the run uses the repository and configuration it is
/// given (nothing is looked up again).
#[tokio::test]
async fn a_run_resumed_where_it_started_uses_the_resumers_lookups() {
    let exec = Arc::new(
        FakeExecutor::new()
            .on("step b", [FakeCommand::ok("")])
            .on("step c", [FakeCommand::ok("")]),
    );
    let mut other = three_steps();
    other
        .states
        .insert("b".into(), cmd("b", "wrong b", Some("c"), None));
    let repo = FakeRepository::new().with(three_steps()).rooted(
        "/a",
        FakeRepository::new().with(other),
        Default::default(),
    );
    let f = Facade::new(Services {
        state_store: Some(failed_at_b_in(Some("/a"))),
        host: Arc::new(FakeHost::default().dir("/a")),
        ..Services::fakes(
            repo,
            Arc::clone(&exec) as Arc<dyn awf_domain::ports::CommandExecutor>,
        )
    });
    let h = f.resume_run(resume_from("/a")).await.expect("resumes");
    let (_, result) = drain(h).await;
    assert_eq!(result.status, RunStatus::Success);
    assert_eq!(exec.calls().len(), 2);
}
