//! What a tool handler receives and returns.

use std::collections::BTreeMap;
use std::future::Future;

use serde_json::Value;

use crate::contract::ToolContract;
use crate::fingerprint::{canonical_json, sha256_hex};

/// Calls a tool's handler with untyped JSON: the generated `Dispatcher` implements it
/// over the typed `ToolHandlers` trait, so generic hosts (the MCP server) can serve any
/// bundle.
pub trait ToolDispatch: Send + Sync {
    fn call(
        &self,
        tool: &'static ToolContract,
        ctx: &CallContext,
        arguments: Value,
    ) -> impl Future<Output = Result<Value, ToolError>> + Send;
}

/// Trusted facts about the call, from the task token and the run, never from the model.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CallContext {
    pub tenant_id: String,
    pub task_id: String,
    pub subject: String,
    /// The id of the run-bound resource (e.g. the case id).
    pub resource_id: String,
    /// The task stage the run works in (policies may depend on it).
    pub stage: String,
    /// The task's scopes (from its token).
    pub scopes: Vec<String>,
    pub tool_call_id: String,
    pub correlation_id: String,
    /// Values for system-injected fields, by field name (e.g. `idempotency_key`).
    pub injected: BTreeMap<String, Value>,
    /// The action fingerprint a person approved, when this call is that approved
    /// action; a tool server that authorizes again needs it (the task token carries it).
    pub approved_action: Option<String>,
}

impl CallContext {
    /// The trusted values for the named system-injected fields, as one JSON object.
    /// `tenant_id` and `task_id` come from the context itself unless overridden.
    pub fn injected_fields(&self, names: &[&str]) -> Value {
        let mut out = serde_json::Map::new();
        for name in names {
            let value = match (self.injected.get(*name), *name) {
                (Some(v), _) => v.clone(),
                (None, "tenant_id") => Value::String(self.tenant_id.clone()),
                (None, "task_id") => Value::String(self.task_id.clone()),
                (None, "actor_id" | "principal") => Value::String(self.subject.clone()),
                (None, _) => continue,
            };
            out.insert((*name).to_string(), value);
        }
        Value::Object(out)
    }
}

/// The idempotency key of a write: one business intent is the tenant, the tool and
/// the values of the fields its contract names under `idempotency_key`. `None` for a
/// tool without one. Derived, never sent: the run's executor and the MCP server
/// compute the same key from the same trusted facts, so a handler gets it on either
/// path and no client can choose it.
pub fn idempotency_key(tenant_id: &str, tool: &ToolContract, arguments: &Value) -> Option<String> {
    if tool.idempotency_key.is_empty() {
        return None;
    }
    let mut key = serde_json::Map::new();
    for f in tool.idempotency_key {
        key.insert(
            f.to_string(),
            arguments.get(*f).cloned().unwrap_or(Value::Null),
        );
    }
    let text = format!(
        "{tenant_id}\0{}\0{}",
        tool.name,
        canonical_json(&Value::Object(key))
    );
    Some(sha256_hex(text.as_bytes()))
}

/// A failure a tool handler reports (or the glue around it detects).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ToolError {
    /// A declared business outcome such as `CASE_NOT_FOUND`: never retried.
    #[error("business error `{code}`: {message}")]
    Business { code: String, message: String },
    /// A temporary failure: retried when the contract allows it.
    #[error("transient error `{code}`: {message}")]
    Transient { code: String, message: String },
    /// The arguments do not fit the tool's input type.
    #[error("invalid arguments: {0}")]
    InvalidArguments(String),
    /// The tool's result does not fit its output type.
    #[error("invalid result: {0}")]
    InvalidResult(String),
    /// No tool of that name in the bundle.
    #[error("unknown tool `{0}`")]
    UnknownTool(String),
}

impl ToolError {
    pub fn business(code: impl Into<String>, message: impl Into<String>) -> Self {
        ToolError::Business {
            code: code.into(),
            message: message.into(),
        }
    }

    pub fn transient(code: impl Into<String>, message: impl Into<String>) -> Self {
        ToolError::Transient {
            code: code.into(),
            message: message.into(),
        }
    }
}

/// Decodes tool arguments (or trusted fields) into their generated type.
pub fn decode<T: serde::de::DeserializeOwned>(value: Value) -> Result<T, ToolError> {
    serde_json::from_value(value).map_err(|e| ToolError::InvalidArguments(e.to_string()))
}

/// Encodes a handler's typed result as JSON.
pub fn encode<T: serde::Serialize>(output: T) -> Result<Value, ToolError> {
    serde_json::to_value(output).map_err(|e| ToolError::InvalidResult(e.to_string()))
}
