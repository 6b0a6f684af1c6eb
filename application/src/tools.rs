//! The tool router: one [`ToolProvider`] over several (the built-in Read, Write, Edit, Bash,
//! Glob and Grep, plugin operations), with the audit seam every `tools/call` goes through,
//! whoever serves the tools (`awf mcp-serve` over MCP, or the `openai_compatible` provider
//! in-process as `tools[]`).
//!
//! - Registration: [`ToolRouter::register`] adds every tool of a provider, or none of them
//!   when one name is taken already (`USER.MCP_PROXY.NAME_COLLISION`).
//! - `tools()`: every registered tool, sorted by name (`Bash, Edit, Glob, Grep, Read, Write`).
//! - Per call, the audit seam: one tracing span `tool.call` (attributes `tool.name`,
//!   `tool.source`, `tool.call_id`, `awf.run_id`, `awf.step`, then `tool.is_error` and
//!   `tool.duration_ms`; every value masked, arguments never in it), one structured log line
//!   (`tool call`, same fields, target `awf::tools`), and one [`ToolCallRecord`] handed to the
//!   [`ToolAuditSink`] (arguments and output masked), which links the call to the parent run
//!   and step by the ids of [`AuditContext`].
//!
//! No I/O here: time and ids come from the Clock and IdGenerator ports, records go to the
//! sink port.
//!
//! Reference: shared/spec/mcp.md §3.4 (naming, collisions), §3.5 (observability), §9.

use std::collections::HashMap;
use std::sync::Arc;

use awf_domain::AwfError;
use awf_domain::ErrorCode;
use awf_domain::mask::Masker;
use awf_domain::ports::Clock;
use awf_domain::ports::IdGenerator;
use awf_domain::ports::ToolAuditSink;
use awf_domain::ports::ToolProvider;
use awf_domain::ports::tools::ProgressSink;
use awf_domain::ports::tools::ToolCall;
use awf_domain::ports::tools::ToolCallError;
use awf_domain::ports::tools::ToolCallRecord;
use awf_domain::ports::tools::ToolOutput;
use awf_domain::ports::tools::ToolSpec;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

/// Who the calls are made for and where their records go.
#[derive(Clone)]
pub struct AuditContext {
    /// The parent run's id (`run_id` of the `mcp-serve` config), when known.
    pub run_id: Option<String>,
    /// The step (state name), when known.
    pub step: Option<String>,
    /// The parent's W3C `traceparent`, when known (recorded on the span and each record).
    pub traceparent: Option<String>,
    /// Masks secrets in span attributes, log fields and records.
    pub masker: Masker,
    /// Times each call.
    pub clock: Arc<dyn Clock>,
    /// Makes call ids for calls that come without one.
    pub ids: Arc<dyn IdGenerator>,
    /// Where each call's record goes; `None`: span and log line only.
    pub sink: Option<Arc<dyn ToolAuditSink>>,
}

struct Registered {
    source: String,
    provider: Arc<dyn ToolProvider>,
    /// Its tools take only the arguments their schemas declare (workflow tools): the value
    /// of any other is recorded as `***`.
    declared_only: bool,
}

/// Routes calls by tool name to the provider that registered it, and audits each call.
pub struct ToolRouter {
    ctx: AuditContext,
    providers: Vec<Registered>,
    /// Tool name → (index into `providers`, its spec).
    by_name: HashMap<String, (usize, ToolSpec)>,
}

impl ToolRouter {
    /// An empty router.
    pub fn new(ctx: AuditContext) -> Self {
        Self {
            ctx,
            providers: Vec::new(),
            by_name: HashMap::new(),
        }
    }

