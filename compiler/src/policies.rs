//! The compiler's one home of Cedar: parsing `policies/*.cedar`, validating them with
//! Cedar's strict validator against the schema generated from the contracts, checking
//! our annotation rules (`@id`, `@reason`), and evaluating authorization scenarios.
//!
//! Cedar reports its errors as miette diagnostics with byte spans into the policy
//! text; they are turned into our [`Diagnostic`]s located in the `.cedar` file.

use std::collections::BTreeMap;
use std::str::FromStr;

use cedar_policy::{
    Authorizer, Context, Decision, Effect, Entities, EntityId, EntityTypeName, EntityUid, PolicyId,
    PolicySet, Request, Schema, ValidationMode, Validator,
};
use miette::Diagnostic as MietteDiagnostic;

use crate::cedar_schema::{self, NAMESPACE, TASK_TYPE, TENANT_TYPE};
use crate::codes::Code;
use crate::diagnostic::{Diagnostic, Diagnostics, closest};
use crate::project::Project;
use crate::reader::list;
use crate::source::{FileId, Sources};
use crate::yaml::Span;

pub const POLICY_DIR: &str = "policies/";

/// The validated policies of a project with the place each policy came from.
pub struct Policies {
    /// The schema's entity types without its actions: what entities are checked
    /// against. Parsing the whole schema costs a second with 10,000 tools, and a
    /// check needs it only for the authorization scenarios (see [`Policies::schema`]).
    entity_schema: Schema,
    schema: std::sync::OnceLock<Result<Schema, String>>,
    pub schema_json: serde_json::Value,
    pub set: PolicySet,
    /// `@id` → (file, span of the policy text).
    pub origin: BTreeMap<String, (FileId, Span)>,
    /// The policy texts in file order, for the generated crate.
    pub texts: Vec<(String, String)>,
    /// Policies Cedar's validator warned about (W0401), so later checks do not
    /// report them a second time.
    pub warned: std::collections::BTreeSet<String>,
}

