//! The shell context of template actions in `command:` text: where each `{{ … }}` action
//! lands in the shell sense of the literal text around it (a bare word, inside `'…'`, `"…"`,
//! backticks, `$( … )`, a here-document body, inside `${ … }`, or right after a backslash).
//! Pure text analysis, no I/O.
//!
//! One walker for every user: the template engine's `shell_quote: true` rewrite (which quotes
//! each value for its context) and its double-quoted loop-item escaping, and `awf validate`'s
//! unquoted-value warnings (which give the fix that is right for the context).
//!
//! Source: issue 14 ("Safe shell interpolation").

use std::ops::Range;

/// Where a template action sits in shell command text.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum ShellContext {
    /// A bare word. `in_substitution` when inside `$( … )` (which starts a fresh unquoted
    /// context even inside `"…"`). A single-quoted word (`shell_quote`) is one literal word
    /// here.
    Unquoted {
        /// Inside `$( … )`.
        in_substitution: bool,
    },
    /// Inside `'…'`: the text is literal up to the next `'`.
    SingleQuoted,
    /// Inside an ANSI-C string `$'…'` (bash, zsh, ksh): `\` escapes there (`\'` is a
    /// quote, not the end). Shells without it (dash) read `$` and a plain `'…'` string, so no
    /// one quoting protects a value in both readings.
    AnsiC,
    /// Inside a `#` comment, which runs to the end of its line (in backticks, also to their
    /// closing backtick), whatever values and quotes are in it. Quotes do nothing there: only
    /// a line break in the value would end the comment and run the rest.
    Comment,
    /// Inside `"…"`: `$`, `` ` `` and `\` keep their meaning, `'` is a literal character.
    DoubleQuoted,
    /// Inside `` `…` ``: the text is parsed again as a command after `\\`, `` \` `` and `\$`
    /// are unescaped.
    Backtick,
    /// A here-document body, as its own text (a `$( … )`, backticks or `${ … }` in an
    /// unquoted one's body are contexts of their own, read as anywhere else).
    Heredoc {
        /// The delimiter was quoted (`<<'EOF'`): nothing in the body expands.
        quoted: bool,
        /// `<<-`: leading tabs of the body and of the closing line are ignored.
        strip: bool,
        /// The word that ends the body when it stands alone on a line.
        delimiter: String,
    },
    /// Inside a parameter expansion `${ … }` (`"${NAME:-{{x}}}"`), at any depth of quotes
    /// within it. No quoting protects a value there in every shell (bash reads `'` inside a
    /// double-quoted `${ … }` as a literal character and `"` as opening a nested string).
    ParameterExpansion,
    /// Right after a backslash that escapes the action's first character (`\{{x}}` bare,
    /// inside `"…"`, backticks or an unquoted here-document, also across a `{{-` trim marker:
    /// `\ {{- x}}`), or inside backticks within `"…"` that hold `\"` (which opens a real
    /// string once the backticks are read): the backslash would escape the quote meant to
    /// protect the value.
    AfterBackslash,
    /// Right after an unescaped `$` (`${{x}}`, `$ {{- x}}`): the value's first character makes
    /// `$'…'`, `$name` or `$(…)` of it.
    AfterDollar,
    /// Inside an arithmetic expansion or command (`$(( … ))`, `$[ … ]`, `(( … ))`, `let`),
    /// a `[[ … ]]` test with an arithmetic comparison (`-eq`, `-lt`, …) or a variable test
    /// (`-v`, `-R`, also in `test`/`[`), an array subscript being assigned (`a[…]=`, also in
    /// a compound assignment `a=([…]=…)`), a `declare -i` (`-n`; `typeset`, `local`,
    /// `export`, `readonly`) command or an assignment to a variable it makes an integer, or a
    /// variable name given to `declare` (and its kin), `read`, `unset`, `mapfile` or
    /// `printf -v`: bash evaluates the value as arithmetic (or as a variable name), and an
    /// array subscript in it (`a[$(cmd)]`) runs, quoted or not.
    Arithmetic,
    /// After a template branch (`{{if}}`, `{{else}}`, `{{with}}`, `{{range}}`) whose text
    /// leaves the shell quoting different from the other branch (or from the branch not
    /// being taken): an unbalanced quote, a `$(`, a backtick, a here-document, a comment
    /// (to the end of its line). Where the value lands depends on the branch taken, which
    /// the text alone cannot tell.
    UnevenBranch {
        /// The action that opens the branch (`{{if .inputs.x}}`).
        branch: String,
    },
    /// After text bash and dash read differently, so that where the value lands depends on
    /// the shell, or that the walker does not read for sure (`cause` says which).
    ShellDependent {
        /// The text read differently.
        cause: Dependence,
    },
}

/// The text after which [`ShellContext::ShellDependent`] leaves every value unprotected.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Dependence {
    /// A line equal to a here-document's delimiter inside a `$( … )` or backticks in its
    /// body: bash ends the here-document there, dash reads on.
    ClosingLineInSubstitution,
    /// Backticks or a `#` comment inside `$(( … ))`: bash looks for the closing `))` through
    /// them, dash reads a substitution or a comment.
    ArithmeticBackticks,
    /// `<<` inside bash's own arithmetic (`(( … ))`, `$[ … ]`, `a[…]=`, `a=( … )`): a shift
    /// to bash, a here-document to dash.
    ShiftOrHeredoc,
    /// A here-document announced in a `$( … )` that closes on its line: bash reads its body
    /// from the next lines, dash ends it at the `)`.
    HeredocInClosedSubstitution,
    /// A here-document with an empty delimiter (`<<''`) inside a `$( … )`: bash ends it at
    /// once, dash at the first empty line.
    EmptyDelimiterInSubstitution,
    /// A delimiter written `$'EOF'` or `$"EOF"`: bash reads `EOF`, dash `$EOF`.
    DollarQuotedDelimiter,
    /// A delimiter the walker cannot read for sure: one holding `$( )`, `${ }`, backticks,
    /// a template action (the value would decide it) or a line-joining `\`, or an unclosed
    /// quote.
    UnreadableDelimiter,
    /// An unquoted here-document's body lines joined by `\` into its delimiter: bash ends it
    /// there, dash reads on.
    JoinedDelimiter,
}

impl Dependence {
    const ALL: [Self; 8] = [
        Self::ClosingLineInSubstitution,
        Self::ArithmeticBackticks,
        Self::ShiftOrHeredoc,
        Self::HeredocInClosedSubstitution,
        Self::EmptyDelimiterInSubstitution,
        Self::DollarQuotedDelimiter,
        Self::UnreadableDelimiter,
        Self::JoinedDelimiter,
    ];

    /// Where the value sits, as [`Unprotected::place`] says it.
    pub fn place(self) -> &'static str {
        match self {
            Self::ClosingLineInSubstitution => {
                "after a here-document's closing line inside a $( ) or backticks in its body (it ends the here-document for bash, not for dash)"
            }
            Self::ArithmeticBackticks => {
                "after backticks or a # comment inside $(( )) (bash reads past them to the )), dash reads a substitution or a comment)"
            }
            Self::ShiftOrHeredoc => {
                "after << inside (( )), $[ ], a[…]= or a=( ) (a shift to bash, a here-document to dash)"
            }
            Self::HeredocInClosedSubstitution => {
                "after a here-document announced in a $( ) that closes on its line (bash reads its body from the next lines, dash does not)"
            }
            Self::EmptyDelimiterInSubstitution => {
                "after a here-document with an empty delimiter (<<'') inside $( ) (bash ends it at once, dash at the first empty line)"
            }
            Self::DollarQuotedDelimiter => {
                "after a here-document delimiter written $'…' or $\"…\" (bash reads $'EOF' as EOF, dash as $EOF)"
            }
            Self::UnreadableDelimiter => {
                "after a here-document delimiter awf cannot read for sure (one holding $( ), ${ }, backticks, a template value or a line-joining \\, or an unclosed quote)"
            }
            Self::JoinedDelimiter => {
                "after here-document lines joined by \\ into its delimiter (which ends it for bash, not for dash)"
            }
        }
    }

    /// A one-character code for the cause (the template engine's context tag carries it).
    pub fn code(self) -> char {
        let k = Self::ALL.iter().position(|c| *c == self).unwrap_or(0);
        char::from(b'0' + u8::try_from(k).unwrap_or(0))
    }

    /// The cause of a [`Self::code`].
    pub fn from_code(code: char) -> Option<Self> {
        let k = code.to_digit(10)?;
        Self::ALL.get(usize::try_from(k).ok()?).copied()
    }
}

/// A place in shell text where no quoting protects a value ([`ShellContext::unprotected`]):
/// `place` says where (`inside ${…}`), `why` what the shell does there, `fix` what to write
/// instead. One description for `awf validate`'s warning and `shell_quote: true`'s refusal.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Unprotected {
    /// Where the value sits, as a phrase (`right after a backslash`).
    pub place: &'static str,
    /// What the shell makes of a value there.
    pub why: &'static str,
    /// What to write instead.
    pub fix: &'static str,
}

impl ShellContext {
    /// For the contexts where no quoting protects a value (`${ … }`, after `\` or `$`,
    /// arithmetic), what to say about it; `None` where a value can be quoted.
    pub fn unprotected(&self) -> Option<Unprotected> {
        Some(match self {
            Self::ParameterExpansion => Unprotected {
                place: "inside ${…}",
                why: "quotes there mean different things to different shells (bash reads ' as a literal character), so $( ) in the value runs",
                fix: "assign it to a variable first (v={{…}}) and write ${NAME:-$v}",
            },
            Self::AfterBackslash => Unprotected {
                place: "right after a backslash (or in backticks holding \\` or, within \"…\", \\\")",
                why: "the backslash escapes the quote meant to protect it, so the rest of the value runs as shell code",
                fix: "remove the backslash before {{…}}",
            },
            Self::AfterDollar => Unprotected {
                place: "right after a $",
                why: "the $ makes $'…', $name or $( ) of the value",
                fix: "put the value apart from the $ (assign it to a variable first)",
            },
            Self::AnsiC => Unprotected {
                place: "inside $'…'",
                why: "bash reads \\' there as a quote, dash as the string's end, so no quoting holds in both and $( ) in the value can run",
                fix: "close the $'…' string before the value and reopen it after it ($'it\\'s '{{…}})",
            },
            Self::Arithmetic => Unprotected {
                place: "in shell arithmetic or a variable name ($(( )), (( )), let, [[ … -eq … ]], -v, a[…]=, declare -i, a name for declare, read, unset, printf -v)",
                why: "bash evaluates it, quotes or not, and runs an array subscript's $( ) (declare -a re-reads a quoted (…) value as an array's)",
                fix: "pass only numbers there (a `type: integer` input is one), or set v={{…}} first and use \"$v\"",
            },
            Self::ShellDependent { cause } => Unprotected {
                place: cause.place(),
                why: "bash and dash read that text differently (or awf cannot tell how the shell reads it), so where the value lands depends on the shell and no one quoting is right",
                fix: "write that text so that every shell reads it alike, or set v={{…}} before it and use \"$v\"",
            },
            Self::UnevenBranch { .. } => Unprotected {
                place: "after a template branch ({{if}}/{{else}}/{{with}}/{{range}}) whose text leaves the shell quoting different from the other branch",
                why: "where the value lands (inside or outside a quote, a comment, a here-document) depends on the branch taken, so no one quoting is right",
                fix: "balance each branch (close in it every quote, $( ), backtick and here-document it opens, or repeat the shared text in every branch)",
            },
            _ => return None,
        })
    }
}

