//! The error taxonomy: every failure that crosses a port is an [`AwfError`] carrying an
//! [`ErrorCode`]. The code's [`Category`] decides the process exit code, never the message.
//!
//! Source: spec/workflow.md §4.5 (AWF's taxonomy), extended with codes for failures AWF (Go)
//! only reported as plain strings; see docs/compatibility.md.

use std::collections::BTreeMap;
use std::fmt;

use serde::Serialize;
use serde_json::Value;

/// The four failure categories. Exit codes: USER 1, WORKFLOW 2, EXECUTION 3, SYSTEM 4.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Category {
    /// Bad input from the person running awf (flags, inputs, missing files).
    User,
    /// The workflow definition is wrong (parse or validation).
    Workflow,
    /// A step or the run failed while executing.
    Execution,
    /// The machine failed us (I/O, permissions, internal faults).
    System,
}

impl Category {
    /// Process exit code for this category.
    pub const fn exit_code(self) -> u8 {
        match self {
            Self::User => 1,
            Self::Workflow => 2,
            Self::Execution => 3,
            Self::System => 4,
        }
    }

    /// Upper-case prefix used in codes (`USER`, `WORKFLOW`, …).
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::User => "USER",
            Self::Workflow => "WORKFLOW",
            Self::Execution => "EXECUTION",
            Self::System => "SYSTEM",
        }
    }
}

macro_rules! error_codes {
    ($( $variant:ident => $code:literal, $cat:ident, $desc:literal, $res:literal; )*) => {
        /// Every error code awf can report, `CATEGORY.SUBCATEGORY.SPECIFIC` on the wire.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum ErrorCode { $( #[doc = $desc] $variant, )* }

        impl ErrorCode {
            /// All codes, in catalogue order.
            pub const ALL: &'static [ErrorCode] = &[ $( ErrorCode::$variant, )* ];

            /// The dotted wire form, e.g. `USER.INPUT.VALIDATION_FAILED`.
            pub const fn as_str(self) -> &'static str {
                match self { $( ErrorCode::$variant => $code, )* }
            }

            /// The category, which decides the exit code.
            pub const fn category(self) -> Category {
                match self { $( ErrorCode::$variant => Category::$cat, )* }
            }

            /// One sentence saying what went wrong.
            pub const fn description(self) -> &'static str {
                match self { $( ErrorCode::$variant => $desc, )* }
            }

            /// What the user can do about it.
            pub const fn resolution(self) -> &'static str {
                match self { $( ErrorCode::$variant => $res, )* }
            }
        }
    };
}

