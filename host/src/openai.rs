//! `OpenAIResponsesPlanner`: proposals from a model through the OpenAI Responses API.
//! It sends the compiled strict tool definitions of the visible tools, one proposal
//! per round (`parallel_tool_calls: false`), nothing stored (`store: false`), and the
//! final-answer schema as the structured text format. Whatever comes back is either
//! exactly one function call, or a final answer as JSON text; anything else is a
//! planner error.

use std::time::Duration;

use caseops_runtime::context::PlannerView;
use caseops_runtime::{ContractBundle, Planner, PlannerError};
use serde_json::{Value, json};

/// Where and how to reach the model. The key is never printed (see `Debug`).
#[derive(Clone)]
pub struct OpenAiConfig {
    pub base_url: String,
    pub model: String,
    pub api_key: String,
    /// `low`, `medium` or `high`; left out of the request when `None`.
    pub reasoning_effort: Option<String>,
    pub timeout: Duration,
    /// The system instructions; `None` gives a generic text naming the bundle's
    /// resource type.
    pub instructions: Option<String>,
}

impl std::fmt::Debug for OpenAiConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenAiConfig")
            .field("base_url", &self.base_url)
            .field("model", &self.model)
            .field("api_key", &"***")
            .field("reasoning_effort", &self.reasoning_effort)
            .field("timeout", &self.timeout)
            .field("instructions", &self.instructions)
            .finish()
    }
}

#[derive(Debug, Clone)]
pub struct OpenAiResponsesPlanner {
    config: OpenAiConfig,
    http: reqwest::Client,
    tools: Vec<Value>,
    answer_schema: Value,
    instructions: String,
}

fn default_instructions(resource_type: &str) -> String {
    format!(
        "You work on one {resource_type} towards the goal you are given. Call one tool at a time to gather evidence. \
When the evidence is sufficient, answer with the final JSON object only. Never invent codes or evidence references."
    )
}

/// The strict-mode subset of a JSON Schema (no `$schema`, `$id`, `title`, length bounds).
fn strict_schema(schema: &Value) -> Value {
    match schema {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(k, _)| {
                    !matches!(
                        k.as_str(),
                        "$schema" | "$id" | "title" | "minLength" | "maxLength"
                    )
                })
                .map(|(k, v)| (k.clone(), strict_schema(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(strict_schema).collect()),
        other => other.clone(),
    }
}

impl OpenAiResponsesPlanner {
    /// A planner for bundle `B`: its strict tool definitions and final-answer schema.
    pub fn new<B: ContractBundle>(config: OpenAiConfig) -> Result<Self, PlannerError> {
        crate::install_tls_provider();
        let http = reqwest::Client::builder()
            .timeout(config.timeout)
            .build()
            .map_err(|e| PlannerError(e.to_string()))?;
        let tools: Value =
            serde_json::from_str(B::OPENAI_TOOLS).map_err(|e| PlannerError(e.to_string()))?;
        let answer: Value = serde_json::from_str(B::FINAL_ANSWER_SCHEMA)
            .map_err(|e| PlannerError(e.to_string()))?;
        let instructions = config
            .instructions
            .clone()
            .unwrap_or_else(|| default_instructions(B::RESOURCE_TYPE));
        Ok(Self {
            config,
            http,
            instructions,
            tools: tools.as_array().cloned().unwrap_or_default(),
            answer_schema: strict_schema(&answer),
        })
    }

    /// The request body for one round (public for inspection in tests).
    pub fn request(&self, view: &PlannerView) -> Value {
        let visible: Vec<&Value> = self
            .tools
            .iter()
            .filter(|t| view.tools.iter().any(|v| t["name"] == v.name.as_str()))
            .collect();
        let mut body = json!({
            "model": self.config.model,
            "instructions": self.instructions,
            "input": [ { "role": "user", "content": serde_json::to_string(view).unwrap_or_default() } ],
            "tools": visible,
            "tool_choice": "auto",
            "parallel_tool_calls": false,
            "store": false,
            "text": { "format": {
                "type": "json_schema",
                "name": "agent_result",
                "schema": self.answer_schema,
                "strict": true,
            } },
        });
        if let Some(effort) = &self.config.reasoning_effort {
            body["reasoning"] = json!({ "effort": effort });
        }
        body
    }

    /// Turns a Responses API result into exactly one decision.
    pub fn parse(response: &Value) -> Result<Value, PlannerError> {
        let err = |m: &str| Err(PlannerError(m.to_string()));
        let Some(output) = response["output"].as_array() else {
            return err("the response has no `output`");
        };
        let usage = json!({ "tokens": response["usage"]["total_tokens"].as_u64().unwrap_or(0) });
        let calls: Vec<&Value> = output
            .iter()
            .filter(|o| o["type"] == "function_call")
            .collect();
        match calls.as_slice() {
            [call] => {
                let Some(name) = call["name"].as_str() else {
                    return err("a function call without a name");
                };
                let arguments: Value = match call["arguments"].as_str().map(serde_json::from_str) {
                    Some(Ok(v @ Value::Object(_))) => v,
                    _ => return err("the function call's arguments are not a JSON object"),
                };
                Ok(
                    json!({ "decision": "tool_call", "tool": name, "arguments": arguments, "usage": usage }),
                )
            }
            [] => {
                let text: String = output
                    .iter()
                    .filter(|o| o["type"] == "message")
                    .flat_map(|o| o["content"].as_array().cloned().unwrap_or_default())
                    .filter(|c| c["type"] == "output_text")
                    .filter_map(|c| c["text"].as_str().map(str::to_string))
                    .collect();
                if text.trim().is_empty() {
                    return err("the response holds neither a function call nor an answer");
                }
                match serde_json::from_str::<Value>(&text) {
                    Ok(answer @ Value::Object(_)) => {
                        Ok(json!({ "decision": "final", "answer": answer, "usage": usage }))
                    }
                    _ => err("the final answer is not a JSON object"),
                }
            }
            _ => err("more than one function call in one round"),
        }
    }
}

impl Planner for OpenAiResponsesPlanner {
    fn kind(&self) -> &'static str {
        "openai-responses"
    }

    fn model(&self) -> Option<String> {
        Some(self.config.model.clone())
    }

    async fn propose(&self, view: &PlannerView) -> Result<Value, PlannerError> {
        let url = format!("{}/responses", self.config.base_url.trim_end_matches('/'));
        let response = self
            .http
            .post(url)
            .bearer_auth(&self.config.api_key)
            .json(&self.request(view))
            .send()
            .await
            .map_err(|e| {
                PlannerError(if e.is_timeout() {
                    "the model did not answer in time".into()
                } else {
                    format!("the model API is unreachable: {}", e.without_url())
                })
            })?;
        let status = response.status();
        if !status.is_success() {
            return Err(PlannerError(format!(
                "the model API answered HTTP {}",
                status.as_u16()
            )));
        }
        let body: Value = response
            .json()
            .await
            .map_err(|_| PlannerError("the model API's answer is not JSON".into()))?;
        Self::parse(&body)
    }
}
