//! Authorization scenarios (`policies/tests/*.yaml`) and `caseops-compile test`.
//!
//! A scenario file holds `defaults` (the task principal most scenarios share) and a list
//! of `scenarios`, each naming a tool (`action`), a resource and the expected decision:
//!
//! ```yaml
//! defaults:
//!   tenant: tenant-demo
//!   scopes: [case:read]
//!   run_resource: C-102
//! scenarios:
//!   - name: the run's own case can be read
//!     action: caseops_get_case_snapshot
//!     resource: C-102
//!     expect: allow
//!   - name: a foreign case is denied
//!     action: caseops_get_case_snapshot
//!     resource: C-999
//!     expect: deny
//!     reason: TOOL_RESOURCE_MISMATCH
//! ```

use std::collections::BTreeSet;

use crate::codes::Code;
use crate::diagnostic::{Diagnostic, Diagnostics, closest};
use crate::policies::{Outcome, Policies, ScenarioRequest, evaluate};
use crate::project::{Project, parse_file};
use crate::reader::{Reader, Sp};
use crate::source::{FileId, Sources};
use crate::yaml::{Node, Span};

pub const SCENARIO_DIR: &str = "policies/tests/";

pub(crate) const FILE_KEYS: &[&str] = &["defaults", "scenarios"];
pub(crate) const SCENARIO_KEYS: &[&str] = &[
    "name",
    "tenant",
    "subject",
    "task",
    "scopes",
    "stage",
    "run_resource",
    "catalog",
    "action",
    "resource",
    "resource_tenant",
    "arguments",
    "context",
    "expect",
    "reason",
];
pub(crate) const CONTEXT_KEYS: &[&str] = &["approval", "risk", "required_scope", "stage", "tool"];
pub(crate) const PRINCIPAL_KEYS: &[&str] = &[
    "tenant",
    "subject",
    "task",
    "scopes",
    "stage",
    "run_resource",
    "catalog",
];

/// One scenario, with defaults applied.
#[derive(Debug, Clone)]
pub struct Scenario {
    pub file: FileId,
    pub name: Sp<String>,
    pub tenant: String,
    pub subject: String,
    pub task: String,
    pub scopes: Vec<String>,
    pub stage: String,
    pub run_resource: String,
    pub catalog: Vec<String>,
    pub action: Sp<String>,
    pub resource: String,
    pub resource_tenant: String,
    pub arguments: Option<serde_json::Value>,
    /// Overrides of the computed context (`risk`, `required_scope`, `stage`, `tool`),
    /// to ask "what if this call were a write" without a write tool in the catalog.
    pub context: serde_json::Map<String, serde_json::Value>,
    pub expect: Outcome,
}

/// The result of running every scenario.
#[derive(Debug, Default)]
pub struct TestReport {
    /// `(file path, scenario name, passed, detail)` in file order.
    pub results: Vec<(String, String, bool, String)>,
    pub diagnostics: Vec<Diagnostic>,
}

impl TestReport {
    pub fn failed(&self) -> usize {
        self.results.iter().filter(|r| !r.2).count()
    }
}

/// Reads every scenario file; problems are reported as diagnostics.
pub fn read_scenarios(
    sources: &Sources,
    project: &Project,
    diags: &mut Diagnostics,
) -> Vec<Scenario> {
    let Some(agent) = &project.agent else {
        return Vec::new();
    };
    // With a tool file unreadable, "unknown tool" findings would only repeat that error.
    if project.tools_incomplete {
        return Vec::new();
    }
    let mut out = Vec::new();
    for id in sources.under(SCENARIO_DIR) {
        let Some(root) = parse_file(sources, id, diags) else {
            continue;
        };
        let mut r = Reader { file: id, diags };
        let Some(map) = r.mapping(&root, "scenario file", Some(FILE_KEYS)) else {
            continue;
        };
        let mut base = Scenario {
            file: id,
            name: Sp::new(String::new(), 0..0),
            tenant: String::new(),
            subject: "agent".into(),
            task: "task-1".into(),
            scopes: Vec::new(),
            stage: agent.initial_stage.value.clone(),
            run_resource: String::new(),
            catalog: agent.catalog.iter().map(|c| c.value.clone()).collect(),
            action: Sp::new(String::new(), 0..0),
            resource: String::new(),
            resource_tenant: String::new(),
            arguments: None,
            context: serde_json::Map::new(),
            expect: Outcome::Allow,
        };
        if let Some(defaults) = map.get("defaults") {
            read_principal(&mut r, defaults, "defaults", PRINCIPAL_KEYS, &mut base);
        }
        let Some(list) = map.get("scenarios") else {
            let d = r
                .error(
                    Code::MissingKey,
                    root.span.start..root.span.start,
                    "scenario file has no `scenarios`",
                )
                .label("`scenarios` missing")
                .help("add `scenarios:` with a list of requests and expected decisions");
            r.report(d);
            continue;
        };
        let Some(items) = list.as_seq() else {
            r.strings(list, "scenarios"); // reports the wrong type
            continue;
        };
        for item in items {
            if let Some(s) = read_one(&mut r, item, &base, project) {
                out.push(s);
            }
        }
    }
    out
}

