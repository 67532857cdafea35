//! The field language shared by tool inputs, tool outputs and the final answer:
//! short forms (`case_id: run-bound-resource`, `canonical_code: optional string`,
//! `codes: list of string`) and long forms with constraints.

use crate::codes::Code;
use crate::reader::{Reader, Sp, is_snake_case, list};
use crate::yaml::{Node, NodeKind, Span};

/// Where an input field's value comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The model proposes it; it is visible in the tool's input schema.
    ModelProposed,
    /// The run's resource id: visible to the model, checked against the run.
    RunBoundResource,
    /// Filled by the runtime from trusted context; never visible to the model.
    SystemInjected,
}

impl Source {
    pub const NAMES: &'static [&'static str] =
        &["model-proposed", "run-bound-resource", "system-injected"];

    fn parse(s: &str) -> Option<Source> {
        match s {
            "model-proposed" => Some(Source::ModelProposed),
            "run-bound-resource" => Some(Source::RunBoundResource),
            "system-injected" => Some(Source::SystemInjected),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Source::ModelProposed => "model-proposed",
            Source::RunBoundResource => "run-bound-resource",
            Source::SystemInjected => "system-injected",
        }
    }

    pub fn model_visible(self) -> bool {
        self != Source::SystemInjected
    }
}

/// A field's type with its constraints.
#[derive(Debug, Clone, PartialEq)]
pub enum FieldType {
    String {
        min_length: Option<u64>,
        max_length: Option<u64>,
        pattern: Option<String>,
    },
    Integer {
        minimum: Option<f64>,
        maximum: Option<f64>,
    },
    Number {
        minimum: Option<f64>,
        maximum: Option<f64>,
    },
    Boolean,
    DateTime,
    List {
        items: Box<FieldSpec>,
        min_items: Option<u64>,
        max_items: Option<u64>,
    },
    Object(Vec<Field>),
    Enum(Vec<String>),
}

impl FieldType {
    pub fn name(&self) -> &'static str {
        match self {
            FieldType::String { .. } => "string",
            FieldType::Integer { .. } => "integer",
            FieldType::Number { .. } => "number",
            FieldType::Boolean => "boolean",
            FieldType::DateTime => "date-time",
            FieldType::List { .. } => "list",
            FieldType::Object(_) => "object",
            FieldType::Enum(_) => "enum",
        }
    }
}

/// The type of a field plus whether it may be absent.
#[derive(Debug, Clone, PartialEq)]
pub struct FieldSpec {
    pub ty: FieldType,
    pub optional: bool,
    pub description: Option<String>,
    pub span: Span,
}

/// A named field (an output field, an object member, a final-answer field).
#[derive(Debug, Clone, PartialEq)]
pub struct Field {
    pub name: Sp<String>,
    pub spec: FieldSpec,
}

/// A tool input field: a field with a source.
#[derive(Debug, Clone, PartialEq)]
pub struct InputField {
    pub name: Sp<String>,
    pub source: Sp<Source>,
    pub spec: FieldSpec,
}

const TYPE_NAMES: &[&str] = &[
    "string",
    "integer",
    "number",
    "boolean",
    "date-time",
    "list",
    "object",
    "enum",
];

pub(crate) const LONG_KEYS: &[&str] = &[
    "type",
    "optional",
    "description",
    "min_length",
    "max_length",
    "pattern",
    "enum",
    "minimum",
    "maximum",
    "items",
    "fields",
    "format",
    "min_items",
    "max_items",
];

pub(crate) const INPUT_LONG_KEYS: &[&str] = &[
    "source",
    "type",
    "optional",
    "description",
    "min_length",
    "max_length",
    "pattern",
    "enum",
    "minimum",
    "maximum",
    "items",
    "fields",
    "format",
    "min_items",
    "max_items",
];

/// Reads a mapping of named fields (outputs, object members, final-answer fields).
pub fn read_fields(r: &mut Reader, node: &Node, what: &str) -> Vec<Field> {
    let Some(map) = r.mapping(node, what, None) else {
        return Vec::new();
    };
    let mut fields = Vec::new();
    for (name, key, value) in map.entries() {
        let name = Sp::new(name.to_string(), key.span.clone());
        check_field_name(r, &name);
        let path = format!("{what}.{}", name.value);
        if let Some(spec) = read_spec(r, value, &path, LONG_KEYS) {
            fields.push(Field { name, spec });
        }
    }
    fields
}

