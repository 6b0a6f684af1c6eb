//! `provider: acp` options: `agent` (a preset or a command), `args`, `env`, `model`, `mode`,
//! `permissions`, `timeout`, `attach` (files sent with the prompt, see [`super::attach`]),
//! `auth_method` (the `authenticate` method awf calls when the agent requires it). Source: shared/spec/acp.md §4 (proposed YAML surface).

use std::time::Duration;

use awf_domain::AwfError;
use awf_domain::ErrorCode;
use awf_domain::ports::repository::Diagnostic;
use serde_json::Map;
use serde_json::Value;

use super::policy::Policy;

/// The `options:` keys of `provider: acp`.
pub const OPTION_KEYS: &[&str] = &[
    "agent",
    "args",
    "env",
    "model",
    "mode",
    "permissions",
    "timeout",
    "attach",
    "auth_method",
];

/// A preset: its name, the program and arguments it runs, and where the program comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Preset {
    /// `agent:` value.
    pub name: &'static str,
    /// Program looked up on PATH.
    pub program: &'static str,
    /// Its arguments.
    pub args: &'static [&'static str],
    /// The npm package that provides it (the hint when it is missing).
    pub package: &'static str,
    /// The session mode set when `mode:` is not given: claude-agent-acp starts in `auto`
    /// (its classifier decides permissions) and codex-acp in `agent` (it asks only for what
    /// it finds unsafe), so these presets ask for `default` and `read-only` (changes ask),
    /// which puts `permissions:` in charge.
    pub default_mode: Option<&'static str>,
}

/// The presets: claude (`@agentclientprotocol/claude-agent-acp`), gemini (`gemini --acp`),
/// codex (`@agentclientprotocol/codex-acp`). The adapters need Node 22.
pub const PRESETS: &[Preset] = &[
    Preset {
        name: "claude",
        program: "claude-agent-acp",
        args: &[],
        package: "@agentclientprotocol/claude-agent-acp@0.101.0",
        default_mode: Some("default"),
    },
    Preset {
        name: "gemini",
        program: "gemini",
        args: &["--acp"],
        package: "@google/gemini-cli@0.61.0",
        default_mode: None,
    },
    Preset {
        name: "codex",
        program: "codex-acp",
        args: &[],
        package: "@agentclientprotocol/codex-acp@2.6.0",
        default_mode: Some("read-only"),
    },
];

/// Default bound of each protocol wait (`initialize`, `session/new`, a permission question)
/// when `timeout` is not given.
pub const DEFAULT_WAIT: Duration = Duration::from_secs(120);

/// Parsed options of one `provider: acp` call.
#[derive(Debug, Clone, PartialEq)]
pub struct AcpOptions {
    /// The preset used, if any.
    pub preset: Option<Preset>,
    /// Program (a name looked up on PATH, or a path).
    pub program: String,
    /// Its arguments (the preset's or the command's, then `args`).
    pub args: Vec<String>,
    /// `env`, in order.
    pub env: Vec<(String, String)>,
    /// `model`.
    pub model: Option<String>,
    /// `mode`.
    pub mode: Option<String>,
    /// `permissions` (default `deny`).
    pub permissions: Policy,
    /// `timeout`: bound of each protocol wait.
    pub timeout: Duration,
    /// `attach`: paths of files sent with the prompt (relative to the step's working
    /// directory), in order; a single string is one path.
    pub attach: Vec<String>,
    /// `auth_method`: the id of one of the agent's `authMethods` (from `initialize`) that awf
    /// passes to `authenticate` when `session/new` answers `-32000` (auth required).
    pub auth_method: Option<String>,
}

fn bad(key: &str, msg: impl Into<String>, hint: impl Into<String>) -> AwfError {
    AwfError::new(
        ErrorCode::UserAgentInvalidOption,
        format!("acp option {key}: {}", msg.into()),
    )
    .with_hint(hint.into())
    .with_detail("option", key)
}

fn presets_hint() -> String {
    let names: Vec<&str> = PRESETS.iter().map(|p| p.name).collect();
    format!(
        "use a preset ({}) or the agent's command, e.g. `agent: opencode acp` or `agent: /path/to/agent`",
        names.join(", ")
    )
}

