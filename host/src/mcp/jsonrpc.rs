//! JSON-RPC 2.0 as MCP uses it: one message per HTTP POST (batches are refused), ids
//! are strings or integers, never null.

use serde_json::{Map, Value, json};

pub const PARSE_ERROR: i64 = -32700;
pub const INVALID_REQUEST: i64 = -32600;
pub const METHOD_NOT_FOUND: i64 = -32601;
pub const INVALID_PARAMS: i64 = -32602;
pub const INTERNAL_ERROR: i64 = -32603;

/// One incoming message.
#[derive(Debug, Clone, PartialEq)]
pub enum Incoming {
    Request {
        id: Value,
        method: String,
        params: Map<String, Value>,
    },
    Notification {
        method: String,
    },
    /// A response to a request the server sent (the server sends none; accepted, ignored).
    Response,
}

/// Why a body is not one valid message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Malformed {
    #[error("batches are not supported: send one JSON-RPC message per request")]
    Batch,
    #[error("body is not JSON: {0}")]
    Json(String),
    #[error("invalid JSON-RPC message: {0}")]
    Invalid(String),
}

impl Malformed {
    pub fn code(&self) -> i64 {
        match self {
            Malformed::Json(_) => PARSE_ERROR,
            _ => INVALID_REQUEST,
        }
    }
}

/// Parses one message. Never panics, whatever the bytes. The message's members
/// are moved out, not copied: `params` holds a tool's arguments.
pub fn parse(body: &[u8]) -> Result<Incoming, Malformed> {
    let value: Value = serde_json::from_slice(body).map_err(|e| Malformed::Json(e.to_string()))?;
    let mut obj = match value {
        Value::Array(_) => return Err(Malformed::Batch),
        Value::Object(obj) => obj,
        _ => return Err(Malformed::Invalid("a message is a JSON object".into())),
    };
    if obj.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err(Malformed::Invalid("`jsonrpc` must be \"2.0\"".into()));
    }
    let id = obj.remove("id");
    if let Some(id) = &id
        && !(id.is_string() || id.is_i64() || id.is_u64())
    {
        return Err(Malformed::Invalid(
            "`id` must be a string or an integer".into(),
        ));
    }
    match obj.remove("method") {
        Some(Value::String(method)) => {
            let params = match obj.remove("params") {
                None => Map::new(),
                Some(Value::Object(p)) => p,
                Some(_) => return Err(Malformed::Invalid("`params` must be an object".into())),
            };
            match id {
                Some(id) => Ok(Incoming::Request { id, method, params }),
                None => Ok(Incoming::Notification { method }),
            }
        }
        Some(_) => Err(Malformed::Invalid("`method` must be a string".into())),
        None if id.is_some() && (obj.contains_key("result") || obj.contains_key("error")) => {
            Ok(Incoming::Response)
        }
        None => Err(Malformed::Invalid("no `method`".into())),
    }
}

/// A response carrying `result`, written without first being made into a `Value`.
#[derive(Debug, serde::Serialize)]
pub struct Success<'a, R> {
    jsonrpc: &'static str,
    id: &'a Value,
    result: R,
}

pub fn success<R: serde::Serialize>(id: &Value, result: R) -> Success<'_, R> {
    Success {
        jsonrpc: "2.0",
        id,
        result,
    }
}

/// An object of the values given, moved in. `json!` would copy each value that
/// is a variable (it serializes it again); a tool's result is most of a message.
pub fn object<const N: usize>(members: [(&str, Value); N]) -> Value {
    let mut map = Map::with_capacity(N);
    for (key, value) in members {
        map.insert(key.to_string(), value);
    }
    Value::Object(map)
}

pub fn error(id: &Value, code: i64, message: &str) -> Value {
    json!({ "jsonrpc": "2.0", "id": id, "error": { "code": code, "message": message } })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_success_carries_its_result_and_id_in_the_members_json_rpc_names() {
        let result = json!({ "structuredContent": { "n": 1 }, "isError": false });
        let text = serde_json::to_string(&success(&json!(7), result.clone())).unwrap();
        assert_eq!(
            text,
            r#"{"jsonrpc":"2.0","id":7,"result":{"structuredContent":{"n":1},"isError":false}}"#
        );
    }

    #[test]
    fn requests_notifications_and_responses_are_told_apart() {
        assert!(matches!(
            parse(br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#),
            Ok(Incoming::Request { .. })
        ));
        assert!(matches!(
            parse(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#),
            Ok(Incoming::Notification { .. })
        ));
        assert_eq!(
            parse(br#"{"jsonrpc":"2.0","id":"a","result":{}}"#),
            Ok(Incoming::Response)
        );
    }

    #[test]
    fn batches_null_ids_and_wrong_versions_are_malformed() {
        assert_eq!(
            parse(br#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#),
            Err(Malformed::Batch)
        );
        assert!(matches!(
            parse(br#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#),
            Err(Malformed::Invalid(_))
        ));
        assert!(matches!(
            parse(br#"{"jsonrpc":"1.0","id":1,"method":"ping"}"#),
            Err(Malformed::Invalid(_))
        ));
        assert!(matches!(parse(b"{"), Err(Malformed::Json(_))));
    }
}
