//! A YAML node tree that keeps the byte span of every node.
//!
//! Contracts are read into this tree first and lowered into the typed model afterwards,
//! so every check can point at the exact scalar, key or block it is about and so one
//! file can report all of its problems at once (a serde derive stops at the first).
//!
//! Parsing is done by `serde-saphyr` (YAML 1.2, no `unsafe`); its `Spanned<T>` gives
//! the location of each node. Duplicate keys are passed through to this tree on
//! purpose: the checker reports them with both locations ("first defined here").

use std::fmt;
use std::ops::Range;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_saphyr::{DuplicateKeyPolicy, Options, Spanned};

/// Byte range of a node in its source file.
pub type Span = Range<usize>;

/// One YAML node with its position.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    pub kind: NodeKind,
    pub span: Span,
}

/// What a node holds.
#[derive(Debug, Clone, PartialEq)]
pub enum NodeKind {
    Null,
    Bool(bool),
    Int(i128),
    Float(f64),
    Str(String),
    Seq(Vec<Node>),
    Map(Vec<(Node, Node)>),
}

impl NodeKind {
    /// The YAML kind as a user would name it, for "expected X, found Y" messages.
    pub fn describe(&self) -> &'static str {
        match self {
            NodeKind::Null => "null",
            NodeKind::Bool(_) => "a boolean",
            NodeKind::Int(_) => "an integer",
            NodeKind::Float(_) => "a number",
            NodeKind::Str(_) => "a string",
            NodeKind::Seq(_) => "a list",
            NodeKind::Map(_) => "a mapping",
        }
    }
}

