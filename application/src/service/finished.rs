//! What a finished run keeps in memory while it waits for its TTL: the texts of its result
//! and of the events its log keeps (step outputs, stderr, tool results) cut to their last
//! bytes, so a server holding many finished runs holds a few KiB per state, not the outputs
//! themselves (up to the capture cap per stream). The whole texts are in the run's record
//! (`outputs/<run id>/`, the state file, the transcript).

use awf_domain::event::RunEvent;
use awf_domain::run::RunResult;
use awf_domain::run::SharedText;

/// The last `max` bytes of `text` (from a character boundary at or after the cut), or the
/// text itself (no copy) when it is not longer.
pub(crate) fn tail(text: &SharedText, max: usize) -> SharedText {
    let s = text.as_str();
    if s.len() <= max {
        return text.clone();
    }
    let mut at = s.len() - max;
    while !s.is_char_boundary(at) {
        at += 1;
    }
    SharedText::from(&s[at..])
}

fn tail_string(text: &mut String, max: usize) {
    if text.len() > max {
        let cut = tail(&SharedText::from(text.as_str()), max).into_string();
        *text = cut;
    }
}

/// `result` with each state's `output` and `stderr` cut to their last `max` bytes.
pub(crate) fn compact_result(result: &RunResult, max: usize) -> RunResult {
    let mut r = result.clone();
    for s in r.states.values_mut() {
        s.output = tail(&s.output, max);
        s.stderr = tail(&s.stderr, max);
    }
    r
}

/// Cuts the texts of `event` that can be big (a step's output and stderr, a tool result,
/// the run result's states) to their last `max` bytes. Output chunks are left as they are:
/// each is small, and the log's budget bounds how many it keeps.
pub(crate) fn compact_event(event: &mut RunEvent, max: usize) {
    match event {
        RunEvent::StepFinished { state, .. } => {
            state.output = tail(&state.output, max);
            state.stderr = tail(&state.stderr, max);
        }
        RunEvent::RunFinished { result } => **result = compact_result(result, max),
        RunEvent::ToolCallResult { output, .. } => tail_string(output, max),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tail_keeps_the_last_bytes_from_a_character_boundary() {
        let text = SharedText::from(format!("{}END", "é".repeat(10)));
        assert_eq!(tail(&text, 6).as_str(), "éEND");
        assert_eq!(tail(&text, 100).as_str(), text.as_str());
        assert_eq!(tail(&SharedText::from("abc"), 0).as_str(), "");
    }
}
