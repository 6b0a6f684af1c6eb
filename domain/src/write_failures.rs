//! Failure bookkeeping of a recorder (a store's event-stream writer): write failures never stop
//! a run; each is kept (up to [`MAX_KEPT`]) for the front-end to read, and the first one of each
//! kind of target (state, history, audit, transcript, …) is handed to a callback, e.g. to print
//! one warning on stderr. Shared by the embedded store and the PostgreSQL store.
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::PoisonError;

/// Called with the text of a write failure, once per kind of target.
pub type ErrorCallback = Arc<dyn Fn(String) + Send + Sync>;

/// At most this many failure texts are kept for [`WriteFailures::take`].
pub const MAX_KEPT: usize = 100;

/// The failures of one recorder (all its clones and its writer share one).
#[derive(Default)]
pub struct WriteFailures {
    callback: Mutex<Option<ErrorCallback>>,
    errors: Mutex<Vec<String>>,
    /// The first failure of each target that failed.
    reported: Mutex<BTreeMap<&'static str, String>>,
}

impl std::fmt::Debug for WriteFailures {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WriteFailures").finish_non_exhaustive()
    }
}

impl WriteFailures {
    /// Records a failure of `target`; the first of each target goes to the callback.
    pub fn report(&self, target: &'static str, message: String) {
        {
            let mut errs = self.errors.lock().unwrap_or_else(PoisonError::into_inner);
            if errs.len() < MAX_KEPT {
                errs.push(message.clone());
            }
        }
        let first = {
            let mut reported = self.reported.lock().unwrap_or_else(PoisonError::into_inner);
            if reported.contains_key(target) {
                false
            } else {
                reported.insert(target, message.clone());
                true
            }
        };
        if first {
            let cb = self
                .callback
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone();
            if let Some(cb) = cb {
                cb(message);
            }
        }
    }

    /// Sets the callback (failures before it only reach [`WriteFailures::take`]).
    pub fn on_error(&self, callback: ErrorCallback) {
        *self.callback.lock().unwrap_or_else(PoisonError::into_inner) = Some(callback);
    }

    /// Takes the texts kept so far.
    pub fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.errors.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Whether any of `targets` failed at least once.
    pub fn any_of(&self, targets: &[&str]) -> bool {
        let reported = self.reported.lock().unwrap_or_else(PoisonError::into_inner);
        targets.iter().any(|t| reported.contains_key(t))
    }

    /// The text of the first failure of the first of `targets` that failed (kept apart from
    /// [`WriteFailures::take`], which does not remove it).
    pub fn first_of(&self, targets: &[&str]) -> Option<String> {
        let reported = self.reported.lock().unwrap_or_else(PoisonError::into_inner);
        targets.iter().find_map(|t| reported.get(t).cloned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_failure_of_each_target_reaches_the_callback_and_all_are_kept() {
        let f = WriteFailures::default();
        f.report("state", "before".into());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s = Arc::clone(&seen);
        f.on_error(Arc::new(move |m| s.lock().unwrap().push(m)));
        f.report("state", "again".into());
        f.report("history", "h1".into());
        f.report("history", "h2".into());
        assert_eq!(
            *seen.lock().unwrap(),
            ["h1"],
            "state was reported before the callback"
        );
        assert!(f.any_of(&["history"]) && !f.any_of(&["audit"]));
        assert_eq!(
            f.first_of(&["audit", "history", "state"]).as_deref(),
            Some("h1")
        );
        assert_eq!(f.first_of(&["audit"]), None);
        assert_eq!(f.take(), ["before", "again", "h1", "h2"]);
        assert!(f.take().is_empty());
        for i in 0..150 {
            f.report("audit", format!("{i}"));
        }
        assert_eq!(f.take().len(), MAX_KEPT);
    }
}
