//! The Cedar schema generated from the contracts (JSON schema format).
//!
//! Namespace `CaseOps`:
//! - `Tenant { catalog: Set<String> }`: the tenant and its tool allowlist;
//! - the resource type of the agent (e.g. `Case`), in a tenant, with a `tenant` attribute;
//! - `Task`: the run's principal: tenant, subject, scopes, the run-bound resource, stage;
//! - one action per tool, member of the action group of its risk (`ReadOnly`,
//!   `ReversibleWrite`, `IrreversibleWrite`), whose context holds `tool`, `risk`,
//!   `required_scope`, `stage`, `approval` (`"approved"` when a person approved this
//!   exact call, `"none"` otherwise) and a record of the tool's model-visible arguments.
//!
//! System-injected fields never appear in the context. Number fields are left out of
//! the argument record: Cedar has no floating-point type, so no policy could use them.

use serde_json::{Map, Value, json};

use crate::agent::AgentContract;
use crate::fields::{FieldSpec, FieldType};
use crate::tool::{Risk, ToolContract};

pub const NAMESPACE: &str = "CaseOps";
pub const TENANT_TYPE: &str = "Tenant";
pub const TASK_TYPE: &str = "Task";

/// The action group of a risk class.
pub fn risk_group(risk: Risk) -> &'static str {
    match risk {
        Risk::ReadOnly => "ReadOnly",
        Risk::ReversibleWrite => "ReversibleWrite",
        Risk::IrreversibleWrite => "IrreversibleWrite",
    }
}

/// The Cedar JSON schema for the agent and its tools, in a stable order.
pub fn schema_json(agent: &AgentContract, tools: &[ToolContract]) -> Value {
    schema_json_of(agent, tools.iter().collect())
}

/// The schema with only `tools` among the actions (the risk groups are always there).
pub fn schema_json_of(agent: &AgentContract, mut sorted: Vec<&ToolContract>) -> Value {
    let resource = agent.resource.kind.value.as_str();
    let string = || json!({ "type": "String" });
    let set_of_strings = || json!({ "type": "Set", "element": { "type": "String" } });
    let entity = |name: &str| json!({ "type": "Entity", "name": name });

    let mut entity_types = Map::new();
    entity_types.insert(
        TENANT_TYPE.into(),
        json!({ "shape": { "type": "Record", "attributes": { "catalog": set_of_strings() } } }),
    );
    entity_types.insert(
        resource.into(),
        json!({
            "memberOfTypes": [TENANT_TYPE],
            "shape": { "type": "Record", "attributes": { "tenant": entity(TENANT_TYPE) } },
        }),
    );
    entity_types.insert(
        TASK_TYPE.into(),
        json!({
            "memberOfTypes": [TENANT_TYPE],
            "shape": { "type": "Record", "attributes": {
                "tenant": entity(TENANT_TYPE),
                "subject": string(),
                "scopes": set_of_strings(),
                "resource": entity(resource),
                "stage": string(),
            } },
        }),
    );

    let mut actions = Map::new();
    for group in ["ReadOnly", "ReversibleWrite", "IrreversibleWrite"] {
        actions.insert(group.into(), json!({}));
    }
    sorted.sort_by(|a, b| a.name.value.cmp(&b.name.value));
    for tool in sorted {
        let mut args = Map::new();
        for field in tool.input.iter().filter(|f| f.source.value.model_visible()) {
            if let Some(ty) = cedar_type(&field.spec) {
                args.insert(field.name.value.clone(), ty);
            }
        }
        actions.insert(
            tool.name.value.clone(),
            json!({
                "memberOf": [ { "id": risk_group(tool.risk.value) } ],
                "appliesTo": {
                    "principalTypes": [TASK_TYPE],
                    "resourceTypes": [resource],
                    "context": { "type": "Record", "attributes": {
                        "tool": string(),
                        "risk": string(),
                        "required_scope": string(),
                        "stage": string(),
                        "approval": string(),
                        "arguments": { "type": "Record", "attributes": Value::Object(args) },
                    } },
                },
            }),
        );
    }
    json!({ NAMESPACE: { "entityTypes": entity_types, "actions": actions } })
}

/// The Cedar type of a field, or `None` when Cedar cannot express it.
fn cedar_type(spec: &FieldSpec) -> Option<Value> {
    let mut ty = match &spec.ty {
        FieldType::String { .. } | FieldType::Enum(_) | FieldType::DateTime => {
            json!({ "type": "String" })
        }
        FieldType::Integer { .. } => json!({ "type": "Long" }),
        FieldType::Boolean => json!({ "type": "Boolean" }),
        FieldType::Number { .. } => return None,
        FieldType::List { items, .. } => json!({ "type": "Set", "element": cedar_type(items)? }),
        FieldType::Object(fields) => {
            let mut attrs = Map::new();
            for f in fields {
                if let Some(t) = cedar_type(&f.spec) {
                    attrs.insert(f.name.value.clone(), t);
                }
            }
            json!({ "type": "Record", "attributes": attrs })
        }
    };
    if spec.optional {
        ty["required"] = Value::Bool(false);
    }
    Some(ty)
}
