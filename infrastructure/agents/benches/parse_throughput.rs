//! Parsing throughput of claude's stream-json output (issue: agent steps).
//!
//! Builds a ~50 MB stream from the real recordings in tests/fixtures/claude (the tool-use
//! turn repeated: assistant text, tool_use, tool_result, result events), feeds it to the
//! parser in 64 KiB chunks through the same line splitter the provider uses, and prints MB/s.
//! Target: above 200 MB/s. Run: `cargo bench -p awf-agents --bench parse_throughput`.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::print_stdout)]

use std::time::Instant;

use awf_agents::parse::LineSplitter;
use awf_agents::parse::claude;

fn main() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/claude");
    let mut unit = String::new();
    for f in ["text.ndjson", "tool.ndjson", "resume-1.ndjson"] {
        unit.push_str(&std::fs::read_to_string(format!("{dir}/{f}")).expect("recording"));
    }
    let target = 50 * 1024 * 1024;
    let mut stream = String::with_capacity(target + unit.len());
    while stream.len() < target {
        stream.push_str(&unit);
    }
    let mut best = f64::MAX;
    let mut chunks_seen = 0usize;
    for _ in 0..5 {
        let t0 = Instant::now();
        let mut state = claude::State::default();
        let mut splitter = LineSplitter::default();
        let mut n = 0usize;
        let mut at = 0usize;
        while at < stream.len() {
            let mut end = (at + 64 * 1024).min(stream.len());
            while !stream.is_char_boundary(end) {
                end += 1;
            }
            splitter.push(&stream[at..end], |line| {
                n += claude::parse_line(&mut state, line).len()
            });
            at = end;
        }
        splitter.finish(|line| n += claude::parse_line(&mut state, line).len());
        let parsed = claude::finish(state);
        let dt = t0.elapsed().as_secs_f64();
        assert!(parsed.output.is_some());
        chunks_seen = n;
        best = best.min(dt);
    }
    let mb = stream.len() as f64 / (1024.0 * 1024.0);
    println!(
        "claude stream-json: {mb:.1} MB, {chunks_seen} chunks, best of 5: {:.1} ms = {:.0} MB/s (target > 200 MB/s)",
        best * 1000.0,
        mb / best
    );
}
