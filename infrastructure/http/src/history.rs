//! `/api/history` and `/api/history/stats`: the recorded runs (one row per run), filtered.
//! Source: shared/spec/http-ops.md §1.3 ("History entry", "History stats").

use std::collections::BTreeSet;
use std::sync::Arc;

use awf_domain::AwfError;
use awf_domain::ErrorCode;
use awf_domain::ports::store::HistoryFilter;
use awf_domain::ports::store::HistoryRecord;
use awf_domain::ports::store::HistoryStore;
use awf_domain::ports::store::StoredStatus;
use awf_domain::timefmt;
use axum::Json;
use axum::extract::Query;
use axum::extract::State;
use axum::http::StatusCode;
use serde::Deserialize;
use serde::Serialize;
use utoipa::IntoParams;
use utoipa::ToSchema;

use crate::Envelope;
use crate::HttpConfig;
use crate::executions::ExecStatus;
use crate::problem::Problem;
use crate::problem::ProblemDoc;

/// Rows `GET /api/history` gives without `limit` (AWF (Go)'s default).
pub const DEFAULT_LIMIT: usize = 20;

/// The filter of both history routes.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct HistoryQuery {
    /// Workflow name or identifier.
    pub workflow: Option<String>,
    /// `running`, `completed` (also `success`), `failed` (also `failure`), `cancelled`,
    /// `waiting` (parked on a usage limit), `queued` (the shared store's queue).
    #[param(value_type = Option<HistoryStatusParam>, inline)]
    pub status: Option<String>,
    /// Runs started at or after this time (RFC 3339, or a day `YYYY-MM-DD`).
    #[param(
        pattern = r"^\s*[0-9]{4}-[0-9]{2}-[0-9]{2}([Tt][0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?([Zz]|[+-][0-9]{2}:[0-9]{2}))?\s*$"
    )]
    pub since: Option<String>,
    /// Runs started at or before this time (RFC 3339, or a day `YYYY-MM-DD`: its end).
    #[param(
        pattern = r"^\s*[0-9]{4}-[0-9]{2}-[0-9]{2}([Tt][0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?([Zz]|[+-][0-9]{2}:[0-9]{2}))?\s*$"
    )]
    pub until: Option<String>,
    /// At most this many rows, newest first (default 20; ignored by `stats`).
    #[param(value_type = Option<u64>, minimum = 1)]
    pub limit: Option<String>,
}

/// The run statuses `?status=` takes (the OpenAPI document's enum; [`parse_status`] reads
/// them, any case).
#[derive(Debug, Clone, Copy, ToSchema)]
#[schema(rename_all = "lowercase")]
pub enum HistoryStatusParam {
    /// Running now.
    Running,
    /// Parked on a usage limit.
    Waiting,
    /// In the shared store's queue.
    Queued,
    /// Ended successfully.
    Completed,
    /// As `completed`.
    Success,
    /// As `completed`.
    Succeeded,
    /// Ended in failure.
    Failed,
    /// As `failed`.
    Failure,
    /// Cancelled.
    Cancelled,
    /// As `cancelled`.
    Canceled,
}

/// One recorded run.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct HistoryEntry {
    /// Run id.
    pub id: String,
    /// The run id again: AWF (Go)'s `workflow_id`, as `awf history -f json` gives it.
    pub workflow_id: String,
    /// Identifier the run was started with (name or path), as `workflow` in
    /// `awf history -f json`.
    pub workflow: String,
    /// The workflow's `name:`.
    pub workflow_name: String,
    /// Status.
    pub status: ExecStatus,
    /// Process exit code, once finished.
    pub exit_code: Option<u8>,
    /// Start (RFC 3339, UTC).
    pub started_at: String,
    /// End (RFC 3339, UTC), once finished.
    pub completed_at: Option<String>,
    /// Wall time in milliseconds, once finished.
    pub duration_ms: Option<u64>,
    /// Failure text; `null` when there is none, as `awf history -f json` gives it.
    pub error_message: Option<String>,
    /// `true` on a run recorded as `running` whose awf process is gone (killed with
    /// SIGKILL, crashed), as `awf history -f json` marks it; absent otherwise.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub process_gone: bool,
}

/// `GET /api/history`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct HistoryList {
    /// Matching runs, newest first.
    pub entries: Vec<HistoryEntry>,
}