/// One `{{ … }}` action of shell command text and where it sits.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct ShellAction<'a> {
    /// The action as written, `{{` and `}}` included.
    pub text: &'a str,
    /// Byte range of [`Self::text`] in the walked text.
    pub range: Range<usize>,
    /// The innermost shell context of the action.
    pub context: ShellContext,
    /// A `"…"` string encloses the action, directly or through `$( … )` / backticks nested
    /// in it (`"$(echo {{x}})"`). True whenever `context` is [`ShellContext::DoubleQuoted`].
    pub inside_double_quotes: bool,
    /// Backticks enclose the action, directly or through quotes, `$( … )` or a comment
    /// nested in them (`` `echo "{{x}}"` ``): the shell unescapes `\\`, `` \` `` and `\$` in
    /// their text before it reads the rest, so a quoted value there needs its `\` and `` ` ``
    /// escaped once more. True whenever `context` is [`ShellContext::Backtick`].
    pub inside_backticks: bool,
    /// For [`ShellContext::SingleQuoted`], [`ShellContext::DoubleQuoted`] and
    /// [`ShellContext::Backtick`]: the byte range of the enclosing quoted string or backtick
    /// substitution, its quotes included (`"three {{x}}"`); the range ends at the end of the
    /// text when the string is never closed. `None` for other contexts.
    pub quoted_span: Option<Range<usize>>,
    /// The delimiters of the unquoted here-documents whose bodies enclose the action through
    /// a `$( … )`, backticks or `${ … }` in them (outermost first), the action's own
    /// here-document left out when its context is [`ShellContext::Heredoc`]
    /// (`cat <<EOF\n$(echo {{x}})\nEOF` gives `["EOF"]`). bash reads such a body line by line
    /// before it reads the substitution, so a line of the value equal to one of them ends
    /// that here-document early (dash parses the substitution first), and a backslash at
    /// the end of a line of it joins the next line.
    pub heredocs: Vec<String>,
    /// The text the shell gets on the action's line before it (from the line's start, bytes
    /// a trim marker removes left out), which a line of the value completes; `None` when
    /// another action shares that part of the line or a backslash may join it to the line
    /// before (the text is then unknown).
    pub line_before: Option<String>,
    /// The text the shell gets on the action's line after it (to the line's end), as for
    /// [`Self::line_before`]; `None` when another action follows on the line or the line
    /// ends in a backslash.
    pub line_after: Option<String>,
}

/// A piece of shell command text as [`shell_pieces`] cuts it.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum ShellPiece<'a> {
    /// Literal text between actions.
    Text(&'a str),
    /// A template action.
    Action(ShellAction<'a>),
}

/// One level of the walker's context stack.
#[derive(Clone, Debug)]
struct Frame {
    kind: Kind,
    /// Index into the spans table (its end is filled in when the frame closes).
    span: usize,
    inside_double: bool,
    inside_backtick: bool,
    /// For backticks: the index just past their closing backtick (found when they open, as
    /// the shell finds it: the first unescaped backtick, whatever quotes lie between).
    close: Option<usize>,
    /// The next word is in command position (where `case`, `let`, `[[` are read as such).
    cmd: bool,
    /// The `case` statements open in this frame, each with the parenthesis depth it opened
    /// at.
    cases: Vec<u32>,
    /// The head of a `case` being read: [`CaseHead::Subject`] right after the `case` word,
    /// [`CaseHead::In`] after its subject (the next word is `in`).
    case_head: CaseHead,
    /// Whether the next words are a `case` pattern (after `in`, `;;`, `;&` or `;;&`, up to
    /// the pattern's `)`, which ends it, not a `$( … )`): no word there is a reserved word
    /// but a first `esac` (breaker: a pattern `case)` was read as opening another `case`).
    pattern: Pattern,
    /// The next word is a redirection's target (`>f read x`: `f` is no command).
    target: bool,
    /// The next word is in command position only as the shell runs the command, not as it
    /// parses it (after `command`, `builtin` or an expansion that may be empty: a builtin
    /// named there runs, but `case` there is no reserved word).
    soft: bool,
}

/// Where a frame is in a `case` pattern (see [`Frame::pattern`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pattern {
    /// Not in one.
    Off,
    /// A pattern starts with the next word (an `esac` there ends the `case`).
    Next,
    /// Inside a pattern (after its `(` or first word), up to its `)`.
    In,
}

/// Where the head of a `case` statement is (see [`Frame::case_head`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum CaseHead {
    /// Not in the head of a `case`.
    None,
    /// The next word is the `case`'s subject.
    Subject,
    /// The next word is `in`.
    In,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Kind {
    /// `depth`: open parentheses inside `$( … )` (the `)` at depth 0 closes it).
    Unquoted {
        subst: bool,
        depth: u32,
    },
    Single,
    /// `$'…'`.
    AnsiC,
    /// A `#` comment (to the end of the line, or of the backticks around it).
    Comment,
    Double,
    Backtick,
    Heredoc {
        quoted: bool,
        strip: bool,
        delim: String,
    },
    /// An action right after an escaping backslash (never on the stack).
    Escaped,
    /// An action right after an unescaped `$` (never on the stack).
    Dollar,
    /// An action inside an arithmetic span (never on the stack).
    Arith,
    /// An action after a template branch (the action opening it) that leaves the shell
    /// state different from its siblings (never on the stack).
    Uneven(String),
    /// An action after text bash and dash read differently (never on the stack).
    Dependent(Dependence),
    /// `${ … }`; `depth`: open `{` inside it (the `}` at depth 0 closes it).
    Param {
        depth: u32,
    },
}

impl Kind {
    fn context(&self) -> ShellContext {
        match self {
            Kind::Unquoted { subst, .. } => ShellContext::Unquoted {
                in_substitution: *subst,
            },
            Kind::Single => ShellContext::SingleQuoted,
            Kind::AnsiC => ShellContext::AnsiC,
            Kind::Comment => ShellContext::Comment,
            Kind::Double => ShellContext::DoubleQuoted,
            Kind::Backtick => ShellContext::Backtick,
            Kind::Heredoc {
                quoted,
                strip,
                delim,
            } => ShellContext::Heredoc {
                quoted: *quoted,
                strip: *strip,
                delimiter: delim.clone(),
            },
            Kind::Param { .. } => ShellContext::ParameterExpansion,
            Kind::Escaped => ShellContext::AfterBackslash,
            Kind::Dollar => ShellContext::AfterDollar,
            Kind::Arith => ShellContext::Arithmetic,
            Kind::Uneven(branch) => ShellContext::UnevenBranch {
                branch: branch.clone(),
            },
            Kind::Dependent(cause) => ShellContext::ShellDependent { cause: *cause },
        }
    }
}

/// The stack plus the spans of the frames pushed so far.
struct Stack {
    frames: Vec<Frame>,
    spans: Vec<(usize, Option<usize>)>,
}

impl Stack {
    fn top(&self) -> Kind {
        self.frames.last().map_or(
            Kind::Unquoted {
                subst: false,
                depth: 0,
            },
            |f| f.kind.clone(),
        )
    }

    fn push(&mut self, kind: Kind, start: usize) {
        self.push_closing(kind, start, None);
    }

    /// [`Self::push`] with the index just past the frame's closing character, when known.
    fn push_closing(&mut self, kind: Kind, start: usize, close: Option<usize>) {
        let parent = self.frames.last();
        let inside_double = match &kind {
            Kind::Double => true,
            Kind::Unquoted { subst: true, .. }
            | Kind::Backtick
            | Kind::Param { .. }
            | Kind::Comment => parent.is_some_and(|f| f.inside_double),
            _ => false,
        };
        let inside_backtick =
            matches!(kind, Kind::Backtick) || parent.is_some_and(|f| f.inside_backtick);
        self.spans.push((start, None));
        self.frames.push(Frame {
            kind,
            span: self.spans.len() - 1,
            inside_double,
            inside_backtick,
            close,
            cmd: true,
            cases: Vec::new(),
            case_head: CaseHead::None,
            pattern: Pattern::Off,
            target: false,
            soft: false,
        });
    }

    /// Pops the top frame (never the base one), recording `end` as its span's end.
    fn pop(&mut self, end: usize) {
        if self.frames.len() > 1
            && let Some(f) = self.frames.pop()
            && let Some(s) = self.spans.get_mut(f.span)
        {
            s.1 = Some(end);
        }
    }

    fn set_depth(&mut self, depth: u32) {
        if let Some(f) = self.frames.last_mut() {
            f.kind = match f.kind {
                Kind::Param { .. } => Kind::Param { depth },
                _ => Kind::Unquoted { subst: true, depth },
            };
        }
    }

    /// Whether a `$( … )` encloses the top of the stack (at any depth).
    fn in_substitution(&self) -> bool {
        self.frames
            .iter()
            .any(|f| matches!(f.kind, Kind::Unquoted { subst: true, .. }))
    }

    /// Whether a `${ … }` encloses the top of the stack (at any depth).
    fn in_param(&self) -> bool {
        self.frames
            .iter()
            .any(|f| matches!(f.kind, Kind::Param { .. }))
    }

    /// Whether the top of the stack reads its text as inside `"…"`: a `"…"` string, or a
    /// `${ … }` nested in one (directly). `$( … )` and backticks start a fresh context even
    /// inside `"…"` (their `$'…'` is an ANSI-C string, their `'` a quote).
    fn reads_as_double(&self) -> bool {
        for f in self.frames.iter().rev() {
            match f.kind {
                Kind::Double => return true,
                Kind::Param { .. } => {}
                _ => return false,
            }
        }
        false
    }

    /// Whether the next word of the top frame is in command position.
    fn cmd(&self) -> bool {
        self.frames.last().is_some_and(|f| f.cmd)
    }

    /// Sets whether the next word is in command position (a word or operator read: no
    /// redirection's target is pending).
    fn set_cmd(&mut self, cmd: bool) {
        if let Some(f) = self.frames.last_mut() {
            f.cmd = cmd;
            f.target = false;
            f.soft = false;
        }
    }

    /// After a redirection operator: the next word is its target.
    fn set_target(&mut self) {
        if let Some(f) = self.frames.last_mut() {
            f.target = true;
        }
    }

    /// A redirection's target read otherwise (a here-document's delimiter).
    fn clear_target(&mut self) {
        if let Some(f) = self.frames.last_mut() {
            f.target = false;
        }
    }

    /// What decides how the rest of the text is read: each frame's kind and open `case`s
    /// (with where their head and patterns are).
    fn state(&self) -> Vec<FrameState> {
        self.frames
            .iter()
            .map(|f| (f.kind.clone(), f.cases.clone(), f.case_head, f.pattern))
            .collect()
    }

    /// A value standing as a word: a redirection's target, a word of a `case` head (after
    /// the subject, `in` follows; after `in`, the patterns) or pattern (its first word
    /// starts it), or else a word in or after command position.
    fn value_word(&mut self) {
        if let Some(f) = self.frames.last_mut() {
            if f.target {
                f.target = false;
                return;
            }
            match f.case_head {
                CaseHead::Subject => f.case_head = CaseHead::In,
                CaseHead::In => {
                    f.case_head = CaseHead::None;
                    f.pattern = Pattern::Next;
                }
                CaseHead::None if f.pattern == Pattern::Next => f.pattern = Pattern::In,
                CaseHead::None if f.pattern == Pattern::In => {}
                CaseHead::None => f.cmd = false,
            }
        }
    }

    /// After `;;` (`;&`, `;;&`) in a frame with an open `case`: a pattern follows.
    fn start_pattern(&mut self) {
        if let Some(f) = self.frames.last_mut()
            && !f.cases.is_empty()
        {
            f.pattern = Pattern::Next;
        }
    }

    /// At a pattern's `(`: inside it.
    fn enter_pattern(&mut self) {
        if let Some(f) = self.frames.last_mut() {
            f.pattern = Pattern::In;
        }
    }

    /// At a pattern's `)`: a command follows.
    fn end_pattern(&mut self) {
        if let Some(f) = self.frames.last_mut() {
            f.pattern = Pattern::Off;
            f.cmd = true;
        }
    }

    /// Whether the next words of the top frame are a `case` pattern.
    fn in_pattern(&self) -> bool {
        self.frames
            .last()
            .is_some_and(|f| f.pattern != Pattern::Off)
    }

    /// The number of frames (the level a here-document announced now is opened at).
    fn level(&self) -> usize {
        self.frames.len()
    }

    /// The delimiters of the unquoted here-documents on the stack, outermost first; the top
    /// frame left out when `own` (an action whose context is that here-document's body).
    fn enclosing_heredocs(&self, own: bool) -> Vec<String> {
        let n = if own {
            self.frames.len().saturating_sub(1)
        } else {
            self.frames.len()
        };
        self.frames
            .iter()
            .take(n)
            .filter_map(|f| match &f.kind {
                Kind::Heredoc {
                    quoted: false,
                    delim,
                    ..
                } => Some(delim.clone()),
                _ => None,
            })
            .collect()
    }

    /// Where the innermost backticks close (the index of their closing backtick).
    fn backticks_close(&self) -> Option<usize> {
        self.frames
            .iter()
            .rev()
            .find(|f| matches!(f.kind, Kind::Backtick))
            .and_then(|f| f.close)
            .map(|c| c.saturating_sub(1))
    }

