//! Output formats for diagnostics: rustc-like text, JSON, and SARIF 2.1.0.

use codespan_reporting::diagnostic::{Diagnostic as CsDiagnostic, Label as CsLabel};
use codespan_reporting::files::SimpleFiles;
use codespan_reporting::term::{self, Config};
use serde_json::{Value, json};

use crate::codes::Code;
use crate::diagnostic::{Diagnostic, Severity};
use crate::source::Sources;

fn codespan_files(sources: &Sources) -> SimpleFiles<String, String> {
    let mut files = SimpleFiles::new();
    for (_, f) in sources.iter() {
        files.add(f.path.clone(), f.text.clone());
    }
    files
}

fn to_codespan(sources: &Sources, d: &Diagnostic) -> CsDiagnostic<usize> {
    let base = match d.severity {
        Severity::Error => CsDiagnostic::error(),
        Severity::Warning => CsDiagnostic::warning(),
    };
    let mut labels = Vec::new();
    if let Some(p) = &d.primary {
        labels.push(
            CsLabel::primary(p.file.0, sources.clamp(p.file, &p.span)).with_message(&p.message),
        );
    }
    for s in &d.secondary {
        labels.push(
            CsLabel::secondary(s.file.0, sources.clamp(s.file, &s.span)).with_message(&s.message),
        );
    }
    let mut notes = Vec::new();
    if d.primary.is_none()
        && let Some(f) = d.file
    {
        notes.push(format!("in `{}`", sources.get(f).path));
    }
    if let Some(h) = &d.help {
        notes.push(format!("help: {h}"));
    }
    base.with_code(d.code.as_str())
        .with_message(&d.message)
        .with_labels(labels)
        .with_notes(notes)
}

/// Renders diagnostics as text, with colours when `color` is set, followed by a summary.
pub fn human(sources: &Sources, diagnostics: &[Diagnostic], color: bool) -> String {
    let files = codespan_files(sources);
    let config = Config::default();
    let mut out = String::new();
    for d in diagnostics {
        let cs = to_codespan(sources, d);
        let rendered = if color {
            let mut buffer = term::termcolor::Buffer::ansi();
            match term::emit_to_write_style(&mut buffer, &config, &files, &cs) {
                Ok(()) => String::from_utf8_lossy(buffer.as_slice()).into_owned(),
                Err(_) => format!(
                    "{}[{}]: {}\n",
                    d.severity.as_str(),
                    d.code.as_str(),
                    d.message
                ),
            }
        } else {
            term::emit_into_string(&config, &files, &cs).unwrap_or_else(|_| {
                format!(
                    "{}[{}]: {}\n",
                    d.severity.as_str(),
                    d.code.as_str(),
                    d.message
                )
            })
        };
        out.push_str(&rendered);
    }
    out.push_str(&summary(diagnostics));
    out
}

/// `check: 2 errors, 1 warning` or `check: no problems`.
pub fn summary(diagnostics: &[Diagnostic]) -> String {
    let errors = diagnostics
        .iter()
        .filter(|d| d.severity == Severity::Error)
        .count();
    let warnings = diagnostics.len() - errors;
    if diagnostics.is_empty() {
        return "no problems found\n".to_string();
    }
    let plural = |n: usize, w: &str| format!("{n} {w}{}", if n == 1 { "" } else { "s" });
    format!(
        "found {}, {}\n",
        plural(errors, "error"),
        plural(warnings, "warning")
    )
}

/// Position fields shared by the JSON and SARIF forms: 1-based, end exclusive.
struct Region {
    file: Option<String>,
    start: Option<(usize, usize)>,
    end: Option<(usize, usize)>,
}

fn region(sources: &Sources, d: &Diagnostic) -> Region {
    let file = d
        .primary
        .as_ref()
        .map(|p| p.file)
        .or(d.file)
        .map(|f| sources.get(f).path.clone());
    match &d.primary {
        Some(p) => {
            let f = sources.get(p.file);
            let span = sources.clamp(p.file, &p.span);
            Region {
                file,
                start: Some(f.position(span.start)),
                end: Some(f.position(span.end)),
            }
        }
        None => Region {
            file,
            start: None,
            end: None,
        },
    }
}

