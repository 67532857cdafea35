//! Stage 6, runtime authorization: the structural run-bound-resource check, then the
//! compiled Cedar policies. The runtime's one home of Cedar.
//!
//! Deny reasons come from the `@reason` annotations of the determining forbid
//! policies, in the bundle's `DENY_REASONS` priority order.

use std::str::FromStr;

use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, OnceLock};

use cedar_policy::{
    Authorizer, Context, Decision, Entities, Entity, EntityId, EntityTypeName, EntityUid, PolicyId,
    PolicySet, Request, RestrictedExpression,
};
use serde_json::Value;

use crate::bundle::ContractBundle;
use crate::contract::ToolContract;
use crate::decision_cache::DecisionCache;
use crate::run::{RunSpec, reasons};

const NAMESPACE: &str = "CaseOps";

/// Reason for a request no forbid policy denied but no permit policy allowed.
pub const NOT_PERMITTED: &str = "TOOL_NOT_PERMITTED";
/// Reason for a request Cedar could not evaluate (a bundle/host mismatch).
pub const AUTHORIZATION_ERROR: &str = "AUTHORIZATION_ERROR";

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuthzDecision {
    Allow,
    Deny {
        reason: String,
        policies: Vec<String>,
    },
}

impl AuthzDecision {
    pub fn is_allow(&self) -> bool {
        matches!(self, AuthzDecision::Allow)
    }

    /// The deny reason, `None` when allowed.
    pub fn reason(&self) -> Option<&str> {
        match self {
            AuthzDecision::Allow => None,
            AuthzDecision::Deny { reason, .. } => Some(reason),
        }
    }

    /// A request Cedar could not evaluate is denied, never allowed.
    pub fn unevaluable(message: String) -> Self {
        AuthzDecision::Deny {
            reason: AUTHORIZATION_ERROR.into(),
            policies: vec![message],
        }
    }
}

#[derive(Debug, thiserror::Error)]
#[error("the bundle's cedar {what} does not load: {message}")]
pub struct AuthzLoadError {
    pub what: &'static str,
    pub message: String,
}

/// The bundle's schema and policies, parsed once.
pub struct Authorization {
    policies: PolicySet,
    types: Types,
    deny_priority: &'static [&'static str],
    authorizer: Authorizer,
    /// Whether a policy names a task by its id; if none does, no decision depends
    /// on which task asks, and runs alike share cached decisions.
    names_tasks: bool,
    /// Decisions by everything they read (see [`Authorization::decide`]).
    decisions: Mutex<DecisionCache>,
}

impl Authorization {
    pub fn load<B: ContractBundle>() -> Result<Self, AuthzLoadError> {
        let schema_json: Value =
            serde_json::from_str(B::CEDAR_SCHEMA_JSON).map_err(|e| AuthzLoadError {
                what: "schema",
                message: e.to_string(),
            })?;
        // The schema must load (the policies were validated against it), even though
        // requests are built directly and not re-validated on every call.
        cedar_policy::Schema::from_json_value(schema_json).map_err(|e| AuthzLoadError {
            what: "schema",
            message: e.to_string(),
        })?;
        let types = Types::new(B::RESOURCE_TYPE).map_err(|message| AuthzLoadError {
            what: "schema",
            message,
        })?;
        let parsed = PolicySet::from_str(B::CEDAR_POLICIES).map_err(|e| AuthzLoadError {
            what: "policies",
            message: e.to_string(),
        })?;
        // Policies are known by their `@id` (decisions name them in ledger and audit).
        let mut policies = PolicySet::new();
        for p in parsed.policies() {
            let id = p.annotation("id").unwrap_or(p.id().as_ref()).to_string();
            policies
                .add(p.new_id(PolicyId::new(id)))
                .map_err(|e| AuthzLoadError {
                    what: "policies",
                    message: e.to_string(),
                })?;
        }
        // An entity literal may have spaces around `::`; compare without them.
        let compact: String = B::CEDAR_POLICIES
            .chars()
            .filter(|c| !c.is_whitespace())
            .collect();
        Ok(Self {
            policies,
            types,
            deny_priority: B::DENY_REASONS,
            authorizer: Authorizer::new(),
            names_tasks: compact.contains("Task::\""),
            decisions: Mutex::default(),
        })
    }