    /// When the backtick at `at` closes the innermost backticks: how many frames sit above
    /// and including them (all of them end there, whatever quotes were left open inside).
    fn closing_backticks(&self, at: usize) -> Option<usize> {
        let k = self
            .frames
            .iter()
            .rposition(|f| matches!(f.kind, Kind::Backtick))?;
        (self.frames.get(k)?.close == Some(at + 1)).then(|| self.frames.len() - k)
    }
}

/// An open template control structure (`{{if}}`, `{{with}}`, `{{range}}`; `{{define}}` and
/// `{{block}}` only to match their `{{end}}`).
struct Branch {
    /// The opening action as written.
    action: String,
    /// `if`, `with` or `range`: a branch may or may not be taken.
    conditional: bool,
    /// `range`: its body may run any number of times.
    range: bool,
    /// The frames and pending here-documents each branch starts from.
    start: (Vec<Frame>, Vec<Pending>),
    /// The shell state each finished branch left.
    ends: Vec<BranchEnd>,
}

/// The shell state a template branch leaves: each frame's kind and open `case`s, and the
/// here-documents announced but not opened yet.
type BranchEnd = (Vec<FrameState>, Vec<Pending>);

/// What of a frame decides how the text after it reads (see [`Stack::state`]).
type FrameState = (Kind, Vec<u32>, CaseHead, Pattern);

/// A here-document announced (`<<EOF`) but not opened yet, with the stack level it was
/// announced at: its body starts after the next line break the shell reads at that level
/// (not one inside a `$( … )`, backticks or quotes opened since), and it ends unopened when
/// that level closes first (`` `cat <<EOF` ``).
type Pending = (Kind, usize);

/// How the states the branches of one template control structure leave compare.
enum Evenness {
    /// All the same: text after it reads the same whichever branch is taken.
    Even,
    /// They differ only by a `#` comment left open: the text reads the same from the next
    /// line on.
    CommentOnly,
    /// They differ: where a value after it lands cannot be known.
    Uneven,
}

fn evenness(ends: &[BranchEnd]) -> Evenness {
    let Some(first) = ends.first() else {
        return Evenness::Even;
    };
    if ends.iter().all(|e| e == first) {
        return Evenness::Even;
    }
    let strip = |e: &BranchEnd| {
        let mut frames = e.0.clone();
        while frames.last().is_some_and(|f| f.0 == Kind::Comment) {
            frames.pop();
        }
        (frames, e.1.clone())
    };
    let base = strip(first);
    if ends.iter().all(|e| strip(e) == base) {
        Evenness::CommentOnly
    } else {
        Evenness::Uneven
    }
}

/// An action found by the walk; the span is resolved once the walk is over.
struct Found {
    range: Range<usize>,
    kind: Kind,
    inside_double: bool,
    inside_backtick: bool,
    span: Option<usize>,
    heredocs: Vec<String>,
    line_before: Option<String>,
    line_after: Option<String>,
}

/// Go template white space (what a `{{-` / `-}}` trim marker removes).
fn is_template_blank(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\r' | b'\n')
}

/// For each byte of `text`, whether a trim marker of an action next to it removes it when
/// the template renders (`a {{- x}}` is `a` glued to the value; `{{x -}}\nEOF` glues the
/// line after to it): the walker reads the text as the shell will get it.
fn trimmed_bytes(b: &[u8]) -> Vec<bool> {
    let mut gone = vec![false; b.len()];
    let mut prev_end = 0usize;
    let mut i = 0usize;
    while i + 1 < b.len() {
        if b[i] == b'{' && b[i + 1] == b'{' {
            let end = action_end(b, i + 2);
            if b.get(i + 2) == Some(&b'-') && b.get(i + 3).is_some_and(|c| is_template_blank(*c)) {
                let mut j = i;
                while j > prev_end && is_template_blank(b[j - 1]) {
                    j -= 1;
                    gone[j] = true;
                }
            }
            let inner_end = end.saturating_sub(2);
            if end >= i + 6
                && b.get(end - 1) == Some(&b'}')
                && b.get(inner_end.wrapping_sub(1)) == Some(&b'-')
                && b.get(inner_end.wrapping_sub(2))
                    .is_some_and(|c| is_template_blank(*c))
            {
                let mut j = end;
                while j < b.len() && is_template_blank(b[j]) {
                    gone[j] = true;
                    j += 1;
                }
            }
            prev_end = end;
            i = end;
            continue;
        }
        i += 1;
    }
    gone
}