/// Reads the `input` mapping of a tool contract.
/// `None` when `input` is not a mapping at all (already reported).
pub fn read_inputs(r: &mut Reader, node: &Node) -> Option<Vec<InputField>> {
    let map = r.mapping(node, "input", None)?;
    let mut fields = Vec::new();
    for (name, key, value) in map.entries() {
        let name = Sp::new(name.to_string(), key.span.clone());
        check_field_name(r, &name);
        let path = format!("input.{}", name.value);
        match &value.kind {
            // Short form: the value is the source; the type is a string.
            NodeKind::Str(_) => {
                let Some(src) = r.one_of(value, &path, Source::NAMES) else {
                    continue;
                };
                let source = Source::parse(&src.value).expect("validated by one_of");
                fields.push(InputField {
                    name,
                    source: Sp::new(source, src.span),
                    spec: FieldSpec {
                        ty: FieldType::String {
                            min_length: None,
                            max_length: None,
                            pattern: None,
                        },
                        optional: false,
                        description: None,
                        span: value.span.clone(),
                    },
                });
            }
            _ => {
                let Some(map) = r.mapping(value, &path, Some(INPUT_LONG_KEYS)) else {
                    continue;
                };
                let source = match map.get("source") {
                    Some(n) => r
                        .one_of(n, &format!("{path}.source"), Source::NAMES)
                        .map(|s| Sp::new(Source::parse(&s.value).expect("validated"), s.span)),
                    None => {
                        let d = r
                            .error(
                                Code::UnansweredQuestion,
                                key.span.clone(),
                                format!(
                                    "input field `{}` does not say where its value comes from",
                                    name.value
                                ),
                            )
                            .label("no `source`")
                            .help(format!(
                                "question 4 (where input comes from): add `source:` with one of {}",
                                list(Source::NAMES)
                            ));
                        r.report(d);
                        None
                    }
                };
                let spec = read_long(r, value, &map, &path);
                if let (Some(source), Some(spec)) = (source, spec) {
                    fields.push(InputField { name, source, spec });
                }
            }
        }
    }
    Some(fields)
}

fn check_field_name(r: &mut Reader, name: &Sp<String>) {
    if !is_snake_case(&name.value) {
        let d = r
            .error(
                Code::InvalidFieldName,
                name.span.clone(),
                format!("field name `{}` is not snake_case", name.value),
            )
            .label("invalid field name")
            .help("use lowercase letters, digits and `_`, starting with a letter, at most 64 characters");
        r.report(d);
    }
}

/// A field spec in short form (`optional list of string`) or long form (a mapping).
fn read_spec(r: &mut Reader, node: &Node, path: &str, keys: &[&str]) -> Option<FieldSpec> {
    match &node.kind {
        NodeKind::Str(text) => parse_short(r, text, node.span.clone(), path),
        NodeKind::Map(_) => {
            let map = r.mapping(node, path, Some(keys))?;
            read_long(r, node, &map, path)
        }
        _ => {
            let d = r
                .error(
                    Code::WrongType,
                    node.span.clone(),
                    format!(
                        "expected a type or a mapping for `{path}`, found {}",
                        node.kind.describe()
                    ),
                )
                .label("expected a type")
                .help("write a type such as `string` or `optional list of string`, or a mapping with `type:`");
            r.report(d);
            None
        }
    }
}

fn parse_short(r: &mut Reader, text: &str, span: Span, path: &str) -> Option<FieldSpec> {
    let mut words: Vec<&str> = text.split_whitespace().collect();
    let optional = words.first() == Some(&"optional");
    if optional {
        words.remove(0);
    }
    let ty = parse_type_words(r, &words, text, span.clone(), path)?;
    Some(FieldSpec {
        ty,
        optional,
        description: None,
        span,
    })
}

fn parse_type_words(
    r: &mut Reader,
    words: &[&str],
    text: &str,
    span: Span,
    path: &str,
) -> Option<FieldType> {
    match words {
        ["list", "of", rest @ ..] if !rest.is_empty() => {
            let inner = parse_type_words(r, rest, text, span.clone(), path)?;
            Some(FieldType::List {
                items: Box::new(FieldSpec {
                    ty: inner,
                    optional: false,
                    description: None,
                    span,
                }),
                min_items: None,
                max_items: None,
            })
        }
        [word] => match *word {
            "string" => Some(FieldType::String {
                min_length: None,
                max_length: None,
                pattern: None,
            }),
            "integer" => Some(FieldType::Integer {
                minimum: None,
                maximum: None,
            }),
            "number" => Some(FieldType::Number {
                minimum: None,
                maximum: None,
            }),
            "boolean" => Some(FieldType::Boolean),
            "date-time" => Some(FieldType::DateTime),
            "object" | "enum" | "list" => {
                let d = r
                    .error(
                        Code::InvalidFieldType,
                        span,
                        format!("`{word}` for `{path}` needs more than the short form"),
                    )
                    .label("incomplete type")
                    .help(match *word {
                        "object" => "use the long form with `type: object` and `fields:`",
                        "enum" => "use the long form with `type: enum` and `enum: [...]`",
                        _ => "write `list of <type>`",
                    });
                r.report(d);
                None
            }
            other => {
                unknown_type(r, other, span, path);
                None
            }
        },
        _ => {
            let d = r
                .error(
                    Code::InvalidFieldType,
                    span,
                    format!("`{text}` is not a type for `{path}`"),
                )
                .label("not a type")
                .help("write `[optional] <type>` or `[optional] list of <type>`");
            r.report(d);
            None
        }
    }
}