    /// Decides one proposed call (building the run's entities for this call alone;
    /// a run driver prepares them once with [`Authorization::principal`]).
    pub fn authorize(
        &self,
        spec: &RunSpec,
        stage: &str,
        tool: &ToolContract,
        arguments: &Value,
    ) -> AuthzDecision {
        match self.principal(spec, stage, std::slice::from_ref(tool)) {
            Ok(p) => self.authorize_as(&p, tool, arguments),
            Err(message) => AuthzDecision::unevaluable(message),
        }
    }

    /// Decides one proposed call by a prepared principal, with no approval.
    pub fn authorize_as(
        &self,
        principal: &Principal,
        tool: &ToolContract,
        arguments: &Value,
    ) -> AuthzDecision {
        self.authorize_with(principal, tool, arguments, Approval::None)
    }

    /// Decides one call by a prepared principal, telling the policies whether a
    /// person approved this exact call (`context.approval`). Only a recorded decision
    /// bound to the call's fingerprint may pass [`Approval::Approved`].
    pub fn authorize_with(
        &self,
        principal: &Principal,
        tool: &ToolContract,
        arguments: &Value,
        approval: Approval,
    ) -> AuthzDecision {
        let resource_id = tool
            .resource_field()
            .and_then(|f| arguments.get(f))
            .and_then(Value::as_str);
        // Structural check first: the call must name the run's own resource.
        if resource_id != Some(principal.resource_id.as_str()) {
            return AuthzDecision::Deny {
                reason: reasons::TOOL_RESOURCE_MISMATCH.into(),
                policies: vec!["structural:run-bound-resource".into()],
            };
        }
        match self.decide(principal, tool, arguments, approval) {
            Ok((d, _)) => d,
            Err(message) => AuthzDecision::unevaluable(message),
        }
    }

    /// Whether the policies could permit `tool` for this principal on its own
    /// resource, asked before any arguments exist (the capability filter's question).
    /// A tool is withheld only when the policies deny it outright; a policy that
    /// needs the model's arguments to decide cannot be evaluated yet, so the tool
    /// stays visible and that policy decides at call time. A tool that needs approval
    /// is asked as if approved: it is hidden only when no approval could permit it.
    pub fn may_call(&self, principal: &Principal, tool: &ToolContract) -> bool {
        let mut arguments = serde_json::Map::new();
        if let Some(field) = tool.resource_field() {
            arguments.insert(
                field.to_string(),
                Value::String(principal.resource_id.clone()),
            );
        }
        let approval = if tool.approval.is_some() && tool.risk.is_write() {
            Approval::Approved
        } else {
            Approval::None
        };
        match self.decide(principal, tool, &Value::Object(arguments), approval) {
            Ok((AuthzDecision::Allow, _)) => true,
            Ok((AuthzDecision::Deny { .. }, undecided)) => undecided,
            Err(_) => false,
        }
    }

    /// The run's tenant, resource, task principal and the actions of `tools`. They do
    /// not change during a run, so a driver prepares them once; the Cedar entities
    /// are built on the first decision the cache cannot answer.
    pub fn principal(
        &self,
        spec: &RunSpec,
        stage: &str,
        tools: &[ToolContract],
    ) -> Result<Principal, String> {
        let t = &self.types;
        let task_key = if self.names_tasks {
            spec.task_id.as_str()
        } else {
            ""
        };
        let actions: Vec<&str> = tools.iter().map(|t| t.name).collect();
        // JSON: no two different principals share a key (the catalog, which may be
        // long, by its digest: computed once per catalog, not per run).
        let key = serde_json::to_string(&(
            &spec.tenant_id,
            spec.catalog.digest(),
            &spec.resource_id,
            &spec.subject,
            &spec.scopes,
            stage,
            task_key,
            &actions,
        ))
        .map_err(|e| e.to_string())?;
        Ok(Principal {
            key,
            entities: OnceLock::new(),
            spec: spec.clone(),
            tools: tools.to_vec(),
            task: EntityUid::from_type_name_and_id(t.task.clone(), EntityId::new(&spec.task_id)),
            resource: EntityUid::from_type_name_and_id(
                t.resource.clone(),
                EntityId::new(&spec.resource_id),
            ),
            resource_id: spec.resource_id.clone(),
            stage: stage.to_string(),
        })
    }

