//! The run contract (`contracts/agent.yaml`): the agent, its resource, stages, tenant
//! catalog, budgets, planner decision kinds and final-answer schema.

use crate::codes::Code;
use crate::fields::{Field, FieldType, read_fields};
use crate::reader::{Reader, Sp, is_snake_case};
use crate::source::FileId;
use crate::yaml::Node;

/// The three decisions a planner may return; the runtime knows no others.
pub const DECISIONS: &[&str] = &["tool_call", "final", "needs_human"];

#[derive(Debug, Clone, PartialEq)]
pub struct Resource {
    /// Entity type name, e.g. `Case`.
    pub kind: Sp<String>,
    /// Name of the input field that carries the resource id, e.g. `case_id`.
    pub id_field: Sp<String>,
    pub id_min_length: u64,
    pub id_max_length: u64,
    pub id_pattern: Option<String>,
    /// Where the host's API starts a run on one resource, e.g.
    /// `/v1/cases/{case_id}/agent-runs`.
    pub api_path: String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Budgets {
    pub max_steps: u64,
    pub repeat_limit: u64,
    pub max_wall_clock_seconds: u64,
    pub tool_timeout_ceiling_seconds: u64,
    pub max_no_new_evidence_steps: u64,
    pub max_tokens: Option<u64>,
    pub max_cost_usd: Option<f64>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct FinalAnswer {
    pub schema_version: Sp<String>,
    pub fields: Vec<Field>,
    pub evidence: Option<CitedEvidence>,
}

/// `final_answer.evidence`: the answer's field that cites evidence references. The
/// runtime accepts an answer only when every cited reference was returned by a
/// succeeded tool call of the run.
#[derive(Debug, Clone, PartialEq)]
pub struct CitedEvidence {
    pub field: Sp<String>,
    /// At least one reference must be cited.
    pub required: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct AgentContract {
    pub file: FileId,
    pub name: Sp<String>,
    pub description: Option<String>,
    pub resource: Resource,
    pub stages: Vec<Sp<String>>,
    pub initial_stage: Sp<String>,
    pub catalog: Vec<Sp<String>>,
    pub budgets: Budgets,
    pub decisions: Vec<Sp<String>>,
    pub final_answer: FinalAnswer,
    /// Reason codes a policy may give in `@reason`, in priority order: when several
    /// forbid policies deny one call, the runtime reports the first listed here.
    pub deny_reasons: Vec<Sp<String>>,
}

pub(crate) const AGENT_KEYS: &[&str] = &[
    "agent",
    "version",
    "description",
    "resource",
    "stages",
    "initial_stage",
    "catalog",
    "budgets",
    "decisions",
    "final_answer",
    "deny_reasons",
];

pub(crate) const RESOURCE_KEYS: &[&str] = &["type", "id_field", "id", "api_path"];
pub(crate) const RESOURCE_ID_KEYS: &[&str] = &["min_length", "max_length", "pattern"];
pub(crate) const FINAL_ANSWER_KEYS: &[&str] = &["schema_version", "fields", "evidence"];
pub(crate) const CITED_EVIDENCE_KEYS: &[&str] = &["field", "required"];
pub(crate) const BUDGET_KEYS: &[&str] = &[
    "max_steps",
    "repeat_limit",
    "max_wall_clock_seconds",
    "tool_timeout_ceiling_seconds",
    "max_no_new_evidence_steps",
    "max_tokens",
    "max_cost_usd",
];

pub fn read_agent(r: &mut Reader, root: &Node) -> Option<AgentContract> {
    let map = r.mapping(root, "agent contract", Some(AGENT_KEYS))?;
    let mut missing = false;
    let mut require = |r: &mut Reader, key: &str| -> Option<&Node> {
        let node = map.get(key);
        if node.is_none() {
            let d = r
                .error(
                    Code::MissingKey,
                    map.span.start..map.span.start,
                    format!("the agent contract has no `{key}`"),
                )
                .label(format!("`{key}` missing"))
                .help(agent_help(key));
            r.report(d);
            missing = true;
        }
        node
    };
    let name_node = require(r, "agent");
    let resource_node = require(r, "resource");
    let stages_node = require(r, "stages");
    let catalog_node = require(r, "catalog");
    let budgets_node = require(r, "budgets");
    let decisions_node = require(r, "decisions");
    let final_node = require(r, "final_answer");

    if let Some(v) = map.get("version") {
        r.string(v, "version");
    }
    let name = name_node.and_then(|n| r.string(n, "agent"));
    if let Some(n) = &name {
        ident(r, n, "agent name");
    }
    let description = map
        .get("description")
        .and_then(|n| r.string(n, "description"))
        .map(|s| s.value);
    let resource = resource_node.and_then(|n| read_resource(r, n));
    let stages = stages_node
        .map(|n| r.strings(n, "stages"))
        .unwrap_or_default();
    for s in &stages {
        ident(r, s, "stage");
    }
    r.unique(&stages, "stages");
    if stages_node.is_some_and(|n| n.as_seq().is_some()) && stages.is_empty() {
        let d = r
            .error(
                Code::MissingKey,
                stages_node.map(|n| n.span.clone()).unwrap_or(0..0),
                "the agent declares no stages",
            )
            .label("empty")
            .help("declare at least one task stage, e.g. `stages: [investigating]`");
        r.report(d);
    }
    let initial_stage = match map.get("initial_stage") {
        Some(n) => r.string(n, "initial_stage").inspect(|s| {
            if !stages.is_empty() && !stages.iter().any(|st| st.value == s.value) {
                let d = r
                    .error(
                        Code::UnknownStage,
                        s.span.clone(),
                        format!("initial stage `{}` is not a declared stage", s.value),
                    )
                    .label("unknown stage")
                    .help("name one of the stages under `stages:`");
                r.report(d);
            }
        }),
        None => stages.first().cloned(),
    };
    let catalog = catalog_node
        .map(|n| r.strings(n, "catalog"))
        .unwrap_or_default();
    r.unique(&catalog, "catalog");
    let budgets = budgets_node.and_then(|n| read_budgets(r, n));
    let decisions = decisions_node
        .map(|n| r.strings(n, "decisions"))
        .unwrap_or_default();
    r.unique(&decisions, "decisions");
    if let Some(node) = decisions_node {
        let names: Vec<&str> = decisions.iter().map(|d| d.value.as_str()).collect();
        for d in &decisions {
            if !DECISIONS.contains(&d.value.as_str()) {
                let diag = r
                    .error(
                        Code::InvalidDecisions,
                        d.span.clone(),
                        format!("`{}` is not a planner decision the runtime knows", d.value),
                    )
                    .label("unknown decision kind")
                    .help("decisions are exactly `tool_call`, `final` and `needs_human`");
                r.report(diag);
            }
        }
        for want in DECISIONS {
            if !names.contains(want) {
                let diag = r
                    .error(
                        Code::InvalidDecisions,
                        node.span.clone(),
                        format!("`decisions` does not list `{want}`"),
                    )
                    .label(format!("`{want}` missing"))
                    .help("decisions are exactly `tool_call`, `final` and `needs_human`");
                r.report(diag);
            }
        }
    }
    let final_answer = final_node.and_then(|n| read_final(r, n));
    let deny_reasons = map
        .get("deny_reasons")
        .map(|n| r.strings(n, "deny_reasons"))
        .unwrap_or_default();
    r.unique(&deny_reasons, "deny_reasons");
    for reason in &deny_reasons {
        if !crate::tool::is_error_code(&reason.value) {
            let d = r
                .error(
                    Code::InvalidErrorCode,
                    reason.span.clone(),
                    format!("deny reason `{}` is not SCREAMING_SNAKE_CASE", reason.value),
                )
                .label("invalid reason code")
                .help("reason codes look like `TOOL_SCOPE_MISSING`");
            r.report(d);
        }
    }

    if missing {
        return None;
    }
    Some(AgentContract {
        file: r.file,
        name: name?,
        description,
        resource: resource?,
        stages,
        initial_stage: initial_stage?,
        catalog,
        budgets: budgets?,
        decisions,
        final_answer: final_answer?,
        deny_reasons,
    })
}

fn agent_help(key: &str) -> &'static str {
    match key {
        "agent" => "add `agent: <snake_case name>`",
        "resource" => "add `resource: {type: Case, id_field: case_id}`",
        "stages" => "add `stages: [investigating]`",
        "catalog" => "add `catalog:` listing the tool names the tenant allows",
        "budgets" => {
            "add `budgets:` with max_steps, repeat_limit, max_wall_clock_seconds, tool_timeout_ceiling_seconds and max_no_new_evidence_steps"
        }
        "decisions" => "add `decisions: [tool_call, final, needs_human]`",
        "final_answer" => "add `final_answer:` with `schema_version` and `fields`",
        _ => "add the key",
    }
}

fn ident(r: &mut Reader, s: &Sp<String>, what: &str) {
    if !is_snake_case(&s.value) {
        let d = r
            .error(
                Code::InvalidIdentifier,
                s.span.clone(),
                format!("{what} `{}` is not snake_case", s.value),
            )
            .label("invalid identifier")
            .help("use lowercase letters, digits and `_`, starting with a letter");
        r.report(d);
    }
}

fn read_resource(r: &mut Reader, node: &Node) -> Option<Resource> {
    let map = r.mapping(node, "resource", Some(RESOURCE_KEYS))?;
    let need = |r: &mut Reader, key: &str| {
        let n = map.get(key);
        if n.is_none() {
            let d = r
                .error(
                    Code::MissingKey,
                    node.span.clone(),
                    format!("`resource` has no `{key}`"),
                )
                .label(format!("`{key}` missing"))
                .help("a resource declares `type` (e.g. `Case`) and `id_field` (e.g. `case_id`)");
            r.report(d);
        }
        n
    };
    let kind = need(r, "type").and_then(|n| r.string(n, "resource.type"));
    let id_field = need(r, "id_field").and_then(|n| r.string(n, "resource.id_field"));
    if let Some(k) = &kind {
        let pascal = k.value.starts_with(|c: char| c.is_ascii_uppercase())
            && k.value.chars().all(|c| c.is_ascii_alphanumeric());
        if !pascal {
            let d = r
                .error(
                    Code::InvalidIdentifier,
                    k.span.clone(),
                    format!("resource type `{}` is not PascalCase", k.value),
                )
                .label("invalid entity type name")
                .help("resource types become Cedar entity types: write e.g. `Case`");
            r.report(d);
        }
    }
    if let Some(f) = &id_field {
        ident(r, f, "resource id field");
    }
    let (mut min, mut max, mut pattern) = (1, 80, None);
    if let Some(id) = map.get("id")
        && let Some(idmap) = r.mapping(id, "resource.id", Some(RESOURCE_ID_KEYS))
    {
        let len = |r: &mut Reader, key: &str| {
            let v = r.integer(idmap.get(key)?, &format!("resource.id.{key}"))?;
            if !(1..=1024).contains(&v.value) {
                let d = r
                    .error(
                        Code::InvalidFieldType,
                        v.span.clone(),
                        format!("`resource.id.{key}` is {}, outside 1..=1024", v.value),
                    )
                    .label("out of range")
                    .help("resource ids are between 1 and 1024 characters");
                r.report(d);
                return None;
            }
            Some(v.value as u64)
        };
        min = len(r, "min_length").unwrap_or(min);
        max = len(r, "max_length").unwrap_or(max);
        pattern = idmap
            .get("pattern")
            .and_then(|n| r.string(n, "resource.id.pattern"))
            .map(|s| s.value);
    }
    let (kind, id_field) = (kind?, id_field?);
    let default_path = format!(
        "/v1/{}s/{{{}}}/agent-runs",
        kind.value.to_ascii_lowercase(),
        id_field.value
    );
    let api_path = match map.get("api_path") {
        None => default_path,
        Some(n) => match r.string(n, "resource.api_path") {
            Some(p) => match api_path_problem(&p.value, &id_field.value) {
                None => p.value,
                Some(problem) => {
                    let d = r
                        .error(Code::InvalidApiPath, p.span.clone(), problem)
                        .label("invalid run path")
                        .help(format!("write e.g. `api_path: {default_path}`"));
                    r.report(d);
                    default_path
                }
            },
            None => default_path,
        },
    };
    Some(Resource {
        kind,
        id_field,
        api_path,
        id_min_length: min,
        id_max_length: max,
        id_pattern: pattern,
    })
}

/// Why `path` cannot be the route that starts runs, or `None` when it can.
fn api_path_problem(path: &str, id_field: &str) -> Option<String> {
    let param = format!("{{{id_field}}}");
    if !path.starts_with('/') || path.ends_with('/') {
        return Some(format!("`{path}` must start with `/` and not end with one"));
    }
    if path.starts_with("/v1/agent-runs") || path.starts_with("/health") || path == "/metrics" {
        return Some(format!("`{path}` collides with a route every host serves"));
    }
    let mut params = 0;
    for segment in path[1..].split('/') {
        if segment == param {
            params += 1;
        } else if segment.is_empty()
            || !segment
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-_.".contains(&b))
        {
            return Some(format!(
                "segment `{segment}` of `{path}` is neither `{param}` nor lowercase letters, digits, `-`, `_` and `.`"
            ));
        }
    }
    if params != 1 {
        return Some(format!("`{path}` must hold `{param}` exactly once"));
    }
    None
}

fn read_budgets(r: &mut Reader, node: &Node) -> Option<Budgets> {
    let map = r.mapping(node, "budgets", Some(BUDGET_KEYS))?;
    let mut ok = true;
    let mut bounded = |r: &mut Reader, key: &str, lo: i64, hi: i64, required: bool| {
        let Some(n) = map.get(key) else {
            if required {
                let d = r
                    .error(
                        Code::MissingKey,
                        node.span.clone(),
                        format!("`budgets` has no `{key}`"),
                    )
                    .label(format!("`{key}` missing"))
                    .help(format!("add `{key}:` between {lo} and {hi}"));
                r.report(d);
                ok = false;
            }
            return None;
        };
        let v = r.integer(n, &format!("budgets.{key}"))?;
        if !(lo..=hi).contains(&v.value) {
            let d = r
                .error(
                    Code::BudgetOutOfRange,
                    v.span.clone(),
                    format!("`budgets.{key}` is {}, outside {lo}..={hi}", v.value),
                )
                .label("out of range")
                .help(format!("use a value between {lo} and {hi}"));
            r.report(d);
            ok = false;
            return None;
        }
        Some(v.value as u64)
    };
    let max_steps = bounded(r, "max_steps", 1, 100, true);
    let repeat_limit = bounded(r, "repeat_limit", 1, 10, true);
    let wall = bounded(r, "max_wall_clock_seconds", 1, 3600, true);
    let ceiling = bounded(r, "tool_timeout_ceiling_seconds", 1, 60, true);
    let no_new = bounded(r, "max_no_new_evidence_steps", 1, 100, true);
    let max_tokens = bounded(r, "max_tokens", 1, i64::MAX, false);
    let max_cost_usd = match map.get("max_cost_usd") {
        Some(n) => {
            let v = r.number(n, "budgets.max_cost_usd")?;
            if v.value.is_nan() || v.value <= 0.0 {
                let d = r
                    .error(
                        Code::BudgetOutOfRange,
                        v.span.clone(),
                        "`budgets.max_cost_usd` must be above 0",
                    )
                    .label("not a positive amount")
                    .help("leave the key out for no cost budget");
                r.report(d);
                None
            } else {
                Some(v.value)
            }
        }
        None => None,
    };
    if !ok {
        return None;
    }
    Some(Budgets {
        max_steps: max_steps?,
        repeat_limit: repeat_limit?,
        max_wall_clock_seconds: wall?,
        tool_timeout_ceiling_seconds: ceiling?,
        max_no_new_evidence_steps: no_new?,
        max_tokens,
        max_cost_usd,
    })
}

fn read_final(r: &mut Reader, node: &Node) -> Option<FinalAnswer> {
    let map = r.mapping(node, "final_answer", Some(FINAL_ANSWER_KEYS))?;
    let Some(version_node) = map.get("schema_version") else {
        let d = r
            .error(
                Code::InvalidFinalAnswer,
                node.span.clone(),
                "`final_answer` has no `schema_version`",
            )
            .label("`schema_version` missing")
            .help("add `schema_version: <name>.v1`");
        r.report(d);
        return None;
    };
    let schema_version = r.string(version_node, "final_answer.schema_version")?;
    let well_formed = schema_version
        .value
        .rsplit_once(".v")
        .is_some_and(|(name, n)| {
            !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "._-".contains(c))
                && !n.is_empty()
                && n.bytes().all(|b| b.is_ascii_digit())
        });
    if !well_formed {
        let d = r
            .error(
                Code::InvalidFinalAnswer,
                schema_version.span.clone(),
                format!(
                    "schema version `{}` is not `<name>.v<N>`",
                    schema_version.value
                ),
            )
            .label("invalid schema version")
            .help("write e.g. `caseops.agent-result.v1`");
        r.report(d);
    }
    let fields = map
        .get("fields")
        .map(|n| read_fields(r, n, "final_answer.fields"))
        .unwrap_or_default();
    match fields.iter().find(|f| f.name.value == "outcome") {
        Some(f) if matches!(f.spec.ty, FieldType::Enum(_)) => {}
        other => {
            let span = other
                .map(|f| f.spec.span.clone())
                .unwrap_or(node.span.clone());
            let d = r
                .error(
                    Code::InvalidFinalAnswer,
                    span,
                    "the final answer has no `outcome` enum field",
                )
                .label("`outcome` must be an enum")
                .help("add `outcome: {type: enum, enum: [...]}` under `fields:`");
            r.report(d);
        }
    }
    let evidence = map
        .get("evidence")
        .and_then(|n| read_cited_evidence(r, n, &fields));
    Some(FinalAnswer {
        schema_version,
        fields,
        evidence,
    })
}

fn read_cited_evidence(r: &mut Reader, node: &Node, fields: &[Field]) -> Option<CitedEvidence> {
    let map = r.mapping(node, "final_answer.evidence", Some(CITED_EVIDENCE_KEYS))?;
    let Some(field_node) = map.get("field") else {
        let d = r
            .error(
                Code::InvalidCitedEvidence,
                node.span.clone(),
                "`final_answer.evidence` does not name its `field`",
            )
            .label("`field` missing")
            .help("add `field: <name>`, the answer's list of evidence references");
        r.report(d);
        return None;
    };
    let field = r.string(field_node, "final_answer.evidence.field")?;
    let required = match map.get("required") {
        Some(n) => r.boolean(n, "final_answer.evidence.required")?.value,
        None => false,
    };
    let declared = fields.iter().find(|f| f.name.value == field.value);
    let is_string_list = declared.is_some_and(|f| {
        matches!(&f.spec.ty, FieldType::List { items, .. } if matches!(items.ty, FieldType::String { .. }))
    });
    if !is_string_list {
        let message = match declared {
            None => format!(
                "`final_answer.evidence.field` names `{}`, which is not an answer field",
                field.value
            ),
            Some(f) => format!(
                "evidence field `{}` is a {}, not a list of strings",
                field.value,
                f.spec.ty.name()
            ),
        };
        let d = r
            .error(Code::InvalidCitedEvidence, field.span.clone(), message)
            .label("must be a `list of string` answer field")
            .help(format!(
                "declare `{}: list of string` under `final_answer.fields`",
                field.value
            ));
        r.report(d);
        return None;
    }
    Some(CitedEvidence { field, required })
}
