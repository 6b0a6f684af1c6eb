//! A run's lock on the shared store that outlives a PostgreSQL restart.
//!
//! The process that runs a run holds the session advisory lock of its id
//! ([`crate::ports::lock_key`]) on a connection of its own. A session dies with the server:
//! after `pg_ctl restart` (or a dropped connection) nobody holds the lock, and without more
//! another process could resume or cancel a run that is still running. So the holder also
//! keeps a row of `awf_run_holders`: its holder token, the server start
//! (`pg_postmaster_start_time()`) it last renewed under and when (renewed every
//! [`RENEW_EVERY`]). Its keeper task notices the lost session and takes the lock again on a
//! new one as soon as the store is back; until then, a row renewed under an earlier server
//! start less than [`GRACE_SECS`] ago counts as held ([`retaking_sql`]), so no other process
//! takes the lock meanwhile. On the server it was renewed under, the advisory lock alone
//! decides (a SIGKILLed holder's session ends at once: it is seen gone at once).
//!
//! Should another process have taken the lock all the same (the store was away longer than
//! the grace), the keeper records the loss ([`PgStore::lock_lost`]) and gives up. The row
//! says so (it names another holder), not the advisory lock: a process checking whether the
//! run is held holds that a moment too ([`Retake::Later`]).
//!
//! A lock released while the store is away (a worker stops a run whose lease it could not
//! renew) cannot delete its row then: left, the row would refuse every claimant for the
//! rest of its grace after the store is back, the run re-claimed over and over meanwhile.
//! So the row is deleted as soon as the store answers ([`LeftRows`]), and until then this
//! process, which knows it released it, takes the lock over it at once.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering;
use std::time::Duration;

use awf_domain::AwfError;

use crate::PgStore;
use crate::column;
use crate::db_text;
use crate::unavailable;

/// How often the holder renews its row (and finds out that its session is gone).
pub(crate) const RENEW_EVERY: Duration = Duration::from_secs(1);

/// How long after its last renewal a holder whose session died with a server restart still
/// counts as holding the lock, the time it has to take it again.
pub(crate) const GRACE_SECS: u32 = 20;

/// How long one renewal may take before the session counts as lost.
const RENEW_TIMEOUT: Duration = Duration::from_secs(5);

/// How often the keeper tries to reconnect while the store is away.
const RETRY_EVERY: Duration = Duration::from_millis(200);

/// The holder rows of locks this process released while the store was away (its keeper had
/// no session to delete them on), by lock key: a row here is no longer held by anyone, and
/// is deleted as soon as the store answers ([`clear_left_row`]). Until then a take by this
/// process counts it as free ([`take`]).
#[derive(Default, Clone)]
pub(crate) struct LeftRows(Arc<Mutex<HashMap<String, Vec<String>>>>);

impl LeftRows {
    /// The holders of the rows of `key` this process left.
    fn of(&self, key: &str) -> Vec<String> {
        self.0
            .lock()
            .map(|m| m.get(key).cloned().unwrap_or_default())
            .unwrap_or_default()
    }

    fn add(&self, key: &str, holder: &str) {
        if let Ok(mut m) = self.0.lock() {
            m.entry(key.to_owned()).or_default().push(holder.to_owned());
        }
    }

    /// Forgets the row of `holder` (`None`: every row of `key`, which a new holder took).
    fn remove(&self, key: &str, holder: Option<&str>) {
        if let Ok(mut m) = self.0.lock()
            && let Some(hs) = m.get_mut(key)
        {
            hs.retain(|h| holder.is_some_and(|holder| h != holder));
            if hs.is_empty() {
                m.remove(key);
            }
        }
    }
}

/// Whether a DELETE of a holder row is over: done, or refused for lack of the privilege (a
/// user granted only what README lists for recording; retrying changes nothing, and the row,
/// renewed under the current server start, holds nothing once its session ended).
fn delete_over(r: &Result<u64, tokio_postgres::Error>) -> bool {
    match r {
        Ok(_) => true,
        Err(e) => e.code() == Some(&tokio_postgres::error::SqlState::INSUFFICIENT_PRIVILEGE),
    }
}

