//! Integration tests of `awf-exec` against real processes. The same suite runs in
//! `spawned.rs` with a watchdog registered, where children are started by `posix_spawn`.

#[cfg(test)]
mod common;
#[cfg(test)]
mod suite;

/// No watchdog: children get a parent-death signal, so std's `Command` forks them.
#[cfg(test)]
fn prepare() {}
