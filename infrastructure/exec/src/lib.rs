//! awf-exec: runs shell commands and scripts as child processes.
//!
//! Implements the domain port [`CommandExecutor`](awf_domain::ports::CommandExecutor) with
//! [`ProcessExecutor`]. Every child runs in its own process group with stdin on `/dev/null`;
//! timeout and cancel stop the whole group (SIGTERM, [`KILL_GRACE`], SIGKILL), and after the
//! child exits its pipes are drained within a bounded window so a background grandchild cannot
//! hang the caller. What a command of a run that exited on its own left running in the
//! background (its group's other members) lives on for the run's later steps until
//! [`sweep_scope`] (the run's end) or [`sweep_adopted`] stops it; a command outside a run
//! has its group stopped when it ends. [`signal_group`] is the one safe `killpg` wrapper
//! other adapters may reuse.
//!
//! With a watchdog registered, children are started by `posix_spawn` with an environment
//! built once per distinct command environment and waited for through a pidfd (the `spawn`
//! module); otherwise, and for a working directory or a program looked up on `PATH`, through
//! std's `Command`. Both give the child the same environment, in the same order.
//!
//! Descendants that leave the group are handled too: every child has a parent-death signal
//! (it dies with awf; not while a watchdog process registered with [`set_watchdog`] does
//! that job, so spawns can use `posix_spawn`), carries [`TAG_VAR`], and with [`become_subreaper`] orphaned
//! descendants come back to awf, where a stopped step sweeps its own and [`sweep_adopted`]
//! sweeps the rest at the end of a run. [`kill_all_now`] is the second Ctrl-C.
//!
//! Depends on `awf-domain` only (plus tokio, nix, rustix and tempfile); never on
//! `awf-application`.
//!
//! Source: spec/workflow.md §1.5.2, §1.9, §1.12 (shebang), §3.3, §3.10; design/decisions.md
//! "Execution and processes".
#![deny(clippy::print_stdout, clippy::print_stderr)]

mod capture;
mod direct;
mod executor;
mod group;
mod linger;
mod reaper;
mod shell;
mod side_by_side;
mod spawn;

pub use executor::DEFAULT_CAPTURE_LIMIT;
pub use executor::DRAIN_WINDOW;
pub use executor::KILL_GRACE;
pub use executor::ProcessExecutor;
pub use group::GroupObserver;
pub use group::set_group_observer;
pub use group::signal_group;
pub use reaper::TAG_VAR;
pub use reaper::become_subreaper;
pub use reaper::kill_all_now;
pub use reaper::kill_tagged_by;
pub use reaper::set_watchdog;
pub use reaper::sweep_adopted;
pub use reaper::sweep_scope;
pub use spawn::hold_file_size_signal;
pub use spawn::ignored_signals;
pub use spawn::wait_exited;