/// Deletes the row `holder` left for `key` as soon as the store answers (retried every
/// [`RETRY_EVERY`]; given up after [`GRACE_SECS`], when the row no longer counts anyway).
async fn clear_left_row(
    pool: deadpool_postgres::Pool,
    left: LeftRows,
    key: String,
    holder: String,
) {
    let clear = async {
        loop {
            if let Ok(c) = pool.get().await
                && delete_over(
                    &c.execute(
                        "DELETE FROM awf_run_holders WHERE lock_key = $1 AND holder = $2",
                        &[&key, &holder],
                    )
                    .await,
                )
            {
                return;
            }
            tokio::time::sleep(RETRY_EVERY).await;
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(GRACE_SECS.into()), clear).await;
    left.remove(&key, Some(&holder));
}

/// The SQL condition "a holder of the lock whose key text is `$param` renewed its row under
/// an earlier server start less than [`GRACE_SECS`] ago": its session died with the server
/// and it is taking the lock again.
pub(crate) fn retaking_sql(param: usize) -> String {
    format!(
        "EXISTS (SELECT 1 FROM awf_run_holders h WHERE h.lock_key = ${param} \
           AND h.server_start <> pg_postmaster_start_time() \
           AND h.renewed_at > now() - interval '{GRACE_SECS} seconds')"
    )
}

/// A new connection, and whether it took the session-level advisory lock of `key` (`false`:
/// another session holds it).
async fn session_locked(
    config: &tokio_postgres::Config,
    rt: &tokio::runtime::Handle,
    key: &str,
) -> Result<(tokio_postgres::Client, bool), AwfError> {
    let (client, conn) = config
        .connect(tokio_postgres::NoTls)
        .await
        .map_err(|e| unavailable("lock a run", &db_text(&e)))?;
    rt.spawn(async move {
        let _ = conn.await;
    });
    let row = client
        .query_one(
            "SELECT pg_try_advisory_lock(hashtextextended($1, 0))",
            &[&key],
        )
        .await
        .map_err(|e| unavailable("lock a run", &db_text(&e)))?;
    let locked = column::<bool>(&row, 0)?;
    Ok((client, locked))
}

/// Takes the lock of `key` on a new connection: `Ok(None)` when another process holds it
/// (its session, or its row: [`retaking_sql`]); else the connection holding it, the row
/// written under `holder`. A row this process left (`left`: it released that lock while
/// the store was away) holds nothing.
async fn take(
    config: &tokio_postgres::Config,
    rt: &tokio::runtime::Handle,
    key: &str,
    holder: &str,
    left: &LeftRows,
) -> Result<Option<tokio_postgres::Client>, AwfError> {
    let (client, locked) = session_locked(config, rt, key).await?;
    if !locked {
        return Ok(None);
    }
    let mine = left.of(key);
    // The row is ours unless another holder's, renewed under an earlier server start, is
    // still in its grace (it is taking the lock again).
    let written = client
        .execute(
            &format!(
                "INSERT INTO awf_run_holders AS h (lock_key, holder, server_start, renewed_at) \
                 VALUES ($1, $2, pg_postmaster_start_time(), now()) \
                 ON CONFLICT (lock_key) DO UPDATE SET holder = $2, \
                   server_start = pg_postmaster_start_time(), renewed_at = now() \
                 WHERE h.holder = $2 OR h.holder = ANY($3) OR NOT {}",
                retaking_sql(1)
            ),
            &[&key, &holder, &mine],
        )
        .await;
    let free = match written {
        Ok(n) => {
            if n == 1 {
                // The row is the new holder's: none of this process's is left.
                left.remove(key, None);
            }
            n == 1
        }
        // A user that may not write the row (a read-only `awf status` judging whether the
        // run's process is gone): whether a holder is taking the lock again, read.
        Err(_) => {
            let row = client
                .query_one(
                    &format!(
                        "SELECT NOT {} OR EXISTS (SELECT 1 FROM awf_run_holders \
                           WHERE lock_key = $1 AND holder = ANY($2))",
                        retaking_sql(1)
                    ),
                    &[&key, &mine],
                )
                .await
                .map_err(|e| unavailable("lock a run", &db_text(&e)))?;
            column::<bool>(&row, 0)?
        }
    };
    Ok(free.then_some(client))
}

/// What a try to take a lock again after its session was lost came to.
enum Retake {
    /// Taken again: the connection holding it.
    Taken(tokio_postgres::Client),
    /// Another process took it meanwhile: the row is no longer this holder's.
    Lost,
    /// Not now: the store is away, or another session holds the advisory lock while the row
    /// is still this holder's. That is a process checking whether the run is held (`awf
    /// resume`, `awf status`, a claim): the row refuses its take and it lets the lock go at
    /// once, so it is tried again.
    Later,
}

/// Takes the lock of `key` again for `holder` after its session was lost.
async fn retake(
    config: &tokio_postgres::Config,
    rt: &tokio::runtime::Handle,
    key: &str,
    holder: &str,
) -> Retake {
    let Ok((client, locked)) = session_locked(config, rt, key).await else {
        return Retake::Later;
    };
    let mine = if locked {
        client
            .execute(
                "UPDATE awf_run_holders SET server_start = pg_postmaster_start_time(), \
                   renewed_at = now() WHERE lock_key = $1 AND holder = $2",
                &[&key, &holder],
            )
            .await
            .map(|n| n == 1)
    } else {
        client
            .query_one(
                "SELECT EXISTS (SELECT 1 FROM awf_run_holders \
                   WHERE lock_key = $1 AND holder = $2)",
                &[&key, &holder],
            )
            .await
            .and_then(|row| row.try_get::<_, bool>(0))
    };
    match (mine, locked) {
        (Ok(true), true) => Retake::Taken(client),
        (Ok(true), false) | (Err(_), _) => Retake::Later,
        (Ok(false), _) => Retake::Lost,
    }
}

/// A held run lock: its keeper task holds the connection; dropping this stops the keeper,
/// which deletes the row and closes the session (releasing the advisory lock).
pub(crate) struct HeldLock {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    done: Option<tokio::sync::oneshot::Receiver<()>>,
    store: PgStore,
    run_id: String,
}

impl Drop for HeldLock {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(done) = self.done.take() {
            let _ = self.store.block_on(async move {
                let _ = tokio::time::timeout(RENEW_TIMEOUT, done).await;
            });
        }
        self.store.set_lock_lost(&self.run_id, false);
    }
}

