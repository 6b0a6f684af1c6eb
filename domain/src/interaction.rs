//! Typed interactions: what a run asks a front-end, and the answers it takes.
//!
//! The engine asks through a [`RunEvent::InteractionRequired`](crate::event::RunEvent) event
//! that carries an [`InteractionRequest`]; a front-end answers with
//! `RunService::respond(request_id, Answer)`. The engine never parses user text: each
//! front-end renders the request its own way (a terminal prompt, ACP
//! `session/request_permission`, an HTTP respond call) and turns what the user did into an
//! [`Answer`]. Every request ends with exactly one [`Resolution`], announced by a
//! `RunEvent::InteractionResolved` event.

use serde::Deserialize;
use serde::Serialize;

use crate::event::StepPreview;
use crate::workflow::InputDef;

/// A question a run asks, waiting for [`Answer`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InteractionRequest {
    /// Unique among the live requests of the process; what `respond` is called with.
    pub request_id: String,
    /// The state the request belongs to; `None` for requests before the first state (missing
    /// inputs).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step: Option<String>,
    /// What is asked (serialized flat: `"kind": "approval"` beside its fields).
    #[serde(flatten)]
    pub kind: RequestKind,
    /// How long the run waits, in milliseconds, before the request resolves as
    /// [`Resolution::TimedOut`]; `None`: no limit (a cancel still resolves it). What a
    /// timeout means: an approval takes its `on_timeout` option (none: the step fails with
    /// `EXECUTION.APPROVAL.TIMED_OUT`); a missing input is not given (the run does not
    /// start); a conversation turn ends the conversation; a breakpoint aborts the run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
}

/// The kinds of question, each with what a front-end needs to render it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum RequestKind {
    /// A required input has no value (no flag, config or default). Answer with
    /// [`Answer::Value`] (checked against the declaration when it is given: a value that
    /// breaks a rule is refused by `respond` with `USER.INPUT.VALIDATION_FAILED` naming the
    /// rule, see [`refused_value`], and the request stays pending) or [`Answer::EndOfInput`]
    /// (the run does not start: the usual `USER.INPUT.VALIDATION_FAILED` error).
    MissingInput {
        /// The input's declaration (type, description, enum values, rules). A name matching
        /// the secret rule (`mask::is_secret_name`) should be read without echo.
        input: Box<InputDef>,
        /// Why the previous answer was refused, when this asks again.
        #[serde(skip_serializing_if = "Option::is_none")]
        problem: Option<String>,
    },
    /// A conversation turn of an agent step in `mode: conversation`. Answer with
    /// [`Answer::Value`] (the user's message; empty, `exit` or `quit` ends the conversation) or
    /// [`Answer::EndOfInput`].
    ConversationTurn {
        /// What to show before reading (the agent's last answer is already in the stream).
        prompt: String,
    },
    /// `--interactive` / `--breakpoint`: the run stopped before a state. Answer with
    /// [`Answer::Decision`]; [`Answer::EndOfInput`] (the user closed the input) and
    /// [`Answer::Unattended`] end the run with `USER.FACADE.SESSION_CLOSED` (exit 1, not the
    /// signal code of a cancel).
    Breakpoint {
        /// Internal kind of the state about to run.
        state_kind: String,
        /// The state that ran before (what [`BreakpointDecision::Retry`] runs again).
        #[serde(skip_serializing_if = "Option::is_none")]
        previous: Option<String>,
        /// What to show about the state before asking.
        preview: Box<StepPreview>,
    },
    /// An approval gate (`approval:` on a step), asked before the step runs. Answer with
    /// [`Answer::Option`] naming one of `options`, or [`Answer::Unattended`] when nobody can
    /// be asked.
    Approval {
        /// The gate's (interpolated, masked) message.
        message: String,
        /// The choices, in order; at least one allows and one rejects.
        options: Vec<ApprovalOption>,
    },
}

/// One choice of an approval gate. Kinds are ACP's (ACP v1 schema, `PermissionOptionKind`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalOption {
    /// What [`Answer::Option`] names.
    pub id: String,
    /// Label shown to the user.
    pub name: String,
    /// Whether choosing it lets the step run.
    pub kind: ApprovalKind,
}

/// ACP v1 `PermissionOptionKind`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalKind {
    /// Allow this time.
    AllowOnce,
    /// Allow, and do not ask again for this gate in this run.
    AllowAlways,
    /// Reject this time.
    RejectOnce,
    /// Reject, and reject this gate again without asking in this run.
    RejectAlways,
}

