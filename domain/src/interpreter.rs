//! What runs a step's `script_file:`: its `#!` line read down to the interpreter, through
//! `env` and wrapper commands (`nice`, `nohup`, `setsid`, `timeout`, …). `shell_quote: true`
//! and `awf validate` treat the script's template values as shell text when that is a POSIX
//! shell or cannot be told. Pure text analysis, no I/O.
//!
//! Source: issue 14 ("Safe shell interpolation"); breaker h4 (`#!/bin/rbash`,
//! `#!/usr/bin/nice bash` were filled in unquoted).

/// What runs a step's `script_file:`, as its `#!` line names it ([`script_interpreter`]).
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum ScriptInterpreter {
    /// No `#!` line (awf runs the script with `$SHELL`), or a POSIX-family shell (`sh`,
    /// `bash`, `rbash`, `bash5`, `dash`, `zsh`, `ksh93`, `mksh`, `ash`, `yash`, `posh`,
    /// `busybox sh`, …): the script's values land in shell text.
    Shell,
    /// A shell whose syntax is not POSIX (`fish`, `csh`, `tcsh`, `nu`, `pwsh`, …): POSIX
    /// quoting does not protect a value there, and awf has no other. The program's name.
    OtherShell(String),
    /// An interpreter of another language (`python3`, `node`, `perl`, `ruby`, …): the
    /// script is not shell text. The program's name.
    Other(String),
    /// awf cannot tell: a program it does not know, a wrapper option it cannot read past, a
    /// program named through a variable, or none at all. Counted as a POSIX shell (quoting
    /// another interpreter's script only changes its text; leaving a shell script's values
    /// raw runs them). What it could not tell, as a phrase (`the program "frob"`).
    Unknown(String),
}

impl ScriptInterpreter {
    /// Whether the script's values are quoted as POSIX shell text: a POSIX shell, or an
    /// interpreter awf cannot tell.
    pub fn quotes_as_shell(&self) -> bool {
        matches!(self, Self::Shell | Self::Unknown(_))
    }

    /// Under `shell_quote: true`, the refusal of a script for a non-POSIX shell
    /// ([`Self::OtherShell`]) whose text prints a template value: the message (what cannot
    /// be done) and the hint. `None` for any other interpreter or a script printing no value.
    pub fn shell_quote_refusal(&self, script: &str) -> Option<(String, String)> {
        let Self::OtherShell(shell) = self else {
            return None;
        };
        if !crate::shell::prints_values(script) {
            return None;
        }
        Some((
            format!(
                "shell_quote: true cannot quote template values for {shell}, whose quoting is not a POSIX shell's (POSIX single quotes do not protect a value there)"
            ),
            format!(
                "read the value from its environment variable in the script instead of a {{{{ }}}} action (every input reaches the step as one, $name in {shell}), or run the script with a POSIX shell"
            ),
        ))
    }
}

/// POSIX-family shells, by base name (a version suffix such as `bash5`, `bash-5.2` or
/// `ksh93` is dropped first).
const POSIX_SHELLS: &[&str] = &[
    "sh", "bash", "rbash", "dash", "zsh", "rzsh", "ksh", "rksh", "pdksh", "oksh", "loksh", "mksh",
    "lksh", "ash", "hush", "yash", "posh", "bosh", "jsh", "osh",
];

/// Shells whose syntax is not POSIX.
const OTHER_SHELLS: &[&str] = &[
    "fish",
    "csh",
    "tcsh",
    "nu",
    "nush",
    "elvish",
    "xonsh",
    "rc",
    "es",
    "pwsh",
    "powershell",
    "ion",
    "murex",
    "ysh",
    "oil",
];

/// Interpreters of other languages.
const OTHER_INTERPRETERS: &[&str] = &[
    "python",
    "pypy",
    "uv",
    "node",
    "nodejs",
    "deno",
    "bun",
    "ts-node",
    "tsx",
    "ruby",
    "jruby",
    "perl",
    "raku",
    "rakudo",
    "php",
    "lua",
    "luajit",
    "tclsh",
    "wish",
    "expect",
    "Rscript",
    "R",
    "julia",
    "awk",
    "gawk",
    "mawk",
    "nawk",
    "sed",
    "gsed",
    "make",
    "gmake",
    "jq",
    "bc",
    "dc",
    "guile",
    "racket",
    "sbcl",
    "clisp",
    "ecl",
    "ocaml",
    "swift",
    "kotlin",
    "scala",
    "groovy",
    "java",
    "jshell",
    "dotnet",
    "elixir",
    "erl",
    "escript",
    "runghc",
    "runhaskell",
    "stack",
    "crystal",
    "dart",
    "rust-script",
    "osascript",
    "gnuplot",
    "octave",
    "emacs",
    "sqlite",
];

