use std::collections::BTreeMap;
use std::collections::HashMap;
use std::time::SystemTime;

use awf_domain::ErrorCode;
use awf_domain::error::ErrorBody;
use awf_domain::run::TokenUsage;
use opentelemetry::Value;
use opentelemetry::trace::SpanId;
use opentelemetry::trace::Status;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::trace::InMemorySpanExporter;
use opentelemetry_sdk::trace::SdkTracerProvider;
use opentelemetry_sdk::trace::SpanData;
use pretty_assertions::assert_eq;
use tracing_subscriber::Registry;
use tracing_subscriber::layer::SubscriberExt as _;

use super::*;

const MAIN: &str = "11111111-1111-4111-8111-111111111111";
const CHILD: &str = "22222222-2222-4222-8222-222222222222";

/// Builds envelopes for one run, numbering `seq` per run.
struct Script {
    seqs: HashMap<String, u64>,
    out: Vec<EventEnvelope>,
}

impl Script {
    fn new() -> Self {
        Self {
            seqs: HashMap::new(),
            out: Vec::new(),
        }
    }

    fn push(&mut self, run: &str, parent: Option<&str>, path: &str, event: RunEvent) {
        let seq = self.seqs.entry(run.to_owned()).or_insert(0);
        *seq += 1;
        let iteration = path
            .rsplit('/')
            .nth(1)
            .and_then(|seg| seg.strip_prefix("loop:"))
            .and_then(|i| i.parse().ok());
        self.out.push(EventEnvelope {
            seq: *seq,
            run_id: RunId(run.to_owned()),
            parent_run_id: parent.map(|p| RunId(p.to_owned())),
            at: SystemTime::now(),
            path: path.to_owned(),
            iteration,
            event,
        });
    }

    fn run_started(&mut self, run: &str, parent: Option<&str>, workflow: &str) {
        self.push(
            run,
            parent,
            "",
            RunEvent::RunStarted {
                workflow: workflow.to_owned(),
                identifier: workflow.to_owned(),
                workflow_path: None,
                inputs: serde_json::Map::new(),
                resumed_from: None,
                pid: 1,
                mocks: Default::default(),
                working_dir: None,
            },
        );
    }

    fn started(&mut self, run: &str, parent: Option<&str>, path: &str, kind: &str) {
        let step = path.rsplit('/').next().unwrap_or(path).to_owned();
        self.push(
            run,
            parent,
            path,
            RunEvent::StepStarted {
                step,
                kind: kind.to_owned(),
                command: None,
            },
        );
    }

    #[allow(clippy::too_many_arguments)]
    fn finished(
        &mut self,
        run: &str,
        parent: Option<&str>,
        path: &str,
        kind: &str,
        status: StepStatus,
        exit_code: Option<i32>,
        attempts: u32,
        error: Option<&str>,
    ) {
        let step = path.rsplit('/').next().unwrap_or(path).to_owned();
        let mut st = StepState::running(&step, SystemTime::now());
        st.status = status;
        st.exit_code = exit_code;
        st.attempts = attempts;
        st.error = error.map(str::to_owned);
        if kind == "agent" {
            st.tokens = TokenUsage {
                input: 10,
                output: 32,
                total: 42,
                estimated: false,
            };
        }
        st.completed_at = Some(SystemTime::now());
        self.push(
            run,
            parent,
            path,
            RunEvent::StepFinished {
                step,
                kind: kind.to_owned(),
                state: Box::new(st),
            },
        );
    }

    fn ok(&mut self, run: &str, parent: Option<&str>, path: &str, kind: &str) {
        let code = (kind == "command").then_some(0);
        self.finished(
            run,
            parent,
            path,
            kind,
            StepStatus::Completed,
            code,
            1,
            None,
        );
    }

    fn run_finished(&mut self, run: &str, parent: Option<&str>, workflow: &str, status: RunStatus) {
        let (exit_code, error) = match status {
            RunStatus::Success => (0, None),
            _ => (
                3,
                Some(ErrorBody {
                    code: ErrorCode::ExecutionCommandFailed,
                    message: "step a failed".to_owned(),
                    hints: Vec::new(),
                    details: BTreeMap::new(),
                }),
            ),
        };
        self.push(
            run,
            parent,
            "",
            RunEvent::RunFinished {
                result: Box::new(RunResult {
                    run_id: Some(RunId(run.to_owned())),
                    workflow: workflow.to_owned(),
                    status,
                    exit_code,
                    terminal: Some("done".to_owned()),
                    duration_ms: 5,
                    states: BTreeMap::new(),
                    outputs: BTreeMap::new(),
                    error,
                    message: None,
                    spend: None,
                }),
            },
        );
    }
}

