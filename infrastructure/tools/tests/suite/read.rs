use std::io::Write as _;

use serde_json::json;

use crate::common::*;

#[tokio::test]
async fn numbers_lines_like_cat_n_and_accepts_the_claude_alias() {
    let ws = Ws::new();
    ws.write("a.txt", "one\ntwo\nthree\n");
    let out = ws.call("Read", json!({"path": "a.txt"})).await;
    assert_eq!(ok(&out), "     1\tone\n     2\ttwo\n     3\tthree\n");
    let abs = ws.path("a.txt");
    let out = ws
        .call("Read", json!({"file_path": abs, "offset": 2, "limit": 1}))
        .await;
    assert_eq!(
        ok(&out),
        "     2\ttwo\n[awf: showed lines 2-2; the file has more lines: read on with offset=3]\n"
    );
}

#[tokio::test]
async fn offset_past_the_end_and_empty_files_say_so() {
    let ws = Ws::new();
    ws.write("a.txt", "x\ny");
    ws.write("empty", "");
    let out = ws.call("Read", json!({"path": "a.txt", "offset": 9})).await;
    assert_eq!(
        ok(&out),
        "[awf: the file has 2 lines; offset 9 is past its end]\n"
    );
    let out = ws.call("Read", json!({"path": "empty"})).await;
    assert_eq!(ok(&out), "[awf: the file is empty]\n");
}

#[tokio::test]
async fn missing_and_wrong_typed_arguments_say_what_is_wrong() {
    let ws = Ws::new();
    assert_err(
        &ws.call("Read", json!({})).await,
        "missing required argument `path` (or file_path)",
    );
    assert_err(
        &ws.call("Read", json!({"path": 7})).await,
        "argument `path` must be a string, got a number",
    );
    assert_err(
        &ws.call("Read", json!({"path": "a", "limit": "many"})).await,
        "`limit` must be an integer of at least 1 (the number of lines to show), got a string (\"many\")",
    );
    // What the schema (`"minimum": 1`, `"type": "integer"`) refuses is refused, saying so.
    for (args, said) in [
        (
            json!({"path": "a", "offset": 0}),
            "argument `offset` must be an integer of at least 1 (the 1-based number of the first line), got 0",
        ),
        (
            json!({"path": "a", "offset": -1}),
            "argument `offset` must be an integer of at least 1 (the 1-based number of the first line), got -1",
        ),
        (
            json!({"path": "a", "offset": "2"}),
            "argument `offset` must be an integer of at least 1 (the 1-based number of the first line), got a string (\"2\")",
        ),
        (json!({"path": "a", "offset": 1.5}), "got 1.5"),
        (
            json!({"path": "a", "limit": 0}),
            "argument `limit` must be an integer of at least 1 (the number of lines to show), got 0",
        ),
    ] {
        assert_err(&ws.call("Read", args).await, said);
    }
}

#[tokio::test]
async fn missing_files_directories_and_binaries_are_errors() {
    let ws = Ws::new();
    assert_err(
        &ws.call("Read", json!({"path": "nope"})).await,
        "nope does not exist",
    );
    std::fs::create_dir(ws.path("d")).unwrap();
    assert_err(
        &ws.call("Read", json!({"path": "d"})).await,
        "is a directory",
    );
    let mut bin = b"text at first".to_vec();
    bin.extend_from_slice(&[0, 1, 2, 3]);
    ws.write("bin", &bin);
    assert_err(
        &ws.call("Read", json!({"path": "bin"})).await,
        "binary file",
    );
}

#[tokio::test]
async fn crlf_bom_and_non_utf8_files() {
    let ws = Ws::new();
    ws.write("crlf", "a\r\nb\r\n");
    assert_eq!(
        ok(&ws.call("Read", json!({"path": "crlf"})).await),
        "     1\ta\n     2\tb\n"
    );
    ws.write("bom", b"\xEF\xBB\xBFhello\n");
    assert_eq!(
        ok(&ws.call("Read", json!({"path": "bom"})).await),
        "     1\thello\n"
    );
    ws.write("latin1", b"caf\xe9\n");
    let out = ws.call("Read", json!({"path": "latin1"})).await;
    assert_eq!(
        ok(&out),
        "     1\tcaf\u{FFFD}\n[awf: the file is not valid UTF-8; invalid bytes are shown as U+FFFD]\n"
    );
}

