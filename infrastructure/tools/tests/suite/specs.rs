use awf_domain::ports::tools::ToolCall;
use awf_domain::ports::tools::ToolCallError;
use awf_domain::ports::tools::ToolProvider as _;
use tokio_util::sync::CancellationToken;

use crate::common::*;

#[test]
fn six_tools_with_minimal_hand_written_schemas() {
    let ws = Ws::new();
    let specs = ws.tools.tools();
    let names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, awf_tools::TOOL_NAMES);
    for s in &specs {
        let schema = s.input_schema.as_object().unwrap();
        assert_eq!(schema["type"], "object", "{}", s.name);
        assert!(!schema.contains_key("additionalProperties"), "{}", s.name);
        assert!(!schema.contains_key("$schema"), "{}", s.name);
        let props = schema["properties"].as_object().unwrap();
        for r in schema["required"].as_array().unwrap() {
            assert!(props.contains_key(r.as_str().unwrap()), "{}: {r}", s.name);
        }
        for (k, p) in props {
            assert!(
                p["type"].is_string(),
                "{}.{k}: one type, no type arrays",
                s.name
            );
        }
        assert!(!s.description.is_empty());
    }
    let edit = &specs[2].input_schema["properties"];
    assert!(edit.get("old").is_some() && edit.get("new").is_some());
}

#[tokio::test]
async fn an_unknown_tool_is_a_call_error() {
    let ws = Ws::new();
    let err = ws
        .tools
        .call(
            ToolCall {
                name: "Nope".to_owned(),
                ..ToolCall::default()
            },
            CancellationToken::new(),
        )
        .await;
    assert_eq!(err, Err(ToolCallError::UnknownTool("Nope".to_owned())));
}

#[test]
fn a_root_that_is_not_a_directory_is_refused_with_a_code() {
    let ws = Ws::new();
    let f = ws.write("file", "x");
    let err = awf_tools::BuiltinTools::new(&f).unwrap_err();
    assert_eq!(err.code(), awf_domain::ErrorCode::UserInputMissingFile);
    assert!(err.message().contains("not a directory"));
    let err = awf_tools::BuiltinTools::new(ws.path("missing")).unwrap_err();
    assert_eq!(err.code(), awf_domain::ErrorCode::UserInputMissingFile);
    assert!(!err.hints().is_empty());
}
