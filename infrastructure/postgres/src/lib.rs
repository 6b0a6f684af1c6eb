//! awf's shared store on PostgreSQL (issue 15): what many `awf serve` workers, and the
//! terminal commands pointed at the same database, share: run state, history, audit, event
//! rows (the transcript), pending interactions and the run queue.
//!
//! Chosen with `--store postgres://…` or `AWF_STORE`; the embedded store (files + SQLite,
//! awf-store) stays the default. Depends on `awf-domain` and third-party crates only
//! (tokio-postgres and deadpool-postgres stay in this crate).
//!
//! Connections: [`PgStore`] owns one background thread running its own Tokio runtime; every
//! connection of its pool is created and driven there. Callers hand work to that runtime
//! with [`PgStore::block_on`] (synchronous ports, from any thread, inside a runtime or not)
//! or [`PgStore::run`] (async callers on any runtime). Never call `pool().get()` outside
//! those two: a connection created on another runtime stalls when that runtime blocks.
//!
//! Schema (version [`SCHEMA_VERSION`], created by [`PgStore::connect`]; a database migrated
//! by a newer awf is refused with `SYSTEM.STORE.SCHEMA_NEWER`):
//!
//! | table | one row per | written by |
//! |---|---|---|
//! | `awf_schema` | the database (`version`) | migrations |
//! | `awf_runs` | run (and sub-workflow run): history columns, the state snapshot, the success terminal's `message` (schema 2), the reset time of a run parked on a usage limit, `waiting_until` (schema 3), the queue columns | the recorder, the queue |
//! | `awf_events` | event of a root run's log (`root_run_id`, `position` = SSE id) | the recorder |
//! | `awf_audit` | audit line | the recorder |
//! | `awf_answers` | answer to a pending interaction request, given on any worker | the run service |
//! | `awf_workers` | live worker (heartbeat) | the queue |
//! | `awf_run_holders` | run lock held (schema 4): its holder, the server start it last renewed under, when (`run_lock`) | run locks |
//!
//! What a single awf process records and reads: [`PgStore::recorder`] ([`PgRecorder`], the
//! event-stream writer: the embedded recorder's projection, [`awf_domain::projection`],
//! written as rows) and the ports [`StateStore`](awf_domain::ports::StateStore),
//! [`HistoryStore`](awf_domain::ports::HistoryStore) and
//! [`RunLocks`](awf_domain::ports::RunLocks), implemented by [`PgStore`] itself with the
//! embedded store's semantics. `awf_runs.row_seq` orders rows started in the same millisecond
//! (newest first, as the embedded history's rowid).
//!
//! Notification channels ([`EVENTS_CHANNEL`], [`CONTROL_CHANNEL`], [`QUEUE_CHANNEL`]) carry
//! only ids; the rows are the truth, so a listener that reconnects re-reads them.
//!
//! Source: issue 15; shared/spec/http-ops.md §3 (what the embedded store records).
#![deny(clippy::print_stdout, clippy::print_stderr)]

mod cancel_now;
pub mod listen;
pub mod queue;
mod run_lock;
pub mod service;
pub mod unstarted;
pub mod worker;

use std::future::Future;
use std::str::FromStr;
use std::sync::Arc;

use awf_domain::AwfError;
use awf_domain::ErrorCode;
use deadpool_postgres::Manager;
use deadpool_postgres::ManagerConfig;
use deadpool_postgres::Pool;
use deadpool_postgres::RecyclingMethod;

mod ports;
pub mod recorder;

pub use recorder::PgRecorder;

/// The schema version this build writes and reads.
pub const SCHEMA_VERSION: i32 = 4;

/// `NOTIFY` channel of new event rows; payload: the `root_run_id` whose log grew.
pub const EVENTS_CHANNEL: &str = "awf_events";
/// `NOTIFY` channel of requests to the worker that runs a run; payload: JSON
/// `{"kind": "cancel" | "answer" | "answered", "run_id": …, "request_id": …}`.
pub const CONTROL_CHANNEL: &str = "awf_control";
/// `NOTIFY` channel of submitted runs; payload: the run id.
pub const QUEUE_CHANNEL: &str = "awf_queue";

/// Most pooled connections of one process.
const POOL_SIZE: usize = 16;

