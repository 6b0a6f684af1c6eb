//! The handlers over a fake run service of one run: a resume while another one of the same
//! run is under way, or refused by the service as still running, is one 409 with one
//! message; a run recorded as running whose awf process is gone says so (`process_gone`) and
//! its event stream ends with a `process_gone` event.

#![allow(clippy::unwrap_used)]

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering;

use awf_domain::event::EventEnvelope;
use awf_domain::ports::facade::RunRequest;
use awf_domain::ports::repository::LoadedWorkflow;
use awf_domain::ports::repository::WorkflowEntry;
use awf_domain::ports::repository::WorkflowRepository;
use awf_domain::ports::service::RunService;
use awf_domain::run::RunResult;
use awf_domain::run::RunStatus;

use super::*;
use crate::GoneRuns;

type Boxed<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

struct NoWorkflows;

impl WorkflowRepository for NoWorkflows {
    fn load(
        &self,
        identifier: &str,
        _base_dir: Option<&std::path::Path>,
    ) -> Result<LoadedWorkflow, AwfError> {
        Err(AwfError::new(
            ErrorCode::UserFacadeWorkflowNotFound,
            format!("workflow not found: {identifier}"),
        ))
    }

    fn list(&self) -> Result<Vec<WorkflowEntry>, AwfError> {
        Ok(Vec::new())
    }
}

/// A subscription over fixed items.
struct Fixed(std::collections::VecDeque<SubscriptionItem>);

impl Subscription for Fixed {
    fn next<'life0, 'async_trait>(&'life0 mut self) -> Boxed<'async_trait, Option<SubscriptionItem>>
    where
        'life0: 'async_trait,
        Self: 'async_trait,
    {
        let item = self.0.pop_front();
        Box::pin(async move { item })
    }
}

/// A run service holding one recorded run, `r1`, of status `status` and log `log`. Its
/// `resume` is refused with `refusal` when set; else the first one waits for `release` (after
/// signalling `entered`), and one that comes meanwhile is refused as the run lock refuses a
/// second holder.
struct OneRun {
    status: StoredStatus,
    log: Vec<SubscriptionItem>,
    refusal: Option<fn(&str) -> AwfError>,
    busy: AtomicBool,
    entered: tokio::sync::Notify,
    release: tokio::sync::Notify,
}

impl OneRun {
    fn new(status: StoredStatus) -> Self {
        Self {
            status,
            log: Vec::new(),
            refusal: None,
            busy: AtomicBool::new(false),
            entered: tokio::sync::Notify::new(),
            release: tokio::sync::Notify::new(),
        }
    }

    fn view(&self) -> RunView {
        RunView {
            run_id: RunId("r1".into()),
            parent_run_id: None,
            workflow: "w".into(),
            phase: RunPhase::Recorded,
            status: self.status,
            current_state: Some("a".into()),
            exit_code: None,
            waiting_until: None,
        }
    }
}

fn nothing(what: &str) -> AwfError {
    AwfError::new(ErrorCode::UserFacadeRunNotFound, format!("no {what} here"))
}

impl RunService for OneRun {
    fn start<'life0, 'async_trait>(
        &'life0 self,
        _request: RunRequest,
    ) -> Boxed<'async_trait, Result<RunId, AwfError>>
    where
        'life0: 'async_trait,
        Self: 'async_trait,
    {
        Box::pin(async move { Err(nothing("start")) })
    }

    fn resume<'life0, 'async_trait>(
        &'life0 self,
        request: ResumeRequest,
    ) -> Boxed<'async_trait, Result<RunId, AwfError>>
    where
        'life0: 'async_trait,
        Self: 'async_trait,
    {
        Box::pin(async move {
            if let Some(refuse) = self.refusal {
                return Err(refuse(&request.run_id));
            }
            if self.busy.swap(true, Ordering::SeqCst) {
                return Err(awf_domain::ports::locks::still_running(&request.run_id));
            }
            self.entered.notify_one();
            self.release.notified().await;
            self.busy.store(false, Ordering::SeqCst);
            Ok(RunId(request.run_id))
        })
    }

    fn get(&self, run_id: &RunId) -> Result<RunView, AwfError> {
        if run_id.0 == "r1" {
            Ok(self.view())
        } else {
            Err(nothing("run"))
        }
    }

    fn list(&self) -> Result<Vec<RunView>, AwfError> {
        Ok(vec![self.view()])
    }

    fn subscribe(&self, run_id: &RunId, from_seq: u64) -> Result<Box<dyn Subscription>, AwfError> {
        self.get(run_id)?;
        let skip = usize::try_from(from_seq.saturating_sub(1)).unwrap();
        Ok(Box::new(Fixed(
            self.log.iter().skip(skip).cloned().collect(),
        )))
    }

    fn respond(&self, _request_id: &str, _answer: Answer) -> Result<(), AwfError> {
        Err(nothing("request"))
    }

