//! The OpenAI Responses planner against a local mock of the Responses API.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use caseops_host::openai::{OpenAiConfig, OpenAiResponsesPlanner};
use caseops_runtime::Planner;
use caseops_runtime::context::{PlannerView, ToolView};
use caseops_runtime::goal_assembly::Goal;
use serde_json::{Value, json};

#[derive(Clone)]
struct Mock {
    reply: (u16, Value),
    delay: Duration,
    seen: Arc<Mutex<Vec<(HeaderMap, Value)>>>,
}

async fn handle(
    State(m): State<Mock>,
    headers: HeaderMap,
    body: axum::Json<Value>,
) -> (StatusCode, axum::Json<Value>) {
    m.seen.lock().unwrap().push((headers, body.0));
    tokio::time::sleep(m.delay).await;
    (
        StatusCode::from_u16(m.reply.0).unwrap(),
        axum::Json(m.reply.1.clone()),
    )
}

async fn mock(
    status: u16,
    body: Value,
    delay: Duration,
) -> (String, Arc<Mutex<Vec<(HeaderMap, Value)>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let state = Mock {
        reply: (status, body),
        delay,
        seen: seen.clone(),
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = Router::new()
        .route("/v1/responses", post(handle))
        .with_state(state);
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}/v1"), seen)
}

fn planner(base: &str) -> OpenAiResponsesPlanner {
    OpenAiResponsesPlanner::new::<caseops_generated::Bundle>(OpenAiConfig {
        base_url: base.into(),
        model: "gpt-test".into(),
        api_key: "sk-test-SECRET-KEY".into(),
        reasoning_effort: Some("low".into()),
        timeout: Duration::from_millis(500),
        instructions: Some(caseops_service::OPENAI_INSTRUCTIONS.into()),
    })
    .unwrap()
}

fn view() -> PlannerView {
    PlannerView {
        goal: Goal {
            text: "check C-102".into(),
            resource_type: "Case".into(),
            resource_id: "C-102".into(),
            stage: "investigating".into(),
            answer_schema_version: "caseops.agent-result.v1".into(),
        },
        step: 0,
        steps_left: 8,
        tools: vec![ToolView {
            name: "caseops_get_case_snapshot".into(),
            title: "t".into(),
            description: "d".into(),
            input_schema: json!({}).into(),
        }],
        observations: vec![],
        final_answer_schema: json!({}).into(),
        corrections: vec![],
    }
}

#[tokio::test]
async fn a_function_call_becomes_one_tool_proposal_and_the_request_is_strict() {
    let reply = json!({"output": [
        {"type": "reasoning", "summary": []},
        {"type": "function_call", "call_id": "c1", "name": "caseops_get_case_snapshot", "arguments": "{\"case_id\":\"C-102\"}"}
    ], "usage": {"total_tokens": 321}});
    let (base, seen) = mock(200, reply, Duration::ZERO).await;
    let decision = planner(&base).propose(&view()).await.unwrap();
    assert_eq!(
        decision,
        json!({"decision": "tool_call", "tool": "caseops_get_case_snapshot", "arguments": {"case_id": "C-102"}, "usage": {"tokens": 321}})
    );
    let (headers, body) = seen.lock().unwrap()[0].clone();
    assert_eq!(headers["authorization"], "Bearer sk-test-SECRET-KEY");
    assert_eq!(body["parallel_tool_calls"], false);
    assert_eq!(body["store"], false);
    assert_eq!(body["model"], "gpt-test");
    assert_eq!(body["reasoning"]["effort"], "low");
    assert_eq!(body["text"]["format"]["type"], "json_schema");
    assert_eq!(body["text"]["format"]["strict"], true);
    let tools = body["tools"].as_array().unwrap();
    assert_eq!(tools.len(), 1, "only the visible tools are offered");
    assert_eq!(tools[0]["strict"], true);
    assert_eq!(tools[0]["parameters"]["additionalProperties"], false);
    assert!(
        !body.to_string().contains("tenant"),
        "the view carries no identity"
    );
}

#[tokio::test]
async fn output_text_becomes_the_final_answer() {
    let answer = json!({"outcome": "DOCUMENTS_COMPLETE", "summary": "ok", "received_document_codes": [], "resolved_document_codes": [], "missing_document_codes": [], "evidence_refs": []});
    let reply = json!({"output": [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": answer.to_string()}]}]});
    let (base, _) = mock(200, reply, Duration::ZERO).await;
    let decision = planner(&base).propose(&view()).await.unwrap();
    assert_eq!(decision["decision"], "final");
    assert_eq!(decision["answer"], answer);
}

#[tokio::test]
async fn a_malformed_function_call_is_a_planner_error() {
    for arguments in ["{not json", "[1,2]"] {
        let reply = json!({"output": [{"type": "function_call", "name": "caseops_get_case_snapshot", "arguments": arguments}]});
        let (base, _) = mock(200, reply, Duration::ZERO).await;
        let err = planner(&base).propose(&view()).await.unwrap_err();
        assert!(err.to_string().contains("not a JSON object"), "{err}");
    }
    let two = json!({"output": [
        {"type": "function_call", "name": "a", "arguments": "{}"}, {"type": "function_call", "name": "b", "arguments": "{}"}]});
    let (base, _) = mock(200, two, Duration::ZERO).await;
    assert!(
        planner(&base)
            .propose(&view())
            .await
            .unwrap_err()
            .to_string()
            .contains("more than one")
    );
}

#[tokio::test]
async fn malformed_final_text_is_a_planner_error() {
    let reply = json!({"output": [{"type": "message", "content": [{"type": "output_text", "text": "All documents are present."}]}]});
    let (base, _) = mock(200, reply, Duration::ZERO).await;
    let err = planner(&base).propose(&view()).await.unwrap_err();
    assert!(err.to_string().contains("not a JSON object"), "{err}");
}

#[tokio::test]
async fn http_500_is_a_planner_error_that_does_not_leak_the_key() {
    let (base, _) = mock(500, json!({"error": "boom"}), Duration::ZERO).await;
    let err = planner(&base)
        .propose(&view())
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("HTTP 500"), "{err}");
    assert!(!err.contains("SECRET"));
    assert!(
        !format!("{:?}", planner(&base)).contains("SECRET"),
        "Debug redacts the key"
    );
}

#[tokio::test]
async fn a_model_that_does_not_answer_in_time_is_a_planner_error() {
    let (base, _) = mock(200, json!({"output": []}), Duration::from_secs(3)).await;
    let started = std::time::Instant::now();
    let err = planner(&base).propose(&view()).await.unwrap_err();
    assert!(err.to_string().contains("in time"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(2));
}
