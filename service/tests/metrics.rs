//! `/metrics` of a real `caseops serve` after a C-102 run: histograms of run, tool,
//! planner and commit latency, counters of decisions — and an exposition that
//! `promtool check metrics` accepts (run when promtool is installed; CI installs
//! it and sets `CASEOPS_REQUIRE_PROMTOOL=1` so that it cannot be skipped).

mod db_support;
mod serve_support;

use std::io::Write;
use std::process::{Command, Stdio};

use serde_json::json;

/// The value of the sample `name{labels}` (labels exactly as rendered).
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

async fn run_c102_and_scrape(database: &str) -> String {
    let server = serve_support::serve(database, &[], &[], false);
    let run = server.start_c102("metrics-0001", &[]).await;
    assert_eq!(run["status"], "completed", "{run}");
    let response = reqwest::Client::new()
        .get(format!("{}/metrics", server.api))
        .send()
        .await
        .unwrap();
    assert_eq!(
        response.headers()["content-type"],
        "text/plain; version=0.0.4"
    );
    response.text().await.unwrap()
}

fn assert_c102_measured(text: &str, backend: &str) {
    for tool in [
        "caseops_get_case_snapshot",
        "caseops_get_policy_requirements",
        "caseops_list_unclassified_documents",
        "caseops_resolve_document_alias",
    ] {
        assert_eq!(
            sample(
                text,
                &format!(
                    "caseops_tool_call_duration_seconds_count{{tool=\"{tool}\",outcome=\"ok\"}}"
                )
            ),
            Some(1.0),
            "{tool}:\n{text}"
        );
        assert_eq!(
            sample(
                text,
                &format!(
                    "caseops_authorization_decisions_total{{tool=\"{tool}\",decision=\"allow\",reason=\"permitted\"}}"
                )
            ),
            Some(1.0),
            "{text}"
        );
    }
    assert!(text.contains("# TYPE caseops_tool_call_duration_seconds histogram"));
    assert!(text.contains(
        "caseops_tool_call_duration_seconds_bucket{tool=\"caseops_get_case_snapshot\",outcome=\"ok\",le=\"+Inf\"} 1"
    ));
    assert_eq!(
        sample(
            text,
            "caseops_runs_finished_total{status=\"completed\",stop_reason=\"none\"}"
        ),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        sample(
            text,
            "caseops_run_duration_seconds_count{status=\"completed\"}"
        ),
        Some(1.0)
    );
    // Five planner rounds: four tool calls and the final answer.
    assert_eq!(
        sample(
            text,
            "caseops_planner_duration_seconds_count{outcome=\"ok\"}"
        ),
        Some(5.0),
        "{text}"
    );
    let commits = sample(
        text,
        &format!("caseops_commit_duration_seconds_count{{backend=\"{backend}\"}}"),
    );
    assert!(commits.is_some_and(|n| n >= 5.0), "{text}");
    assert_eq!(sample(text, "caseops_runs_in_flight"), Some(0.0), "{text}");
    assert_eq!(sample(text, "caseops_workers_busy"), Some(0.0), "{text}");
    assert_eq!(sample(text, "caseops_runs_started_total"), Some(1.0));
}

/// `promtool check metrics` on the exposition; `None` when promtool is absent
/// and not required.
fn promtool_check(text: &str) -> Option<String> {
    let required = std::env::var("CASEOPS_REQUIRE_PROMTOOL").is_ok_and(|v| v == "1");
    let child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) if !required => {
            db_support::note_skipped(
                "`promtool check metrics`",
                &format!("promtool does not run ({e}); install Debian's `prometheus` package"),
            );
            return None;
        }
        Err(e) => panic!("CASEOPS_REQUIRE_PROMTOOL=1 but promtool does not run: {e}"),
    };
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "promtool refused the exposition:\n{said}\n{text}"
    );
    Some(said)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_c102_run_on_sqlite_shows_in_latency_histograms_and_decision_counters() {
    let dbs = db_support::fresh_databases("metrics_sqlite").await;
    let text = run_c102_and_scrape(dbs.sqlite()).await;
    assert_c102_measured(&text, "sqlite");
    if let Some(said) = promtool_check(&text) {
        // promtool prints nothing for a clean exposition, lint findings otherwise.
        assert!(said.trim().is_empty(), "promtool lint findings:\n{said}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_c102_run_on_postgresql_measures_commits_under_its_backend() {
    let dbs = db_support::fresh_databases("metrics_pg").await;
    let Some(pg) = dbs.postgres() else {
        return;
    };
    let text = run_c102_and_scrape(pg).await;
    assert_c102_measured(&text, "postgresql");
}

/// A stand-in for the Responses API whose model always asks for another case.
async fn model_asking_for_another_case() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = axum::Router::new().route(
        "/v1/responses",
        axum::routing::post(|| async {
            let arguments = json!({"case_id": "C-101"}).to_string();
            axum::Json(json!({"output": [{"type": "function_call", "call_id": "c",
                "name": "caseops_get_case_snapshot", "arguments": arguments}]}))
        }),
    );
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}/v1")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denied_call_is_counted_by_tool_decision_and_reason_and_ends_the_run_with_it() {
    let dbs = db_support::fresh_databases("metrics_deny").await;
    let model = model_asking_for_another_case().await;
    let server = serve_support::serve(
        dbs.sqlite(),
        &["--planner", "openai", "--openai-base-url", &model],
        &[("CASEOPS_OPENAI_API_KEY", "sk-test-metrics")],
        false,
    );
    let run = server.start_c102("metrics-deny-0001", &[]).await;
    assert_eq!(run["status"], "needs_human", "{run}");
    assert_eq!(run["stop_reason"], "TOOL_RESOURCE_MISMATCH", "{run}");
    let text = reqwest::Client::new()
        .get(format!("{}/metrics", server.api))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(
        sample(
            &text,
            "caseops_authorization_decisions_total{tool=\"caseops_get_case_snapshot\",decision=\"deny\",reason=\"TOOL_RESOURCE_MISMATCH\"}"
        ),
        Some(1.0),
        "{text}"
    );
    assert!(!text.contains("decision=\"allow\""), "{text}");
    assert_eq!(
        sample(
            &text,
            "caseops_runs_finished_total{status=\"needs_human\",stop_reason=\"TOOL_RESOURCE_MISMATCH\"}"
        ),
        Some(1.0),
        "{text}"
    );
    // The call never ran: no tool latency was recorded for it.
    assert!(
        !text.contains("caseops_tool_call_duration_seconds_count"),
        "{text}"
    );
    assert_eq!(
        sample(
            &text,
            "caseops_planner_duration_seconds_count{outcome=\"ok\"}"
        ),
        Some(1.0),
        "{text}"
    );
}