    fn cancel(&self, _run_id: &RunId, _reason: CancelReason) -> Result<(), AwfError> {
        Err(nothing("live run"))
    }

    fn wait<'life0, 'life1, 'async_trait>(
        &'life0 self,
        _run_id: &'life1 RunId,
    ) -> Boxed<'async_trait, Result<awf_domain::run::RunResult, AwfError>>
    where
        'life0: 'async_trait,
        'life1: 'async_trait,
        Self: 'async_trait,
    {
        Box::pin(async move { Err(nothing("live run")) })
    }
}

fn config(service: Arc<OneRun>, process_gone: Option<GoneRuns>) -> Arc<HttpConfig> {
    Arc::new(HttpConfig {
        service,
        repository: Arc::new(NoWorkflows),
        validator: Arc::new(|_| Ok(Vec::new())),
        history: None,
        states: None,
        shared_store: false,
        env: Vec::new(),
        working_dir: std::path::PathBuf::from("."),
        config_inputs: Map::new(),
        token: None,
        cors_origins: Vec::new(),
        drain_timeout: std::time::Duration::from_secs(1),
        keep_alive: std::time::Duration::from_secs(15),
        header_timeout: std::time::Duration::from_secs(30),
        draining: Arc::default(),
        started: Arc::default(),
        frames: Arc::default(),
        process_gone,
        resuming: Arc::default(),
        also_held: None,
    })
}

/// Every run recorded as running is gone.
fn all_gone() -> GoneRuns {
    Arc::new(|rows: &[HistoryRecord]| {
        rows.iter()
            .filter(|r| r.status == StoredStatus::Running)
            .map(|r| r.id.clone())
            .collect()
    })
}

async fn resume(cfg: &Arc<HttpConfig>) -> Result<String, Problem> {
    resume_execution(
        State(Arc::clone(cfg)),
        Path("r1".to_owned()),
        JsonBody(ResumeBody::default()),
    )
    .await
    .map(|Json(e)| e.body.execution_id)
}

fn assert_still_running(p: &Problem) {
    let doc = p.doc();
    assert_eq!(p.status(), StatusCode::CONFLICT, "{doc:?}");
    assert_eq!(doc.detail, "run r1 is still running", "{doc:?}");
    assert_eq!(doc.code, "USER.FACADE.INPUT_REJECTED", "{doc:?}");
}

/// A resume that comes while another one of the same run is under way (the service has
/// not registered the new attempt yet, and holds the run's lock) is the 409 a live run
/// gets, not a 422 from the run lock; once the first one is done, the run can be resumed
/// again.
#[tokio::test]
async fn a_resume_while_another_is_under_way_is_the_409_a_live_run_gets() {
    let svc = Arc::new(OneRun::new(StoredStatus::Failure));
    let cfg = config(Arc::clone(&svc), None);
    let first = tokio::spawn({
        let cfg = Arc::clone(&cfg);
        async move { resume(&cfg).await.ok() }
    });
    svc.entered.notified().await;
    match resume(&cfg).await {
        Ok(id) => panic!("resumed twice: {id}"),
        Err(p) => assert_still_running(&p),
    }
    svc.release.notify_one();
    assert_eq!(first.await.unwrap().as_deref(), Some("r1"));
    // Done: the mark is gone.
    let again = tokio::spawn({
        let cfg = Arc::clone(&cfg);
        async move { resume(&cfg).await.ok() }
    });
    svc.entered.notified().await;
    svc.release.notify_one();
    assert_eq!(again.await.unwrap().as_deref(), Some("r1"));
}

/// The service's refusals of a run still running (its lock held by another awf process,
/// its owner alive) are the same 409 and message; the hints say where it runs.
#[tokio::test]
async fn a_resume_the_service_refuses_as_still_running_is_the_same_409() {
    let refusals: [fn(&str) -> AwfError; 2] = [
        |id| awf_domain::ports::locks::still_running(id),
        |id| {
            AwfError::new(
                ErrorCode::UserInputValidationFailed,
                format!("run {id} is still running (awf process 77)"),
            )
            .with_hint("wait for it to finish, or stop it (Ctrl-C / kill) before resuming")
        },
    ];
    for refusal in refusals {
        let mut svc = OneRun::new(StoredStatus::Running);
        svc.refusal = Some(refusal);
        let cfg = config(Arc::new(svc), None);
        let p = resume(&cfg).await.err().unwrap();
        assert_still_running(&p);
        let hints = p.doc().hints.join("\n");
        assert!(
            hints.contains("in another awf process") || hints.contains("(awf process 77)"),
            "{hints}"
        );
    }
}

fn event(seq: u64, event: RunEvent) -> SubscriptionItem {
    SubscriptionItem::Event {
        position: seq,
        envelope: Box::new(EventEnvelope {
            seq,
            run_id: RunId("r1".into()),
            parent_run_id: None,
            at: std::time::SystemTime::UNIX_EPOCH,
            path: String::new(),
            iteration: None,
            event,
        }),
    }
}