/// Parses a duration: a number of seconds, or text such as `90s`, `2m`, `500ms`, `1h`.
pub fn parse_duration(v: &Value) -> Option<Duration> {
    if let Some(n) = v.as_f64() {
        return (n.is_finite() && n > 0.0).then(|| Duration::from_secs_f64(n));
    }
    let s = v.as_str()?.trim();
    let (num, unit) = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .map_or((s, "s"), |i| (&s[..i], s[i..].trim()));
    let n: f64 = num.parse().ok()?;
    let secs = match unit {
        "ms" => n / 1000.0,
        "s" | "" => n,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        _ => return None,
    };
    (secs.is_finite() && secs > 0.0).then(|| Duration::from_secs_f64(secs))
}

fn strings(key: &str, v: &Value) -> Result<Vec<String>, AwfError> {
    match v {
        Value::Array(a) => a
            .iter()
            .map(|x| match x {
                Value::String(s) => Ok(s.clone()),
                Value::Number(n) => Ok(n.to_string()),
                Value::Bool(b) => Ok(b.to_string()),
                _ => Err(bad(
                    key,
                    "every element must be a string",
                    "write e.g. `args: [--verbose]`",
                )),
            })
            .collect(),
        Value::String(s) => Ok(s.split_whitespace().map(str::to_owned).collect()),
        _ => Err(bad(
            key,
            "must be a list of strings",
            "write e.g. `args: [--verbose]`",
        )),
    }
}

/// Splits an `agent:` value into a preset or a command (`program args…`). A single word
/// that is no preset, has no `/` and comes without `args` is an error (a misspelt preset).
fn agent(
    v: Option<&Value>,
    has_args: bool,
) -> Result<(Option<Preset>, String, Vec<String>), AwfError> {
    let Some(v) = v else {
        return Err(bad(
            "agent",
            "missing: which ACP agent to run",
            presets_hint(),
        ));
    };
    let Some(s) = v.as_str().map(str::trim).filter(|s| !s.is_empty()) else {
        return Err(bad("agent", "must be a non-empty string", presets_hint()));
    };
    if let Some(p) = PRESETS.iter().find(|p| p.name == s) {
        return Ok((
            Some(*p),
            p.program.to_owned(),
            p.args.iter().map(|a| (*a).to_owned()).collect(),
        ));
    }
    let mut words = s.split_whitespace().map(str::to_owned);
    let program = words.next().unwrap_or_default();
    let rest: Vec<String> = words.collect();
    if rest.is_empty() && !program.contains('/') && !has_args {
        let mut e = bad(
            "agent",
            format!("unknown ACP agent preset \"{s}\""),
            presets_hint(),
        );
        if let Some(c) = awf_domain::validate::closest(s, PRESETS.iter().map(|p| p.name)) {
            e = bad(
                "agent",
                format!("unknown ACP agent preset \"{s}\""),
                format!("did you mean '{c}'? {}", presets_hint()),
            );
        }
        return Err(e);
    }
    Ok((None, program, rest))
}

