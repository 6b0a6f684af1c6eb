//! The hand-written JSON schemas of the six tools (`type`/`properties`/`required` and
//! descriptions only: no `$schema`, no type arrays, no `additionalProperties`).

use awf_domain::ports::tools::ToolSpec;
use serde_json::Value;
use serde_json::json;

fn spec(name: &str, description: &str, schema: Value) -> ToolSpec {
    ToolSpec {
        name: name.to_owned(),
        description: description.to_owned(),
        input_schema: schema,
    }
}

/// The six specs, in [`crate::TOOL_NAMES`] order.
pub(crate) fn all() -> Vec<ToolSpec> {
    vec![
        spec(
            "Read",
            "Read a text file inside the workspace. Lines are numbered like `cat -n` (number, tab, text). \
             Shows up to 2000 lines from `offset` (1-based line number); page with offset/limit. \
             Long lines and large outputs are cut, with a note saying where to continue. \
             Binary files are refused. Alias: file_path.",
            json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "File path, absolute or relative to the workspace root"},
                    "offset": {"type": "integer", "description": "1-based number of the first line to show", "minimum": 1},
                    "limit": {"type": "integer", "description": "Number of lines to show (default 2000)", "minimum": 1}
                },
                "required": ["path"]
            }),
        ),
        spec(
            "Write",
            "Write a whole file inside the workspace (created with its parent directories, or replaced \
             atomically keeping its permissions, BOM and CRLF line endings). Alias: file_path.",
            json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "File path, absolute or relative to the workspace root"},
                    "content": {"type": "string", "description": "The complete new content"}
                },
                "required": ["path", "content"]
            }),
        ),
        spec(
            "Edit",
            "Replace exact text in a file inside the workspace. `old` must match exactly once unless \
             replace_all is true; the number of replacements is reported. Literal text, not a regex. \
             Aliases: file_path, old_string, new_string.",
            json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "File path, absolute or relative to the workspace root"},
                    "old": {"type": "string", "description": "The exact text to replace (not empty)"},
                    "new": {"type": "string", "description": "The replacement text (different from old)"},
                    "replace_all": {"type": "boolean", "description": "Replace every occurrence (default false)", "default": false}
                },
                "required": ["path", "old", "new"]
            }),
        ),
        spec(
            "Bash",
            "Run a shell command in the workspace (stdin closed). Returns stdout, stderr and the exit code; \
             long output keeps its head and tail. Default timeout 120 s, at most 600 s; on timeout the \
             command and everything it started are stopped. Alias: timeout (milliseconds).",
            json!({
                "type": "object",
                "properties": {
                    "command": {"type": "string", "description": "The command line, run with $SHELL -c"},
                    "cwd": {"type": "string", "description": "Working directory inside the workspace (default: the root)"},
                    "timeout_seconds": {"type": "integer", "description": "Timeout in seconds (default 120, at most 600)", "minimum": 1},
                    "description": {"type": "string", "description": "What the command does, in a few words (not used)"}
                },
                "required": ["command"]
            }),
        ),
        spec(
            "Glob",
            "Find files inside the workspace by glob pattern (`**` for any depth, e.g. `src/**/*.rs`). \
             Returns absolute paths, most recently modified first; honours .gitignore. Alias: path.",
            json!({
                "type": "object",
                "properties": {
                    "pattern": {"type": "string", "description": "Glob pattern, relative to cwd (or absolute)"},
                    "cwd": {"type": "string", "description": "Directory to search from (default: the workspace root)"}
                },
                "required": ["pattern"]
            }),
        ),
        spec(
            "Grep",
            "Search file contents with a regular expression (Rust regex syntax), skipping .gitignored, \
             hidden and binary files. output_mode: files_with_matches (default), content \
             (file:line:text) or count.",
            json!({
                "type": "object",
                "properties": {
                    "pattern": {"type": "string", "description": "Regular expression"},
                    "path": {"type": "string", "description": "File or directory to search (default: the workspace root)"},
                    "glob": {"type": "string", "description": "Only files matching this glob (e.g. `*.rs`, `*.{ts,tsx}`)"},
                    "type": {"type": "string", "description": "Only files of this ripgrep type (e.g. rust, py, js)"},
                    "output_mode": {"type": "string", "enum": ["files_with_matches", "content", "count"], "description": "What to return (default files_with_matches)"},
                    "case_insensitive": {"type": "boolean", "description": "Ignore case (alias -i)", "default": false},
                    "-A": {"type": "integer", "description": "Lines of context after each match (content mode)", "minimum": 0},
                    "-B": {"type": "integer", "description": "Lines of context before each match (content mode)", "minimum": 0},
                    "-C": {"type": "integer", "description": "Lines of context before and after each match (content mode)", "minimum": 0},
                    "head_limit": {"type": "integer", "description": "Return at most this many entries (default and maximum 1000)", "minimum": 1}
                },
                "required": ["pattern"]
            }),
        ),
    ]
}
