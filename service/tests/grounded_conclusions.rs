//! A conclusion rests only on what the run observed, through the real process:
//! `caseops serve --planner openai` against a local stand-in for the Responses API
//! that plays C-102's four tool calls and then answers as each test scripts it.

mod db_support;
mod serve_support;

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::State;
use axum::routing::post;
use caseops_service::findings::Findings;
use serde_json::{Value, json};

/// What the stand-in model answers after the four calls: the run's correct
/// conclusion, one citing a reference no tool returned, or one claiming an outcome
/// the codes contradict.
#[derive(Debug, Clone, Copy)]
enum Answer {
    Correct,
    Fabricated,
    WrongOutcome,
}

#[derive(Clone)]
struct Model {
    answers: Arc<Mutex<VecDeque<Answer>>>,
    /// Every request body the planner sent.
    seen: Arc<Mutex<Vec<Value>>>,
}

fn function_call(name: &str, arguments: Value) -> Value {
    json!({"output": [{"type": "function_call", "call_id": "c", "name": name, "arguments": arguments.to_string()}]})
}

fn text(answer: Value) -> Value {
    json!({"output": [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": answer.to_string()}]}]})
}

async fn respond(State(model): State<Model>, body: axum::Json<Value>) -> axum::Json<Value> {
    model.seen.lock().unwrap().push(body.0.clone());
    let view: Value =
        serde_json::from_str(body.0["input"][0]["content"].as_str().unwrap()).unwrap();
    let observations = view["observations"].as_array().cloned().unwrap_or_default();
    let case = json!({"case_id": "C-102"});
    let next = match observations.len() {
        0 => function_call("caseops_get_case_snapshot", case),
        1 => function_call("caseops_get_policy_requirements", case),
        2 => function_call("caseops_list_unclassified_documents", case),
        3 => function_call(
            "caseops_resolve_document_alias",
            json!({"case_id": "C-102", "document_id": "DOC-C102-003"}),
        ),
        _ => {
            let found = Findings::derive(
                observations
                    .iter()
                    .map(|o| (o["tool"].as_str().unwrap(), &o["result"])),
            )
            .unwrap();
            let mut answer = json!({
                "outcome": found.outcome,
                "summary": "C-102 checked against its policy.",
                "received_document_codes": found.received,
                "resolved_document_codes": found.resolved,
                "missing_document_codes": found.missing,
                "evidence_refs": found.evidence,
            });
            match model.answers.lock().unwrap().pop_front().unwrap() {
                Answer::Correct => {}
                Answer::Fabricated => answer["evidence_refs"]
                    .as_array_mut()
                    .unwrap()
                    .push(json!("evidence://C-102/DOC-FABRICATED@1")),
                Answer::WrongOutcome => answer["outcome"] = json!("DOCUMENTS_COMPLETE"),
            }
            text(answer)
        }
    };
    axum::Json(next)
}

async fn model(answers: &[Answer]) -> (String, Model) {
    let model = Model {
        answers: Arc::new(Mutex::new(answers.iter().copied().collect())),
        seen: Arc::default(),
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = Router::new()
        .route("/v1/responses", post(respond))
        .with_state(model.clone());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}/v1"), model)
}

fn serve(database: &str, model_url: &str) -> serve_support::Served {
    serve_support::serve(
        database,
        &["--planner", "openai", "--openai-base-url", model_url],
        &[("CASEOPS_OPENAI_API_KEY", "sk-test-grounding")],
        false,
    )
}

/// Starts C-102 with the stand-in model answering `answers` and returns the run.
async fn run_c102(answers: &[Answer], name: &str) -> (Value, Model) {
    let dbs = db_support::fresh_databases(name).await;
    let (url, model) = model(answers).await;
    let server = serve(dbs.sqlite(), &url);
    let http = reqwest::Client::new();
    let run: Value = http
        .post(format!("{}/v1/cases/C-102/agent-runs", server.api))
        .header("x-api-key", "dev-key-tenant-demo")
        .header("idempotency-key", format!("{name}-0001"))
        .json(&json!({"goal": "Check whether claim case C-102 holds every document its policy requires."}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    // What the run API reads back, not only what the start request answered.
    let stored: Value = http
        .get(format!(
            "{}/v1/agent-runs/{}",
            server.api,
            run["run_id"].as_str().unwrap()
        ))
        .header("x-api-key", "dev-key-tenant-demo")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(stored["status"], run["status"], "{stored}");
    (stored, model)
}

fn corrections_sent(model: &Model) -> Vec<String> {
    model
        .seen
        .lock()
        .unwrap()
        .iter()
        .filter_map(|body| {
            let view: Value = serde_json::from_str(body["input"][0]["content"].as_str()?).ok()?;
            Some(
                view["corrections"]
                    .as_array()?
                    .iter()
                    .filter_map(|c| c.as_str().map(str::to_string))
                    .collect::<Vec<_>>(),
            )
        })
        .flatten()
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_citing_a_fabricated_reference_twice_ends_needs_human_never_completed() {
    let (run, model) = run_c102(&[Answer::Fabricated, Answer::Fabricated], "fabricated").await;
    assert_eq!(run["status"], "needs_human", "{run}");
    assert_eq!(run["stop_reason"], "EVIDENCE_NOT_OBSERVED", "{run}");
    assert!(
        run["result"].is_null() && run["provenance"].is_null(),
        "{run}"
    );
    let corrections = corrections_sent(&model);
    assert!(
        corrections
            .iter()
            .any(|c| c.contains("evidence://C-102/DOC-FABRICATED@1")),
        "the model was told which reference is not grounded: {corrections:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_claiming_an_outcome_its_codes_contradict_ends_needs_human() {
    let (run, _) = run_c102(
        &[Answer::WrongOutcome, Answer::WrongOutcome],
        "wrong_outcome",
    )
    .await;
    assert_eq!(run["status"], "needs_human", "{run}");
    assert_eq!(
        run["stop_reason"], "CONCLUSION_CONTRADICTS_EVIDENCE",
        "{run}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_that_corrects_itself_after_one_rejection_completes_with_provenance() {
    let (run, model) = run_c102(&[Answer::Fabricated, Answer::Correct], "corrected").await;
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(
        run["result"]["outcome"], "DOCUMENTS_COMPLETE_AFTER_NORMALIZATION",
        "{run}"
    );
    assert_eq!(corrections_sent(&model).len(), 1);
    let cited = run["result"]["evidence_refs"].as_array().unwrap();
    assert!(!cited.is_empty());
    for reference in cited {
        let from = &run["provenance"][reference.as_str().unwrap()];
        assert!(
            from["tool_call_id"]
                .as_str()
                .is_some_and(|id| id.starts_with(run["run_id"].as_str().unwrap())),
            "{run}"
        );
        assert!(
            from["tool"]
                .as_str()
                .is_some_and(|t| t.starts_with("caseops_")),
            "{run}"
        );
        assert_eq!(from["attempt"], 1, "{run}");
        assert_eq!(from["bundle_digest"], run["bundle_digest"], "{run}");
    }
}