/// Generates the schema, parses and validates every policy file. Returns `None` when
/// the contracts are too broken to generate a schema (already reported) or a policy
/// failed to parse or validate.
pub fn check_policies(
    sources: &Sources,
    project: &Project,
    diags: &mut Diagnostics,
) -> Option<Policies> {
    let agent = project.agent.as_ref()?;
    if project.tools_incomplete {
        return None;
    }
    let schema_json = cedar_schema::schema_json(agent, &project.tools);
    let schema_invalid = |diags: &mut Diagnostics, e: &dyn std::fmt::Display| {
        diags.push(
            Diagnostic::unlocated(
                Code::CedarSchemaInvalid,
                Some(agent.file),
                format!("the cedar schema generated from the contracts is invalid: {e}"),
            )
            .help("this is a compiler bug; please report it with the contracts that cause it"),
        );
    };
    let entity_schema =
        match Schema::from_json_value(cedar_schema::schema_json_of(agent, Vec::new())) {
            Ok(s) => s,
            Err(e) => {
                schema_invalid(diags, &e);
                return None;
            }
        };

    let files = sources.under(POLICY_DIR);
    let files: Vec<FileId> = files
        .into_iter()
        .filter(|id| sources.get(*id).path.ends_with(".cedar"))
        .collect();
    if files.is_empty() {
        diags.push(
            Diagnostic::unlocated(Code::NoPolicies, None, "no policies found in `policies/`").help(
                "add `policies/<name>.cedar`; without a permit policy every tool call is denied",
            ),
        );
    }

    let reasons: Vec<&str> = agent
        .deny_reasons
        .iter()
        .map(|r| r.value.as_str())
        .collect();
    let mut merged = PolicySet::new();
    let mut origin: BTreeMap<String, (FileId, Span)> = BTreeMap::new();
    let mut texts = Vec::new();
    let mut ok = true;
    let mut annotations_ok = true;
    for id in files {
        let file = sources.get(id);
        if file.invalid_utf8_at.is_some() || file.size > crate::project::MAX_FILE_BYTES {
            crate::project::parse_file(sources, id, diags); // reports encoding or size
            ok = false;
            continue;
        }
        let parsed = match PolicySet::from_str(&file.text) {
            Ok(p) => p,
            Err(errors) => {
                for e in errors.iter() {
                    diags.push(from_miette(
                        Code::CedarParse,
                        id,
                        &file.text,
                        e,
                        "cedar syntax error",
                    ));
                }
                ok = false;
                continue;
            }
        };
        let mut search_from = 0;
        for policy in parsed.policies() {
            let text = policy.to_string();
            let span = match file.text[search_from..].find(&text) {
                Some(at) => {
                    search_from += at + text.len();
                    (search_from - text.len())..search_from
                }
                None => 0..0,
            };
            let head = head_span(&file.text, &span);
            let synthetic;
            let name = match policy.annotation("id") {
                Some(name) => name,
                None => {
                    diags.push(
                        Diagnostic::at(Code::PolicyWithoutId, id, head.clone(), "policy has no `@id` annotation")
                            .label("policy without id")
                            .help("add `@id(\"<unique-name>\")` above the policy; ids name policies in decisions and audit records"),
                    );
                    annotations_ok = false;
                    // Still validate it, under a name no `@id` can take.
                    synthetic = format!("{}#{}", file.path, policy.id());
                    &synthetic
                }
            };
            if let Some((first_file, first_span)) = origin.get(name) {
                diags.push(
                    Diagnostic::at(
                        Code::DuplicatePolicyId,
                        id,
                        annotation_span(&file.text, &span, "id").unwrap_or(head.clone()),
                        format!("policy id `{name}` is used twice"),
                    )
                    .label("used again here")
                    .secondary(
                        *first_file,
                        head_span(&sources.get(*first_file).text, first_span),
                        "first used here",
                    )
                    .help("give every policy a unique `@id`"),
                );
                annotations_ok = false;
                continue;
            }
            match policy.annotation("reason") {
                Some(reason) if !reasons.contains(&reason) => {
                    let mut d = Diagnostic::at(
                        Code::UnknownReason,
                        id,
                        annotation_span(&file.text, &span, "reason").unwrap_or(head.clone()),
                        format!("`@reason(\"{reason}\")` is not a declared deny reason"),
                    )
                    .label("unknown reason code");
                    d = match closest(reason, reasons.iter().copied()) {
                        Some(c) => d.help(format!("did you mean `{c}`?")),
                        None => d.help(format!(
                            "declared reasons (`deny_reasons` in `contracts/agent.yaml`): {}",
                            list(&reasons)
                        )),
                    };
                    diags.push(d);
                    annotations_ok = false;
                }
                None if policy.effect() == Effect::Forbid => {
                    diags.push(
                        Diagnostic::at(
                            Code::ForbidWithoutReason,
                            id,
                            head.clone(),
                            format!("forbid policy `{name}` has no `@reason`"),
                        )
                        .label("forbid without reason")
                        .help("add `@reason(\"<CODE>\")` so a denial tells the caller why"),
                    );
                    annotations_ok = false;
                }
                _ => {}
            }
            origin.insert(name.to_string(), (id, span));
            texts.push((name.to_string(), text));
            let renamed = policy.new_id(PolicyId::new(name));
            if merged.add(renamed).is_err() {
                ok = false;
            }
        }
    }
    if !ok {
        return None;
    }

    let schema = std::sync::OnceLock::new();
    let whole_schema = || schema.get_or_init(|| parse_schema(&schema_json)).as_ref();
    let results = match validate_by_action(whole_schema, &merged, agent, &project.tools) {
        Ok(results) => results,
        Err(e) => {
            schema_invalid(diags, &e);
            return None;
        }
    };
    let mut failed = false;
    for e in results.iter().flat_map(|r| r.validation_errors()) {
        failed = true;
        let Some((file, _)) = origin.get(e.policy_id().to_string().as_str()) else {
            continue;
        };
        let text = &sources.get(*file).text;
        diags.push(from_miette(
            Code::CedarValidation,
            *file,
            text,
            e,
            "policy does not type-check",
        ));
    }
    let mut warned = std::collections::BTreeSet::new();
    for w in results.iter().flat_map(|r| r.validation_warnings()) {
        let Some((file, _)) = origin.get(w.policy_id().to_string().as_str()) else {
            continue;
        };
        warned.insert(w.policy_id().to_string());
        let text = &sources.get(*file).text;
        diags.push(from_miette(
            Code::CedarWarning,
            *file,
            text,
            w,
            "policy warning",
        ));
    }
    if failed || !annotations_ok {
        return None;
    }
    Some(Policies {
        warned,
        entity_schema,
        schema,
        schema_json,
        set: merged,
        origin,
        texts,
    })
}

