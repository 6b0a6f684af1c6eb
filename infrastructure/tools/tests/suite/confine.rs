//! Confinement: `..`, absolute paths outside, symlink escapes, a sibling sharing the root's
//! prefix, dangling-link writes, and a root reached through a symlink.

use serde_json::json;

use crate::common::*;

#[tokio::test]
async fn dotdot_and_absolute_paths_outside_are_refused() {
    let ws = Ws::new();
    let secret = ws.outside().join("secret.txt");
    std::fs::write(&secret, "top secret").unwrap();
    std::fs::create_dir(ws.path("sub")).unwrap();
    for p in [
        json!("../secret.txt"),
        json!("sub/../../secret.txt"),
        json!(secret),
        json!("/etc/passwd"),
    ] {
        let out = ws.call("Read", json!({"path": p})).await;
        assert_err(&out, "outside the workspace root");
        assert!(!out.text.contains("top secret"));
    }
    let out = ws
        .call("Write", json!({"path": "../evil.txt", "content": "x"}))
        .await;
    assert_err(&out, "outside the workspace root");
    assert!(!ws.outside().join("evil.txt").exists());
    let out = ws
        .call("Edit", json!({"path": secret, "old": "top", "new": "no"}))
        .await;
    assert_err(&out, "outside the workspace root");
    assert_eq!(std::fs::read_to_string(&secret).unwrap(), "top secret");
    let out = ws
        .call(
            "Write",
            json!({"path": "newdir/../../evil2.txt", "content": "x"}),
        )
        .await;
    assert!(out.is_error, "{}", out.text);
    assert!(!ws.outside().join("evil2.txt").exists());
}

/// A path leading out of the root is refused as outside whether it exists or not (breaker:
/// `../../../../etc/nothing` answered "does not exist", as if it had been looked for).
#[tokio::test]
async fn a_missing_path_outside_the_root_is_said_to_be_outside() {
    let ws = Ws::new();
    for p in [
        "../no-such-file",
        "sub/../../../../etc/no-such-file",
        "/no/such/dir/f",
    ] {
        let out = ws.call("Read", json!({"path": p})).await;
        assert_err(&out, "outside the workspace root");
        assert!(!out.text.contains("does not exist"), "{}", out.text);
    }
    let out = ws.call("Read", json!({"path": "missing.txt"})).await;
    assert_err(&out, "missing.txt does not exist");
}

#[tokio::test]
async fn a_sibling_sharing_the_roots_prefix_is_outside() {
    let ws = Ws::new();
    // root is <tmp>/ws; <tmp>/ws2 shares its prefix as a string.
    let sib = ws.outside().join("ws2");
    std::fs::create_dir(&sib).unwrap();
    std::fs::write(sib.join("f"), "sibling").unwrap();
    let abs = sib.join("f");
    assert_err(
        &ws.call("Read", json!({"path": abs})).await,
        "outside the workspace root",
    );
    assert_err(
        &ws.call("Read", json!({"path": "../ws2/f"})).await,
        "outside the workspace root",
    );
    assert_err(
        &ws.call("Write", json!({"path": sib.join("g"), "content": "x"}))
            .await,
        "outside the workspace root",
    );
    assert!(!sib.join("g").exists());
    assert_err(
        &ws.call("Bash", json!({"command": "pwd", "cwd": sib})).await,
        "outside the workspace root",
    );
    assert_err(
        &ws.call("Glob", json!({"pattern": "*", "cwd": sib})).await,
        "outside the workspace root",
    );
    assert_err(
        &ws.call("Grep", json!({"pattern": "sibling", "path": sib}))
            .await,
        "outside the workspace root",
    );
}

#[tokio::test]
async fn symlink_escapes_are_refused() {
    let ws = Ws::new();
    let out_dir = ws.outside().join("elsewhere");
    std::fs::create_dir(&out_dir).unwrap();
    std::fs::write(out_dir.join("s.txt"), "outside data").unwrap();
    std::os::unix::fs::symlink(out_dir.join("s.txt"), ws.path("file-link")).unwrap();
    std::os::unix::fs::symlink(&out_dir, ws.path("dir-link")).unwrap();
    let out = ws.call("Read", json!({"path": "file-link"})).await;
    assert_err(&out, "resolves to");
    assert!(!out.text.contains("outside data"));
    assert_err(
        &ws.call("Read", json!({"path": "dir-link/s.txt"})).await,
        "outside the workspace root",
    );
    assert_err(
        &ws.call("Write", json!({"path": "file-link", "content": "x"}))
            .await,
        "outside the workspace root",
    );
    assert_err(
        &ws.call("Write", json!({"path": "dir-link/new.txt", "content": "x"}))
            .await,
        "outside the workspace root",
    );
    assert!(!out_dir.join("new.txt").exists());
    assert_eq!(
        std::fs::read_to_string(out_dir.join("s.txt")).unwrap(),
        "outside data"
    );
    assert_err(
        &ws.call("Bash", json!({"command": "pwd", "cwd": "dir-link"}))
            .await,
        "outside the workspace root",
    );
    assert_err(
        &ws.call("Glob", json!({"pattern": "*", "cwd": "dir-link"}))
            .await,
        "outside the workspace root",
    );
    // Walkers do not follow links out of the root.
    let out = ws.call("Grep", json!({"pattern": "outside data"})).await;
    assert_eq!(ok(&out), "No matches found");
    let out = ws.call("Glob", json!({"pattern": "**/*"})).await;
    assert_eq!(ok(&out), "No files found");
}

