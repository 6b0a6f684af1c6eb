//! Differential fuzzing of `shell_quote: true` (h6): generated command texts mixing
//! here-documents, substitutions, `case`, arithmetic, `let`/`declare`/`read`/`test`,
//! redirections, quotes and backslashes, with a value in them, rendered with hostile values
//! and run with a real `bash -c` and `sh -c` (dash): no marker file may appear. Nothing prints
//! the value (`:` stands for every command), so no substitution's output run as a command
//! can create the marker: only the value read as shell code does. A few texts run with every
//! test run; the long round by hand:
//! `AWF_FUZZ_N=2000 AWF_FUZZ_SEED=1 cargo test -p awf-template --lib fuzz -- --ignored --nocapture`.

use awf_domain::ports::template::Interpolator;

use crate::GoTemplates;
use crate::test_support::Data;

const FRAGMENTS: &[&str] = &[
    ": V",
    ": \"V\"",
    ": 'V'",
    ": \"$(: V)\"",
    ": `: V`",
    ": \"`: \"V\"`\"",
    ": <<EOF",
    ": <<'EOF'",
    ": <<-EOF",
    ": <<E\\\\OF",
    ": <<\"E\\\"OF\"",
    ": <<$'EOF'",
    ": <<E\\OF",
    ": <<\\EOF",
    ": << \"EOF\"",
    ": <<2",
    ": <<''",
    "let x=1<<2",
    "let \"x=1<<2\"",
    "declare -i y=1<<2",
    "test -v HOME <<EOF",
    "[ -v HOME ] <<EOF",
    "[[ -v HOME ]] <<EOF",
    "((z=1<<2))",
    ": $((1<<2))",
    ": $[1<<2]",
    "a[1<<2]=3",
    "x=([1<<2]=5)",
    ": $(: <<EOF)",
    ": \"$(: <<EOF)\"",
    ": `: <<EOF`",
    ": $(: <<EOF",
    ": `: <<EOF",
    "EOF",
    "E\\OF",
    "E\"OF",
    "$EOF",
    "2",
    "\tEOF",
    ")",
    "`",
    ")\"",
    "`\"",
    ": \"$(",
    ": $(",
    ": `",
    ": \"",
    ": '",
    "'",
    "\"",
    "case a in",
    "case V in",
    "  b) :;;",
    "  case) :;;",
    "  esac) :;;",
    "  in) :;;",
    "  (x) :;;",
    "  a) : V;;",
    "  *) : V",
    "esac",
    ";;",
    "#",
    "# '",
    "\\",
    "{",
    "}",
    "if true; then",
    "fi",
    "f() {",
    "for i in 1; do",
    "done",
    "read -r r <<< V",
    "read -r V",
    "declare V=1",
    "local V",
    "printf -v V %s x >/dev/null",
    "unset V",
    "declare -i n; n=V",
    "x=(V)",
    "x=([V]=1)",
    ": $((V))",
    ": ${HOME:-V}",
    ": $'V'",
    ": a\\",
    "V",
    "\"V\"",
    "'V'",
    "`V`",
    "$(V)",
    "<<EOF",
    "<<-'EOF'",
    "$(",
    "${",
    "$'",
    ">f read V",
    "2>/dev/null unset V",
    "command read V",
    "\\read V",
    "'declare' V",
    "# c",
    "\\\n",
    "x=1 read V",
    "{ read V; }",
    "if read V; then :; fi",
    "typeset -i m",
    "m=V",
    "m+=V",
    ": $((1<<2)) <<EOF",
    ": <<< V",
    ": ${x:-$(: V)}",
    "{{if .inputs.v}}",
    "{{else}}",
    "{{end}}",
    ": \"$(: <<EOF\nV\nEOF\n)\"",
    ": `: <<EOF\nV\nEOF\n`",
    "case V in",
    "  (esac) : V;;",
    "  V) :;;",
    ": <<EOF; : $(:\n: V)",
    ": $(( $(: V) ))",
    ": \"${x:-\"V\"}\"",
    ": \"a\\",
    "function f { read V; }",
    "time read V",
    "! read V",
    ": <(: V)",
    "[[ V =~ a ]]",
    "[[ $x == V ]]",
    ": $\"V\"",
    "exec 3<<EOF",
    ": {{- .inputs.v -}} x",
    "{{.inputs.v -}}\nEOF",
    "E{{- .inputs.v}}",
    "if : <<EOF; then",
    "while false; do",
    "select s in V; do break; done",
    ": \"`: \\\"V\\\"`\"",
    "x=$(: <<'EOF'",
    ": ${#V}",
    "declare -a arr=(V)",
    "local -a 'x=(V)'",
    "cat <<EOF |",
    "  : V",
    ": $((1 + V))",
    "2>&1 read V",
    ">|f read V",
    "time -p read V",
    "x=(V) read V",
    "$(:) read V",
    "arr+=(V)",
    "declare -a arr='(V)'",
];

