//! Event builders shared by the suites.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;
use std::time::SystemTime;
use std::time::UNIX_EPOCH;

use awf_domain::event::EventEnvelope;
use awf_domain::event::EventPublisher;
use awf_domain::event::OutputStream;
use awf_domain::event::RunEvent;
use awf_domain::run::RunId;
use awf_domain::run::RunResult;
use awf_domain::run::RunStatus;
use awf_domain::run::StepState;
use awf_domain::run::StepStatus;
use awf_store::Store;
use awf_store::StorePaths;
use serde_json::Map;
use serde_json::Value;

pub fn at(ms: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(1_764_464_523_000 + ms)
}

pub fn open(root: &Path, user: &str) -> Store {
    let env = BTreeMap::from([("USER".to_owned(), user.to_owned())]);
    Store::open(StorePaths::from_env(root, &env)).unwrap()
}

/// Emits a whole successful run of `steps` command steps (with output) and flushes.
pub fn run_workflow(sink: &dyn EventPublisher, run_id: &str, start_ms: u64, steps: usize) {
    let mut seq = 0;
    let mut clock = start_ms;
    let mut emit = |path: &str, event: RunEvent| {
        seq += 1;
        clock += 1;
        sink.emit(EventEnvelope {
            seq,
            run_id: RunId(run_id.to_owned()),
            parent_run_id: None,
            at: at(clock),
            path: path.to_owned(),
            iteration: None,
            event,
        });
    };
    let mut inputs = Map::new();
    inputs.insert("who".into(), Value::from(run_id));
    emit(
        "",
        RunEvent::RunStarted {
            workflow: "stress".into(),
            identifier: "stress.yaml".into(),
            workflow_path: None,
            inputs,
            resumed_from: None,
            pid: 1,
            mocks: Default::default(),
            working_dir: None,
        },
    );
    for i in 0..steps {
        let name = format!("s{i}");
        emit(
            &name,
            RunEvent::StepStarted {
                step: name.clone(),
                kind: "command".into(),
                command: None,
            },
        );
        emit(
            &name,
            RunEvent::OutputChunk {
                step: name.clone(),
                stream: OutputStream::Stdout,
                text: format!("{run_id} {i}\n").into(),
            },
        );
        let mut st = StepState::running(&name, at(start_ms));
        st.status = StepStatus::Completed;
        st.output = format!("{run_id} {i}\n").into();
        st.exit_code = Some(0);
        st.attempts = 1;
        st.completed_at = Some(at(start_ms + 1));
        emit(
            &name,
            RunEvent::StepFinished {
                step: name.clone(),
                kind: "command".into(),
                state: Box::new(st),
            },
        );
    }
    emit(
        "",
        RunEvent::RunFinished {
            result: Box::new(RunResult {
                run_id: Some(RunId(run_id.to_owned())),
                workflow: "stress.yaml".into(),
                status: RunStatus::Success,
                exit_code: 0,
                terminal: Some("done".into()),
                duration_ms: 5,
                states: BTreeMap::new(),
                outputs: BTreeMap::new(),
                error: None,
                message: None,
                spend: None,
            }),
        },
    );
}