impl Policies {
    /// The whole schema, parsed on first use.
    pub fn schema(&self) -> Result<&Schema, String> {
        self.schema
            .get_or_init(|| parse_schema(&self.schema_json))
            .as_ref()
            .map_err(String::clone)
    }
}

fn parse_schema(json: &serde_json::Value) -> Result<Schema, String> {
    Schema::from_json_value(json.clone()).map_err(|e| e.to_string())
}

/// How many tools' actions one partial schema holds in [`validate_by_action`].
const VALIDATION_CHUNK: usize = 8;

/// Cedar's strict validation of `set`, with what it reports for the whole `schema`,
/// in time that grows with the number of policies rather than policies × actions.
///
/// Cedar type-checks each policy in every request environment of the schema whose
/// action its scope admits, and finds those by walking all of them; with 10,000
/// tools that walk is most of the work. A policy scoped `action == A` is checked in
/// A's environments only, so it is validated against a schema that holds A (and the
/// same entity types) among a few dozen other actions. A chunk whose partial check is
/// not spotless is validated again against the whole schema, and that answer is the
/// one reported: an error or warning is always worded as the whole schema words it.
/// Policies with another action scope are validated against the whole schema.
fn validate_by_action<'s>(
    schema: impl Fn() -> Result<&'s Schema, &'s String>,
    set: &PolicySet,
    agent: &crate::agent::AgentContract,
    tools: &[crate::tool::ToolContract],
) -> Result<Vec<cedar_policy::ValidationResult>, String> {
    // Parsed only if some policy needs it: with 10,000 tools that takes a second.
    let full = std::cell::OnceCell::new();
    let full = || -> Result<&Validator, String> {
        if let Some(v) = full.get() {
            return Ok(v);
        }
        let v = Validator::new(schema().map_err(String::clone)?.clone());
        Ok(full.get_or_init(|| v))
    };
    let by_name: BTreeMap<&str, &crate::tool::ToolContract> =
        tools.iter().map(|t| (t.name.value.as_str(), t)).collect();
    let slices = ActionSlices::new(set);
    let scoped = &slices.scoped;
    // Policies scoped to an action no tool declares go to the whole schema, which
    // reports it.
    let mut elsewhere = slices.everywhere.clone();
    let mut names: Vec<&str> = Vec::new();
    for (name, policies) in scoped {
        match by_name.contains_key(name.as_str()) {
            true => names.push(name),
            false => elsewhere.extend(policies.iter().cloned()),
        }
    }
    let mut results = Vec::new();
    for chunk in names.chunks(VALIDATION_CHUNK) {
        let policies: Vec<cedar_policy::Policy> = chunk
            .iter()
            .flat_map(|n| scoped[*n].iter().cloned())
            .collect();
        let partial = Schema::from_json_value(cedar_schema::schema_json_of(
            agent,
            chunk.iter().map(|n| by_name[n]).collect(),
        ));
        let part = PolicySet::from_policies(policies.clone());
        match (partial, part) {
            (Ok(partial), Ok(part)) => {
                let r = Validator::new(partial).validate(&part, ValidationMode::Strict);
                if r.validation_passed_without_warnings() {
                    results.push(r);
                } else {
                    results.push(full()?.validate(&part, ValidationMode::Strict));
                }
            }
            // Cedar refusing a part of a set it accepted whole: ask it about the whole.
            _ => elsewhere.extend(policies),
        }
    }
    if !elsewhere.is_empty() {
        match PolicySet::from_policies(elsewhere) {
            Ok(rest) => results.push(full()?.validate(&rest, ValidationMode::Strict)),
            Err(_) => results = vec![full()?.validate(set, ValidationMode::Strict)],
        }
    }
    Ok(results)
}