/// The migrations, in order: entry `i` takes the schema from version `i` to `i + 1`.
const MIGRATIONS: &[&str] = &[
    r"
CREATE TABLE awf_runs (
    run_id           text PRIMARY KEY,
    parent_run_id    text,
    root_run_id      text NOT NULL,
    workflow_id      text NOT NULL,
    workflow_name    text NOT NULL,
    status           text NOT NULL,
    exit_code        integer,
    started_at_ms    bigint,
    completed_at_ms  bigint,
    duration_ms      bigint,
    error_message    text,
    spend            jsonb,
    snapshot         jsonb,
    request          jsonb,
    queue_state      text NOT NULL DEFAULT 'none',
    worker_id        text,
    lease_until      timestamptz,
    epoch            bigint NOT NULL DEFAULT 0,
    cancel_requested boolean NOT NULL DEFAULT false,
    submitted_at     timestamptz,
    run_started      boolean NOT NULL DEFAULT false,
    not_before       timestamptz,
    updated_at       timestamptz NOT NULL DEFAULT now(),
    row_seq          bigserial
);
CREATE INDEX awf_runs_started ON awf_runs (started_at_ms DESC NULLS LAST);
CREATE INDEX awf_runs_queue ON awf_runs (queue_state, submitted_at)
    WHERE queue_state IN ('queued', 'claimed');
CREATE TABLE awf_events (
    root_run_id text   NOT NULL,
    position    bigint NOT NULL,
    run_id      text   NOT NULL,
    seq         bigint NOT NULL,
    kind        text   NOT NULL,
    envelope    jsonb  NOT NULL,
    PRIMARY KEY (root_run_id, position)
);
CREATE TABLE awf_audit (
    id     bigserial PRIMARY KEY,
    run_id text NOT NULL,
    at     timestamptz NOT NULL DEFAULT now(),
    line   jsonb NOT NULL
);
CREATE TABLE awf_answers (
    request_id text PRIMARY KEY,
    run_id     text NOT NULL,
    answer     jsonb NOT NULL,
    state      text NOT NULL DEFAULT 'pending',
    error      jsonb,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE awf_workers (
    worker_id    text PRIMARY KEY,
    started_at   timestamptz NOT NULL DEFAULT now(),
    heartbeat_at timestamptz NOT NULL DEFAULT now(),
    max_runs     integer NOT NULL,
    addr         text
);
",
    r"
ALTER TABLE awf_runs ADD COLUMN message text;
",
    r"
ALTER TABLE awf_runs ADD COLUMN waiting_until timestamptz;
",
    r"
CREATE TABLE awf_run_holders (
    lock_key     text PRIMARY KEY,
    holder       text NOT NULL,
    server_start timestamptz NOT NULL,
    renewed_at   timestamptz NOT NULL DEFAULT now()
);
",
];

/// A handle on the shared store: the pool and the runtime that drives it. Clones share both;
/// the runtime thread stops when the last clone is dropped.
#[derive(Clone)]
pub struct PgStore {
    inner: Arc<Inner>,
}

struct Inner {
    pool: Pool,
    runtime: tokio::runtime::Handle,
    /// Dropping it ends the runtime thread.
    _stop: tokio::sync::oneshot::Sender<()>,
    url: String,
    /// What the pool connects with (run locks open connections of their own).
    config: tokio_postgres::Config,
    /// The run ids whose lock this process held and lost to another process while the
    /// store was away ([`PgStore::lock_lost`]).
    lost_locks: std::sync::Mutex<std::collections::HashSet<String>>,
    /// The holder rows of run locks this process released while the store was away, not
    /// deleted yet ([`run_lock::LeftRows`]).
    left_rows: run_lock::LeftRows,
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore")
            .field("url", &self.inner.url)
            .finish_non_exhaustive()
    }
}

/// Whether `text` names the PostgreSQL store (`postgres://…` or `postgresql://…`).
pub fn is_postgres_url(text: &str) -> bool {
    let t = text.trim();
    t.starts_with("postgres://") || t.starts_with("postgresql://")
}

/// The URL without its password (for messages and logs): the password of the userinfo
/// (`postgresql://u:***@h/db`), of a `password=` query parameter (`?password=***`) and of a
/// `password=` keyword (`host=h password=***`, quoted or not) is masked.
pub fn redacted(url: &str) -> String {
    match url.split_once("://") {
        Some((scheme, rest)) => {
            let (before_query, query) = match rest.split_once('?') {
                Some((b, q)) => (b, Some(q)),
                None => (rest, None),
            };
            let base = match before_query.rsplit_once('@') {
                Some((auth, host)) => match auth.split_once(':') {
                    Some((user, _)) => format!("{scheme}://{user}:***@{host}"),
                    None => format!("{scheme}://{before_query}"),
                },
                None => format!("{scheme}://{before_query}"),
            };
            match query {
                Some(q) => {
                    let params: Vec<String> = q
                        .split('&')
                        .map(|p| match p.split_once('=') {
                            Some((k, _)) if k.eq_ignore_ascii_case("password") => {
                                format!("{k}=***")
                            }
                            _ => p.to_owned(),
                        })
                        .collect();
                    format!("{base}?{}", params.join("&"))
                }
                None => base,
            }
        }
        None => redacted_keywords(url),
    }
}