fn read_principal(r: &mut Reader, node: &Node, what: &str, keys: &[&str], s: &mut Scenario) {
    let Some(map) = r.mapping(node, what, Some(keys)) else {
        return;
    };
    let text = |r: &mut Reader, key: &str, slot: &mut String| {
        if let Some(v) = map
            .get(key)
            .and_then(|n| r.string(n, &format!("{what}.{key}")))
        {
            *slot = v.value;
        }
    };
    text(r, "tenant", &mut s.tenant);
    text(r, "subject", &mut s.subject);
    text(r, "task", &mut s.task);
    text(r, "stage", &mut s.stage);
    text(r, "run_resource", &mut s.run_resource);
    text(r, "resource", &mut s.resource);
    text(r, "resource_tenant", &mut s.resource_tenant);
    if let Some(n) = map.get("scopes") {
        s.scopes = r
            .strings(n, &format!("{what}.scopes"))
            .into_iter()
            .map(|v| v.value)
            .collect();
    }
    if let Some(n) = map.get("catalog") {
        s.catalog = r
            .strings(n, &format!("{what}.catalog"))
            .into_iter()
            .map(|v| v.value)
            .collect();
    }
}

fn read_one(r: &mut Reader, item: &Node, base: &Scenario, project: &Project) -> Option<Scenario> {
    let map = r.mapping(item, "scenario", Some(SCENARIO_KEYS))?;
    let mut s = base.clone();
    read_principal(r, item, "scenario", SCENARIO_KEYS, &mut s);
    let missing = |r: &mut Reader, key: &str| {
        let d = r
            .error(Code::InvalidScenario, item.span.clone(), format!("scenario has no `{key}`"))
            .label(format!("`{key}` missing"))
            .help("a scenario names `name`, `action`, `resource` and `expect` (plus `reason` for a denial)");
        r.report(d);
    };
    let Some(name) = map.get("name").and_then(|n| r.string(n, "scenario.name")) else {
        missing(r, "name");
        return None;
    };
    s.name = name;
    let Some(action) = map
        .get("action")
        .and_then(|n| r.string(n, "scenario.action"))
    else {
        missing(r, "action");
        return None;
    };
    if !project.tools.iter().any(|t| t.name.value == action.value) {
        let names: Vec<&str> = project
            .tools
            .iter()
            .map(|t| t.name.value.as_str())
            .collect();
        let mut d = r
            .error(
                Code::InvalidScenario,
                action.span.clone(),
                format!("scenario names unknown tool `{}`", action.value),
            )
            .label("no contract for this tool");
        d = match closest(&action.value, names.iter().copied()) {
            Some(c) => d.help(format!("did you mean `{c}`?")),
            None => d.help("name a tool with a contract in `contracts/tools/`"),
        };
        r.report(d);
        return None;
    }
    s.action = action;
    if s.resource.is_empty() {
        missing(r, "resource");
        return None;
    }
    if s.tenant.is_empty() {
        missing(r, "tenant");
        return None;
    }
    if s.resource_tenant.is_empty() {
        s.resource_tenant = s.tenant.clone();
    }
    if s.run_resource.is_empty() {
        s.run_resource = s.resource.clone();
    }
    if let Some(args) = map.get("arguments") {
        s.arguments = Some(to_json(r, args)?);
    }
    if let Some(node) = map.get("context") {
        let ctx = r.mapping(node, "scenario.context", Some(CONTEXT_KEYS))?;
        for (key, _, value) in ctx.entries() {
            let v = r.string(value, &format!("scenario.context.{key}"))?;
            s.context.insert(key.to_string(), v.value.into());
        }
    }
    let Some(expect) = map
        .get("expect")
        .and_then(|n| r.one_of(n, "scenario.expect", &["allow", "deny"]))
    else {
        if map.get("expect").is_none() {
            missing(r, "expect");
        }
        return None;
    };
    let reason = map
        .get("reason")
        .and_then(|n| r.string(n, "scenario.reason"));
    s.expect = if expect.value == "allow" {
        if let Some(reason) = reason {
            let d = r
                .error(
                    Code::InvalidScenario,
                    reason.span,
                    "an allowed scenario has no reason",
                )
                .label("reason on an allow")
                .help("remove `reason`, or expect `deny`");
            r.report(d);
            return None;
        }
        Outcome::Allow
    } else {
        let declared: Vec<&str> = project
            .agent
            .as_ref()
            .map(|a| a.deny_reasons.iter().map(|r| r.value.as_str()).collect())
            .unwrap_or_default();
        if let Some(reason) = &reason
            && !declared.contains(&reason.value.as_str())
        {
            let mut d = r
                .error(
                    Code::InvalidScenario,
                    reason.span.clone(),
                    format!("`{}` is not a declared deny reason", reason.value),
                )
                .label("unknown reason");
            if let Some(c) = closest(&reason.value, declared.iter().copied()) {
                d = d.help(format!("did you mean `{c}`?"));
            }
            r.report(d);
            return None;
        }
        Outcome::Deny(reason.map(|r| r.value))
    };
    Some(s)
}

