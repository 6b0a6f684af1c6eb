//! Integration tests of the built-in tools: real files in temporary directories, real
//! processes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod suite;