fn started_log() -> Vec<SubscriptionItem> {
    vec![
        event(
            1,
            RunEvent::RunStarted {
                workflow: "w".into(),
                identifier: "w".into(),
                workflow_path: None,
                inputs: Map::new(),
                resumed_from: None,
                pid: 1,
                mocks: Default::default(),
                working_dir: None,
            },
        ),
        event(
            2,
            RunEvent::StepStarted {
                step: "a".into(),
                kind: "command".into(),
                command: None,
            },
        ),
    ]
}

async fn stream_text(cfg: &Arc<HttpConfig>) -> String {
    let r = stream_events(
        State(Arc::clone(cfg)),
        Path("r1".to_owned()),
        Query(EventsQuery::default()),
        HeaderMap::new(),
    )
    .await
    .map_err(|p| p.doc())
    .unwrap();
    let bytes = axum::body::to_bytes(r.into_body(), usize::MAX)
        .await
        .unwrap();
    String::from_utf8(bytes.to_vec()).unwrap()
}

/// The stream of a run recorded as running whose process is gone replays its events, then
/// ends with one `process_gone` frame (no `id:`: it is not in the run's log) saying so.
#[tokio::test]
async fn the_stream_of_a_run_whose_process_is_gone_ends_with_process_gone() {
    let mut svc = OneRun::new(StoredStatus::Running);
    svc.log = started_log();
    let text = stream_text(&config(Arc::new(svc), Some(all_gone()))).await;
    let frames: Vec<&str> = text
        .split("\n\n")
        .map(str::trim)
        .filter(|f| f.contains("event:"))
        .collect();
    assert_eq!(frames.len(), 3, "{text}");
    assert!(frames[0].contains("event: run_started"), "{text}");
    let last = frames[2];
    assert!(last.contains("event: process_gone"), "{text}");
    assert!(!last.contains("id:"), "{last}");
    let data: Value = last
        .lines()
        .find_map(|l| l.strip_prefix("data: "))
        .map(|d| serde_json::from_str(d).unwrap())
        .unwrap();
    assert_eq!(
        data,
        json!({
            "run_id": "r1",
            "status": "running",
            "process_gone": true,
            "current_step": "a",
            "message": "the awf process that ran run r1 is gone (killed or crashed): the run \
                        stopped without finishing; POST /api/executions/r1/resume continues it",
        })
    );
}

/// A run really running (its process alive), and a run whose log holds its end, get no such
/// frame.
#[tokio::test]
async fn only_a_run_whose_process_is_gone_gets_the_closing_frame() {
    let mut alive = OneRun::new(StoredStatus::Running);
    alive.log = started_log();
    let none: GoneRuns = Arc::new(|_: &[HistoryRecord]| std::collections::BTreeSet::new());
    let text = stream_text(&config(Arc::new(alive), Some(none))).await;
    assert!(!text.contains("process_gone"), "{text}");

    let mut ended = OneRun::new(StoredStatus::Failure);
    ended.log = started_log();
    let result = RunResult {
        run_id: Some(RunId("r1".into())),
        workflow: "w".into(),
        status: RunStatus::Failure,
        exit_code: 1,
        terminal: None,
        duration_ms: 1,
        states: BTreeMap::new(),
        outputs: BTreeMap::new(),
        error: None,
        message: None,
        spend: None,
    };
    ended.log.push(event(
        3,
        RunEvent::RunFinished {
            result: Box::new(result),
        },
    ));
    let text = stream_text(&config(Arc::new(ended), Some(all_gone()))).await;
    assert!(text.contains("event: run_finished"), "{text}");
    assert!(!text.contains("process_gone"), "{text}");
}

/// GET and the list say `process_gone: true` of such a run; nothing when nobody can tell.
#[tokio::test]
async fn get_and_list_say_process_gone() {
    let svc = Arc::new(OneRun::new(StoredStatus::Running));
    let cfg = config(Arc::clone(&svc), Some(all_gone()));
    let Json(one) = get_execution(State(Arc::clone(&cfg)), Path("r1".to_owned()))
        .await
        .map_err(|p| p.doc())
        .unwrap();
    let v = serde_json::to_value(&one.body).unwrap();
    assert_eq!(v["process_gone"], true, "{v}");
    assert_eq!(v["status"], "running", "{v}");
    let Json(list) = list_executions(State(Arc::clone(&cfg)))
        .await
        .map_err(|p| p.doc())
        .unwrap();
    let v = serde_json::to_value(&list.body).unwrap();
    assert_eq!(v["executions"][0]["process_gone"], true, "{v}");

    let cfg = config(svc, None);
    let Json(one) = get_execution(State(cfg), Path("r1".to_owned()))
        .await
        .map_err(|p| p.doc())
        .unwrap();
    let v = serde_json::to_value(&one.body).unwrap();
    assert!(v.get("process_gone").is_none(), "{v}");
}