/// Cuts shell command text into literal text and `{{ … }}` actions, each action with its
/// shell context. The pieces concatenate back to `text`. Quotes (`'…'`, `"…"`, `$'…'`),
/// backslashes (`\` and a line break join two lines), `$( … )`, `${ … }`, backticks (which
/// end at their first unescaped backtick), `#` comments (to the end of the line, values in
/// them included) and here-documents (`<<EOF`, `<<-EOF`, `<<'EOF'`) are followed as POSIX
/// `sh` reads them (quotes nested in `${ … }` and `$'…'` as bash reads them); the actions
/// themselves count as opaque text, and white space their trim markers (`{{-`, `-}}`)
/// remove as absent. Where bash and dash read the text differently, or the walker cannot
/// read it for sure, the rest is [`ShellContext::ShellDependent`]. Never fails: text the
/// shell would reject (an unclosed quote) leaves the rest of it in that context.
pub fn shell_pieces(text: &str) -> Vec<ShellPiece<'_>> {
    if !text.contains("{{") {
        return if text.is_empty() {
            Vec::new()
        } else {
            vec![ShellPiece::Text(text)]
        };
    }
    let b = text.as_bytes();
    let gone = trimmed_bytes(b);
    // The last byte before `at` that the rendered text keeps.
    let kept_before = |at: usize| (0..at).rev().find(|&j| !gone[j]);
    // The first byte from `at` on that the rendered text keeps (the length when none).
    let kept_from = |at: usize| (at..b.len()).find(|&j| !gone[j]).unwrap_or(b.len());
    let mut stack = Stack {
        frames: Vec::new(),
        spans: Vec::new(),
    };
    stack.push(
        Kind::Unquoted {
            subst: false,
            depth: 0,
        },
        0,
    );
    let mut found: Vec<Found> = Vec::new();
    // Here-documents announced on the current line, opened at its end.
    let mut pending: Vec<Pending> = Vec::new();
    let mut line_start = true;
    // The previous byte was a backslash escaping the action that starts here.
    let mut escaped = false;
    // Where the last escaping backslash and the last unescaped `$` stood, and the character
    // the last backslash escaped.
    let mut escape_at: Option<usize> = None;
    let mut escaped_char: Option<usize> = None;
    let mut dollar_at: Option<usize> = None;
    // Where the last action ended, and whether it prints nothing (control, comment,
    // assignment): a `#` right after such an action may start a word, so a comment.
    let mut last_silent_end: Option<usize> = None;
    // Where the last `$( … )`, `${ … }` or backticks closed: the word goes on after it, so a
    // `#` right after it is a character of the word, not a comment (fuzzing: `$(( … ))#`
    // was read as starting a comment, and a backtick after it as commented out).
    let mut word_close: Option<usize> = None;
    // Spans where no quoting protects a value (arithmetic; backticks holding `` \` `` or,
    // in `"…"`, `\"`).
    let mut spans = Spans::default();
    let declared = declared_names(text);
    // The template's open `{{if}}`/`{{with}}`/`{{range}}` (and `{{define}}`/`{{block}}`)
    // actions, with the shell state each branch starts from and the states its branches
    // ended in.
    let mut branches: Vec<Branch> = Vec::new();
    // After a branch that leaves the shell state different from its sibling (or from no
    // branch taken): the branch's action; every value after it is read as unprotected, to
    // the end of the text, or (when only a comment differs) to the end of the line.
    let mut uneven: Option<String> = None;
    let mut uneven_line: Option<String> = None;
    let mut i = 0usize;
    while i < b.len() {
        if b[i] == b'{' && b.get(i + 1) == Some(&b'{') {
            let end = action_end(b, i + 2);
            let top = stack.frames.last();
            let before = kept_before(i);
            let spanned = spans.unsafe_at(i);
            let kind = if let Some(branch) = uneven.as_ref().or(uneven_line.as_ref()) {
                Kind::Uneven(branch.clone())
            } else if escaped || (before.is_some() && escape_at == before) {
                Kind::Escaped
            } else if before.is_some() && dollar_at == before {
                Kind::Dollar
            } else if let Some(k) = spanned {
                k
            } else if stack.in_param() {
                Kind::Param { depth: 0 }
            } else {
                stack.top()
            };
            escaped = false;
            let span = match kind {
                Kind::Single | Kind::Double | Kind::Backtick => top.map(|f| f.span),
                _ => None,
            };
            let heredocs = stack.enclosing_heredocs(matches!(kind, Kind::Heredoc { .. }));
            found.push(Found {
                range: i..end,
                inside_double: top.is_some_and(|f| f.inside_double),
                inside_backtick: top.is_some_and(|f| f.inside_backtick),
                kind,
                span,
                heredocs,
                line_before: kept_line_before(b, &gone, i),
                line_after: kept_line_after(b, &gone, end),
            });
            let body = text
                .get(i + 2..end.saturating_sub(2).max(i + 2))
                .unwrap_or("")
                .trim()
                .trim_start_matches('-')
                .trim_end_matches('-')
                .trim();
            let prints = crate::validate::prints_value(body);
            last_silent_end =
                (!prints && !crate::validate::ends_in_shell_quoting(body)).then_some(end);
            if prints
                && i >= spans.compound_end
                && comment_starts(b, before, escaped_char, None, word_close)
            {
                // A value starting a word: a redirection's target, a word of a `case` head
                // or pattern, or in command position the command's name (the next word is
                // an argument). Glued into a word (`x={{v}}`) or an element of `x=( … )`
                // it changes nothing (h6 fuzzing: `m={{v}} printf -v {{v}}` and
                // `x=({{v}}) read {{v}}` lost the command).
                stack.value_word();
            }
            let keyword = body.split_whitespace().next().unwrap_or("");
            match keyword {
                "if" | "with" | "range" | "define" | "block" => branches.push(Branch {
                    action: text[i..end].to_owned(),
                    conditional: keyword != "define" && keyword != "block",
                    range: keyword == "range",
                    start: (stack.frames.clone(), pending.clone()),
                    ends: Vec::new(),
                }),
                "else" => {
                    if let Some(br) = branches.last_mut()
                        && br.conditional
                    {
                        br.ends.push((stack.state(), pending.clone()));
                        stack.frames = br.start.0.clone();
                        pending = br.start.1.clone();
                    }
                }
                "end" => {
                    if let Some(br) = branches.pop()
                        && br.conditional
                    {
                        let mut ends = br.ends;
                        ends.push((stack.state(), pending.clone()));
                        if br.range || ends.len() == 1 {
                            // No branch taken (an `{{if}}` without `{{else}}`, a `{{range}}`
                            // over nothing), and a range's body may run again.
                            let start = Stack {
                                frames: br.start.0,
                                spans: Vec::new(),
                            };
                            ends.push((start.state(), br.start.1));
                        }
                        match evenness(&ends) {
                            Evenness::Even => {}
                            Evenness::CommentOnly => {
                                uneven_line.get_or_insert(br.action);
                            }
                            Evenness::Uneven => {
                                uneven.get_or_insert(br.action);
                            }
                        }
                    }
                }
                _ => {}
            }
            line_start = false;
            i = end;
            continue;
        }
        if gone[i] {
            // Removed by a trim marker: the shell never sees it.
            i += 1;
            continue;
        }
        // A line equal to the delimiter of a here-document on the stack ends it, and all
        // that is open in its body: bash reads an unquoted body line by line before it reads
        // a `$( … )` or backticks in it, so the outermost here-document whose delimiter the
        // line is ends (dash would go on reading the substitution; the value checks of
        // `shell_quote: true` make no value line such a line).
        let ends_heredoc = if line_start {
            let found = stack
                .frames
                .iter()
                .enumerate()
                .find_map(|(k, f)| match &f.kind {
                    Kind::Heredoc { strip, delim, .. } => {
                        delimiter_line_end(text, &gone, i, *strip, delim).map(|stop| (k, stop))
                    }
                    _ => None,
                });
            if found.is_none()
                && stack.frames.iter().any(|f| match &f.kind {
                    Kind::Heredoc {
                        quoted: false,
                        strip,
                        delim,
                    } => joined_delimiter(b, i, *strip, delim),
                    _ => false,
                })
            {
                // bash joins an unquoted body's `\`-continued lines before it compares them
                // with the delimiter, dash does not (h6: `EO\` and `F` end it for bash).
                spans.dependent_from(i, b.len(), Dependence::JoinedDelimiter);
            }
            found
        } else {
            None
        };
        if let Some((k, stop)) = ends_heredoc {
            if stack.frames.len() > k + 1 {
                // Inside a `$( )` or backticks of the body: dash would read on.
                spans.dependent_from(stop, b.len(), Dependence::ClosingLineInSubstitution);
            }
            while stack.frames.len() > k.max(1) {
                stack.pop(stop);
            }
            // Those announced in what just closed are gone with it.
            let level = stack.level();
            pending.retain(|(_, l)| *l <= level);
            open_pending(&mut stack, &mut pending, stop);
            i = stop;
            line_start = false;
            continue;
        }
        let top = stack.top();
        let in_pattern = stack.in_pattern();
        let c = b[i];
        let n = next_char_len(text, i).max(1);
        let mut consumed = n;
        // A backslash and the character it escapes: a line break there joins two lines.
        let mut joined = false;
        // The byte at `i` is a backslash that escapes the next byte the shell sees.
        let mut backslash = false;
        if c == b'`'
            && let Some(levels) = stack.closing_backticks(i)
        {
            // The first unescaped backtick ends the substitution, whatever is open in it.
            for _ in 0..levels {
                stack.pop(i + 1);
            }
            close_pending(&stack, &mut pending, true, i + 1, &mut spans, b.len());
            word_close = Some(i);
        } else {
            let in_compound = i < spans.compound_end;
            if matches!(top, Kind::Unquoted { .. } | Kind::Backtick) && !in_compound {
                match c {
                    b';' if matches!(b.get(i + 1), Some(b';' | b'&')) => {
                        // `;;`, `;&`, `;;&`: the next `case` pattern follows.
                        stack.start_pattern();
                        stack.set_cmd(true);
                    }
                    // Part of a redirection operator (`2>&1`, `>|f`), not a separator.
                    b'&' | b'|' if i > 0 && matches!(b[i - 1], b'<' | b'>') => {}
                    b';' | b'&' | b'|' | b'(' | b'\n' => stack.set_cmd(true),
                    b' ' | b'\t' | b'\r' | b')' => {}
                    // A line continuation joins the words around it; a comment is no word
                    // (h6 fuzzing: either took the command position from the next line's
                    // command).
                    b'\\' if b.get(i + 1) == Some(&b'\n') => {}
                    b'#' if comment_starts(
                        b,
                        kept_before(i),
                        escaped_char,
                        last_silent_end,
                        word_close,
                    ) => {}
                    _ if comment_starts(
                        b,
                        kept_before(i),
                        escaped_char,
                        last_silent_end,
                        word_close,
                    ) =>
                    {
                        command_word(text, i, &mut stack, &mut spans, &declared);
                    }
                    _ => {}
                }
            }
            match (&top, c) {
                (Kind::Single, b'\'') => stack.pop(i + 1),
                (Kind::Single, _) => {}
                (Kind::AnsiC, b'\'') => stack.pop(i + 1),
                (Kind::AnsiC, b'\\') => backslash = true,
                (Kind::AnsiC, _) => {}
                (Kind::Comment, b'\n') => {
                    stack.pop(i);
                    stack.set_cmd(true);
                }
                // Nothing escapes in a comment, but should the shell not read one here, an
                // action after `\` or `$` would be glued to it: judged as in bare text.
                (Kind::Comment, b'\\') if text[kept_from(i + 1)..].starts_with("{{") => {
                    escaped = true;
                }
                (Kind::Comment, b'$') => dollar_at = Some(i),
                (Kind::Comment, _) => {}
                (Kind::Heredoc { quoted: false, .. }, b'\\')
                | (Kind::Double, b'\\')
                | (Kind::Unquoted { .. }, b'\\')
                | (Kind::Backtick, b'\\')
                | (Kind::Param { .. }, b'\\') => backslash = true,
                (
                    Kind::Heredoc { quoted: false, .. }
                    | Kind::Double
                    | Kind::Unquoted { .. }
                    | Kind::Backtick
                    | Kind::Param { .. },
                    b'$',
                ) if b.get(i + 1) == Some(&b'$') => {
                    // `$$`, the shell's process id: a `$` after it starts nothing.
                    consumed = 2;
                    dollar_at = None;
                }
                // A quoted here-document's body is literal text. An unquoted one's reads
                // `$`, backticks and `\` as inside "…" (below): `$( … )`, backticks and
                // `${ … }` in it are parsed as anywhere else (breaker: a value inside
                // `$(echo {{x}})` in a `<<EOF` body was pasted as here-document text and ran).
                (Kind::Heredoc { quoted: true, .. }, _) => {}
                (Kind::Double, b'"') => stack.pop(i + 1),
                (
                    Kind::Double
                    | Kind::Heredoc { quoted: false, .. }
                    | Kind::Unquoted { .. }
                    | Kind::Backtick
                    | Kind::Param { .. },
                    b'$',
                ) if b.get(i + 1) == Some(&b'{') && b.get(i + 2) != Some(&b'{') => {
                    stack.push(Kind::Param { depth: 0 }, i);
                    consumed = 2;
                }
                (Kind::Unquoted { .. } | Kind::Backtick | Kind::Param { .. }, b'$')
                    if b.get(i + 1) == Some(&b'\'') && !stack.reads_as_double() =>
                {
                    // `$'…'`: an ANSI-C string, where `\'` does not end it.
                    stack.push(Kind::AnsiC, i);
                    consumed = 2;
                }
                (Kind::Param { depth }, b'{') => stack.set_depth(depth + 1),
                (Kind::Param { depth }, b'}') => {
                    if *depth == 0 {
                        stack.pop(i + 1);
                        word_close = Some(i);
                    } else {
                        stack.set_depth(depth - 1);
                    }
                }
                // bash: quotes inside `${ … }` open strings, even inside `"…"`; a single quote
                // does only outside one.
                (Kind::Param { .. }, b'"') => stack.push(Kind::Double, i),
                (Kind::Param { .. }, b'\'') if !stack.reads_as_double() => {
                    stack.push(Kind::Single, i);
                }
                (
                    Kind::Double
                    | Kind::Heredoc { quoted: false, .. }
                    | Kind::Unquoted { .. }
                    | Kind::Backtick
                    | Kind::Param { .. },
                    b'$',
                ) if b.get(i + 1) == Some(&b'(') => {
                    if b.get(i + 2) == Some(&b'(') {
                        push_arith(&mut spans, b, i, i + 3, true);
                    }
                    stack.push(
                        Kind::Unquoted {
                            subst: true,
                            depth: 0,
                        },
                        i,
                    );
                    consumed = 2;
                }
                (
                    Kind::Double
                    | Kind::Heredoc { quoted: false, .. }
                    | Kind::Unquoted { .. }
                    | Kind::Backtick
                    | Kind::Param { .. },
                    b'$',
                ) if b.get(i + 1) == Some(&b'[') => {
                    // `$[ … ]`: bash's old arithmetic expansion.
                    let end = bracket_end(b, i + 2);
                    spans.unsafe_.push((i..end, Kind::Arith));
                    spans.shifts.push((i..end, false));
                }
                (
                    Kind::Double
                    | Kind::Heredoc { quoted: false, .. }
                    | Kind::Unquoted { .. }
                    | Kind::Backtick
                    | Kind::Param { .. },
                    b'$',
                ) => {
                    dollar_at = Some(i);
                }
                // A `case` pattern's optional `(` and its closing `)` (not the end of a
                // `$( … )`): a command follows.
                (Kind::Unquoted { .. } | Kind::Backtick, b'(') if in_pattern => {
                    stack.enter_pattern();
                }
                (Kind::Unquoted { .. } | Kind::Backtick, b')') if in_pattern => {
                    stack.end_pattern();
                }
                (Kind::Unquoted { .. } | Kind::Backtick, b'(') if b.get(i + 1) == Some(&b'(') => {
                    // `(( … ))`: an arithmetic command.
                    push_arith(&mut spans, b, i, i + 2, false);
                    if let Kind::Unquoted { subst: true, depth } = top {
                        stack.set_depth(depth + 1);
                    }
                }
                (Kind::Unquoted { .. } | Kind::Backtick, b'[')
                    if b.get(i + 1) == Some(&b'[')
                        && comment_starts(
                            b,
                            kept_before(i),
                            escaped_char,
                            last_silent_end,
                            word_close,
                        ) =>
                {
                    // `[[ … ]]` with an arithmetic comparison evaluates its operands, and
                    // `-v`/`-R` a variable name's subscript.
                    let end = dbracket_end(b, i + 2);
                    if names_arithmetic(&text[i..end], ARITH_TESTS) {
                        spans.unsafe_.push((i..end, Kind::Arith));
                    }
                }
                (
                    Kind::Double
                    | Kind::Heredoc { quoted: false, .. }
                    | Kind::Unquoted { .. }
                    | Kind::Backtick
                    | Kind::Param { .. },
                    b'`',
                ) => {
                    let close = backtick_end(b, i + 1);
                    let body = &b[i + 1..close.saturating_sub(1).max(i + 1)];
                    // An escaped backtick nests a substitution whose text is unescaped twice;
                    // in "…", `\"` turns into a real quote once the backticks are read:
                    // nothing in them can be quoted reliably then.
                    let nested = escapes(body).any(|e| e == b'`');
                    // In an unquoted here-document bash keeps `\"` in backticks and dash
                    // unescapes it, as in "…".
                    let dq = matches!(top, Kind::Double | Kind::Heredoc { quoted: false, .. })
                        && escapes(body).any(|e| e == b'"');
                    if nested || dq {
                        spans.unsafe_.push((i..close, Kind::Escaped));
                    }
                    stack.push_closing(Kind::Backtick, i, Some(close));
                }
                (Kind::Unquoted { .. } | Kind::Backtick, b'#')
                    if comment_starts(
                        b,
                        kept_before(i),
                        escaped_char,
                        last_silent_end,
                        word_close,
                    ) =>
                {
                    // A comment runs to the end of the line; quotes in it open nothing.
                    stack.push(Kind::Comment, i);
                }
                (Kind::Unquoted { .. } | Kind::Backtick, b'\'') => stack.push(Kind::Single, i),
                (Kind::Unquoted { .. } | Kind::Backtick, b'"') => stack.push(Kind::Double, i),
                (Kind::Unquoted { subst: true, depth }, b'(') => stack.set_depth(depth + 1),
                (Kind::Unquoted { subst: true, depth }, b')') => {
                    if *depth == 0 {
                        stack.pop(i + 1);
                        close_pending(&stack, &mut pending, false, i + 1, &mut spans, b.len());
                        word_close = Some(i);
                    } else {
                        stack.set_depth(depth - 1);
                    }
                }
                (Kind::Unquoted { .. } | Kind::Backtick, b'<')
                    if b.get(i + 1) == Some(&b'<') && b.get(i + 2) == Some(&b'<') =>
                {
                    // A here-string (`<<< word`): the word is an ordinary word.
                    consumed = 3;
                }
                (Kind::Unquoted { .. } | Kind::Backtick, b'<') if b.get(i + 1) == Some(&b'<') => {
                    // Only arithmetic reads `<<` as a shift (breaker: `let x=1<<2` and
                    // `test -v X <<EOF` open a here-document in both shells).
                    let shift = spans
                        .shifts
                        .iter()
                        .find(|(r, _)| r.contains(&i))
                        .map(|(_, posix)| *posix);
                    consumed = 2;
                    match shift {
                        Some(true) => {}
                        // bash's own arithmetic: dash opens a here-document there.
                        Some(false) => {
                            spans.dependent_from(i, b.len(), Dependence::ShiftOrHeredoc);
                        }
                        None => match heredoc_start(text, i + 2, stack.backticks_close()) {
                            // bash ends an empty-delimited one (`<<''`) inside `$( )` at
                            // once, dash at the first empty line (h6 fuzzing).
                            (Delimiter::Doc(Kind::Heredoc { delim, .. }), _)
                                if delim.is_empty() && stack.in_substitution() =>
                            {
                                spans.dependent_from(
                                    i,
                                    b.len(),
                                    Dependence::EmptyDelimiterInSubstitution,
                                );
                            }
                            (Delimiter::Doc(h), len) => {
                                pending.push((h, stack.level()));
                                consumed += len;
                                stack.clear_target();
                            }
                            (Delimiter::Missing, len) => consumed += len,
                            (Delimiter::Unsure(cause), _) => {
                                spans.dependent_from(i, b.len(), cause);
                            }
                        },
                    }
                }
                _ => {}
            }
        }
        if backslash {
            let j = kept_from(i + 1);
            if text[j..].starts_with("{{") {
                // The action's first character is escaped: whatever it prints first
                // (a quote meant to protect the value) loses its meaning.
                escaped = true;
                consumed = j - i;
            } else {
                escape_at = Some(i);
                escaped_char = Some(j);
                joined = b.get(j) == Some(&b'\n');
                consumed = j - i + next_char_len(text, j);
            }
        }
        let stop = (i + consumed).min(text.len());
        // A line ends at a line break the shell sees, not at one a backslash joins.
        line_start = !joined && stop > i && b[stop - 1] == b'\n' && !gone[stop - 1];
        if line_start {
            uneven_line = None;
        }
        if line_start {
            // A line break inside a `$( … )`, backticks or quotes opened after the `<<`
            // opens nothing (fuzzing: `cat <<EOF; echo $(a\nb)` starts the body after `b)`).
            open_pending(&mut stack, &mut pending, stop);
        }
        i = stop;
    }
    let spans = stack.spans;
    let mut out = Vec::with_capacity(found.len() * 2 + 1);
    let mut last = 0usize;
    for f in found {
        if f.range.start > last {
            out.push(ShellPiece::Text(&text[last..f.range.start]));
        }
        last = f.range.end;
        let quoted_span = f
            .span
            .and_then(|s| spans.get(s))
            .map(|(start, end)| *start..end.unwrap_or(text.len()));
        out.push(ShellPiece::Action(ShellAction {
            text: &text[f.range.clone()],
            range: f.range,
            context: f.kind.context(),
            inside_double_quotes: f.inside_double,
            inside_backticks: f.inside_backtick,
            quoted_span,
            heredocs: f.heredocs,
            line_before: f.line_before,
            line_after: f.line_after,
        }));
    }
    if last < text.len() {
        out.push(ShellPiece::Text(&text[last..]));
    }
    out
}