#[tokio::test]
async fn long_lines_are_cut_on_character_boundaries() {
    let ws = Ws::new();
    // 3000 two-byte characters: a byte cut could split one.
    ws.write("wide", format!("{}\n", "é".repeat(3000)));
    let out = ws.call("Read", json!({"path": "wide"})).await;
    let text = ok(&out);
    assert!(
        !text.contains('\u{FFFD}'),
        "no replacement character: {text:.80}"
    );
    let first = text.lines().next().unwrap();
    let shown = first.trim_start().trim_start_matches("1\t");
    assert_eq!(shown, format!("{}… [line truncated]", "é".repeat(2000)));
    assert!(text.contains("1 line(s) longer than 2000 characters were cut"));
}

#[tokio::test]
async fn a_50_mb_file_stays_within_the_budget_and_memory_is_bounded() {
    let ws = Ws::new();
    let before = peak_rss_kib();
    // 50 MB of 100-byte lines, written in chunks (never held whole).
    let p = ws.path("big.txt");
    {
        let mut f = std::io::BufWriter::new(std::fs::File::create(&p).unwrap());
        let line = format!("{}\n", "x".repeat(99));
        for _ in 0..500_000 {
            f.write_all(line.as_bytes()).unwrap();
        }
    }
    // One 50 MB line without any line break.
    let q = ws.path("oneline.txt");
    {
        let mut f = std::io::BufWriter::new(std::fs::File::create(&q).unwrap());
        let chunk = "y".repeat(1 << 20);
        for _ in 0..50 {
            f.write_all(chunk.as_bytes()).unwrap();
        }
    }
    let budget = awf_tools::Limits::default().read_budget;
    let out = ws.call("Read", json!({"path": "big.txt"})).await;
    let text = ok(&out);
    // The 2000-line default page (about 216 KB) exceeds the budget: cut at a whole line.
    assert!(text.len() <= budget + 200, "{} bytes", text.len());
    let last = text.lines().rev().nth(1).unwrap();
    let n: u64 = last
        .trim_start()
        .split('\t')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        text.ends_with(&format!(
            "[awf: output cut at {budget} bytes after line {n}; read on with offset={}]\n",
            n + 1
        )),
        "{}",
        &text[text.len() - 200..]
    );
    let out = ws
        .call("Read", json!({"path": "big.txt", "offset": 499_999}))
        .await;
    assert!(ok(&out).starts_with("499999\t"), "{}", out.text);
    let out = ws.call("Read", json!({"path": "oneline.txt"})).await;
    let text = ok(&out);
    assert!(text.len() < 3000, "{} bytes", text.len());
    assert!(text.contains("… [line truncated]"));
    let grown_mib = (peak_rss_kib().saturating_sub(before)) / 1024;
    assert!(
        grown_mib < 30,
        "peak memory grew by {grown_mib} MiB reading 50 MB files"
    );
}

#[tokio::test]
async fn secrets_are_masked_in_read_and_grep_results() {
    let ws = Ws::new();
    let tools = ws
        .tools
        .clone()
        .with_masker(&awf_domain::mask::Masker::from_named([(
            "DB_PASSWORD",
            "pa55-word-xyz",
        )]));
    ws.write(".env.sample", "DB_PASSWORD=pa55-word-xyz\n");
    let out = call_with(
        &tools,
        "Read",
        json!({"path": ".env.sample"}),
        Default::default(),
    )
    .await;
    assert_eq!(ok(&out), "     1\tDB_PASSWORD=***\n");
    let out = call_with(
        &tools,
        "Grep",
        json!({"pattern": "pa55", "path": ".env.sample", "output_mode": "content"}),
        Default::default(),
    )
    .await;
    assert!(ok(&out).ends_with(":1:DB_PASSWORD=***\n"), "{}", out.text);
}