/// `GET /api/history/stats` (snake_case keys; AWF (Go) has PascalCase ones). The counts are
/// of the runs a user started: a sub-workflow's runs are part of their parent's, unless
/// `workflow` names one (`HistoryFilter::counts`).
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
pub struct HistoryStatsBody {
    /// Runs matching the filter.
    pub total_executions: u64,
    /// Successful runs.
    pub success_count: u64,
    /// Failed runs.
    pub failed_count: u64,
    /// Cancelled runs.
    pub cancelled_count: u64,
    /// Runs still running (those whose awf process is gone are not: see
    /// `process_gone_count`).
    pub running_count: u64,
    /// Runs recorded as running whose awf process is gone (killed with SIGKILL, crashed), as
    /// `awf history --stats` counts them (`Running (process gone)`).
    #[serde(default)]
    pub process_gone_count: u64,
    /// Runs parked on a usage limit until its reset time (`awf resume` continues them).
    pub waiting_count: u64,
    /// Runs of the shared store's queue no worker started yet (`awf serve --store`).
    #[serde(default)]
    pub queued_count: u64,
    /// Mean duration of finished runs, in milliseconds; none when no run finished.
    pub avg_duration_ms: Option<u64>,
}

fn invalid(message: String, hint: &str) -> Problem {
    Problem::with_status(
        StatusCode::UNPROCESSABLE_ENTITY,
        AwfError::new(ErrorCode::UserInputValidationFailed, message).with_hint(hint),
    )
}

/// A stored status named by a query: AWF (Go)'s words and awf's (`success` is `completed`).
pub fn parse_status(s: &str) -> Option<StoredStatus> {
    match s.trim().to_ascii_lowercase().as_str() {
        "running" => Some(StoredStatus::Running),
        "waiting" => Some(StoredStatus::Waiting),
        "queued" => Some(StoredStatus::Queued),
        "completed" | "success" | "succeeded" => Some(StoredStatus::Success),
        "failed" | "failure" => Some(StoredStatus::Failure),
        "cancelled" | "canceled" => Some(StoredStatus::Cancelled),
        _ => None,
    }
}

/// Milliseconds since the epoch of an RFC 3339 time or a `YYYY-MM-DD` day (its start, or
/// with `end_of_day` its last millisecond).
pub fn parse_time_ms(s: &str, end_of_day: bool) -> Option<u64> {
    let t = s.trim();
    let ms = |st: std::time::SystemTime| {
        st.duration_since(std::time::UNIX_EPOCH)
            .ok()
            .and_then(|d| u64::try_from(d.as_millis()).ok())
    };
    if let Some(st) = timefmt::parse_rfc3339(t) {
        return ms(st);
    }
    if t.len() == 10 {
        let day = timefmt::parse_rfc3339(&format!("{t}T00:00:00Z")).and_then(ms)?;
        return Some(if end_of_day {
            day + 86_400_000 - 1
        } else {
            day
        });
    }
    None
}

struct Parsed {
    filter: HistoryFilter,
    until_ms: Option<u64>,
    limit: usize,
}

fn parse(q: &HistoryQuery) -> Result<Parsed, Problem> {
    let status = match q.status.as_deref().filter(|s| !s.trim().is_empty()) {
        None => None,
        Some(s) => Some(parse_status(s).ok_or_else(|| {
            invalid(
                format!("status {s:?} is not a run status"),
                "use running, completed (or success), failed, cancelled, waiting or queued",
            )
        })?),
    };
    let time = |name: &str, v: &Option<String>, end: bool| -> Result<Option<u64>, Problem> {
        match v.as_deref().filter(|s| !s.trim().is_empty()) {
            None => Ok(None),
            Some(s) => parse_time_ms(s, end).map(Some).ok_or_else(|| {
                // `+01:00` sent unencoded arrives as ` 01:00` (a `+` in a query string is a
                // space): say how to send it.
                let plus = s.trim().contains(' ') && parse_time_ms(&s.trim().replacen(' ', "+", 1), end).is_some();
                invalid(
                    format!("{name} {s:?} is not a time"),
                    if plus {
                        "a `+` in a query string reads as a space: send the offset as %2B (since=2026-01-31T12:00:00%2B01:00), or use Z"
                    } else {
                        "use RFC 3339 (2026-01-31T12:00:00Z) or a day (2026-01-31)"
                    },
                )
            }),
        }
    };
    let since_ms = time("since", &q.since, false)?;
    let until_ms = time("until", &q.until, true)?;
    let limit = match q.limit.as_deref().filter(|s| !s.trim().is_empty()) {
        None => DEFAULT_LIMIT,
        Some(s) => match s.trim().parse::<usize>() {
            Ok(n) if n >= 1 => n,
            // All digits, past what the machine counts to (breaker: "not a positive whole
            // number" for one that is).
            Err(_) if s.trim().bytes().all(|b| b.is_ascii_digit()) => {
                return Err(invalid(
                    format!("limit {s:?} is too large"),
                    "use limit=1 or more, up to 18446744073709551615",
                ));
            }
            _ => {
                return Err(invalid(
                    format!("limit {s:?} is not a positive whole number"),
                    "use limit=1 or more",
                ));
            }
        },
    };
    Ok(Parsed {
        filter: HistoryFilter {
            workflow: q.workflow.clone().filter(|w| !w.is_empty()),
            status,
            since_ms,
            limit: None,
        },
        until_ms,
        limit,
    })
}