/// The keyword form (`host=h password=secret dbname=d`) with the password's value masked;
/// a quoted value (`password='a b'`) is masked up to its closing quote.
fn redacted_keywords(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = find_password_key(rest) {
        out.push_str(&rest[..at]);
        let after_key = &rest[at..];
        let Some(eq) = after_key.find('=') else {
            break;
        };
        out.push_str(&after_key[..=eq]);
        let value = after_key[eq + 1..].trim_start_matches(' ');
        out.push_str("***");
        rest = if let Some(quoted) = value.strip_prefix('\'') {
            let mut end = quoted.len();
            let mut escaped = false;
            for (i, c) in quoted.char_indices() {
                if escaped {
                    escaped = false;
                } else if c == '\\' {
                    escaped = true;
                } else if c == '\'' {
                    end = i + 1;
                    break;
                }
            }
            &quoted[end..]
        } else {
            let end = value.find(char::is_whitespace).unwrap_or(value.len());
            &value[end..]
        };
    }
    out.push_str(rest);
    out
}

/// Where a `password` keyword (followed by optional spaces and `=`) starts in `text`.
fn find_password_key(text: &str) -> Option<usize> {
    let lower = text.to_ascii_lowercase();
    let mut from = 0;
    while let Some(i) = lower[from..].find("password") {
        let at = from + i;
        let starts_word = at == 0 || lower[..at].ends_with(char::is_whitespace);
        let tail = lower[at + "password".len()..].trim_start_matches(' ');
        if starts_word && tail.starts_with('=') {
            return Some(at);
        }
        from = at + "password".len();
    }
    None
}

/// What a NUL character (U+0000) becomes in the store: U+FFFD, the replacement character.
/// PostgreSQL refuses NUL in `jsonb` (`\u0000`) and in `text`, so a step output or an input
/// holding one is recorded with U+FFFD in its place (docs/compatibility.md).
pub const NUL_REPLACEMENT: char = '\u{fffd}';

/// `value` made storable in a `jsonb` column: every NUL in a string or an object key becomes
/// [`NUL_REPLACEMENT`]. Every JSON value this crate writes goes through it.
pub fn storable(mut value: serde_json::Value) -> serde_json::Value {
    fn walk(v: &mut serde_json::Value) {
        match v {
            serde_json::Value::String(s) if s.contains('\0') => *s = storable_text(s),
            serde_json::Value::Array(items) => items.iter_mut().for_each(walk),
            serde_json::Value::Object(map) => {
                if map.keys().any(|k| k.contains('\0')) {
                    let old = std::mem::take(map);
                    for (k, mut item) in old {
                        walk(&mut item);
                        map.insert(storable_text(&k), item);
                    }
                } else {
                    map.values_mut().for_each(walk);
                }
            }
            _ => {}
        }
    }
    walk(&mut value);
    value
}

/// The time `ms` milliseconds after the Unix epoch (a negative count: the epoch), as the
/// store's `(extract(epoch from …) * 1000)::bigint` columns give times.
pub(crate) fn ms_time(ms: i64) -> std::time::SystemTime {
    std::time::UNIX_EPOCH + std::time::Duration::from_millis(u64::try_from(ms).unwrap_or(0))
}

/// `text` made storable in a `text` column: every NUL becomes [`NUL_REPLACEMENT`].
pub fn storable_text(text: &str) -> String {
    text.replace('\0', &NUL_REPLACEMENT.to_string())
}

/// `SYSTEM.STORE.UNAVAILABLE` for a failed database call: `what` failed, and why. A refusal
/// for lack of privilege (SQLSTATE 42501 in `e`) carries the permission hint of
/// [`hint_for`] (what the user needs), and a call that could not connect (the server down
/// or unreachable: tokio-postgres's "error connecting to server") the hint to check the
/// server (breaker: a worker's API answered a stopped server with the pool's words alone).
pub fn unavailable(what: &str, e: &dyn std::fmt::Display) -> AwfError {
    let message = format!("the PostgreSQL store failed to {what}: {e}");
    let hint = (message.contains("42501: ") || message.contains("error connecting to server"))
        .then(|| hint_for(ErrorCode::SystemStoreUnavailable, &message))
        .flatten();
    let err = AwfError::new(ErrorCode::SystemStoreUnavailable, message);
    match hint {
        Some(h) => err.with_hint(h),
        None => err,
    }
}

