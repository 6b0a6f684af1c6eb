//! The cancel of a run parked on a usage limit (issue 14): recorded `waiting` until its
//! reset, it is run by nobody (`awf serve`'s resumer resumes it at the reset). A cancel
//! through the run service (`DELETE /api/executions/{id}`) ends it for good: recorded
//! `cancelled` as a run cancelled while running is (exit code 130,
//! `EXECUTION.RUN.CANCELLED`, its reset time cleared), so the resumer leaves it alone;
//! `awf resume` still continues it as any cancelled run.

use std::sync::Arc;

use awf_domain::AwfError;
use awf_domain::event::EventEnvelope;
use awf_domain::event::RunEvent;
use awf_domain::ports::store::StoredStatus;
use awf_domain::run::CancelReason;
use awf_domain::run::RunId;

use super::RunManager;
use crate::engine::lock;

impl RunManager {
    /// Ends the recorded run `run_id` as cancelled if it is parked on a usage limit and
    /// nobody is resuming it (its run lock is free; held while this ends it, so no resume
    /// starts meanwhile): its snapshot `cancelled` (end time now, the exit code of `reason`, the
    /// `workflow cancelled` error, no reset time), and a `RunFinished` (cancelled) event
    /// handed to the recorders (history row, audit, transcript); this process's view of it,
    /// if it ran here, says the same. `Ok(false)` when it is not such a run (not recorded,
    /// not parked, or its lock is held).
    ///
    /// # Errors
    /// `SYSTEM.IO.*` when its snapshot cannot be written.
    pub(super) fn cancel_parked(
        &self,
        run_id: &RunId,
        reason: CancelReason,
    ) -> Result<bool, AwfError> {
        let services = self.facade.services();
        let Some(store) = &services.state_store else {
            return Ok(false);
        };
        let parked = |id: &str| {
            store
                .load(id)
                .ok()
                .filter(|s| s.status == StoredStatus::Waiting)
        };
        if parked(&run_id.0).is_none() {
            return Ok(false);
        }
        let Ok(_guard) = crate::runs::lock_run(services, &run_id.0) else {
            return Ok(false);
        };
        // Read again under the lock: resumed meanwhile, it is no longer parked.
        let Some(mut snap) = parked(&run_id.0) else {
            return Ok(false);
        };
        let now = services.clock.now();
        snap.end_cancelled_by(now, reason);
        store.save(&snap)?;
        let result = crate::runs::result_of(&snap);
        // Its log goes on at the next seq of the run's own events.
        let seq = services
            .event_log
            .as_ref()
            .and_then(|r| r.read_log(run_id, 1).ok().flatten())
            .and_then(|log| {
                log.envelopes
                    .iter()
                    .filter(|e| &e.run_id == run_id)
                    .map(|e| e.seq)
                    .max()
            })
            .map_or(1, |s| s.saturating_add(1));
        let envelope = EventEnvelope {
            seq,
            run_id: run_id.clone(),
            parent_run_id: None,
            at: now,
            path: String::new(),
            iteration: None,
            event: RunEvent::RunFinished {
                result: Box::new(result.clone()),
            },
        };
        for r in &services.recorders {
            r.emit(envelope.clone());
        }
        for r in &services.recorders {
            r.flush();
        }
        if let Some(e) = self.entry(run_id) {
            lock(&e.info).result = Some(Arc::new(result));
        }
        Ok(true)
    }
}