/// The Cedar schema in Cedar's own schema syntax, printed by Cedar from the JSON form.
///
/// Cedar qualifies primitive types as `__cedar::String`; the schema declares no type of
/// its own named like a primitive, so the plain names mean the same and read better.
pub fn schema_text(schema_json: &serde_json::Value) -> Result<String, String> {
    let text = cedar_policy::SchemaFragment::from_json_value(schema_json.clone())
        .map_err(|e| e.to_string())?
        .to_cedarschema()
        .map_err(|e| e.to_string())?;
    Ok(text.replace("__cedar::", ""))
}

/// A miette diagnostic from Cedar as one of ours, located at its first label.
fn from_miette(
    code: Code,
    file: FileId,
    text: &str,
    e: &(impl MietteDiagnostic + std::fmt::Display + ?Sized),
    label: &str,
) -> Diagnostic {
    let message = lower_first(&e.to_string());
    let help = e.help().map(|h| lower_first(&h.to_string()));
    let labels: Vec<_> = e
        .labels()
        .map(|l| l.collect::<Vec<_>>())
        .unwrap_or_default();
    let mut d = match labels.first() {
        Some(first) => {
            let start = first.offset().min(text.len());
            let end = (first.offset() + first.len()).min(text.len());
            Diagnostic::at(code, file, start..end, message).label(
                first
                    .label()
                    .map(str::to_string)
                    .unwrap_or_else(|| label.to_string()),
            )
        }
        None => Diagnostic::unlocated(code, Some(file), message),
    };
    for extra in labels.iter().skip(1) {
        let start = extra.offset().min(text.len());
        let end = (extra.offset() + extra.len()).min(text.len());
        d = d.secondary(file, start..end, extra.label().unwrap_or("related"));
    }
    match help {
        Some(h) => d.help(h),
        None => d.help(match code {
            Code::CedarParse => "fix the policy syntax; see https://docs.cedarpolicy.com/policies/syntax-policy.html",
            _ => "policies are validated against the Cedar schema generated from `contracts/`",
        }),
    }
}

fn lower_first(s: &str) -> String {
    let s = s.trim().trim_end_matches('.');
    let mut c = s.chars();
    match c.next() {
        // Keep acronyms such as `JSON` intact.
        Some(f) if c.clone().next().is_some_and(|n| n.is_lowercase()) => {
            f.to_lowercase().collect::<String>() + c.as_str()
        }
        Some(f) => f.to_string() + c.as_str(),
        None => String::new(),
    }
}

/// The `permit`/`forbid` keyword of a policy (where a reader looks for "which policy").
pub(crate) fn head_span(text: &str, span: &Span) -> Span {
    let body = &text[span.clone()];
    for kw in ["permit", "forbid"] {
        if let Some(at) = find_keyword(body, kw) {
            return span.start + at..span.start + at + kw.len();
        }
    }
    span.start..span.start
}

fn find_keyword(body: &str, kw: &str) -> Option<usize> {
    body.match_indices(kw).map(|(i, _)| i).find(|&i| {
        let before = body[..i].chars().last();
        before.is_none_or(|c| !c.is_alphanumeric() && c != '_' && c != '"')
    })
}

/// The value of `@key("…")` inside a policy's text.
fn annotation_span(text: &str, span: &Span, key: &str) -> Option<Span> {
    let body = &text[span.clone()];
    let at = body.find(&format!("@{key}("))?;
    let open = body[at..].find('"')? + at;
    let close = body[open + 1..].find('"')? + open + 1;
    Some(span.start + open..span.start + close + 1)
}

/// One authorization request of a scenario, in contract terms.
pub struct ScenarioRequest<'a> {
    pub tenant: &'a str,
    pub subject: &'a str,
    pub task_id: &'a str,
    pub scopes: &'a [String],
    pub stage: &'a str,
    pub bound_resource: &'a str,
    pub catalog: &'a [String],
    pub tool: &'a crate::tool::ToolContract,
    pub resource: &'a str,
    pub resource_tenant: &'a str,
    pub arguments: &'a serde_json::Value,
    pub context: &'a serde_json::Map<String, serde_json::Value>,
}

