//! Tool listings for the model-facing protocols: the MCP `tools/list` result and
//! OpenAI Responses function tools.

use serde_json::{Value, json};

use super::json_schema::{input_schema, output_schema, strict};
use crate::tool::{Risk, ToolContract};

/// The MCP `tools/list` result (protocol 2025-11-25): annotations derived from risk.
pub fn mcp_tools(tools: &[ToolContract]) -> Value {
    let list: Vec<Value> = tools
        .iter()
        .map(|t| {
            let read_only = t.risk.value == Risk::ReadOnly;
            json!({
                "name": t.name.value,
                "title": t.title,
                "description": t.description.as_deref().unwrap_or(&t.title),
                "inputSchema": input_schema(t),
                "outputSchema": output_schema(t),
                "annotations": {
                    "title": t.title,
                    "readOnlyHint": read_only,
                    "destructiveHint": t.risk.value == Risk::IrreversibleWrite,
                    // Reads are idempotent; a write is when it carries an idempotency key.
                    "idempotentHint": read_only || !t.idempotency_key.is_empty(),
                    "openWorldHint": false,
                },
            })
        })
        .collect();
    json!({ "tools": list })
}

/// OpenAI Responses API function tools in strict mode.
pub fn openai_tools(tools: &[ToolContract]) -> Value {
    Value::Array(
        tools
            .iter()
            .map(|t| {
                json!({
                    "type": "function",
                    "name": t.name.value,
                    "description": t.description.as_deref().unwrap_or(&t.title),
                    "parameters": strict(&input_schema(t)),
                    "strict": true,
                })
            })
            .collect(),
    )
}

/// Whether a name is a valid MCP tool name (`^[A-Za-z0-9_.-]{1,128}$`).
pub fn is_mcp_tool_name(name: &str) -> bool {
    (1..=128).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.' || b == b'-')
}
