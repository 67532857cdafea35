//! Stage 4, protocol parsing: a planner's JSON becomes exactly one typed decision, or
//! a protocol error. Unknown decision kinds, unknown keys, unknown tools and
//! non-object arguments are all protocol errors.

use serde_json::{Map, Value};

use crate::bundle::ContractBundle;
use crate::contract::ToolContract;

/// Resource usage a planner may report with a decision.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub tokens: u64,
    pub cost_micro_usd: u64,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    ToolCall {
        tool: &'static ToolContract,
        arguments: Value,
    },
    Final {
        answer: Value,
    },
    NeedsHuman {
        reason: String,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("protocol error: {0}")]
pub struct ProtocolError(pub String);

fn err<T>(msg: impl Into<String>) -> Result<T, ProtocolError> {
    Err(ProtocolError(msg.into()))
}

fn only_keys(obj: &Map<String, Value>, allowed: &[&str]) -> Result<(), ProtocolError> {
    match obj.keys().find(|k| !allowed.contains(&k.as_str())) {
        Some(k) => err(format!("unexpected key `{k}`")),
        None => Ok(()),
    }
}

fn usage(obj: &Map<String, Value>) -> Result<Usage, ProtocolError> {
    let Some(u) = obj.get("usage") else {
        return Ok(Usage::default());
    };
    let Some(u) = u.as_object() else {
        return err("`usage` is not an object");
    };
    only_keys(u, &["tokens", "cost_micro_usd"])?;
    let num = |k: &str| match u.get(k) {
        None => Ok(0),
        Some(v) => v
            .as_u64()
            .ok_or_else(|| ProtocolError(format!("`usage.{k}` is not a non-negative integer"))),
    };
    Ok(Usage {
        tokens: num("tokens")?,
        cost_micro_usd: num("cost_micro_usd")?,
    })
}

/// Parses one decision.
pub fn parse<B: ContractBundle>(raw: &Value) -> Result<(Decision, Usage), ProtocolError> {
    let Some(obj) = raw.as_object() else {
        return err("a decision is a JSON object");
    };
    let kind = match obj.get("decision") {
        Some(Value::String(k)) => k.as_str(),
        Some(_) => return err("`decision` is not a string"),
        None => return err("no `decision`"),
    };
    let decision = match kind {
        "tool_call" => {
            only_keys(obj, &["decision", "tool", "arguments", "usage"])?;
            let Some(name) = obj.get("tool").and_then(Value::as_str) else {
                return err("a tool_call names its `tool`");
            };
            let Some(tool) = B::tool(name) else {
                return err(format!("unknown tool `{name}`"));
            };
            let arguments = match obj.get("arguments") {
                Some(a @ Value::Object(_)) => a.clone(),
                Some(_) => return err("`arguments` is not an object"),
                None => return err("a tool_call carries `arguments`"),
            };
            Decision::ToolCall { tool, arguments }
        }
        "final" => {
            only_keys(obj, &["decision", "answer", "usage"])?;
            match obj.get("answer") {
                Some(a @ Value::Object(_)) => Decision::Final { answer: a.clone() },
                _ => return err("a final decision carries an `answer` object"),
            }
        }
        "needs_human" => {
            only_keys(obj, &["decision", "reason", "usage"])?;
            let reason = obj
                .get("reason")
                .and_then(Value::as_str)
                .unwrap_or("the planner asked for a human")
                .to_string();
            Decision::NeedsHuman { reason }
        }
        other => return err(format!("unknown decision `{other}`")),
    };
    Ok((decision, usage(obj)?))
}