/// Opens at `at` the first here-document of `pending` announced at the stack's current
/// level (see [`Pending`]; fuzzing: `cat <<A; x="$(cat <<B` opens B's body inside the
/// `$( )`, A's after it).
fn open_pending(stack: &mut Stack, pending: &mut Vec<Pending>, at: usize) {
    if let Some(k) = pending.iter().position(|(_, l)| *l == stack.level()) {
        let (doc, _) = pending.remove(k);
        stack.push(doc, at);
    }
}

/// After a `$( … )` or backticks closed (at `at`, the stack back at its level before them):
/// drops the here-documents announced inside them and not opened yet. Both shells end those
/// announced right in backticks at the closing backtick (`` echo `cat <<EOF` ``: an empty
/// body, the next line a command; breaker: it was read as the body); bash reads the body of
/// one in `$( … )` from the lines after it and dash ends it at the `)`, so the rest of the
/// text is read differently: anything but the former (`backticks`) leaves it unprotected.
fn close_pending(
    stack: &Stack,
    pending: &mut Vec<Pending>,
    backticks: bool,
    at: usize,
    spans: &mut Spans,
    len: usize,
) {
    let level = stack.level();
    let quiet = if backticks { level + 1 } else { level };
    if pending.iter().any(|(_, l)| *l > quiet) {
        spans.dependent_from(at, len, Dependence::HeredocInClosedSubstitution);
    }
    pending.retain(|(_, l)| *l <= level);
}

/// The kept text of the line before `at` (see [`ShellAction::line_before`]).
fn kept_line_before(b: &[u8], gone: &[bool], at: usize) -> Option<String> {
    let mut out = Vec::new();
    let mut j = at.min(b.len());
    while j > 0 {
        j -= 1;
        if gone[j] {
            continue;
        }
        match b[j] {
            b'\n' => {
                if (0..j)
                    .rev()
                    .find(|&k| !gone[k])
                    .is_some_and(|k| b[k] == b'\\')
                {
                    return None;
                }
                break;
            }
            b'}' if j > 0 && b[j - 1] == b'}' => return None,
            c => out.push(c),
        }
    }
    out.reverse();
    String::from_utf8(out).ok()
}

/// The kept text of the line after `from` (see [`ShellAction::line_after`]).
fn kept_line_after(b: &[u8], gone: &[bool], from: usize) -> Option<String> {
    let mut out = Vec::new();
    let mut j = from;
    while j < b.len() {
        if !gone[j] {
            match b[j] {
                b'\n' => break,
                b'{' if b.get(j + 1) == Some(&b'{') => return None,
                c => out.push(c),
            }
        }
        j += 1;
    }
    if out.last() == Some(&b'\\') {
        return None;
    }
    String::from_utf8(out).ok()
}

/// Where the line starting at `at` ends when it is the closing line of a here-document with
/// delimiter `delim` (leading tabs skipped for `<<-`): just past the delimiter; `None` when
/// the line is something else (bytes a trim marker removes count as absent).
fn delimiter_line_end(
    text: &str,
    gone: &[bool],
    at: usize,
    strip: bool,
    delim: &str,
) -> Option<usize> {
    let b = text.as_bytes();
    let mut j = at;
    if strip {
        while b.get(j) == Some(&b'\t') {
            j += 1;
        }
    }
    let after = text.get(j..)?.strip_prefix(delim)?;
    let stop = j + delim.len();
    let closes = (after.is_empty()
        || (after.starts_with('\n') && !gone.get(stop).copied().unwrap_or(false)))
        && !gone.get(j..stop).is_some_and(|g| g.iter().any(|g| *g));
    closes.then_some(stop)
}

/// Whether the line starting at `at` ends in a line continuation (an odd number of
/// backslashes) and, joined with the lines it continues into, is the delimiter `delim`
/// (leading tabs dropped for `<<-`, from each joined line too).
fn joined_delimiter(b: &[u8], at: usize, strip: bool, delim: &str) -> bool {
    let first_end = b[at.min(b.len())..]
        .iter()
        .position(|c| *c == b'\n')
        .map_or(b.len(), |p| at + p);
    if first_end == b.len() || first_end == at || b[first_end - 1] != b'\\' {
        return false;
    }
    let mut joined: Vec<u8> = Vec::new();
    let mut j = at;
    let mut continued = false;
    loop {
        let end = b[j.min(b.len())..]
            .iter()
            .position(|c| *c == b'\n')
            .map_or(b.len(), |p| j + p);
        let mut line = b.get(j..end).unwrap_or_default();
        if strip {
            let tabs = line.iter().take_while(|c| **c == b'\t').count();
            line = &line[tabs..];
        }
        let slashes = line.iter().rev().take_while(|c| **c == b'\\').count();
        if slashes % 2 == 1 && end < b.len() {
            joined.extend_from_slice(&line[..line.len() - 1]);
            continued = true;
            j = end + 1;
            if joined.len() > delim.len() {
                return false;
            }
        } else {
            joined.extend_from_slice(line);
            return continued && joined == delim.as_bytes();
        }
    }
}

/// Whether a `#` starts a comment, given the last byte before it the shell sees (`prev`):
/// at the start of the text, after a blank or an operator character, or right after an
/// action that prints nothing (`{{end}}#`: the shell may get a blank before it). Not after
/// a character a backslash escapes (`a\ #b` is one word), unless that was a line break
/// (`\` and a line break join the lines: what came before decides), nor after the `)`,
/// `}` or backtick closing a substitution (`word_close`: `$(x)#y` is one word).
fn comment_starts(
    b: &[u8],
    prev: Option<usize>,
    escaped_char: Option<usize>,
    last_silent_end: Option<usize>,
    word_close: Option<usize>,
) -> bool {
    let Some(p) = prev else {
        return true;
    };
    if word_close == Some(p) {
        return false;
    }
    if last_silent_end == Some(p + 1) {
        return true;
    }
    if escaped_char == Some(p) {
        // A backslash and a line break join the lines: the byte before the backslash
        // decides.
        return b[p] == b'\n' && (p < 2 || breaks_word(b[p - 2]));
    }
    breaks_word(b[p])
}

/// A blank, an operator character or a backtick: the next character starts a word.
fn breaks_word(c: u8) -> bool {
    matches!(
        c,
        b' ' | b'\t' | b'\n' | b';' | b'&' | b'|' | b'(' | b')' | b'<' | b'>' | b'`'
    )
}

/// The characters `body` escapes with a backslash (`\\` counted once).
fn escapes(body: &[u8]) -> impl Iterator<Item = u8> + '_ {
    let mut j = 0usize;
    std::iter::from_fn(move || {
        while j < body.len() {
            if body[j] == b'\\' {
                let e = body.get(j + 1).copied();
                j += 2;
                if e.is_some() {
                    return e;
                }
            } else {
                j += 1;
            }
        }
        None
    })
}

impl ShellAction<'_> {
    /// The action's pipeline: its text without `{{`/`}}`, the trim markers (`{{-`, `-}}`)
    /// and the spaces around it.
    pub fn body(&self) -> &str {
        self.text
            .trim_start_matches("{{")
            .trim_end_matches("}}")
            .trim()
            .trim_start_matches('-')
            .trim_end_matches('-')
            .trim()
    }
}

/// The actions of shell command text with their contexts ([`shell_pieces`] without the
/// literal text).
pub fn shell_actions(text: &str) -> Vec<ShellAction<'_>> {
    shell_pieces(text)
        .into_iter()
        .filter_map(|p| match p {
            ShellPiece::Action(a) => Some(a),
            ShellPiece::Text(_) => None,
        })
        .collect()
}

/// Records the arithmetic expansion or command starting at `at` whose body starts at `from`
/// (up to [`arith_end`]) as unprotected; when its body holds a backtick or a `#` starting a
/// word, the rest of the text too, as read differently by bash and dash: bash looks for the
/// closing `))` through them (fuzzing: it ended `$((1+`…`))`…`` at a `))` inside the
/// backticks), dash reads a substitution and a comment there.
///
/// `posix`: an expansion `$(( … ))`, where both shells read `<<` as a shift (dash reads an
/// arithmetic command `(( … ))` as two subshells, whose `<<` opens a here-document).
fn push_arith(spans: &mut Spans, b: &[u8], at: usize, from: usize, posix: bool) {
    let end = arith_end(b, from);
    let body = b.get(from..end).unwrap_or_default();
    let ambiguous = body
        .iter()
        .enumerate()
        .any(|(k, c)| *c == b'`' || (*c == b'#' && (k == 0 || breaks_word(body[k - 1]))));
    spans.unsafe_.push((at..end, Kind::Arith));
    spans.shifts.push((at..end, posix));
    if ambiguous {
        spans.dependent_from(end, b.len(), Dependence::ArithmeticBackticks);
    }
}

/// Index just past the `))` closing an arithmetic expansion whose body starts at `from`
/// (parentheses in it counted; quoted strings, escaped characters and template actions
/// skipped, as the shells skip them: fuzzing found dash reading `$((1+\))…))` on past the
/// `\)`, where the walker had ended it); the text's length when unclosed.
fn arith_end(b: &[u8], from: usize) -> usize {
    let mut depth = 0u32;
    let mut j = from;
    while j < b.len() {
        match b[j] {
            b'\\' => j += 1,
            b'{' if b.get(j + 1) == Some(&b'{') => {
                j = action_end(b, j + 2);
                continue;
            }
            b'\'' | b'"' => j = closing_quote(b, j),
            b'(' => depth += 1,
            b')' if depth > 0 => depth -= 1,
            b')' if b.get(j + 1) == Some(&b')') => return j + 2,
            _ => {}
        }
        j += 1;
    }
    b.len()
}

/// Index just past the backtick closing the one whose body starts at `from` (escaped
/// characters and template actions skipped); the text's length when unclosed.
fn backtick_end(b: &[u8], from: usize) -> usize {
    let mut j = from;
    while j < b.len() {
        match b[j] {
            b'\\' => j += 2,
            b'`' => return (j + 1).min(b.len()),
            b'{' if b.get(j + 1) == Some(&b'{') => j = action_end(b, j + 2),
            _ => j += 1,
        }
    }
    b.len()
}