fn store(cfg: &HttpConfig) -> Result<&Arc<dyn HistoryStore>, Problem> {
    cfg.history.as_ref().ok_or_else(|| {
        Problem::with_status(
            StatusCode::SERVICE_UNAVAILABLE,
            AwfError::new(
                ErrorCode::SystemIoReadFailed,
                "the run history is not available",
            )
            .with_hint("check the storage directory (--storage, AWF_STORAGE_DIR) and AWF_RECORD"),
        )
    })
}

fn rows(cfg: &HttpConfig, p: &Parsed) -> Result<Vec<HistoryRecord>, Problem> {
    let mut rows = store(cfg)?.list(&p.filter)?;
    if let Some(u) = p.until_ms {
        rows.retain(|r| r.started_at_ms <= u);
    }
    Ok(rows)
}

fn entry(r: HistoryRecord, process_gone: bool) -> HistoryEntry {
    let at = |ms: u64| {
        timefmt::format_rfc3339(std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms))
    };
    HistoryEntry {
        workflow_id: r.id.clone(),
        id: r.id,
        workflow: r.workflow_id,
        workflow_name: r.workflow_name,
        status: r.status.into(),
        exit_code: r.exit_code,
        started_at: at(r.started_at_ms),
        completed_at: r.completed_at_ms.map(at),
        duration_ms: r.duration_ms,
        error_message: r.error_message,
        process_gone,
    }
}

/// Recorded runs, newest first.
#[utoipa::path(
    get,
    path = "/api/history",
    operation_id = "list-history",
    tag = "history",
    params(HistoryQuery),
    responses(
        (status = 200, description = "Matching runs, newest first", body = Envelope<HistoryList>),
        (status = 400, description = "The query string does not decode", body = ProblemDoc, content_type = "application/problem+json"),
        (status = 401, description = "Missing or wrong bearer token", body = ProblemDoc, content_type = "application/problem+json"),
        (status = 422, description = "A filter does not parse", body = ProblemDoc, content_type = "application/problem+json"),
        (status = 500, description = "The history cannot be read", body = ProblemDoc, content_type = "application/problem+json"),
        (status = 503, description = "No history store", body = ProblemDoc, content_type = "application/problem+json"),
    )
)]
pub(crate) async fn list_history(
    State(cfg): State<Arc<HttpConfig>>,
    Query(q): Query<HistoryQuery>,
) -> Result<Json<Envelope<HistoryList>>, Problem> {
    let p = parse(&q)?;
    let mut rows = rows(&cfg, &p)?;
    rows.truncate(p.limit);
    let gone = cfg.gone(&rows);
    Ok(Envelope::json(HistoryList {
        entries: rows
            .into_iter()
            .map(|r| {
                let process_gone = gone.contains(&r.id);
                entry(r, process_gone)
            })
            .collect(),
    }))
}

/// Totals over the recorded runs matching the filter (`limit` is ignored).
#[utoipa::path(
    get,
    path = "/api/history/stats",
    operation_id = "history-stats",
    tag = "history",
    params(HistoryQuery),
    responses(
        (status = 200, description = "Totals", body = Envelope<HistoryStatsBody>),
        (status = 400, description = "The query string does not decode", body = ProblemDoc, content_type = "application/problem+json"),
        (status = 401, description = "Missing or wrong bearer token", body = ProblemDoc, content_type = "application/problem+json"),
        (status = 422, description = "A filter does not parse", body = ProblemDoc, content_type = "application/problem+json"),
        (status = 500, description = "The history cannot be read", body = ProblemDoc, content_type = "application/problem+json"),
        (status = 503, description = "No history store", body = ProblemDoc, content_type = "application/problem+json"),
    )
)]
pub(crate) async fn history_stats(
    State(cfg): State<Arc<HttpConfig>>,
    Query(q): Query<HistoryQuery>,
) -> Result<Json<Envelope<HistoryStatsBody>>, Problem> {
    let p = parse(&q)?;
    let mut rows = rows(&cfg, &p)?;
    rows.retain(|r| p.filter.counts(r.parent_run_id.as_deref()));
    Ok(Envelope::json(stats_of(&rows, &cfg.gone(&rows))))
}

