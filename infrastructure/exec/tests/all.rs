//! Integration tests of `awf-exec` against real processes (one test binary).

#[cfg(test)]
mod common;
#[cfg(test)]
mod suite;
