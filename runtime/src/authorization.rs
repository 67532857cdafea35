//! Stage 6, runtime authorization: the structural run-bound-resource check, then the
//! compiled Cedar policies. The runtime's one home of Cedar.
//!
//! Deny reasons come from the `@reason` annotations of the determining forbid
//! policies, in the bundle's `DENY_REASONS` priority order.

use std::str::FromStr;

use cedar_policy::{
    Authorizer, Context, Decision, Entities, EntityId, EntityTypeName, EntityUid, PolicyId,
    PolicySet, Request, Schema,
};
use serde_json::{Value, json};

use crate::bundle::ContractBundle;
use crate::contract::ToolContract;
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

#[derive(Debug, thiserror::Error)]
#[error("the bundle's cedar {what} does not load: {message}")]
pub struct AuthzLoadError {
    pub what: &'static str,
    pub message: String,
}

/// The bundle's schema and policies, parsed once.
pub struct Authorization {
    schema: Schema,
    policies: PolicySet,
    resource_type: &'static str,
    deny_priority: &'static [&'static str],
    authorizer: Authorizer,
}

impl Authorization {
    pub fn load<B: ContractBundle>() -> Result<Self, AuthzLoadError> {
        let schema_json: Value =
            serde_json::from_str(B::CEDAR_SCHEMA_JSON).map_err(|e| AuthzLoadError {
                what: "schema",
                message: e.to_string(),
            })?;
        let schema = Schema::from_json_value(schema_json).map_err(|e| AuthzLoadError {
            what: "schema",
            message: e.to_string(),
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
        Ok(Self {
            schema,
            policies,
            resource_type: B::RESOURCE_TYPE,
            deny_priority: B::DENY_REASONS,
            authorizer: Authorizer::new(),
        })
    }

    /// Decides one proposed call. `resource_id` is the value of the tool's run-bound
    /// argument (the resource the call would touch).
    pub fn authorize(
        &self,
        spec: &RunSpec,
        stage: &str,
        tool: &ToolContract,
        arguments: &Value,
    ) -> AuthzDecision {
        let resource_id = tool
            .resource_field()
            .and_then(|f| arguments.get(f))
            .and_then(Value::as_str);
        // Structural check first: the call must name the run's own resource.
        if resource_id != Some(spec.resource_id.as_str()) {
            return AuthzDecision::Deny {
                reason: reasons::TOOL_RESOURCE_MISMATCH.into(),
                policies: vec!["structural:run-bound-resource".into()],
            };
        }
        match self.evaluate(spec, stage, tool, arguments) {
            Ok(d) => d,
            Err(message) => AuthzDecision::Deny {
                reason: AUTHORIZATION_ERROR.into(),
                policies: vec![message],
            },
        }
    }

    fn evaluate(
        &self,
        spec: &RunSpec,
        stage: &str,
        tool: &ToolContract,
        arguments: &Value,
    ) -> Result<AuthzDecision, String> {
        let ty = |name: &str| format!("{NAMESPACE}::{name}");
        let tenant = json!({ "__entity": { "type": ty("Tenant"), "id": spec.tenant_id } });
        let entities = json!([
            {
                "uid": { "type": ty("Tenant"), "id": spec.tenant_id },
                "attrs": { "catalog": spec.catalog },
                "parents": [],
            },
            {
                "uid": { "type": ty(self.resource_type), "id": spec.resource_id },
                "attrs": { "tenant": tenant },
                "parents": [ { "type": ty("Tenant"), "id": spec.tenant_id } ],
            },
            {
                "uid": { "type": ty("Task"), "id": spec.task_id },
                "attrs": {
                    "tenant": tenant,
                    "subject": spec.subject,
                    "scopes": spec.scopes,
                    "resource": { "__entity": { "type": ty(self.resource_type), "id": spec.resource_id } },
                    "stage": stage,
                },
                "parents": [ { "type": ty("Tenant"), "id": spec.tenant_id } ],
            },
        ]);
        let entities =
            Entities::from_json_value(entities, Some(&self.schema)).map_err(|e| e.to_string())?;
        let action = EntityUid::from_type_name_and_id(
            EntityTypeName::from_str(&ty("Action")).map_err(|e| e.to_string())?,
            EntityId::new(tool.name),
        );
        let context = json!({
            "tool": tool.name,
            "risk": tool.risk.as_str(),
            "required_scope": tool.required_scope,
            "stage": stage,
            "arguments": cedar_arguments(tool, arguments),
        });
        let context = Context::from_json_value(context, Some((&self.schema, &action)))
            .map_err(|e| e.to_string())?;
        let uid = |t: &str, id: &str| -> Result<EntityUid, String> {
            Ok(EntityUid::from_type_name_and_id(
                EntityTypeName::from_str(&ty(t)).map_err(|e| e.to_string())?,
                EntityId::new(id),
            ))
        };
        let request = Request::new(
            uid("Task", &spec.task_id)?,
            action,
            uid(self.resource_type, &spec.resource_id)?,
            context,
            Some(&self.schema),
        )
        .map_err(|e| e.to_string())?;
        let response = self
            .authorizer
            .is_authorized(&request, &self.policies, &entities);
        let determining: Vec<String> = response
            .diagnostics()
            .reason()
            .map(|p| p.to_string())
            .collect();
        if response.decision() == Decision::Allow {
            return Ok(AuthzDecision::Allow);
        }
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
        Ok(AuthzDecision::Deny {
            reason,
            policies: determining,
        })
    }
}

/// The arguments as the Cedar context types them: model-visible fields only, and no
/// floating-point numbers (Cedar has none; the schema leaves such fields out).
fn cedar_arguments(tool: &ToolContract, arguments: &Value) -> Value {
    let mut out = serde_json::Map::new();
    if let Some(obj) = arguments.as_object() {
        for f in tool.inputs.iter().filter(|f| f.source.model_visible()) {
            if let Some(v) = obj.get(f.name)
                && !v.is_f64()
                && !v.is_null()
            {
                out.insert(f.name.to_string(), v.clone());
            }
        }
    }
    Value::Object(out)
}
