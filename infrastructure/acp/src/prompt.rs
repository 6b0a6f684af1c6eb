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

fn valid_component(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some('a'..='z'))
        && chars.all(|c| matches!(c, 'a'..='z' | '0'..='9' | '-'))
}

/// Parses a slash command: token 0 `/name` (`^[a-z][a-z0-9-]*$`, at most two `/`-separated
/// components; the first `:` is read as `/`), then `--input k=v`, `--input=k=v` or `k=v`
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
    let parts: Vec<&str> = name.split('/').collect();
    if parts.len() > 2 || !parts.iter().all(|p| valid_component(p)) {
        return Err(format!(
            "invalid workflow name {name:?}: use lower-case letters, digits and '-', starting with a letter"
        ));
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
        assert!(
            parse_command("/Upper")
                .unwrap_err()
                .contains("invalid workflow name")
        );
        assert!(parse_command("/a_b").is_err());
        assert!(parse_command("/../etc").is_err());
        assert!(parse_command("/a/b/c").is_err());
        assert!(
            parse_command("/wf --input foo")
                .unwrap_err()
                .contains("key=value")
        );
        assert!(parse_command("/wf =v").unwrap_err().contains("key=value"));
        assert!(parse_command("   ").unwrap_err().contains("empty"));
    }
}