fn to_json(r: &mut Reader, node: &Node) -> Option<serde_json::Value> {
    use crate::yaml::NodeKind;
    Some(match &node.kind {
        NodeKind::Null => serde_json::Value::Null,
        NodeKind::Bool(b) => (*b).into(),
        NodeKind::Int(i) => match i64::try_from(*i) {
            Ok(v) => v.into(),
            Err(_) => {
                r.integer(node, "arguments");
                return None;
            }
        },
        NodeKind::Float(f) => serde_json::Number::from_f64(*f)?.into(),
        NodeKind::Str(s) => s.clone().into(),
        NodeKind::Seq(items) => {
            serde_json::Value::Array(items.iter().map(|i| to_json(r, i)).collect::<Option<_>>()?)
        }
        NodeKind::Map(_) => {
            let map = r.mapping(node, "arguments", None)?;
            let mut out = serde_json::Map::new();
            for (k, _, v) in map.entries() {
                out.insert(k.to_string(), to_json(r, v)?);
            }
            serde_json::Value::Object(out)
        }
    })
}

/// Evaluates every scenario against the policies with the real Cedar authorizer.
pub fn run(
    sources: &Sources,
    project: &Project,
    policies: &Policies,
    scenarios: &[Scenario],
) -> TestReport {
    let mut report = TestReport::default();
    let Some(agent) = &project.agent else {
        return report;
    };
    let reasons: Vec<String> = agent.deny_reasons.iter().map(|r| r.value.clone()).collect();
    let mut exercised: BTreeSet<String> = BTreeSet::new();
    for s in scenarios {
        let tool = project
            .tools
            .iter()
            .find(|t| t.name.value == s.action.value)
            .expect("scenario tools were checked when reading");
        let arguments = s.arguments.clone().unwrap_or_else(|| {
            default_arguments(tool, &agent.resource.id_field.value, &s.resource)
        });
        let req = ScenarioRequest {
            tenant: &s.tenant,
            subject: &s.subject,
            task_id: &s.task,
            scopes: &s.scopes,
            stage: &s.stage,
            bound_resource: &s.run_resource,
            catalog: &s.catalog,
            tool,
            resource: &s.resource,
            resource_tenant: &s.resource_tenant,
            arguments: &arguments,
            context: &s.context,
        };
        let path = sources.get(s.file).path.clone();
        match evaluate(policies, &agent.resource.kind.value, &reasons, &req) {
            Ok((outcome, determining)) => {
                exercised.extend(determining);
                let passed = match (&s.expect, &outcome) {
                    (Outcome::Deny(None), Outcome::Deny(_)) => true,
                    (want, got) => want == got,
                };
                let detail = if passed {
                    String::new()
                } else {
                    format!(
                        "expected {}, got {}",
                        describe(&s.expect),
                        describe(&outcome)
                    )
                };
                report
                    .results
                    .push((path, s.name.value.clone(), passed, detail));
            }
            Err(message) => {
                report.diagnostics.push(
                    Diagnostic::at(Code::InvalidScenario, s.file, s.name.span.clone(), format!("scenario `{}` is not a valid request: {message}", s.name.value))
                        .label("this scenario")
                        .help("give `arguments` with every model-visible input of the tool, typed as its contract says"),
                );
                report
                    .results
                    .push((path, s.name.value.clone(), false, "invalid request".into()));
            }
        }
    }
    for (id, (file, span)) in &policies.origin {
        if !exercised.contains(id) {
            report.diagnostics.push(
                Diagnostic::at(
                    Code::PolicyNotExercised,
                    *file,
                    head(sources, *file, span),
                    format!("no scenario's decision was determined by policy `{id}`"),
                )
                .label("not exercised")
                .help("add a scenario in `policies/tests/` whose decision this policy determines"),
            );
        }
    }
    report
}

fn head(sources: &Sources, file: FileId, span: &Span) -> Span {
    crate::policies::head_span(&sources.get(file).text, span)
}

/// `{<resource id field>: resource}`: enough for tools whose only argument is the resource.
fn default_arguments(
    tool: &crate::tool::ToolContract,
    id_field: &str,
    resource: &str,
) -> serde_json::Value {
    let mut args = serde_json::Map::new();
    if tool.input.iter().any(|f| f.name.value == id_field) {
        args.insert(id_field.to_string(), resource.into());
    }
    serde_json::Value::Object(args)
}

fn describe(o: &Outcome) -> String {
    match o {
        Outcome::Allow => "allow".into(),
        Outcome::Deny(Some(r)) => format!("deny ({r})"),
        Outcome::Deny(None) => "deny (no forbid policy; nothing permitted it)".into(),
    }
}
