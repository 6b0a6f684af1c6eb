//! Fixes from stop 34's trial leftovers.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use awf_tests::Sandbox;
use serde_json::json;

const INLINE: &str = "name: inl\nstates:\n  initial: verify\n  verify:\n    type: step\n    \
                      command: \"false\"\n    on_success: done\n    on_failure: {message: \
                      verify failed, status: 3}\n  done: {type: terminal}\n";

/// A run that ends at an inline `on_failure: {message, status}` names its terminal as the
/// text output does (`verify's on_failure`), in `awf run -f json` and in `awf status -f json`,
/// never the internal `__inline_error_verify` (user: it leaked into both).
#[test]
fn an_inline_failure_terminal_is_named_by_its_step_in_json() {
    let sb = Sandbox::new().unwrap();
    sb.write("inl.yaml", INLINE).unwrap();
    let r = sb.run(&["run", "inl.yaml", "-f", "json"]).unwrap();
    assert_eq!(r.code, 3, "{}{}", r.stdout, r.stderr);
    let doc = r.json().unwrap();
    assert_eq!(doc["terminal"], json!("verify's on_failure"), "{doc:#}");
    assert_eq!(
        doc["error"],
        json!({
            "code": "EXECUTION.WORKFLOW.FAILURE_TERMINAL",
            "message": "verify failed",
            "hints": []
        })
    );
    assert!(!r.stdout.contains("__inline_error"), "{}", r.stdout);
    let id = doc["run_id"].as_str().unwrap().to_owned();

    let st = sb.run(&["status", &id, "-f", "json"]).unwrap();
    assert_eq!(st.code, 0, "{}", st.stderr);
    let doc = st.json().unwrap();
    assert_eq!(doc["terminal"], json!("verify's on_failure"), "{doc:#}");
    assert!(!st.stdout.contains("__inline_error"), "{}", st.stdout);

    // The text output says the same.
    let st = sb.run(&["status", &id]).unwrap();
    assert!(
        st.stdout.contains("Terminal:  verify's on_failure"),
        "{}",
        st.stdout
    );

    // A named failure terminal keeps its name, and the error its `terminal` detail.
    sb.write(
        "named.yaml",
        "name: n\nstates:\n  initial: a\n  a: {type: step, command: \"false\", on_success: \
         done, on_failure: broken}\n  done: {type: terminal}\n  broken: {type: terminal, \
         status: failure, message: it broke}\n",
    )
    .unwrap();
    let r = sb.run(&["run", "named.yaml", "-f", "json"]).unwrap();
    let doc = r.json().unwrap();
    assert_eq!(doc["terminal"], json!("broken"), "{doc:#}");
    assert_eq!(doc["error"]["details"], json!({"terminal": "broken"}));
}