error_codes! {
    UserInputMissingFile => "USER.INPUT.MISSING_FILE", User,
        "A file named on the command line or in the workflow (workflow, script_file, prompt_file) does not exist.",
        "Check the path; workflow names are looked up in $AWF_WORKFLOWS_PATH, .awf/workflows and the global config dir.";
    UserInputInvalidFormat => "USER.INPUT.INVALID_FORMAT", User,
        "A command-line value has the wrong shape (for example --input without '=').",
        "Use the documented form, e.g. --input name=value.";
    UserInputValidationFailed => "USER.INPUT.VALIDATION_FAILED", User,
        "A workflow input is missing or breaks one of its validation rules (type, enum, pattern, min, max, file_exists).",
        "Pass a valid value with --input name=value; the `inputs:` section of the workflow file lists each input and its rules.";
    UserInputMissingSkill => "USER.INPUT.MISSING_SKILL", User,
        "A skill referenced by an agent step cannot be found.",
        "Create <skills dir>/<name>/SKILL.md or fix the name.";
    UserInputMissingRole => "USER.INPUT.MISSING_ROLE", User,
        "A role referenced by an agent step cannot be found.",
        "Create <roles dir>/<name>/AGENTS.md or fix the name.";
    UserFacadeWorkflowNotFound => "USER.FACADE.WORKFLOW_NOT_FOUND", User,
        "No workflow with this name exists in any workflow directory.",
        "Run `awf list` to see the available workflows, or pass a file path.";
    UserFacadeIdentifierEmpty => "USER.FACADE.IDENTIFIER_EMPTY", User,
        "The workflow identifier is empty.",
        "Pass a workflow name or a path to a workflow file.";
    UserFacadeInputRejected => "USER.FACADE.INPUT_REJECTED", User,
        "A response was sent to a run that is not waiting for one.",
        "Only respond to a pending input or permission request.";
    UserFacadeSessionClosed => "USER.FACADE.SESSION_CLOSED", User,
        "The run session has already ended.",
        "Start a new run.";
    UserFacadeRunNotFound => "USER.FACADE.RUN_NOT_FOUND", User,
        "No run with this id is known to this process or recorded in the store.",
        "Check the run id; `awf history` lists recorded runs.";
    UserFacadeRunLimit => "USER.FACADE.RUN_LIMIT", User,
        "The cap on concurrent runs of this process is reached; the run was not started (nothing queues it).",
        "Wait for a run to finish (or cancel one), then start it again.";
    UserFacadeUnauthorized => "USER.FACADE.UNAUTHORIZED", User,
        "An HTTP request to `awf serve` carried no bearer token or a wrong one (the server was started with `--token-env`).",
        "Send `Authorization: Bearer <token>` with the value of the variable `--token-env` names.";
    UserAgentInvalidOption => "USER.AGENT.INVALID_OPTION", User,
        "An agent step's provider option has a wrong value or type (for example a model name the provider does not accept).",
        "Fix the option under `options:`; the message names what the provider accepts.";
    UserAgentUnknownProvider => "USER.AGENT.UNKNOWN_PROVIDER", User,
        "An agent step names a provider awf does not know.",
        "Use one of claude, codex, gemini, opencode, github_copilot, mistral_vibe, openai_compatible.";
    UserMcpProxyUnknownKey => "USER.MCP_PROXY.UNKNOWN_KEY", User,
        "An `mcp_proxy:` block or an `awf mcp-serve` config file has a key awf does not know.",
        "Keep to enable, intercept_builtins and plugin_tools in `mcp_proxy:`; the message lists every unknown key.";
    UserMcpProxyEmptyProxy => "USER.MCP_PROXY.EMPTY_PROXY", User,
        "The MCP proxy is enabled with `intercept_builtins: false` and no `plugin_tools`, so it would serve no tool.",
        "Set `intercept_builtins: true`, list plugin operations under `plugin_tools`, or remove the block.";
    UserMcpProxyNotEnabled => "USER.MCP_PROXY.NOT_ENABLED", User,
        "An `mcp_proxy:` block sets `intercept_builtins` or `plugin_tools` but not `enable: true`, so it has no effect (a warning).",
        "Add `enable: true` to the block to turn the proxy on, or remove the block.";
    UserMcpProxyNameCollision => "USER.MCP_PROXY.NAME_COLLISION", User,
        "Two tools of the MCP proxy have the same name (a plugin listed twice, or two providers offering one name).",
        "List each plugin once and give every exposed operation a distinct `<plugin>_<op>` name.";
    UserMcpProxyUnknownPlugin => "USER.MCP_PROXY.UNKNOWN_PLUGIN", User,
        "`plugin_tools` names a plugin awf does not know.",
        "Check the plugin name; only plugins awf can run (the built-in `http` operation) can be exposed.";
    UserMcpProxyUnknownOperation => "USER.MCP_PROXY.UNKNOWN_OPERATION", User,
        "`plugin_tools[].expose` names an operation the plugin does not have.",
        "Check the operation names of the plugin.";
    UserMcpProxyUnsupportedProvider => "USER.MCP_PROXY.UNSUPPORTED_PROVIDER", User,
        "The step's provider cannot hide its native tools, so the MCP proxy only adds tools beside them (a warning).",
        "Use claude or openai_compatible for full interception, or accept that native tools stay available.";
    UserMcpProxyInfiniteLoopGuard => "USER.MCP_PROXY.INFINITE_LOOP_GUARD", User,
        "The model kept asking for tool calls past the round limit, or asked for tool calls without naming any.",
        "Make the prompt say when to stop, or raise the limit of tool rounds.";
    UserMcpProxyInvalidConfig => "USER.MCP_PROXY.INVALID_CONFIG", User,
        "The `awf mcp-serve` config file is missing, unreadable, not JSON of the expected shape, or has a bad value.",
        "Pass `--config <file>` with a JSON object such as {\"intercept_builtins\": true, \"root_dir\": \"/abs/dir\"}; its keys, all optional: intercept_builtins, plugin_tools, root_dir, run_id, step, audit_path, traceparent, fs_delegate, limits (README, \"awf mcp-serve: awf's tools over MCP\", says what each takes).";
    UserAcpInvalidConfig => "USER.ACP.INVALID_CONFIG", User,
        "The `awf acp-serve --config` file is missing, unreadable, not of the expected shape, or names a workflows_dir that is not a directory.",
        "Give a JSON or YAML file with `workflows_dir` and/or `default_workflow`; the message says what is wrong.";
    UserAcpInvalidPrompt => "USER.ACP.INVALID_PROMPT", User,
        "An ACP prompt is not a `/workflow key=value ...` command (and no default workflow is configured), is too large, or has a bad input pair.",
        "Start the prompt with a slash command from the editor's / menu, e.g. `/code-review file=main.go`.";
    UserAcpUnsupportedBlock => "USER.ACP.UNSUPPORTED_BLOCK", User,
        "An ACP prompt holds content awf's workflows cannot take (image, audio, a binary resource, an unknown block type).",
        "Send text, embedded text resources or resource links (bound to an input as `key=@file`).";
    UserAcpPromptInFlight => "USER.ACP.PROMPT_IN_FLIGHT", User,
        "An ACP session got a prompt while its previous prompt is still running.",
        "Wait for the running prompt's response, or send session/cancel first.";
    UserAcpUnknownSession => "USER.ACP.UNKNOWN_SESSION", User,
        "An ACP request names a session this agent does not hold.",
        "Send session/new (or session/load for a session listed by session/list) first.";
    UserAcpInvalidCwd => "USER.ACP.INVALID_CWD", User,
        "An ACP session/new or session/load has a `cwd` that is missing, relative, or not an existing directory.",
        "Send the project directory as an absolute path.";
    UserAcpInvalidMcpServer => "USER.ACP.INVALID_MCP_SERVER", User,
        "An entry of ACP `mcpServers` is malformed, uses a transport awf does not advertise (http, sse), or takes a name reserved for awf's proxy (`awf-proxy`, `awf-proxy-*`).",
        "Send stdio servers {name, command (absolute), args, env: [{name, value}]} with other names; the message names the entry's index.";
    UserAcpUnknownMode => "USER.ACP.UNKNOWN_MODE", User,
        "session/set_mode names a mode awf does not offer.",
        "Use `ask` (ask at every approval gate) or `auto` (approve every gate).";
    UserAcpProtocolVersionUnsupported => "USER.ACP.PROTOCOL_VERSION_UNSUPPORTED", User,
        "The ACP agent of a `provider: acp` step answered `initialize` with a protocol version other than 1.",
        "Use an agent (or adapter version) that speaks ACP v1.";
    WorkflowParseYamlSyntax => "WORKFLOW.PARSE.YAML_SYNTAX", Workflow,
        "The workflow file is not valid YAML, or a field has the wrong type.",
        "Fix the YAML at the reported line and column; quote strings that contain ': '.";
    WorkflowParseMissingField => "WORKFLOW.PARSE.MISSING_FIELD", Workflow,
        "A key the workflow file must have is missing (`name:`, `states:`, `states.initial`, an input's or output's `name:`, a transition's `goto:`).",
        "Add the key at the reported place; the message names it, the hint says where it goes.";
    WorkflowParseUnknownField => "WORKFLOW.PARSE.UNKNOWN_FIELD", Workflow,
        "The workflow file contains a key awf does not know (an error only with --strict).",
        "Remove or rename the key; `awf validate` lists each unknown key with its path.";
    WorkflowParseUnknownStepType => "WORKFLOW.PARSE.UNKNOWN_STEP_TYPE", Workflow,
        "A state has a `type:` that is not one of step, command, agent, parallel, for_each, while, operation, call_workflow, terminal.",
        "Use one of the built-in state types.";
    WorkflowParseInvalidValue => "WORKFLOW.PARSE.INVALID_VALUE", Workflow,
        "A field has a value awf cannot accept (bad duration, unknown strategy, out-of-range number).",
        "Fix the value at the reported location; the message names what is allowed.";
    WorkflowValidationMissingState => "WORKFLOW.VALIDATION.MISSING_STATE", Workflow,
        "A state reference (initial, on_success, on_failure, transitions, body, parallel, on_complete) names a state that does not exist.",
        "Fix the name; the hint lists the closest existing state.";
    WorkflowValidationCycleDetected => "WORKFLOW.VALIDATION.CYCLE_DETECTED", Workflow,
        "A template or sub-workflow reference forms a cycle.",
        "Break the cycle.";
    WorkflowValidationInvalidTransition => "WORKFLOW.VALIDATION.INVALID_TRANSITION", Workflow,
        "A transition is malformed or its `when` expression does not compile.",
        "Fix the expression; `when` uses expr-lang syntax without {{ }}.";
    WorkflowValidationNoExit => "WORKFLOW.VALIDATION.NO_EXIT", Workflow,
        "A non-terminal state has no way out (no on_success, on_failure, transitions or on_complete); as a warning, a state routed on failure only, whose success (or completion) would stop the run with EXECUTION.WORKFLOW.NO_ROUTE.",
        "Add on_success (or on_complete for loops) pointing at the next state.";
    WorkflowValidationInvalidState => "WORKFLOW.VALIDATION.INVALID_STATE", Workflow,
        "A state is missing a required field or combines fields that exclude each other.",
        "Follow the message; `awf validate` reports every such problem at once.";
    WorkflowValidationInvalidReference => "WORKFLOW.VALIDATION.INVALID_REFERENCE", Workflow,
        "A template refers to an undeclared input, an unknown state, a state that runs later, or an unknown field; or a step names a `script_file` or sub-workflow that cannot be found.",
        "Declare the input, fix the state or field name (fields are PascalCase: Output, ExitCode, …).";
    WorkflowValidationMissingTemplate => "WORKFLOW.VALIDATION.MISSING_TEMPLATE", Workflow,
        "A `use_template` names a template that cannot be found, or misses a required parameter.",
        "Create .awf/templates/<name>.yaml or pass the missing parameter.";
    WorkflowValidationUnknownOperation => "WORKFLOW.VALIDATION.UNKNOWN_OPERATION", Workflow,
        "An operation state names an operation (`operation:`) this build of awf does not provide.",
        "Use a built-in operation (http.request); the message suggests the closest one.";
    WorkflowValidationUnquotedValue => "WORKFLOW.VALIDATION.UNQUOTED_SHELL_VALUE", Workflow,
        "An input or a step output is interpolated into a shell `command:` unquoted, so a value holding `;`, `$( )` or a quote runs as shell code (a warning).",
        "Bare: write `{{shell_quote .inputs.x}}`. Inside \"…\" or '…': close the quotes around it (`\"a \"{{shell_quote .inputs.x}}`). In backticks: use `$( … )` instead. In a here-document: assign `v={{shell_quote .inputs.x}}` before it and write `$v`. Or set `shell_quote: true` at the top of the workflow to quote every interpolated value for where it lands.";
    WorkflowValidationIneffectiveQuote => "WORKFLOW.VALIDATION.INEFFECTIVE_SHELL_QUOTE", Workflow,
        "A value passed through `shell_quote` or `escape` sits inside double or single quotes, backticks or a here-document, where single-quoting does not protect it: its quotes are literal or close the string, so `$( )`, a backtick or a quote in the value still runs as shell code (a warning).",
        "Close the surrounding quotes around the action (`\"a \"{{shell_quote .inputs.x}}`), use `$( … )` instead of backticks, pass a here-document value through a variable, or write `{{.inputs.x}}` and set `shell_quote: true`.";
    ExecutionBudgetExceeded => "EXECUTION.BUDGET.EXCEEDED", Execution,
        "An agent step was not started because the spend so far (tokens, or US dollars priced with `prices:` in .awf/config.yaml) reached the workflow's or the step's `budget:`.",
        "Raise `budget: {tokens, usd}`, or route the failure with on_failure; `awf status <run>` shows the spend so far.";
    ExecutionAgentUsageLimit => "EXECUTION.AGENT.USAGE_LIMIT", Execution,
        "The agent reported a usage or rate limit whose reset is later than the step's `usage_limit.max_wait` (or gave no reset time), and no fallback provider answered.",
        "Wait for the reset and `awf resume` the run, raise `usage_limit.max_wait`, or add `fallback_providers:` to the step.";
    ExecutionAgentQuota => "EXECUTION.AGENT.QUOTA_EXCEEDED", Execution,
        "The agent's account has no quota or credit left (insufficient_quota, billing), and no fallback provider answered.",
        "Top up the account or add `fallback_providers:` to the step.";
    ExecutionCommandFailed => "EXECUTION.COMMAND.FAILED", Execution,
        "A step failed (non-zero exit or a command that could not start) and no on_failure route handled it.",
        "Read the step's stderr; add on_failure or continue_on_error to route the failure.";
    ExecutionCommandTimeout => "EXECUTION.COMMAND.TIMEOUT", Execution,
        "A step ran past its timeout and was stopped (SIGTERM, then SIGKILL after 5 s).",
        "Raise `timeout:` or make the command faster.";
    ExecutionApprovalRejected => "EXECUTION.APPROVAL.REJECTED", Execution,
        "A step's approval gate (`approval:`) was rejected, so the step did not run (without a terminal, gates are rejected unless `--yes`).",
        "Approve the gate, pass `--yes` to approve every gate, or route the rejection with on_failure.";
    ExecutionApprovalTimedOut => "EXECUTION.APPROVAL.TIMED_OUT", Execution,
        "A step's approval gate got no answer within its `timeout` and has no allowing `on_timeout`.",
        "Answer sooner, raise the gate's timeout, or set `on_timeout: approve`.";
    ExecutionParallelPartialFailure => "EXECUTION.PARALLEL.PARTIAL_FAILURE", Execution,
        "A parallel block failed under its strategy (a branch failed under all_succeed, or every branch failed under any_succeed).",
        "Check the failing branch; use best_effort to ignore branch failures.";
    ExecutionLoopFailed => "EXECUTION.LOOP.FAILED", Execution,
        "A for_each or while loop stopped because a body step failed or its condition could not be evaluated.",
        "Check the failing body step; add on_failure to the loop to route the failure.";
    ExecutionTemplateFailed => "EXECUTION.TEMPLATE.FAILED", Execution,
        "A template could not be rendered (undefined variable, unknown field, bad function call).",
        "Fix the {{ }} expression; fields are PascalCase and undefined inputs or states are errors.";
    ExecutionExpressionFailed => "EXECUTION.EXPRESSION.FAILED", Execution,
        "A when/while/break_when expression could not be evaluated or did not give a boolean.",
        "Fix the expression; it uses expr-lang syntax without {{ }}.";
    ExecutionHookFailed => "EXECUTION.HOOK.FAILED", Execution,
        "A workflow_start hook failed, so the run stopped before its first state.",
        "Fix the hook command; other hooks only warn.";
    ExecutionTerminalFailure => "EXECUTION.WORKFLOW.FAILURE_TERMINAL", Execution,
        "The run reached a terminal state with `status: failure`.",
        "This is the workflow's own failure path; read its message.";
    ExecutionCircularCall => "EXECUTION.WORKFLOW.CIRCULAR_CALL", Execution,
        "A call_workflow step calls a workflow that is already running in the same call stack.",
        "Break the cycle between the workflows.";
    ExecutionMaxDepth => "EXECUTION.WORKFLOW.MAX_DEPTH", Execution,
        "Sub-workflow calls are nested more than 10 deep.",
        "Flatten the workflow calls.";
    ExecutionSubworkflowFailed => "EXECUTION.WORKFLOW.SUBWORKFLOW_FAILED", Execution,
        "A called sub-workflow failed.",
        "Run the child workflow on its own to see its failure.";
    ExecutionNoRoute => "EXECUTION.WORKFLOW.NO_ROUTE", Execution,
        "A state finished but none of its transitions matched and it has no on_success to fall back on.",
        "Add a default transition (`- goto: <state>`) or on_success to the state.";
    ExecutionAgentBinaryNotFound => "EXECUTION.AGENT.BINARY_NOT_FOUND", Execution,
        "The agent CLI a provider runs is not on PATH.",
        "Install it (the hint names the npm package) or fix PATH.";
    ExecutionAgentFailed => "EXECUTION.AGENT.FAILED", Execution,
        "The agent failed: its CLI exited non-zero or reported an error.",
        "Read the stderr tail in the message; check the provider's credentials and model.";
    ExecutionAgentTimeout => "EXECUTION.AGENT.TIMEOUT", Execution,
        "The agent ran past the step's timeout and was stopped.",
        "Raise `timeout:` on the agent step.";
    ExecutionAgentAuthFailed => "EXECUTION.AGENT.AUTH_FAILED", Execution,
        "The agent API rejected the credentials (HTTP 401).",
        "Check api_key / OPENAI_API_KEY.";
    ExecutionAgentRateLimited => "EXECUTION.AGENT.RATE_LIMITED", Execution,
        "The agent API is rate limiting requests (HTTP 429).",
        "Wait and retry; add `retry:` to the step.";
    ExecutionAgentServerError => "EXECUTION.AGENT.SERVER_ERROR", Execution,
        "The agent API failed (HTTP 5xx).",
        "Retry later; add `retry:` to the step.";
    ExecutionAgentBadRequest => "EXECUTION.AGENT.BAD_REQUEST", Execution,
        "The agent API rejected the request (HTTP 4xx).",
        "Check model, base_url and options.";
    ExecutionAgentRefusal => "EXECUTION.AGENT.REFUSAL", Execution,
        "The agent refused the prompt (ACP stopReason `refusal`, a model's refusal or content filter) and no fallback provider answered; what it wrote before is the step's output.",
        "Rephrase the prompt, add `fallback_providers:` to the step, or route the refusal with on_failure.";
    ExecutionAgentMaxTokens => "EXECUTION.AGENT.MAX_TOKENS", Execution,
        "The agent stopped at its token limit (ACP stopReason `max_tokens`); the partial answer is the step's output.",
        "Ask for a shorter answer, raise the model's limit, or route it with on_failure.";
    ExecutionAgentMaxTurns => "EXECUTION.AGENT.MAX_TURN_REQUESTS", Execution,
        "The agent stopped at its limit of model requests for one turn (ACP stopReason `max_turn_requests`).",
        "Split the task into smaller steps, or raise the agent's turn limit.";
    ExecutionAgentPermissionDenied => "EXECUTION.AGENT.PERMISSION_DENIED", Execution,
        "The agent ended its turn after awf rejected one of its permission requests (`permissions:` of a `provider: acp` step).",
        "Allow the tool with `permissions: read_only`, `allow_all` or `ask`, or route the failure with on_failure.";
    ExecutionAgentInvalidOutput => "EXECUTION.AGENT.INVALID_OUTPUT", Execution,
        "The agent's answer is not what `output_format` requires (for example not valid JSON).",
        "Ask for JSON explicitly in the prompt, or use output_format: text.";
    ExecutionStepUnavailable => "EXECUTION.STEP.NOT_AVAILABLE", Execution,
        "The state type is parsed but this build cannot execute it.",
        "Use a shell step, or upgrade awf once the feature lands.";
    ExecutionRunCancelled => "EXECUTION.RUN.CANCELLED", Execution,
        "The run was cancelled (SIGINT, SIGTERM or a front-end cancel).",
        "Run it again, or go on where it stopped with `awf resume <run id>` (completed states are not run again).";
    ExecutionOperationNotFound => "EXECUTION.OPERATION.NOT_FOUND", Execution,
        "An operation state names an operation this build does not provide (the run was started without validation).",
        "Use a built-in operation (http.request); `awf validate` lists the problem before the run.";
    ExecutionOperationFailed => "EXECUTION.OPERATION.FAILED", Execution,
        "An operation ran and failed (an HTTP request that could not be sent, or answered with a status listed in retryable_status_codes).",
        "Read the step's error; route it with on_failure, or add `retry:` for transient failures.";
    ExecutionOperationTimeout => "EXECUTION.OPERATION.TIMEOUT", Execution,
        "An operation ran past its timeout (the step's `timeout:` or the operation's own `timeout` input) and was stopped.",
        "Raise the timeout, or check that the server answers.";
    ExecutionPluginDisabled => "EXECUTION.PLUGIN.DISABLED", Execution,
        "An operation belongs to a plugin that is disabled.",
        "Enable the plugin.";
    SystemIoReadFailed => "SYSTEM.IO.READ_FAILED", System,
        "A file could not be read.",
        "Check that the file is readable.";
    SystemIoWriteFailed => "SYSTEM.IO.WRITE_FAILED", System,
        "A file could not be written.",
        "Check disk space and permissions of the target directory.";
    SystemIoPermissionDenied => "SYSTEM.IO.PERMISSION_DENIED", System,
        "The operating system refused access.",
        "Check file and directory permissions.";
    SystemNetAddressInUse => "SYSTEM.NET.ADDRESS_IN_USE", System,
        "A server could not listen on its address: another process already listens there.",
        "Pick another port (`awf serve --addr 127.0.0.1:PORT`, 0 = any free port) or stop the other server.";
    SystemStoreUnavailable => "SYSTEM.STORE.UNAVAILABLE", System,
        "The shared run store (`--store postgres://…`, `AWF_STORE`) could not be reached, refused the connection, or failed a query.",
        "Check the URL (postgresql://USER@HOST:PORT/DB), that the server runs and accepts this user; `scripts/pg.sh start` starts a local one.";
    SystemStoreSchemaNewer => "SYSTEM.STORE.SCHEMA_NEWER", System,
        "The shared run store was migrated by a newer awf: this awf does not know its schema and will not write to it.",
        "Upgrade awf on this machine to the version the other workers run.";
    SystemResourceExhausted => "SYSTEM.RESOURCE.EXHAUSTED", System,
        "The operating system ran out of a resource awf needed (file descriptors, processes, memory).",
        "Raise the limit (`ulimit -n`, `ulimit -u`), lower `max_concurrent`, or free memory, then run again.";
    SystemInternal => "SYSTEM.INTERNAL.UNMAPPED", System,
        "An internal fault that awf did not expect.",
        "Report it with the command line and workflow file.";
}