fn unknown_type(r: &mut Reader, word: &str, span: Span, path: &str) {
    let mut d = r
        .error(
            Code::InvalidFieldType,
            span,
            format!("unknown type `{word}` for `{path}`"),
        )
        .label("unknown type");
    d = match crate::diagnostic::closest(word, TYPE_NAMES.iter().copied()) {
        Some(c) => d.help(format!("did you mean `{c}`?")),
        None => d.help(format!("types: {}", list(TYPE_NAMES))),
    };
    r.report(d);
}

fn read_long(
    r: &mut Reader,
    node: &Node,
    map: &crate::reader::Mapping,
    path: &str,
) -> Option<FieldSpec> {
    let optional = map
        .get("optional")
        .and_then(|n| r.boolean(n, &format!("{path}.optional")))
        .map(|b| b.value)
        .unwrap_or(false);
    let description = map
        .get("description")
        .and_then(|n| r.string(n, &format!("{path}.description")))
        .map(|s| s.value);
    // `format: date-time` on a string is the same as `type: date-time`.
    let format_dt = match map.get("format") {
        Some(n) => r
            .one_of(n, &format!("{path}.format"), &["date-time"])
            .is_some(),
        None => false,
    };
    let type_name = match map.get("type") {
        Some(n) => {
            let s = r.string(n, &format!("{path}.type"))?;
            if !TYPE_NAMES.contains(&s.value.as_str()) {
                // Also accept the short forms inside `type:` (e.g. `list of string`).
                let words: Vec<&str> = s.value.split_whitespace().collect();
                if words.len() > 1 {
                    let ty = parse_type_words(r, &words, &s.value, s.span.clone(), path)?;
                    return Some(FieldSpec {
                        ty,
                        optional,
                        description,
                        span: node.span.clone(),
                    });
                }
                unknown_type(r, &s.value, s.span, path);
                return None;
            }
            s
        }
        None if map.get("enum").is_some() => Sp::new("enum".to_string(), node.span.clone()),
        None => Sp::new("string".to_string(), node.span.clone()),
    };

    let allowed: &[&str] = match type_name.value.as_str() {
        "string" => &["min_length", "max_length", "pattern", "enum", "format"],
        "integer" | "number" => &["minimum", "maximum"],
        "list" => &["items", "min_items", "max_items"],
        "object" => &["fields"],
        "enum" => &["enum"],
        "date-time" => &["format"],
        _ => &[],
    };
    let mut ok = true;
    for (key, key_node, _) in map.entries() {
        if matches!(key, "type" | "optional" | "description" | "source") {
            continue;
        }
        if !allowed.contains(&key) {
            let d = r
                .error(
                    Code::InvalidFieldType,
                    key_node.span.clone(),
                    format!(
                        "`{key}` does not apply to a field of type `{}`",
                        type_name.value
                    ),
                )
                .label(format!("not a constraint of `{}`", type_name.value))
                .secondary(r.file, type_name.span.clone(), "type declared here")
                .help(if allowed.is_empty() {
                    format!("`{}` takes no constraints", type_name.value)
                } else {
                    format!("`{}` takes {}", type_name.value, list(allowed))
                });
            r.report(d);
            ok = false;
        }
    }

    let uint = |r: &mut Reader, key: &str| -> Option<Sp<u64>> {
        let n = map.get(key)?;
        let v = r.integer(n, &format!("{path}.{key}"))?;
        match u64::try_from(v.value) {
            Ok(u) => Some(Sp::new(u, v.span)),
            Err(_) => {
                let d = r
                    .error(
                        Code::InvalidFieldType,
                        v.span,
                        format!("`{path}.{key}` cannot be negative"),
                    )
                    .label("negative")
                    .help("use 0 or a positive number");
                r.report(d);
                None
            }
        }
    };

    let ty = match type_name.value.as_str() {
        "string" if format_dt => FieldType::DateTime,
        "string" if map.get("enum").is_some() => FieldType::Enum(read_enum(r, map, path)?),
        "string" => {
            let min = uint(r, "min_length");
            let max = uint(r, "max_length");
            check_order(
                r,
                min.as_ref(),
                max.as_ref(),
                path,
                "min_length",
                "max_length",
            );
            let pattern = map
                .get("pattern")
                .and_then(|n| r.string(n, &format!("{path}.pattern")))
                .map(|s| s.value);
            FieldType::String {
                min_length: min.map(|v| v.value),
                max_length: max.map(|v| v.value),
                pattern,
            }
        }
        "integer" | "number" => {
            let min = map
                .get("minimum")
                .and_then(|n| r.number(n, &format!("{path}.minimum")));
            let max = map
                .get("maximum")
                .and_then(|n| r.number(n, &format!("{path}.maximum")));
            check_order(r, min.as_ref(), max.as_ref(), path, "minimum", "maximum");
            let (minimum, maximum) = (min.map(|v| v.value), max.map(|v| v.value));
            if type_name.value == "integer" {
                FieldType::Integer { minimum, maximum }
            } else {
                FieldType::Number { minimum, maximum }
            }
        }
        "boolean" => FieldType::Boolean,
        "date-time" => FieldType::DateTime,
        "enum" => match map.get("enum") {
            Some(_) => FieldType::Enum(read_enum(r, map, path)?),
            None => {
                let d = r
                    .error(
                        Code::InvalidFieldType,
                        type_name.span.clone(),
                        format!("enum field `{path}` lists no values"),
                    )
                    .label("no `enum:` values")
                    .help("add `enum: [VALUE_A, VALUE_B]`");
                r.report(d);
                return None;
            }
        },
        "list" => {
            let Some(items_node) = map.get("items") else {
                let d = r
                    .error(
                        Code::InvalidFieldType,
                        type_name.span.clone(),
                        format!("list field `{path}` does not say what it holds"),
                    )
                    .label("no `items:`")
                    .help("add `items: string` (or any type), or write `list of string`");
                r.report(d);
                return None;
            };
            let items = read_spec(r, items_node, &format!("{path}.items"), LONG_KEYS)?;
            let min = uint(r, "min_items");
            let max = uint(r, "max_items");
            check_order(
                r,
                min.as_ref(),
                max.as_ref(),
                path,
                "min_items",
                "max_items",
            );
            FieldType::List {
                items: Box::new(items),
                min_items: min.map(|v| v.value),
                max_items: max.map(|v| v.value),
            }
        }
        "object" => match map.get("fields") {
            Some(n) => FieldType::Object(read_fields(r, n, &format!("{path}.fields"))),
            None => {
                let d = r
                    .error(
                        Code::InvalidFieldType,
                        type_name.span.clone(),
                        format!("object field `{path}` declares no fields"),
                    )
                    .label("no `fields:`")
                    .help("add `fields:` with the object's members");
                r.report(d);
                return None;
            }
        },
        _ => unreachable!("type names were validated above"),
    };
    ok.then_some(FieldSpec {
        ty,
        optional,
        description,
        span: node.span.clone(),
    })
}

