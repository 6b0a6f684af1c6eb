//! ANSI colour, only on a terminal and only without NO_COLOR / `--no-color`.

use std::io::IsTerminal;

use awf_domain::printable::escaped;
pub use awf_domain::printable::printable;

/// [`printable`] for a text that may span lines and comes from a run (a step's output or
/// stderr kept in a message, an error, a log line): newlines and tabs are kept (a `\r\n`
/// counts as a newline), every other control character (ESC, BEL, a lone CR, …) is written as
/// an escape (`\u{1b}`), so text a step printed cannot move the cursor, clear the screen or
/// retitle the terminal when awf shows it again (`awf status`, `awf history`, a run's
/// summary). What a step writes, relayed live (`-o streaming`, `-o buffered`), and every JSON
/// output are not changed.
pub fn printable_text(text: &str) -> std::borrow::Cow<'_, str> {
    let unsafe_char = |c: char| escaped(c) && c != '\n';
    if !text.chars().any(unsafe_char) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\r' && chars.peek() == Some(&'\n') {
            continue;
        }
        if unsafe_char(c) {
            out.extend(c.escape_unicode());
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

/// [`printable`] for a multi-line text (an approval message): the author's newlines are
/// kept (a `\r\n` counts as one), each continuation line starts with `indent`, trailing
/// newlines are dropped; every other control character is still escaped.
pub fn printable_lines(text: &str, indent: &str) -> String {
    text.trim_end_matches(['\n', '\r'])
        .split('\n')
        .map(|line| printable(line.strip_suffix('\r').unwrap_or(line)).into_owned())
        .collect::<Vec<_>>()
        .join(&format!("\n{indent}"))
}

/// Whether to colour one output stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Style {
    color: bool,
}

impl Style {
    /// No colour.
    pub const fn plain() -> Self {
        Self { color: false }
    }

    /// Colour when `tty` and neither `--no-color` nor a non-empty `NO_COLOR` is set.
    pub fn detect(tty: bool, no_color_flag: bool, no_color_env: Option<&str>) -> Self {
        let env_off = no_color_env.is_some_and(|v| !v.is_empty());
        if tty && !no_color_flag && !env_off {
            Self { color: true }
        } else {
            Self::plain()
        }
    }

    /// Style for stderr.
    pub fn stderr(no_color_flag: bool) -> Self {
        let env = std::env::var("NO_COLOR").ok();
        Self::detect(
            std::io::stderr().is_terminal(),
            no_color_flag,
            env.as_deref(),
        )
    }

    fn paint(self, code: &str, text: &str) -> String {
        if self.color {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text.to_owned()
        }
    }

    /// Green.
    pub fn green(self, text: &str) -> String {
        self.paint("32", text)
    }

    /// Red.
    pub fn red(self, text: &str) -> String {
        self.paint("31", text)
    }

    /// Bold red.
    pub fn red_bold(self, text: &str) -> String {
        self.paint("1;31", text)
    }

    /// Yellow.
    pub fn yellow(self, text: &str) -> String {
        self.paint("33", text)
    }

    /// Cyan.
    pub fn cyan(self, text: &str) -> String {
        self.paint("36", text)
    }

    /// Dim.
    pub fn dim(self, text: &str) -> String {
        self.paint("2", text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colour_needs_a_tty_and_no_opt_out() {
        assert_eq!(
            Style::detect(true, false, None).green("ok"),
            "\x1b[32mok\x1b[0m"
        );
        assert_eq!(Style::detect(false, false, None).green("ok"), "ok");
        assert_eq!(Style::detect(true, true, None).green("ok"), "ok");
        assert_eq!(Style::detect(true, false, Some("1")).green("ok"), "ok");
        assert_eq!(
            Style::detect(true, false, Some("")).green("ok"),
            "\x1b[32mok\x1b[0m"
        );
    }
}

#[cfg(test)]
mod printable_tests {
    use super::printable;
    use super::printable_text;

    /// Bidirectional formatting characters are escaped too: a name holding U+202E was shown
    /// reversed (breaker); letters of right-to-left scripts are left alone.
    #[test]
    fn bidirectional_overrides_are_escaped() {
        assert_eq!(printable("wf\u{202e}\u{7}名"), "wf\\u{202e}\\u{7}名");
        assert_eq!(
            printable_text("a\u{2066}b\u{200f}\nc"),
            "a\\u{2066}b\\u{200f}\nc"
        );
        assert_eq!(printable("שלום"), "שלום");
    }

    #[test]
    fn control_characters_from_workflow_files_are_escaped() {
        assert_eq!(printable("plain\tname"), "plain\tname");
        assert_eq!(printable_text("two\r\nlines\tok\n"), "two\nlines\tok\n");
        assert_eq!(
            printable_text("\u{1b}]0;pwned\u{7}\u{1b}[2Jhi\rX\n"),
            "\\u{1b}]0;pwned\\u{7}\\u{1b}[2Jhi\\u{d}X\n"
        );
        assert_eq!(
            printable("esc\u{1b}[31mRED\u{1b}]0;pwned\u{7}\rX"),
            "esc\\u{1b}[31mRED\\u{1b}]0;pwned\\u{7}\\u{d}X"
        );
    }
}

#[cfg(test)]
mod printable_lines_tests {
    use super::printable_lines;

    #[test]
    fn newlines_are_kept_and_indented_other_controls_escaped() {
        assert_eq!(
            printable_lines("Deploy?\nThis restarts prod.\r\n\u{1b}[2J\n", "  "),
            "Deploy?\n  This restarts prod.\n  \\u{1b}[2J"
        );
        assert_eq!(printable_lines("one line", "  "), "one line");
    }
}
