//! Which catalog tools and which permit policies can ever take effect.
//!
//! A schema-driven enumeration of the requests a run can make: for every catalog
//! tool, every stage the tool is offered in, and a task that holds every scope the
//! agent's tools require (or only the tool's own), on its own resource in its own
//! tenant, the compiled policies are evaluated with Cedar's authorizer *before any
//! arguments exist* — the same question the runtime's capability filter asks. A
//! tool every such request denies outright is hidden from every run (W0403); a
//! permit policy that is satisfied by none of them permits nothing (W0404). A
//! policy that needs the model's arguments to decide counts as possibly applying,
//! so neither warning is given on a guess. A tool that needs approval is asked with
//! and without one: permitted without one is an error (E0410), the approval gate
//! would be open.

use std::collections::BTreeSet;

use crate::codes::Code;
use crate::diagnostic::{Diagnostic, Diagnostics};
use crate::policies::{
    ActionSlices, Outcome, Policies, ScenarioRequest, evaluate_among, task_entities, with_action,
};
use crate::project::Project;
use crate::tool::ToolContract;

const TENANT: &str = "tenant";
const RESOURCE: &str = "resource-1";

/// Reports tools no policy can permit and permit policies that never apply.
pub fn check(project: &Project, policies: &Policies, diags: &mut Diagnostics) {
    let Some(agent) = &project.agent else { return };
    // Without any policy every call is denied, and E0408 says so already.
    if policies.set.is_empty() {
        return;
    }
    let reasons: Vec<String> = agent.deny_reasons.iter().map(|r| r.value.clone()).collect();
    let catalog: Vec<String> = agent.catalog.iter().map(|c| c.value.clone()).collect();
    let in_catalog: BTreeSet<&str> = catalog.iter().map(String::as_str).collect();
    let every_scope: Vec<String> = project
        .tools
        .iter()
        .map(|t| t.required_scope.value.clone())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let mut applied: BTreeSet<String> = BTreeSet::new();
    let mut undecided_anywhere = false;
    // Asked once per tool, stage, scope set and approval: each question reads only
    // its own action's policies, and entities (which no tool changes) are built once
    // per stage and scope set. Otherwise the check grows with tools × policies.
    let slices = ActionSlices::new(&policies.set);
    let mut entities = std::collections::HashMap::new();
    for tool in project
        .tools
        .iter()
        .filter(|t| in_catalog.contains(t.name.value.as_str()))
    {
        let stages: Vec<String> = match &tool.stages {
            Some(s) => s.iter().map(|s| s.value.clone()).collect(),
            None => agent.stages.iter().map(|s| s.value.clone()).collect(),
        };
        let own_scope = vec![tool.required_scope.value.clone()];
        let sliced = slices.for_action(&tool.name.value);
        let set = sliced.as_ref().unwrap_or(&policies.set);
        let mut may_run = false;
        let mut denied_by: BTreeSet<String> = BTreeSet::new();
        // A tool that needs approval must be denied without one and may be permitted
        // with one; any other tool is asked as it is called, without one.
        let gated = tool.approval.is_some() && tool.risk.value != crate::tool::Risk::ReadOnly;
        let mut bypassed_by: BTreeSet<String> = BTreeSet::new();
        let approvals: &[&str] = if gated {
            &["none", "approved"]
        } else {
            &["none"]
        };
        for stage in &stages {
            for (scopes, approval) in [&every_scope, &own_scope]
                .into_iter()
                .flat_map(|s| approvals.iter().map(move |a| (s, *a)))
            {
                let mut context = serde_json::Map::new();
                context.insert("approval".into(), serde_json::json!(approval));
                let arguments = resource_argument(tool, &agent.resource.id_field.value);
                let req = ScenarioRequest {
                    tenant: TENANT,
                    subject: "agent",
                    task_id: "task",
                    scopes,
                    stage,
                    bound_resource: RESOURCE,
                    catalog: &catalog,
                    tool,
                    resource: RESOURCE,
                    resource_tenant: TENANT,
                    arguments: &arguments,
                    context: &context,
                };
                let known = entities
                    .entry((stage.clone(), scopes.clone()))
                    .or_insert_with(|| task_entities(policies, &agent.resource.kind.value, &req));
                let Some(e) = known.as_ref().ok().and_then(|known| {
                    // A clone shares the entities themselves (they are reference-counted).
                    let known = with_action(known.clone(), tool).ok()?;
                    evaluate_among(
                        policies,
                        set,
                        &known,
                        &agent.resource.kind.value,
                        &reasons,
                        &req,
                        false,
                    )
                    .ok()
                }) else {
                    // A request we cannot build proves nothing either way.
                    may_run = true;
                    continue;
                };
                undecided_anywhere |= e.undecided;
                if gated && approval == "none" {
                    if matches!(e.outcome, Outcome::Allow) {
                        bypassed_by.extend(e.determining);
                    }
                    continue;
                }
                match e.outcome {
                    Outcome::Allow => {
                        may_run = true;
                        applied.extend(e.determining);
                    }
                    Outcome::Deny(_) if e.undecided => may_run = true,
                    Outcome::Deny(_) => denied_by.extend(e.determining),
                }
            }
        }
        if !bypassed_by.is_empty() {
            diags.push(
                Diagnostic::at(
                    Code::ApprovalBypassed,
                    tool.file,
                    tool.name.span.clone(),
                    format!(
                        "`{}` needs approval but {} permit{} it without one",
                        tool.name.value,
                        bypassed_by
                            .iter()
                            .map(|p| format!("`{p}`"))
                            .collect::<Vec<_>>()
                            .join(", "),
                        if bypassed_by.len() == 1 { "s" } else { "" }
                    ),
                )
                .label("a run could call this without anyone approving it")
                .help("forbid the call unless `context.approval == \"approved\"`, or narrow the permit"),
            );
        }
        if !may_run {
            let why = if denied_by.is_empty() {
                "no permit policy applies to it".to_string()
            } else {
                format!(
                    "forbidden by {}",
                    denied_by
                        .iter()
                        .map(|p| format!("`{p}`"))
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            };
            diags.push(
                Diagnostic::at(
                    Code::ToolNeverPermitted,
                    tool.file,
                    tool.name.span.clone(),
                    format!(
                        "no policy permits `{}` for any task of agent `{}`: {why}",
                        tool.name.value, agent.name.value
                    ),
                )
                .label("no run will be able to call this tool")
                .help(format!(
                    "add a permit policy for action `{}` (risk `{}`, scope `{}`), or narrow the forbid policy that denies it",
                    tool.name.value,
                    tool.risk.value.as_str(),
                    tool.required_scope.value
                )),
            );
        }
    }
    // A permit that reads arguments may apply to calls we cannot enumerate.
    if undecided_anywhere {
        return;
    }
    for policy in policies.set.policies() {
        if policy.effect() != cedar_policy::Effect::Permit {
            continue;
        }
        let id = policy.id().to_string();
        if applied.contains(&id) || policies.warned.contains(&id) {
            continue;
        }
        let Some((file, span)) = policies.origin.get(&id) else {
            continue;
        };
        diags.push(
            Diagnostic::at(
                Code::PermitNeverApplies,
                *file,
                span.clone(),
                format!("permit policy `{id}` permits no catalog tool for any task"),
            )
            .label("never applies")
            .help("check its action, resource type and conditions against the catalog, the tools' risks and scopes"),
        );
    }
}

/// The run-bound field set to the run's own resource: the only argument known
/// before the model proposes any.
fn resource_argument(tool: &ToolContract, id_field: &str) -> serde_json::Value {
    let mut args = serde_json::Map::new();
    if tool.input.iter().any(|f| f.name.value == id_field) {
        args.insert(id_field.to_string(), serde_json::json!(RESOURCE));
    }
    serde_json::Value::Object(args)
}
