use std::os::unix::fs::PermissionsExt as _;

use serde_json::json;

use crate::common::*;

fn no_temp_files_left(dir: &std::path::Path) {
    let left: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".awf-write-"))
        .collect();
    assert!(left.is_empty(), "temp files left: {left:?}");
}

#[tokio::test]
async fn write_creates_files_with_their_parents_relative_to_the_root() {
    let ws = Ws::new();
    let out = ws
        .call("Write", json!({"path": "new/dir/f.txt", "content": "hi\n"}))
        .await;
    assert!(ok(&out).starts_with("Write: created "), "{}", out.text);
    assert_eq!(
        std::fs::read_to_string(ws.path("new/dir/f.txt")).unwrap(),
        "hi\n"
    );
    assert_eq!(mode(&ws.path("new/dir/f.txt")), 0o644);
    let out = ws
        .call(
            "Write",
            json!({"file_path": ws.path("g.txt"), "content": ""}),
        )
        .await;
    ok(&out);
    assert_eq!(std::fs::read(ws.path("g.txt")).unwrap(), b"");
    no_temp_files_left(&ws.root);
    assert_err(
        &ws.call("Write", json!({"path": "x"})).await,
        "missing required argument `content`",
    );
    std::fs::create_dir(ws.path("adir")).unwrap();
    assert_err(
        &ws.call("Write", json!({"path": "adir", "content": "x"}))
            .await,
        "is a directory",
    );
}

#[tokio::test]
async fn write_keeps_mode_bom_and_crlf_of_an_existing_file() {
    let ws = Ws::new();
    let p = ws.write("run.sh", b"\xEF\xBB\xBFecho a\r\necho b\r\n");
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o750)).unwrap();
    let out = ws
        .call(
            "Write",
            json!({"path": "run.sh", "content": "echo c\necho d\n"}),
        )
        .await;
    assert!(
        ok(&out).contains("kept the file's BOM and CRLF line endings"),
        "{}",
        out.text
    );
    assert_eq!(
        std::fs::read(&p).unwrap(),
        b"\xEF\xBB\xBFecho c\r\necho d\r\n"
    );
    assert_eq!(mode(&p), 0o750);
    no_temp_files_left(&ws.root);
}