/// Column `idx` of `row` as a `T`. A column that is missing or of another type than this awf
/// reads (a schema changed by hand, say) is `SYSTEM.STORE.UNAVAILABLE` naming the column,
/// never a panic (`Row::get` panics, and a panic would stop the store's runtime task).
///
/// # Errors
/// `SYSTEM.STORE.UNAVAILABLE` when the column cannot be read as a `T`.
pub fn column<'a, T>(row: &'a tokio_postgres::Row, idx: usize) -> Result<T, AwfError>
where
    T: tokio_postgres::types::FromSql<'a>,
{
    row.try_get(idx).map_err(|e| {
        let name = row.columns().get(idx).map_or_else(
            || format!("column {idx}"),
            |c| format!("column {:?}", c.name()),
        );
        unavailable(&format!("read {name} of a row"), &with_causes(&e))
    })
}

/// `e` with the store's (redacted) URL in its message, and a hint that fits its cause
/// ([`hint_for`]) when it has none.
fn naming(e: AwfError, url: &str) -> AwfError {
    let code = e.code();
    let mut out = AwfError::new(code, format!("{} ({url})", e.message()));
    for h in e.hints() {
        out = out.with_hint(h.clone());
    }
    if e.hints().is_empty()
        && let Some(h) = hint_for(code, e.message())
    {
        out = out.with_hint(h);
    }
    out
}

/// What to do about a failed connection or schema check, from its code and message (the
/// server's SQLSTATE leads the message of an error the server sent, see [`db_text`]):
/// authentication failed (28P01, 28000), the database does not exist (3D000), permission
/// denied (42501), a newer schema, or the server cannot be reached (anything else before an
/// answer); `None` for other errors.
pub fn hint_for(code: ErrorCode, message: &str) -> Option<String> {
    if code == ErrorCode::SystemStoreSchemaNewer {
        return Some(
            "this database was migrated by a newer awf: use that awf (or a newer one) with it, \
             or point --store / AWF_STORE at another database"
                .to_owned(),
        );
    }
    if code != ErrorCode::SystemStoreUnavailable {
        return None;
    }
    let has = |sqlstate: &str| message.contains(&format!("{sqlstate}: "));
    let hint = if has("28P01") || has("28000") {
        "authentication failed: check the user and password of the URL (--store / AWF_STORE), \
         or the server's pg_hba.conf for this user, database and address"
    } else if has("3D000") {
        "the database does not exist: create it (`createdb NAME`, or CREATE DATABASE) or name \
         an existing one in the URL (--store / AWF_STORE)"
    } else if has("42501") {
        "permission denied: the user of the URL needs SELECT on the awf_* tables to read runs, \
         INSERT and UPDATE on them (and USAGE on their sequences) and DELETE on awf_run_holders \
         to record runs, DELETE on awf_answers and awf_workers too to run a worker (awf \
         serve), and, for the first connection to a new \
         database (which creates the schema) or an awf with a newer schema, CREATE on its \
         schema; or connect as the owner of the awf_* tables"
    } else if has("53300") {
        "the server has no connection slot left: raise its max_connections or stop idle clients"
    } else if message.split(": ").skip(1).any(|t| {
        t.len() == 5
            && t.chars().any(|c| c.is_ascii_digit())
            && t.chars()
                .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit())
    }) {
        // The server answered with another error: its message says what is wrong.
        return None;
    } else {
        "check that the PostgreSQL server is running and reachable at the host and port of the \
         URL (--store / AWF_STORE)"
    };
    Some(hint.to_owned())
}

/// The text of a tokio-postgres error with the server's own message when there is one,
/// else with its causes (`error connecting to server: Connection refused (os error 111)`).
pub fn db_text(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(d) => format!("{}: {}", d.code().code(), d.message()),
        None => with_causes(e),
    }
}

/// `e` and its chain of sources, `: `-separated.
fn with_causes(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let t = c.to_string();
        if !text.contains(&t) {
            text.push_str(": ");
            text.push_str(&t);
        }
        cur = c.source();
    }
    text
}

/// The text of a pool error: the connection's own error when making one failed.
pub fn pool_text(e: &deadpool_postgres::PoolError) -> String {
    match e {
        deadpool_postgres::PoolError::Backend(b) => db_text(b),
        other => with_causes(other),
    }
}