/// main: build → fan (parallel: a fails, b ok) → each (for_each, 2 iterations of `item`,
/// the first retried) → sub (call_workflow → child: ask (agent with one tool call)) → done.
fn scripted_run(main_status: RunStatus) -> Vec<EventEnvelope> {
    let mut s = Script::new();
    s.run_started(MAIN, None, "main");
    s.started(MAIN, None, "build", "command");
    s.push(
        MAIN,
        None,
        "build",
        RunEvent::OutputChunk {
            step: "build".to_owned(),
            stream: awf_domain::event::OutputStream::Stdout,
            text: "compiling\n".into(),
        },
    );
    s.ok(MAIN, None, "build", "command");

    s.started(MAIN, None, "fan", "parallel");
    s.started(MAIN, None, "a", "command");
    s.started(MAIN, None, "b", "command");
    s.ok(MAIN, None, "b", "command");
    s.finished(
        MAIN,
        None,
        "a",
        "command",
        StepStatus::Failed,
        Some(2),
        1,
        Some("exit status 2: boom"),
    );
    s.ok(MAIN, None, "fan", "parallel");

    s.started(MAIN, None, "each", "for_each");
    s.started(MAIN, None, "loop:0/item", "command");
    s.push(
        MAIN,
        None,
        "loop:0/item",
        RunEvent::StepRetrying {
            step: "item".to_owned(),
            attempt: 2,
            delay_ms: 100,
            reason: None,
        },
    );
    s.finished(
        MAIN,
        None,
        "loop:0/item",
        "command",
        StepStatus::Completed,
        Some(0),
        2,
        None,
    );
    s.started(MAIN, None, "loop:1/item", "command");
    s.ok(MAIN, None, "loop:1/item", "command");
    s.ok(MAIN, None, "each", "for_each");

    s.started(MAIN, None, "sub", "call_workflow");
    s.push(
        MAIN,
        None,
        "sub",
        RunEvent::ChildRunStarted {
            step: "sub".to_owned(),
            child_run_id: RunId(CHILD.to_owned()),
            workflow: "child".to_owned(),
        },
    );
    s.run_started(CHILD, Some(MAIN), "child");
    s.started(CHILD, Some(MAIN), "ask", "agent");
    s.push(
        CHILD,
        Some(MAIN),
        "ask",
        RunEvent::ToolCall {
            step: "ask".to_owned(),
            id: "call-1".to_owned(),
            name: "Read".to_owned(),
            input: serde_json::json!({"path": "README.md"}),
            fidelity: awf_domain::event::ToolFidelity::Agent,
        },
    );
    s.push(
        CHILD,
        Some(MAIN),
        "ask",
        RunEvent::ToolCallResult {
            step: "ask".to_owned(),
            id: "call-1".to_owned(),
            output: "text".to_owned(),
            is_error: false,
            fidelity: awf_domain::event::ToolFidelity::Agent,
        },
    );
    s.ok(CHILD, Some(MAIN), "ask", "agent");
    s.run_finished(CHILD, Some(MAIN), "child", RunStatus::Success);
    s.ok(MAIN, None, "sub", "call_workflow");
    s.run_finished(MAIN, None, "main", main_status);
    s.out
}

/// Serialises the tests that install subscribers: `tracing` caches callsite interest across
/// all live dispatchers, so a concurrently running test's subscriber can make the fast-path
/// check of another test see "enabled". (Production has one global subscriber.)
static SUBSCRIBERS: Mutex<()> = Mutex::new(());

fn capture(events: Vec<EventEnvelope>) -> Vec<SpanData> {
    let _serial = SUBSCRIBERS.lock().unwrap_or_else(PoisonError::into_inner);
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let subscriber = Registry::default().with(crate::init::otel_layer(provider.tracer("test")));
    let projection = span_projection();
    tracing::subscriber::with_default(subscriber, || {
        for e in events {
            projection.emit(e);
        }
    });
    assert_eq!(projection.open_runs.load(Ordering::Relaxed), 0);
    let st = projection.state.lock().unwrap();
    assert!(st.runs.is_empty() && st.child_parents.is_empty());
    drop(st);
    provider.force_flush().unwrap();
    exporter.get_finished_spans().unwrap()
}

