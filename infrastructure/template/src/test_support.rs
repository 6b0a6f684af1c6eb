//! Owned data behind a [`Scope`] for unit tests.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;
use std::time::UNIX_EPOCH;

use awf_domain::run::StepState;
use awf_domain::run::StepStatus;
use awf_domain::run::TokenUsage;
use awf_domain::scope::ErrorInfo;
use awf_domain::scope::LoopFrame;
use awf_domain::scope::RuntimeInfo;
use awf_domain::scope::Scope;
use awf_domain::scope::WorkflowInfo;
use serde_json::Map;
use serde_json::Value;
use serde_json::json;

pub(crate) struct Data {
    pub(crate) inputs: Map<String, Value>,
    pub(crate) states: BTreeMap<String, StepState>,
    pub(crate) workflow: WorkflowInfo,
    pub(crate) env: BTreeMap<String, String>,
    pub(crate) context: RuntimeInfo,
    pub(crate) awf: BTreeMap<String, String>,
    pub(crate) loop_frame: Option<LoopFrame>,
    pub(crate) error: Option<ErrorInfo>,
    pub(crate) workflow_dir: PathBuf,
}

pub(crate) fn state(name: &str, output: &str, exit: Option<i32>) -> StepState {
    let mut s = StepState::running(name, UNIX_EPOCH);
    s.status = StepStatus::Completed;
    s.output = output.to_owned().into();
    s.exit_code = exit;
    s.attempts = 1;
    s
}

impl Data {
    pub(crate) fn new() -> Self {
        let inputs = match json!({
            "name": "world",
            "count": 3,
            "flag": false,
            "fl": 2.5,
            "list": ["a", "b"],
            "m": {"k": "v"},
            "verbose": "true",
            "num": "10",
            "ratio": "2.5",
            "msg": "it's a test",
        }) {
            Value::Object(m) => m,
            _ => Map::new(),
        };
        let mut states = BTreeMap::new();
        let mut build = state("build", "built ok\n", Some(0));
        build.stderr = "warn\n".to_owned().into();
        states.insert("build".to_owned(), build);
        let mut agent = state("agent", "Hello", None);
        agent.response = Some(json!({
            "title": "Hello", "n": 3, "f": 2.5, "b": true,
            "arr": [1, "a"], "nested": {"k": "v"}, "big": 1000000
        }));
        agent.json = Some(json!([{"a": 1}, {"a": 2}]));
        agent.tokens = TokenUsage {
            input: 10,
            output: 5,
            total: 15,
            estimated: true,
        };
        states.insert("agent".to_owned(), agent);
        let mut failed = state("check_tests_passed", "ok TESTS_PASSED\n", Some(1));
        failed.status = StepStatus::Failed;
        failed.error = Some("exit status 1".to_owned());
        states.insert("check_tests_passed".to_owned(), failed);
        let mut call = state("call", "{\"result\":\"x\"}", None);
        call.outputs.insert("result".to_owned(), "x".to_owned());
        states.insert("call".to_owned(), call);
        let mut env = BTreeMap::new();
        env.insert("HOME".to_owned(), "/home/u".to_owned());
        env.insert("EMPTY".to_owned(), String::new());
        let mut awf = BTreeMap::new();
        awf.insert("prompts_dir".to_owned(), "/p/.awf/prompts".to_owned());
        Self {
            inputs,
            states,
            workflow: WorkflowInfo {
                id: "run-1".to_owned(),
                name: "demo".to_owned(),
                current_state: "build".to_owned(),
                started_at: UNIX_EPOCH + Duration::from_secs(1_735_787_045),
                duration: Duration::from_millis(1501),
            },
            env,
            context: RuntimeInfo {
                working_dir: "/work".to_owned(),
                user: "alice".to_owned(),
                hostname: "box".to_owned(),
            },
            awf,
            loop_frame: None,
            error: None,
            workflow_dir: PathBuf::from("/nonexistent"),
        }
    }

    pub(crate) fn scope(&self) -> Scope<'_> {
        Scope {
            inputs: &self.inputs,
            states: &self.states,
            workflow: &self.workflow,
            env: &self.env,
            context: &self.context,
            awf: &self.awf,
            loop_frame: self.loop_frame.as_ref(),
            error: self.error.as_ref(),
            workflow_dir: &self.workflow_dir,
        }
    }

    pub(crate) fn with_loop(mut self, item: Value, index: usize, length: i64) -> Self {
        self.loop_frame = Some(LoopFrame {
            item,
            index,
            first: index == 0,
            last: length >= 0 && index + 1 == usize::try_from(length).unwrap_or(0),
            length,
            parent: None,
        });
        self
    }
}
