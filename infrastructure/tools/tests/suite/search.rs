use std::time::Duration;
use std::time::SystemTime;

use awf_tools::Limits;
use serde_json::json;

use crate::common::*;

fn age(p: &std::path::Path, secs_ago: u64) {
    let f = std::fs::File::options().write(true).open(p).unwrap();
    f.set_modified(SystemTime::now() - Duration::from_secs(secs_ago))
        .unwrap();
}

#[tokio::test]
async fn glob_recurses_with_double_star_newest_first() {
    let ws = Ws::new();
    let old = ws.write("a/old.rs", "");
    let new = ws.write("a/b/new.rs", "");
    let top = ws.write("top.rs", "");
    ws.write("a/readme.md", "");
    age(&old, 3000);
    age(&new, 10);
    age(&top, 1000);
    let out = ws.call("Glob", json!({"pattern": "**/*.rs"})).await;
    assert_eq!(
        ok(&out),
        format!("{}\n{}\n{}\n", new.display(), top.display(), old.display())
    );
    // `*` does not cross `/`.
    let out = ws.call("Glob", json!({"pattern": "*.rs"})).await;
    assert_eq!(ok(&out), format!("{}\n", top.display()));
    // A literal leading directory, relative or absolute, and `path` as Claude names it.
    let out = ws.call("Glob", json!({"pattern": "a/**/*.rs"})).await;
    assert_eq!(ok(&out), format!("{}\n{}\n", new.display(), old.display()));
    let abs = format!("{}/a/*.md", ws.root.display());
    let out = ws.call("Glob", json!({"pattern": abs})).await;
    assert_eq!(ok(&out), format!("{}\n", ws.path("a/readme.md").display()));
    let out = ws
        .call("Glob", json!({"pattern": "*.rs", "path": "a"}))
        .await;
    assert_eq!(ok(&out), format!("{}\n", old.display()));
    assert_eq!(
        ok(&ws.call("Glob", json!({"pattern": "*.zz"})).await),
        "No files found"
    );
    assert_err(
        &ws.call("Glob", json!({"pattern": "a/[z"})).await,
        "invalid pattern",
    );
    assert_err(
        &ws.call("Glob", json!({})).await,
        "missing required argument `pattern`",
    );
}

#[tokio::test]
async fn glob_honours_gitignore_and_caps_results() {
    let ws = Ws::with_limits(Limits {
        glob_results: 2,
        ..Limits::default()
    });
    ws.write(".gitignore", "target/\n");
    ws.write("target/x.txt", "");
    ws.write(".hidden.txt", "");
    for i in 0..4 {
        ws.write(&format!("f{i}.txt"), "");
    }
    let out = ws.call("Glob", json!({"pattern": "**/*.txt"})).await;
    let text = ok(&out);
    assert!(!text.contains("target"), "{text}");
    assert_eq!(text.lines().count(), 3, "{text}");
    assert!(
        text.ends_with(
            "[awf: 2 of 5 files shown (newest first); narrow the pattern or the directory]\n"
        ),
        "{text}"
    );
}