    /// Adds every tool of `provider`, labelled `source` (`builtin`, `plugin:<name>`) in spans,
    /// logs and records. All or nothing: when one of its names is already registered (or
    /// appears twice in its own list) nothing of it is added.
    ///
    /// # Errors
    /// `USER.MCP_PROXY.NAME_COLLISION`, naming the tool and both sources.
    pub fn register(
        &mut self,
        source: impl Into<String>,
        provider: Arc<dyn ToolProvider>,
    ) -> Result<(), AwfError> {
        self.add(source.into(), provider, false)
    }

    /// [`ToolRouter::register`] for a provider whose tools refuse every argument their
    /// schemas do not declare (workflow tools): such an argument is a typo or a stray
    /// (`api_tokn` for the secret `api_token`), so its value is recorded as `***`, whatever
    /// its name.
    ///
    /// # Errors
    /// As [`ToolRouter::register`].
    pub fn register_declared_only(
        &mut self,
        source: impl Into<String>,
        provider: Arc<dyn ToolProvider>,
    ) -> Result<(), AwfError> {
        self.add(source.into(), provider, true)
    }

    fn add(
        &mut self,
        source: String,
        provider: Arc<dyn ToolProvider>,
        declared_only: bool,
    ) -> Result<(), AwfError> {
        let specs = provider.tools();
        let mut seen: HashMap<&str, ()> = HashMap::new();
        for spec in &specs {
            let other = match self.by_name.get(&spec.name) {
                Some((i, _)) => Some(self.providers[*i].source.clone()),
                None if seen.contains_key(spec.name.as_str()) => Some(source.clone()),
                None => None,
            };
            if let Some(other) = other {
                return Err(AwfError::new(
                    ErrorCode::UserMcpProxyNameCollision,
                    format!(
                        "tool `{}` of `{source}` is already offered by `{other}`",
                        spec.name
                    ),
                )
                .with_detail("tool", spec.name.clone())
                .with_hint(
                    "each tool name may be served once: list each plugin once under `plugin_tools`",
                ));
            }
            seen.insert(spec.name.as_str(), ());
        }
        let index = self.providers.len();
        for spec in specs {
            self.by_name.insert(spec.name.clone(), (index, spec));
        }
        self.providers.push(Registered {
            source,
            provider,
            declared_only,
        });
        Ok(())
    }

    /// The source label of the provider serving `name`, if any.
    pub fn source_of(&self, name: &str) -> Option<&str> {
        self.by_name
            .get(name)
            .map(|(i, _)| self.providers[*i].source.as_str())
    }

    fn mask(&self, text: &str) -> String {
        self.ctx.masker.mask(text).into_owned()
    }

    fn record(&self, record: &ToolCallRecord) {
        if let Some(sink) = &self.ctx.sink
            && let Err(e) = sink.record(record)
        {
            tracing::warn!(
                target: "awf::tools",
                tool = %record.name,
                error = %e,
                "tool call record not written"
            );
        }
    }
}

#[async_trait::async_trait]
impl ToolProvider for ToolRouter {
    fn tools(&self) -> Vec<ToolSpec> {
        let mut all: Vec<ToolSpec> = self.by_name.values().map(|(_, s)| s.clone()).collect();
        all.sort_by(|a, b| a.name.cmp(&b.name));
        all
    }

    async fn call(
        &self,
        call: ToolCall,
        cancel: CancellationToken,
    ) -> Result<ToolOutput, ToolCallError> {
        self.call_with_progress(call, cancel, None).await
    }

