//! Tool contracts (`contracts/tools/*.yaml`): reading one file into a [`ToolContract`]
//! and the rules that concern a single tool. Rules that need other files (duplicate
//! names, stages, catalog, references between tools) live in `project.rs`.

use crate::codes::Code;
use crate::fields::{Field, FieldType, InputField, Source, read_fields, read_inputs};
use crate::reader::{Reader, Sp, is_snake_case, list};
use crate::source::FileId;
use crate::yaml::{Node, Span};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Risk {
    ReadOnly,
    ReversibleWrite,
    IrreversibleWrite,
}

impl Risk {
    pub const NAMES: &'static [&'static str] =
        &["read_only", "reversible_write", "irreversible_write"];

    fn parse(s: &str) -> Option<Risk> {
        match s {
            "read_only" => Some(Risk::ReadOnly),
            "reversible_write" => Some(Risk::ReversibleWrite),
            "irreversible_write" => Some(Risk::IrreversibleWrite),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        Risk::NAMES[self as usize]
    }

    pub fn is_write(self) -> bool {
        self != Risk::ReadOnly
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    Business,
    Transient,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackoffKind {
    None,
    Fixed,
    Exponential,
}

/// Retry spacing between attempts; jitter is applied by the runtime.
#[derive(Debug, Clone, PartialEq)]
pub struct Backoff {
    pub kind: BackoffKind,
    pub initial_ms: u64,
    pub max_ms: u64,
}

impl Default for Backoff {
    fn default() -> Self {
        Self {
            kind: BackoffKind::Exponential,
            initial_ms: 100,
            max_ms: 2_000,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnUnknown {
    NeedsHuman,
    Fail,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Effects {
    pub confirm_with: Sp<String>,
    pub on_unknown: OnUnknown,
}

/// What the audit record of a call holds when a contract does not say otherwise.
pub const DEFAULT_AUDIT: &[&str] = &[
    "principal",
    "arguments_hash",
    "result_digest",
    "latency",
    "tool_version",
    "correlation_ids",
];

const AUDIT_ITEMS: &[&str] = &[
    "principal",
    "arguments_hash",
    "arguments",
    "result_digest",
    "result",
    "latency",
    "tool_version",
    "correlation_ids",
];

/// One tool contract, fully read. Optional answers already hold their defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolContract {
    pub file: FileId,
    pub name: Sp<String>,
    pub version: Sp<String>,
    pub title: String,
    pub description: Option<String>,
    pub required_scope: Sp<String>,
    /// `None` means every stage the agent declares.
    pub stages: Option<Vec<Sp<String>>>,
    pub requires: Vec<Sp<String>>,
    pub input: Vec<InputField>,
    pub output: Vec<Field>,
    pub evidence: Option<Sp<String>>,
    pub risk: Sp<Risk>,
    pub timeout_seconds: Sp<i64>,
    pub max_attempts: Sp<i64>,
    pub backoff: Backoff,
    pub idempotency_key: Vec<Sp<String>>,
    pub approval: Option<Sp<String>>,
    pub effects: Option<Effects>,
    pub errors: Vec<(Sp<String>, ErrorClass)>,
    pub audit: Vec<String>,
}

/// What rules that span files need of a tool: read whenever the tool's name is, so
/// an error that relates it to the agent or to other tools is reported together
/// with the tool's own errors instead of after they are fixed.
#[derive(Debug, Clone)]
pub struct ToolOutline {
    pub file: FileId,
    pub name: Sp<String>,
    /// `None` means every stage the agent declares.
    pub stages: Option<Vec<Sp<String>>>,
    pub requires: Vec<Sp<String>>,
    pub confirm_with: Option<Sp<String>>,
    /// `None` when the tool's `risk` could not be read.
    pub risk: Option<Risk>,
    /// The names of its run-bound input fields (empty when `input` could not be read).
    pub run_bound: Vec<Sp<String>>,
    pub timeout_seconds: Option<Sp<i64>>,
}

/// One tool file read: its outline when the name could be read, its contract when
/// nothing required was missing or unreadable.
pub struct ToolRead {
    pub outline: Option<ToolOutline>,
    pub contract: Option<ToolContract>,
}

pub(crate) const BACKOFF_KEYS: &[&str] = &["kind", "initial_ms", "max_ms"];
pub(crate) const EFFECTS_KEYS: &[&str] = &["confirm_with", "on_unknown"];
pub(crate) const TOOL_KEYS: &[&str] = &[
    "name",
    "version",
    "title",
    "description",
    "required_scope",
    "stages",
    "requires",
    "input",
    "output",
    "evidence",
    "risk",
    "timeout_seconds",
    "max_attempts",
    "backoff",
    "idempotency_key",
    "approval",
    "effects",
    "errors",
    "audit",
];

/// The nine questions, for "unanswered question" messages.
fn question(key: &str) -> &'static str {
    match key {
        "name" | "version" => "question 1 (what it does)",
        "required_scope" => "question 2 (who can call it)",
        "input" => "question 4 (where input comes from)",
        "output" => "question 5 (how output is validated)",
        "risk" => "question 6 (risk)",
        "timeout_seconds" | "max_attempts" => "question 7 (retry safety)",
        _ => "a required answer",
    }
}

/// Reads a tool contract. Returns `None` when a required answer is missing or broken;
/// every problem found on the way has been reported.
pub fn read_tool(r: &mut Reader, root: &Node) -> ToolRead {
    let Some(map) = r.mapping(root, "tool contract", Some(TOOL_KEYS)) else {
        return ToolRead {
            outline: None,
            contract: None,
        };
    };
    let mut missing = false;
    let mut require = |r: &mut Reader, key: &str| -> Option<&Node> {
        let node = map.get(key);
        if node.is_none() {
            let name = map.get("name").and_then(|n| n.as_str()).unwrap_or("tool");
            let span = map.key_node("name").map(|k| k.span.clone()).unwrap_or(0..0);
            let d = r
                .error(
                    Code::UnansweredQuestion,
                    span,
                    format!(
                        "tool `{name}` does not answer {}: `{key}` is missing",
                        question(key)
                    ),
                )
                .label(format!("`{key}` missing in this contract"))
                .help(match key {
                    "version" => "add `version: \"1.0\"`".to_string(),
                    "required_scope" => "add `required_scope: area:verb`, the OAuth scope a task token needs".to_string(),
                    "input" => "add `input:` mapping each field to its source (`model-proposed`, `run-bound-resource` or `system-injected`)".to_string(),
                    "output" => "add `output:` with the fields the tool returns and their types".to_string(),
                    "risk" => format!("add `risk:` with one of {}", list(Risk::NAMES)),
                    "timeout_seconds" => "add `timeout_seconds:` between 1 and 60".to_string(),
                    "max_attempts" => "add `max_attempts:` between 1 and 5".to_string(),
                    _ => format!("add `{key}:`"),
                });
            r.report(d);
            missing = true;
        }
        node
    };

    let name_node = require(r, "name");
    let version_node = require(r, "version");
    let scope_node = require(r, "required_scope");
    let input_node = require(r, "input");
    let output_node = require(r, "output");
    let risk_node = require(r, "risk");
    let timeout_node = require(r, "timeout_seconds");
    let attempts_node = require(r, "max_attempts");

    let name = name_node.and_then(|n| r.string(n, "name"));
    if let Some(name) = &name
        && !is_snake_case(&name.value)
    {
        let d = r
            .error(
                Code::InvalidToolName,
                name.span.clone(),
                format!("tool name `{}` is invalid", name.value),
            )
            .label("must match `^[a-z][a-z0-9_]*$`, at most 64 characters")
            .help(format!("use snake_case, e.g. `{}`", snake(&name.value)));
        r.report(d);
    }
    let version = version_node.and_then(|n| r.string(n, "version"));
    if let Some(v) = &version
        && !is_semverish(&v.value)
    {
        let d = r
            .error(
                Code::InvalidVersion,
                v.span.clone(),
                format!("version `{}` is not a valid version", v.value),
            )
            .label("expected `MAJOR[.MINOR[.PATCH]][-suffix]`")
            .help("write a quoted version such as \"1.0\" or \"2.1.3\"");
        r.report(d);
    }
    let title = map.get("title").and_then(|n| r.string(n, "title"));
    let description = map
        .get("description")
        .and_then(|n| r.string(n, "description"));
    let required_scope = scope_node.and_then(|n| r.string(n, "required_scope"));
    if let Some(s) = &required_scope
        && !is_scope(&s.value)
    {
        let d = r
            .error(
                Code::InvalidIdentifier,
                s.span.clone(),
                format!("scope `{}` is not a valid scope", s.value),
            )
            .label("expected `area:verb`")
            .help("scopes look like `case:read`: lowercase words joined by `:`");
        r.report(d);
    }
    let stages = map.get("stages").map(|n| r.strings(n, "stages"));
    if let Some(stages) = &stages {
        r.unique(stages, "stages");
    }
    let requires = map
        .get("requires")
        .map(|n| r.strings(n, "requires"))
        .unwrap_or_default();
    let input = input_node.and_then(|n| read_inputs(r, n));
    if let (Some(node), Some(input)) = (input_node, &input) {
        let tool_name = name.as_ref().map(|n| n.value.as_str()).unwrap_or("tool");
        let span = map
            .key_node("input")
            .map(|k| k.span.clone())
            .unwrap_or(node.span.clone());
        check_inputs(r, tool_name, input, span);
    }
    let output = output_node
        .map(|n| read_fields(r, n, "output"))
        .unwrap_or_default();
    let evidence = map.get("evidence").and_then(|n| r.string(n, "evidence"));
    let risk = risk_node
        .and_then(|n| r.one_of(n, "risk", Risk::NAMES))
        .map(|s| Sp::new(Risk::parse(&s.value).expect("validated"), s.span));
    let timeout_seconds = timeout_node.and_then(|n| r.integer(n, "timeout_seconds"));
    if let Some(t) = &timeout_seconds
        && !(1..=60).contains(&t.value)
    {
        let d = r
            .error(
                Code::TimeoutOutOfRange,
                t.span.clone(),
                format!("`timeout_seconds` is {}, outside (0, 60]", t.value),
            )
            .label("out of range")
            .help("use a timeout between 1 and 60 seconds");
        r.report(d);
    }
    let max_attempts = attempts_node.and_then(|n| r.integer(n, "max_attempts"));
    if let Some(a) = &max_attempts
        && !(1..=5).contains(&a.value)
    {
        let d = r
            .error(
                Code::AttemptsOutOfRange,
                a.span.clone(),
                format!("`max_attempts` is {}, outside 1..=5", a.value),
            )
            .label("out of range")
            .help("use between 1 and 5 attempts (the first attempt counts)");
        r.report(d);
    }
    let backoff = map
        .get("backoff")
        .map(|n| read_backoff(r, n))
        .unwrap_or_default();
    let idempotency_key = map
        .get("idempotency_key")
        .map(|n| r.strings(n, "idempotency_key"))
        .unwrap_or_default();
    let approval = map.get("approval").and_then(|n| r.string(n, "approval"));
    let effects = map.get("effects").and_then(|n| read_effects(r, n));
    let errors = map
        .get("errors")
        .map(|n| read_errors(r, n))
        .unwrap_or_default();
    let audit = match map.get("audit") {
        Some(n) => {
            let items = r.strings(n, "audit");
            r.unique(&items, "audit");
            items
                .into_iter()
                .filter_map(|i| r.one_of_sp(i, "audit", AUDIT_ITEMS))
                .collect()
        }
        None => DEFAULT_AUDIT.iter().map(|s| s.to_string()).collect(),
    };

    let outline = name.as_ref().map(|name| ToolOutline {
        file: r.file,
        name: name.clone(),
        stages: stages.clone(),
        requires: requires.clone(),
        confirm_with: effects.as_ref().map(|e| e.confirm_with.clone()),
        risk: risk.as_ref().map(|r| r.value),
        run_bound: input
            .iter()
            .flatten()
            .filter(|f| f.source.value == crate::fields::Source::RunBoundResource)
            .map(|f| f.name.clone())
            .collect(),
        timeout_seconds: timeout_seconds.clone(),
    });
    let contract = (|| {
        Some(ToolContract {
            file: r.file,
            title: title
                .map(|t| t.value)
                .unwrap_or_else(|| name.as_ref().map(|n| titled(&n.value)).unwrap_or_default()),
            description: description.map(|d| d.value),
            name: name?,
            version: version?,
            required_scope: required_scope?,
            stages,
            requires,
            input: input?,
            output,
            evidence,
            risk: risk?,
            timeout_seconds: timeout_seconds?,
            max_attempts: max_attempts?,
            backoff,
            idempotency_key,
            approval,
            effects,
            errors,
            audit,
        })
    })()
    .filter(|_| !missing);
    if let Some(tool) = &contract {
        check_tool(r, tool, &map_keys(&map));
    }
    ToolRead { outline, contract }
}

fn map_keys(map: &crate::reader::Mapping) -> Vec<(String, Span)> {
    map.entries()
        .map(|(k, kn, _)| (k.to_string(), kn.span.clone()))
        .collect()
}

impl Reader<'_> {
    fn one_of_sp(&mut self, item: Sp<String>, what: &str, allowed: &[&str]) -> Option<String> {
        if allowed.contains(&item.value.as_str()) {
            return Some(item.value);
        }
        let mut d = self
            .error(
                Code::InvalidValue,
                item.span.clone(),
                format!("`{}` is not a valid `{what}` item", item.value),
            )
            .label(format!("expected one of {}", list(allowed)));
        if let Some(c) = crate::diagnostic::closest(&item.value, allowed.iter().copied()) {
            d = d.help(format!("did you mean `{c}`?"));
        }
        self.report(d);
        None
    }
}

fn read_backoff(r: &mut Reader, node: &Node) -> Backoff {
    const KINDS: &[&str] = &["none", "fixed", "exponential"];
    let kind_of = |s: &str| match s {
        "none" => BackoffKind::None,
        "fixed" => BackoffKind::Fixed,
        _ => BackoffKind::Exponential,
    };
    let mut backoff = Backoff::default();
    if node.as_str().is_some() {
        if let Some(k) = r.one_of(node, "backoff", KINDS) {
            backoff.kind = kind_of(&k.value);
        }
        return backoff;
    }
    let Some(map) = r.mapping(node, "backoff", Some(BACKOFF_KEYS)) else {
        return backoff;
    };
    if let Some(k) = map
        .get("kind")
        .and_then(|n| r.one_of(n, "backoff.kind", KINDS))
    {
        backoff.kind = kind_of(&k.value);
    }
    let ms = |r: &mut Reader, key: &str| -> Option<Sp<u64>> {
        let v = r.integer(map.get(key)?, &format!("backoff.{key}"))?;
        if !(1..=60_000).contains(&v.value) {
            let d = r
                .error(
                    Code::InvalidValue,
                    v.span.clone(),
                    format!("`backoff.{key}` is {}, outside 1..=60000", v.value),
                )
                .label("out of range")
                .help("use milliseconds between 1 and 60000");
            r.report(d);
            return None;
        }
        Some(Sp::new(v.value as u64, v.span))
    };
    let initial = ms(r, "initial_ms");
    let max = ms(r, "max_ms");
    if let (Some(i), Some(m)) = (&initial, &max)
        && i.value > m.value
    {
        let d = r
            .error(
                Code::InvalidValue,
                i.span.clone(),
                format!(
                    "`backoff.initial_ms` ({}) is above `max_ms` ({})",
                    i.value, m.value
                ),
            )
            .label("initial delay here")
            .secondary(r.file, m.span.clone(), "maximum here")
            .help("make `initial_ms` at most `max_ms`");
        r.report(d);
    }
    if let Some(i) = initial {
        backoff.initial_ms = i.value;
    }
    if let Some(m) = max {
        backoff.max_ms = m.value;
    }
    backoff
}

fn read_effects(r: &mut Reader, node: &Node) -> Option<Effects> {
    let map = r.mapping(node, "effects", Some(EFFECTS_KEYS))?;
    let on_unknown = match map.get("on_unknown") {
        Some(n) => match r
            .one_of(n, "effects.on_unknown", &["needs_human", "fail"])?
            .value
            .as_str()
        {
            "fail" => OnUnknown::Fail,
            _ => OnUnknown::NeedsHuman,
        },
        None => OnUnknown::NeedsHuman,
    };
    let Some(confirm) = map.get("confirm_with") else {
        let d = r
            .error(
                Code::WriteWithoutConfirmation,
                node.span.clone(),
                "`effects` does not name a `confirm_with` tool",
            )
            .label("no `confirm_with`")
            .help("question 8 (effect confirmation): add `confirm_with:` naming a read-only tool that shows whether the write happened");
        r.report(d);
        return None;
    };
    let confirm_with = r.string(confirm, "effects.confirm_with")?;
    Some(Effects {
        confirm_with,
        on_unknown,
    })
}

fn read_errors(r: &mut Reader, node: &Node) -> Vec<(Sp<String>, ErrorClass)> {
    let Some(map) = r.mapping(node, "errors", None) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (code, key, value) in map.entries() {
        if !is_error_code(code) {
            let d = r
                .error(
                    Code::InvalidErrorCode,
                    key.span.clone(),
                    format!("error code `{code}` is not SCREAMING_SNAKE_CASE"),
                )
                .label("invalid error code")
                .help(format!(
                    "write it as `{}`",
                    code.to_ascii_uppercase().replace('-', "_")
                ));
            r.report(d);
            continue;
        }
        let path = format!("errors.{code}");
        let Some(class) = r.one_of(value, &path, &["business", "transient"]) else {
            continue;
        };
        let class = if class.value == "transient" {
            ErrorClass::Transient
        } else {
            ErrorClass::Business
        };
        out.push((Sp::new(code.to_string(), key.span.clone()), class));
    }
    out
}

/// Rules about a tool's inputs; they run even when other answers are broken.
fn check_inputs(r: &mut Reader, tool_name: &str, input: &[InputField], input_span: Span) {
    for field in input {
        if is_identity_name(&field.name.value) && field.source.value != Source::SystemInjected {
            let d = r
                .error(
                    Code::IdentityFromModel,
                    field.source.span.clone(),
                    format!(
                        "`{}` must be system-injected, not {}",
                        field.name.value,
                        field.source.value.as_str()
                    ),
                )
                .label("identity never comes from the model")
                .secondary(r.file, field.name.span.clone(), "identity-like field")
                .help(format!(
                    "declare `{}: system-injected`; the runtime fills it from trusted context",
                    field.name.value
                ));
            r.report(d);
        }
    }

    let bound: Vec<&InputField> = input
        .iter()
        .filter(|f| f.source.value == Source::RunBoundResource)
        .collect();
    match bound.as_slice() {
        [_] => {}
        [] => {
            let span = input_span.clone();
            let d = r
                .error(
                    Code::RunBoundResource,
                    span,
                    format!("tool `{}` has no run-bound-resource input", tool_name),
                )
                .label("no field here is `run-bound-resource`")
                .help("mark the resource id field (e.g. `case_id: run-bound-resource`) so the runtime can check it against the run");
            r.report(d);
        }
        [first, rest @ ..] => {
            for extra in rest {
                let d = r
                    .error(
                        Code::RunBoundResource,
                        extra.source.span.clone(),
                        format!(
                            "tool `{}` has more than one run-bound-resource input",
                            tool_name
                        ),
                    )
                    .label("second run-bound resource")
                    .secondary(
                        r.file,
                        first.source.span.clone(),
                        "first run-bound resource",
                    )
                    .help("a run is bound to one resource: make the other fields `model-proposed`");
                r.report(d);
            }
        }
    }
}

/// Rules about one tool that need nothing but the tool itself.
fn check_tool(r: &mut Reader, tool: &ToolContract, keys: &[(String, Span)]) {
    let key_span = |k: &str| keys.iter().find(|(n, _)| n == k).map(|(_, s)| s.clone());

    let write = tool.risk.value.is_write();
    if write {
        if tool.max_attempts.value > 1 && tool.idempotency_key.is_empty() {
            let d = r
                .error(
                    Code::RetryWithoutIdempotency,
                    tool.max_attempts.span.clone(),
                    format!(
                        "write tool `{}` may run {} times but declares no `idempotency_key`",
                        tool.name.value, tool.max_attempts.value
                    ),
                )
                .label("retries would repeat the effect")
                .secondary(r.file, tool.risk.span.clone(), "write tool")
                .help("add `idempotency_key: [<input fields>]` or set `max_attempts: 1`");
            r.report(d);
        }
        if tool.risk.value == Risk::IrreversibleWrite && tool.approval.is_none() {
            let d = r
                .error(
                    Code::IrreversibleWithoutApproval,
                    tool.risk.span.clone(),
                    format!("irreversible tool `{}` has no `approval`", tool.name.value),
                )
                .label("irreversible write")
                .help("add `approval: <role>` naming who must approve each call");
            r.report(d);
        }
        if tool.effects.is_none() && key_span("effects").is_none() {
            let d = r
                .error(
                    Code::WriteWithoutConfirmation,
                    tool.risk.span.clone(),
                    format!(
                        "write tool `{}` does not say how its effect is confirmed",
                        tool.name.value
                    ),
                )
                .label("write tool")
                .help("question 8 (effect confirmation): add `effects: {confirm_with: <read tool>, on_unknown: needs_human}`");
            r.report(d);
        }
    } else {
        for key in ["effects", "idempotency_key", "approval"] {
            if let Some(span) = key_span(key) {
                let d = r
                    .error(
                        Code::WriteKeyOnReadTool,
                        span,
                        format!("`{key}` on read-only tool `{}`", tool.name.value),
                    )
                    .label("only write tools take this")
                    .secondary(r.file, tool.risk.span.clone(), "declared read-only here")
                    .help(format!(
                        "remove `{key}`, or change `risk` if the tool writes"
                    ));
                r.report(d);
            }
        }
    }

    for key in &tool.idempotency_key {
        if !tool.input.iter().any(|f| f.name.value == key.value) {
            let names: Vec<&str> = tool.input.iter().map(|f| f.name.value.as_str()).collect();
            let mut d = r
                .error(
                    Code::UnknownIdempotencyField,
                    key.span.clone(),
                    format!(
                        "`idempotency_key` names `{}`, which is not an input field",
                        key.value
                    ),
                )
                .label("unknown input field");
            d = match crate::diagnostic::closest(&key.value, names.iter().copied()) {
                Some(c) => d.help(format!("did you mean `{c}`?")),
                None => d.help(format!("input fields: {}", list(&names))),
            };
            r.report(d);
        }
    }

    match &tool.evidence {
        Some(ev) => match tool.output.iter().find(|f| f.name.value == ev.value) {
            Some(f) if matches!(f.spec.ty, FieldType::String { .. }) && !f.spec.optional => {}
            Some(f) => {
                let d = r
                    .error(
                        Code::InvalidEvidence,
                        ev.span.clone(),
                        format!("evidence field `{}` is not a required string", ev.value),
                    )
                    .label("evidence reference")
                    .secondary(r.file, f.spec.span.clone(), "declared here")
                    .help("the evidence reference is a required string output such as `evidence_ref: string`");
                r.report(d);
            }
            None => {
                let d = r
                    .error(
                        Code::InvalidEvidence,
                        ev.span.clone(),
                        format!("evidence field `{}` is not an output field", ev.value),
                    )
                    .label("unknown output field")
                    .help("name an output field of type string, or declare it under `output:`");
                r.report(d);
            }
        },
        None => {
            if !tool.output.iter().any(|f| f.name.value == "evidence_ref") {
                let span = key_span("output").unwrap_or(tool.name.span.clone());
                let d = r
                    .error(
                        Code::UnansweredQuestion,
                        span,
                        format!(
                            "tool `{}` does not answer question 5 (how output is validated): no evidence field",
                            tool.name.value
                        ),
                    )
                    .label("no `evidence_ref` output and no `evidence:` key")
                    .help("add an output `evidence_ref: string`, or `evidence: <output field>`");
                r.report(d);
            }
        }
    }

    if tool.description.is_none() {
        let d = r
            .error(
                Code::MissingDescription,
                tool.name.span.clone(),
                format!("tool `{}` has no description", tool.name.value),
            )
            .label("the model sees only this name")
            .help("add `description:` with the one business operation the tool performs");
        r.report(d);
    }
}

/// Field names that carry identity, credentials or control data.
pub fn is_identity_name(name: &str) -> bool {
    const EXACT: &[&str] = &[
        "tenant_id",
        "principal",
        "actor_id",
        "api_key",
        "token",
        "access_token",
        "idempotency_key",
    ];
    EXACT.contains(&name)
        || name.starts_with("approval")
        || name.starts_with("budget")
        || name.starts_with("audit_")
        || name.ends_with("_timestamp")
}

fn is_semverish(v: &str) -> bool {
    let (core, suffix) = match v.split_once('-') {
        Some((c, s)) => (c, Some(s)),
        None => (v, None),
    };
    let parts: Vec<&str> = core.split('.').collect();
    let core_ok = (1..=3).contains(&parts.len())
        && parts
            .iter()
            .all(|p| !p.is_empty() && p.len() <= 9 && p.bytes().all(|b| b.is_ascii_digit()));
    let suffix_ok = suffix.is_none_or(|s| {
        !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-')
    });
    core_ok && suffix_ok
}

/// `area:verb` with lowercase snake_case words (at least two parts).
pub fn is_scope(s: &str) -> bool {
    let parts: Vec<&str> = s.split(':').collect();
    parts.len() >= 2 && parts.iter().all(|p| is_snake_case(p))
}

pub fn is_error_code(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some('A'..='Z'))
        && chars.all(|c| matches!(c, 'A'..='Z' | '0'..='9' | '_'))
}

fn snake(s: &str) -> String {
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 && !out.ends_with('_') {
            out.push('_');
        }
        match c {
            'a'..='z' | '0'..='9' => out.push(c),
            'A'..='Z' => out.push(c.to_ascii_lowercase()),
            _ if !out.ends_with('_') => out.push('_'),
            _ => {}
        }
    }
    let out = out.trim_matches('_').to_string();
    if out.starts_with(|c: char| c.is_ascii_lowercase()) {
        out
    } else {
        format!("tool_{out}")
    }
}

fn titled(name: &str) -> String {
    name.split('_')
        .filter(|w| !w.is_empty())
        .map(|w| {
            let mut c = w.chars();
            match c.next() {
                Some(f) => f.to_ascii_uppercase().to_string() + c.as_str(),
                None => String::new(),
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_accept_semverish_and_reject_the_rest() {
        for ok in ["1", "1.0", "2.1.3", "1.0-beta.1"] {
            assert!(is_semverish(ok), "{ok}");
        }
        for bad in ["", "v1", "1.", "1.0.0.0", "1.x", "1.0-", "01234567890"] {
            assert!(!is_semverish(bad), "{bad}");
        }
    }

    #[test]
    fn identity_like_names_are_recognised() {
        for name in [
            "tenant_id",
            "api_key",
            "approval_ref",
            "budget_left",
            "audit_trail",
            "created_timestamp",
        ] {
            assert!(is_identity_name(name), "{name}");
        }
        for name in ["case_id", "document_id", "tokenizer_hint"] {
            assert!(!is_identity_name(name), "{name}");
        }
    }

    #[test]
    fn snake_suggestion_turns_camel_case_into_a_valid_name() {
        assert_eq!(snake("GetCaseSnapshot"), "get_case_snapshot");
        assert!(is_snake_case(&snake("9lives")));
    }
}