    /// The principal's Cedar entities.
    fn entities(&self, p: &Principal) -> Result<Entities, String> {
        let e = |e: &dyn std::fmt::Display| e.to_string();
        let (spec, stage, tools) = (&p.spec, p.stage.as_str(), p.tools.as_slice());
        let t = &self.types;
        let tenant =
            EntityUid::from_type_name_and_id(t.tenant.clone(), EntityId::new(&spec.tenant_id));
        let resource = p.resource.clone();
        let task = p.task.clone();
        let strings = |items: &[String]| {
            RestrictedExpression::new_set(
                items
                    .iter()
                    .map(|s| RestrictedExpression::new_string(s.clone())),
            )
        };
        // Built directly (not from JSON): the shapes are ours and the policies were
        // validated against the schema at compile time.
        let mut entities = [
            Entity::new(
                tenant.clone(),
                HashMap::from([("catalog".to_string(), strings(spec.catalog.names()))]),
                HashSet::new(),
            ),
            Entity::new(
                resource.clone(),
                HashMap::from([(
                    "tenant".to_string(),
                    RestrictedExpression::new_entity_uid(tenant.clone()),
                )]),
                HashSet::from([tenant.clone()]),
            ),
            Entity::new(
                task,
                HashMap::from([
                    (
                        "tenant".to_string(),
                        RestrictedExpression::new_entity_uid(tenant.clone()),
                    ),
                    (
                        "subject".to_string(),
                        RestrictedExpression::new_string(spec.subject.clone()),
                    ),
                    ("scopes".to_string(), strings(&spec.scopes)),
                    (
                        "resource".to_string(),
                        RestrictedExpression::new_entity_uid(resource),
                    ),
                    (
                        "stage".to_string(),
                        RestrictedExpression::new_string(stage.to_string()),
                    ),
                ]),
                HashSet::from([tenant]),
            ),
        ]
        .into_iter()
        .collect::<Result<Vec<Entity>, _>>()
        .map_err(|x| e(&x))?;
        // Each action in its group by risk (`ReadOnly`, …), as the schema declares it.
        for group in ["ReadOnly", "ReversibleWrite", "IrreversibleWrite"] {
            let uid = EntityUid::from_type_name_and_id(t.action.clone(), EntityId::new(group));
            entities.push(Entity::new_no_attrs(uid, HashSet::new()));
        }
        for tool in tools {
            let action =
                EntityUid::from_type_name_and_id(t.action.clone(), EntityId::new(tool.name));
            let group =
                EntityUid::from_type_name_and_id(t.action.clone(), EntityId::new(risk_group(tool)));
            entities.push(Entity::new_no_attrs(action, HashSet::from([group])));
        }
        Entities::from_entities(entities, None).map_err(|x| e(&x))
    }

    /// The decision, and whether some policy could not be evaluated: from the cache
    /// when this exact question was asked before, else from Cedar. The key holds
    /// everything a decision reads — the principal's facts (without the task's id
    /// unless a policy names a task), the tool, the approval and the arguments —
    /// so a cached answer is the one Cedar would give.
    fn decide(
        &self,
        principal: &Principal,
        tool: &ToolContract,
        arguments: &Value,
        approval: Approval,
    ) -> Result<(AuthzDecision, bool), String> {
        let (key, name) = (principal.key.as_str(), tool.name);
        let hash = {
            let cache = self.decisions.lock().expect("decision cache");
            let hash = cache.hash(key, name, approval, arguments);
            if let Some(hit) = cache.get(hash, key, name, approval, arguments) {
                return Ok(hit.clone());
            }
            hash
        };
        let decided = self.evaluate(principal, tool, arguments, approval)?;
        self.decisions.lock().expect("decision cache").insert(
            hash,
            key,
            name,
            approval,
            arguments,
            decided.clone(),
        );
        Ok(decided)
    }

