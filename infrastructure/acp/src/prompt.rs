//! Prompt text → workflow name and inputs: the `/workflow key=value …` grammar of AWF (Go)'s
//! `acp-serve`. Source: shared/spec/acp.md §2.4.

/// What a prompt asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Command {
    /// Workflow identifier (`pack:wf` already rewritten to `pack/wf`).
    pub workflow: String,
    /// `key=value` pairs in order (a repeated key: the last wins when the run reads them).
    pub inputs: Vec<(String, String)>,
}

/// Splits text shell-like (acp.md §2.4): separators are space, tab, `\n`, `\r` outside
/// quotes; `'` or `"` quote up to the same character (quote characters dropped, pieces
/// concatenate, an empty quoted string still makes a token); no backslash escapes.
///
/// # Errors
/// An unterminated quote, naming the quote character and where it opens (1-based
/// character). AWF (Go) ran it to the end of the text, so `who='a b env=dev` silently gave
/// `who` the value `a b env=dev` (docs/compatibility.md).
pub fn tokenize(text: &str) -> Result<Vec<String>, String> {
    let mut tokens = Vec::new();
    let mut cur = String::new();
    let mut in_token = false;
    let mut quote: Option<(char, usize)> = None;
    for (at, c) in text.chars().enumerate() {
        match quote {
            Some((q, _)) if c == q => quote = None,
            Some(_) => cur.push(c),
            None => match c {
                ' ' | '\t' | '\n' | '\r' => {
                    if in_token {
                        tokens.push(std::mem::take(&mut cur));
                        in_token = false;
                    }
                }
                '\'' | '"' => {
                    quote = Some((c, at + 1));
                    in_token = true;
                }
                _ => {
                    cur.push(c);
                    in_token = true;
                }
            },
        }
    }
    if let Some((q, at)) = quote {
        let other = if q == '\'' { '"' } else { '\'' };
        return Err(format!(
            "unbalanced quote: the {q} at character {at} is never closed; close it \
             (key={q}a b{q}), or quote a value that holds a {q} with {other} (key={other}it{q}s{other})"
        ));
    }
    if in_token {
        tokens.push(cur);
    }
    Ok(tokens)
}

/// Whether `name` follows AWF (Go)'s rule for a command's workflow name: at most one `/`,
/// each part `^[a-z][a-z0-9-]*$`. Such a name reaches the run as typed (an unknown one is
/// the run's "workflow not found"); any other name is taken only when it is one of the
/// listed workflows'.
pub fn awf_name(name: &str) -> bool {
    let parts: Vec<&str> = name.split('/').collect();
    parts.len() <= 2
        && parts.iter().all(|p| {
            let mut chars = p.chars();
            matches!(chars.next(), Some('a'..='z'))
                && chars.all(|c| matches!(c, 'a'..='z' | '0'..='9' | '-'))
        })
}

/// Why the workflow name `name` (`pack/wf` for a pack's) cannot be typed as a slash command,
/// or `None` when it can: each of its at most two `/`-separated parts must be non-empty,
/// neither `.` nor `..`, and free of whitespace (the prompt splits words there), quotes (the
/// prompt drops them), control characters, `\` and `:` (typed for the pack separator).
pub fn untypable(name: &str) -> Option<String> {
    let parts: Vec<&str> = name.split('/').collect();
    if parts.len() > 2 {
        return Some("it has more than one '/' (only pack/workflow has one)".into());
    }
    for p in parts {
        let why = if p.is_empty() {
            "a part of it is empty"
        } else if p == "." || p == ".." {
            "'.' and '..' name directories"
        } else if p.chars().any(char::is_whitespace) {
            "it holds whitespace (a prompt splits words there)"
        } else if p.chars().any(|c| c == '\'' || c == '"') {
            "it holds a quote (a prompt drops quotes)"
        } else if p.chars().any(char::is_control) {
            "it holds a control character"
        } else if p.contains('\\') {
            "it holds a backslash"
        } else if p.contains(':') {
            "it holds ':' (typed for the pack separator)"
        } else {
            continue;
        };
        return Some(why.into());
    }
    None
}

