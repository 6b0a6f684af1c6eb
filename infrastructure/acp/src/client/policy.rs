//! The permission policy of `provider: acp` (`options.permissions`): which of the agent's
//! options answers a `session/request_permission`, chosen by option KIND, never by position
//! or label. Source: shared/spec/acp.md §4.9.

use serde_json::Value;
use serde_json::json;

/// `options.permissions`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Policy {
    /// Answer the reject option (`reject_once`, else `reject_always`). The default.
    #[default]
    Deny,
    /// Allow tool kinds `read`, `search`, `fetch` and `think`; reject the rest.
    ReadOnly,
    /// Allow (`allow_once`, else `allow_always`).
    AllowAll,
    /// Ask the run's front-end (an approval request); reject when nobody answers.
    Ask,
}

impl Policy {
    /// The spellings of `permissions:`.
    pub const NAMES: &'static [&'static str] = &["deny", "read_only", "allow_all", "ask"];

    /// The spelling in workflows.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Deny => "deny",
            Self::ReadOnly => "read_only",
            Self::AllowAll => "allow_all",
            Self::Ask => "ask",
        }
    }

    /// Parses `deny`, `read_only`, `allow_all`, `ask` (also `read-only`, `allow-all`).
    pub fn parse(s: &str) -> Option<Self> {
        match s.trim().to_ascii_lowercase().replace('-', "_").as_str() {
            "deny" => Some(Self::Deny),
            "read_only" => Some(Self::ReadOnly),
            "allow_all" => Some(Self::AllowAll),
            "ask" => Some(Self::Ask),
            _ => None,
        }
    }
}

/// Tool kinds `read_only` allows (ACP v1 `ToolKind`).
pub const READ_KINDS: &[&str] = &["read", "search", "fetch", "think"];

/// The options of a permission request as `(optionId, kind)`, in the agent's order.
pub fn options(params: &Value) -> Vec<(String, String)> {
    params
        .get("options")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|o| {
                    Some((
                        o.get("optionId")?.as_str()?.to_owned(),
                        o.get("kind")?.as_str()?.to_owned(),
                    ))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The first option of `kinds`, tried in that order (by kind, never by position).
pub fn pick(options: &[(String, String)], kinds: &[&str]) -> Option<String> {
    kinds.iter().find_map(|k| {
        options
            .iter()
            .find(|(_, kind)| kind == k)
            .map(|(id, _)| id.clone())
    })
}

/// The reject option, `reject_once` before `reject_always`.
pub fn reject(options: &[(String, String)]) -> Option<String> {
    pick(options, &["reject_once", "reject_always"])
}

/// The allow option, `allow_once` before `allow_always`.
pub fn allow(options: &[(String, String)]) -> Option<String> {
    pick(options, &["allow_once", "allow_always"])
}

/// What `policy` answers without asking anybody, for a tool call of `tool_kind`: the chosen
/// option id, or `None` for `cancelled` (no option of the wanted kind). [`Policy::Ask`]
/// decides like `Deny` here (the fallback when nobody answers).
pub fn decide(
    policy: Policy,
    options: &[(String, String)],
    tool_kind: Option<&str>,
) -> Option<String> {
    match policy {
        Policy::Deny | Policy::Ask => reject(options),
        Policy::AllowAll => allow(options).or_else(|| reject(options)),
        Policy::ReadOnly => {
            if tool_kind.is_some_and(|k| READ_KINDS.contains(&k)) {
                allow(options).or_else(|| reject(options))
            } else {
                reject(options)
            }
        }
    }
}

/// The `session/request_permission` result for a chosen option (`None`: `cancelled`).
pub fn outcome(choice: Option<&str>) -> Value {
    match choice {
        Some(id) => json!({"outcome": {"outcome": "selected", "optionId": id}}),
        None => json!({"outcome": {"outcome": "cancelled"}}),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The options in an order where position-based picking would be wrong.
    fn opts() -> Vec<(String, String)> {
        [
            ("r-always", "reject_always"),
            ("a-always", "allow_always"),
            ("r-once", "reject_once"),
            ("a-once", "allow_once"),
        ]
        .iter()
        .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
        .collect()
    }

    #[test]
    fn deny_answers_the_reject_once_option_wherever_it_is() {
        assert_eq!(
            decide(Policy::Deny, &opts(), Some("edit")).as_deref(),
            Some("r-once")
        );
        let only_always = vec![
            ("x".to_owned(), "reject_always".to_owned()),
            ("y".to_owned(), "allow_once".to_owned()),
        ];
        assert_eq!(
            decide(Policy::Deny, &only_always, None).as_deref(),
            Some("x")
        );
        let no_reject = vec![("y".to_owned(), "allow_once".to_owned())];
        assert_eq!(decide(Policy::Deny, &no_reject, None), None);
    }

    #[test]
    fn read_only_allows_read_kinds_and_rejects_the_rest() {
        for k in READ_KINDS {
            assert_eq!(
                decide(Policy::ReadOnly, &opts(), Some(k)).as_deref(),
                Some("a-once"),
                "{k}"
            );
        }
        for k in ["edit", "execute", "delete", "move", "other"] {
            assert_eq!(
                decide(Policy::ReadOnly, &opts(), Some(k)).as_deref(),
                Some("r-once"),
                "{k}"
            );
        }
        assert_eq!(
            decide(Policy::ReadOnly, &opts(), None).as_deref(),
            Some("r-once")
        );
    }

    #[test]
    fn allow_all_prefers_allow_once_then_allow_always() {
        assert_eq!(
            decide(Policy::AllowAll, &opts(), Some("execute")).as_deref(),
            Some("a-once")
        );
        let always = vec![
            ("r".to_owned(), "reject_once".to_owned()),
            ("aa".to_owned(), "allow_always".to_owned()),
        ];
        assert_eq!(
            decide(Policy::AllowAll, &always, None).as_deref(),
            Some("aa")
        );
    }

    #[test]
    fn policies_parse_and_unknown_kinds_are_skipped() {
        assert_eq!(Policy::parse("read-only"), Some(Policy::ReadOnly));
        assert_eq!(Policy::parse("ALLOW_ALL"), Some(Policy::AllowAll));
        assert_eq!(Policy::parse("yes"), None);
        let params = json!({"options": [{"optionId": "a", "kind": "allow_once", "name": "A"}, {"name": "bad"}]});
        assert_eq!(
            options(&params),
            vec![("a".to_owned(), "allow_once".to_owned())]
        );
        assert_eq!(outcome(None), json!({"outcome": {"outcome": "cancelled"}}));
    }
}