impl ApprovalKind {
    /// Whether the step runs.
    pub const fn allows(self) -> bool {
        matches!(self, Self::AllowOnce | Self::AllowAlways)
    }

    /// Whether the decision holds for the rest of the run (the gate is not asked again).
    pub const fn remembered(self) -> bool {
        matches!(self, Self::AllowAlways | Self::RejectAlways)
    }

    /// The workflow-file spelling: ACP's (`allow_once`, …), also accepted: `allow` and
    /// `reject` (the `_once` kinds). `None` for anything else.
    pub fn parse(text: &str) -> Option<Self> {
        match text.trim().to_ascii_lowercase().as_str() {
            "allow_once" | "allow" | "approve" => Some(Self::AllowOnce),
            "allow_always" => Some(Self::AllowAlways),
            "reject_once" | "reject" => Some(Self::RejectOnce),
            "reject_always" => Some(Self::RejectAlways),
            _ => None,
        }
    }

    /// The ACP spelling (`allow_once`, …).
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::AllowOnce => "allow_once",
            Self::AllowAlways => "allow_always",
            Self::RejectOnce => "reject_once",
            Self::RejectAlways => "reject_always",
        }
    }
}

impl ApprovalOption {
    /// The options of a gate that declares none: `approve` (allow once) and `reject`
    /// (reject once).
    pub fn defaults() -> Vec<Self> {
        vec![
            Self {
                id: "approve".into(),
                name: "Approve".into(),
                kind: ApprovalKind::AllowOnce,
            },
            Self {
                id: "reject".into(),
                name: "Reject".into(),
                kind: ApprovalKind::RejectOnce,
            },
        ]
    }
}

impl RequestKind {
    /// Short name of the kind (`missing_input`, `conversation_turn`, `breakpoint`,
    /// `approval`), as serialized.
    pub const fn name(&self) -> &'static str {
        match self {
            Self::MissingInput { .. } => "missing_input",
            Self::ConversationTurn { .. } => "conversation_turn",
            Self::Breakpoint { .. } => "breakpoint",
            Self::Approval { .. } => "approval",
        }
    }

    /// Checks that `answer` fits this kind of request: a value or end of input for missing
    /// inputs and conversation turns, a decision for breakpoints, the id of one of the
    /// options for approvals.
    ///
    /// # Errors
    /// Why it does not fit (for `USER.FACADE.INPUT_REJECTED`).
    pub fn accepts(&self, answer: &Answer) -> Result<(), String> {
        let what = match answer {
            Answer::Value(_) => "a value",
            Answer::EndOfInput => "end of input",
            Answer::Decision(_) => "a breakpoint decision",
            Answer::Option(_) => "an option id",
            Answer::Unattended(_) => "an unattended refusal",
        };
        let fits = match (self, answer) {
            (
                Self::MissingInput { .. } | Self::ConversationTurn { .. },
                Answer::Value(_) | Answer::EndOfInput,
            )
            | (
                Self::Breakpoint { .. },
                Answer::Decision(_) | Answer::EndOfInput | Answer::Unattended(_),
            )
            | (Self::Approval { .. }, Answer::Unattended(_)) => true,
            (Self::Approval { options, .. }, Answer::Option(id)) => {
                if options.iter().any(|o| o.id == *id) {
                    true
                } else {
                    let ids: Vec<&str> = options.iter().map(|o| o.id.as_str()).collect();
                    return Err(format!(
                        "approval has no option '{id}' (options: {})",
                        ids.join(", ")
                    ));
                }
            }
            _ => false,
        };
        if fits {
            Ok(())
        } else {
            let wanted = match self {
                Self::MissingInput { .. } | Self::ConversationTurn { .. } => {
                    "a value or end of input"
                }
                Self::Breakpoint { .. } => "a breakpoint decision",
                Self::Approval { .. } => "an option id",
            };
            let name = self.name();
            let article = if name.starts_with(['a', 'e', 'i', 'o', 'u']) {
                "an"
            } else {
                "a"
            };
            Err(format!(
                "{article} {name} request takes {wanted}, not {what}"
            ))
        }
    }
}

/// The detail key of a `respond` refusal that names the broken input rule (see
/// [`refused_value`]).
pub const REFUSED_VALUE_DETAIL: &str = "refused_value";

/// The detail key of that refusal naming the input whose value was refused.
pub const REFUSED_INPUT_DETAIL: &str = "input";