/// The outcome of one evaluation: allowed, or denied with the reason of the
/// highest-priority determining policy (`None` when no policy determined it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Allow,
    Deny(Option<String>),
}

/// Evaluates one request with the real Cedar authorizer. Returns the outcome and the
/// ids of the determining policies, or a message when the request is malformed.
pub fn evaluate(
    policies: &Policies,
    resource_type: &str,
    deny_reasons: &[String],
    req: &ScenarioRequest,
) -> Result<(Outcome, Vec<String>), String> {
    let entities = request_entities(policies, resource_type, req)?;
    evaluate_among(
        policies,
        &policies.set,
        &entities,
        resource_type,
        deny_reasons,
        req,
        true,
    )
    .map(|e| (e.outcome, e.determining))
}

/// One evaluation, and whether some policy could not be evaluated.
pub struct Evaluation {
    pub outcome: Outcome,
    pub determining: Vec<String>,
    /// A policy needed a value the request lacks (an argument, say).
    pub undecided: bool,
}

fn entity_type(name: &str) -> Result<EntityTypeName, String> {
    EntityTypeName::from_str(&format!("{NAMESPACE}::{name}")).map_err(|e| e.to_string())
}

/// The entities a request reads: its tenant(s), resource(s) and task, and the action
/// of the tool asked about in its risk group.
pub fn request_entities(
    policies: &Policies,
    resource_type: &str,
    req: &ScenarioRequest,
) -> Result<Entities, String> {
    with_action(task_entities(policies, resource_type, req)?, req.tool)
}

/// `entities` with the tool's action entity, a member of its risk group (what
/// `action in CaseOps::Action::"ReadOnly"` reads).
pub fn with_action(
    entities: Entities,
    tool: &crate::tool::ToolContract,
) -> Result<Entities, String> {
    let group = EntityUid::from_type_name_and_id(
        entity_type("Action")?,
        EntityId::new(cedar_schema::risk_group(tool.risk.value)),
    );
    let action =
        EntityUid::from_type_name_and_id(entity_type("Action")?, EntityId::new(&tool.name.value));
    let action = cedar_policy::Entity::new_no_attrs(action, [group].into_iter().collect());
    entities
        .add_entities([action], None)
        .map_err(|e| format!("entities: {e}"))
}

/// The entities of [`request_entities`] but the action. They depend on the task, not
/// on the tool asked about, so one set serves every tool's question.
pub fn task_entities(
    policies: &Policies,
    resource_type: &str,
    req: &ScenarioRequest,
) -> Result<Entities, String> {
    let tenant_json = |id: &str, catalog: &[String]| {
        serde_json::json!({
            "uid": { "type": format!("{NAMESPACE}::{TENANT_TYPE}"), "id": id },
            "attrs": { "catalog": catalog },
            "parents": [],
        })
    };
    let mut entities = vec![tenant_json(req.tenant, req.catalog)];
    if req.resource_tenant != req.tenant {
        entities.push(tenant_json(req.resource_tenant, &[]));
    }
    let tenant_ref = |id: &str| serde_json::json!({ "__entity": { "type": format!("{NAMESPACE}::{TENANT_TYPE}"), "id": id } });
    let resource_ref = |id: &str| serde_json::json!({ "__entity": { "type": format!("{NAMESPACE}::{resource_type}"), "id": id } });
    entities.push(serde_json::json!({
        "uid": { "type": format!("{NAMESPACE}::{resource_type}"), "id": req.resource },
        "attrs": { "tenant": tenant_ref(req.resource_tenant) },
        "parents": [ { "type": format!("{NAMESPACE}::{TENANT_TYPE}"), "id": req.resource_tenant } ],
    }));
    if req.bound_resource != req.resource {
        // The run's own resource exists too (in the task's tenant).
        entities.push(serde_json::json!({
            "uid": { "type": format!("{NAMESPACE}::{resource_type}"), "id": req.bound_resource },
            "attrs": { "tenant": tenant_ref(req.tenant) },
            "parents": [ { "type": format!("{NAMESPACE}::{TENANT_TYPE}"), "id": req.tenant } ],
        }));
    }
    entities.push(serde_json::json!({
        "uid": { "type": format!("{NAMESPACE}::{TASK_TYPE}"), "id": req.task_id },
        "attrs": {
            "tenant": tenant_ref(req.tenant),
            "subject": req.subject,
            "scopes": req.scopes,
            "resource": resource_ref(req.bound_resource),
            "stage": req.stage,
        },
        "parents": [ { "type": format!("{NAMESPACE}::{TENANT_TYPE}"), "id": req.tenant } ],
    }));
    Entities::from_json_value(
        serde_json::Value::Array(entities),
        Some(&policies.entity_schema),
    )
    .map_err(|e| format!("entities: {e}"))
}

