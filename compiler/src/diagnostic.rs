//! The one diagnostic model of the compiler: YAML, contract, state-machine and policy
//! problems are all reported as [`Diagnostic`] values and rendered by `render/`.

use crate::codes::Code;
use crate::source::FileId;
use crate::yaml::Span;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Severity {
    Error,
    Warning,
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Error => "error",
            Severity::Warning => "warning",
        }
    }
}

/// A place in a file with a short message ("first defined here").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Label {
    pub file: FileId,
    pub span: Span,
    pub message: String,
}

/// One finding. `primary` is the offending node; `secondary` labels show related places.
/// A diagnostic about a whole missing file carries `file` but no primary label.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    pub code: Code,
    pub severity: Severity,
    pub message: String,
    pub file: Option<FileId>,
    pub primary: Option<Label>,
    pub secondary: Vec<Label>,
    pub help: Option<String>,
}

impl Diagnostic {
    /// A diagnostic at a node; its severity comes from the code.
    pub fn at(code: Code, file: FileId, span: Span, message: impl Into<String>) -> Self {
        Self {
            code,
            severity: code.severity(),
            message: message.into(),
            file: Some(file),
            primary: Some(Label {
                file,
                span,
                message: String::new(),
            }),
            secondary: Vec::new(),
            help: None,
        }
    }

    /// A diagnostic about a file as a whole (or no file at all).
    pub fn unlocated(code: Code, file: Option<FileId>, message: impl Into<String>) -> Self {
        Self {
            code,
            severity: code.severity(),
            message: message.into(),
            file,
            primary: None,
            secondary: Vec::new(),
            help: None,
        }
    }

    /// Text under the primary underline.
    pub fn label(mut self, message: impl Into<String>) -> Self {
        if let Some(primary) = &mut self.primary {
            primary.message = message.into();
        }
        self
    }

    pub fn secondary(mut self, file: FileId, span: Span, message: impl Into<String>) -> Self {
        self.secondary.push(Label {
            file,
            span,
            message: message.into(),
        });
        self
    }

    pub fn help(mut self, help: impl Into<String>) -> Self {
        self.help = Some(help.into());
        self
    }
}

/// Collects every diagnostic of a run; checks keep going after an error.
#[derive(Debug, Default)]
pub struct Diagnostics {
    list: Vec<Diagnostic>,
}

impl Diagnostics {
    pub fn push(&mut self, diagnostic: Diagnostic) {
        self.list.push(diagnostic);
    }

    pub fn has_errors(&self) -> bool {
        self.list.iter().any(|d| d.severity == Severity::Error)
    }

    pub fn len(&self) -> usize {
        self.list.len()
    }

    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// The diagnostics ordered by file, then position, then code: a stable order for
    /// output and snapshots that does not depend on the order checks ran in.
    pub fn into_sorted(mut self) -> Vec<Diagnostic> {
        self.list.sort_by(|a, b| {
            let key = |d: &Diagnostic| {
                (
                    d.file,
                    d.primary.as_ref().map(|p| p.span.start),
                    d.code,
                    d.message.clone(),
                )
            };
            key(a).cmp(&key(b))
        });
        self.list.dedup();
        self.list
    }
}

/// "did you mean" support: the closest candidate within a small edit distance.
pub fn closest<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let limit = (word.chars().count() / 3).max(1);
    candidates
        .into_iter()
        .map(|c| (edit_distance(word, c), c))
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != *cb);
            cur[j + 1] = (prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn closest_suggests_a_near_key_and_nothing_for_a_far_one() {
        let keys = ["timeout_seconds", "max_attempts", "required_scope"];
        assert_eq!(closest("timeout_second", keys), Some("timeout_seconds"));
        assert_eq!(closest("max_atempts", keys), Some("max_attempts"));
        assert_eq!(closest("colour", keys), None);
    }
}
