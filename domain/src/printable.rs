//! Text from a workflow file or a run made safe for a terminal: control characters and
//! bidirectional formatting characters written as escapes (`\u{1b}`). Used by every
//! front-end and adapter that writes such text where a terminal shows it (the CLI, log
//! lines).

/// Whether `c` is written as an escape when workflow or run text reaches the terminal: a
/// control character (ESC, CR, BEL, …; not a tab), or a bidirectional formatting character
/// (U+202A–U+202E, U+2066–U+2069, U+200E, U+200F, U+061C), which would show the text around
/// it reordered ("Trojan Source", CVE-2021-42574; breaker: a workflow named with U+202E was
/// shown reversed).
pub fn escaped(c: char) -> bool {
    (c.is_control() && c != '\t')
        || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{200e}' | '\u{200f}' | '\u{061c}')
}

/// `text` with its control and bidirectional formatting characters (see [`escaped`]; tabs
/// kept) written as escapes (`\u{1b}`), for names and descriptions that come from a
/// workflow file: they must not move the cursor, clear the screen, retitle the terminal or
/// reorder what is shown.
pub fn printable(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.chars().any(escaped) {
        return std::borrow::Cow::Borrowed(text);
    }
    std::borrow::Cow::Owned(
        text.chars()
            .map(|c| {
                if escaped(c) {
                    c.escape_unicode().to_string()
                } else {
                    c.to_string()
                }
            })
            .collect(),
    )
}