/// Evaluates a request against `set` (all of a project's policies, or the slice of
/// them that can apply to the request's action) with prebuilt `entities`. Without
/// `strict` the context may lack arguments (the runtime's question before a model
/// has proposed any): it is not checked against the schema, and a policy that reads
/// a missing argument makes the evaluation undecided.
pub fn evaluate_among(
    policies: &Policies,
    set: &PolicySet,
    entities: &Entities,
    resource_type: &str,
    deny_reasons: &[String],
    req: &ScenarioRequest,
    strict: bool,
) -> Result<Evaluation, String> {
    let uid = |t: &str, id: &str| -> Result<EntityUid, String> {
        Ok(EntityUid::from_type_name_and_id(
            entity_type(t)?,
            EntityId::new(id),
        ))
    };
    let action = EntityUid::from_type_name_and_id(
        entity_type("Action")?,
        EntityId::new(&req.tool.name.value),
    );
    let mut context = serde_json::json!({
        "tool": req.tool.name.value,
        "risk": req.tool.risk.value.as_str(),
        "required_scope": req.tool.required_scope.value,
        "stage": req.stage,
        "approval": "none",
        "arguments": req.arguments,
    });
    for (k, v) in req.context {
        context[k] = v.clone();
    }
    let schema = match strict {
        true => Some(policies.schema()?),
        false => None,
    };
    let context = if let Some(schema) = schema {
        Context::from_json_value(context, Some((schema, &action)))
    } else {
        Context::from_json_value(context, None)
    }
    .map_err(|e| format!("context: {e}"))?;
    let request = Request::new(
        uid(TASK_TYPE, req.task_id)?,
        action,
        uid(resource_type, req.resource)?,
        context,
        schema,
    )
    .map_err(|e| format!("request: {e}"))?;
    let response = Authorizer::new().is_authorized(&request, set, entities);
    let undecided = response.diagnostics().errors().next().is_some();
    let determining: Vec<String> = response
        .diagnostics()
        .reason()
        .map(|p| p.to_string())
        .collect();
    let outcome = match response.decision() {
        Decision::Allow => Outcome::Allow,
        Decision::Deny => {
            let mut found: Vec<&str> = determining
                .iter()
                .filter_map(|id| policies.set.annotation(&PolicyId::new(id), "reason"))
                .collect();
            found.sort_by_key(|r| {
                deny_reasons
                    .iter()
                    .position(|d| d == r)
                    .unwrap_or(usize::MAX)
            });
            Outcome::Deny(found.first().map(|s| s.to_string()))
        }
    };
    Ok(Evaluation {
        outcome,
        determining,
        undecided,
    })
}

/// The policies that can apply to each action. A policy scoped `action == A` is never
/// satisfied for any other action, so leaving it out of another action's set changes
/// no decision, no determining policy and no error: each question then costs what
/// its own action's policies cost, however many tools the project has.
pub struct ActionSlices {
    /// Policies with `action == CaseOps::Action::"A"`, by `A`.
    scoped: BTreeMap<String, Vec<cedar_policy::Policy>>,
    /// Every other policy (no action constraint, an `in` one): kept in every slice.
    everywhere: Vec<cedar_policy::Policy>,
}