/// A command that runs another command given after its options and a fixed number of
/// other words (`nice -n 5 bash`, `timeout 10 bash`): awf looks through it to the program.
struct Wrapper {
    name: &'static str,
    /// Single-letter options without an argument.
    flags: &'static str,
    /// Single-letter options taking an argument (glued, `-n5`, or the next word).
    with_arg: &'static str,
    /// Long options without an argument.
    long_flags: &'static [&'static str],
    /// Long options taking an argument (`--name=value` or `--name value`).
    long_with_arg: &'static [&'static str],
    /// Words between the options and the command (`timeout`'s duration).
    positional: usize,
    /// Options after which no command follows (`-p` PID), or the command is run in a way
    /// awf does not model (`flock -c`): the program cannot be told.
    stop: &'static str,
    /// `-N` (digits) is an option (`nice -10`).
    numeric_option: bool,
}

const WRAPPERS: &[Wrapper] = &[
    Wrapper {
        name: "nice",
        flags: "",
        with_arg: "n",
        long_flags: &[],
        long_with_arg: &["adjustment"],
        positional: 0,
        stop: "",
        numeric_option: true,
    },
    Wrapper {
        name: "nohup",
        flags: "",
        with_arg: "",
        long_flags: &[],
        long_with_arg: &[],
        positional: 0,
        stop: "",
        numeric_option: false,
    },
    Wrapper {
        name: "setsid",
        flags: "cfw",
        with_arg: "",
        long_flags: &["ctty", "fork", "wait"],
        long_with_arg: &[],
        positional: 0,
        stop: "",
        numeric_option: false,
    },
    Wrapper {
        name: "timeout",
        flags: "v",
        with_arg: "ks",
        long_flags: &["preserve-status", "foreground", "verbose"],
        long_with_arg: &["kill-after", "signal"],
        positional: 1,
        stop: "",
        numeric_option: false,
    },
    Wrapper {
        name: "stdbuf",
        flags: "",
        with_arg: "ioe",
        long_flags: &[],
        long_with_arg: &["input", "output", "error"],
        positional: 0,
        stop: "",
        numeric_option: false,
    },
    Wrapper {
        name: "ionice",
        flags: "t",
        with_arg: "cn",
        long_flags: &["ignore"],
        long_with_arg: &["class", "classdata"],
        positional: 0,
        stop: "pPu",
        numeric_option: false,
    },
    Wrapper {
        name: "chrt",
        flags: "abdefiormRv",
        with_arg: "TPD",
        long_flags: &[
            "all-tasks",
            "batch",
            "deadline",
            "ext",
            "fifo",
            "idle",
            "other",
            "rr",
            "reset-on-fork",
            "verbose",
        ],
        long_with_arg: &["sched-runtime", "sched-period", "sched-deadline"],
        positional: 1,
        stop: "mp",
        numeric_option: false,
    },
    Wrapper {
        name: "taskset",
        flags: "ac",
        with_arg: "",
        long_flags: &["all-tasks", "cpu-list"],
        long_with_arg: &[],
        positional: 1,
        stop: "p",
        numeric_option: false,
    },
    Wrapper {
        name: "time",
        flags: "apqv",
        with_arg: "fo",
        long_flags: &["append", "portability", "quiet", "verbose"],
        long_with_arg: &["format", "output"],
        positional: 0,
        stop: "",
        numeric_option: false,
    },
    Wrapper {
        name: "flock",
        flags: "sexunoFv",
        with_arg: "wE",
        long_flags: &[
            "shared",
            "exclusive",
            "unlock",
            "nonblock",
            "close",
            "no-fork",
            "verbose",
        ],
        long_with_arg: &["timeout", "conflict-exit-code"],
        positional: 1,
        stop: "c",
        numeric_option: false,
    },
    Wrapper {
        name: "sudo",
        flags: "AbEHknPS",
        with_arg: "CDghpRrtTUu",
        long_flags: &[
            "askpass",
            "background",
            "preserve-env",
            "set-home",
            "non-interactive",
            "preserve-groups",
            "stdin",
        ],
        long_with_arg: &[
            "close-from",
            "chdir",
            "group",
            "host",
            "prompt",
            "chroot",
            "role",
            "type",
            "command-timeout",
            "other-user",
            "user",
        ],
        positional: 0,
        stop: "eilsvVK",
        numeric_option: false,
    },
    Wrapper {
        name: "doas",
        flags: "n",
        with_arg: "uC",
        long_flags: &[],
        long_with_arg: &[],
        positional: 0,
        stop: "sL",
        numeric_option: false,
    },
    Wrapper {
        name: "unbuffer",
        flags: "p",
        with_arg: "",
        long_flags: &[],
        long_with_arg: &[],
        positional: 0,
        stop: "",
        numeric_option: false,
    },
    Wrapper {
        name: "nocache",
        flags: "",
        with_arg: "",
        long_flags: &[],
        long_with_arg: &[],
        positional: 0,
        stop: "",
        numeric_option: false,
    },
    Wrapper {
        name: "busybox",
        flags: "",
        with_arg: "",
        long_flags: &[],
        long_with_arg: &[],
        positional: 0,
        stop: "",
        numeric_option: false,
    },
];

