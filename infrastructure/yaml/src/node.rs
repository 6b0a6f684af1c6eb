//! A YAML document as a tree of positioned nodes, built from `yaml-rust2`'s marked events.
//!
//! Scalars keep their source text and style so that string fields can accept any scalar
//! (`timeout: 30`) while typed fields resolve with YAML 1.2 core-schema rules (only
//! `true`/`false` are booleans). Duplicate mapping keys and syntax errors are reported with
//! 1-based line and column. Source: spec/workflow.md §1.2, §7.3.

use std::collections::HashMap;

use serde_json::Map;
use serde_json::Number;
use serde_json::Value;
use yaml_rust2::parser::Event;
use yaml_rust2::parser::Parser;
use yaml_rust2::parser::Tag;
use yaml_rust2::scanner::Marker;
use yaml_rust2::scanner::TScalarStyle;

/// A 1-based position in the source text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Pos {
    /// 1-based line.
    pub line: u32,
    /// 1-based column.
    pub column: u32,
}

impl Pos {
    fn from_marker(m: &Marker) -> Self {
        Self {
            line: u32::try_from(m.line()).unwrap_or(u32::MAX).max(1),
            column: u32::try_from(m.col()).unwrap_or(u32::MAX).saturating_add(1),
        }
    }
}

/// One node of the document.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    /// Where the node starts.
    pub pos: Pos,
    /// What it holds.
    pub kind: NodeKind,
}

/// Node contents.
#[derive(Debug, Clone, PartialEq)]
pub enum NodeKind {
    /// A scalar: its text, whether it was quoted or a block scalar, and an explicit tag.
    Scalar {
        /// Text as written (after unquoting / folding).
        text: String,
        /// Plain (unquoted) scalars are resolved to null/bool/int/float; others are strings.
        plain: bool,
        /// Explicit `!!tag` suffix, if any.
        tag: Option<String>,
    },
    /// A sequence.
    Seq(Vec<Node>),
    /// A mapping: (key text, key position, value), in file order.
    Map(Vec<MapEntry>),
}

/// One `key: value` pair.
#[derive(Debug, Clone, PartialEq)]
pub struct MapEntry {
    /// Key text (non-scalar keys are rejected while building).
    pub key: String,
    /// Position of the key.
    pub key_pos: Pos,
    /// The value.
    pub value: Node,
}

/// A scalar resolved with YAML 1.2 core-schema rules.
#[derive(Debug, Clone, PartialEq)]
pub enum Scalar {
    /// `null`, `~`, empty.
    Null,
    /// `true` / `false` (any of the three core-schema casings).
    Bool(bool),
    /// Integer (decimal, `0x`, `0o`).
    Int(i64),
    /// Float.
    Float(f64),
    /// Anything else.
    Str(String),
}

/// A syntax error with its position.
#[derive(Debug, Clone, PartialEq)]
pub struct SyntaxError {
    /// Where.
    pub pos: Pos,
    /// What.
    pub message: String,
    /// How to fix it, when we can tell.
    pub hint: Option<String>,
}

impl Node {
    /// Short name of the node's YAML type, for messages (`a mapping`, `a sequence`, `a string`).
    pub fn type_name(&self) -> &'static str {
        match &self.kind {
            NodeKind::Seq(_) => "a sequence",
            NodeKind::Map(_) => "a mapping",
            NodeKind::Scalar { .. } => match self.scalar() {
                Some(Scalar::Null) => "null",
                Some(Scalar::Bool(_)) => "a boolean",
                Some(Scalar::Int(_)) => "an integer",
                Some(Scalar::Float(_)) => "a number",
                _ => "a string",
            },
        }
    }

    /// Resolves a scalar node; `None` for collections.
    pub fn scalar(&self) -> Option<Scalar> {
        match &self.kind {
            NodeKind::Scalar { text, plain, tag } => Some(resolve(text, *plain, tag.as_deref())),
            _ => None,
        }
    }

    /// Whether this node is a null scalar: what [`resolve`] makes [`Scalar::Null`], without
    /// resolving the rest (asked of every field read; resolving copied the text and tried it
    /// as a number each time, issue 9: start-up).
    pub fn is_null(&self) -> bool {
        match &self.kind {
            NodeKind::Scalar { text, plain, tag } => match tag.as_deref() {
                Some("null") => true,
                Some("str" | "int" | "float" | "bool") => false,
                _ => *plain && is_null_word(text),
            },
            _ => false,
        }
    }

    /// Raw text of a scalar node.
    pub fn text(&self) -> Option<&str> {
        match &self.kind {
            NodeKind::Scalar { text, .. } => Some(text),
            _ => None,
        }
    }

    /// Entries of a mapping node.
    pub fn entries(&self) -> Option<&[MapEntry]> {
        match &self.kind {
            NodeKind::Map(m) => Some(m),
            _ => None,
        }
    }

    /// Items of a sequence node.
    pub fn items(&self) -> Option<&[Node]> {
        match &self.kind {
            NodeKind::Seq(s) => Some(s),
            _ => None,
        }
    }

    /// Value of `key` in a mapping node.
    pub fn get(&self, key: &str) -> Option<&Node> {
        self.entries()?
            .iter()
            .find(|e| e.key == key)
            .map(|e| &e.value)
    }

    /// Converts to JSON: plain scalars are resolved, mappings keep file order.
    pub fn to_json(&self) -> Value {
        match &self.kind {
            NodeKind::Seq(items) => Value::Array(items.iter().map(Self::to_json).collect()),
            NodeKind::Map(entries) => {
                let mut m = Map::new();
                for e in entries {
                    m.insert(e.key.clone(), e.value.to_json());
                }
                Value::Object(m)
            }
            NodeKind::Scalar { .. } => match self.scalar() {
                Some(Scalar::Bool(b)) => Value::Bool(b),
                Some(Scalar::Int(i)) => Value::from(i),
                Some(Scalar::Float(f)) => Number::from_f64(f).map_or(Value::Null, Value::Number),
                Some(Scalar::Str(s)) => Value::String(s),
                Some(Scalar::Null) | None => Value::Null,
            },
        }
    }
}