impl Node {
    pub fn as_str(&self) -> Option<&str> {
        match &self.kind {
            NodeKind::Str(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_map(&self) -> Option<&[(Node, Node)]> {
        match &self.kind {
            NodeKind::Map(entries) => Some(entries),
            _ => None,
        }
    }

    pub fn as_seq(&self) -> Option<&[Node]> {
        match &self.kind {
            NodeKind::Seq(items) => Some(items),
            _ => None,
        }
    }

    /// The text of a scalar key (strings, and numbers or booleans written as keys).
    pub fn key_text(&self) -> Option<String> {
        match &self.kind {
            NodeKind::Str(s) => Some(s.clone()),
            NodeKind::Int(i) => Some(i.to_string()),
            NodeKind::Bool(b) => Some(b.to_string()),
            _ => None,
        }
    }
}

/// A parse failure with the byte offset where the parser stopped, when known.
#[derive(Debug, Clone, PartialEq)]
pub struct ParseError {
    pub message: String,
    pub offset: Option<usize>,
}

/// Parses one YAML document into a spanned tree.
///
/// An empty document (or one holding only comments) is `Null` at offset 0.
pub fn parse(text: &str) -> Result<Node, ParseError> {
    if text.trim().is_empty() || only_comments(text) {
        return Ok(Node {
            kind: NodeKind::Null,
            span: 0..0,
        });
    }
    let mut options = Options::default();
    options.duplicate_keys = DuplicateKeyPolicy::PassThrough;
    options.with_snippet = false;
    // Anchors, aliases and merge keys are legal YAML; expand them but bound the work
    // so a crafted file cannot blow up memory (the default budget does that).
    let spanned: Spanned<Raw> =
        serde_saphyr::from_str_with_options(text, options).map_err(|e| ParseError {
            offset: e.location().and_then(|l| {
                l.span()
                    .byte_offset()
                    .map(|o| o as usize)
                    .or_else(|| offset_of(text, l.line(), l.column()))
            }),
            message: clean_message(&e.to_string()),
        })?;
    Ok(to_node(spanned, text.len()))
}

/// Byte offset of a 1-based line and 1-based character column.
fn offset_of(text: &str, line: u64, column: u64) -> Option<usize> {
    if line == 0 {
        return None;
    }
    let mut start = 0usize;
    for _ in 1..line {
        start += text[start..].find('\n')? + 1;
    }
    let rest = &text[start..];
    let col = rest
        .char_indices()
        .nth(column.saturating_sub(1) as usize)
        .map(|(i, _)| i)
        .unwrap_or(rest.find('\n').unwrap_or(rest.len()));
    Some(start + col)
}

fn only_comments(text: &str) -> bool {
    text.lines().all(|l| {
        let t = l.trim();
        t.is_empty() || t.starts_with('#') || t == "---" || t == "..."
    })
}

/// serde-saphyr appends "at line X column Y" to its messages; the diagnostic shows the
/// position itself, and lowercase-first messages match the rest of our output.
fn clean_message(raw: &str) -> String {
    let first = raw.lines().next().unwrap_or(raw).trim();
    let mut msg = match first.find(" at line ") {
        Some(i) => first[..i].to_string(),
        None => first.to_string(),
    };
    if let Some(stripped) = msg.strip_prefix("error: ") {
        msg = stripped.to_string();
    }
    let msg = msg.trim_end_matches('.').to_string();
    let mut chars = msg.chars();
    match chars.next() {
        Some(c) => c.to_lowercase().collect::<String>() + chars.as_str(),
        None => "malformed yaml".to_string(),
    }
}

fn to_node(spanned: Spanned<Raw>, len: usize) -> Node {
    let span = span_of(&spanned, len);
    let kind = match spanned.value.0 {
        RawKind::Null => NodeKind::Null,
        RawKind::Bool(b) => NodeKind::Bool(b),
        RawKind::Int(i) => NodeKind::Int(i),
        RawKind::Float(f) => NodeKind::Float(f),
        RawKind::Str(s) => NodeKind::Str(s),
        RawKind::Seq(items) => NodeKind::Seq(items.into_iter().map(|n| to_node(n, len)).collect()),
        RawKind::Map(entries) => NodeKind::Map(
            entries
                .into_iter()
                .map(|(k, v)| (to_node(k, len), to_node(v, len)))
                .collect(),
        ),
    };
    Node { kind, span }
}

fn span_of<T>(spanned: &Spanned<T>, len: usize) -> Span {
    let s = spanned.referenced.span();
    let start = s.byte_offset().map(|o| o as usize).unwrap_or(0).min(len);
    let width = s.byte_len().map(|l| l as usize).unwrap_or(0);
    start..(start + width).min(len)
}

/// The tree as serde sees it, before spans are turned into byte ranges.
struct Raw(RawKind);

enum RawKind {
    Null,
    Bool(bool),
    Int(i128),
    Float(f64),
    Str(String),
    Seq(Vec<Spanned<Raw>>),
    Map(Vec<(Spanned<Raw>, Spanned<Raw>)>),
}

impl<'de> Deserialize<'de> for Raw {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(RawVisitor)
    }
}

struct RawVisitor;

impl<'de> Visitor<'de> for RawVisitor {
    type Value = Raw;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any yaml value")
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Raw, E> {
        Ok(Raw(RawKind::Bool(v)))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Raw, E> {
        Ok(Raw(RawKind::Int(v.into())))
    }
    fn visit_i128<E: de::Error>(self, v: i128) -> Result<Raw, E> {
        Ok(Raw(RawKind::Int(v)))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Raw, E> {
        Ok(Raw(RawKind::Int(v.into())))
    }
    fn visit_u128<E: de::Error>(self, v: u128) -> Result<Raw, E> {
        Ok(Raw(match i128::try_from(v) {
            Ok(i) => RawKind::Int(i),
            Err(_) => RawKind::Float(v as f64),
        }))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Raw, E> {
        Ok(Raw(RawKind::Float(v)))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Raw, E> {
        Ok(Raw(RawKind::Str(v.to_string())))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<Raw, E> {
        Ok(Raw(RawKind::Str(v)))
    }
    fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<Raw, E> {
        Ok(Raw(RawKind::Str(String::from_utf8_lossy(v).into_owned())))
    }
    fn visit_unit<E: de::Error>(self) -> Result<Raw, E> {
        Ok(Raw(RawKind::Null))
    }
    fn visit_none<E: de::Error>(self) -> Result<Raw, E> {
        Ok(Raw(RawKind::Null))
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Raw, D::Error> {
        Raw::deserialize(d)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Raw, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element::<Spanned<Raw>>()? {
            items.push(item);
        }
        Ok(Raw(RawKind::Seq(items)))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Raw, A::Error> {
        let mut entries = Vec::new();
        while let Some(key) = map.next_key::<Spanned<Raw>>()? {
            let value = map.next_value::<Spanned<Raw>>()?;
            entries.push((key, value));
        }
        Ok(Raw(RawKind::Map(entries)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at<'a>(text: &'a str, node: &Node) -> &'a str {
        &text[node.span.clone()]
    }

    #[test]
    fn scalar_spans_cover_the_scalar_text() {
        let text = "name: caseops_x\nmax_attempts: 2\nflags:\n  - a\n  - true\n";
        let root = parse(text).unwrap();
        let map = root.as_map().unwrap();
        assert_eq!(at(text, &map[0].0), "name");
        assert_eq!(at(text, &map[0].1), "caseops_x");
        assert_eq!(map[1].1.kind, NodeKind::Int(2));
        assert_eq!(at(text, &map[1].1), "2");
        let items = map[2].1.as_seq().unwrap();
        assert_eq!(at(text, &items[0]), "a");
        assert_eq!(items[1].kind, NodeKind::Bool(true));
    }

    #[test]
    fn duplicate_keys_are_kept_for_the_checker() {
        let root = parse("a: 1\na: 2\n").unwrap();
        assert_eq!(root.as_map().unwrap().len(), 2);
    }

    #[test]
    fn spans_are_byte_offsets_with_multibyte_text() {
        let text = "label: 道路交通事故认定书\nnext: x\n";
        let root = parse(text).unwrap();
        let map = root.as_map().unwrap();
        assert_eq!(at(text, &map[1].1), "x");
    }

    #[test]
    fn malformed_yaml_reports_an_offset() {
        let err = parse("a: [1, 2\nb: c\n").unwrap_err();
        assert!(err.offset.is_some(), "{err:?}");
    }

    #[test]
    fn empty_document_is_null() {
        assert_eq!(parse("# only a comment\n").unwrap().kind, NodeKind::Null);
    }
}
