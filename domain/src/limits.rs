//! What an agent failure means for `fallback_providers:` and usage limits: its class
//! (usage limit, quota, refusal, provider unavailable) and, for a usage limit, when it lifts.
//!
//! Providers say it in the error's details where they know it (`limit_class`,
//! `retry_after_secs` from HTTP `Retry-After`, `reset_at` in Unix seconds); the CLIs only
//! print it, so the error text is read too: claude's `API Error: Request rejected (429)`,
//! `usage limit reached|<epoch>` and `resets at <epoch or RFC 3339>`, OpenAI's and codex's
//! `Please try again in 2.5s`, gemini's `Please retry in 2s` and `"retryDelay": "2s"`.
//! Source: issue 14 ("Usage limits", "fallback_providers"); shared/spec/agents-offline.md.

use std::time::Duration;
use std::time::SystemTime;
use std::time::UNIX_EPOCH;

use serde_json::Value;

use crate::error::AwfError;
use crate::error::ErrorCode;
use crate::workflow::FallbackClass;

/// The class of an agent failure and, for a usage limit, when it lifts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FailureClass {
    /// What kind of failure it is.
    pub class: FallbackClass,
    /// When the limit lifts (usage limits with retry information only).
    pub reset_at: Option<SystemTime>,
}

/// Classifies an agent failure; `None` for failures no fallback or wait helps with (bad
/// options, invalid output, timeouts, cancellation). `now` turns relative retry hints into a
/// time.
pub fn classify(err: &AwfError, now: SystemTime) -> Option<FailureClass> {
    if matches!(
        err.code(),
        ErrorCode::ExecutionRunCancelled
            | ErrorCode::ExecutionAgentTimeout
            | ErrorCode::ExecutionAgentInvalidOutput
            | ErrorCode::ExecutionBudgetExceeded
            | ErrorCode::UserAgentInvalidOption
    ) {
        return None;
    }
    let d = err.details();
    let text = err.message().to_ascii_lowercase();
    let reset_at = d
        .get("reset_at")
        .and_then(Value::as_f64)
        .and_then(epoch)
        .or_else(|| {
            d.get("retry_after_secs")
                .and_then(Value::as_f64)
                .and_then(|s| now.checked_add(Duration::try_from_secs_f64(s).ok()?))
        })
        .or_else(|| reset_from_text(&text, now));
    let by_detail = d
        .get("limit_class")
        .and_then(Value::as_str)
        .and_then(FallbackClass::parse);
    let class = by_detail.or_else(|| match err.code() {
        ErrorCode::ExecutionAgentRefusal => Some(FallbackClass::Refusal),
        ErrorCode::ExecutionAgentQuota => Some(FallbackClass::Quota),
        ErrorCode::ExecutionAgentUsageLimit => Some(FallbackClass::UsageLimit),
        ErrorCode::ExecutionAgentRateLimited => Some(if reset_at.is_none() && quota_words(&text) {
            FallbackClass::Quota
        } else {
            FallbackClass::UsageLimit
        }),
        ErrorCode::ExecutionAgentBinaryNotFound
        | ErrorCode::ExecutionAgentServerError
        | ErrorCode::UserAgentUnknownProvider => Some(FallbackClass::Unavailable),
        _ => class_from_text(&text, reset_at.is_some()),
    })?;
    Some(FailureClass {
        class,
        reset_at: if class == FallbackClass::UsageLimit {
            reset_at
        } else {
            None
        },
    })
}

fn epoch(secs: f64) -> Option<SystemTime> {
    if !secs.is_finite() || secs < 0.0 {
        return None;
    }
    // Milliseconds (13 digits) are accepted too.
    let secs = if secs > 1e11 { secs / 1000.0 } else { secs };
    UNIX_EPOCH.checked_add(Duration::try_from_secs_f64(secs).ok()?)
}

fn quota_words(t: &str) -> bool {
    [
        "insufficient_quota",
        "exceeded your current quota",
        "credit balance is too low",
        "billing",
        "quota exceeded",
        "out of credits",
    ]
    .iter()
    .any(|w| t.contains(w))
}