#[tokio::test]
async fn a_secret_straddling_a_line_cut_is_masked_whole_in_read_and_grep() {
    let ws = Ws::with_limits(awf_tools::Limits {
        read_line_chars: 20,
        grep_line_chars: 20,
        ..Default::default()
    });
    let tools = ws
        .tools
        .clone()
        .with_masker(&awf_domain::mask::Masker::from_named([(
            "API_TOKEN",
            "tok-abcdefghijkl0123",
        )]));
    ws.write(
        "cfg.txt",
        format!("{}tok-abcdefghijkl0123zzz\n", "a".repeat(15)),
    );
    let out = call_with(
        &tools,
        "Read",
        json!({"path": "cfg.txt"}),
        Default::default(),
    )
    .await;
    let text = ok(&out);
    assert!(text.contains("line truncated"), "{text}");
    assert!(
        !text.contains("tok-"),
        "a part of the secret leaked: {text}"
    );
    let out = call_with(
        &tools,
        "Grep",
        json!({"pattern": "zzz", "path": "cfg.txt", "output_mode": "content"}),
        Default::default(),
    )
    .await;
    let text = ok(&out);
    assert!(text.contains("line truncated"), "{text}");
    assert!(
        !text.contains("tok-"),
        "a part of the secret leaked: {text}"
    );
}

/// The offset the trailer of a page names, when there are more lines.
fn read_on(out: &str) -> Option<u64> {
    let i = out.rfind("read on with offset=")?;
    let digits: String = out[i + "read on with offset=".len()..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

#[tokio::test]
async fn paging_through_a_file_gives_what_fresh_reads_give_and_sees_a_rewrite() {
    // Pages cut by the byte budget and by `limit`, a BOM, CRLF lines and a long line: each
    // page of the paged tools (which resume at their mark) equals a read by fresh tools
    // (which count from the start).
    let mut text = String::from("\u{feff}");
    for i in 1..=3000 {
        if i == 1500 {
            text.push_str(&"x".repeat(5000));
            text.push('\n');
        } else if i % 7 == 0 {
            text.push_str(&format!("line {i} crlf\r\n"));
        } else {
            text.push_str(&format!("line {i}\n"));
        }
    }
    let limits = awf_tools::Limits {
        read_budget: 4096,
        ..awf_tools::Limits::default()
    };
    let ws = Ws::with_limits(limits.clone());
    ws.write("big.txt", &text);
    for limit in [None, Some(37u64)] {
        let mut offset = 1u64;
        let mut pages = 0;
        loop {
            let mut args = json!({"path": "big.txt", "offset": offset});
            if let Some(l) = limit {
                args["limit"] = json!(l);
            }
            let paged = ok(&ws.call("Read", args.clone()).await).to_owned();
            let fresh_tools =
                awf_tools::BuiltinTools::with_limits(&ws.root, limits.clone()).unwrap();
            let fresh = call_with(
                &fresh_tools,
                "Read",
                args,
                tokio_util::sync::CancellationToken::new(),
            )
            .await;
            assert_eq!(paged, ok(&fresh), "offset {offset}, limit {limit:?}");
            pages += 1;
            match read_on(&paged) {
                Some(next) => offset = next,
                None => break,
            }
        }
        assert!(pages > 10, "{pages} pages");
    }
    // A rewrite of the file between two pages (same size, other text) is read as it is now.
    let first = ok(&ws
        .call("Read", json!({"path": "big.txt", "limit": 100}))
        .await)
    .to_owned();
    let next = read_on(&first).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(20));
    ws.write("big.txt", text.replace("line ", "LINE "));
    let page = ok(&ws
        .call(
            "Read",
            json!({"path": "big.txt", "offset": next, "limit": 1}),
        )
        .await)
    .to_owned();
    assert!(
        page.starts_with(&format!("{next:>6}\tLINE {next}")),
        "{page}"
    );
    // Going back to an earlier offset reads it too.
    let again = ok(&ws
        .call("Read", json!({"path": "big.txt", "offset": 2, "limit": 1}))
        .await)
    .to_owned();
    assert!(again.starts_with("     2\tLINE 2\n"), "{again}");
}
