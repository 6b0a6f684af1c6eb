//! awf domain: the workflow model, run state, run events, the error taxonomy and the ports.
//!
//! This crate does no I/O. Adapters in `infrastructure/*` implement the ports declared in
//! [`ports`]; the engine in `awf-application` drives them. Dependencies are limited to serde,
//! serde_json, thiserror, indexmap, async-trait and `tokio-util`'s `CancellationToken`.
#![deny(clippy::print_stdout, clippy::print_stderr)]

pub mod duration;
pub mod error;
pub mod event;
pub mod interaction;
pub mod interpreter;
pub mod json;
pub mod limits;
pub mod mask;
pub mod ports;
pub mod printable;
pub mod projection;
pub mod quiet_panics;
pub mod run;
pub mod scope;
pub mod shell;
pub mod timefmt;
pub mod validate;
pub mod watchdog_start;
pub mod withheld;
pub mod workflow;
pub mod write_failures;

pub use error::AwfError;
pub use error::Category;
pub use error::ErrorCode;