impl AcpOptions {
    /// Parses the (interpolated) options of a call.
    ///
    /// # Errors
    /// `USER.AGENT.INVALID_OPTION` naming the option and how to fix it.
    pub fn parse(options: &Map<String, Value>) -> Result<Self, AwfError> {
        let get = |k: &str| {
            options
                .iter()
                .find(|(key, _)| awf_domain::ports::agent::option_key(key) == k)
                .map(|(_, v)| v)
                .filter(|v| !v.is_null())
        };
        let extra = match get("args") {
            Some(v) => strings("args", v)?,
            None => Vec::new(),
        };
        let (preset, program, mut args) = agent(get("agent"), !extra.is_empty())?;
        args.extend(extra);
        let env = match get("env") {
            None => Vec::new(),
            Some(Value::Object(m)) => m
                .iter()
                .map(|(k, v)| {
                    let v = match v {
                        Value::String(s) => s.clone(),
                        other => other.to_string(),
                    };
                    (k.clone(), v)
                })
                .collect(),
            Some(_) => {
                return Err(bad(
                    "env",
                    "must be a map of names to values",
                    "write e.g. `env: {GEMINI_API_KEY: \"{{.env.KEY}}\"}`",
                ));
            }
        };
        let text = |k: &str| -> Result<Option<String>, AwfError> {
            match get(k) {
                None => Ok(None),
                Some(Value::String(s)) if s.trim().is_empty() => Ok(None),
                Some(Value::String(s)) => Ok(Some(s.trim().to_owned())),
                Some(_) => Err(bad(
                    k,
                    "must be a string",
                    format!("write e.g. `{k}: default`"),
                )),
            }
        };
        let permissions = match get("permissions") {
            None => Policy::Deny,
            Some(v) => v.as_str().and_then(Policy::parse).ok_or_else(|| {
                bad(
                    "permissions",
                    format!("unknown policy {v}"),
                    format!("use one of: {}", Policy::NAMES.join(", ")),
                )
            })?,
        };
        let timeout = match get("timeout") {
            None => DEFAULT_WAIT,
            Some(v) => parse_duration(v).ok_or_else(|| {
                bad(
                    "timeout",
                    format!("not a duration: {v}"),
                    "write seconds (`60`) or a duration (`90s`, `2m`)",
                )
            })?,
        };
        let attach = match get("attach") {
            None => Vec::new(),
            Some(Value::String(p)) => vec![p.clone()],
            Some(Value::Array(a)) => a
                .iter()
                .map(|x| match x.as_str() {
                    Some(p) => Ok(p.to_owned()),
                    None => Err(bad(
                        "attach",
                        format!("every element must be a path (a string), not {x}"),
                        "write e.g. `attach: [src/main.rs, docs/diagram.png]`",
                    )),
                })
                .collect::<Result<_, _>>()?,
            Some(v) => {
                return Err(bad(
                    "attach",
                    format!("must be a list of paths, not {v}"),
                    "write e.g. `attach: [src/main.rs, docs/diagram.png]`",
                ));
            }
        };
        if attach.iter().any(|p| p.trim().is_empty()) {
            return Err(bad(
                "attach",
                "an empty path",
                "remove the empty entry from `attach:`",
            ));
        }
        Ok(Self {
            attach,
            auth_method: text("auth_method")?,
            preset,
            program,
            args,
            env,
            model: text("model")?,
            mode: text("mode")?.or_else(|| preset.and_then(|p| p.default_mode).map(str::to_owned)),
            permissions,
            timeout,
        })
    }
}

