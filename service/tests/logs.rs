//! What `caseops serve` logs, read from the real process's standard error: one
//! line per request on both listeners, run state changes at debug, the run's end —
//! and never a key, a token or a signing key.

mod db_support;
mod serve_support;

use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};
use serve_support::Served;

const API_KEY: &str = "log-test-key-0123456789abcdef";
const SIGNING_KEY: &str = "log-test-signing-key-0123456789abcdefghij";

fn serve(database: &str, extra: &[&str]) -> Served {
    let keys = format!("{API_KEY}=tenant-demo:user:alice");
    let mut args = vec!["--signing-key", SIGNING_KEY];
    args.extend_from_slice(extra);
    serve_support::serve(database, &args, &[("CASEOPS_API_KEYS", &keys)], true)
}

/// Lines logged so far once `done` holds for them, or all of them after 5 s.
async fn logged_until(server: &Served, done: impl Fn(&[String]) -> bool) -> Vec<String> {
    for _ in 0..100 {
        let lines = server.stderr.lock().unwrap().clone();
        if done(&lines) {
            return lines;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    server.stderr.lock().unwrap().clone()
}

fn events(lines: &[String]) -> Vec<Value> {
    lines
        .iter()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_logs_hold_one_line_per_request_and_every_state_change_without_secrets() {
    let dbs = db_support::fresh_databases("logs_json").await;
    let server = serve(
        dbs.sqlite(),
        &["--log-format", "json", "--log-level", "debug"],
    );
    let http = reqwest::Client::new();
    let run = server
        .start_c102_as(
            API_KEY,
            "logs-json-0001",
            &[("x-request-id", "req-logs-0001")],
        )
        .await;
    assert_eq!(run["status"], "completed", "{run}");
    let run_id = run["run_id"].as_str().unwrap();
    let unauthorized = http
        .get(format!("{}/v1/agent-runs/{run_id}", server.api))
        .header("x-api-key", "not-a-key-of-anyone-here")
        .send()
        .await
        .unwrap();
    assert_eq!(unauthorized.status(), 401);

    let lines = logged_until(&server, |l| {
        l.iter()
            .any(|l| l.contains("\"status\":401") && l.contains("\"listener\":\"api\""))
    })
    .await;
    let all = events(&lines);
    let requests: Vec<&Value> = all.iter().filter(|e| e["message"] == "request").collect();

    let start = requests
        .iter()
        .find(|e| e["method"] == "POST" && e["listener"] == "api")
        .unwrap_or_else(|| panic!("no request line for the POST: {lines:#?}"));
    assert_eq!(start["listener"], "api");
    assert_eq!(start["route"], "/v1/cases/{case_id}/agent-runs");
    assert_eq!(start["status"], 201);
    assert_eq!(start["tenant"], "tenant-demo");
    assert_eq!(start["request_id"], "req-logs-0001");
    assert!(start["latency_ms"].as_f64().is_some_and(|ms| ms > 0.0));
    assert_eq!(start["level"], "INFO");

    let refused = requests.iter().find(|e| e["status"] == 401).unwrap();
    assert_eq!(refused["route"], "/v1/agent-runs/{run_id}");
    assert!(refused.get("tenant").is_none(), "{refused}");

    // The four tool calls reached the tool server as the run's tenant.
    let mcp: Vec<&&Value> = requests
        .iter()
        .filter(|e| e["listener"] == "mcp" && e["route"] == "/mcp" && e["status"] == 200)
        .filter(|e| e["tenant"] == "tenant-demo")
        .collect();
    assert!(mcp.len() >= 4, "{lines:#?}");

    let changes: Vec<&Value> = all
        .iter()
        .filter(|e| e["message"] == "run state changed" && e["run_id"] == run_id)
        .collect();
    let checkpoints: Value = http
        .get(format!("{}/v1/agent-runs/{run_id}/checkpoints", server.api))
        .header("x-api-key", API_KEY)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        changes.len(),
        checkpoints["checkpoints"].as_array().unwrap().len(),
        "one debug line per checkpoint"
    );
    assert!(changes.iter().all(|e| e["level"] == "DEBUG"));
    assert!(all.iter().any(|e| e["message"] == "run finished"
        && e["run_id"] == run_id
        && e["status"] == "completed"));

    let text = lines.join("\n");
    for secret in [
        API_KEY,
        "not-a-key-of-anyone-here",
        SIGNING_KEY,
        "Bearer",
        "eyJ",
    ] {
        assert!(!text.contains(secret), "`{secret}` was logged:\n{text}");
    }
}

/// A process that serves both halves hands its runs' tool calls to its own tool
/// server without a socket unless told `--mcp-transport http`, and says which at
/// start. Either way each call passes through the server's request handling: one
/// request line per call, as the run's tenant.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_call_their_tools_in_process_by_default_or_over_http_and_each_call_is_logged() {
    let dbs = db_support::fresh_databases("logs_transport").await;
    for (extra, said) in [
        (
            &[][..],
            "caseops runs call their tools in process".to_string(),
        ),
        (
            &["--mcp-transport", "http"][..],
            "caseops runs call their tools at http://".to_string(),
        ),
    ] {
        let mut args = vec!["--log-format", "json"];
        args.extend_from_slice(extra);
        let server = serve(dbs.sqlite(), &args);
        let key = format!("logs-transport-{}", extra.len());
        let run = server.start_c102_as(API_KEY, &key, &[]).await;
        assert_eq!(run["status"], "completed", "{run}");
        assert_eq!(run["step_count"], 4, "{run}");
        let said_it = || {
            server
                .stdout
                .lock()
                .unwrap()
                .iter()
                .any(|l| l.starts_with(&said))
        };
        for _ in 0..100 {
            if said_it() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(said_it(), "{extra:?}: {:#?}", server.stdout.lock().unwrap());
        let calls = |lines: &[String]| {
            events(lines)
                .into_iter()
                .filter(|e| e["message"] == "request" && e["listener"] == "mcp")
                .filter(|e| e["route"] == "/mcp" && e["status"] == 200)
                .filter(|e| e["tenant"] == "tenant-demo")
                .count()
        };
        let lines = logged_until(&server, |l| calls(l) >= 4).await;
        assert!(calls(&lines) >= 4, "{extra:?}: {lines:#?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn text_logs_at_info_leave_out_state_changes() {
    let dbs = db_support::fresh_databases("logs_text").await;
    let server = serve(dbs.sqlite(), &[]);
    let status = reqwest::Client::new()
        .post(format!("{}/v1/cases/C-102/agent-runs", server.api))
        .header("x-api-key", API_KEY)
        .header("idempotency-key", "logs-text-0001")
        .json(&json!({"goal": "Check C-102."}))
        .send()
        .await
        .unwrap()
        .status();
    assert_eq!(status, 201);
    let lines = logged_until(&server, |l| {
        l.iter()
            .any(|l| l.contains("request") && l.contains("status=201"))
    })
    .await;
    let text = lines.join("\n");
    assert!(
        lines.iter().any(|l| l.contains(" INFO ")
            && l.contains("method=POST")
            && l.contains("route=\"/v1/cases/{case_id}/agent-runs\"")
            && l.contains("tenant=\"tenant-demo\"")),
        "{text}"
    );
    assert!(!text.contains("run state changed"), "{text}");
    assert!(text.contains("run finished"), "{text}");
}

#[test]
fn an_unknown_log_level_is_refused_with_its_flag_named() {
    let out = Command::new(env!("CARGO_BIN_EXE_caseops"))
        .args(["serve", "--database", "sqlite:///nonexistent-dir/x.db"])
        .args(["--log-level", "loud"])
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("--log-level `loud`"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_id_over_200_characters_is_refused_before_any_run_and_one_of_200_is_taken() {
    let dbs = db_support::fresh_databases("logs_request_id").await;
    let server = serve(dbs.sqlite(), &[]);
    let http = reqwest::Client::new();
    let start = |request_id: String| {
        http.post(format!("{}/v1/cases/C-102/agent-runs", server.api))
            .header("x-api-key", API_KEY)
            .header("idempotency-key", "logs-request-id-0001")
            .header("x-request-id", request_id)
            .json(&json!({"goal": "Check C-102."}))
            .send()
    };
    let refused = start("r".repeat(201)).await.unwrap();
    assert_eq!(refused.status(), 422);
    let problem: Value = refused.json().await.unwrap();
    assert!(
        problem["detail"]
            .as_str()
            .is_some_and(|d| d.contains("X-Request-Id") && d.contains("200")),
        "{problem}"
    );
    // The refusal created nothing: the same key starts a new run.
    let taken = start("r".repeat(200)).await.unwrap();
    assert_eq!(taken.status(), 201);
}