#[tokio::test]
async fn write_through_a_link_inside_the_root_writes_its_target() {
    let ws = Ws::new();
    let target = ws.write("real.txt", "old");
    std::os::unix::fs::symlink(&target, ws.path("link.txt")).unwrap();
    ok(&ws
        .call("Write", json!({"path": "link.txt", "content": "new"}))
        .await);
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "new");
    assert!(
        std::fs::symlink_metadata(ws.path("link.txt"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
}

#[tokio::test]
async fn edit_replaces_exactly_one_match_literally() {
    let ws = Ws::new();
    let p = ws.write("f.txt", "let price = cost;\nother\n");
    let out = ws
        .call(
            "Edit",
            json!({"path": "f.txt", "old": "cost", "new": "$1 $& $$0"}),
        )
        .await;
    assert!(
        ok(&out).starts_with("Edit: replaced 1 occurrence in "),
        "{}",
        out.text
    );
    assert_eq!(
        std::fs::read_to_string(&p).unwrap(),
        "let price = $1 $& $$0;\nother\n"
    );
    // Claude's names.
    let out = ws
        .call(
            "Edit",
            json!({"file_path": p, "old_string": "other", "new_string": "more"}),
        )
        .await;
    ok(&out);
    assert_eq!(
        std::fs::read_to_string(&p).unwrap(),
        "let price = $1 $& $$0;\nmore\n"
    );
    no_temp_files_left(&ws.root);
}

#[tokio::test]
async fn edit_fails_on_zero_or_several_matches_unless_replace_all() {
    let ws = Ws::new();
    let p = ws.write("f.txt", "a x a x a\n");
    assert_err(
        &ws.call("Edit", json!({"path": "f.txt", "old": "zz", "new": "y"}))
            .await,
        "`old` was not found",
    );
    assert_err(
        &ws.call("Edit", json!({"path": "f.txt", "old": "a", "new": "b"}))
            .await,
        "matches 3 places",
    );
    assert_eq!(std::fs::read_to_string(&p).unwrap(), "a x a x a\n");
    let out = ws
        .call(
            "Edit",
            json!({"path": "f.txt", "old": "a", "new": "b", "replace_all": true}),
        )
        .await;
    assert!(ok(&out).contains("replaced 3 occurrences"), "{}", out.text);
    assert_eq!(std::fs::read_to_string(&p).unwrap(), "b x b x b\n");
}

#[tokio::test]
async fn edit_rejects_empty_old_and_old_equal_new() {
    let ws = Ws::new();
    let p = ws.write("f.txt", "abc");
    assert_err(
        &ws.call("Edit", json!({"path": "f.txt", "old": "", "new": "x"}))
            .await,
        "`old` is empty",
    );
    assert_err(
        &ws.call("Edit", json!({"path": "f.txt", "old": "b", "new": "b"}))
            .await,
        "are the same",
    );
    assert_err(
        &ws.call("Edit", json!({"path": "f.txt", "old": "b", "new": 3}))
            .await,
        "`new` must be a string",
    );
    assert_eq!(std::fs::read_to_string(&p).unwrap(), "abc");
}

#[tokio::test]
async fn edit_keeps_crlf_bom_mode_and_non_utf8_bytes() {
    let ws = Ws::new();
    let p = ws.write(
        "win.txt",
        b"\xEF\xBB\xBFline one\r\nline two\r\ncaf\xe9\r\n",
    );
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    // `old` written with `\n`: matched through the CRLF fallback.
    let out = ws
        .call(
            "Edit",
            json!({"path": "win.txt", "old": "line one\nline two", "new": "first\nsecond"}),
        )
        .await;
    assert!(ok(&out).contains("CRLF"), "{}", out.text);
    assert_eq!(
        std::fs::read(&p).unwrap(),
        b"\xEF\xBB\xBFfirst\r\nsecond\r\ncaf\xe9\r\n"
    );
    assert_eq!(mode(&p), 0o755);
}

#[tokio::test]
async fn edit_refuses_files_over_its_size_limit() {
    let ws = Ws::with_limits(awf_tools::Limits {
        edit_max_file: 10,
        ..awf_tools::Limits::default()
    });
    let p = ws.write("big.txt", "0123456789abc");
    assert_err(
        &ws.call("Edit", json!({"path": "big.txt", "old": "abc", "new": "x"}))
            .await,
        "is 13 bytes, over the 10 bytes Edit rewrites",
    );
    assert_eq!(std::fs::read_to_string(&p).unwrap(), "0123456789abc");
}

#[tokio::test]
async fn write_of_a_path_ending_in_a_slash_is_an_error_and_creates_nothing() {
    let ws = Ws::new();
    let out = ws
        .call("Write", json!({"path": "newdir/", "content": "x"}))
        .await;
    assert_err(&out, "ends with `/`");
    assert!(!ws.path("newdir").exists());
}

#[tokio::test]
async fn edit_and_write_of_a_hard_linked_file_say_the_link_is_broken() {
    let ws = Ws::new();
    let a = ws.write("a.txt", "one two\n");
    std::fs::hard_link(&a, ws.path("b.txt")).unwrap();
    let out = ws
        .call("Edit", json!({"path": "a.txt", "old": "one", "new": "1"}))
        .await;
    assert!(!out.is_error, "{}", out.text);
    assert!(out.text.contains("2 hard links"), "{}", out.text);
    assert_eq!(std::fs::read_to_string(&a).unwrap(), "1 two\n");
    assert_eq!(
        std::fs::read_to_string(ws.path("b.txt")).unwrap(),
        "one two\n"
    );
    let out = ws
        .call("Write", json!({"path": "a.txt", "content": "fresh"}))
        .await;
    assert!(!out.is_error, "{}", out.text);
    assert!(!out.text.contains("hard links"), "{}", out.text);
}

#[tokio::test]
async fn write_and_edit_keep_the_owner_when_the_process_may() {
    use std::os::unix::fs::MetadataExt as _;
    if !nix_is_root() {
        // Only root may give a file to another user; nothing to check otherwise.
        return;
    }
    let ws = Ws::new();
    let p = ws.write("owned.txt", "alpha\n");
    std::os::unix::fs::chown(&p, Some(4242), Some(4343)).unwrap();
    let out = ws
        .call("Write", json!({"path": "owned.txt", "content": "beta\n"}))
        .await;
    assert!(!out.is_error, "{}", out.text);
    let m = std::fs::metadata(&p).unwrap();
    assert_eq!((m.uid(), m.gid()), (4242, 4343));
    let out = ws
        .call(
            "Edit",
            json!({"path": "owned.txt", "old": "beta", "new": "gamma"}),
        )
        .await;
    assert!(!out.is_error, "{}", out.text);
    let m = std::fs::metadata(&p).unwrap();
    assert_eq!((m.uid(), m.gid()), (4242, 4343));
}

fn nix_is_root() -> bool {
    std::fs::metadata("/proc/self")
        .map(|m| std::os::unix::fs::MetadataExt::uid(&m) == 0)
        .unwrap_or(false)
}