/// The operators of a `[[ … ]]` test that make bash evaluate an operand as arithmetic
/// (`-eq` …) or as a variable name whose subscript it evaluates (`-v`, `-R`).
const ARITH_TESTS: &[&str] = &["-eq", "-ne", "-lt", "-le", "-gt", "-ge", "-v", "-R"];

/// Whether `text` has one of `ops` as a word of its own.
fn names_arithmetic(text: &str, ops: &[&str]) -> bool {
    text.split_whitespace().any(|w| ops.contains(&w))
}

/// Reserved words after which the next word is still in command position.
const KEEPS_COMMAND: &[&str] = &[
    "if", "then", "else", "elif", "do", "while", "until", "!", "{", "time", "coproc",
];

/// Spans of the text the walk finds ahead of where it reads.
#[derive(Default)]
struct Spans {
    /// Where no quoting protects a value (arithmetic, variable names; backticks holding
    /// `` \` `` or, in `"…"`, `\"`; text read differently by the shells), with what to call
    /// the place.
    unsafe_: Vec<(Range<usize>, Kind)>,
    /// Arithmetic where bash reads `<<` as a shift, not a here-document: `true` for
    /// `$(( … ))`, which dash reads so too; `false` for bash's own (`(( … ))`, `$[ … ]`, an
    /// array subscript being assigned, `a=( … )`), where dash opens a here-document.
    shifts: Vec<(Range<usize>, bool)>,
    /// Where the `( … )` of the last compound assignment read (`a=(x y)`) ends: its words
    /// are no commands.
    compound_end: usize,
    /// The names a `declare -i` read so far makes integers (those [`Declared`] missed, its
    /// command spelled with quotes: `de\clare -i n`).
    integers: Vec<String>,
}

impl Spans {
    /// The kind of the first unsafe span holding `at`.
    fn unsafe_at(&self, at: usize) -> Option<Kind> {
        self.unsafe_
            .iter()
            .find(|(r, _)| r.contains(&at))
            .map(|(_, k)| k.clone())
    }

    /// Everything from `at` on is read differently by the shells (or not surely by awf).
    fn dependent_from(&mut self, at: usize, len: usize, cause: Dependence) {
        self.unsafe_.push((at..len, Kind::Dependent(cause)));
    }
}

/// The `declare`-like builtins: they take variable names (or assignments) as arguments and
/// bash evaluates an array subscript in a name (`declare 'a[$(cmd)]=1'` runs `cmd`; `export`
/// and `readonly` are counted for safety), `-i` makes integers and `-n` name references.
const DECLARES: &[&str] = &["declare", "typeset", "local", "export", "readonly"];

/// What the `declare`-like commands of a text make of its variables, read loosely (by words,
/// quotes ignored: a name too many only makes a value count as unprotected).
#[derive(Default)]
struct Declared<'a> {
    /// The names given the integer attribute (`declare -i n`, `local -ai n=…`, also in
    /// `typeset`, `export`, `readonly`): an assignment to one evaluates its value as
    /// arithmetic (`n='a[$(cmd)]'` runs `cmd`), wherever it stands.
    integers: Vec<&'a str>,
    /// The names made arrays (`a=(…)`, `a[…]=`, `declare -a a`, `read -a a`, `mapfile a`):
    /// `declare a='(…)'` re-reads its value as a compound assignment (`declare a='($(cmd))'`
    /// runs `cmd`).
    arrays: Vec<&'a str>,
    /// The text sources another file (`.`, `source`), which may make arrays too.
    sources: bool,
}

/// The names of `word` as a variable (`n` of `n=1`, `n+=1`, `n[0]=1`, `n`).
fn var_name(word: &str) -> &str {
    word.split(['=', '[', '+']).next().unwrap_or("")
}

/// What `text`'s `declare`-like commands make of its variables (see [`Declared`]); nothing
/// when it has none.
fn declared_names(text: &str) -> Declared<'_> {
    let mut d = Declared::default();
    if !DECLARES.iter().any(|w| text.contains(w)) {
        return d;
    }
    // `a=(…)`, `a+=(…)`: the name before.
    let b = text.as_bytes();
    for (at, _) in text.match_indices("=(") {
        let end = if at > 0 && b[at - 1] == b'+' {
            at - 1
        } else {
            at
        };
        let start = (0..end)
            .rev()
            .find(|&k| !(b[k].is_ascii_alphanumeric() || b[k] == b'_'))
            .map_or(0, |k| k + 1);
        if let Some(name) = text.get(start..end).filter(|n| !n.is_empty()) {
            d.arrays.push(name);
        }
    }
    // A word that makes the command worth reading (most commands have none).
    let telling = |w: &str| {
        matches!(
            unquoted(w).as_ref(),
            "declare"
                | "typeset"
                | "local"
                | "export"
                | "readonly"
                | "read"
                | "mapfile"
                | "readarray"
                | "source"
                | "."
        ) || w.find(']').is_some_and(|k| w[k + 1..].starts_with('='))
    };
    for command in text.split([';', '\n', '&', '|', '(', ')', '`', '{', '}']) {
        if !command.split_whitespace().any(telling) {
            continue;
        }
        let words: Vec<&str> = command.split_whitespace().collect();
        for (k, raw) in words.iter().enumerate() {
            let rest = &words[k + 1..];
            let names = || {
                rest.iter()
                    .filter(|w| !w.starts_with(['-', '+']))
                    .map(|w| var_name(w))
                    .filter(|n| !n.is_empty())
            };
            let option = |letters: &[char]| {
                rest.iter()
                    .any(|w| w.starts_with('-') && !w.starts_with("--") && w.contains(letters))
            };
            let word = unquoted(raw);
            match word.as_ref() {
                w if DECLARES.contains(&w) => {
                    if option(&['i']) {
                        d.integers.extend(names());
                    }
                    if option(&['a', 'A']) {
                        d.arrays.extend(names());
                    }
                }
                "read" if option(&['a']) => d.arrays.extend(names()),
                "mapfile" | "readarray" => d.arrays.extend(names()),
                "source" | "." if k == 0 => d.sources = true,
                w if w.contains('[') && w.contains("]=") => d.arrays.push(var_name(raw)),
                _ => {}
            }
        }
    }
    d
}

/// Reads the word at `i`, which starts a word in the top frame of `stack`. In a `case`
/// head it is the subject or `in`; in a `case` pattern no word is a reserved word but a
/// first `esac`. In command position `case` and `esac` open and close a `case` statement
/// (whose patterns end with `)`), and commands whose words bash evaluates as arithmetic or
/// variable names (`let`, `declare`, `local`, `read`, `unset`, `printf -v`, `test -v`, an
/// array element's assignment `a[…]=`, a compound assignment's `[…]=`, an assignment to an
/// integer variable of `declared`, a value `declare` re-reads as a compound assignment) add
/// their span to `spans`. Updates the frame's command position.
fn command_word(
    text: &str,
    i: usize,
    stack: &mut Stack,
    spans: &mut Spans,
    declared: &Declared<'_>,
) {
    let integer = |spans: &Spans, name: &str| {
        declared.integers.contains(&name) || spans.integers.iter().any(|n| n == name)
    };
    let b = text.as_bytes();
    let mut j = i;
    while j < b.len() && (b[j].is_ascii_alphanumeric() || b[j] == b'_') {
        j += 1;
    }
    if j == i && matches!(b[i], b'!' | b'{' | b'[') {
        j = i + 1;
    }
    let word = &text[i..j];
    let ends = j >= b.len() || breaks_word(b[j]) || b[j] == b'\r';
    if matches!(b[i], b'<' | b'>') {
        // A redirection (its target is the next word): the command may still follow.
        stack.set_target();
        return;
    }
    if j > i && b[i..j].iter().all(u8::is_ascii_digit) && matches!(b.get(j), Some(b'<' | b'>')) {
        // The descriptor of a redirection (`2>/dev/null`): its target follows.
        stack.set_target();
        return;
    }
    if let Some(f) = stack.frames.last_mut() {
        if f.target {
            f.target = false;
            return;
        }
        match f.case_head {
            CaseHead::Subject => {
                f.case_head = CaseHead::In;
                return;
            }
            CaseHead::In => {
                // `in` (anything else is a syntax error): the patterns follow.
                f.case_head = CaseHead::None;
                f.pattern = Pattern::Next;
                return;
            }
            CaseHead::None => {}
        }
        match f.pattern {
            Pattern::Next if word == "esac" && ends => {
                f.cases.pop();
                f.pattern = Pattern::Off;
                f.cmd = false;
                return;
            }
            Pattern::Next | Pattern::In => {
                f.pattern = Pattern::In;
                return;
            }
            Pattern::Off => {}
        }
    }
    let name = j > i && (b[i].is_ascii_alphabetic() || b[i] == b'_');
    if name && b.get(j) == Some(&b'[') {
        // `a[…]=value`: bash evaluates the subscript as arithmetic (an indexed array).
        let close = bracket_end(b, j + 1);
        let assigns = b.get(close) == Some(&b'=')
            || (b.get(close) == Some(&b'+') && b.get(close + 1) == Some(&b'='));
        if assigns {
            spans.unsafe_.push((j..close, Kind::Arith));
            spans.shifts.push((j..close, false));
            if integer(spans, word) {
                spans.unsafe_.push((close..word_end(b, close), Kind::Arith));
            }
            return;
        }
    }
    if j > i && (b.get(j) == Some(&b'=') || text[j..].starts_with("+=")) {
        // An assignment before the command: the next word is still the command.
        let value = if b[j] == b'=' { j + 1 } else { j + 2 };
        if b.get(value) == Some(&b'(') {
            compound_assignment(b, value, spans);
        } else if name && integer(spans, word) {
            // An integer variable evaluates what it is assigned.
            spans.unsafe_.push((value..word_end(b, value), Kind::Arith));
        }
        return;
    }
    if !stack.cmd() {
        return;
    }
    // A reserved word is one unquoted (`'case'` is a command); a builtin runs whatever
    // quotes its name has (`\read`, `'printf'`, `pri\<newline>ntf`).
    let soft = stack.frames.last().is_some_and(|f| f.soft);
    let reserved = if ends && !soft { word } else { "" };
    let full = word_end(b, i).max(j);
    // A name made by an expansion (`$(…)`, `$x`, backticks) may be empty: the rest of the
    // word may be the command (h6 fuzzing: `` `x`declare {{v}}=1 `` ran `declare`), or, when
    // nothing is left, the next word (`$(x) command read {{v}}` ran `read`).
    let expands = text[i..full].contains(['$', '`']);
    let command = if expands {
        std::borrow::Cow::Owned(unquoted(&without_expansions(&b[i..full])).into_owned())
    } else {
        unquoted(&text[i..full])
    };
    // `time -p read …`, `command -p read …`: an option of those keeps the position.
    let parsed = KEEPS_COMMAND.contains(&reserved);
    let run = matches!(command.as_ref(), "command" | "builtin" | "-p" | "--") || expands;
    stack.set_cmd(parsed || run);
    if run
        && !parsed
        && let Some(f) = stack.frames.last_mut()
    {
        f.soft = true;
    }
    let depth = match stack.top() {
        Kind::Unquoted { depth, .. } => depth,
        _ => 0,
    };
    match reserved {
        "case" => {
            if let Some(f) = stack.frames.last_mut() {
                f.cases.push(depth);
                f.case_head = CaseHead::Subject;
            }
            return;
        }
        "esac" => {
            if let Some(f) = stack.frames.last_mut() {
                f.cases.pop();
            }
            return;
        }
        _ => {}
    }
    let j = full;
    let closing = stack.backticks_close();
    let whole = || i..command_end(b, j, closing);
    match command.as_ref() {
        "let" => spans.unsafe_.push((whole(), Kind::Arith)),
        w if DECLARES.contains(&w) => {
            let span = whole();
            let words = simple_words(b, j, span.end);
            // `-i` evaluates every value, `-n` makes a name of it.
            let nameref = w != "export" && w != "readonly";
            let whole_span = words.iter().any(|r| {
                let w = &text[r.clone()];
                w.starts_with('-')
                    && !w.starts_with("--")
                    && (w.contains('i') || (nameref && w.contains('n')))
            });
            if whole_span {
                spans.unsafe_.push((span, Kind::Arith));
                spans.integers.extend(
                    words
                        .iter()
                        .map(|r| &text[r.clone()])
                        .filter(|w| !w.starts_with(['-', '+']))
                        .map(|w| var_name(w).to_owned()),
                );
                return;
            }
            // `declare -a a='(…)'` (or `declare a=…` of an array `a`) re-reads a value
            // starting with `(` as a compound assignment: a value that starts one there is
            // unprotected (`export` and `readonly` do not).
            let arrays = nameref
                && (declared.sources
                    || words.iter().any(|r| {
                        let w = &text[r.clone()];
                        w.starts_with('-') && !w.starts_with("--") && w.contains(['a', 'A'])
                    }));
            for r in words
                .into_iter()
                .filter(|r| !text[r.clone()].starts_with(['-', '+']))
            {
                // The name of each assignment (or each name): its subscript is evaluated.
                let eq = assignment_eq(b, r.start, r.end).unwrap_or(r.end);
                spans.unsafe_.push((r.start..eq, Kind::Arith));
                let name = var_name(&text[r.start..eq]);
                let array = nameref && (arrays || declared.arrays.contains(&name));
                if array && eq < r.end && rereads_as_compound(b, eq + 1, r.end) {
                    spans.unsafe_.push((eq + 1..r.end, Kind::Arith));
                }
            }
        }
        "read" | "unset" | "mapfile" | "readarray" => {
            let span = whole();
            // The options whose argument is a string or a number, not a name.
            let arg_options: &[char] = match command.as_ref() {
                "read" => &['d', 'i', 'n', 'N', 'p', 't', 'u'],
                "unset" => &[],
                _ => &['d', 'n', 'O', 's', 'u', 'C', 'c'],
            };
            let mut takes_arg = false;
            for r in simple_words(b, j, span.end) {
                let w = &text[r.clone()];
                if takes_arg {
                    takes_arg = false;
                    continue;
                }
                if w.len() > 1 && w.starts_with('-') && !w.contains("{{") {
                    takes_arg = w.ends_with(arg_options);
                    continue;
                }
                spans.unsafe_.push((r, Kind::Arith));
            }
        }
        "printf" => {
            let span = whole();
            let words = simple_words(b, j, span.end);
            if let Some(first) = words.first() {
                let w = &text[first.clone()];
                if w == "-v" {
                    if let Some(next) = words.get(1) {
                        spans.unsafe_.push((next.clone(), Kind::Arith));
                    }
                } else if w.starts_with("-v") {
                    spans.unsafe_.push((first.clone(), Kind::Arith));
                }
            }
        }
        "test" | "[" => {
            let span = whole();
            if names_arithmetic(&text[span.clone()], &["-v", "-R"]) {
                spans.unsafe_.push((span, Kind::Arith));
            }
        }
        _ => {}
    }
}

