//! Integration tests of `awf-store` (one test binary; modules under `suite/`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod suite;