impl ErrorCode {
    /// Parse the dotted form (case-insensitive).
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL
            .iter()
            .copied()
            .find(|c| c.as_str().eq_ignore_ascii_case(s))
    }

    /// Exit code of this code's category.
    pub const fn exit_code(self) -> u8 {
        self.category().exit_code()
    }

    /// Other codes sharing this code's `CATEGORY.SUBCATEGORY` prefix.
    pub fn related(self) -> Vec<ErrorCode> {
        let own = self.as_str();
        let prefix = match own.rfind('.') {
            Some(i) => &own[..i],
            None => own,
        };
        Self::ALL
            .iter()
            .copied()
            .filter(|c| *c != self && c.as_str().starts_with(prefix))
            .collect()
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl<'de> serde::Deserialize<'de> for ErrorCode {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Self::parse(&s).ok_or_else(|| serde::de::Error::custom(format!("unknown error code {s}")))
    }
}

impl Serialize for ErrorCode {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// A failure that crosses a port. `message` is for humans and is already masked by whoever
/// built it when it can carry secrets.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct AwfError {
    code: ErrorCode,
    message: String,
    details: BTreeMap<String, Value>,
    hints: Vec<String>,
}

impl AwfError {
    /// New error with a code and a message. A message holding a template or expression
    /// error's hint (after [`HINT_SEPARATOR`](crate::ports::template::HINT_SEPARATOR): a
    /// budget the evaluation ran past) keeps the text before it; the hint becomes the
    /// error's first hint.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        let mut message = message.into();
        let mut hints = Vec::new();
        if let Some(at) = message.find(crate::ports::template::HINT_SEPARATOR) {
            let hint = message[at + crate::ports::template::HINT_SEPARATOR.len()..].to_owned();
            message.truncate(at);
            if !hint.trim().is_empty() {
                hints.push(hint);
            }
        }
        Self {
            code,
            message,
            details: BTreeMap::new(),
            hints,
        }
    }

    /// Adds a structured detail (file, line, column, state, …).
    #[must_use]
    pub fn with_detail(mut self, key: impl Into<String>, value: impl Into<Value>) -> Self {
        self.details.insert(key.into(), value.into());
        self
    }

    /// Adds a hint line shown as `Hint: …`.
    #[must_use]
    pub fn with_hint(mut self, hint: impl Into<String>) -> Self {
        self.hints.push(hint.into());
        self
    }

    /// The code.
    pub fn code(&self) -> ErrorCode {
        self.code
    }

    /// The human message.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// Structured details, sorted by key.
    pub fn details(&self) -> &BTreeMap<String, Value> {
        &self.details
    }

    /// Hint lines.
    pub fn hints(&self) -> &[String] {
        &self.hints
    }

    /// Replace the message (used to prefix context or to mask).
    #[must_use]
    pub fn map_message(mut self, f: impl FnOnce(String) -> String) -> Self {
        self.message = f(self.message);
        self
    }

    /// Replace each hint line by what `f` makes of it (a front-end saying a hint its own
    /// way, filling in what only it knows).
    #[must_use]
    pub fn map_hints(mut self, f: impl FnMut(String) -> String) -> Self {
        self.hints = self.hints.into_iter().map(f).collect();
        self
    }

    /// Wire body `{code, message, hints}` as in the run result contract.
    pub fn body(&self) -> ErrorBody {
        ErrorBody {
            code: self.code,
            message: self.message.clone(),
            hints: self.hints.clone(),
            details: self.details.clone(),
        }
    }
}

