//! Settling a write whose effect is unknown (a timeout, a connection cut after the
//! request was sent, a crash between the effect and its commit). The write is never
//! repeated blindly: its contract's `effects.confirm_with` read tool is asked first.
//!
//! The confirming tool takes the write's model-visible inputs of the same names (so it
//! can derive the same business idempotency key) and answers `found`; when found, its
//! output carries the write's output fields, which become the write's result.

use serde_json::Value;

use crate::contract::{FieldSource, ToolContract};
use crate::execution::{EffectStatus, ToolCall};

/// The call that asks `confirm` about `write`: the confirming tool's inputs, taken from
/// the write's arguments, under the write's trusted context.
pub fn confirm_call(write: &ToolCall, confirm: &'static ToolContract) -> ToolCall {
    let mut arguments = serde_json::Map::new();
    for field in confirm
        .inputs
        .iter()
        .filter(|f| f.source != FieldSource::SystemInjected)
    {
        if let Some(v) = write.arguments.get(field.name) {
            arguments.insert(field.name.to_string(), v.clone());
        }
    }
    let mut context = write.context.clone();
    context.tool_call_id = format!("{}:confirm", write.tool_call_id);
    ToolCall {
        tool_call_id: context.tool_call_id.clone(),
        tool: confirm,
        arguments: Value::Object(arguments),
        context,
        attempt: 1,
        timeout: write.timeout,
    }
}

/// What the confirming tool's answer says about the write.
pub fn interpret(write: &ToolContract, answer: &Value) -> EffectStatus {
    match answer.get("found").and_then(Value::as_bool) {
        Some(true) => {
            let fields = output_fields(write);
            let result: serde_json::Map<String, Value> = answer
                .as_object()
                .into_iter()
                .flatten()
                .filter(|(k, _)| fields.iter().any(|f| f == *k))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            EffectStatus::Applied(Value::Object(result))
        }
        Some(false) => EffectStatus::NotApplied,
        None => EffectStatus::Unknown,
    }
}

/// The names of a tool's output fields, from its output schema.
fn output_fields(tool: &ToolContract) -> Vec<String> {
    serde_json::from_str::<Value>(tool.output_schema)
        .ok()
        .and_then(|s| s.get("properties").and_then(Value::as_object).cloned())
        .map(|p| p.keys().cloned().collect())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::{Backoff, BackoffKind, FieldContract, Risk};
    use serde_json::json;

    const WRITE: ToolContract = ToolContract {
        name: "request_documents",
        version: "1.0",
        title: "",
        description: "",
        required_scope: "document:request",
        risk: Risk::ReversibleWrite,
        stages: &[],
        requires: &[],
        timeout_seconds: 5,
        max_attempts: 2,
        backoff: Backoff {
            kind: BackoffKind::None,
            initial_ms: 0,
            max_ms: 0,
        },
        idempotency_key: &["case_id", "codes"],
        approval: None,
        effects: None,
        inputs: &[
            FieldContract {
                name: "case_id",
                source: FieldSource::RunBoundResource,
            },
            FieldContract {
                name: "codes",
                source: FieldSource::ModelProposed,
            },
            FieldContract {
                name: "idempotency_key",
                source: FieldSource::SystemInjected,
            },
        ],
        evidence_field: "evidence_ref",
        errors: &[],
        audit: &[],
        input_schema: "{}",
        output_schema: r#"{"type":"object","properties":{"request_id":{},"evidence_ref":{}}}"#,
    };

    const CONFIRM: ToolContract = ToolContract {
        name: "find_request",
        risk: Risk::ReadOnly,
        idempotency_key: &[],
        inputs: &[
            FieldContract {
                name: "case_id",
                source: FieldSource::RunBoundResource,
            },
            FieldContract {
                name: "codes",
                source: FieldSource::ModelProposed,
            },
        ],
        ..WRITE
    };

    #[test]
    fn the_confirming_call_takes_the_writes_arguments_it_declares() {
        let write = ToolCall {
            tool_call_id: "run:5".into(),
            tool: &WRITE,
            arguments: json!({"case_id": "C-1", "codes": ["A"], "note": "x"}),
            context: Default::default(),
            attempt: 2,
            timeout: std::time::Duration::from_secs(3),
        };
        let call = confirm_call(&write, &CONFIRM);
        assert_eq!(call.tool.name, "find_request");
        assert_eq!(call.arguments, json!({"case_id": "C-1", "codes": ["A"]}));
        assert_eq!(call.tool_call_id, "run:5:confirm");
        assert_eq!(call.attempt, 1);
    }

    #[test]
    fn a_found_effect_yields_the_writes_output_fields_only() {
        let answer =
            json!({"found": true, "request_id": "R-1", "evidence_ref": "r://1", "extra": 1});
        assert_eq!(
            interpret(&WRITE, &answer),
            EffectStatus::Applied(json!({"request_id": "R-1", "evidence_ref": "r://1"}))
        );
    }

    #[test]
    fn an_absent_effect_is_not_applied_and_no_answer_stays_unknown() {
        assert_eq!(
            interpret(&WRITE, &json!({"found": false, "evidence_ref": "c://1"})),
            EffectStatus::NotApplied
        );
        assert_eq!(
            interpret(&WRITE, &json!({"evidence_ref": "c://1"})),
            EffectStatus::Unknown
        );
    }
}