/// The class a CLI's error text shows (its exit status alone says nothing).
fn class_from_text(t: &str, has_reset: bool) -> Option<FallbackClass> {
    let limit = [
        "(429)",
        " 429 ",
        "429 too many",
        "rate limit",
        "rate_limit",
        "ratelimit",
        "too many requests",
        "usage limit",
        "limit reached",
        "resource_exhausted",
        "resource exhausted",
        "hit your limit",
    ]
    .iter()
    .any(|w| t.contains(w));
    if quota_words(t) && !has_reset {
        return Some(FallbackClass::Quota);
    }
    if limit || has_reset && quota_words(t) {
        return Some(FallbackClass::UsageLimit);
    }
    // claude: `API Error: Claude Code is unable to respond to this request, which appears to
    // violate our Usage Policy` (its result's stop_reason is `refusal`).
    if t.contains("\"stop_reason\":\"refusal\"")
        || t.contains("stop_reason: refusal")
        || t.contains("the model refused")
        || t.contains("violate our usage policy")
        || t.contains("unable to respond to this request")
    {
        return Some(FallbackClass::Refusal);
    }
    let unavailable = [
        "cannot connect",
        "connection refused",
        "econnrefused",
        "enotfound",
        "overloaded",
        "(529)",
        "(503)",
        "(502)",
        "service unavailable",
        "could not start",
        "not found on path",
    ]
    .iter()
    .any(|w| t.contains(w));
    unavailable.then_some(FallbackClass::Unavailable)
}