impl ActionSlices {
    pub fn new(set: &PolicySet) -> Self {
        let action_type = format!("{NAMESPACE}::Action");
        let mut slices = ActionSlices {
            scoped: BTreeMap::new(),
            everywhere: Vec::new(),
        };
        for policy in set.policies() {
            match policy.action_constraint() {
                cedar_policy::ActionConstraint::Eq(uid)
                    if uid.type_name().to_string() == action_type =>
                {
                    slices
                        .scoped
                        .entry(uid.id().unescaped().to_string())
                        .or_default()
                        .push(policy.clone())
                }
                _ => slices.everywhere.push(policy.clone()),
            }
        }
        slices
    }

    /// The policies that can apply to `action` (a tool's name); `None` if Cedar
    /// refuses the subset, and the caller asks the whole set instead.
    pub fn for_action(&self, action: &str) -> Option<PolicySet> {
        let own = self.scoped.get(action).into_iter().flatten();
        PolicySet::from_policies(self.everywhere.iter().chain(own).cloned()).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Errors and warnings as (policy id, message), sorted: what a check reports.
    fn findings(results: &[cedar_policy::ValidationResult]) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = results
            .iter()
            .flat_map(|r| {
                r.validation_errors()
                    .map(|e| (e.policy_id().to_string(), format!("error: {e}")))
                    .chain(
                        r.validation_warnings()
                            .map(|w| (w.policy_id().to_string(), format!("warning: {w}"))),
                    )
            })
            .collect();
        out.sort();
        out
    }

    /// Policies under their `@id`s, as the check names them.
    fn named(text: &str) -> PolicySet {
        let mut set = PolicySet::new();
        for p in PolicySet::from_str(text).unwrap().policies() {
            let id = PolicyId::new(p.annotation("id").unwrap());
            set.add(p.new_id(id)).unwrap();
        }
        set
    }

    #[test]
    fn validating_by_action_reports_what_the_whole_schema_reports() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let sources = crate::source::load(&root).unwrap();
        let mut diags = Diagnostics::default();
        let project = crate::project::check_contracts(&sources, &mut diags);
        let agent = project.agent.as_ref().unwrap();
        let text = r#"
@id("clean") permit (principal is CaseOps::Task, action == CaseOps::Action::"caseops_get_case_snapshot", resource is CaseOps::Case)
when { resource == principal.resource };
@id("type-error") permit (principal, action == CaseOps::Action::"caseops_get_case_snapshot", resource)
when { context.risk == 1 };
@id("unknown-argument") permit (principal, action == CaseOps::Action::"caseops_resolve_document_alias", resource)
when { context.arguments.no_such_field == "x" };
@id("names-another-action") permit (principal, action == CaseOps::Action::"caseops_resolve_document_alias", resource)
when { action != CaseOps::Action::"caseops_get_case_snapshot" };
@id("never-true") forbid (principal, action == CaseOps::Action::"caseops_request_missing_documents", resource)
when { false };
@id("unknown-action") permit (principal, action == CaseOps::Action::"no_such_tool", resource);
@id("group") permit (principal, action in CaseOps::Action::"ReadOnly", resource)
when { context.stage == 2 };
"#;
        let set = named(text);
        let json = cedar_schema::schema_json(agent, &project.tools);
        let schema = Schema::from_json_value(json).unwrap();
        let whole = Validator::new(schema.clone()).validate(&set, ValidationMode::Strict);
        let parsed = std::cell::Cell::new(0);
        let asked = || {
            parsed.set(parsed.get() + 1);
            Ok(&schema)
        };
        let by_action = validate_by_action(asked, &set, agent, &project.tools).unwrap();
        let expected = findings(&[whole]);
        assert!(
            expected.iter().any(|(id, _)| id == "type-error")
                && expected.iter().any(|(id, _)| id == "unknown-argument"),
            "the set has errors to compare: {expected:?}"
        );
        assert!(!expected.iter().any(|(id, _)| id == "clean"));
        assert_eq!(findings(&by_action), expected);
        assert_eq!(parsed.get(), 1, "the whole schema is parsed once");

        // Spotless action-scoped policies never need the whole schema.
        let clean = named(text.split("@id(\"type-error\")").next().unwrap());
        parsed.set(0);
        let results = validate_by_action(asked, &clean, agent, &project.tools).unwrap();
        assert!(findings(&results).is_empty());
        assert_eq!(parsed.get(), 0);
    }
}