    /// Cedar's decision, and whether some policy could not be evaluated (it needed a
    /// value the request lacks).
    fn evaluate(
        &self,
        principal: &Principal,
        tool: &ToolContract,
        arguments: &Value,
        approval: Approval,
    ) -> Result<(AuthzDecision, bool), String> {
        let e = |e: &dyn std::fmt::Display| e.to_string();
        let entities = principal
            .entities
            .get_or_init(|| self.entities(principal))
            .as_ref()
            .map_err(Clone::clone)?;
        let action =
            EntityUid::from_type_name_and_id(self.types.action.clone(), EntityId::new(tool.name));
        let stage = &principal.stage;
        let context = Context::from_pairs([
            (
                "tool".to_string(),
                RestrictedExpression::new_string(tool.name.to_string()),
            ),
            (
                "risk".to_string(),
                RestrictedExpression::new_string(tool.risk.as_str().to_string()),
            ),
            (
                "required_scope".to_string(),
                RestrictedExpression::new_string(tool.required_scope.to_string()),
            ),
            (
                "stage".to_string(),
                RestrictedExpression::new_string(stage.to_string()),
            ),
            (
                "approval".to_string(),
                RestrictedExpression::new_string(approval.as_str().to_string()),
            ),
            ("arguments".to_string(), cedar_arguments(tool, arguments)?),
        ])
        .map_err(|x| e(&x))?;
        let request = Request::new(
            principal.task.clone(),
            action,
            principal.resource.clone(),
            context,
            None,
        )
        .map_err(|x| e(&x))?;
        let response = self
            .authorizer
            .is_authorized(&request, &self.policies, entities);
        let undecided = response.diagnostics().errors().next().is_some();
        if response.decision() == Decision::Allow {
            return Ok((AuthzDecision::Allow, undecided));
        }
        let mut determining: Vec<String> = response
            .diagnostics()
            .reason()
            .map(|p| p.to_string())
            .collect();
        // Cedar reports them in no fixed order; ledger and audit name them sorted.
        determining.sort_unstable();
        let reason = self
            .deny_priority
            .iter()
            .find(|r| {
                determining
                    .iter()
                    .any(|id| self.policies.annotation(&PolicyId::new(id), "reason") == Some(**r))
            })
            .map(|r| r.to_string())
            .unwrap_or_else(|| NOT_PERMITTED.to_string());
        Ok((
            AuthzDecision::Deny {
                reason,
                policies: determining,
            },
            undecided,
        ))
    }
}

/// Whether a person approved the call being decided (`context.approval`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Approval {
    None,
    Approved,
}

impl Approval {
    pub fn as_str(self) -> &'static str {
        match self {
            Approval::None => "none",
            Approval::Approved => "approved",
        }
    }
}

/// A run's principal and its surroundings as Cedar entities, built once per run.
pub struct Principal {
    /// Everything about the run a decision can read, as one string.
    key: String,
    entities: OnceLock<Result<Entities, String>>,
    spec: RunSpec,
    tools: Vec<ToolContract>,
    task: EntityUid,
    resource: EntityUid,
    resource_id: String,
    stage: String,
}

impl Principal {
    /// The run facts this principal was built from.
    pub fn spec(&self) -> &RunSpec {
        &self.spec
    }
}

fn risk_group(tool: &ToolContract) -> &'static str {
    match tool.risk {
        crate::contract::Risk::ReadOnly => "ReadOnly",
        crate::contract::Risk::ReversibleWrite => "ReversibleWrite",
        crate::contract::Risk::IrreversibleWrite => "IrreversibleWrite",
    }
}

/// Entity type names, parsed once.
struct Types {
    tenant: EntityTypeName,
    task: EntityTypeName,
    resource: EntityTypeName,
    action: EntityTypeName,
}

impl Types {
    fn new(resource_type: &str) -> Result<Self, String> {
        let ty = |name: &str| {
            EntityTypeName::from_str(&format!("{NAMESPACE}::{name}")).map_err(|e| e.to_string())
        };
        Ok(Self {
            tenant: ty("Tenant")?,
            task: ty("Task")?,
            resource: ty(resource_type)?,
            action: ty("Action")?,
        })
    }
}

/// The arguments as the Cedar context types them: model-visible fields only, and no
/// floating-point numbers or nulls (Cedar has neither; the schema leaves such out).
fn cedar_arguments(tool: &ToolContract, arguments: &Value) -> Result<RestrictedExpression, String> {
    let mut fields = Vec::new();
    if let Some(obj) = arguments.as_object() {
        for f in tool.inputs.iter().filter(|f| f.source.model_visible()) {
            if let Some(v) = obj.get(f.name).and_then(to_cedar) {
                fields.push((f.name.to_string(), v));
            }
        }
    }
    RestrictedExpression::new_record(fields).map_err(|e| e.to_string())
}

fn to_cedar(v: &Value) -> Option<RestrictedExpression> {
    Some(match v {
        Value::String(s) => RestrictedExpression::new_string(s.clone()),
        Value::Bool(b) => RestrictedExpression::new_bool(*b),
        Value::Number(n) => RestrictedExpression::new_long(n.as_i64()?),
        Value::Array(items) => RestrictedExpression::new_set(items.iter().filter_map(to_cedar)),
        Value::Object(map) => RestrictedExpression::new_record(
            map.iter()
                .filter_map(|(k, v)| Some((k.clone(), to_cedar(v)?))),
        )
        .ok()?,
        Value::Null => return None,
    })
}