/// The rule a refused missing-input value broke (`value "nope" does not match pattern
/// "^v[0-9]+$"`, secrets masked), when `error` is `respond`'s refusal of such a value: the
/// request is still pending, and a front-end asks again with this as the problem. `None`
/// for any other error.
pub fn refused_value(error: &crate::AwfError) -> Option<&str> {
    if error.code() != crate::ErrorCode::UserInputValidationFailed {
        return None;
    }
    error
        .details()
        .get(REFUSED_VALUE_DETAIL)
        .and_then(serde_json::Value::as_str)
}

/// What a front-end answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", content = "value", rename_all = "snake_case")]
pub enum Answer {
    /// A typed value (missing input, conversation turn).
    Value(String),
    /// The user closed the input (EOF, Ctrl-D) without answering.
    EndOfInput,
    /// What to do at a breakpoint.
    Decision(BreakpointDecision),
    /// The id of the chosen [`ApprovalOption`].
    Option(String),
    /// The front-end has nobody to ask (the terminal front-end: no terminal); the text says
    /// why and what to do instead. Not a user's decision: an approval gate fails with
    /// `EXECUTION.APPROVAL.REJECTED` and its state's `approval` stays null; a breakpoint ends
    /// the run with `USER.FACADE.SESSION_CLOSED`. Taken by approvals and breakpoints only.
    Unattended(String),
}

/// A decision at a breakpoint (`--interactive`). Source: spec/workflow.md §3.12.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "decision", rename_all = "snake_case")]
pub enum BreakpointDecision {
    /// Run the state.
    Continue,
    /// Do not run it; take its `on_success` route.
    Skip,
    /// End the run (cancelled).
    Abort,
    /// Run the previous state again.
    Retry,
    /// Log the run's context, then ask again.
    Inspect,
    /// Set an input, then ask again.
    Edit {
        /// Input name.
        name: String,
        /// New value.
        value: String,
    },
}

/// How a request ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", content = "answer", rename_all = "snake_case")]
pub enum Resolution {
    /// A front-end answered.
    Answered(Answer),
    /// Nobody answered within `timeout_ms`.
    TimedOut,
    /// The run was cancelled while waiting.
    Cancelled,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_must_fit_the_kind_of_request() {
        let approval = RequestKind::Approval {
            message: "deploy?".into(),
            options: ApprovalOption::defaults(),
        };
        assert!(approval.accepts(&Answer::Option("approve".into())).is_ok());
        let e = approval
            .accepts(&Answer::Option("maybe".into()))
            .unwrap_err();
        assert!(e.contains("no option 'maybe'"), "{e}");
        let e = approval.accepts(&Answer::Value("y".into())).unwrap_err();
        assert_eq!(e, "an approval request takes an option id, not a value");
        let turn = RequestKind::ConversationTurn {
            prompt: "> ".into(),
        };
        assert!(turn.accepts(&Answer::EndOfInput).is_ok());
        assert!(
            turn.accepts(&Answer::Decision(BreakpointDecision::Continue))
                .is_err()
        );
    }

    #[test]
    fn a_request_serializes_flat_with_its_kind() {
        let r = InteractionRequest {
            request_id: "run-1:2".into(),
            step: Some("deploy".into()),
            kind: RequestKind::Approval {
                message: "Deploy?".into(),
                options: ApprovalOption::defaults()[..1].to_vec(),
            },
            timeout_ms: Some(1000),
        };
        assert_eq!(
            serde_json::to_value(&r).unwrap(),
            serde_json::json!({
                "request_id": "run-1:2", "step": "deploy", "kind": "approval",
                "message": "Deploy?",
                "options": [{"id": "approve", "name": "Approve", "kind": "allow_once"}],
                "timeout_ms": 1000
            })
        );
        let done = Resolution::Answered(Answer::Decision(BreakpointDecision::Skip));
        assert_eq!(
            serde_json::to_value(&done).unwrap(),
            serde_json::json!({"outcome": "answered", "answer": {"type": "decision", "value": {"decision": "skip"}}})
        );
    }

    #[test]
    fn kinds_parse_in_acp_and_short_spellings() {
        assert_eq!(ApprovalKind::parse("allow"), Some(ApprovalKind::AllowOnce));
        assert_eq!(
            ApprovalKind::parse("Reject_Always"),
            Some(ApprovalKind::RejectAlways)
        );
        assert_eq!(ApprovalKind::parse("maybe"), None);
        assert!(ApprovalKind::AllowAlways.allows() && ApprovalKind::AllowAlways.remembered());
        assert!(!ApprovalKind::RejectOnce.allows() && !ApprovalKind::RejectOnce.remembered());
    }
}