/// YAML 1.2 core-schema resolution of a scalar (what yaml.v3 does for untyped targets).
pub fn resolve(text: &str, plain: bool, tag: Option<&str>) -> Scalar {
    match tag {
        Some("str") => return Scalar::Str(text.to_owned()),
        Some("int") => {
            return parse_int(text).map_or_else(|| Scalar::Str(text.to_owned()), Scalar::Int);
        }
        Some("float") => {
            return parse_float(text).map_or_else(|| Scalar::Str(text.to_owned()), Scalar::Float);
        }
        Some("bool") => {
            return match text {
                "true" | "True" | "TRUE" => Scalar::Bool(true),
                "false" | "False" | "FALSE" => Scalar::Bool(false),
                _ => Scalar::Str(text.to_owned()),
            };
        }
        Some("null") => return Scalar::Null,
        _ => {}
    }
    if !plain {
        return Scalar::Str(text.to_owned());
    }
    if is_null_word(text) {
        return Scalar::Null;
    }
    match text {
        "true" | "True" | "TRUE" => Scalar::Bool(true),
        "false" | "False" | "FALSE" => Scalar::Bool(false),
        _ => {
            if let Some(i) = parse_int(text) {
                Scalar::Int(i)
            } else if let Some(f) = parse_float(text) {
                Scalar::Float(f)
            } else {
                Scalar::Str(text.to_owned())
            }
        }
    }
}

/// The plain scalars the YAML 1.2 core schema reads as null.
fn is_null_word(text: &str) -> bool {
    matches!(text, "" | "~" | "null" | "Null" | "NULL")
}