const SEPARATORS: &[&str] = &[
    "\n", "\n", "\n", " ", "; ", "", " | ", " && ", "\n\t", "\r\n", " \\\n",
];

const PAYLOADS: &[&str] = &[
    "$(touch PWNED)",
    "`touch PWNED`",
    "a; touch PWNED #",
    "x\ntouch PWNED\n",
    "'\ntouch PWNED\n'",
    "\"\ntouch PWNED\n\"",
    "EOF\ntouch PWNED",
    "2\ntouch PWNED",
    "E\\OF\ntouch PWNED",
    "E\"OF\ntouch PWNED",
    "$EOF\ntouch PWNED",
    "\tEOF\ntouch PWNED",
    ")\ntouch PWNED\n(",
    "`\ntouch PWNED\n`",
    "x\\\ntouch PWNED",
    "a[$(touch PWNED)]",
    "esac\ntouch PWNED\ncase a in",
    ";; esac; touch PWNED; case a in a)",
    "\n\ntouch PWNED\n",
    "EOF\n)\ntouch PWNED\ncat <<EOF",
    "'\"`$(touch PWNED)`\"'",
];

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn pick<'a>(&mut self, from: &[&'a str]) -> &'a str {
        from[(self.next() % from.len() as u64) as usize]
    }
}

fn template(rng: &mut Rng) -> String {
    let n = 1 + rng.next() % 7;
    let mut t = String::new();
    for k in 0..n {
        if k > 0 {
            t.push_str(rng.pick(SEPARATORS));
        }
        t.push_str(rng.pick(FRAGMENTS));
    }
    if rng.next().is_multiple_of(2) {
        t.push('\n');
        t.push_str(rng.pick(&[": V", ": \"V\"", ": 'V'", ": <<EOF\nV\nEOF"]));
    }
    if !t.contains('V') {
        t.push_str("\n: V");
    }
    t.replace('V', "{{.inputs.v}}")
}

fn run(shell: &str, text: &str) -> bool {
    let dir = match tempfile::tempdir() {
        Ok(d) => d,
        Err(e) => panic!("tempdir: {e}"),
    };
    let _ = std::process::Command::new("timeout")
        .args(["5", shell, "-c", text])
        .current_dir(dir.path())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .env("HOME", "/home-of-awf-fuzz")
        .status();
    dir.path().join("PWNED").exists()
}

/// What a fuzzing round found: the runs, the refusals and the values that ran.
struct Round {
    ran: usize,
    refused: usize,
    failures: Vec<(String, &'static str, &'static str)>,
}

/// `n` generated texts (from `seed`), each rendered with every value of `payloads` (under
/// the mode or not) and run with bash and dash.
fn round(n: usize, seed: u64, payloads: &[&'static str], mode: bool) -> Round {
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let mut r = Round {
        ran: 0,
        refused: 0,
        failures: Vec::new(),
    };
    for k in 0..n {
        if k % 250 == 249 {
            eprintln!("template {k}: ran {}, refused {}", r.ran, r.refused);
        }
        let t = template(&mut rng);
        for payload in payloads {
            let mut d = Data::new();
            d.inputs.insert("v".into(), serde_json::json!(payload));
            let rendered = if mode {
                GoTemplates::new().render_shell_quoted(&t, &d.scope())
            } else {
                GoTemplates::new().render_shell(&t, &d.scope())
            };
            let Ok(text) = rendered else {
                r.refused += 1;
                continue;
            };
            for shell in ["bash", "sh"] {
                r.ran += 1;
                if run(shell, &text) {
                    if mode {
                        eprintln!(
                            "PWNED {shell}: template {t:?} payload {payload:?}\n{text}\n----"
                        );
                    }
                    r.failures.push((t.clone(), *payload, shell));
                }
            }
        }
    }
    r
}

/// A few generated texts on every test run: no value runs under the mode; without it, some
/// do (the harness sees a value that runs).
#[test]
fn generated_commands_never_run_the_value() {
    let payloads = &PAYLOADS[..8];
    let r = round(25, 7, payloads, true);
    assert!(r.failures.is_empty(), "{:#?}", r.failures);
    assert!(r.ran > 25, "ran {}, refused {}", r.ran, r.refused);
    let unquoted = round(10, 7, payloads, false);
    assert!(!unquoted.failures.is_empty(), "ran {}", unquoted.ran);
}

/// Every payload against a second seed's texts on every test run (a short round); the long
/// round by hand: `AWF_FUZZ_N` texts from `AWF_FUZZ_SEED`.
#[test]
fn fuzz_shell_quote_against_bash_and_dash() {
    let n: usize = std::env::var("AWF_FUZZ_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(6);
    let seed: u64 = std::env::var("AWF_FUZZ_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    let r = round(n, seed, PAYLOADS, true);
    eprintln!(
        "ran {}, refused {}, failures {}",
        r.ran,
        r.refused,
        r.failures.len()
    );
    assert!(r.failures.is_empty(), "{:#?}", r.failures);
    assert!(r.ran > n, "ran {}, refused {}", r.ran, r.refused);
}
