//! Integration tests of awf-agents (one binary): parsers on real recordings, CLI providers
//! over a replaying executor, openai_compatible against an in-test HTTP server.

#[cfg(test)]
mod suite;