/// An array of `{code, severity, message, file, line, column, end_line, end_column, help}`.
pub fn json(sources: &Sources, diagnostics: &[Diagnostic]) -> String {
    let items: Vec<Value> = diagnostics
        .iter()
        .map(|d| {
            let r = region(sources, d);
            json!({
                "code": d.code.as_str(),
                "severity": d.severity.as_str(),
                "message": d.message,
                "file": r.file,
                "line": r.start.map(|p| p.0),
                "column": r.start.map(|p| p.1),
                "end_line": r.end.map(|p| p.0),
                "end_column": r.end.map(|p| p.1),
                "help": d.help,
            })
        })
        .collect();
    serde_json::to_string_pretty(&items).expect("json values always serialize") + "\n"
}

/// SARIF 2.1.0 log with one run; rules are the codes that occur, in code order.
pub fn sarif(sources: &Sources, diagnostics: &[Diagnostic]) -> String {
    let mut rules: Vec<Code> = diagnostics.iter().map(|d| d.code).collect();
    rules.sort();
    rules.dedup();
    let rule_objects: Vec<Value> = rules
        .iter()
        .map(|c| {
            json!({
                "id": c.as_str(),
                "name": rule_name(c.title()),
                "shortDescription": { "text": c.title() },
                "fullDescription": { "text": c.explanation() },
                "help": { "text": format!("run `caseops-compile explain {}`", c.as_str()) },
                "defaultConfiguration": { "level": level(c.severity()) },
            })
        })
        .collect();
    let results: Vec<Value> = diagnostics
        .iter()
        .map(|d| {
            let r = region(sources, d);
            let mut text = d.message.clone();
            if let Some(h) = &d.help {
                text.push_str(&format!(" (help: {h})"));
            }
            let mut physical = json!({
                "artifactLocation": { "uri": r.file.clone().unwrap_or_else(|| "contracts".into()), "uriBaseId": "%SRCROOT%" },
            });
            if let (Some(s), Some(e)) = (r.start, r.end) {
                physical["region"] = json!({
                    "startLine": s.0, "startColumn": s.1, "endLine": e.0, "endColumn": e.1.max(s.1 + usize::from(e.0 == s.0 && e.1 == s.1)),
                });
            }
            let related: Vec<Value> = d
                .secondary
                .iter()
                .enumerate()
                .map(|(i, l)| {
                    let f = sources.get(l.file);
                    let span = sources.clamp(l.file, &l.span);
                    let (sl, sc) = f.position(span.start);
                    let (el, ec) = f.position(span.end);
                    json!({
                        "id": i,
                        "message": { "text": l.message },
                        "physicalLocation": {
                            "artifactLocation": { "uri": f.path, "uriBaseId": "%SRCROOT%" },
                            "region": { "startLine": sl, "startColumn": sc, "endLine": el, "endColumn": ec.max(sc + usize::from(el == sl && ec == sc)) },
                        },
                    })
                })
                .collect();
            let mut result = json!({
                "ruleId": d.code.as_str(),
                "ruleIndex": rules.iter().position(|c| *c == d.code).unwrap_or(0),
                "level": level(d.severity),
                "message": { "text": text },
                "locations": [ { "physicalLocation": physical } ],
            });
            if !related.is_empty() {
                result["relatedLocations"] = Value::Array(related);
            }
            result
        })
        .collect();
    let log = json!({
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [{
            "tool": { "driver": {
                "name": "caseops-compile",
                "version": env!("CARGO_PKG_VERSION"),
                "informationUri": "https://github.com/caseops/caseops",
                "rules": rule_objects,
            }},
            "columnKind": "unicodeCodePoints",
            "results": results,
        }],
    });
    serde_json::to_string_pretty(&log).expect("json values always serialize") + "\n"
}

fn level(s: Severity) -> &'static str {
    match s {
        Severity::Error => "error",
        Severity::Warning => "warning",
    }
}

/// SARIF rule names are PascalCase identifiers.
fn rule_name(title: &str) -> String {
    title
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(|w| {
            let mut c = w.chars();
            c.next()
                .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
                .unwrap_or_default()
        })
        .collect()
}