/// What runs a script (a step's `script_file:` contents), read from its `#!` line: the
/// program it names, looked through `env` (its options read as GNU `env` reads them: `-S`
/// /`--split-string` with its argument glued or not, `-u`/`--unset NAME`, `-C`/`--chdir
/// DIR`, `-i`, `-`, `-0`, `-v`, `NAME=VALUE`…) and through wrapper commands that run the
/// command after their options (`nice`, `nohup`, `setsid`, `timeout DURATION`, `stdbuf`,
/// `ionice`, `chrt PRIORITY`, `taskset MASK`, `time`, `flock FILE`, `sudo`, `doas`,
/// `unbuffer`, `nocache`, `busybox`), each with the options it has. The program's base name
/// is then compared, a version suffix dropped (`bash5`, `python3.12`), with the POSIX
/// shells, the non-POSIX shells and the other interpreters awf knows.
///
/// When in doubt, [`ScriptInterpreter::Unknown`] (counted as shell): a program awf does
/// not know, a wrapper option it does not know, a program named through a variable, none
/// at all (breaker: `#!/bin/rbash` and `#!/usr/bin/nice bash` were filled in unquoted).
pub fn script_interpreter(script: &str) -> ScriptInterpreter {
    let Some(line) = script.strip_prefix("#!") else {
        return ScriptInterpreter::Shell;
    };
    let line = line.lines().next().unwrap_or("");
    let mut words: std::collections::VecDeque<String> =
        line.split_whitespace().map(str::to_owned).collect();
    // Bounded: each round takes at least the program's word.
    for _ in 0..16 {
        let Some(program) = words.pop_front() else {
            return ScriptInterpreter::Unknown("a #! line naming no program".to_owned());
        };
        let program = program.trim_matches(|c| c == '"' || c == '\'');
        if program.is_empty() || program.contains('$') || program.contains('`') {
            return ScriptInterpreter::Unknown(format!("the program {program:?}"));
        }
        let base = program.rsplit('/').next().unwrap_or(program);
        if base == "env" {
            match env_command(std::mem::take(&mut words)) {
                Some(rest) => {
                    words = rest;
                    continue;
                }
                None => {
                    return ScriptInterpreter::Unknown(
                        "the #! line's env options (one awf does not know, or no program after them)"
                            .to_owned(),
                    );
                }
            }
        }
        if let Some(w) = WRAPPERS.iter().find(|w| w.name == base) {
            match wrapped_command(w, std::mem::take(&mut words)) {
                Some(rest) => {
                    words = rest;
                    continue;
                }
                None => {
                    return ScriptInterpreter::Unknown(format!(
                        "the #! line's {base} options (one awf does not know, or no program after them)"
                    ));
                }
            }
        }
        let name = unversioned(base);
        return if POSIX_SHELLS.contains(&name) {
            ScriptInterpreter::Shell
        } else if OTHER_SHELLS.contains(&name) {
            ScriptInterpreter::OtherShell(base.to_owned())
        } else if OTHER_INTERPRETERS.contains(&name) {
            ScriptInterpreter::Other(base.to_owned())
        } else {
            ScriptInterpreter::Unknown(format!("the program {base:?}"))
        };
    }
    ScriptInterpreter::Unknown("the #! line's chain of wrapper commands".to_owned())
}

/// `base` without a version suffix (`bash5`, `bash-5.2`, `ksh93`, `python3.12`).
fn unversioned(base: &str) -> &str {
    base.trim_end_matches(|c: char| c.is_ascii_digit() || matches!(c, '.' | '-' | '_'))
}