#[tokio::test]
async fn dangling_links_are_never_written_through() {
    let ws = Ws::new();
    let target = ws.outside().join("created-by-link.txt");
    std::os::unix::fs::symlink(&target, ws.path("dangling")).unwrap();
    let out = ws
        .call("Write", json!({"path": "dangling", "content": "x"}))
        .await;
    assert_err(&out, "dangling");
    assert!(!target.exists());
    // Even one that would land inside the root.
    std::os::unix::fs::symlink(ws.path("later.txt"), ws.path("dangling-in")).unwrap();
    assert_err(
        &ws.call("Write", json!({"path": "dangling-in", "content": "x"}))
            .await,
        "dangling",
    );
    assert!(!ws.path("later.txt").exists());
    // A dangling link as a parent directory.
    std::os::unix::fs::symlink(ws.outside().join("nodir"), ws.path("dlink-dir")).unwrap();
    assert_err(
        &ws.call("Write", json!({"path": "dlink-dir/f.txt", "content": "x"}))
            .await,
        "dangling",
    );
    assert!(!ws.outside().join("nodir").exists());
    assert_err(
        &ws.call("Read", json!({"path": "dangling"})).await,
        "which does not exist",
    );
}

#[tokio::test]
async fn a_root_reached_through_a_symlink_is_not_falsely_rejected() {
    let ws = Ws::new();
    let link = ws.outside().join("root-link");
    std::os::unix::fs::symlink(&ws.root, &link).unwrap();
    let tools = awf_tools::BuiltinTools::new(&link).unwrap();
    assert_eq!(tools.root(), ws.root);
    ws.write("a.txt", "via link\n");
    let out = call_with(
        &tools,
        "Read",
        json!({"path": link.join("a.txt")}),
        Default::default(),
    )
    .await;
    assert_eq!(ok(&out), "     1\tvia link\n");
    let out = call_with(
        &tools,
        "Write",
        json!({"path": link.join("b.txt"), "content": "b"}),
        Default::default(),
    )
    .await;
    ok(&out);
    assert_eq!(std::fs::read_to_string(ws.path("b.txt")).unwrap(), "b");
}

#[tokio::test]
async fn fifos_are_refused_instead_of_blocking() {
    let ws = Ws::new();
    let fifo = ws.path("pipe");
    let st = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(st.success());
    let bound = std::time::Duration::from_secs(30);
    for (tool, args) in [
        ("Read", json!({"path": "pipe"})),
        ("Edit", json!({"path": "pipe", "old": "a", "new": "b"})),
        ("Write", json!({"path": "pipe", "content": "x"})),
    ] {
        let out = tokio::time::timeout(bound, ws.call(tool, args))
            .await
            .unwrap_or_else(|_| panic!("{tool} blocked on a FIFO"));
        assert_err(&out, "is a FIFO (named pipe), not a regular file");
    }
    // Grep walks past it.
    ws.write("f.txt", "needle\n");
    let out = tokio::time::timeout(bound, ws.call("Grep", json!({"pattern": "needle"})))
        .await
        .unwrap();
    assert_eq!(ok(&out), format!("{}\n", ws.path("f.txt").display()));
}

#[tokio::test]
async fn glob_patterns_cannot_climb_out() {
    let ws = Ws::new();
    std::fs::write(ws.outside().join("up.txt"), "x").unwrap();
    assert_err(
        &ws.call("Glob", json!({"pattern": "../*.txt"})).await,
        "outside the workspace root",
    );
    assert_err(
        &ws.call("Glob", json!({"pattern": "/etc/*"})).await,
        "outside the workspace root",
    );
    let out = ws.call("Glob", json!({"pattern": "**/../*.txt"})).await;
    assert_eq!(ok(&out), "No files found");
}

#[tokio::test]
async fn links_that_stay_inside_the_root_are_followed() {
    let ws = Ws::new();
    std::fs::create_dir(ws.path("real")).unwrap();
    std::os::unix::fs::symlink(ws.path("real"), ws.path("alias")).unwrap();
    ok(&ws
        .call("Write", json!({"path": "alias/new/f.txt", "content": "in"}))
        .await);
    assert_eq!(
        std::fs::read_to_string(ws.path("real/new/f.txt")).unwrap(),
        "in"
    );
    let out = ws.call("Read", json!({"path": "alias/new/f.txt"})).await;
    assert_eq!(ok(&out), "     1\tin\n");
    let out = ws
        .call("Bash", json!({"command": "pwd -P", "cwd": "alias"}))
        .await;
    assert!(ok(&out).starts_with(&format!("{}\n", ws.path("real").display())));
}
