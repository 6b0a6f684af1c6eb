//! Running a `command:` without a shell when it has no shell syntax, as make does for a recipe.
//!
//! A command is exec'd directly when every word is made of plain characters or quotes that
//! need no expansion, and the first word names a program found on `PATH` that is not a shell
//! builtin or reserved word. Anything else (pipes, redirections, `$`, globs, `~`, backslashes,
//! assignments, comments, several lines, builtins such as `cd`, `echo` or `export`, a program
//! that is not found) goes through `$SHELL -c` as before, so its output, messages and exit
//! status are the shell's own. The shell would exec such a command the same way (bash and dash
//! exec the last simple command of `-c` text without forking), so both paths give the same
//! output and status; what the direct path skips is the shell's start-up.
//!
//! Source: issue 9 ("a step costs what make's recipe costs"); design/decisions.md ("A shell
//! `command` with no shell syntax is exec'd directly").

use std::ffi::OsStr;
use std::ffi::OsString;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::path::PathBuf;

/// Words that are shell syntax or builtins when first in a command: a command starting with
/// one always goes through the shell. `true` and `false` are not here: their programs behave
/// exactly like the builtins.
const SHELL_WORDS: &[&str] = &[
    // reserved words (bash and POSIX)
    "if",
    "then",
    "else",
    "elif",
    "fi",
    "case",
    "esac",
    "for",
    "select",
    "while",
    "until",
    "do",
    "done",
    "function",
    "time",
    "in",
    "coproc",
    // builtins (bash's list, which covers POSIX's special and regular builtins)
    ".",
    ":",
    "alias",
    "bg",
    "bind",
    "break",
    "builtin",
    "caller",
    "cd",
    "command",
    "compgen",
    "complete",
    "compopt",
    "continue",
    "declare",
    "dirs",
    "disown",
    "echo",
    "enable",
    "eval",
    "exec",
    "exit",
    "export",
    "fc",
    "fg",
    "getopts",
    "hash",
    "help",
    "history",
    "jobs",
    "kill",
    "let",
    "local",
    "logout",
    "mapfile",
    "popd",
    "printf",
    "pushd",
    "pwd",
    "read",
    "readarray",
    "readonly",
    "return",
    "set",
    "shift",
    "shopt",
    "source",
    "suspend",
    "test",
    "times",
    "trap",
    "type",
    "typeset",
    "ulimit",
    "umask",
    "unalias",
    "unset",
    "wait",
];

/// Unquoted characters that stand for themselves in every POSIX shell.
fn plain(c: char) -> bool {
    c.is_ascii_alphanumeric()
        || matches!(
            c,
            '_' | '-' | '.' | '/' | ',' | ':' | '+' | '=' | '@' | '%' | '^'
        )
}

/// Splits `text` into words by the shell's quoting rules when it is a simple command with no
/// expansion of any kind; `None` when the shell is needed to read it.
pub(crate) fn split_words(text: &str) -> Option<Vec<String>> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match c {
            ' ' | '\t' => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            '\'' => {
                in_word = true;
                loop {
                    match chars.next()? {
                        '\'' => break,
                        '\n' => return None,
                        q => word.push(q),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next()? {
                        '"' => break,
                        '$' | '`' | '\\' | '!' | '\n' => return None,
                        q => word.push(q),
                    }
                }
            }
            c if plain(c) => {
                in_word = true;
                word.push(c);
            }
            _ => return None,
        }
    }
    if in_word {
        words.push(word);
    }
    Some(words)
}

/// The name as written, the program and the arguments to exec for `text`, or `None` to run it
/// through the shell.
///
/// `path` is the `PATH` the command runs with; `shell_env` tells whether the environment asks
/// the shell to do something before the command (`BASH_ENV`, or an exported bash function
/// named like the program), in which case the shell is used.
pub(crate) fn plan(
    text: &str,
    path: Option<&OsStr>,
    shell_env: impl Fn(&str) -> bool,
) -> Option<(String, PathBuf, Vec<String>)> {
    let mut words = split_words(text)?;
    let first = words.first()?;
    if first.is_empty() || first.contains('=') || SHELL_WORDS.contains(&first.as_str()) {
        return None;
    }
    if shell_env("BASH_ENV") || shell_env(&format!("BASH_FUNC_{first}%%")) {
        return None;
    }
    let program = find(first, path)?;
    let name = words.remove(0);
    Some((name, program, words))
}

/// `name` looked up as the shell would: a name with a `/` as a path, else each `PATH` entry
/// in order (an empty entry is the current directory). Only an executable regular file
/// counts; anything else is left to the shell, which reports it its own way.
fn find(name: &str, path: Option<&OsStr>) -> Option<PathBuf> {
    if name.contains('/') {
        let p = PathBuf::from(name);
        return executable(&p).then_some(p);
    }
    let path = path?;
    std::env::split_paths(path)
        .map(|dir| {
            if dir.as_os_str().is_empty() {
                PathBuf::from(".").join(name)
            } else {
                dir.join(name)
            }
        })
        .find(|p| executable(p))
}