fn attr<'a>(span: &'a SpanData, key: &str) -> Option<&'a Value> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| &kv.value)
}

fn sv(v: &str) -> Value {
    Value::String(v.to_owned().into())
}

fn label(span: &SpanData) -> String {
    let key = ["step.name", "workflow.name", "iteration.index", "tool.name"]
        .iter()
        .find_map(|k| attr(span, k))
        .map(|v| v.to_string())
        .unwrap_or_default();
    format!("{}[{key}]", span.name)
}

/// Each span as `root > … > span` labels, sorted.
fn tree(spans: &[SpanData]) -> Vec<String> {
    let by_id: HashMap<SpanId, &SpanData> = spans
        .iter()
        .map(|s| (s.span_context.span_id(), s))
        .collect();
    let mut out: Vec<String> = spans
        .iter()
        .map(|s| {
            let mut chain = vec![label(s)];
            let mut cur = s.parent_span_id;
            while cur != SpanId::INVALID {
                let Some(p) = by_id.get(&cur) else {
                    chain.push("<missing parent>".to_owned());
                    break;
                };
                chain.push(label(p));
                cur = p.parent_span_id;
            }
            chain.reverse();
            chain.join(" > ")
        })
        .collect();
    out.sort();
    out
}

fn find<'a>(spans: &'a [SpanData], name: &str, key: &str, value: &str) -> &'a SpanData {
    spans
        .iter()
        .find(|sp| sp.name == name && attr(sp, key) == Some(&sv(value)))
        .unwrap_or_else(|| panic!("no {name} span with {key}={value}"))
}

#[test]
fn span_tree_covers_parallel_loop_and_sub_workflow() {
    let spans = capture(scripted_run(RunStatus::Success));
    assert_eq!(
        tree(&spans),
        vec![
            "workflow.run[main]",
            "workflow.run[main] > workflow.step[build]",
            "workflow.run[main] > workflow.step[each]",
            "workflow.run[main] > workflow.step[each] > workflow.loop.iteration[0]",
            "workflow.run[main] > workflow.step[each] > workflow.loop.iteration[0] > workflow.step[item]",
            "workflow.run[main] > workflow.step[each] > workflow.loop.iteration[1]",
            "workflow.run[main] > workflow.step[each] > workflow.loop.iteration[1] > workflow.step[item]",
            "workflow.run[main] > workflow.step[fan]",
            "workflow.run[main] > workflow.step[fan] > workflow.step[a]",
            "workflow.run[main] > workflow.step[fan] > workflow.step[b]",
            "workflow.run[main] > workflow.step[sub]",
            "workflow.run[main] > workflow.step[sub] > workflow.run[child]",
            "workflow.run[main] > workflow.step[sub] > workflow.run[child] > workflow.step[ask]",
            "workflow.run[main] > workflow.step[sub] > workflow.run[child] > workflow.step[ask] > tool.call[Read]",
        ]
    );
    // All spans of both runs share one trace.
    let trace = spans[0].span_context.trace_id();
    assert!(spans.iter().all(|sp| sp.span_context.trace_id() == trace));
}

#[test]
fn run_spans_carry_identity_status_and_exit_code() {
    let spans = capture(scripted_run(RunStatus::Success));
    let main = find(&spans, "workflow.run", "workflow.name", "main");
    assert_eq!(attr(main, "execution_id"), Some(&sv(MAIN)));
    assert_eq!(attr(main, "workflow.identifier"), Some(&sv("main")));
    assert_eq!(attr(main, "workflow.status"), Some(&sv("success")));
    assert_eq!(attr(main, "workflow.exit_code"), Some(&Value::I64(0)));
    assert_eq!(attr(main, "workflow.terminal"), Some(&sv("done")));
    assert_eq!(attr(main, "parent_execution_id"), None);
    assert_eq!(attr(main, "error.code"), None);
    assert!(attr(main, "user").is_some());
    assert_eq!(main.status, Status::Unset);

    let child = find(&spans, "workflow.run", "workflow.name", "child");
    assert_eq!(attr(child, "execution_id"), Some(&sv(CHILD)));
    assert_eq!(attr(child, "parent_execution_id"), Some(&sv(MAIN)));
    assert_eq!(attr(child, "workflow.status"), Some(&sv("success")));
}