#[tokio::test]
async fn grep_modes_and_filters() {
    let ws = Ws::new();
    let a = ws.write("src/a.rs", "fn main() {}\nlet Foo = 1;\nfoo again\n");
    let b = ws.write("src/b.py", "foo = 2\n");
    ws.write(".hidden/h.rs", "foo\n");
    ws.write(".gitignore", "ignored/\n");
    ws.write("ignored/i.rs", "foo\n");
    let mut bin = b"foo".to_vec();
    bin.push(0);
    ws.write("bin.dat", &bin);

    let out = ws.call("Grep", json!({"pattern": "foo"})).await;
    assert_eq!(ok(&out), format!("{}\n{}\n", a.display(), b.display()));
    let out = ws
        .call(
            "Grep",
            json!({"pattern": "foo", "output_mode": "content", "-i": true}),
        )
        .await;
    assert_eq!(
        ok(&out),
        format!(
            "{a}:2:let Foo = 1;\n{a}:3:foo again\n{b}:1:foo = 2\n",
            a = a.display(),
            b = b.display()
        )
    );
    let out = ws
        .call(
            "Grep",
            json!({"pattern": "foo", "output_mode": "count", "case_insensitive": true}),
        )
        .await;
    assert_eq!(ok(&out), format!("{}:2\n{}:1\n", a.display(), b.display()));
    let out = ws
        .call("Grep", json!({"pattern": "foo", "glob": "*.py"}))
        .await;
    assert_eq!(ok(&out), format!("{}\n", b.display()));
    let out = ws
        .call("Grep", json!({"pattern": "foo", "type": "rust"}))
        .await;
    assert_eq!(ok(&out), format!("{}\n", a.display()));
    let out = ws
        .call(
            "Grep",
            json!({"pattern": "foo", "path": "src/b.py", "output_mode": "content"}),
        )
        .await;
    assert_eq!(ok(&out), format!("{}:1:foo = 2\n", b.display()));
    let out = ws
        .call(
            "Grep",
            json!({"pattern": "o", "output_mode": "content", "head_limit": 1}),
        )
        .await;
    assert!(
        ok(&out).starts_with(&format!(
            "{}:2:let Foo = 1;\n[awf: results cut at 1 entries",
            a.display()
        )),
        "{}",
        out.text
    );
    assert_eq!(
        ok(&ws.call("Grep", json!({"pattern": "zzz"})).await),
        "No matches found"
    );
    assert_err(
        &ws.call("Grep", json!({"pattern": "("})).await,
        "invalid regular expression",
    );
    assert_err(
        &ws.call("Grep", json!({"pattern": "x", "type": "nolang"}))
            .await,
        "unknown file type",
    );
    assert_err(
        &ws.call("Grep", json!({"pattern": "x", "output_mode": "lines"}))
            .await,
        "output_mode must be one of",
    );
}

#[tokio::test]
async fn grep_cuts_long_lines_and_reads_non_utf8_files() {
    let ws = Ws::new();
    let long = ws.write(
        "long.txt",
        format!("{}needle{}\n", "x".repeat(5000), "y".repeat(5000)),
    );
    let latin = ws.write("latin.txt", b"caf\xe9 needle\n");
    let out = ws
        .call(
            "Grep",
            json!({"pattern": "needle", "output_mode": "content"}),
        )
        .await;
    let text = ok(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[0],
        format!("{}:1:caf\u{FFFD} needle", latin.display())
    );
    assert!(lines[1].starts_with(&format!("{}:1:xxx", long.display())));
    assert!(lines[1].ends_with("… [line truncated]"));
    assert!(lines[1].len() < 1200, "{}", lines[1].len());
}

#[tokio::test]
async fn grep_context_lines_like_ripgrep() {
    let ws = Ws::new();
    let f = ws.write("f.txt", "1\n2\nhit a\n4\n5\n6\n7\nhit b\n9\n");
    let out = ws
        .call(
            "Grep",
            json!({"pattern": "hit", "output_mode": "content", "-B": 1, "-A": 1}),
        )
        .await;
    let p = f.display();
    assert_eq!(
        ok(&out),
        format!("{p}-2-2\n{p}:3:hit a\n{p}-4-4\n--\n{p}-7-7\n{p}:8:hit b\n{p}-9-9\n")
    );
    let out = ws
        .call(
            "Grep",
            json!({"pattern": "hit b", "output_mode": "content", "-C": 3}),
        )
        .await;
    assert_eq!(
        ok(&out),
        format!("{p}-5-5\n{p}-6-6\n{p}-7-7\n{p}:8:hit b\n{p}-9-9\n")
    );
}

#[tokio::test]
async fn glob_reads_no_ignore_file_above_the_root() {
    let ws = Ws::new();
    // Outside the root: never read, so it hides nothing inside.
    std::fs::write(ws.outside().join(".gitignore"), "*.txt\n").unwrap();
    let a = ws.write("a.txt", "");
    // Between the root and the base: read (it is inside the root).
    ws.write("sub/.gitignore", "hidden.txt\n");
    let kept = ws.write("sub/deeper/kept.txt", "");
    ws.write("sub/deeper/hidden.txt", "");
    let out = ws.call("Glob", json!({"pattern": "**/*.txt"})).await;
    let text = ok(&out);
    assert!(text.contains(&a.display().to_string()), "{text}");
    assert!(!text.contains("hidden.txt"), "{text}");
    let out = ws
        .call("Glob", json!({"pattern": "*.txt", "path": "sub/deeper"}))
        .await;
    assert_eq!(ok(&out), format!("{}\n", kept.display()));
}