/// Whether the value of a `declare` assignment from `from` to `end` may be re-read as a
/// compound assignment: after its quotes it starts with `(` or a template action
/// (`'({{x}})'`, `"{{x}}"`, `{{x}}`); an unquoted `(…)` that ends the word is parsed as one.
fn rereads_as_compound(b: &[u8], from: usize, end: usize) -> bool {
    let rest = b.get(from..).unwrap_or_default();
    if rest.first() == Some(&b'(') {
        // Parsed as one when its `)` ends the word; glued to more text (`a=(…)x`, a
        // backtick: h6 fuzzing), the word is a string `declare` re-reads.
        return paren_end(b, from + 1) < end;
    }
    let skip = rest
        .iter()
        .take_while(|c| matches!(c, b'\'' | b'"'))
        .count();
    let rest = &rest[skip..];
    rest.starts_with(b"(") || rest.starts_with(b"{{")
}

/// The text of `word` with its expansions (`$( … )`, `${ … }`, `$name`, backticks, a
/// template action) left out: what is left of it when they are empty.
fn without_expansions(word: &[u8]) -> String {
    let mut out = Vec::with_capacity(word.len());
    let mut j = 0;
    while j < word.len() {
        match word[j] {
            b'\\' => {
                out.extend_from_slice(word.get(j..j + 2).unwrap_or(&word[j..]));
                j += 2;
            }
            b'`' => j = backtick_end(word, j + 1),
            b'{' if word.get(j + 1) == Some(&b'{') => j = action_end(word, j + 2),
            b'$' if word.get(j + 1) == Some(&b'(') => j = paren_end(word, j + 2),
            b'$' if word.get(j + 1) == Some(&b'{') => j = brace_end(word, j + 2),
            b'$' => {
                j += 1;
                while j < word.len() && (word[j].is_ascii_alphanumeric() || word[j] == b'_') {
                    j += 1;
                }
            }
            c => {
                out.push(c);
                j += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `word` as the shell reads a command name: line continuations (`\` and a line break)
/// dropped, quotes removed, `\x` read as `x`.
fn unquoted(word: &str) -> std::borrow::Cow<'_, str> {
    if !word.contains(['\\', '\'', '"']) {
        return std::borrow::Cow::Borrowed(word);
    }
    let mut out = String::with_capacity(word.len());
    let mut chars = word.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                if let Some(n) = chars.next()
                    && n != '\n'
                {
                    out.push(n);
                }
            }
            '\'' | '"' => {}
            c => out.push(c),
        }
    }
    std::borrow::Cow::Owned(out)
}

/// A compound assignment `a=( … )` whose `(` is at `open`: bash reads `<<` in it as a
/// shift (dash rejects it), and evaluates a `[…]` starting a word there as arithmetic
/// (`a=(['$(cmd)']=1)` runs `cmd`, quoted or not).
fn compound_assignment(b: &[u8], open: usize, spans: &mut Spans) {
    let close = paren_end(b, open + 1);
    spans.shifts.push((open..close, false));
    spans.compound_end = spans.compound_end.max(close);
    let mut k = open + 1;
    while k < close {
        match b[k] {
            b'\\' => k += 1,
            b'{' if b.get(k + 1) == Some(&b'{') => {
                k = action_end(b, k + 2);
                continue;
            }
            b'\'' | b'"' => k = closing_quote(b, k),
            b'[' if breaks_word(b[k - 1]) => {
                let end = bracket_end(b, k + 1);
                spans.unsafe_.push((k..end, Kind::Arith));
                k = end;
                continue;
            }
            _ => {}
        }
        k += 1;
    }
}

/// Index just past the `)` closing a `(` whose body starts at `from` (nested parentheses,
/// quotes, escapes and template actions skipped); the text's length when unclosed.
fn paren_end(b: &[u8], from: usize) -> usize {
    nested_end(b, from, b'(', b')')
}

/// Index just past the `close` that ends an `open` whose body starts at `from` (nested
/// pairs, quotes, escapes and template actions skipped); the text's length when unclosed.
fn nested_end(b: &[u8], from: usize, open: u8, close: u8) -> usize {
    let mut j = from;
    let mut depth = 0u32;
    while j < b.len() {
        match b[j] {
            b'\\' => j += 1,
            b'{' if b.get(j + 1) == Some(&b'{') => {
                j = action_end(b, j + 2);
                continue;
            }
            b'\'' | b'"' => j = closing_quote(b, j),
            c if c == open => depth += 1,
            c if c == close && depth > 0 => depth -= 1,
            c if c == close => return j + 1,
            _ => {}
        }
        j += 1;
    }
    b.len()
}

/// Index of the end of the word starting at `from`: its first unquoted blank or operator
/// character outside `$( … )`, `${ … }`, backticks and a compound assignment's `( … )` (quotes, escapes and template actions
/// skipped); the text's length when none.
fn word_end(b: &[u8], from: usize) -> usize {
    let mut j = from;
    while j < b.len() {
        match b[j] {
            b'\\' => j += 2,
            b'{' if b.get(j + 1) == Some(&b'{') => j = action_end(b, j + 2),
            b'\'' | b'"' => j = closing_quote(b, j) + 1,
            b'`' => j = backtick_end(b, j + 1),
            b'$' if b.get(j + 1) == Some(&b'(') => j = paren_end(b, j + 2),
            b'$' if b.get(j + 1) == Some(&b'{') => j = brace_end(b, j + 2),
            // A compound assignment's `( … )` (`a=(x y)`) is part of its word.
            b'(' if j > from && b[j - 1] == b'=' => j = paren_end(b, j + 1),
            c if breaks_word(c) => return j,
            _ => j += 1,
        }
    }
    b.len()
}

/// Index just past the `}` closing a `${` whose body starts at `from` (nested braces,
/// quotes, escapes and template actions skipped); the text's length when unclosed.
fn brace_end(b: &[u8], from: usize) -> usize {
    let mut j = from;
    let mut depth = 0u32;
    while j < b.len() {
        match b[j] {
            b'\\' => j += 1,
            b'{' if b.get(j + 1) == Some(&b'{') => {
                j = action_end(b, j + 2);
                continue;
            }
            b'\'' | b'"' => j = closing_quote(b, j),
            b'{' => depth += 1,
            b'}' if depth > 0 => depth -= 1,
            b'}' => return j + 1,
            _ => {}
        }
        j += 1;
    }
    b.len()
}

/// The words of a simple command's arguments from `from` to `end`, redirections (`>f`,
/// `2>&1`, `<<EOF`, `<<< word`) and their targets left out.
fn simple_words(b: &[u8], from: usize, end: usize) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    let mut j = from;
    let mut target = false;
    while j < end {
        match b[j] {
            b' ' | b'\t' | b'\r' => j += 1,
            b'\\' if b.get(j + 1) == Some(&b'\n') => j += 2,
            b'<' | b'>' => {
                while j < end && matches!(b[j], b'<' | b'>' | b'&' | b'|' | b'-') {
                    j += 1;
                }
                target = true;
            }
            c => {
                let digits = b[j..end].iter().take_while(|c| c.is_ascii_digit()).count();
                if c.is_ascii_digit() && matches!(b.get(j + digits), Some(b'<' | b'>')) {
                    j += digits;
                    continue;
                }
                let stop = word_end(b, j).min(end).max(j + 1);
                if !target {
                    out.push(j..stop);
                }
                target = false;
                j = stop;
            }
        }
    }
    out
}

/// Index of the `=` of the assignment word from `from` to `end` (`name=…`, `name+=…`,
/// `name[…]=…`): the first unquoted one; `None` when the word has none.
fn assignment_eq(b: &[u8], from: usize, end: usize) -> Option<usize> {
    let mut j = from;
    while j < end {
        match b[j] {
            b'\\' => j += 1,
            b'{' if b.get(j + 1) == Some(&b'{') => {
                j = action_end(b, j + 2);
                continue;
            }
            b'\'' | b'"' => j = closing_quote(b, j),
            b'[' => {
                j = bracket_end(b, j + 1);
                continue;
            }
            b'=' => return Some(j),
            _ => {}
        }
        j += 1;
    }
    None
}

/// Index of the quote closing the `'…'` or `"…"` that opens at `open` (`\` escapes inside
/// `"…"`); the text's length when it is unclosed.
fn closing_quote(b: &[u8], open: usize) -> usize {
    let q = b[open];
    let mut j = open + 1;
    while j < b.len() && b[j] != q {
        if b[j] == b'\\' && q == b'"' {
            j += 1;
        }
        j += 1;
    }
    j.min(b.len())
}

/// Index of the end of the simple command whose words go on from `from`: its first
/// unquoted `;`, `&`, `|`, line break, `)` or the backtick `closing` the backticks around
/// it (quotes, escapes, `$( … )`, other backticks and template actions skipped); the text's
/// length when none.
fn command_end(b: &[u8], from: usize, closing: Option<usize>) -> usize {
    let mut j = from;
    let mut depth = 0u32;
    while j < b.len() {
        match b[j] {
            b'\\' => j += 1,
            b'{' if b.get(j + 1) == Some(&b'{') => {
                j = action_end(b, j + 2);
                continue;
            }
            b'\'' | b'"' => j = closing_quote(b, j),
            b'(' => depth += 1,
            b')' if depth > 0 => depth -= 1,
            b'`' if Some(j) == closing => return j,
            b'`' if depth == 0 => {
                j = backtick_end(b, j + 1);
                continue;
            }
            b';' | b'&' | b'|' | b'\n' | b')' if depth == 0 => return j,
            _ => {}
        }
        j += 1;
    }
    b.len()
}

/// Index just past the `]` closing a `[` whose body starts at `from` (nested brackets,
/// quotes, escapes and template actions skipped); the text's length when unclosed.
fn bracket_end(b: &[u8], from: usize) -> usize {
    nested_end(b, from, b'[', b']')
}

/// Index just past the `]]` closing a `[[` test whose body starts at `from`: the first
/// `]]` standing as a word of its own outside quotes (quotes, escapes and template actions
/// skipped); the text's length when unclosed.
fn dbracket_end(b: &[u8], from: usize) -> usize {
    let mut j = from;
    while j < b.len() {
        match b[j] {
            b'\\' => j += 1,
            b'{' if b.get(j + 1) == Some(&b'{') => {
                j = action_end(b, j + 2);
                continue;
            }
            b'\'' | b'"' => j = closing_quote(b, j),
            b']' if b.get(j + 1) == Some(&b']')
                && matches!(b[j - 1], b' ' | b'\t')
                && b.get(j + 2).is_none_or(|c| breaks_word(*c)) =>
            {
                return j + 2;
            }
            _ => {}
        }
        j += 1;
    }
    b.len()
}

fn next_char_len(text: &str, at: usize) -> usize {
    text.get(at..)
        .and_then(|s| s.chars().next())
        .map_or(0, char::len_utf8)
}

/// Index just past the `}}` closing the action whose body starts at `from` (quoted strings
/// and raw strings of the template language are skipped); the text's length when unclosed.
fn action_end(b: &[u8], from: usize) -> usize {
    let mut j = from;
    while j < b.len() {
        match b[j] {
            b'}' if b.get(j + 1) == Some(&b'}') => return j + 2,
            q @ (b'"' | b'\'' | b'`') => {
                j += 1;
                while j < b.len() && b[j] != q {
                    if b[j] == b'\\' && q != b'`' {
                        j += 1;
                    }
                    j += 1;
                }
                j += 1;
            }
            _ => j += 1,
        }
    }
    b.len()
}

/// What follows a `<<` (see [`heredoc_start`]).
enum Delimiter {
    /// A here-document (its kind, delimiter quote-removed as the shells do).
    Doc(Kind),
    /// No word follows (a syntax error in the shell).
    Missing,
    /// A delimiter the shells read differently (`$'…'` and `$"…"`: bash removes the `$`,
    /// dash keeps it) or that awf does not read for sure (one holding `$( … )`, `${ … }`,
    /// backticks, a template action, a `\` joining lines, an unclosed quote).
    Unsure(Dependence),
}

/// Reads the delimiter after `<<` at `from`: the here-document it opens and how many
/// bytes the `-`, blanks and word take. The word's quotes are removed as the shell removes
/// them (breaker: `<<E\\OF` ends at a line `E\OF`, `<<"E\"OF"` at `E"OF`): `\x` is `x`,
/// `'…'` literal, in `"…"` a `\` escapes only `$`, `` ` ``, `"` and `\`; any quoting makes
/// the body literal. An empty quoted word (`<<''`) opens one whose body ends at the first
/// empty line. `closing`: where the backticks around the `<<` close (the word ends there).
fn heredoc_start(text: &str, from: usize, closing: Option<usize>) -> (Delimiter, usize) {
    let b = text.as_bytes();
    let mut j = from;
    let strip = b.get(j) == Some(&b'-');
    if strip {
        j += 1;
    }
    while matches!(b.get(j), Some(b' ' | b'\t')) {
        j += 1;
    }
    let mut delim = String::new();
    let mut quoted = false;
    let unsure = (Delimiter::Unsure(Dependence::UnreadableDelimiter), 0);
    // Appends the character at `at` (one of a multi-byte one's bytes never splits it).
    let take = |delim: &mut String, at: usize| {
        let n = next_char_len(text, at).max(1);
        delim.push_str(text.get(at..at + n).unwrap_or_default());
        at + n
    };
    while j < b.len() && Some(j) != closing {
        match b[j] {
            b'\'' => {
                quoted = true;
                let close = closing_quote(b, j);
                let inner = text.get(j + 1..close).unwrap_or_default();
                if close >= b.len() || closing.is_some_and(|c| close > c) || inner.contains("{{") {
                    return unsure;
                }
                delim.push_str(inner);
                j = close + 1;
            }
            b'"' => {
                quoted = true;
                j += 1;
                loop {
                    if Some(j) == closing {
                        return unsure;
                    }
                    match b.get(j) {
                        None | Some(b'`') => return unsure,
                        Some(b'"') => break,
                        Some(b'\\') => match b.get(j + 1) {
                            Some(b'$' | b'`' | b'"' | b'\\') => j = take(&mut delim, j + 1),
                            None | Some(b'\n') => return unsure,
                            Some(_) => {
                                delim.push('\\');
                                j += 1;
                            }
                        },
                        Some(b'$') if matches!(b.get(j + 1), Some(b'(' | b'{')) => return unsure,
                        Some(b'{') if b.get(j + 1) == Some(&b'{') => return unsure,
                        Some(_) => j = take(&mut delim, j),
                    }
                }
                j += 1;
            }
            b'\\' => {
                quoted = true;
                match b.get(j + 1) {
                    None | Some(b'\n') => return unsure,
                    Some(_) => j = take(&mut delim, j + 1),
                }
            }
            b'`' => return unsure,
            b'$' if matches!(b.get(j + 1), Some(b'\'' | b'"')) => {
                return (Delimiter::Unsure(Dependence::DollarQuotedDelimiter), 0);
            }
            b'$' if matches!(b.get(j + 1), Some(b'(' | b'{')) => return unsure,
            b'{' if b.get(j + 1) == Some(&b'{') => return unsure,
            b' ' | b'\t' | b'\n' | b';' | b'|' | b'&' | b'<' | b'>' | b'(' | b')' => break,
            _ => j = take(&mut delim, j),
        }
    }
    // An empty quoted delimiter (`<<''`, `<<""`) is a here-document too: its body ends at
    // the first empty line.
    if delim.is_empty() && !quoted {
        return (Delimiter::Missing, j - from);
    }
    (
        Delimiter::Doc(Kind::Heredoc {
            quoted,
            strip,
            delim,
        }),
        j - from,
    )
}

/// Whether `text` has a template action that prints a value (quoted by `shell_quote` or
/// not), as opposed to control actions, comments and variable assignments.
pub fn prints_values(text: &str) -> bool {
    shell_actions(text).iter().any(|a| {
        let body = a.body();
        crate::validate::prints_value(body) || crate::validate::ends_in_shell_quoting(body)
    })
}

/// `word` as one argument of a command line shown to the user to paste (a hint's
/// `awf resume <id> --from <state>`): as is when the shell takes it literally (letters,
/// digits and `_ @ % + = : , . / -`), else in single quotes (a `'` in it as `'\''`), so a
/// state, input or path name never runs as shell code when the hint is pasted. A word with
/// a control or bidirectional character ([`crate::printable::escaped`]: ESC, BEL, a
/// newline, U+202E, …), which the terminal must not get as is, is written in ANSI-C quotes
/// (`$'s\e[31mred'`, bash, zsh, ksh): what is pasted is the word itself.
pub fn quote_arg(word: &str) -> std::borrow::Cow<'_, str> {
    let plain = !word.is_empty()
        && word.chars().all(|c| {
            c.is_ascii_alphanumeric()
                || matches!(c, '_' | '@' | '%' | '+' | '=' | ':' | ',' | '.' | '/' | '-')
        });
    if plain {
        std::borrow::Cow::Borrowed(word)
    } else if word.chars().any(crate::printable::escaped) {
        std::borrow::Cow::Owned(ansi_c_quote(word))
    } else {
        std::borrow::Cow::Owned(format!("'{}'", word.replace('\'', "'\\''")))
    }
}

/// `word` in ANSI-C quotes (`$'…'`), every character that [`crate::printable::escaped`]
/// names as an escape (`\e`, `\n`, `\xHH` for other ASCII controls, `\uHHHH` above), and
/// `\` and `'` escaped: the text has no control character and the shell reads `word`.
fn ansi_c_quote(word: &str) -> String {
    let mut out = String::from("$'");
    for c in word.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\'' => out.push_str("\\'"),
            '\u{1b}' => out.push_str("\\e"),
            '\u{7}' => out.push_str("\\a"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c if crate::printable::escaped(c) && c.is_ascii() => {
                out.push_str(&format!("\\x{:02x}", u32::from(c)));
            }
            c if crate::printable::escaped(c) => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

/// The body of an ANSI-C quoted word after its `$'`, as bash reads what [`ansi_c_quote`]
/// writes (and the other common escapes); `None` when the quote is not closed.
fn read_ansi_c(chars: &mut std::str::CharIndices<'_>, word: &mut String) -> Option<()> {
    let hex = |chars: &mut std::str::CharIndices<'_>, max: usize| {
        let mut n = 0u32;
        let mut rest = chars.as_str().chars();
        let mut used = 0;
        while used < max {
            match rest.next().and_then(|c| c.to_digit(16)) {
                Some(d) => {
                    n = n * 16 + d;
                    used += 1;
                }
                None => break,
            }
        }
        for _ in 0..used {
            chars.next();
        }
        (used > 0).then_some(n)
    };
    loop {
        match chars.next()?.1 {
            '\'' => return Some(()),
            '\\' => match chars.next()?.1 {
                'e' | 'E' => word.push('\u{1b}'),
                'a' => word.push('\u{7}'),
                'n' => word.push('\n'),
                'r' => word.push('\r'),
                't' => word.push('\t'),
                'x' => word.push(hex(chars, 2).and_then(char::from_u32)?),
                'u' => word.push(hex(chars, 4).and_then(char::from_u32)?),
                c => word.push(c),
            },
            c => word.push(c),
        }
    }
}

/// `NAME=<value>`, the word after `--input` in a hint (`--input NAME=<value>`), quoted as a
/// whole word the way a user would type it when `name` is not a plain word
/// (`'in put=<value>'`); a plain name stays as it is (`who=<value>`), its placeholder to be
/// replaced.
pub fn input_arg(name: &str) -> String {
    match quote_arg(name) {
        std::borrow::Cow::Borrowed(plain) => format!("{plain}=<value>"),
        std::borrow::Cow::Owned(q) if q.starts_with("$'") => {
            format!("{}=<value>'", &q[..q.len() - 1])
        }
        std::borrow::Cow::Owned(_) => format!("'{}=<value>'", name.replace('\'', "'\\''")),
    }
}

/// `names` for a list in prose (`a, b, '$(x)'`): each as [`quote_arg`] gives it, so a
/// name that is not a plain word is quoted and a pasted one runs nothing.
pub fn quoted_list<'a>(names: impl IntoIterator<Item = &'a str>) -> String {
    names
        .into_iter()
        .map(quote_arg)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The first shell word of `text` (after leading blanks) as the shell reads it, the inverse of
/// [`quote_arg`]: `'…'` is taken literally, `\x` outside quotes is `x`, `"…"` keeps its text
/// (a `\` there escapes `"`, `\`, `$` and `` ` ``); the word ends at an unquoted blank.
/// Returns the word and the text after it; `None` when `text` is blank or a quote is not
/// closed.
pub fn read_arg(text: &str) -> Option<(String, &str)> {
    let text = text.trim_start();
    if text.is_empty() {
        return None;
    }
    let mut word = String::new();
    let mut chars = text.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            c if c.is_whitespace() => return Some((word, &text[i..])),
            '$' if chars.as_str().starts_with('\'') => {
                chars.next();
                read_ansi_c(&mut chars, &mut word)?;
            }
            '\'' => loop {
                match chars.next() {
                    Some((_, '\'')) => break,
                    Some((_, c)) => word.push(c),
                    None => return None,
                }
            },
            '"' => loop {
                match chars.next() {
                    Some((_, '"')) => break,
                    Some((_, '\\')) => match chars.next() {
                        Some((_, c @ ('"' | '\\' | '$' | '`'))) => word.push(c),
                        Some((_, c)) => {
                            word.push('\\');
                            word.push(c);
                        }
                        None => return None,
                    },
                    Some((_, c)) => word.push(c),
                    None => return None,
                }
            },
            '\\' => match chars.next() {
                Some((_, c)) => word.push(c),
                None => return None,
            },
            c => word.push(c),
        }
    }
    Some((word, ""))
}

#[cfg(test)]
#[path = "shell_tests.rs"]
mod tests;
