//! Exec.
