//! Environment variables withheld from every child process awf starts from now on in this
//! process (`awf serve --token-env NAME`: the API token must not reach the runs' steps,
//! agents or their tools). The process executor (awf-exec) and the Bash tool (awf-tools)
//! both remove these names when they spawn, whether inherited from awf's own environment or
//! given in a command's `env`. A process-wide list of names; no I/O. Also the values every run
//! masks whatever their name ([`mask_value`]).

use std::sync::PoisonError;
use std::sync::RwLock;

/// The withheld names, in the order first withheld, each once.
static WITHHELD: RwLock<Vec<String>> = RwLock::new(Vec::new());

/// Withholds the variables `names` from every process started from now on (a name already
/// withheld is not added twice).
pub fn withhold_env(names: impl IntoIterator<Item = String>) {
    let mut w = WITHHELD.write().unwrap_or_else(PoisonError::into_inner);
    for n in names {
        if !w.contains(&n) {
            w.push(n);
        }
    }
}

/// The names withheld so far (empty unless [`withhold_env`] was called).
pub fn withheld_env() -> Vec<String> {
    WITHHELD
        .read()
        .unwrap_or_else(PoisonError::into_inner)
        .clone()
}

/// Secret values masked in every run started from now on in this process, whatever their
/// name (`awf serve --token-env NAME`'s token: should a step find it anyway, it is `***` in
/// its output, its state and its transcript).
static MASKED: RwLock<Vec<String>> = RwLock::new(Vec::new());

/// Masks `value` in every run started from now on (see [`masked_values`]).
pub fn mask_value(value: String) {
    let mut m = MASKED.write().unwrap_or_else(PoisonError::into_inner);
    if !m.contains(&value) {
        m.push(value);
    }
}

/// The values [`mask_value`] was given so far.
pub fn masked_values() -> Vec<String> {
    MASKED
        .read()
        .unwrap_or_else(PoisonError::into_inner)
        .clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_withheld_once_each_in_order() {
        withhold_env(["WITHHELD_TEST_A".to_owned(), "WITHHELD_TEST_B".to_owned()]);
        withhold_env(["WITHHELD_TEST_A".to_owned()]);
        let got: Vec<String> = withheld_env()
            .into_iter()
            .filter(|n| n.starts_with("WITHHELD_TEST_"))
            .collect();
        assert_eq!(got, ["WITHHELD_TEST_A", "WITHHELD_TEST_B"]);
    }

    #[test]
    fn values_are_masked_once_each() {
        mask_value("withheld-test-value".to_owned());
        mask_value("withheld-test-value".to_owned());
        let got: Vec<String> = masked_values()
            .into_iter()
            .filter(|n| n.starts_with("withheld-test-"))
            .collect();
        assert_eq!(got, ["withheld-test-value"]);
    }
}