fn parse_int(text: &str) -> Option<i64> {
    if let Some(hex) = text.strip_prefix("0x") {
        return i64::from_str_radix(hex, 16).ok();
    }
    if let Some(oct) = text.strip_prefix("0o") {
        return i64::from_str_radix(oct, 8).ok();
    }
    let digits = text.strip_prefix(['-', '+']).unwrap_or(text);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

fn parse_float(text: &str) -> Option<f64> {
    match text {
        ".inf" | ".Inf" | ".INF" | "+.inf" | "+.Inf" | "+.INF" => return Some(f64::INFINITY),
        "-.inf" | "-.Inf" | "-.INF" => return Some(f64::NEG_INFINITY),
        ".nan" | ".NaN" | ".NAN" => return Some(f64::NAN),
        _ => {}
    }
    let body = text.strip_prefix(['-', '+']).unwrap_or(text);
    let (mantissa, exp) = match body.find(['e', 'E']) {
        Some(i) => (&body[..i], Some(&body[i + 1..])),
        None => (body, None),
    };
    let mut parts = mantissa.splitn(2, '.');
    let int_part = parts.next().unwrap_or("");
    let frac_part = parts.next();
    let digits_ok = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    let ok_mantissa = match frac_part {
        Some(f) => digits_ok(int_part) && digits_ok(f) && !(int_part.is_empty() && f.is_empty()),
        None => !int_part.is_empty() && digits_ok(int_part),
    };
    let ok_exp = exp.is_none_or(|e| {
        let e = e.strip_prefix(['-', '+']).unwrap_or(e);
        !e.is_empty() && digits_ok(e)
    });
    if ok_mantissa && ok_exp {
        text.parse().ok()
    } else {
        None
    }
}

/// Most nodes alias expansion may add to a document (each alias counts the nodes of the
/// anchored value it copies).
pub const MAX_ALIAS_NODES: usize = 100_000;

/// Most bytes of scalar text aliases may copy into a document (16 MiB): a few large
/// scalars aliased many times are as costly as many nodes.
pub const MAX_ALIAS_BYTES: usize = 16 * 1024 * 1024;

/// Most nodes a document may hold, aliases expanded.
pub const MAX_TOTAL_NODES: usize = 1_000_000;

/// Deepest nesting of collections (block or flow, aliases expanded).
pub const MAX_DEPTH: usize = 256;

/// A finished node with its size: `nodes` counts it and everything below it, `height` is
/// 1 for a scalar and 1 + the tallest child for a collection.
struct Built {
    node: Node,
    nodes: usize,
    height: usize,
}

/// A mapping being built. Entries replaced by a later explicit key (over a merged one) are
/// left as `None` and dropped when the mapping ends, so every key costs O(1).
struct MapFrame {
    pos: Pos,
    entries: Vec<Option<MapEntry>>,
    /// Key text → index in `entries` of the live entry with that key.
    index: HashMap<String, usize>,
    pending: Option<(String, Pos)>,
    /// The pending key repeats an earlier one: its value is dropped (the error is recorded).
    pending_duplicate: bool,
    anchor: usize,
    nodes: usize,
    height: usize,
}

impl MapFrame {
    fn push(&mut self, entry: MapEntry) {
        if let Some(old) = self.index.insert(entry.key.clone(), self.entries.len())
            && let Some(slot) = self.entries.get_mut(old)
        {
            *slot = None;
        }
        self.entries.push(Some(entry));
    }

    /// `<<: *anchor` (or a list of them): keys not already present are added.
    fn merge(&mut self, node: &Node) {
        let sources: Vec<&Node> = match &node.kind {
            NodeKind::Seq(items) => items.iter().collect(),
            _ => vec![node],
        };
        for src in sources {
            for e in src.entries().unwrap_or_default() {
                if !self.index.contains_key(&e.key) {
                    let mut e = e.clone();
                    e.key_pos = MERGED;
                    self.push(e);
                }
            }
        }
    }
}

enum Frame {
    Seq {
        pos: Pos,
        items: Vec<Node>,
        anchor: usize,
        nodes: usize,
        height: usize,
    },
    Map(MapFrame),
}

impl Frame {
    fn account(&mut self, nodes: usize, height: usize) {
        let (n, h) = match self {
            Self::Seq { nodes, height, .. } => (nodes, height),
            Self::Map(m) => (&mut m.nodes, &mut m.height),
        };
        *n = n.saturating_add(nodes);
        *h = (*h).max(height);
    }
}

/// Bytes of scalar text (keys included) in `node`.
fn text_bytes(node: &Node) -> usize {
    match &node.kind {
        NodeKind::Scalar { text, .. } => text.len(),
        NodeKind::Seq(items) => items.iter().map(text_bytes).fold(0, usize::saturating_add),
        NodeKind::Map(entries) => entries
            .iter()
            .map(|e| e.key.len().saturating_add(text_bytes(&e.value)))
            .fold(0, usize::saturating_add),
    }
}

/// The error of a document over the node or alias limits. `aliases`: whether aliases copied
/// anything before the limit was hit (a big document without any read as an alias bomb;
/// breaker).
fn too_large(pos: Pos, aliases: bool) -> SyntaxError {
    if !aliases {
        return SyntaxError {
            pos,
            message: format!("document too large (more than {MAX_TOTAL_NODES} nodes)"),
            hint: Some(
                "split the workflow: sub-workflows (`call_workflow`) and state templates \
                 (`use_template`) keep each file small"
                    .to_owned(),
            ),
        };
    }
    SyntaxError {
        pos,
        message: format!(
            "document too large after alias expansion (more than {MAX_ALIAS_NODES} nodes \
             or {MAX_ALIAS_BYTES} bytes copied by aliases, or {MAX_TOTAL_NODES} nodes in all)"
        ),
        hint: Some("an alias repeats its anchored value; nested aliases multiply it".to_owned()),
    }
}

fn too_deep(pos: Pos) -> SyntaxError {
    SyntaxError {
        pos,
        message: format!("document nested too deeply (more than {MAX_DEPTH} levels)"),
        hint: Some(
            "flatten the structure; aliases count with the depth they are used at".to_owned(),
        ),
    }
}

/// Parses one YAML document into a node tree. An empty document gives a null scalar.
///
/// Bounded: at most [`MAX_ALIAS_NODES`] nodes copied by aliases, [`MAX_TOTAL_NODES`] nodes
/// in all and [`MAX_DEPTH`] levels of nesting; duplicate-key checks cost O(1) per key.
///
/// # Errors
/// A [`SyntaxError`] for scanner/parser errors, non-scalar keys, duplicate keys, unknown
/// aliases, multi-document streams, and documents over the bounds above.
pub fn parse_document(text: &str) -> Result<Node, SyntaxError> {
    let (node, mut soft) = parse_document_collecting(text)?;
    match soft.drain(..).next() {
        Some(first) => Err(first),
        None => Ok(node),
    }
}

/// Like [`parse_document`], but a duplicate key does not stop parsing: the first value is
/// kept and each repetition is returned as an error beside the tree, so later findings of
/// the same file can still be reported.
///
/// # Errors
/// As [`parse_document`], except duplicate keys.
pub fn parse_document_collecting(text: &str) -> Result<(Node, Vec<SyntaxError>), SyntaxError> {
    // A byte order mark opens the stream (YAML 1.2 §5.2; editors on Windows write one): it
    // is not part of the first key (breaker: `"\u{feff}name" is not a key`).
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    // YAML forbids NUL; the scanner would stop there and ignore the rest of the file.
    if let Some(at) = text.find('\0') {
        let before = &text[..at];
        let line = before.matches('\n').count() + 1;
        let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
        return Err(SyntaxError {
            pos: Pos {
                line: u32::try_from(line).unwrap_or(u32::MAX),
                column: u32::try_from(column).unwrap_or(u32::MAX),
            },
            message: "the file holds a NUL byte, which YAML does not allow".to_owned(),
            hint: Some("remove it (a binary file, or a file cut short while written?)".to_owned()),
        });
    }
    let mut soft: Vec<SyntaxError> = Vec::new();
    let mut parser = Parser::new_from_str(text);
    let mut stack: Vec<Frame> = Vec::new();
    // Anchor id → (node, its node count, its height, its bytes of text).
    let mut anchors: HashMap<usize, (Node, usize, usize, usize)> = HashMap::new();
    let mut root: Option<Node> = None;
    let mut documents = 0usize;
    let mut alias_nodes = 0usize;
    let mut alias_bytes = 0usize;
    let mut total_nodes = 0usize;
    loop {
        let (event, marker) = parser.next_token().map_err(|e| scan_error(text, &e))?;
        let pos = Pos::from_marker(&marker);
        let finished: Option<(Built, usize)> = match event {
            Event::StreamEnd => break,
            Event::DocumentStart => {
                documents += 1;
                if documents > 1 {
                    return Err(SyntaxError {
                        pos,
                        message: "a workflow file must hold a single YAML document".to_owned(),
                        hint: Some("remove the extra '---' document".to_owned()),
                    });
                }
                None
            }
            Event::Nothing | Event::StreamStart | Event::DocumentEnd => None,
            Event::Alias(id) => match anchors.get(&id) {
                Some((n, nodes, height, bytes)) => {
                    alias_nodes = alias_nodes.saturating_add(*nodes);
                    alias_bytes = alias_bytes.saturating_add(*bytes);
                    total_nodes = total_nodes.saturating_add(*nodes);
                    if alias_nodes > MAX_ALIAS_NODES
                        || alias_bytes > MAX_ALIAS_BYTES
                        || total_nodes > MAX_TOTAL_NODES
                    {
                        return Err(too_large(pos, true));
                    }
                    if stack.len().saturating_add(*height) > MAX_DEPTH.saturating_add(1) {
                        return Err(too_deep(pos));
                    }
                    Some((
                        Built {
                            node: Node {
                                pos,
                                kind: n.kind.clone(),
                            },
                            nodes: *nodes,
                            height: *height,
                        },
                        0,
                    ))
                }
                None => {
                    return Err(SyntaxError {
                        pos,
                        message: "unknown alias".to_owned(),
                        hint: None,
                    });
                }
            },
            Event::Scalar(value, style, anchor, tag) => {
                total_nodes = total_nodes.saturating_add(1);
                if total_nodes > MAX_TOTAL_NODES {
                    return Err(too_large(pos, alias_nodes > 0));
                }
                Some((
                    Built {
                        node: Node {
                            pos,
                            kind: NodeKind::Scalar {
                                text: value,
                                plain: style == TScalarStyle::Plain,
                                tag: tag.as_ref().and_then(core_tag),
                            },
                        },
                        nodes: 1,
                        height: 1,
                    },
                    anchor,
                ))
            }
            Event::SequenceStart(anchor, _) | Event::MappingStart(anchor, _) => {
                total_nodes = total_nodes.saturating_add(1);
                if total_nodes > MAX_TOTAL_NODES {
                    return Err(too_large(pos, alias_nodes > 0));
                }
                if stack.len() >= MAX_DEPTH {
                    return Err(too_deep(pos));
                }
                stack.push(if matches!(event, Event::SequenceStart(..)) {
                    Frame::Seq {
                        pos,
                        items: Vec::new(),
                        anchor,
                        nodes: 1,
                        height: 0,
                    }
                } else {
                    Frame::Map(MapFrame {
                        pos,
                        entries: Vec::new(),
                        index: HashMap::new(),
                        pending: None,
                        pending_duplicate: false,
                        anchor,
                        nodes: 1,
                        height: 0,
                    })
                });
                None
            }
            Event::SequenceEnd => match stack.pop() {
                Some(Frame::Seq {
                    pos: p,
                    items,
                    anchor,
                    nodes,
                    height,
                }) => {
                    let pos = earliest(p, items.first().map(|i| i.pos));
                    Some((
                        Built {
                            node: Node {
                                pos,
                                kind: NodeKind::Seq(items),
                            },
                            nodes,
                            height: height.saturating_add(1),
                        },
                        anchor,
                    ))
                }
                _ => return Err(internal(pos)),
            },
            Event::MappingEnd => match stack.pop() {
                Some(Frame::Map(m)) => {
                    let entries: Vec<MapEntry> = m.entries.into_iter().flatten().collect();
                    let pos = earliest(
                        m.pos,
                        entries.iter().map(|e| e.key_pos).find(|k| k.line > 0),
                    );
                    Some((
                        Built {
                            node: Node {
                                pos,
                                kind: NodeKind::Map(entries),
                            },
                            nodes: m.nodes,
                            height: m.height.saturating_add(1),
                        },
                        m.anchor,
                    ))
                }
                _ => return Err(internal(pos)),
            },
        };
        let Some((built, anchor)) = finished else {
            continue;
        };
        let Built {
            node,
            nodes,
            height,
        } = built;
        if anchor > 0 {
            // The copy kept for aliases counts too: nested anchors would otherwise copy a
            // node once per enclosing anchor without any bound.
            total_nodes = total_nodes.saturating_add(nodes);
            if total_nodes > MAX_TOTAL_NODES {
                return Err(too_large(node.pos, true));
            }
            let bytes = text_bytes(&node);
            anchors.insert(anchor, (node.clone(), nodes, height, bytes));
        }
        let Some(frame) = stack.last_mut() else {
            root = Some(node);
            continue;
        };
        frame.account(nodes, height);
        match frame {
            Frame::Seq { items, .. } => items.push(node),
            Frame::Map(m) => match m.pending.take() {
                None => {
                    let key = match &node.kind {
                        NodeKind::Scalar { text, .. } => text.clone(),
                        _ => {
                            return Err(SyntaxError {
                                pos: node.pos,
                                message: "mapping keys must be plain strings".to_owned(),
                                hint: Some(
                                    "a key is a name (`command:`, `states:`); a list or a map \
                                     as a key (`? [a, b]`, `{a: 1}: x`) has no meaning in a \
                                     workflow: quote it if it is text (`\"[a, b]\": x`)"
                                        .to_owned(),
                                ),
                            });
                        }
                    };
                    if key != "<<"
                        && let Some(prev) = m
                            .index
                            .get(&key)
                            .and_then(|&i| m.entries.get(i))
                            .and_then(Option::as_ref)
                            .filter(|e| e.key_pos != MERGED)
                    {
                        soft.push(SyntaxError {
                            pos: node.pos,
                            message: format!(
                                "mapping key \"{key}\" already defined at line {}",
                                prev.key_pos.line
                            ),
                            hint: Some(format!("remove or rename the second \"{key}\"")),
                        });
                        m.pending_duplicate = true;
                    }
                    m.pending = Some((key, node.pos));
                }
                Some((key, key_pos)) => {
                    if std::mem::take(&mut m.pending_duplicate) {
                        // The repeated key's value: dropped, the first one stays.
                    } else if key == "<<" {
                        m.merge(&node);
                    } else {
                        m.push(MapEntry {
                            key,
                            key_pos,
                            value: node,
                        });
                    }
                }
            },
        }
    }
    let root = root.unwrap_or(Node {
        pos: Pos { line: 1, column: 1 },
        kind: NodeKind::Scalar {
            text: String::new(),
            plain: true,
            tag: None,
        },
    });
    Ok((root, soft))
}

/// The parser marks a block collection where its first child ends; use the first child's
/// position when it comes earlier.
fn earliest(marker: Pos, first_child: Option<Pos>) -> Pos {
    match first_child {
        Some(c) if (c.line, c.column) < (marker.line, marker.column) => c,
        _ => marker,
    }
}

/// Key position given to entries copied by a merge key (they have no position of their own).
const MERGED: Pos = Pos { line: 0, column: 0 };

fn core_tag(tag: &Tag) -> Option<String> {
    (tag.handle == "tag:yaml.org,2002:" || tag.handle == "!!").then(|| tag.suffix.clone())
}

fn internal(pos: Pos) -> SyntaxError {
    SyntaxError {
        pos,
        message: "unbalanced YAML structure".to_owned(),
        hint: None,
    }
}

/// The longest plain (implicit) key YAML reads (YAML 1.2 §7.4.2, 1024 Unicode characters).
const MAX_KEY_CHARS: usize = 1024;

/// The length of the key `line` starts with (after its indentation and a `- `), in
/// characters, when it is longer than [`MAX_KEY_CHARS`]: the text up to the first `:`
/// followed by a blank or the end of the line.
fn long_key(line: &str) -> Option<usize> {
    let t = line.trim_start_matches(' ');
    let t = t.strip_prefix("- ").unwrap_or(t);
    let bytes = t.as_bytes();
    let end = (0..bytes.len()).find(|&i| {
        bytes[i] == b':' && bytes.get(i + 1).is_none_or(|b| *b == b' ' || *b == b'\t')
    })?;
    Some(t[..end].chars().count()).filter(|n| *n > MAX_KEY_CHARS)
}

fn scan_error(text: &str, e: &yaml_rust2::ScanError) -> SyntaxError {
    let pos = Pos::from_marker(e.marker());
    let line_text = text
        .lines()
        .nth(pos.line.saturating_sub(1) as usize)
        .unwrap_or("");
    let info = e.info();
    // The scanner's own depth guard (flow collections, `[[[[…`) says it its way: as the
    // block-style guard does (breaker: no hint, another wording).
    if info.contains("recursion limit exceeded") {
        return too_deep(pos);
    }
    // A plain key past YAML's 1024 characters (a long state name) is refused as if its ':'
    // were missing or misplaced (breaker: `simple key expect ':'` and a missing-colon hint).
    if (info.contains("simple key") || info.contains("mapping values are not allowed"))
        && let Some(n) = long_key(line_text)
    {
        return SyntaxError {
            pos,
            message: format!(
                "a key of {n} characters is longer than the {MAX_KEY_CHARS} characters YAML \
                 allows for a key"
            ),
            hint: Some(format!(
                "shorten the key (a state, input or option name) to at most {MAX_KEY_CHARS} \
                 characters"
            )),
        };
    }
    let hint = if text
        .lines()
        .take(pos.line as usize)
        .any(|l| l.trim_start_matches(' ').starts_with('\t'))
    {
        Some("YAML indentation must use spaces, not tabs".to_owned())
    } else if info.contains("mapping values are not allowed") {
        // A key indented deeper than the one above (`     command:` under `type:`) reads
        // as a value holding ': ' too: the hint names both causes.
        Some(
            "check this line's indentation against the line above (keys of one mapping line \
             up); a value containing ': ' must be quoted (e.g. command: 'echo \"a: b\"')"
                .to_owned(),
        )
    } else if info.contains("could not find expected ':'") || info.contains("simple key") {
        Some("a key is missing its ':' or the indentation is inconsistent".to_owned())
    } else if info.contains("did not find expected") || info.contains("flow") {
        Some("a '[' or '{' is not closed, or an item is badly indented".to_owned())
    } else {
        None
    };
    let _ = line_text;
    SyntaxError {
        pos,
        message: info.to_owned(),
        hint,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `is_null` says what resolving the scalar says, for every tag and quoting.
    #[test]
    fn is_null_agrees_with_resolve() {
        let texts = [
            "", "~", "null", "Null", "NULL", "nul", "0", "1.5", "true", "x", " ",
        ];
        let tags = [
            None,
            Some("null"),
            Some("str"),
            Some("int"),
            Some("float"),
            Some("bool"),
            Some("custom"),
        ];
        for text in texts {
            for plain in [true, false] {
                for tag in tags {
                    let node = Node {
                        pos: Pos { line: 1, column: 1 },
                        kind: NodeKind::Scalar {
                            text: text.to_owned(),
                            plain,
                            tag: tag.map(str::to_owned),
                        },
                    };
                    assert_eq!(
                        node.is_null(),
                        resolve(text, plain, tag) == Scalar::Null,
                        "{text:?} plain={plain} tag={tag:?}"
                    );
                }
            }
        }
        let seq = Node {
            pos: Pos { line: 1, column: 1 },
            kind: NodeKind::Seq(Vec::new()),
        };
        assert!(!seq.is_null());
    }

    #[test]
    fn positions_are_one_based() {
        let n = parse_document("a: 1\nb:\n  - x\n  - y: 2\n").unwrap();
        let e = n.entries().unwrap();
        assert_eq!(e[0].key_pos, Pos { line: 1, column: 1 });
        assert_eq!(e[1].key_pos, Pos { line: 2, column: 1 });
        let items = e[1].value.items().unwrap();
        assert_eq!(items[0].pos, Pos { line: 3, column: 5 });
        assert_eq!(
            items[1].entries().unwrap()[0].key_pos,
            Pos { line: 4, column: 5 }
        );
    }

    /// A leading byte order mark is not part of the first key (breaker: a file saved by a
    /// Windows editor was refused, `name: required field missing`).
    /// Flow-style nesting past the scanner's own limit reads as block-style nesting past
    /// ours: one message, one hint (breaker: `recursion limit exceeded` with no hint).
    #[test]
    fn deep_flow_nesting_is_said_like_deep_block_nesting() {
        let text = format!("a: {}{}\n", "[".repeat(5000), "]".repeat(5000));
        let e = parse_document(&text).unwrap_err();
        assert!(
            e.message.starts_with("document nested too deeply"),
            "{}",
            e.message
        );
        assert!(e.hint.is_some());
    }

    /// Breaker: a state name of more than 1024 characters gave `simple key expect ':'`
    /// with a missing-colon hint.
    #[test]
    fn a_key_longer_than_yaml_allows_is_said_so() {
        let text = format!("states:\n  {}:\n    type: terminal\n", "s".repeat(1100));
        let e = parse_document(&text).unwrap_err();
        assert_eq!(
            e.message,
            "a key of 1100 characters is longer than the 1024 characters YAML allows for a key"
        );
        assert_eq!(
            e.hint.as_deref(),
            Some("shorten the key (a state, input or option name) to at most 1024 characters")
        );
        // A key that is only missing its ':' keeps its hint.
        let e = parse_document("a: 1\nb\nc: 2\n").unwrap_err();
        assert_eq!(
            e.hint.as_deref(),
            Some("a key is missing its ':' or the indentation is inconsistent"),
            "{}",
            e.message
        );
    }

    #[test]
    fn a_leading_byte_order_mark_is_skipped() {
        let n = parse_document("\u{feff}name: w\nb: 1\n").unwrap();
        let e = n.entries().unwrap();
        assert_eq!(e[0].key, "name");
        assert_eq!(e[0].key_pos, Pos { line: 1, column: 1 });
    }

    #[test]
    fn core_schema_resolution() {
        assert_eq!(resolve("yes", true, None), Scalar::Str("yes".into()));
        assert_eq!(resolve("True", true, None), Scalar::Bool(true));
        assert_eq!(resolve("30", true, None), Scalar::Int(30));
        assert_eq!(resolve("30", false, None), Scalar::Str("30".into()));
        assert_eq!(resolve("2.5", true, None), Scalar::Float(2.5));
        assert_eq!(resolve("1e3", true, None), Scalar::Float(1000.0));
        assert_eq!(resolve("~", true, None), Scalar::Null);
        assert_eq!(resolve("0x1F", true, None), Scalar::Int(31));
        assert_eq!(resolve("1.2.3", true, None), Scalar::Str("1.2.3".into()));
        assert_eq!(resolve("10MB", true, None), Scalar::Str("10MB".into()));
    }

    #[test]
    fn explicit_core_tags() {
        let n = parse_document("a: !!str 30\nb: !!int \"7\"\n").unwrap();
        assert_eq!(n.get("a").unwrap().scalar(), Some(Scalar::Str("30".into())));
        assert_eq!(n.get("b").unwrap().scalar(), Some(Scalar::Int(7)));
    }

    #[test]
    fn duplicate_keys_are_collected_and_parsing_goes_on() {
        let (n, soft) = parse_document_collecting("a: 1\nb: 2\na: 3\nc: {x: 1, x: 2}\n").unwrap();
        let msgs: Vec<(u32, &str)> = soft
            .iter()
            .map(|e| (e.pos.line, e.message.as_str()))
            .collect();
        assert_eq!(
            msgs,
            vec![
                (3, "mapping key \"a\" already defined at line 1"),
                (4, "mapping key \"x\" already defined at line 4"),
            ]
        );
        assert_eq!(
            n.get("a").and_then(Node::text),
            Some("1"),
            "the first value stays"
        );
        assert_eq!(n.get("b").and_then(Node::text), Some("2"));
        assert_eq!(
            n.get("c").and_then(|c| c.get("x")).and_then(Node::text),
            Some("1")
        );
    }

    #[test]
    fn duplicate_keys_are_errors_with_position() {
        let e = parse_document("a: 1\nb: 2\na: 3\n").unwrap_err();
        assert_eq!(e.pos, Pos { line: 3, column: 1 });
        assert_eq!(e.message, "mapping key \"a\" already defined at line 1");
    }

    #[test]
    fn colon_in_plain_scalar_is_an_error() {
        let e = parse_document("x:\n  command: echo \"Error occurred: test\"\n").unwrap_err();
        assert_eq!(e.pos.line, 2);
        assert!(
            e.message.contains("mapping values are not allowed"),
            "{}",
            e.message
        );
        assert!(e.hint.unwrap().contains("quote"));
    }

    #[test]
    fn tabs_get_a_hint() {
        let e = parse_document("a:\n\tb: 1\n").unwrap_err();
        assert_eq!(
            e.hint.as_deref(),
            Some("YAML indentation must use spaces, not tabs")
        );
    }

    #[test]
    fn anchors_and_merge_keys() {
        let n = parse_document("base: &b {x: 1, y: 2}\nc:\n  <<: *b\n  y: 3\n").unwrap();
        let c = n.get("c").unwrap();
        assert_eq!(c.to_json(), serde_json::json!({"y": 3, "x": 1}));
    }

    /// `levels` anchors, each a flow list of `width` aliases of the previous one.
    fn alias_bomb(levels: usize, width: usize) -> String {
        let mut s = format!("a0: &a0 [{}]\n", vec!["\"lol\""; width].join(","));
        for i in 1..levels {
            let prev = format!("*a{}", i - 1);
            s.push_str(&format!(
                "a{i}: &a{i} [{}]\n",
                vec![prev.as_str(); width].join(",")
            ));
        }
        s
    }

    #[test]
    fn a_nul_byte_is_a_syntax_error_at_its_position() {
        let e = parse_document("name: n\nstates:\n  initial: x\n\0\n  y: 1\n").unwrap_err();
        assert_eq!((e.pos.line, e.pos.column), (4, 1));
        assert!(e.message.contains("NUL"), "{}", e.message);
    }

    /// A large scalar aliased many times is bounded by the bytes it copies (trial: a 1 MB
    /// scalar aliased 5,000 times needed 5 GB and aborted).
    #[test]
    fn a_large_scalar_aliased_many_times_is_rejected() {
        let big = "a".repeat(1_000_000);
        let list = vec!["*b"; 5000].join(",");
        let text = format!("name: s\nbig: &b \"{big}\"\nlist: [{list}]\n");
        let e = parse_document(&text).unwrap_err();
        assert!(
            e.message.contains("bytes copied by aliases"),
            "{}",
            e.message
        );
        // A few copies are fine.
        let text = format!("name: s\nbig: &b \"{big}\"\nlist: [*b, *b]\n");
        assert!(parse_document(&text).is_ok());
    }

    /// Breaker: a 13 MB workflow without a single alias was refused "after alias
    /// expansion". Past the node limit without aliases, the message says only how large.
    #[test]
    fn a_large_document_without_aliases_is_not_called_an_alias_bomb() {
        let mut text = String::from("list: [");
        text.push_str(&"1,".repeat(MAX_TOTAL_NODES + 1));
        text.push(']');
        let e = parse_document(&text).unwrap_err();
        assert_eq!(e.message, "document too large (more than 1000000 nodes)");
        assert_eq!(
            e.hint.as_deref(),
            Some(
                "split the workflow: sub-workflows (`call_workflow`) and state templates \
                 (`use_template`) keep each file small"
            )
        );
    }

    #[test]
    fn yaml_alias_bomb_is_rejected() {
        let e = parse_document(&alias_bomb(9, 9)).unwrap_err();
        assert_eq!(
            e.message,
            "document too large after alias expansion (more than 100000 nodes or 16777216 \
             bytes copied by aliases, or 1000000 nodes in all)"
        );
        // Aliases on lines 2-5 copy 74 718 nodes; the first `*a4` (66 430 more) on line 6
        // goes over the budget.
        assert_eq!(
            e.pos,
            Pos {
                line: 6,
                column: 10
            }
        );
        // Width 10: the 10 aliases of a3 (11 111 nodes each) on line 5 overflow the budget.
        let e = parse_document(&alias_bomb(6, 10)).unwrap_err();
        assert_eq!(e.pos.line, 5);
    }

    #[test]
    fn yaml_small_alias_fanout_is_accepted() {
        let n = parse_document(&alias_bomb(3, 9)).unwrap();
        assert_eq!(n.get("a2").unwrap().items().unwrap().len(), 9);
        assert_eq!(
            n.get("a2").unwrap().items().unwrap()[8].items().unwrap()[8]
                .items()
                .unwrap()[8]
                .text(),
            Some("lol")
        );
    }

    #[test]
    fn yaml_many_keys_parse_in_linear_time() {
        let mut text = String::new();
        for i in 0..100_000 {
            text.push_str(&format!("k{i}: {i}\n"));
        }
        let n = parse_document(&text).unwrap();
        let e = n.entries().unwrap();
        assert_eq!(e.len(), 100_000);
        assert_eq!(e[99_999].key, "k99999");
        assert_eq!(
            e[99_999].key_pos,
            Pos {
                line: 100_000,
                column: 1
            }
        );
        let mut dup = text.clone();
        dup.push_str("k5: x\n");
        let err = parse_document(&dup).unwrap_err();
        assert_eq!(err.message, "mapping key \"k5\" already defined at line 6");
        assert_eq!(
            err.pos,
            Pos {
                line: 100_001,
                column: 1
            }
        );
    }

    #[test]
    fn yaml_merge_override_then_duplicate() {
        let n = parse_document("base: &b {x: 1, y: 2}\nc:\n  <<: *b\n  y: 3\n  z: 4\n").unwrap();
        let keys: Vec<&str> = n
            .get("c")
            .unwrap()
            .entries()
            .unwrap()
            .iter()
            .map(|e| e.key.as_str())
            .collect();
        assert_eq!(keys, vec!["x", "y", "z"]);
        assert_eq!(n.get("c").unwrap().get("y").unwrap().text(), Some("3"));
        let e =
            parse_document("base: &b {x: 1, y: 2}\nc:\n  <<: *b\n  y: 3\n  y: 4\n").unwrap_err();
        assert_eq!(e.message, "mapping key \"y\" already defined at line 4");
    }

    #[test]
    fn yaml_deep_block_nesting_is_rejected() {
        let mut text = String::new();
        for i in 0..300 {
            text.push_str(&" ".repeat(i));
            text.push_str("k:\n");
        }
        let e = parse_document(&text).unwrap_err();
        assert_eq!(
            e.message,
            "document nested too deeply (more than 256 levels)"
        );
        assert_eq!(e.pos.line, 257);
        // 255 levels is fine.
        let mut ok = String::new();
        for i in 0..255 {
            ok.push_str(&" ".repeat(i));
            ok.push_str("k:\n");
        }
        assert!(parse_document(&ok).is_ok());
    }

    #[test]
    fn yaml_deep_nesting_through_aliases_is_rejected() {
        // Each anchor is 100 levels deep and nests the previous one: 300+ levels in all.
        let deep = |inner: &str| format!("{}{inner}{}", "[".repeat(100), "]".repeat(100));
        let text = format!(
            "a: &a {}\nb: &b {}\nc: &c {}\n",
            deep("1"),
            deep("*a"),
            deep("*b")
        );
        let e = parse_document(&text).unwrap_err();
        assert_eq!(
            e.message,
            "document nested too deeply (more than 256 levels)"
        );
        assert_eq!(e.pos.line, 3);
    }
}