/// A match past the first MiB of a line is found, counted and listed (trial 76: such lines
/// were searched in their first MiB only, silently).
#[tokio::test]
async fn grep_finds_a_match_anywhere_in_a_line_longer_than_a_mib() {
    let ws = Ws::new();
    let q = "q".repeat(1 << 20);
    let only = ws.write("g/only.txt", format!("{q} NEEDLE\n"));
    let mixed = ws.write(
        "g/mixed.txt",
        format!("first NEEDLE\n{q}NEEDLE two\nthird NEEDLE\n"),
    );
    // A long line without a match, one whose match is its CRLF end (`$` before the `\r`),
    // and one anchored at its start and end.
    ws.write("h/none.txt", format!("{q}{q}\n"));
    let crlf = ws.write("h/crlf.txt", format!("{q}NEEDLE\r\n"));
    let anchored = ws.write("h/anchored.txt", format!("{q} NEEDLE"));
    let grep = |args: serde_json::Value| ws.call("Grep", args);
    let out = grep(json!({"pattern": "NEEDLE", "path": "g", "output_mode": "count"})).await;
    assert_eq!(
        ok(&out),
        format!("{}:3\n{}:1\n", mixed.display(), only.display())
    );
    let out = grep(json!({"pattern": "NEEDLE", "path": "g"})).await;
    assert_eq!(
        ok(&out),
        format!("{}\n{}\n", mixed.display(), only.display())
    );
    let out = grep(json!({"pattern": "NEEDLE", "path": "g", "output_mode": "content"})).await;
    let text = ok(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 5, "{}", &text[..text.len().min(600)]);
    let (m, o) = (mixed.display(), only.display());
    assert_eq!(lines[0], format!("{m}:1:first NEEDLE"));
    assert!(lines[1].starts_with(&format!("{m}:2:qqq")));
    assert!(lines[1].ends_with("… [line truncated]"));
    assert_eq!(lines[2], format!("{m}:3:third NEEDLE"));
    assert!(lines[3].starts_with(&format!("{o}:1:qqq")));
    assert!(lines[3].ends_with("… [line truncated]"));
    assert_eq!(
        lines[4],
        "[awf: 2 line(s) longer than 1000 characters were cut]"
    );
    let out = grep(json!({"pattern": "^q+ ?NEEDLE$", "path": "h"})).await;
    assert_eq!(
        ok(&out),
        format!("{}\n{}\n", anchored.display(), crlf.display())
    );
    let out = grep(
        json!({"pattern": "needle", "path": "h", "case_insensitive": true, "output_mode": "count"}),
    )
    .await;
    assert_eq!(
        ok(&out),
        format!("{}:1\n{}:1\n", anchored.display(), crlf.display())
    );
}

/// A long line the streaming search cannot decide (a Unicode `\b` on non-ASCII text) is
/// reported in a note, never skipped silently.
#[tokio::test]
async fn grep_says_so_when_a_long_line_cannot_be_searched_whole() {
    let ws = Ws::new();
    let f = ws.write("u.txt", format!("{}é NEEDLE\n", "q ".repeat(1 << 19)));
    let out = ws
        .call(
            "Grep",
            json!({"pattern": r"\bNEEDLE\b", "output_mode": "count"}),
        )
        .await;
    let text = ok(&out);
    assert!(text.starts_with("No matches found\n[awf: "), "{text}");
    assert!(
        text.contains(&format!("{}: 1 line(s) longer than 1048576 bytes could be searched in their first 1048576 bytes only", f.display())),
        "{text}"
    );
    assert!(text.contains("(?-u:\\b)"), "{text}");
    // Searched so, the same line is found.
    let out = ws
        .call(
            "Grep",
            json!({"pattern": r"(?-u:\b)NEEDLE(?-u:\b)", "output_mode": "count"}),
        )
        .await;
    assert_eq!(ok(&out), format!("{}:1\n", f.display()));
}