/// Takes the lock of `run_id` for this process (`None`: another process holds it) and
/// starts its keeper.
///
/// # Errors
/// `SYSTEM.STORE.UNAVAILABLE` when the database fails.
pub(crate) fn lock(store: &PgStore, run_id: &str) -> Result<Option<HeldLock>, AwfError> {
    let config = store.config().clone();
    let key = crate::ports::lock_key(run_id);
    let holder = format!("{}:{}", std::process::id(), uuid::Uuid::new_v4());
    let rt = store.runtime().clone();
    let (k, h, left) = (key.clone(), holder.clone(), store.left_rows().clone());
    let client = store.block_on(async move { take(&config, &rt, &k, &h, &left).await })??;
    let Some(client) = client else {
        return Ok(None);
    };
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel();
    let (done_tx, done_rx) = tokio::sync::oneshot::channel();
    let keeper = Keeper {
        store: store.clone(),
        run_id: run_id.to_owned(),
        key,
        holder,
        lost: Arc::new(AtomicBool::new(false)),
    };
    store.runtime().spawn(async move {
        keeper.keep(client, stop_rx).await;
        let _ = done_tx.send(());
    });
    Ok(Some(HeldLock {
        stop: Some(stop_tx),
        done: Some(done_rx),
        store: store.clone(),
        run_id: run_id.to_owned(),
    }))
}

struct Keeper {
    store: PgStore,
    run_id: String,
    key: String,
    holder: String,
    lost: Arc<AtomicBool>,
}

impl Keeper {
    /// Renews the row every [`RENEW_EVERY`] until `stop`; takes the lock again when the
    /// session is lost; at `stop`, deletes the row and closes the session (without a
    /// session, the row is left to [`clear_left_row`]).
    async fn keep(
        &self,
        client: tokio_postgres::Client,
        mut stop: tokio::sync::oneshot::Receiver<()>,
    ) {
        let mut client = Some(client);
        'keep: loop {
            tokio::select! {
                _ = &mut stop => break,
                () = tokio::time::sleep(RENEW_EVERY) => {}
            }
            if self.lost.load(Ordering::Relaxed) {
                continue;
            }
            let alive = match &client {
                Some(c) if !c.is_closed() => tokio::time::timeout(
                    RENEW_TIMEOUT,
                    c.execute(
                        "UPDATE awf_run_holders SET server_start = pg_postmaster_start_time(), \
                           renewed_at = now() WHERE lock_key = $1 AND holder = $2",
                        &[&self.key, &self.holder],
                    ),
                )
                .await
                .is_ok_and(|r| r.is_ok() || !c.is_closed()),
                _ => false,
            };
            if alive {
                continue;
            }
            // The session is gone (and its advisory lock with it): take it again as soon as
            // the store is back.
            drop(client.take());
            tracing::warn!(
                "run {}: the store's session holding its lock was lost; taking the lock again",
                self.run_id
            );
            loop {
                let config = self.store.config().clone();
                let rt = self.store.runtime().clone();
                match retake(&config, &rt, &self.key, &self.holder).await {
                    Retake::Taken(c) => {
                        tracing::info!("run {}: lock taken again", self.run_id);
                        client = Some(c);
                        break;
                    }
                    Retake::Lost => {
                        tracing::warn!(
                            "run {}: another awf process took its lock while the store was \
                             away; stopping here",
                            self.run_id
                        );
                        self.lost.store(true, Ordering::Relaxed);
                        self.store.set_lock_lost(&self.run_id, true);
                        break;
                    }
                    Retake::Later => {}
                }
                tokio::select! {
                    _ = &mut stop => break 'keep,
                    () = tokio::time::sleep(RETRY_EVERY) => {}
                }
            }
        }
        if self.lost.load(Ordering::Relaxed) {
            // The row is another's now.
            return;
        }
        let deleted = match client.take() {
            Some(c) => {
                let deleted = tokio::time::timeout(
                    RENEW_TIMEOUT,
                    c.execute(
                        "DELETE FROM awf_run_holders WHERE lock_key = $1 AND holder = $2",
                        &[&self.key, &self.holder],
                    ),
                )
                .await
                .is_ok_and(|r| delete_over(&r));
                // Closing the session releases its advisory lock.
                drop(c);
                deleted
            }
            None => false,
        };
        if !deleted {
            // The store is away: the row, still counted as held for its grace once the
            // store is back, is this process's to clear (and, until then, to take over).
            tracing::debug!(
                "run {}: its lock's holder row is deleted once the store is back",
                self.run_id
            );
            let left = self.store.left_rows().clone();
            left.add(&self.key, &self.holder);
            self.store.runtime().spawn(clear_left_row(
                self.store.pool().clone(),
                left,
                self.key.clone(),
                self.holder.clone(),
            ));
        }
    }
}