/// A reset time written in the text (lower-cased), relative hints resolved against `now`.
fn reset_from_text(t: &str, now: SystemTime) -> Option<SystemTime> {
    for key in [
        "resets at ",
        "reset at ",
        "resets_at\":",
        "resetsat\":",
        "reset_at\":",
    ] {
        if let Some(i) = t.find(key) {
            let rest = t[i + key.len()..].trim_start_matches([' ', '"']);
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            if digits.len() >= 9
                && !rest[digits.len()..].starts_with(['-', ':'])
                && let Some(at) = digits.parse::<f64>().ok().and_then(epoch)
            {
                return Some(at);
            }
            let word: String = rest
                .chars()
                .take_while(|c| !c.is_whitespace() && !matches!(c, '"' | ',' | ')' | ';'))
                .collect();
            let word = word.trim_end_matches('.');
            if let Some(at) = crate::timefmt::parse_rfc3339(&word.to_ascii_uppercase()) {
                return Some(at);
            }
        }
    }
    // claude's subscription limit: `usage limit reached|1764612000`.
    if let Some(i) = t.find("limit reached|") {
        let digits: String = t[i + 14..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        if let Some(at) = digits.parse::<f64>().ok().and_then(epoch) {
            return Some(at);
        }
    }
    for key in [
        "retry after ",
        "retry-after: ",
        "retry-after:",
        "try again in ",
        "retry in ",
        "resets in ",
        "retrydelay\":",
        "retry_delay\":",
    ] {
        if let Some(i) = t.find(key)
            && let Some(d) = duration_at(t[i + key.len()..].trim_start_matches([' ', '"']))
        {
            return now.checked_add(d);
        }
    }
    None
}

/// `2.5s`, `500ms`, `3 seconds`, `1m30s`, `2 minutes`, `1h`, or a bare number of seconds.
fn duration_at(s: &str) -> Option<Duration> {
    let mut total = 0.0f64;
    let mut rest = s;
    let mut any = false;
    loop {
        let int: String = rest.chars().take_while(char::is_ascii_digit).collect();
        if int.is_empty() {
            break;
        }
        let frac: String = rest[int.len()..]
            .strip_prefix('.')
            .map(|f| f.chars().take_while(char::is_ascii_digit).collect())
            .unwrap_or_default();
        let num = if frac.is_empty() {
            int
        } else {
            format!("{int}.{frac}")
        };
        let n: f64 = num.parse().ok()?;
        rest = rest[num.len()..].trim_start();
        let unit: String = rest.chars().take_while(char::is_ascii_alphabetic).collect();
        let mult = match unit.as_str() {
            "ms" | "millisecond" | "milliseconds" => 0.001,
            "" | "s" | "sec" | "secs" | "second" | "seconds" => 1.0,
            "m" | "min" | "mins" | "minute" | "minutes" => 60.0,
            "h" | "hr" | "hrs" | "hour" | "hours" => 3600.0,
            _ => return any.then(|| Duration::from_secs_f64(total)),
        };
        total += n * mult;
        any = true;
        rest = &rest[unit.len()..];
        if unit.is_empty() {
            break;
        }
    }
    (any && total.is_finite()).then(|| Duration::from_secs_f64(total))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(secs)
    }

    fn class(code: ErrorCode, msg: &str) -> Option<FailureClass> {
        classify(&AwfError::new(code, msg), at(1_000_000_000))
    }

    #[test]
    fn http_retry_after_and_reset_details_give_the_reset_time() {
        let now = at(1_000_000_000);
        let e = AwfError::new(ErrorCode::ExecutionAgentRateLimited, "rate limited")
            .with_detail("retry_after_secs", 2.0);
        assert_eq!(
            classify(&e, now),
            Some(FailureClass {
                class: FallbackClass::UsageLimit,
                reset_at: Some(at(1_000_000_002)),
            })
        );
        let e = AwfError::new(ErrorCode::ExecutionAgentRateLimited, "x")
            .with_detail("reset_at", 1_000_000_100u64);
        assert_eq!(
            classify(&e, now).and_then(|c| c.reset_at),
            Some(at(1_000_000_100))
        );
    }

    #[test]
    fn cli_texts_are_classified_with_their_reset_hints() {
        let now = 1_000_000_000;
        let c = class(
            ErrorCode::ExecutionAgentFailed,
            "claude: `claude` exited with status 1: API Error: Request rejected (429) · usage limit reached, resets at 1000000030",
        )
        .unwrap();
        assert_eq!(c.class, FallbackClass::UsageLimit);
        assert_eq!(c.reset_at, Some(at(now + 30)));
        let c = class(
            ErrorCode::ExecutionAgentFailed,
            "Claude AI usage limit reached|1000003600",
        )
        .unwrap();
        assert_eq!(c.reset_at, Some(at(now + 3600)));
        let c = class(
            ErrorCode::ExecutionAgentFailed,
            "codex: turn failed: Rate limit reached for gpt-5 on tokens per min. Please try again in 2.5s.",
        )
        .unwrap();
        assert_eq!(c.reset_at, Some(at(now) + Duration::from_millis(2500)));
        let c = class(
            ErrorCode::ExecutionAgentFailed,
            "gemini: [API Error: {\"error\":{\"code\":429,\"status\":\"RESOURCE_EXHAUSTED\",\"message\":\"You exceeded your current quota. Please retry in 2s.\",\"details\":[{\"retryDelay\":\"2s\"}]}}]",
        )
        .unwrap();
        assert_eq!(c.class, FallbackClass::UsageLimit);
        assert_eq!(c.reset_at, Some(at(now + 2)));
        let c = class(
            ErrorCode::ExecutionAgentFailed,
            "usage limit: resets at 2001-09-09T01:47:00Z",
        )
        .unwrap();
        // 1_000_000_000 is 2001-09-09T01:46:40Z.
        assert_eq!(c.reset_at, Some(at(now + 20)));
        assert_eq!(
            class(
                ErrorCode::ExecutionAgentFailed,
                "API Error: 400 Your credit balance is too low"
            )
            .map(|c| c.class),
            Some(FallbackClass::Quota)
        );
        assert_eq!(
            class(ErrorCode::ExecutionAgentRateLimited, "insufficient_quota").map(|c| c.class),
            Some(FallbackClass::Quota)
        );
        assert_eq!(
            class(
                ErrorCode::ExecutionAgentFailed,
                "openai_compatible: cannot connect to http://x"
            )
            .map(|c| c.class),
            Some(FallbackClass::Unavailable)
        );
        assert_eq!(
            class(ErrorCode::ExecutionAgentServerError, "boom").map(|c| c.class),
            Some(FallbackClass::Unavailable)
        );
        assert_eq!(
            class(ErrorCode::ExecutionAgentRefusal, "no").map(|c| c.class),
            Some(FallbackClass::Refusal)
        );
        assert_eq!(
            class(
                ErrorCode::ExecutionAgentFailed,
                "claude: `claude` exited with status 1: API Error: Claude Code is unable to respond to this request, which appears to violate our Usage Policy"
            )
            .map(|c| c.class),
            Some(FallbackClass::Refusal)
        );
        assert_eq!(class(ErrorCode::ExecutionAgentFailed, "segfault"), None);
        assert_eq!(class(ErrorCode::ExecutionAgentTimeout, "rate limit"), None);
    }

    #[test]
    fn durations_and_http_dates_parse() {
        assert_eq!(duration_at("1m30s"), Some(Duration::from_secs(90)));
        assert_eq!(duration_at("500ms."), Some(Duration::from_millis(500)));
        assert_eq!(duration_at("3 seconds"), Some(Duration::from_secs(3)));
        assert_eq!(duration_at("x"), None);
        assert_eq!(
            crate::timefmt::parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT"),
            Some(784_111_777)
        );
    }
}
