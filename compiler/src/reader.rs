//! Typed reading of YAML nodes with diagnostics: every contract parser goes through
//! these helpers, so unknown keys, duplicate keys and wrong types are reported the same
//! way everywhere and reading never stops at the first problem.

use crate::codes::Code;
use crate::diagnostic::{Diagnostic, Diagnostics, closest};
use crate::source::FileId;
use crate::yaml::{Node, NodeKind, Span};

/// A value with the span of the node it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct Sp<T> {
    pub value: T,
    pub span: Span,
}

impl<T> Sp<T> {
    pub fn new(value: T, span: Span) -> Self {
        Self { value, span }
    }
}

/// Reading context: the file being read and the diagnostics sink.
pub struct Reader<'d> {
    pub file: FileId,
    pub diags: &'d mut Diagnostics,
}

/// The entries of one mapping after duplicate and unknown keys were reported.
pub struct Mapping<'n> {
    pub span: Span,
    entries: Vec<(String, &'n Node, &'n Node)>,
}

impl<'n> Mapping<'n> {
    pub fn get(&self, key: &str) -> Option<&'n Node> {
        self.entries
            .iter()
            .find(|(k, _, _)| k == key)
            .map(|(_, _, v)| *v)
    }

    pub fn key_node(&self, key: &str) -> Option<&'n Node> {
        self.entries
            .iter()
            .find(|(k, _, _)| k == key)
            .map(|(_, k, _)| *k)
    }

    /// All entries in file order (used where keys are user-chosen names).
    pub fn entries(&self) -> impl Iterator<Item = (&str, &'n Node, &'n Node)> {
        self.entries.iter().map(|(k, kn, v)| (k.as_str(), *kn, *v))
    }
}