#[test]
fn failed_run_gets_error_status_and_code() {
    let spans = capture(scripted_run(RunStatus::Failure));
    let main = find(&spans, "workflow.run", "workflow.name", "main");
    assert_eq!(attr(main, "workflow.status"), Some(&sv("failure")));
    assert_eq!(attr(main, "workflow.exit_code"), Some(&Value::I64(3)));
    assert_eq!(
        attr(main, "error.code"),
        Some(&sv("EXECUTION.COMMAND.FAILED"))
    );
    assert_eq!(main.status, Status::error("step a failed"));
}

#[test]
fn step_spans_carry_kind_status_exit_code_and_attempts() {
    let spans = capture(scripted_run(RunStatus::Success));
    let a = find(&spans, "workflow.step", "step.name", "a");
    assert_eq!(attr(a, "step.type"), Some(&sv("command")));
    assert_eq!(attr(a, "step.path"), Some(&sv("a")));
    assert_eq!(attr(a, "step.status"), Some(&sv("failed")));
    assert_eq!(attr(a, "step.exit_code"), Some(&Value::I64(2)));
    assert_eq!(attr(a, "step.attempts"), Some(&Value::I64(1)));
    assert_eq!(attr(a, "step.error"), Some(&sv("exit status 2: boom")));
    assert_eq!(a.status, Status::error("exit status 2: boom"));

    let fan = find(&spans, "workflow.step", "step.name", "fan");
    assert_eq!(attr(fan, "step.type"), Some(&sv("parallel")));
    assert_eq!(attr(fan, "step.status"), Some(&sv("completed")));
    assert_eq!(attr(fan, "step.exit_code"), None);
    assert_eq!(fan.status, Status::Unset);

    let each = find(&spans, "workflow.step", "step.name", "each");
    assert_eq!(attr(each, "step.type"), Some(&sv("for_each")));
    assert_eq!(attr(each, "loop.iterations"), Some(&Value::I64(2)));

    let first = find(&spans, "workflow.step", "step.path", "loop:0/item");
    assert_eq!(attr(first, "step.attempts"), Some(&Value::I64(2)));
    let retry: Vec<(String, Vec<(String, String)>)> = first
        .events
        .iter()
        .map(|e| {
            let attrs = e
                .attributes
                .iter()
                .map(|kv| (kv.key.to_string(), kv.value.to_string()))
                .collect();
            (e.name.to_string(), attrs)
        })
        .collect();
    assert_eq!(
        retry,
        vec![(
            "step.retry".to_owned(),
            vec![
                ("level".to_owned(), "INFO".to_owned()),
                ("target".to_owned(), TARGET.to_owned()),
                ("retry.attempt".to_owned(), "2".to_owned()),
                ("retry.delay_ms".to_owned(), "100".to_owned()),
            ]
        )]
    );

    let iteration = find(&spans, "workflow.loop.iteration", "loop.name", "each");
    assert_eq!(attr(iteration, "iteration.index"), Some(&Value::I64(0)));

    let ask = find(&spans, "workflow.step", "step.name", "ask");
    assert_eq!(attr(ask, "agent.tokens_used"), Some(&Value::I64(42)));
    let tool = find(&spans, "tool.call", "tool.name", "Read");
    assert_eq!(attr(tool, "tool.call_id"), Some(&sv("call-1")));
    assert_eq!(attr(tool, "tool.is_error"), Some(&Value::Bool(false)));
}