/// `awf validate`: the problems of literal options (values holding `{{` are skipped: they
/// are only known at run time), each with `path` = the option key.
pub fn check(options: &Map<String, Value>) -> Vec<Diagnostic> {
    let templated = |v: &Value| v.as_str().is_some_and(|s| s.contains("{{"));
    // Stand-ins that parse, so only the literal options are judged.
    let stand_in = |k: &str| match awf_domain::ports::agent::option_key(k).as_ref() {
        "agent" => Value::String("templated --command".into()),
        "permissions" => Value::String("deny".into()),
        "timeout" => Value::from(60),
        _ => Value::String("x".into()),
    };
    let mut literal: Map<String, Value> = options
        .iter()
        .map(|(k, v)| {
            let v = if templated(v) { stand_in(k) } else { v.clone() };
            (k.clone(), v)
        })
        .collect();
    // Every refused option is said (new user: `agent: claud` hid `permissions: read_onyl`
    // until it was fixed): the refused one is replaced by its stand-in and the rest tried
    // again.
    let mut out = Vec::new();
    for _ in 0..=options.len() {
        let Err(e) = AcpOptions::parse(&literal) else {
            break;
        };
        let key = e
            .details()
            .get("option")
            .and_then(Value::as_str)
            .unwrap_or("agent")
            .to_owned();
        let mut d = Diagnostic::error(e.code(), key.clone(), e.message().to_owned());
        if let Some(h) = e.hints().first() {
            d = d.with_hint(h.clone());
        }
        out.push(d);
        let Some(name) = literal
            .keys()
            .find(|k| awf_domain::ports::agent::option_key(k) == key.as_str())
            .cloned()
        else {
            break;
        };
        // The agent is needed for the rest to be judged: a stand-in; any other option is
        // taken out (a stand-in of the wrong shape hid the options after it, breaker).
        if awf_domain::ports::agent::option_key(&name) == "agent" {
            let replacement = stand_in(&name);
            if literal.get(&name) == Some(&replacement) {
                break;
            }
            literal.insert(name, replacement);
        } else {
            literal.remove(&name);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn opts(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn presets_and_commands_resolve() {
        let o = AcpOptions::parse(&opts(json!({"agent": "gemini", "args": ["-m", "x"]}))).unwrap();
        assert_eq!(
            (o.program.as_str(), o.args.clone()),
            ("gemini", vec!["--acp".to_owned(), "-m".into(), "x".into()])
        );
        assert_eq!(o.permissions, Policy::Deny);
        let o = AcpOptions::parse(&opts(json!({"agent": "python3 agent.py --fast", "permissions": "allow_all", "timeout": "2m"}))).unwrap();
        assert_eq!(o.program, "python3");
        assert_eq!(o.args, vec!["agent.py".to_owned(), "--fast".into()]);
        assert_eq!(o.timeout, Duration::from_secs(120));
        assert_eq!(o.permissions, Policy::AllowAll);
        assert!(AcpOptions::parse(&opts(json!({"agent": "my-agent", "args": ["acp"]}))).is_ok());
    }

    #[test]
    fn an_unknown_preset_without_a_command_is_an_error_with_a_hint() {
        let e = AcpOptions::parse(&opts(json!({"agent": "clude"}))).unwrap_err();
        assert_eq!(e.code(), ErrorCode::UserAgentInvalidOption);
        assert!(
            e.message().contains("unknown ACP agent preset \"clude\""),
            "{}",
            e.message()
        );
        assert!(
            e.hints()[0].contains("did you mean 'claude'?"),
            "{:?}",
            e.hints()
        );
        let e = AcpOptions::parse(&opts(json!({}))).unwrap_err();
        assert!(e.message().contains("agent: missing"), "{}", e.message());
        let e = AcpOptions::parse(&opts(
            json!({"agent": "claude", "permissions": "sometimes"}),
        ))
        .unwrap_err();
        assert!(e.hints()[0].contains("deny, read_only, allow_all, ask"));
        assert!(AcpOptions::parse(&opts(json!({"agent": "claude", "timeout": "soon"}))).is_err());
    }

    #[test]
    fn attach_takes_a_list_of_paths_or_one_path() {
        let o = AcpOptions::parse(&opts(
            json!({"agent": "claude", "attach": ["a b.txt", "img.png"]}),
        ))
        .unwrap();
        assert_eq!(o.attach, vec!["a b.txt".to_owned(), "img.png".into()]);
        let o =
            AcpOptions::parse(&opts(json!({"agent": "claude", "attach": "one file.md"}))).unwrap();
        assert_eq!(o.attach, vec!["one file.md".to_owned()]);
        for bad in [json!([1]), json!({"a": 1}), json!([""])] {
            let e =
                AcpOptions::parse(&opts(json!({"agent": "claude", "attach": bad}))).unwrap_err();
            assert_eq!(e.code(), ErrorCode::UserAgentInvalidOption, "{bad}");
            assert_eq!(e.details()["option"], "attach", "{bad}");
        }
        let d = check(&opts(json!({"agent": "claude", "attach": [3]})));
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].path, "attach");
        assert!(
            check(&opts(
                json!({"agent": "claude", "attach": "{{.inputs.file}}"})
            ))
            .is_empty()
        );
    }

    #[test]
    fn validation_judges_literal_options_only() {
        assert!(
            check(&opts(
                json!({"agent": "{{.inputs.agent}}", "permissions": "{{.inputs.p}}"})
            ))
            .is_empty()
        );
        let d = check(&opts(json!({"agent": "claude", "permissions": "maybe"})));
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].path, "permissions");
        // Every refused option is said, one bad option does not hide the next (breaker:
        // `env` hid `permissions` and `timeout`; a bad preset hid `permissions`).
        let d = check(&opts(json!({
            "agent": "claud",
            "env": ["A", "B"],
            "permissions": "readonly",
            "timeout": "forever"
        })));
        let mut paths: Vec<&str> = d.iter().map(|d| d.path.as_str()).collect();
        paths.sort_unstable();
        assert_eq!(paths, ["agent", "env", "permissions", "timeout"], "{d:?}");
        assert_eq!(
            parse_duration(&json!("500ms")),
            Some(Duration::from_millis(500))
        );
        assert_eq!(parse_duration(&json!(0)), None);
    }
}