impl Reader<'_> {
    pub fn report(&mut self, d: Diagnostic) {
        self.diags.push(d);
    }

    pub fn error(&mut self, code: Code, span: Span, message: impl Into<String>) -> Diagnostic {
        Diagnostic::at(code, self.file, span, message)
    }

    fn wrong_type(&mut self, node: &Node, what: &str, expected: &str) {
        let mut d = self
            .error(
                Code::WrongType,
                node.span.clone(),
                format!(
                    "expected {expected} for `{what}`, found {}",
                    node.kind.describe()
                ),
            )
            .label(format!("expected {expected}"));
        if expected == "a string" && matches!(node.kind, NodeKind::Float(_) | NodeKind::Int(_)) {
            d = d.help("quote the value to make it a string, e.g. \"1.0\"");
        }
        self.report(d);
    }

    /// Reads a mapping. `known` lists the keys allowed here; `None` allows any key (for
    /// maps keyed by user-chosen names such as field names). Duplicate keys and unknown
    /// keys are reported; the first occurrence of a duplicate is kept.
    pub fn mapping<'n>(
        &mut self,
        node: &'n Node,
        what: &str,
        known: Option<&[&str]>,
    ) -> Option<Mapping<'n>> {
        let Some(pairs) = node.as_map() else {
            self.wrong_type(node, what, "a mapping");
            return None;
        };
        let mut entries: Vec<(String, &'n Node, &'n Node)> = Vec::new();
        for (key, value) in pairs {
            let Some(name) = key.key_text() else {
                self.wrong_type(key, what, "a string key");
                continue;
            };
            if let Some((_, first, _)) = entries.iter().find(|(k, _, _)| *k == name) {
                let d = self
                    .error(
                        Code::DuplicateKey,
                        key.span.clone(),
                        format!("duplicate key `{name}` in `{what}`"),
                    )
                    .label("defined again here")
                    .secondary(self.file, first.span.clone(), "first defined here")
                    .help("remove one of the two entries; the compiler does not pick a winner");
                self.report(d);
                continue;
            }
            if let Some(known) = known
                && !known.contains(&name.as_str())
            {
                let mut d = self
                    .error(
                        Code::UnknownKey,
                        key.span.clone(),
                        format!("unknown key `{name}` in `{what}`"),
                    )
                    .label("not a key of the contract language here");
                d = match closest(&name, known.iter().copied()) {
                    Some(s) => d.help(format!("did you mean `{s}`?")),
                    None => d.help(format!("allowed keys here: {}", list(known))),
                };
                self.report(d);
                continue;
            }
            entries.push((name, key, value));
        }
        Some(Mapping {
            span: node.span.clone(),
            entries,
        })
    }

    pub fn string(&mut self, node: &Node, what: &str) -> Option<Sp<String>> {
        match &node.kind {
            NodeKind::Str(s) => Some(Sp::new(s.clone(), node.span.clone())),
            _ => {
                self.wrong_type(node, what, "a string");
                None
            }
        }
    }

    pub fn integer(&mut self, node: &Node, what: &str) -> Option<Sp<i64>> {
        match &node.kind {
            NodeKind::Int(i) => match i64::try_from(*i) {
                Ok(v) => Some(Sp::new(v, node.span.clone())),
                Err(_) => {
                    let d = self
                        .error(
                            Code::WrongType,
                            node.span.clone(),
                            format!("integer for `{what}` is out of range"),
                        )
                        .label("too large");
                    self.report(d);
                    None
                }
            },
            _ => {
                self.wrong_type(node, what, "an integer");
                None
            }
        }
    }

    pub fn number(&mut self, node: &Node, what: &str) -> Option<Sp<f64>> {
        match &node.kind {
            NodeKind::Int(i) => Some(Sp::new(*i as f64, node.span.clone())),
            NodeKind::Float(f) => Some(Sp::new(*f, node.span.clone())),
            _ => {
                self.wrong_type(node, what, "a number");
                None
            }
        }
    }

    pub fn boolean(&mut self, node: &Node, what: &str) -> Option<Sp<bool>> {
        match &node.kind {
            NodeKind::Bool(b) => Some(Sp::new(*b, node.span.clone())),
            _ => {
                self.wrong_type(node, what, "a boolean");
                None
            }
        }
    }

    /// A list of strings; a single string is accepted as a one-element list.
    pub fn strings(&mut self, node: &Node, what: &str) -> Vec<Sp<String>> {
        match &node.kind {
            NodeKind::Str(_) => self.string(node, what).into_iter().collect(),
            NodeKind::Seq(items) => items
                .iter()
                .filter_map(|item| self.string(item, what))
                .collect(),
            _ => {
                self.wrong_type(node, what, "a list of strings");
                Vec::new()
            }
        }
    }

    /// A string that must be one of `allowed`.
    pub fn one_of(&mut self, node: &Node, what: &str, allowed: &[&str]) -> Option<Sp<String>> {
        let s = self.string(node, what)?;
        if allowed.contains(&s.value.as_str()) {
            return Some(s);
        }
        let mut d = self
            .error(
                Code::InvalidValue,
                s.span.clone(),
                format!("`{}` is not a valid `{what}`", s.value),
            )
            .label(format!("expected one of {}", list(allowed)));
        if let Some(c) = closest(&s.value, allowed.iter().copied()) {
            d = d.help(format!("did you mean `{c}`?"));
        } else {
            d = d.help(format!("use one of {}", list(allowed)));
        }
        self.report(d);
        None
    }

    /// Checks that every name in `list` appears only once, reporting later copies.
    pub fn unique(&mut self, items: &[Sp<String>], what: &str) {
        // By map, not by scanning the items before each: a catalog may list thousands.
        let mut seen: std::collections::HashMap<&str, &Sp<String>> = Default::default();
        for item in items {
            if let Some(first) = seen.get(item.value.as_str()).copied() {
                let d = self
                    .error(
                        Code::DeclaredTwice,
                        item.span.clone(),
                        format!("`{}` is listed twice in `{what}`", item.value),
                    )
                    .label("listed again here")
                    .secondary(self.file, first.span.clone(), "first listed here")
                    .help("remove the second entry");
                self.report(d);
            } else {
                seen.insert(&item.value, item);
            }
        }
    }
}

/// `a`, `b` and `c` formatting for messages.
pub fn list(items: &[&str]) -> String {
    items
        .iter()
        .map(|i| format!("`{i}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// snake_case identifier: `^[a-z][a-z0-9_]*$`, at most 64 characters.
pub fn is_snake_case(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some('a'..='z'))
        && chars.all(|c| matches!(c, 'a'..='z' | '0'..='9' | '_'))
        && s.len() <= 64
}