#[test]
fn nested_loops_and_parallel_inside_a_loop_body() {
    let mut s = Script::new();
    s.run_started(MAIN, None, "nest");
    s.started(MAIN, None, "outer", "while");
    s.started(MAIN, None, "loop:0/inner", "for_each");
    s.started(MAIN, None, "loop:0/loop:0/leaf", "command");
    s.ok(MAIN, None, "loop:0/loop:0/leaf", "command");
    s.started(MAIN, None, "loop:0/loop:1/leaf", "command");
    s.ok(MAIN, None, "loop:0/loop:1/leaf", "command");
    s.ok(MAIN, None, "loop:0/inner", "for_each");
    s.started(MAIN, None, "loop:1/par", "parallel");
    s.started(MAIN, None, "loop:1/x", "command");
    s.started(MAIN, None, "loop:1/y", "command");
    s.ok(MAIN, None, "loop:1/y", "command");
    s.ok(MAIN, None, "loop:1/x", "command");
    s.ok(MAIN, None, "loop:1/par", "parallel");
    s.ok(MAIN, None, "outer", "while");
    s.started(MAIN, None, "after", "command");
    s.ok(MAIN, None, "after", "command");
    s.run_finished(MAIN, None, "nest", RunStatus::Success);
    let spans = capture(s.out);
    let o = "workflow.run[nest] > workflow.step[outer]";
    let expected: Vec<String> = vec![
        "workflow.run[nest]".to_owned(),
        "workflow.run[nest] > workflow.step[after]".to_owned(),
        o.to_owned(),
        format!("{o} > workflow.loop.iteration[0]"),
        format!("{o} > workflow.loop.iteration[0] > workflow.step[inner]"),
        format!(
            "{o} > workflow.loop.iteration[0] > workflow.step[inner] > workflow.loop.iteration[0]"
        ),
        format!(
            "{o} > workflow.loop.iteration[0] > workflow.step[inner] > workflow.loop.iteration[0] > workflow.step[leaf]"
        ),
        format!(
            "{o} > workflow.loop.iteration[0] > workflow.step[inner] > workflow.loop.iteration[1]"
        ),
        format!(
            "{o} > workflow.loop.iteration[0] > workflow.step[inner] > workflow.loop.iteration[1] > workflow.step[leaf]"
        ),
        format!("{o} > workflow.loop.iteration[1]"),
        format!("{o} > workflow.loop.iteration[1] > workflow.step[par]"),
        format!("{o} > workflow.loop.iteration[1] > workflow.step[par] > workflow.step[x]"),
        format!("{o} > workflow.loop.iteration[1] > workflow.step[par] > workflow.step[y]"),
    ];
    assert_eq!(tree(&spans), expected);
    let outer = find(&spans, "workflow.step", "step.name", "outer");
    assert_eq!(attr(outer, "loop.iterations"), Some(&Value::I64(2)));
    assert_eq!(attr(outer, "step.type"), Some(&sv("while")));
}

#[test]
fn unfinished_steps_are_closed_with_the_run() {
    let mut s = Script::new();
    s.run_started(MAIN, None, "cut");
    s.started(MAIN, None, "each", "for_each");
    s.started(MAIN, None, "loop:0/item", "command");
    s.run_finished(MAIN, None, "cut", RunStatus::Cancelled);
    let spans = capture(s.out);
    assert_eq!(
        tree(&spans),
        vec![
            "workflow.run[cut]",
            "workflow.run[cut] > workflow.step[each]",
            "workflow.run[cut] > workflow.step[each] > workflow.loop.iteration[0]",
            "workflow.run[cut] > workflow.step[each] > workflow.loop.iteration[0] > workflow.step[item]",
        ]
    );
    let run = find(&spans, "workflow.run", "workflow.name", "cut");
    assert_eq!(attr(run, "workflow.status"), Some(&sv("cancelled")));
}

#[test]
fn without_an_interested_subscriber_nothing_is_kept() {
    let _serial = SUBSCRIBERS.lock().unwrap_or_else(PoisonError::into_inner);
    let projection = span_projection();
    for e in scripted_run(RunStatus::Success).into_iter().take(5) {
        projection.emit(e);
    }
    assert_eq!(projection.open_runs.load(Ordering::Relaxed), 0);
    assert!(projection.state.lock().unwrap().runs.is_empty());
}

#[test]
fn log_only_subscriber_does_not_open_spans() {
    let _serial = SUBSCRIBERS.lock().unwrap_or_else(PoisonError::into_inner);
    let (dispatch, _guard) = crate::init::build_dispatch(
        &crate::LogConfig {
            level: LevelFilterAlias::TRACE,
            ..crate::LogConfig::default()
        },
        None,
    )
    .unwrap();
    let projection = span_projection();
    tracing::dispatcher::with_default(&dispatch, || {
        for e in scripted_run(RunStatus::Success).into_iter().take(5) {
            projection.emit(e);
        }
    });
    assert_eq!(projection.open_runs.load(Ordering::Relaxed), 0);
}

use tracing::level_filters::LevelFilter as LevelFilterAlias;