/// An executable regular file that the kernel can exec itself: an ELF binary or a `#!`
/// script. Any other file (no `#!` line, empty) is left to the shell, which runs it as a
/// script where the kernel would refuse it (`ENOEXEC`); one that is not readable is left to it
/// too (it reports it its own way).
fn executable(p: &Path) -> bool {
    use std::io::Read;
    if !std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0) {
        return false;
    }
    let mut head = [0u8; 4];
    let mut got = 0;
    if let Ok(mut f) = std::fs::File::open(p) {
        while got < head.len() {
            match f.read(&mut head[got..]) {
                Ok(0) | Err(_) => break,
                Ok(n) => got += n,
            }
        }
    }
    head[..got].starts_with(b"#!") || head[..got] == *b"\x7fELF"
}

/// The `PATH` a command runs with: the last `PATH` in its extra environment, else the
/// inherited one.
pub(crate) fn path_for(env: &[(String, String)]) -> Option<OsString> {
    match env.iter().rev().find(|(k, _)| k == "PATH") {
        Some((_, v)) => Some(OsString::from(v)),
        None => std::env::var_os("PATH"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Option<Vec<String>> {
        split_words(s)
    }

    #[test]
    fn splits_plain_and_quoted_words() {
        assert_eq!(words("true"), Some(vec!["true".into()]));
        assert_eq!(
            words("  make  -j4 build "),
            Some(vec!["make".into(), "-j4".into(), "build".into()])
        );
        assert_eq!(
            words("git commit --author=\"A B <a@b>\""),
            Some(vec![
                "git".into(),
                "commit".into(),
                "--author=A B <a@b>".into()
            ]),
            "`<` and `>` are literal inside quotes"
        );
        assert_eq!(
            words("git commit -m 'fix: a  b' \"x y\"z '' ''"),
            Some(vec![
                "git".into(),
                "commit".into(),
                "-m".into(),
                "fix: a  b".into(),
                "x yz".into(),
                "".into(),
                "".into()
            ])
        );
        assert_eq!(
            words("printf '%s|' a"),
            Some(vec!["printf".into(), "%s|".into(), "a".into()])
        );
    }

    #[test]
    fn anything_the_shell_would_expand_needs_the_shell() {
        for text in [
            "echo $HOME",
            "ls *.txt",
            "ls ~",
            "a | b",
            "a && b",
            "a; b",
            "a > f",
            "a < f",
            "(a)",
            "a &",
            "echo `date`",
            "echo \"$x\"",
            "echo a\\ b",
            "a # comment",
            "a\nb",
            "echo {a,b}",
            "echo [ab]",
            "echo ?",
            "! a",
            "'unterminated",
            "\"unterminated",
            "echo \"a\\nb\"",
        ] {
            assert_eq!(words(text), None, "{text:?}");
        }
    }

    #[test]
    fn builtins_keywords_and_assignments_need_the_shell() {
        let path = std::env::var_os("PATH");
        let none = |_: &str| false;
        for text in [
            "cd /tmp",
            "echo hi",
            "export A=1",
            "A=1 env",
            "if true",
            "exit 3",
            ". x",
            "pwd",
            "test -f x",
        ] {
            assert_eq!(plan(text, path.as_deref(), none), None, "{text:?}");
        }
        let (name, prog, args) = plan("true", path.as_deref(), none).unwrap();
        assert_eq!(name, "true");
        assert!(prog.ends_with("true"));
        assert!(args.is_empty());
        let (_, prog, args) = plan("env -u X", path.as_deref(), none).unwrap();
        assert!(prog.ends_with("env"));
        assert_eq!(args, ["-u", "X"]);
    }

    #[test]
    fn a_program_not_found_is_left_to_the_shell() {
        let path = std::env::var_os("PATH");
        assert_eq!(
            plan("no-such-program-awf x", path.as_deref(), |_| false),
            None
        );
        assert_eq!(plan("/no/such/program", path.as_deref(), |_| false), None);
        assert_eq!(plan("true", None, |_| false), None);
    }

    #[test]
    fn bash_env_and_exported_functions_keep_the_shell() {
        let path = std::env::var_os("PATH");
        assert_eq!(plan("true", path.as_deref(), |k| k == "BASH_ENV"), None);
        assert_eq!(plan("ls", path.as_deref(), |k| k == "BASH_FUNC_ls%%"), None);
        assert!(plan("ls", path.as_deref(), |k| k == "BASH_FUNC_cat%%").is_some());
    }
}