impl PgStore {
    /// Connects to `url`, checks the server answers and brings the schema to
    /// [`SCHEMA_VERSION`] (under an advisory lock, so workers starting together migrate once).
    /// Blocks the calling thread; callable from inside a Tokio runtime.
    ///
    /// # Errors
    /// `USER.INPUT.VALIDATION_FAILED` for a URL that does not parse (hint: its shape);
    /// `SYSTEM.STORE.UNAVAILABLE` when the server cannot be reached or refuses;
    /// `SYSTEM.STORE.SCHEMA_NEWER` when the database was migrated by a newer awf.
    pub fn connect(url: &str) -> Result<Self, AwfError> {
        let config = tokio_postgres::Config::from_str(url.trim()).map_err(|e| {
            AwfError::new(
                ErrorCode::UserInputValidationFailed,
                format!("--store {:?} is not a PostgreSQL URL: {e}", redacted(url)),
            )
            .with_hint("use postgresql://USER[:PASSWORD]@HOST[:PORT]/DATABASE")
        })?;
        let manager = Manager::from_config(
            config.clone(),
            tokio_postgres::NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(POOL_SIZE)
            .runtime(deadpool_postgres::Runtime::Tokio1)
            .wait_timeout(Some(std::time::Duration::from_secs(30)))
            .create_timeout(Some(std::time::Duration::from_secs(10)))
            .build()
            .map_err(|e| unavailable("build its connection pool", &e))?;
        let (handle_tx, handle_rx) = std::sync::mpsc::channel();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        std::thread::Builder::new()
            .name("awf-postgres".into())
            .spawn(move || {
                let rt = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        let _ = handle_tx.send(Err(e.to_string()));
                        return;
                    }
                };
                let _ = handle_tx.send(Ok(rt.handle().clone()));
                // Runs the spawned work until every handle is gone.
                rt.block_on(async move {
                    let _ = stop_rx.await;
                });
            })
            .map_err(|e| unavailable("start its thread", &e))?;
        let runtime = handle_rx
            .recv()
            .map_err(|e| unavailable("start its runtime", &e))?
            .map_err(|e| unavailable("start its runtime", &e))?;
        let store = Self {
            inner: Arc::new(Inner {
                pool,
                runtime,
                _stop: stop_tx,
                url: redacted(url),
                config,
                lost_locks: std::sync::Mutex::new(std::collections::HashSet::new()),
                left_rows: run_lock::LeftRows::default(),
            }),
        };
        let pool = store.pool().clone();
        store
            .block_on(async move { migrate(&pool).await })?
            .map_err(|e| naming(e, store.url()))?;
        Ok(store)
    }

    /// The URL this store was opened with, password redacted.
    pub fn url(&self) -> &str {
        &self.inner.url
    }

    /// Whether this process held the lock of `run_id` ([`RunLocks`](awf_domain::ports::RunLocks))
    /// and lost it: its session ended (the server restarted, the connection dropped) and
    /// another process took the lock before this one could take it again. The process must
    /// stop running the run (it is another's now) without recording its end.
    pub fn lock_lost(&self, run_id: &str) -> bool {
        self.inner
            .lost_locks
            .lock()
            .map(|l| l.contains(run_id))
            .unwrap_or(false)
    }

    fn set_lock_lost(&self, run_id: &str, lost: bool) {
        if let Ok(mut l) = self.inner.lost_locks.lock() {
            if lost {
                l.insert(run_id.to_owned());
            } else {
                l.remove(run_id);
            }
        }
    }

    /// The holder rows of run locks this process released while the store was away.
    pub(crate) fn left_rows(&self) -> &run_lock::LeftRows {
        &self.inner.left_rows
    }

    /// The connection settings parsed from the URL.
    pub fn config(&self) -> &tokio_postgres::Config {
        &self.inner.config
    }

    /// The event-stream writer of this store ([`PgRecorder`]); audit lines name `user`.
    /// Every call starts a writer task of its own: keep one per process.
    pub fn recorder(&self, user: &str) -> PgRecorder {
        PgRecorder::start(self, user, true)
    }

    /// [`PgStore::recorder`] that writes no audit rows (`AWF_AUDIT_LOG=off`).
    pub fn recorder_without_audit(&self, user: &str) -> PgRecorder {
        PgRecorder::start(self, user, false)
    }

    /// The connection pool. Use it only inside [`PgStore::block_on`] / [`PgStore::run`].
    pub fn pool(&self) -> &Pool {
        &self.inner.pool
    }

    /// Runs `work` on the store's runtime and blocks the calling thread until it is done.
    /// Works from any thread, inside a Tokio runtime or not (the work never needs the
    /// caller's runtime).
    ///
    /// # Errors
    /// `SYSTEM.STORE.UNAVAILABLE` when the store's runtime is gone.
    pub fn block_on<F, T>(&self, work: F) -> Result<T, AwfError>
    where
        F: Future<Output = T> + Send + 'static,
        T: Send + 'static,
    {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        self.inner.runtime.spawn(async move {
            let _ = tx.send(work.await);
        });
        rx.recv()
            .map_err(|e| unavailable("finish a call (its runtime stopped)", &e))
    }

    /// Runs `work` on the store's runtime and awaits it from any runtime.
    ///
    /// # Errors
    /// `SYSTEM.STORE.UNAVAILABLE` when the store's runtime is gone or the work panicked.
    pub async fn run<F, T>(&self, work: F) -> Result<T, AwfError>
    where
        F: Future<Output = T> + Send + 'static,
        T: Send + 'static,
    {
        self.inner
            .runtime
            .spawn(work)
            .await
            .map_err(|e| unavailable("finish a call", &e))
    }

    /// The store's runtime, for tasks that live as long as the store (listeners, heartbeats).
    pub fn runtime(&self) -> &tokio::runtime::Handle {
        &self.inner.runtime
    }

    /// Checks, without writing, that the URL's user may record runs: INSERT and UPDATE on
    /// `awf_runs`, INSERT on `awf_events` and `awf_audit`, SELECT, INSERT, UPDATE and DELETE
    /// on `awf_run_holders`, and USAGE on their sequences. A
    /// command that records (`awf run`, `awf resume`) calls it before it starts anything, so
    /// a read-only user is refused at once instead of having its writes retried as if the
    /// server were away. A worker checks [`PgStore::check_worker_writable`] instead.
    ///
    /// # Errors
    /// `SYSTEM.STORE.UNAVAILABLE` (SQLSTATE 42501 in its message, with the permission hint
    /// of [`hint_for`]) naming the privileges missing; `SYSTEM.STORE.UNAVAILABLE` when the
    /// database fails.
    pub fn check_writable(&self) -> Result<(), AwfError> {
        self.check_privileges(RECORDING, "record runs")
    }

    /// Checks, without writing, that the URL's user has every privilege a worker (`awf serve
    /// --store`) uses: those of [`PgStore::check_writable`] and SELECT on `awf_runs` and
    /// `awf_events`; SELECT, INSERT, UPDATE and DELETE on `awf_answers` (answers given on
    /// any worker) and on `awf_workers` (its heartbeat row, and the rows of dead workers it
    /// removes). Called before the worker registers, so that it never starts with a
    /// privilege missing and fails once registered.
    ///
    /// # Errors
    /// As [`PgStore::check_writable`].
    pub fn check_worker_writable(&self) -> Result<(), AwfError> {
        let needed: Vec<(&str, &str, &str)> = RECORDING.iter().chain(WORKER).copied().collect();
        self.check_privileges(&needed, "run a worker")
    }

    /// Which of `needed` (kind, name, privilege) the URL's user lacks: an error naming them
    /// (what it was for: `purpose`), or `Ok`.
    fn check_privileges(
        &self,
        needed: &[(&'static str, &'static str, &'static str)],
        purpose: &str,
    ) -> Result<(), AwfError> {
        let needed = needed.to_vec();
        let pool = self.pool().clone();
        let missing = self.block_on(async move {
            let client = pool
                .get()
                .await
                .map_err(|e| unavailable("connect", &pool_text(&e)))?;
            let mut missing = Vec::new();
            for (kind, name, privilege) in &needed {
                let sql = if *kind == "table" {
                    "SELECT has_table_privilege($1, $2)"
                } else {
                    "SELECT has_sequence_privilege($1, $2)"
                };
                let row = client
                    .query_one(sql, &[name, privilege])
                    .await
                    .map_err(|e| unavailable("check its privileges", &db_text(&e)))?;
                if !column::<bool>(&row, 0)? {
                    missing.push(format!("{privilege} on {name}"));
                }
            }
            Ok::<_, AwfError>(missing)
        })??;
        if missing.is_empty() {
            return Ok(());
        }
        let user = self.config().get_user().unwrap_or("the URL's user");
        Err(naming(
            unavailable(
                purpose,
                &format!(
                    "42501: permission denied: {user} lacks {}",
                    missing.join(", ")
                ),
            ),
            self.url(),
        ))
    }
}

/// The privileges recording runs takes (kind, name, privilege): see
/// [`PgStore::check_writable`].
const RECORDING: &[(&str, &str, &str)] = &[
    ("table", "awf_runs", "INSERT"),
    ("table", "awf_runs", "UPDATE"),
    ("table", "awf_events", "INSERT"),
    ("table", "awf_audit", "INSERT"),
    ("table", "awf_run_holders", "SELECT"),
    ("table", "awf_run_holders", "INSERT"),
    ("table", "awf_run_holders", "UPDATE"),
    // A holder's row goes when its run's lock is released (one left stands for its run as
    // held for 20 s after a server restart).
    ("table", "awf_run_holders", "DELETE"),
    ("sequence", "awf_runs_row_seq_seq", "USAGE"),
    ("sequence", "awf_audit_id_seq", "USAGE"),
];

/// The privileges a worker takes beyond [`RECORDING`]: see
/// [`PgStore::check_worker_writable`].
const WORKER: &[(&str, &str, &str)] = &[
    ("table", "awf_runs", "SELECT"),
    ("table", "awf_events", "SELECT"),
    ("table", "awf_answers", "SELECT"),
    ("table", "awf_answers", "INSERT"),
    ("table", "awf_answers", "UPDATE"),
    ("table", "awf_answers", "DELETE"),
    ("table", "awf_workers", "SELECT"),
    ("table", "awf_workers", "INSERT"),
    ("table", "awf_workers", "UPDATE"),
    ("table", "awf_workers", "DELETE"),
];

/// The schema version of the database, read without writing anything; `None` when it has
/// no schema yet.
async fn current_version(client: &deadpool_postgres::Client) -> Result<Option<i32>, AwfError> {
    let row = client
        .query_one("SELECT to_regclass('awf_schema') IS NOT NULL", &[])
        .await
        .map_err(|e| unavailable("read the schema version", &db_text(&e)))?;
    if !column::<bool>(&row, 0)? {
        return Ok(None);
    }
    let row = client
        .query_opt("SELECT max(version) FROM awf_schema", &[])
        .await
        .map_err(|e| unavailable("read the schema version", &db_text(&e)))?;
    match row {
        Some(r) => column::<Option<i32>>(&r, 0),
        None => Ok(None),
    }
}

/// `SYSTEM.STORE.SCHEMA_NEWER` for a database at `version`.
fn newer(version: i32) -> AwfError {
    AwfError::new(
        ErrorCode::SystemStoreSchemaNewer,
        format!(
            "the store's schema is version {version}; this awf knows versions up to {SCHEMA_VERSION}"
        ),
    )
}

/// Brings the schema to [`SCHEMA_VERSION`]. A database already there is only read (a
/// read-only user can use it); one at a newer version is refused untouched.
async fn migrate(pool: &Pool) -> Result<(), AwfError> {
    let mut client = pool
        .get()
        .await
        .map_err(|e| unavailable("connect", &pool_text(&e)))?;
    match current_version(&client).await? {
        Some(v) if v == SCHEMA_VERSION => return Ok(()),
        Some(v) if v > SCHEMA_VERSION => return Err(newer(v)),
        _ => {}
    }
    let tx = client
        .transaction()
        .await
        .map_err(|e| unavailable("start the migration", &db_text(&e)))?;
    // One migrating process at a time (workers starting together); the key is arbitrary.
    tx.execute("SELECT pg_advisory_xact_lock(2511001)", &[])
        .await
        .map_err(|e| unavailable("lock the schema", &db_text(&e)))?;
    tx.batch_execute("CREATE TABLE IF NOT EXISTS awf_schema (version integer NOT NULL)")
        .await
        .map_err(|e| unavailable("create the schema table", &db_text(&e)))?;
    let row = tx
        .query_opt("SELECT version FROM awf_schema", &[])
        .await
        .map_err(|e| unavailable("read the schema version", &db_text(&e)))?;
    let current: i32 = match row {
        Some(r) => column(&r, 0)?,
        None => {
            tx.execute("INSERT INTO awf_schema (version) VALUES (0)", &[])
                .await
                .map_err(|e| unavailable("write the schema version", &db_text(&e)))?;
            0
        }
    };
    if current > SCHEMA_VERSION {
        return Err(newer(current));
    }
    let from = usize::try_from(current).unwrap_or(0);
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(from) {
        tx.batch_execute(sql)
            .await
            .map_err(|e| unavailable(&format!("migrate to schema {}", i + 1), &db_text(&e)))?;
    }
    tx.execute("UPDATE awf_schema SET version = $1", &[&SCHEMA_VERSION])
        .await
        .map_err(|e| unavailable("write the schema version", &db_text(&e)))?;
    tx.commit()
        .await
        .map_err(|e| unavailable("commit the migration", &db_text(&e)))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A call that could not connect says to check the server; a privilege refusal names
    /// the privileges; another server error (its SQLSTATE) says nothing more than its text.
    #[test]
    fn a_failed_call_carries_the_hint_of_its_cause() {
        let down = unavailable(
            "read a run",
            &"Error occurred while creating a new object: error connecting to server: \
              Connection refused (os error 111)",
        );
        assert_eq!(down.code(), ErrorCode::SystemStoreUnavailable);
        assert!(
            down.hints()
                .iter()
                .any(|h| h.starts_with("check that the PostgreSQL server is running")),
            "{:?}",
            down.hints()
        );
        let denied = unavailable(
            "record a run",
            &"42501: permission denied for table awf_runs",
        );
        assert!(
            denied
                .hints()
                .iter()
                .any(|h| h.starts_with("permission denied"))
        );
        let other = unavailable("record a run", &"23505: duplicate key value");
        assert!(other.hints().is_empty(), "{:?}", other.hints());
    }

    #[test]
    fn urls_are_recognised_and_redacted() {
        assert!(is_postgres_url("postgres://u@h/db"));
        assert!(is_postgres_url(" postgresql://u@h:5432/db"));
        assert!(!is_postgres_url("/var/lib/awf"));
        assert_eq!(
            redacted("postgresql://u:secret@h/db"),
            "postgresql://u:***@h/db"
        );
        assert_eq!(redacted("postgresql://u@h/db"), "postgresql://u@h/db");
        assert_eq!(
            redacted("postgresql://u@h/db?sslmode=disable&password=s3cret&x=1"),
            "postgresql://u@h/db?sslmode=disable&password=***&x=1"
        );
        assert_eq!(
            redacted("postgresql://u:a@b@h/db?PASSWORD=s3cret"),
            "postgresql://u:***@h/db?PASSWORD=***"
        );
        assert_eq!(
            redacted("host=h password=s3cret dbname=d"),
            "host=h password=*** dbname=d"
        );
        assert_eq!(
            redacted("host=h password = 's3 \\' cret' user=u"),
            "host=h password =*** user=u"
        );
        assert_eq!(redacted("password=s3cret"), "password=***");
    }

    #[test]
    fn nul_becomes_the_replacement_character_in_strings_and_keys() {
        let v = serde_json::json!({"a\u{0}": ["x\u{0}y", {"k": "\\u0000"}], "n": 1});
        let out = storable(v);
        assert_eq!(
            out,
            serde_json::json!({"a\u{fffd}": ["x\u{fffd}y", {"k": "\\u0000"}], "n": 1})
        );
        assert_eq!(storable_text("a\0b"), "a\u{fffd}b");
    }

    #[test]
    fn hints_fit_the_cause() {
        let unavailable = ErrorCode::SystemStoreUnavailable;
        let h = |m: &str| hint_for(unavailable, m).unwrap_or_default();
        assert!(h("the PostgreSQL store failed to connect: 28P01: password authentication failed for user \"u\"").starts_with("authentication failed"));
        assert!(
            h("failed to connect: 3D000: database \"x\" does not exist")
                .starts_with("the database does not exist")
        );
        assert!(
            h("failed to read the schema version: 42501: permission denied for table awf_schema")
                .starts_with("permission denied")
        );
        assert!(
            h("failed to connect: error connecting to server: Connection refused (os error 111)")
                .contains("is running")
        );
        assert!(
            h("failed to connect: 28P01: password authentication failed").contains("pg_hba.conf")
        );
        assert!(!h("failed to connect: 3D000: database \"x\" does not exist").contains("running"));
        assert!(
            hint_for(
                unavailable,
                "failed to migrate to schema 3: 42P07: relation exists"
            )
            .is_none()
        );
        assert!(
            hint_for(ErrorCode::SystemStoreSchemaNewer, "schema 99")
                .is_some_and(|h| h.contains("newer awf"))
        );
    }

    #[test]
    fn a_refusal_for_lack_of_privilege_carries_the_permission_hint() {
        let e = unavailable("write", &"42501: permission denied for table awf_runs");
        assert_eq!(e.code(), ErrorCode::SystemStoreUnavailable);
        assert!(
            e.hints().len() == 1 && e.hints()[0].starts_with("permission denied"),
            "{:?}",
            e.hints()
        );
        // Other failures keep their message alone (the caller knows better).
        assert!(
            unavailable("connect", &"Connection refused")
                .hints()
                .is_empty()
        );
    }

    #[test]
    fn a_url_that_does_not_parse_is_a_user_error() {
        let e = PgStore::connect("postgresql://u@h:notaport/db").unwrap_err();
        assert_eq!(e.code(), ErrorCode::UserInputValidationFailed);
        assert!(e.hints()[0].contains("postgresql://"), "{:?}", e.hints());
    }
}