/// Totals over `rows`; those of `gone` recorded as running (their awf process is gone) are
/// counted in `process_gone_count`, not in `running_count`.
pub fn stats_of(rows: &[HistoryRecord], gone: &BTreeSet<String>) -> HistoryStatsBody {
    let mut s = HistoryStatsBody::default();
    let (mut sum, mut n) = (0u64, 0u64);
    for r in rows {
        s.total_executions += 1;
        match r.status {
            StoredStatus::Success => s.success_count += 1,
            StoredStatus::Failure => s.failed_count += 1,
            StoredStatus::Cancelled => s.cancelled_count += 1,
            StoredStatus::Running if gone.contains(&r.id) => s.process_gone_count += 1,
            StoredStatus::Running => s.running_count += 1,
            StoredStatus::Waiting => s.waiting_count += 1,
            StoredStatus::Queued => s.queued_count += 1,
        }
        if !matches!(
            r.status,
            StoredStatus::Running | StoredStatus::Waiting | StoredStatus::Queued
        ) && let Some(d) = r.duration_ms
        {
            sum = sum.saturating_add(d);
            n += 1;
        }
    }
    s.avg_duration_ms = sum.checked_div(n);
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(id: &str, status: StoredStatus) -> HistoryRecord {
        HistoryRecord {
            id: id.into(),
            workflow_id: "w".into(),
            workflow_name: "w".into(),
            status,
            exit_code: None,
            started_at_ms: 0,
            completed_at_ms: None,
            duration_ms: None,
            error_message: None,
            parent_run_id: None,
            spend: None,
        }
    }

    /// Runs whose awf process is gone are counted apart, not as running (as `awf history
    /// --stats` counts them); the total keeps them.
    #[test]
    fn runs_whose_process_is_gone_are_not_counted_as_running() {
        let rows = [
            row("live", StoredStatus::Running),
            row("dead", StoredStatus::Running),
            row("ok", StoredStatus::Success),
        ];
        let gone: BTreeSet<String> = ["dead".to_owned()].into();
        let s = stats_of(&rows, &gone);
        assert_eq!(
            (s.total_executions, s.running_count, s.process_gone_count),
            (3, 1, 1)
        );
        let v = serde_json::to_value(&s).unwrap();
        assert_eq!(v["process_gone_count"], 1, "{v}");
        let s = stats_of(&rows, &BTreeSet::new());
        assert_eq!((s.running_count, s.process_gone_count), (2, 0));
        // A history row says so only when its process is gone.
        let e = serde_json::to_value(entry(row("dead", StoredStatus::Running), true)).unwrap();
        assert_eq!(e["process_gone"], true, "{e}");
        let e = serde_json::to_value(entry(row("live", StoredStatus::Running), false)).unwrap();
        assert!(e.get("process_gone").is_none(), "{e}");
    }

    /// `error_message` is `null` when a run has none, as `awf history -f json` gives it
    /// (the README says the entries are that command's), not left out.
    #[test]
    fn an_entry_without_an_error_says_null() {
        let e = serde_json::to_value(entry(row("ok", StoredStatus::Success), false)).unwrap();
        assert_eq!(
            e.get("error_message"),
            Some(&serde_json::Value::Null),
            "{e}"
        );
        let mut failed = row("bad", StoredStatus::Failure);
        failed.error_message = Some("step a failed".to_owned());
        let e = serde_json::to_value(entry(failed, false)).unwrap();
        assert_eq!(e["error_message"], "step a failed", "{e}");
    }

    #[test]
    fn a_limit_too_large_is_said_so_and_a_bad_one_is_not_a_number() {
        let limit = |l: &str| {
            parse(&HistoryQuery {
                limit: Some(l.to_owned()),
                ..HistoryQuery::default()
            })
            .err()
            .map(|p| p.doc().detail)
        };
        assert_eq!(limit("5"), None);
        let big = limit("99999999999999999999").unwrap_or_default();
        assert!(big.contains("is too large"), "{big}");
        let bad = limit("-3").unwrap_or_default();
        assert!(bad.contains("is not a positive whole number"), "{bad}");
    }

    #[test]
    fn success_is_completed() {
        assert_eq!(parse_status("success"), Some(StoredStatus::Success));
        assert_eq!(parse_status("Completed"), Some(StoredStatus::Success));
        assert_eq!(parse_status("nope"), None);
    }

    #[test]
    fn times_are_rfc3339_or_days() {
        assert_eq!(parse_time_ms("1970-01-02", false), Some(86_400_000));
        assert_eq!(parse_time_ms("1970-01-01", true), Some(86_399_999));
        assert_eq!(parse_time_ms("1970-01-01T00:00:01Z", false), Some(1000));
        assert_eq!(parse_time_ms("yesterday", false), None);
    }

    #[test]
    fn bad_filters_are_422() {
        let q = HistoryQuery {
            limit: Some("0".into()),
            ..HistoryQuery::default()
        };
        assert_eq!(
            parse(&q).err().unwrap().status,
            StatusCode::UNPROCESSABLE_ENTITY
        );
        let q = HistoryQuery {
            status: Some("success".into()),
            ..HistoryQuery::default()
        };
        assert_eq!(
            parse(&q).unwrap().filter.status,
            Some(StoredStatus::Success)
        );
    }
}
