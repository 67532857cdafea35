//! The C-102 acceptance run (its figures are in `docs/performance.md` and the README) against `caseops serve` started as a real
//! process on real ports, on SQLite and (when available, always in CI) PostgreSQL.

mod db_support;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use db_support::fresh_databases;
use serde_json::{Value, json};

struct Serve {
    child: Child,
    api: String,
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn serve(database: &str) -> Serve {
    serve_with(database, &[])
}

fn serve_with(database: &str, extra: &[&str]) -> Serve {
    let mut child = Command::new(env!("CARGO_BIN_EXE_caseops"))
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--mcp-listen",
            "127.0.0.1:0",
            "--database",
            database,
        ])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("caseops starts");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let api = loop {
        let line = lines.next().expect("caseops prints its addresses").unwrap();
        if let Some(rest) = line.strip_prefix("caseops api on ") {
            break rest.split_whitespace().next().unwrap().to_string();
        }
    };
    std::thread::spawn(move || for _ in lines {});
    Serve { child, api }
}

async fn post(api: &str, case: &str, key: Option<&str>, idem: &str, body: Value) -> (u16, Value) {
    let mut req = reqwest::Client::new()
        .post(format!("{api}/v1/cases/{case}/agent-runs"))
        .header("idempotency-key", idem)
        .json(&body);
    if let Some(k) = key {
        req = req.header("x-api-key", k);
    }
    let r = req.send().await.unwrap();
    let status = r.status().as_u16();
    let text = r.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

async fn get(api: &str, path: &str) -> Value {
    reqwest::Client::new()
        .get(format!("{api}{path}"))
        .header("x-api-key", "dev-key-tenant-demo")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

const DEMO: Option<&str> = Some("dev-key-tenant-demo");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_c102_acceptance_run_meets_every_figure_on_every_backend() {
    for (backend, url) in fresh_databases("accept").await {
        let s = serve(&url);
        let goal = json!({"goal": "Check whether claim case C-102 holds every required document."});
        let (status, run) = post(&s.api, "C-102", DEMO, "accept-key-0001", goal.clone()).await;
        assert_eq!(status, 201, "{backend}: {run}");
        assert_eq!(run["status"], "completed", "{backend}");
        assert_eq!(run["step_count"], 4);
        let r = &run["result"];
        assert_eq!(r["outcome"], "DOCUMENTS_COMPLETE_AFTER_NORMALIZATION");
        assert_eq!(
            r["received_document_codes"],
            json!(["IDENTITY_DOCUMENT", "LOSS_STATEMENT"])
        );
        assert_eq!(
            r["resolved_document_codes"],
            json!(["ACCIDENT_CERTIFICATE"])
        );
        assert_eq!(r["missing_document_codes"], json!([]));
        assert_eq!(
            r["evidence_refs"],
            json!([
                "case://C-102@7",
                "evidence://C-102/DOC-C102-003@1",
                "policy://motor-claim-standard@2026.1"
            ])
        );
        let run_id = run["run_id"].as_str().unwrap().to_string();

        let ledger = get(&s.api, &format!("/v1/agent-runs/{run_id}/tool-executions")).await;
        let rows = ledger["tool_executions"].as_array().unwrap();
        let names: Vec<&str> = rows
            .iter()
            .map(|r| r["tool_name"].as_str().unwrap())
            .collect();
        assert_eq!(
            names,
            [
                "caseops_get_case_snapshot",
                "caseops_get_policy_requirements",
                "caseops_list_unclassified_documents",
                "caseops_resolve_document_alias"
            ]
        );
        assert!(
            rows.iter()
                .all(|r| r["status"] == "succeeded" && r["attempt_count"] == 1),
            "{backend}"
        );
        let cps = get(&s.api, &format!("/v1/agent-runs/{run_id}/checkpoints")).await;
        assert_eq!(
            cps["checkpoints"].as_array().unwrap().last().unwrap()["to"],
            "completed"
        );

        let (status, replay) = post(&s.api, "C-102", DEMO, "accept-key-0001", goal.clone()).await;
        assert_eq!(
            (
                status,
                replay["run_id"].as_str(),
                replay["replayed"].as_bool()
            ),
            (200, Some(run_id.as_str()), Some(true)),
            "{backend}"
        );
        let again = get(&s.api, &format!("/v1/agent-runs/{run_id}/tool-executions")).await;
        assert_eq!(
            again["tool_executions"].as_array().unwrap().len(),
            4,
            "replay executed no tool"
        );

        let (status, conflict) = post(
            &s.api,
            "C-102",
            DEMO,
            "accept-key-0001",
            json!({"goal": "something else"}),
        )
        .await;
        assert_eq!(status, 409, "{backend}: {conflict}");
        assert_eq!(conflict["status"], 409);

        let (foreign_status, foreign) = post(
            &s.api,
            "C-102",
            Some("dev-key-tenant-other"),
            "accept-key-0002",
            goal.clone(),
        )
        .await;
        let (unknown_status, unknown) =
            post(&s.api, "C-404", DEMO, "accept-key-0003", goal.clone()).await;
        assert_eq!((foreign_status, unknown_status), (404, 404), "{backend}");
        assert_eq!(
            foreign, unknown,
            "another tenant's case is indistinguishable from an unknown one"
        );

        let (status, _) = post(&s.api, "C-102", None, "accept-key-0004", goal.clone()).await;
        assert_eq!(status, 401);
        let (status, bad) = post(
            &s.api,
            "C-102",
            DEMO,
            "accept-key-0005",
            json!({"goal": "x", "priority": "high"}),
        )
        .await;
        assert_eq!(status, 422, "{backend}: {bad}");
        let (status, _) = post(&s.api, "C-102", DEMO, "short", goal.clone()).await;
        assert_eq!(status, 422, "an Idempotency-Key under 8 characters");

        let metrics = reqwest::get(format!("{}/metrics", s.api))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert!(
            metrics.contains(
                "caseops_runs_finished_total{status=\"completed\",stop_reason=\"none\"} 1"
            ),
            "{metrics}"
        );
        let ready: Value = reqwest::get(format!("{}/health/ready", s.api))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(ready["status"], "ready");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_c103_run_requests_the_missing_document_once_and_cites_the_request() {
    for (backend, url) in fresh_databases("accept_c103").await {
        let s = serve(&url);
        let goal = json!({"goal": "Check whether claim case C-103 holds every required document."});
        let (status, run) = post(&s.api, "C-103", DEMO, "c103-key-0001", goal.clone()).await;
        assert_eq!(status, 201, "{backend}: {run}");
        assert_eq!(run["status"], "completed", "{backend}: {run}");
        assert_eq!(run["step_count"], 5);
        let r = &run["result"];
        assert_eq!(r["outcome"], "MISSING_REQUIRED_DOCUMENTS");
        assert_eq!(r["missing_document_codes"], json!(["ACCIDENT_CERTIFICATE"]));
        assert_eq!(r["resolved_document_codes"], json!([]));
        let refs = r["evidence_refs"].as_array().unwrap();
        let request = refs
            .iter()
            .filter_map(Value::as_str)
            .find(|r| r.starts_with("request://C-103/REQ-"))
            .unwrap_or_else(|| panic!("{backend}: no request cited: {r}"))
            .to_string();
        let run_id = run["run_id"].as_str().unwrap();
        let ledger = get(&s.api, &format!("/v1/agent-runs/{run_id}/tool-executions")).await;
        let rows = ledger["tool_executions"].as_array().unwrap();
        let names: Vec<&str> = rows
            .iter()
            .map(|r| r["tool_name"].as_str().unwrap())
            .collect();
        assert_eq!(
            names,
            [
                "caseops_get_case_snapshot",
                "caseops_get_policy_requirements",
                "caseops_list_unclassified_documents",
                "caseops_resolve_document_alias",
                "caseops_request_missing_documents"
            ]
        );
        assert_eq!(
            rows[3]["result"]["resolved"], false,
            "no alias rule resolves it"
        );
        assert_eq!(
            rows[4]["arguments"],
            json!({"case_id": "C-103", "document_codes": ["ACCIDENT_CERTIFICATE"]}),
            "{backend}: the idempotency key never travels in the arguments"
        );
        // …but the write's intent records it; reads have none.
        let key = rows[4]["idempotency_key"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        assert_eq!(key.len(), 64, "{backend}: {}", rows[4]);
        assert!(rows[..4].iter().all(|r| r.get("idempotency_key").is_none()));

        // A second run on the case makes the same business request: it gets the
        // first one back, and no second request exists.
        let (status, again) = post(&s.api, "C-103", DEMO, "c103-key-0002", goal).await;
        assert_eq!(status, 201, "{backend}: {again}");
        assert!(
            again["result"]["evidence_refs"]
                .as_array()
                .unwrap()
                .iter()
                .any(|r| r == request.as_str()),
            "{backend}: {again}"
        );
        let again_id = again["run_id"].as_str().unwrap();
        let ledger = get(
            &s.api,
            &format!("/v1/agent-runs/{again_id}/tool-executions"),
        )
        .await;
        let write = ledger["tool_executions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["tool_name"] == "caseops_request_missing_documents")
            .cloned()
            .unwrap();
        assert_eq!(
            write["idempotency_key"], key,
            "{backend}: one business intent, one key, across runs"
        );
    }
}

const SUPERVISOR: &str = "dev-key-tenant-demo-supervisor";

async fn decide(api: &str, key: &str, id: &str, body: Value) -> (u16, Value) {
    let r = reqwest::Client::new()
        .post(format!("{api}/v1/approvals/{id}/decision"))
        .header("x-api-key", key)
        .json(&body)
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
}

async fn get_as(api: &str, key: &str, path: &str) -> (u16, Value) {
    let r = reqwest::Client::new()
        .get(format!("{api}{path}"))
        .header("x-api-key", key)
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
}

/// Polls a run until it leaves `running`/`waiting_approval` or 10 s pass.
async fn settled(api: &str, run_id: &str, want: &str) -> Value {
    let mut run = Value::Null;
    for _ in 0..100 {
        run = get(api, &format!("/v1/agent-runs/{run_id}")).await;
        if run["status"] == want {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    run
}

async fn rows(url: &str, sql: &str) -> Vec<caseops_host::store::sql::Row> {
    let db = caseops_host::store::Db::open_existing(url, 1, &caseops_service::reference::SCHEMA)
        .await
        .unwrap();
    db.fetch_all(sql, &[]).await.unwrap()
}

/// Starts a C-104 run as `key`; it parks waiting for an approval, returned with it.
async fn parked_c104(api: &str, key: &str, idem: &str) -> (String, Value) {
    let goal = json!({"goal": "Check claim case C-104 and hand it to the assessors."});
    let (status, run) = post(api, "C-104", Some(key), idem, goal).await;
    assert!(status == 201 || status == 202, "{status} {run}");
    let run_id = run["run_id"].as_str().unwrap().to_string();
    let run = settled(api, &run_id, "waiting_approval").await;
    assert_eq!(run["status"], "waiting_approval", "{run}");
    let (_, list) = get_as(api, key, "/v1/approvals?status=pending").await;
    let approval = list["approvals"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["run_id"] == run_id.as_str())
        .unwrap_or_else(|| panic!("no pending approval for {run_id}: {list}"))
        .clone();
    (run_id, approval)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approved_c104_run_marks_the_case_ready_once_and_completes() {
    for (backend, url) in fresh_databases("accept_c104").await {
        let s = serve(&url);
        let (run_id, approval) = parked_c104(&s.api, "dev-key-tenant-demo", "c104-key-0001").await;
        // The approval binds the exact action, the run and its requester.
        assert_eq!(approval["tool"], "caseops_mark_case_ready_for_assessment");
        assert_eq!(
            approval["arguments"],
            json!({"case_id": "C-104", "case_version": 1})
        );
        assert_eq!(approval["requested_by"], "user:demo-investigator");
        assert_eq!(approval["approver_role"], "claims_supervisor");
        assert_eq!(approval["action_fingerprint"].as_str().unwrap().len(), 64);
        let id = approval["approval_id"].as_str().unwrap();

        // Another tenant sees nothing and decides nothing, even with the scope.
        let other = "dev-key-tenant-other-supervisor";
        let (status, _) = get_as(&s.api, other, &format!("/v1/approvals/{id}")).await;
        assert_eq!(status, 404, "{backend}");
        for bad in ["status=done", "limit=0", "limit=many", "sort=newest"] {
            let (status, problem) =
                get_as(&s.api, SUPERVISOR, &format!("/v1/approvals?{bad}")).await;
            assert_eq!(status, 422, "{backend}: `{bad}`: {problem}");
            let detail = problem["detail"].as_str().unwrap();
            let named = bad.split('=').next().unwrap();
            assert!(detail.contains(&format!("`{named}`")), "{bad}: {detail}");
        }
        let (_, theirs) = get_as(&s.api, other, "/v1/approvals?status=pending").await;
        assert_eq!(theirs["approvals"], json!([]), "{backend}");
        let (status, _) = decide(&s.api, other, id, json!({"decision": "approve"})).await;
        assert_eq!(status, 404, "{backend}");
        // Without the scope: refused; a body outside the contract: refused.
        let (status, _) = decide(
            &s.api,
            "dev-key-tenant-demo",
            id,
            json!({"decision": "approve"}),
        )
        .await;
        assert_eq!(
            status, 403,
            "{backend}: the requester lacks `approval:decide`"
        );
        let (status, _) = decide(&s.api, SUPERVISOR, id, json!({"decision": "maybe"})).await;
        assert_eq!(status, 422, "{backend}");
        let (status, _) = decide(
            &s.api,
            SUPERVISOR,
            id,
            json!({"decision": "approve", "approval": "x"}),
        )
        .await;
        assert_eq!(status, 422, "{backend}");

        // Separation of duties: a supervisor's own run is someone else's to approve.
        let (own_run, own) = parked_c104(&s.api, SUPERVISOR, "c104-key-0002").await;
        let own_id = own["approval_id"].as_str().unwrap();
        let (status, body) =
            decide(&s.api, SUPERVISOR, own_id, json!({"decision": "approve"})).await;
        assert_eq!(status, 403, "{backend}: {body}");

        let (status, decided) = decide(
            &s.api,
            SUPERVISOR,
            id,
            json!({"decision": "approve", "comment": "all three documents checked"}),
        )
        .await;
        assert_eq!(status, 200, "{backend}: {decided}");
        assert_eq!(decided["status"], "approved");
        assert_eq!(decided["decided_by"], "user:demo-supervisor");
        let (status, _) = decide(&s.api, SUPERVISOR, id, json!({"decision": "reject"})).await;
        assert_eq!(status, 409, "{backend}: a second decision");

        let run = settled(&s.api, &run_id, "completed").await;
        assert_eq!(run["status"], "completed", "{backend}: {run}");
        assert_eq!(run["step_count"], 4);
        let r = &run["result"];
        assert_eq!(r["outcome"], "DOCUMENTS_COMPLETE");
        assert_eq!(
            r["evidence_refs"],
            json!([
                "case://C-104@1",
                "case://C-104@2",
                "policy://motor-claim-standard@2026.1"
            ])
        );
        let ledger = get(&s.api, &format!("/v1/agent-runs/{run_id}/tool-executions")).await;
        let write = ledger["tool_executions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["tool_name"] == "caseops_mark_case_ready_for_assessment")
            .unwrap()
            .clone();
        assert_eq!(
            (write["status"].as_str(), write["attempt_count"].as_i64()),
            (Some("succeeded"), Some(1)),
            "{write}"
        );
        assert_eq!(
            write["arguments"], approval["arguments"],
            "exactly the approved action ran"
        );
        let cps = get(&s.api, &format!("/v1/agent-runs/{run_id}/checkpoints")).await;
        let path: Vec<&str> = cps["checkpoints"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["to"].as_str().unwrap())
            .collect();
        assert!(
            path.windows(3)
                .any(|w| w == ["waiting_approval", "tool_authorized", "tool_running"]),
            "{backend}: {path:?}"
        );

        // The supervisor's own run: once the case moved, its approved action would
        // act on a version that is gone; rejected by someone else, it stops.
        let (status, _) = decide(
            &s.api,
            "dev-key-tenant-demo-supervisor",
            own_id,
            json!({"decision": "reject"}),
        )
        .await;
        assert_eq!(status, 403, "{backend}: still the requester");
        let _ = own_run;

        let moved = rows(&url, "SELECT status, version FROM cases WHERE tenant_id = 'tenant-demo' AND case_id = 'C-104'").await;
        assert_eq!(
            moved[0].get::<String>("status").unwrap(),
            "ready_for_assessment"
        );
        assert_eq!(moved[0].get::<i64>("version").unwrap(), 2);
        assert_eq!(
            rows(&url, "SELECT 1 AS x FROM case_transitions")
                .await
                .len(),
            1,
            "{backend}"
        );
        let kinds: Vec<String> = rows(
            &url,
            "SELECT kind FROM audit_events WHERE tenant_id = 'tenant-demo' ORDER BY seq",
        )
        .await
        .iter()
        .map(|r| r.get::<String>("kind").unwrap())
        .collect();
        assert!(
            kinds.contains(&"approval.requested".to_string()),
            "{kinds:?}"
        );
        assert!(kinds.contains(&"approval.decided".to_string()), "{kinds:?}");
        let topics: Vec<String> = rows(&url, "SELECT topic FROM outbox_events")
            .await
            .iter()
            .map(|r| r.get::<String>("topic").unwrap())
            .collect();
        assert!(
            topics.contains(&"approval.requested.v1".to_string()),
            "{topics:?}"
        );
        assert!(
            topics.contains(&"approval.decided.v1".to_string()),
            "{topics:?}"
        );
        let db =
            caseops_host::store::Db::open_existing(&url, 1, &caseops_service::reference::SCHEMA)
                .await
                .unwrap();
        let verified = caseops_host::store::audit::verify(&db).await.unwrap();
        assert!(
            verified.problems.is_empty(),
            "{backend}: {:?}",
            verified.problems
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejected_approval_stops_the_run_and_an_expired_one_too() {
    for (backend, url) in fresh_databases("accept_reject").await {
        {
            let s = serve(&url);
            let (run_id, approval) =
                parked_c104(&s.api, "dev-key-tenant-demo", "reject-key-0001").await;
            let id = approval["approval_id"].as_str().unwrap();
            let (status, _) = decide(
                &s.api,
                SUPERVISOR,
                id,
                json!({"decision": "reject", "comment": "the certificate is illegible"}),
            )
            .await;
            assert_eq!(status, 200, "{backend}");
            let run = settled(&s.api, &run_id, "stopped").await;
            assert_eq!(
                (run["status"].as_str(), run["stop_reason"].as_str()),
                (Some("stopped"), Some("APPROVAL_REJECTED")),
                "{backend}: {run}"
            );
        }
        {
            let s = serve_with(&url, &["--approval-ttl-seconds", "1"]);
            let (run_id, approval) =
                parked_c104(&s.api, "dev-key-tenant-demo", "expire-key-0001").await;
            let run = settled(&s.api, &run_id, "stopped").await;
            assert_eq!(
                (run["status"].as_str(), run["stop_reason"].as_str()),
                (Some("stopped"), Some("APPROVAL_EXPIRED")),
                "{backend}: {run}"
            );
            let id = approval["approval_id"].as_str().unwrap();
            let (status, _) = decide(&s.api, SUPERVISOR, id, json!({"decision": "approve"})).await;
            assert_eq!(
                status, 409,
                "{backend}: an expired approval cannot be decided"
            );
        }
        // Neither run moved the case.
        let case = rows(
            &url,
            "SELECT status FROM cases WHERE tenant_id = 'tenant-demo' AND case_id = 'C-104'",
        )
        .await;
        assert_eq!(
            case[0].get::<String>("status").unwrap(),
            "waiting_for_documents",
            "{backend}"
        );
        assert!(
            rows(&url, "SELECT 1 AS x FROM case_transitions")
                .await
                .is_empty(),
            "{backend}"
        );
    }
}

#[test]
fn production_mode_refuses_sqlite_and_development_keys() {
    let out = Command::new(env!("CARGO_BIN_EXE_caseops"))
        .args(["serve", "--production", "--database", "sqlite:///tmp/x.db"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("production mode refuses SQLite"));
}

#[test]
fn production_mode_lists_every_refused_setting_in_one_error() {
    let serve = |extra: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_caseops"))
            .args(["serve", "--database", "sqlite:///tmp/never-created.db"])
            .args(["--listen", "0.0.0.0:0", "--mcp-listen", "127.0.0.1:0"])
            .args(extra)
            .env("CASEOPS_PRODUCTION", "Yes")
            .env("CASEOPS_SIGNING_KEY", "ab".repeat(20))
            .env(
                "CASEOPS_API_KEYS",
                "aaaaaaaaaaaaaaaaaaaa=tenant-demo:user:alice",
            )
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1));
        String::from_utf8_lossy(&out.stderr).to_string()
    };
    let err = serve(&[]);
    assert_eq!(err.lines().count(), 1, "{err}");
    for refused in [
        "production mode refuses SQLite",
        "a weak signing key",
        "1 API key(s) in CASEOPS_API_KEYS with fewer than 16 distinct characters",
        "plain HTTP on `0.0.0.0:0` (--listen)",
    ] {
        assert!(err.contains(refused), "`{refused}` not in: {err}");
    }
    assert!(
        !err.contains("--mcp-listen"),
        "a loopback bind is fine: {err}"
    );
    let err = serve(&["--behind-tls-proxy"]);
    assert!(!err.contains("plain HTTP"), "{err}");
    assert!(!std::path::Path::new("/tmp/never-created.db").exists());
}

#[test]
fn a_database_password_in_the_query_string_is_never_printed() {
    let out = Command::new(env!("CARGO_BIN_EXE_caseops"))
        .args(["migrate", "--database"])
        .arg("postgres://app@127.0.0.1:1/caseops?sslmode=disable&password=hunter2")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("password=***") && !err.contains("hunter2"),
        "{err}"
    );
}

#[test]
fn an_unreachable_database_is_a_one_line_error_naming_the_redacted_url() {
    let out = Command::new(env!("CARGO_BIN_EXE_caseops"))
        .args([
            "serve",
            "--production",
            "--database",
            "postgres://app:hunter2@127.0.0.1:1/caseops",
        ])
        .env(
            "CASEOPS_SIGNING_KEY",
            "a-production-signing-key-of-32-bytes-or-more",
        )
        .env(
            "CASEOPS_API_KEYS",
            "prod-key-0123456789=tenant-demo:user:alice",
        )
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("postgres://app:***@127.0.0.1:1/caseops") && !err.contains("hunter2"),
        "{err}"
    );
}

#[test]
fn the_demo_runs_end_to_end_and_exits_zero() {
    let out = Command::new(env!("CARGO_BIN_EXE_caseops"))
        .arg("demo")
        .env_remove("CASEOPS_DATABASE_URL")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("completed in 4 steps"), "{text}");
    assert!(text.contains("replayed: true"), "{text}");
    // A timeline a reader can follow: each call, its authorization, its evidence,
    // the budget used, and what to do next.
    assert!(
        text.contains("planning        -> tool_proposed   caseops_get_case_snapshot"),
        "{text}"
    );
    assert!(text.contains("Cedar permits it on this case"), "{text}");
    assert!(
        text.contains("evidence evidence://C-102/DOC-C102-003@1"),
        "{text}"
    );
    assert!(text.contains("budget: 4 of 8 steps"), "{text}");
    // The conclusion traced back: the alias resolution's reference names its call.
    assert!(
        text.lines()
            .any(|l| l.contains("evidence://C-102/DOC-C102-003@1")
                && l.contains("caseops_resolve_document_alias attempt 1")),
        "{text}"
    );
    assert!(
        text.contains("(temporary: removed when the demo ends)"),
        "{text}"
    );
    assert!(text.contains("caseops runs list"), "{text}");
}

async fn post_with(api: &str, idem: &str, prefer: &str) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("{api}/v1/cases/C-102/agent-runs"))
        .header("x-api-key", "dev-key-tenant-demo")
        .header("idempotency-key", idem)
        .header("prefer", prefer)
        .json(&json!({"goal": "Check whether claim case C-102 holds every required document."}))
        .send()
        .await
        .unwrap()
}

/// The `data:` of every SSE event of `kind`, in order.
fn events_of(body: &str, kind: &str) -> Vec<Value> {
    body.split("\n\n")
        .filter(|block| block.lines().any(|l| l == format!("event: {kind}")))
        .filter_map(|block| {
            let data: String = block
                .lines()
                .filter_map(|l| l.strip_prefix("data: "))
                .collect();
            serde_json::from_str(&data).ok()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn respond_async_answers_202_with_location_and_the_run_finishes_without_its_client() {
    for (backend, url) in fresh_databases("async").await {
        let s = serve(&url);
        let r = post_with(&s.api, "async-key-0001", "respond-async").await;
        assert_eq!(r.status(), 202, "{backend}");
        let location = r.headers()["location"].to_str().unwrap().to_string();
        assert_eq!(r.headers()["preference-applied"], "respond-async");
        assert!(r.headers().contains_key("retry-after"));
        let run: Value = r.json().await.unwrap();
        assert_eq!(
            location,
            format!("/v1/agent-runs/{}", run["run_id"].as_str().unwrap())
        );

        // Nobody waits on it, yet it completes.
        let mut finished = Value::Null;
        for _ in 0..100 {
            finished = get(&s.api, &location).await;
            if finished["status"] != "running" {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        assert_eq!(finished["status"], "completed", "{backend}: {finished}");
        assert_eq!(finished["step_count"], 4);

        // `wait=N` without respond-async: waits, and the run is done in time.
        let r = post_with(&s.api, "async-key-0002", "wait=30").await;
        assert_eq!(r.status(), 201, "{backend}");
    }
}

/// The answer to a creation that waited is built from what the settling commit
/// wrote (not read back): it must be the run exactly as a later read shows it,
/// for a run that completed and for one that parked for an approval.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_creation_that_waited_answers_with_the_run_exactly_as_a_read_shows_it() {
    for (backend, url) in fresh_databases("answer").await {
        let s = serve(&url);
        let cases = [
            (
                "C-102",
                "Check whether claim case C-102 holds every required document.",
                201,
                "completed",
            ),
            (
                "C-104",
                "Check claim case C-104 and hand it to the assessors.",
                202,
                "waiting_approval",
            ),
        ];
        for (n, (case, goal, code, run_status)) in cases.into_iter().enumerate() {
            let key = format!("answer-key-000{n}");
            let (status, answer) = post(&s.api, case, DEMO, &key, json!({ "goal": goal })).await;
            assert_eq!(status, code, "{backend} {case}: {answer}");
            assert_eq!(answer["status"], run_status, "{backend} {case}: {answer}");
            let run_id = answer["run_id"].as_str().unwrap();
            let read = get(&s.api, &format!("/v1/agent-runs/{run_id}")).await;
            assert_eq!(
                answer, read,
                "{backend} {case}: the creation's answer and a read differ"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_events_stream_replays_checkpoints_from_last_event_id_and_ends_with_the_run() {
    for (backend, url) in fresh_databases("events").await {
        let s = serve(&url);
        let (status, run) = post(
            &s.api,
            "C-102",
            DEMO,
            "events-key-0001",
            json!({"goal": "Check C-102."}),
        )
        .await;
        assert_eq!(status, 201, "{backend}: {run}");
        let run_id = run["run_id"].as_str().unwrap();
        let events = |last: Option<&str>, key: &str| {
            let mut req = reqwest::Client::new()
                .get(format!("{}/v1/agent-runs/{run_id}/events", s.api))
                .header("x-api-key", key);
            if let Some(l) = last {
                req = req.header("last-event-id", l);
            }
            req.send()
        };
        let r = events(None, "dev-key-tenant-demo").await.unwrap();
        assert_eq!(r.headers()["content-type"], "text/event-stream");
        let body = r.text().await.unwrap();
        let cps = events_of(&body, "checkpoint");
        let all = get(&s.api, &format!("/v1/agent-runs/{run_id}/checkpoints")).await;
        assert_eq!(
            cps.len(),
            all["checkpoints"].as_array().unwrap().len(),
            "{backend}"
        );
        for (i, c) in cps.iter().enumerate() {
            assert_eq!(c["sequence"], i + 1);
        }
        assert_eq!(events_of(&body, "tool_execution").len(), 4, "{backend}");
        let end = events_of(&body, "end");
        assert_eq!(end.len(), 1);
        assert_eq!(end[0]["status"], "completed");
        assert_eq!(end[0]["result"], run["result"]);

        // Resumed after sequence 10: only what follows.
        let body = events(Some("10"), "dev-key-tenant-demo")
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        let later = events_of(&body, "checkpoint");
        assert_eq!(later[0]["sequence"], 11, "{backend}");
        assert_eq!(later.len(), cps.len() - 10);

        // Another tenant's run is as absent as a missing one.
        let r = events(None, "dev-key-tenant-other").await.unwrap();
        assert_eq!(r.status(), 404, "{backend}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_tool_server_refuses_runs_instead_of_failing_them() {
    let dbs = fresh_databases("nomcp").await;
    let url = dbs.sqlite().to_string();
    // A port nothing listens on.
    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let mcp = format!("http://{}/mcp", free.local_addr().unwrap());
    drop(free);
    let mut child = Command::new(env!("CARGO_BIN_EXE_caseops"))
        .args([
            "serve",
            "--only",
            "api",
            "--listen",
            "127.0.0.1:0",
            "--mcp-url",
            &mcp,
            "--database",
            &url,
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let api = loop {
        let line = lines.next().unwrap().unwrap();
        if let Some(rest) = line.strip_prefix("caseops api on ") {
            break rest.split_whitespace().next().unwrap().to_string();
        }
    };
    let s = Serve { child, api };
    let (status, body) = post(
        &s.api,
        "C-102",
        DEMO,
        "nomcp-key-0001",
        json!({"goal": "Check C-102."}),
    )
    .await;
    assert_eq!(status, 503, "{body}");
    assert!(
        body["detail"]
            .as_str()
            .unwrap()
            .contains("MCP tool server is not ready"),
        "{body}"
    );
    let run = get(&s.api, "/v1/agent-runs/none").await;
    assert_eq!(run["status"], 404);
    let db = caseops_host::store::Db::open_existing(&url, 1, &caseops_service::reference::SCHEMA)
        .await
        .unwrap();
    let runs = db.fetch_all("SELECT run_id FROM runs", &[]).await.unwrap();
    assert!(runs.is_empty(), "no run was created");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signing_key_that_differs_from_the_tool_servers_is_named_by_readiness() {
    let dbs = fresh_databases("keys").await;
    let url = dbs.sqlite().to_string();
    let start = |args: &[&str], key: &str, prefix: &str| {
        let mut child = Command::new(env!("CARGO_BIN_EXE_caseops"))
            .args(["serve", "--database", &url])
            .args(args)
            .env("CASEOPS_SIGNING_KEY", key)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let addr = loop {
            let line = lines.next().unwrap().unwrap();
            if let Some(rest) = line.strip_prefix(prefix) {
                break rest.split_whitespace().next().unwrap().to_string();
            }
        };
        std::thread::spawn(move || for _ in lines {});
        Serve { child, api: addr }
    };
    let mcp = start(
        &["--only", "mcp", "--mcp-listen", "127.0.0.1:0"],
        "the-tool-servers-signing-key-0123456789",
        "caseops mcp on ",
    );
    let api = start(
        &[
            "--only",
            "api",
            "--listen",
            "127.0.0.1:0",
            "--mcp-url",
            &mcp.api,
        ],
        "another-signing-key-entirely-0123456789",
        "caseops api on ",
    );
    let r = reqwest::get(format!("{}/health/ready", api.api))
        .await
        .unwrap();
    assert_eq!(r.status(), 503);
    let body: Value = r.json().await.unwrap();
    let why = body["mcp"].as_str().unwrap();
    assert!(
        why.contains("refused the task token") && why.contains("CASEOPS_SIGNING_KEY"),
        "{body}"
    );
}

/// What is sent, what it sends, and the status and detail it must get back.
type BadRequest<'a> = (&'a str, Vec<(&'a str, &'a str)>, Vec<u8>, u16, &'a str);

/// Sends `body` with the given headers to a route of the API; status, content type
/// and JSON body.
async fn send(
    method: reqwest::Method,
    url: String,
    headers: &[(&str, &str)],
    body: Vec<u8>,
) -> (u16, String, Value) {
    // The server may answer (413, 401, …) before it has read a large body and close
    // the connection; the client can then fail writing the rest (broken pipe)
    // instead of reading the answer. That race is the client's: send again.
    let mut attempts = 0;
    let r = loop {
        let mut req = reqwest::Client::new()
            .request(method.clone(), &url)
            .body(body.clone());
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        match req.send().await {
            Ok(r) => break r,
            Err(e) if e.is_request() && attempts < 5 => attempts += 1,
            Err(e) => panic!("{url}: {e:?}"),
        }
    };
    let status = r.status().as_u16();
    let kind = r
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    let text = r.text().await.unwrap_or_default();
    (
        status,
        kind,
        serde_json::from_str(&text).unwrap_or(Value::Null),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_the_same_clear_problem_on_every_backend() {
    for (backend, url) in fresh_databases("badinput").await {
        let s = serve(&url);
        let runs = format!("{}/v1/cases/C-102/agent-runs", s.api);
        let json_headers = |key: &'static str| {
            vec![
                ("x-api-key", "dev-key-tenant-demo"),
                ("content-type", "application/json"),
                ("idempotency-key", key),
            ]
        };
        let goal = |g: &str| json!({ "goal": g }).to_string().into_bytes();
        let cases: Vec<BadRequest> = vec![
            (
                "a NUL in the goal",
                json_headers("bad-nul-0001"),
                goal("check\u{0}C-102"),
                422,
                "control characters",
            ),
            (
                "a whitespace-only goal",
                json_headers("bad-ws-0001"),
                goal(" \t\n "),
                422,
                "besides whitespace",
            ),
            (
                "a goal past 2000 characters",
                json_headers("bad-len-0001"),
                goal(&"x".repeat(2001)),
                422,
                "at most 2000",
            ),
            (
                "a body past the bound",
                json_headers("bad-big-0001"),
                vec![b' '; 64 * 1024],
                413,
                "exceeds",
            ),
            (
                "a body that is not JSON by its type",
                vec![
                    ("x-api-key", "dev-key-tenant-demo"),
                    ("content-type", "text/plain"),
                    ("idempotency-key", "bad-type-0001"),
                ],
                goal("Check C-102."),
                415,
                "application/json",
            ),
            (
                "a wrong key with a large body",
                vec![
                    ("x-api-key", "not-a-key"),
                    ("content-type", "application/json"),
                ],
                vec![b' '; 1024 * 1024],
                401,
                "X-API-Key",
            ),
        ];
        for (what, headers, body, status, detail) in cases {
            let (got, kind, problem) =
                send(reqwest::Method::POST, runs.clone(), &headers, body).await;
            assert_eq!(got, status, "{backend}: {what}: {problem}");
            assert_eq!(kind, "application/problem+json", "{backend}: {what}");
            assert!(
                problem["detail"]
                    .as_str()
                    .unwrap_or_default()
                    .contains(detail),
                "{backend}: {what}: {problem}"
            );
        }
        // A non-ASCII Idempotency-Key is there, just not valid.
        let r = reqwest::Client::new()
            .post(&runs)
            .header("x-api-key", "dev-key-tenant-demo")
            .header(
                "idempotency-key",
                reqwest::header::HeaderValue::from_bytes("clé-0001-é".as_bytes()).unwrap(),
            )
            .json(&json!({"goal": "Check C-102."}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 422, "{backend}");
        let problem: Value = r.json().await.unwrap();
        assert!(
            problem["detail"]
                .as_str()
                .unwrap()
                .contains("Idempotency-Key is invalid"),
            "{problem}"
        );

        for (method, path, status) in [
            (reqwest::Method::GET, "/v1/nowhere".to_string(), 404),
            (
                reqwest::Method::GET,
                "/v1/cases/C-102/agent-runs".to_string(),
                405,
            ),
            (
                reqwest::Method::DELETE,
                "/v1/agent-runs/none".to_string(),
                405,
            ),
        ] {
            let (got, kind, problem) = send(
                method,
                format!("{}{path}", s.api),
                &[("x-api-key", "dev-key-tenant-demo")],
                Vec::new(),
            )
            .await;
            assert_eq!(
                (got, kind.as_str()),
                (status, "application/problem+json"),
                "{backend}: {path}"
            );
            assert_eq!(problem["status"], status, "{backend}: {path}");
        }
        // Nothing of the refused requests became a run.
        let db =
            caseops_host::store::Db::open_existing(&url, 1, &caseops_service::reference::SCHEMA)
                .await
                .unwrap();
        let rows = db.fetch_all("SELECT run_id FROM runs", &[]).await.unwrap();
        assert!(rows.is_empty(), "{backend}: {} runs", rows.len());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_longest_valid_goal_fits_the_body_bound_even_fully_escaped() {
    let dbs = fresh_databases("longgoal").await;
    let s = serve(dbs.sqlite());
    // 2,000 characters outside the BMP, each as a JSON escape pair: 24,000 bytes.
    let body = format!("{{\"goal\": \"{}\"}}", "\\ud83d\\ude00".repeat(2000));
    let (status, kind, run) = send(
        reqwest::Method::POST,
        format!("{}/v1/cases/C-102/agent-runs", s.api),
        &[
            ("x-api-key", "dev-key-tenant-demo"),
            ("content-type", "application/json"),
            ("idempotency-key", "long-goal-0001"),
        ],
        body.into_bytes(),
    )
    .await;
    assert_eq!(status, 201, "{kind}: {run}");
}