/// Parses a slash command: token 0 `/name` (a name [`untypable`] finds nothing wrong with,
/// at most two `/`-separated components; the first `:` is read as `/`), then `--input k=v`, `--input=k=v` or `k=v`
/// pairs; other `--flags` and free words are ignored.
///
/// # Errors
/// The reason, for the "Invalid prompt: …" answer (`USER.ACP.INVALID_PROMPT`): among
/// others an unbalanced quote ([`tokenize`]) and a last `--input` with nothing after it
/// (AWF (Go) ignored it).
pub fn parse_command(text: &str) -> Result<Command, String> {
    let tokens = tokenize(text)?;
    let Some(first) = tokens.first() else {
        return Err("prompt is empty".into());
    };
    let Some(name) = first.strip_prefix('/') else {
        return Err("prompt must begin with a /<workflow> slash command".into());
    };
    if name.is_empty() {
        return Err("empty slash command".into());
    }
    let name = name.replacen(':', "/", 1);
    if let Some(why) = untypable(&name) {
        return Err(format!("invalid workflow name {name:?}: {why}"));
    }
    let mut pairs = Vec::new();
    let mut rest = tokens[1..].iter();
    while let Some(t) = rest.next() {
        if t == "--input" {
            match rest.next() {
                Some(p) => pairs.push(p.clone()),
                None => {
                    return Err(
                        "--input at the end of the prompt has no value: write --input key=value"
                            .into(),
                    );
                }
            }
        } else if let Some(p) = t.strip_prefix("--input=") {
            pairs.push(p.to_owned());
        } else if t.starts_with("--") {
            continue;
        } else if t.contains('=') {
            pairs.push(t.clone());
        }
    }
    let mut inputs = Vec::new();
    for p in pairs {
        let Some((k, v)) = p.split_once('=') else {
            return Err(format!("invalid input pair {p:?}: expected key=value"));
        };
        let k = k.trim();
        if k.is_empty() {
            return Err(format!("invalid input pair {p:?}: expected key=value"));
        }
        inputs.push((k.to_owned(), v.trim().to_owned()));
    }
    Ok(Command {
        workflow: name,
        inputs,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_follow_the_quote_rules() {
        let tokenize = |t: &str| tokenize(t).unwrap();
        assert_eq!(tokenize(r#"msg="hello world""#), vec!["msg=hello world"]);
        assert_eq!(tokenize(r#"a"b c"d"#), vec!["ab cd"]);
        assert_eq!(tokenize(r#""x"'y'"#), vec!["xy"]);
        assert_eq!(tokenize(r#"msg="""#), vec!["msg="]);
        assert_eq!(tokenize(r#"a "" b"#), vec!["a", "", "b"]);
        assert_eq!(tokenize("a\t b\r\nc"), vec!["a", "b", "c"]);
        assert_eq!(tokenize(r#"q="it's""#), vec!["q=it's"]);
        assert_eq!(tokenize(r"a\ b"), vec![r"a\", "b"]);
    }

    /// Breaker: `/ask who='a b env=dev` ran with who="a b env=dev", `/sleep secs='1` with
    /// secs=1, and a last `--input` was dropped: each is an invalid prompt now.
    #[test]
    fn an_unbalanced_quote_or_a_bare_input_flag_is_refused() {
        assert_eq!(
            parse_command("/ask who='a b env=dev").unwrap_err(),
            r#"unbalanced quote: the ' at character 10 is never closed; close it (key='a b'), or quote a value that holds a ' with " (key="it's")"#
        );
        assert_eq!(
            parse_command(r#"/sleep secs="1"#).unwrap_err(),
            r#"unbalanced quote: the " at character 13 is never closed; close it (key="a b"), or quote a value that holds a " with ' (key='it"s')"#
        );
        assert_eq!(
            parse_command("/code-review file=a.go --input").unwrap_err(),
            "--input at the end of the prompt has no value: write --input key=value"
        );
    }

    #[test]
    fn commands_take_pairs_in_every_spelling() {
        let c = parse_command("/code-review file=main.go review_type=security").unwrap();
        assert_eq!(c.workflow, "code-review");
        assert_eq!(
            c.inputs,
            vec![
                ("file".into(), "main.go".into()),
                ("review_type".into(), "security".into())
            ]
        );
        let c = parse_command("/code-review --input=file=main.go --input file=x.go").unwrap();
        assert_eq!(
            c.inputs,
            vec![
                ("file".into(), "main.go".into()),
                ("file".into(), "x.go".into())
            ]
        );
        let c = parse_command("/notify msg='hello world' please --verbose").unwrap();
        assert_eq!(c.inputs, vec![("msg".into(), "hello world".into())]);
        let c = parse_command("/fetch url=https://x?a=1&b=2").unwrap();
        assert_eq!(c.inputs, vec![("url".into(), "https://x?a=1&b=2".into())]);
        assert_eq!(parse_command("/pack:wf").unwrap().workflow, "pack/wf");
        assert_eq!(parse_command("/pack/wf").unwrap().workflow, "pack/wf");
    }

    #[test]
    fn bad_commands_say_why() {
        assert!(parse_command("hello").unwrap_err().contains("must begin"));
        assert!(parse_command("/").unwrap_err().contains("empty slash"));
        assert_eq!(parse_command("/Upper").unwrap().workflow, "Upper");
        assert_eq!(parse_command("/a_b").unwrap().workflow, "a_b");
        assert_eq!(parse_command("/my.flow").unwrap().workflow, "my.flow");
        assert_eq!(
            parse_command("/../etc").unwrap_err(),
            "invalid workflow name \"../etc\": '.' and '..' name directories"
        );
        assert!(
            parse_command("/a/b/c")
                .unwrap_err()
                .contains("more than one '/'")
        );
        assert!(parse_command("/a\\b").unwrap_err().contains("backslash"));
        assert!(parse_command("/p:a:b").unwrap_err().contains("':'"));
        assert_eq!(
            untypable("my.flow v2").as_deref(),
            Some("it holds whitespace (a prompt splits words there)")
        );
        assert!(awf_name("code-review") && awf_name("pack/wf"));
        assert!(!awf_name("code_review") && !awf_name("Greet"));
        assert!(
            parse_command("/wf --input foo")
                .unwrap_err()
                .contains("key=value")
        );
        assert!(parse_command("/wf =v").unwrap_err().contains("key=value"));
        assert!(parse_command("   ").unwrap_err().contains("empty"));
    }
}