/// Whether `program` (a path or a name, such as a `$SHELL` value) is a POSIX-family shell,
/// one that runs `<program> -c '<POSIX shell text>'`: by its base name, a version suffix
/// dropped (`/bin/bash`, `bash5`, `bash-5.2`, `ksh93`), one of the POSIX shells awf knows
/// (`sh`, `bash`, `dash`, `zsh`, `ksh`, `mksh`, `ash`, `yash`, `posh`, `oksh`, `loksh`, …)
/// or `busybox`. Anything else is not (`fish`, `csh`, `tcsh`, `nu`, `pwsh`, `xonsh`,
/// `elvish`, `tclsh`, `python3`, a program awf does not know): commands do not run under it.
pub fn is_posix_shell(program: &str) -> bool {
    let base = program.rsplit('/').next().unwrap_or(program);
    let name = unversioned(base);
    POSIX_SHELLS.contains(&name) || name == "busybox"
}

/// The command a wrapper runs (its words after the wrapper's name, options and positional
/// words skipped); `None` when an option is one `w` does not have, stops it running a
/// command, or no command follows.
fn wrapped_command(
    w: &Wrapper,
    mut words: std::collections::VecDeque<String>,
) -> Option<std::collections::VecDeque<String>> {
    while let Some(word) = words.front().cloned() {
        if word == "--" {
            words.pop_front();
            break;
        }
        if let Some(long) = word.strip_prefix("--") {
            words.pop_front();
            let (name, inline) = match long.split_once('=') {
                Some((n, _)) => (n, true),
                None => (long, false),
            };
            if w.long_flags.contains(&name) && !inline {
                continue;
            }
            if w.long_with_arg.contains(&name) {
                if !inline {
                    words.pop_front()?;
                }
                continue;
            }
            return None;
        }
        let Some(flags) = word.strip_prefix('-').filter(|f| !f.is_empty()) else {
            break;
        };
        words.pop_front();
        if w.numeric_option && flags.chars().all(|c| c.is_ascii_digit()) {
            continue;
        }
        for (k, f) in flags.char_indices() {
            if w.stop.contains(f) {
                return None;
            }
            if w.flags.contains(f) {
                continue;
            }
            if w.with_arg.contains(f) {
                if flags[k + f.len_utf8()..].is_empty() {
                    words.pop_front()?;
                }
                break;
            }
            return None;
        }
    }
    for _ in 0..w.positional {
        words.pop_front()?;
    }
    (!words.is_empty()).then_some(words)
}

/// The command an `env` command line runs (its words after `env`, from the program on);
/// `None` when it names none or uses an option GNU `env` does not have.
fn env_command(
    mut words: std::collections::VecDeque<String>,
) -> Option<std::collections::VecDeque<String>> {
    while let Some(w) = words.pop_front() {
        if w == "--" {
            return (!words.is_empty()).then_some(words);
        }
        if w == "-" {
            continue;
        }
        if let Some(long) = w.strip_prefix("--") {
            let (name, inline) = match long.split_once('=') {
                Some((n, v)) => (n, Some(v.to_owned())),
                None => (long, None),
            };
            match name {
                "ignore-environment" | "null" | "debug" | "list-signal-handling" => {}
                "block-signal" | "default-signal" | "ignore-signal" => {}
                "unset" | "chdir" | "argv0" => {
                    if inline.is_none() {
                        words.pop_front()?;
                    }
                }
                "split-string" => {
                    let arg = match inline {
                        Some(v) => v,
                        None => words.pop_front()?,
                    };
                    for (k, part) in arg.split_whitespace().enumerate() {
                        words.insert(k, part.to_owned());
                    }
                }
                _ => return None,
            }
            continue;
        }
        if let Some(flags) = w.strip_prefix('-') {
            for (k, f) in flags.char_indices() {
                let rest = &flags[k + f.len_utf8()..];
                match f {
                    'i' | '0' | 'v' => {}
                    'u' | 'C' | 'a' => {
                        if rest.is_empty() {
                            words.pop_front()?;
                        }
                        break;
                    }
                    'S' => {
                        for (n, part) in rest.split_whitespace().enumerate() {
                            words.insert(n, part.to_owned());
                        }
                        break;
                    }
                    _ => return None,
                }
            }
            continue;
        }
        if w.contains('=') {
            continue;
        }
        words.push_front(w);
        return Some(words);
    }
    None
}

#[cfg(test)]
#[path = "interpreter_tests.rs"]
mod tests;