    /// Routes the call (and its progress sink) to the provider serving it, audited as
    /// [`ToolProvider::call`] describes.
    async fn call_with_progress(
        &self,
        call: ToolCall,
        cancel: CancellationToken,
        progress: Option<ProgressSink>,
    ) -> Result<ToolOutput, ToolCallError> {
        let started_at = self.ctx.clock.now();
        let start = self.ctx.clock.instant();
        let call_id = call
            .call_id
            .clone()
            .unwrap_or_else(|| self.ctx.ids.request_id());
        let name = self.mask(&call.name);
        let found = self.by_name.get(&call.name).map(|(i, _)| *i);
        let source = found
            .map(|i| self.providers[i].source.clone())
            .unwrap_or_default();
        let run_id = self.ctx.run_id.as_deref().map(|r| self.mask(r));
        let step = self.ctx.step.as_deref().map(|s| self.mask(s));
        let span = tracing::info_span!(
            "tool.call",
            tool.name = %name,
            tool.source = %source,
            tool.call_id = %self.mask(&call_id),
            awf.run_id = run_id.as_deref().unwrap_or(""),
            awf.step = step.as_deref().unwrap_or(""),
            traceparent = self.ctx.traceparent.as_deref().unwrap_or(""),
            tool.is_error = tracing::field::Empty,
            tool.duration_ms = tracing::field::Empty,
        );
        // Values of secret-named arguments (a workflow's `API_TOKEN` input) are secrets of
        // this call: masked in its record and its answer too.
        let mut masker = self.ctx.masker.clone();
        masker.extend(&Masker::from_named_values(&call.arguments));
        // The arguments as recorded (only when there is a record to write).
        let input = self.ctx.sink.is_some().then(|| {
            let mut args = call.arguments.clone();
            if let Some(spec) = found
                .filter(|i| self.providers[*i].declared_only)
                .and_then(|_| self.by_name.get(&call.name).map(|(_, s)| s))
            {
                let declared = spec.input_schema.get("properties");
                for (k, v) in &mut args {
                    if declared.and_then(|p| p.get(k)).is_none() {
                        *v = Value::String("***".to_owned());
                    }
                }
            }
            let mut input = Value::Object(args);
            masker.mask_json(&mut input);
            input
        });
        let result = match found {
            Some(i) => {
                let provider = Arc::clone(&self.providers[i].provider);
                let fut = provider.call_with_progress(call, cancel, progress);
                tracing::Instrument::instrument(fut, span.clone()).await
            }
            None => Err(ToolCallError::UnknownTool(call.name.clone())),
        };
        let duration_ms = u64::try_from(
            self.ctx
                .clock
                .instant()
                .saturating_duration_since(start)
                .as_millis(),
        )
        .unwrap_or(u64::MAX);
        // Masked once: the answer and the record share the masked text (a Read answers up to
        // its byte budget; copying it for the record cost a copy per call, issue 11).
        let result = result.map(|mut out| {
            let masked = match masker.mask(&out.text) {
                std::borrow::Cow::Owned(m) => Some(m),
                std::borrow::Cow::Borrowed(_) => None,
            };
            if let Some(m) = masked {
                out.text = m;
            }
            if let Some(v) = out.structured.as_mut() {
                masker.mask_json(v);
            }
            out
        });
        let is_error = result.as_ref().map_or(true, |out| out.is_error);
        span.record("tool.is_error", is_error);
        span.record("tool.duration_ms", duration_ms);
        span.in_scope(|| {
            tracing::info!(
                target: "awf::tools",
                tool = %name,
                source = %source,
                call_id = %self.mask(&call_id),
                run_id = run_id.as_deref().unwrap_or(""),
                step = step.as_deref().unwrap_or(""),
                duration_ms,
                is_error,
                "tool call"
            );
        });
        if let Some(input) = input {
            let output = match &result {
                Ok(out) => out.text.clone(),
                Err(e) => masker.mask(&e.to_string()).into_owned(),
            };
            self.record(&ToolCallRecord {
                run_id,
                step,
                traceparent: self.ctx.traceparent.clone(),
                call_id,
                name,
                source,
                input,
                output,
                is_error,
                started_at,
                duration_ms,
            });
        }
        result
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::sync::Mutex;

    use awf_domain::ports::fakes::FakeClock;
    use awf_domain::ports::fakes::SeqIds;
    use serde_json::json;

    use super::*;

    struct Fixed {
        names: Vec<&'static str>,
        answer: &'static str,
    }

    #[async_trait::async_trait]
    impl ToolProvider for Fixed {
        fn tools(&self) -> Vec<ToolSpec> {
            self.names
                .iter()
                .map(|n| ToolSpec {
                    name: (*n).to_owned(),
                    description: format!("{n} tool"),
                    input_schema: json!({"type": "object"}),
                })
                .collect()
        }
        async fn call(
            &self,
            call: ToolCall,
            _cancel: CancellationToken,
        ) -> Result<ToolOutput, ToolCallError> {
            Ok(ToolOutput::text(format!("{}: {}", call.name, self.answer)))
        }
    }

    #[derive(Default)]
    struct Sink(Mutex<Vec<ToolCallRecord>>);

    impl ToolAuditSink for Sink {
        fn record(&self, record: &ToolCallRecord) -> std::io::Result<()> {
            self.0.lock().unwrap().push(record.clone());
            Ok(())
        }
    }

    const TP: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

    fn ctx(sink: Arc<Sink>, masker: Masker) -> AuditContext {
        AuditContext {
            run_id: Some("run-1".into()),
            step: Some("review".into()),
            traceparent: Some(TP.into()),
            masker,
            clock: Arc::new(FakeClock::default()),
            ids: Arc::new(SeqIds::default()),
            sink: Some(sink),
        }
    }

    fn fixed(names: &[&'static str], answer: &'static str) -> Arc<dyn ToolProvider> {
        Arc::new(Fixed {
            names: names.to_vec(),
            answer,
        })
    }

    #[test]
    fn tools_are_sorted_across_providers() {
        let mut r = ToolRouter::new(ctx(Arc::default(), Masker::default()));
        r.register("builtin", fixed(&["Write", "Read", "Bash"], "ok"))
            .unwrap();
        r.register("plugin:http", fixed(&["http_request"], "ok"))
            .unwrap();
        let names: Vec<String> = r.tools().into_iter().map(|t| t.name).collect();
        assert_eq!(names, ["Bash", "Read", "Write", "http_request"]);
        assert_eq!(r.source_of("http_request"), Some("plugin:http"));
    }

    #[test]
    fn a_colliding_provider_is_refused_whole() {
        let mut r = ToolRouter::new(ctx(Arc::default(), Masker::default()));
        r.register("plugin:a_b", fixed(&["a_b_c"], "first"))
            .unwrap();
        let err = r
            .register("plugin:a", fixed(&["a_extra", "a_b_c"], "second"))
            .unwrap_err();
        assert_eq!(err.code(), ErrorCode::UserMcpProxyNameCollision);
        assert!(err.message().contains("a_b_c"), "{}", err.message());
        assert!(err.message().contains("plugin:a_b"), "{}", err.message());
        // Nothing of the refused provider was added.
        let names: Vec<String> = r.tools().into_iter().map(|t| t.name).collect();
        assert_eq!(names, ["a_b_c"]);
    }

    #[test]
    fn a_provider_listing_a_name_twice_is_refused() {
        let mut r = ToolRouter::new(ctx(Arc::default(), Masker::default()));
        let err = r
            .register("builtin", fixed(&["Read", "Read"], "x"))
            .unwrap_err();
        assert_eq!(err.code(), ErrorCode::UserMcpProxyNameCollision);
        assert!(r.tools().is_empty());
    }

    #[tokio::test]
    async fn each_call_is_routed_and_recorded_masked() {
        let sink = Arc::new(Sink::default());
        let masker = Masker::from_named([("API_TOKEN", "hunter22")]);
        let mut r = ToolRouter::new(ctx(Arc::clone(&sink), masker));
        r.register("builtin", fixed(&["Read"], "secret hunter22 here"))
            .unwrap();
        let args = json!({"path": "/x", "note": "hunter22"});
        let out = r
            .call(
                ToolCall {
                    name: "Read".into(),
                    arguments: args.as_object().unwrap().clone(),
                    call_id: Some("7".into()),
                },
                CancellationToken::new(),
            )
            .await
            .unwrap();
        assert_eq!(out.text, "Read: secret *** here");
        let recs = sink.0.lock().unwrap().clone();
        assert_eq!(recs.len(), 1);
        let rec = &recs[0];
        assert_eq!(rec.run_id.as_deref(), Some("run-1"));
        assert_eq!(rec.step.as_deref(), Some("review"));
        assert_eq!(rec.call_id, "7");
        assert_eq!(rec.traceparent.as_deref(), Some(TP));
        assert_eq!(rec.source, "builtin");
        assert_eq!(rec.input, json!({"path": "/x", "note": "***"}));
        assert_eq!(rec.output, "Read: secret *** here");
        assert!(!rec.is_error);
    }

    #[tokio::test]
    async fn an_unknown_tool_is_an_error_and_still_recorded() {
        let sink = Arc::new(Sink::default());
        let mut r = ToolRouter::new(ctx(Arc::clone(&sink), Masker::default()));
        r.register("builtin", fixed(&["Read"], "ok")).unwrap();
        let err = r
            .call(
                ToolCall {
                    name: "Nope".into(),
                    ..ToolCall::default()
                },
                CancellationToken::new(),
            )
            .await
            .unwrap_err();
        assert_eq!(err, ToolCallError::UnknownTool("Nope".into()));
        let recs = sink.0.lock().unwrap().clone();
        assert_eq!(recs.len(), 1);
        assert!(recs[0].is_error);
        assert_eq!(recs[0].source, "");
        // A call without a client id gets one from the IdGenerator.
        assert!(!recs[0].call_id.is_empty());
    }

    /// `(name, value)` pairs of a span or event, in record order.
    type FieldList = Vec<(String, String)>;

    /// Records span names with their fields, and events' fields.
    #[derive(Default, Clone)]
    struct Capture {
        spans: Arc<Mutex<Vec<(String, FieldList)>>>,
        events: Arc<Mutex<Vec<FieldList>>>,
    }

    struct Fields<'a>(&'a mut Vec<(String, String)>);

    impl tracing::field::Visit for Fields<'_> {
        fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
            self.0.push((field.name().to_owned(), format!("{value:?}")));
        }
        fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
            self.0.push((field.name().to_owned(), value.to_owned()));
        }
    }

    impl tracing::Subscriber for Capture {
        fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
            true
        }
        fn new_span(&self, attrs: &tracing::span::Attributes<'_>) -> tracing::span::Id {
            let mut fields = Vec::new();
            attrs.record(&mut Fields(&mut fields));
            let mut spans = self.spans.lock().unwrap();
            spans.push((attrs.metadata().name().to_owned(), fields));
            tracing::span::Id::from_u64(spans.len() as u64)
        }
        fn record(&self, span: &tracing::span::Id, values: &tracing::span::Record<'_>) {
            let mut spans = self.spans.lock().unwrap();
            let i = usize::try_from(span.into_u64()).unwrap() - 1;
            values.record(&mut Fields(&mut spans[i].1));
        }
        fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
        fn event(&self, event: &tracing::Event<'_>) {
            let mut fields = Vec::new();
            event.record(&mut Fields(&mut fields));
            self.events.lock().unwrap().push(fields);
        }
        fn enter(&self, _: &tracing::span::Id) {}
        fn exit(&self, _: &tracing::span::Id) {}
    }

    fn field<'a>(fields: &'a [(String, String)], name: &str) -> Option<&'a str> {
        fields
            .iter()
            .rev()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    #[tokio::test(flavor = "current_thread")]
    async fn each_call_has_one_tool_call_span_and_one_log_line_with_masked_values() {
        let capture = Capture::default();
        let _guard = tracing::subscriber::set_default(capture.clone());
        let masker = Masker::from_named([("DEPLOY_TOKEN", "hunter22")]);
        let mut c = ctx(Arc::default(), masker);
        c.step = Some("deploy-hunter22".into());
        let mut r = ToolRouter::new(c);
        r.register("builtin", fixed(&["Read"], "ok")).unwrap();
        r.call(
            ToolCall {
                name: "Read".into(),
                arguments: json!({"path": "hunter22"}).as_object().unwrap().clone(),
                call_id: Some("5".into()),
            },
            CancellationToken::new(),
        )
        .await
        .unwrap();
        let spans = capture.spans.lock().unwrap().clone();
        let tool_spans: Vec<_> = spans.iter().filter(|(n, _)| n == "tool.call").collect();
        assert_eq!(tool_spans.len(), 1, "{spans:?}");
        let fields = &tool_spans[0].1;
        assert_eq!(field(fields, "tool.name"), Some("Read"));
        assert_eq!(field(fields, "tool.source"), Some("builtin"));
        assert_eq!(field(fields, "tool.call_id"), Some("5"));
        assert_eq!(field(fields, "awf.run_id"), Some("run-1"));
        assert_eq!(field(fields, "awf.step"), Some("deploy-***"));
        assert_eq!(field(fields, "tool.is_error"), Some("false"));
        assert!(field(fields, "tool.duration_ms").is_some(), "{fields:?}");
        let events = capture.events.lock().unwrap().clone();
        let logs: Vec<_> = events
            .iter()
            .filter(|f| field(f, "message") == Some("tool call"))
            .collect();
        assert_eq!(logs.len(), 1, "{events:?}");
        assert_eq!(field(logs[0], "step"), Some("deploy-***"));
        let all = format!("{spans:?}{events:?}");
        assert!(
            !all.contains("hunter22"),
            "a secret reached the telemetry: {all}"
        );
    }

    /// Reports progress and answers structured content holding a secret.
    struct Progressing;

    #[async_trait::async_trait]
    impl ToolProvider for Progressing {
        fn tools(&self) -> Vec<ToolSpec> {
            vec![ToolSpec {
                name: "wf".into(),
                description: "a workflow".into(),
                input_schema: json!({"type": "object"}),
            }]
        }
        async fn call(
            &self,
            _call: ToolCall,
            _cancel: CancellationToken,
        ) -> Result<ToolOutput, ToolCallError> {
            Ok(ToolOutput::text("no progress"))
        }
        async fn call_with_progress(
            &self,
            _call: ToolCall,
            _cancel: CancellationToken,
            progress: Option<ProgressSink>,
        ) -> Result<ToolOutput, ToolCallError> {
            if let Some(p) = progress {
                p(awf_domain::ports::tools::ToolProgress {
                    progress: 1.0,
                    total: None,
                    message: Some("step a started".into()),
                });
            }
            Ok(ToolOutput {
                text: "done".into(),
                is_error: false,
                structured: Some(json!({"states": {"a": {"output": "key hunter22"}}})),
            })
        }
    }

    #[tokio::test]
    async fn progress_reaches_the_provider_and_structured_content_is_masked() {
        let masker = Masker::from_named([("DEPLOY_TOKEN", "hunter22")]);
        let mut r = ToolRouter::new(ctx(Arc::default(), masker));
        r.register("workflows", Arc::new(Progressing)).unwrap();
        let seen: Arc<Mutex<Vec<String>>> = Arc::default();
        let sink: ProgressSink = {
            let seen = Arc::clone(&seen);
            Arc::new(move |p| seen.lock().unwrap().push(p.message.unwrap_or_default()))
        };
        let call = ToolCall {
            name: "wf".into(),
            ..ToolCall::default()
        };
        let out = r
            .call_with_progress(call.clone(), CancellationToken::new(), Some(sink))
            .await
            .unwrap();
        assert_eq!(*seen.lock().unwrap(), vec!["step a started".to_owned()]);
        assert_eq!(
            out.structured,
            Some(json!({"states": {"a": {"output": "key ***"}}}))
        );
        // Without a sink, the plain call.
        let out = r.call(call, CancellationToken::new()).await.unwrap();
        assert_eq!(out.text, "done");
    }

    /// Answers with its `API_TOKEN` argument, as a workflow echoing its input would.
    struct EchoToken;

    #[async_trait::async_trait]
    impl ToolProvider for EchoToken {
        fn tools(&self) -> Vec<ToolSpec> {
            vec![ToolSpec {
                name: "deploy".into(),
                description: "a workflow".into(),
                input_schema: json!({"type": "object"}),
            }]
        }
        async fn call(
            &self,
            call: ToolCall,
            _cancel: CancellationToken,
        ) -> Result<ToolOutput, ToolCallError> {
            let token = call.arguments["API_TOKEN"].as_str().unwrap().to_owned();
            Ok(ToolOutput {
                text: format!("used {token}"),
                is_error: false,
                structured: Some(json!({"output": format!("token={token}")})),
            })
        }
    }

    #[tokio::test]
    async fn secret_named_arguments_are_masked_in_the_record_and_the_answer() {
        let sink = Arc::new(Sink::default());
        let mut r = ToolRouter::new(ctx(Arc::clone(&sink), Masker::default()));
        r.register("workflows", Arc::new(EchoToken)).unwrap();
        let out = r
            .call(
                ToolCall {
                    name: "deploy".into(),
                    arguments: json!({"API_TOKEN": "tok-secret-123", "env": "prod"})
                        .as_object()
                        .unwrap()
                        .clone(),
                    call_id: None,
                },
                CancellationToken::new(),
            )
            .await
            .unwrap();
        assert_eq!(out.text, "used ***");
        assert_eq!(out.structured, Some(json!({"output": "token=***"})));
        let records = sink.0.lock().unwrap();
        assert_eq!(records[0].input, json!({"API_TOKEN": "***", "env": "prod"}));
        assert_eq!(records[0].output, "used ***");
    }

    /// A workflow tool declaring `api_token` and `env`.
    struct Declared;

    #[async_trait::async_trait]
    impl ToolProvider for Declared {
        fn tools(&self) -> Vec<ToolSpec> {
            vec![ToolSpec {
                name: "sec2".into(),
                description: "a workflow".into(),
                input_schema: json!({"type": "object", "properties": {"api_token": {"type": "string"}, "env": {"type": "string"}}}),
            }]
        }
        async fn call(
            &self,
            _call: ToolCall,
            _cancel: CancellationToken,
        ) -> Result<ToolOutput, ToolCallError> {
            Ok(ToolOutput::error("unknown argument `api_tokn`"))
        }
    }

    #[tokio::test]
    async fn undeclared_arguments_of_a_declared_only_provider_are_recorded_masked() {
        let sink = Arc::new(Sink::default());
        let mut r = ToolRouter::new(ctx(Arc::clone(&sink), Masker::default()));
        r.register_declared_only("workflows", Arc::new(Declared))
            .unwrap();
        r.register("builtin", fixed(&["Read"], "ok")).unwrap();
        for (name, args) in [
            (
                "sec2",
                json!({"api_tokn": "sk-MCPWFSECRET-79", "env": "prod", "n": {"x": "y"}}),
            ),
            ("Read", json!({"file_path": "a.txt"})),
        ] {
            r.call(
                ToolCall {
                    name: name.into(),
                    arguments: args.as_object().unwrap().clone(),
                    call_id: None,
                },
                CancellationToken::new(),
            )
            .await
            .unwrap();
        }
        let records = sink.0.lock().unwrap();
        assert_eq!(
            records[0].input,
            json!({"api_tokn": "***", "env": "prod", "n": "***"})
        );
        // A provider registered plainly keeps what its schema does not list (aliases).
        assert_eq!(records[1].input, json!({"file_path": "a.txt"}));
    }
}