fn read_enum(r: &mut Reader, map: &crate::reader::Mapping, path: &str) -> Option<Vec<String>> {
    let node = map.get("enum")?;
    let values = r.strings(node, &format!("{path}.enum"));
    if values.is_empty() {
        let d = r
            .error(
                Code::InvalidFieldType,
                node.span.clone(),
                format!("enum field `{path}` lists no values"),
            )
            .label("empty")
            .help("list at least one value");
        r.report(d);
        return None;
    }
    r.unique(&values, &format!("{path}.enum"));
    Some(values.into_iter().map(|v| v.value).collect())
}

fn check_order<T: PartialOrd + std::fmt::Display>(
    r: &mut Reader,
    min: Option<&Sp<T>>,
    max: Option<&Sp<T>>,
    path: &str,
    min_key: &str,
    max_key: &str,
) {
    if let (Some(min), Some(max)) = (min, max)
        && min.value > max.value
    {
        let d = r
            .error(
                Code::InvalidFieldType,
                min.span.clone(),
                format!(
                    "`{path}.{min_key}` ({}) is above `{max_key}` ({})",
                    min.value, max.value
                ),
            )
            .label("minimum here")
            .secondary(r.file, max.span.clone(), "maximum here")
            .help(format!("make `{min_key}` at most `{max_key}`"));
        r.report(d);
    }
}