/// Serialised error, as it appears in the run result (`error`) and JSON error output.
///
/// Shape: `{"code": "USER.INPUT.VALIDATION_FAILED", "message": "…", "hints": ["…"], "details": {…}}`.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct ErrorBody {
    /// The dotted error code.
    pub code: ErrorCode,
    /// Human message (masked).
    pub message: String,
    /// Hint lines, possibly empty.
    pub hints: Vec<String>,
    /// Structured details (file, line, column, state, …), possibly empty.
    #[serde(skip_serializing_if = "BTreeMap::is_empty", default)]
    pub details: BTreeMap<String, Value>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_unique_and_prefixed_by_their_category() {
        let mut seen = std::collections::HashSet::new();
        for c in ErrorCode::ALL {
            assert!(seen.insert(c.as_str()), "duplicate {c}");
            assert!(c.as_str().starts_with(c.category().as_str()), "{c}");
            assert_eq!(c.as_str().split('.').count(), 3, "{c}");
        }
    }

    #[test]
    fn exit_codes_follow_categories() {
        assert_eq!(ErrorCode::UserInputValidationFailed.exit_code(), 1);
        assert_eq!(ErrorCode::WorkflowParseYamlSyntax.exit_code(), 2);
        assert_eq!(ErrorCode::ExecutionCommandFailed.exit_code(), 3);
        assert_eq!(ErrorCode::SystemIoReadFailed.exit_code(), 4);
    }

    #[test]
    fn parse_round_trips() {
        for c in ErrorCode::ALL {
            assert_eq!(ErrorCode::parse(&c.as_str().to_lowercase()), Some(*c));
        }
        assert_eq!(ErrorCode::parse("NOPE.X.Y"), None);
    }
}
