//! Crash recovery with real processes: `caseops serve` is killed with SIGKILL right
//! after each commit point of a C-102 run in turn; a new process resumes the run with
//! the same Idempotency-Key. A C-103 run, which makes a document request (a write), is
//! killed at each of its commit points, right after the write's effect and before its
//! commit, and stalled by a tool server that applies the effect and never answers:
//! every time the request is made exactly once. A C-104 run, whose irreversible
//! write waits for an approval, is killed right after it parks, after its approved
//! write's intent is committed, after the write's effect before its commit, and after
//! its terminal commit, and stalled by a tool server that never answers: every time
//! the case moves exactly once. Needs the `fault-injection` feature (the README's
//! test command enables all features).
#![cfg(feature = "fault-injection")]

mod db_support;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use db_support::fresh_databases;
use serde_json::{Value, json};

/// Commit points of a clean C-102 run with the in-process conformance driver: before
/// each of 4 tools, terminal.
const COMMIT_POINTS: usize = 5;

struct Serve {
    child: Child,
    api: Option<String>,
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn serve(database: &str, kill_at: Option<usize>) -> Serve {
    let fault = kill_at.map(|n| ("CASEOPS_FAULT_KILL_AT_COMMIT", n.to_string()));
    serve_with(database, fault)
}

/// `caseops serve` with one fault-injection variable set (and the others removed).
fn serve_with(database: &str, fault: Option<(&str, String)>) -> Serve {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_caseops"));
    cmd.args([
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--mcp-listen",
        "127.0.0.1:0",
        "--lease-seconds",
        "1",
        "--database",
        database,
    ])
    .stdout(Stdio::piped())
    .stderr(Stdio::null());
    for var in [
        "CASEOPS_FAULT_KILL_AT_COMMIT",
        "CASEOPS_FAULT_KILL_AFTER_TOOL",
        "CASEOPS_FAULT_HANG_AFTER_TOOL",
    ] {
        cmd.env_remove(var);
    }
    if let Some((var, value)) = fault {
        cmd.env(var, value);
    }
    let mut child = cmd.spawn().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let api = lines.find_map(|l| {
        l.ok()?
            .strip_prefix("caseops api on ")
            .map(|r| r.split_whitespace().next().unwrap().to_string())
    });
    std::thread::spawn(move || for _ in lines {});
    Serve { child, api }
}

async fn post(api: &str, key: &str) -> Result<(u16, Value), reqwest::Error> {
    post_case(api, "C-102", key).await
}

async fn post_case(api: &str, case: &str, key: &str) -> Result<(u16, Value), reqwest::Error> {
    let r = reqwest::Client::new()
        .post(format!("{api}/v1/cases/{case}/agent-runs"))
        .header("x-api-key", "dev-key-tenant-demo")
        .header("idempotency-key", key)
        .json(&json!({"goal": "Check whether claim case C-102 holds every required document."}))
        .send()
        .await?;
    let status = r.status().as_u16();
    Ok((status, r.json().await.unwrap_or(Value::Null)))
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

/// Makes a C-102 request with `key` again on a new process and returns the run it
/// answers, read again a moment later if it was still going (the sweeper may be
/// finishing it right then).
async fn post_again(api: &str, key: &str, what: &str) -> Value {
    let (status, run) = post(api, key).await.unwrap();
    assert!(status == 200 || status == 201, "{what}: {status} {run}");
    if run["status"] == "completed" {
        return run;
    }
    tokio::time::sleep(Duration::from_millis(600)).await;
    get(
        api,
        &format!("/v1/agent-runs/{}", run["run_id"].as_str().unwrap()),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_killed_at_any_commit_point_resumes_to_the_same_result() {
    for (backend, url) in fresh_databases("crash").await {
        let clean = serve(&url, None);
        let api = clean.api.clone().unwrap();
        let (status, reference) = post(&api, "crash-clean-0").await.unwrap();
        assert_eq!(status, 201, "{backend}: {reference}");
        drop(clean);

        for n in 1..=COMMIT_POINTS {
            let key = format!("crash-key-{n:02}");
            let dying = serve(&url, Some(n));
            let first = post(dying.api.as_deref().unwrap(), &key).await;
            assert!(
                first.is_err() || first.as_ref().unwrap().0 >= 500,
                "{backend} @{n}: the process should have died: {first:?}"
            );
            drop(dying);
            // Let the dead process's lease (1 s) expire.
            tokio::time::sleep(Duration::from_millis(1100)).await;

            let next = serve(&url, None);
            let api = next.api.clone().unwrap();
            let run = post_again(&api, &key, &format!("{backend} @{n}")).await;
            assert_eq!(run["status"], "completed", "{backend} @{n}: {run}");
            assert_eq!(
                run["result"], reference["result"],
                "{backend} @{n}: the same result as a clean run"
            );

            let run_id = run["run_id"].as_str().unwrap();
            let cps = get(&api, &format!("/v1/agent-runs/{run_id}/checkpoints")).await;
            let cps = cps["checkpoints"].as_array().unwrap();
            for (i, c) in cps.iter().enumerate() {
                assert_eq!(
                    c["sequence"],
                    i + 1,
                    "{backend} @{n}: no checkpoint duplicated or skipped"
                );
            }
            let ledger = get(&api, &format!("/v1/agent-runs/{run_id}/tool-executions")).await;
            let mut succeeded: BTreeMap<String, usize> = BTreeMap::new();
            let mut executions: BTreeMap<String, usize> = BTreeMap::new();
            for row in ledger["tool_executions"].as_array().unwrap() {
                let tool = row["tool_name"].as_str().unwrap().to_string();
                *executions.entry(tool.clone()).or_default() += 1;
                if row["status"] == "succeeded" {
                    *succeeded.entry(tool).or_default() += 1;
                } else {
                    assert_eq!(
                        row["error_code"], "RECOVERED_DISCARDED",
                        "{backend} @{n}: {row}"
                    );
                }
            }
            assert_eq!(succeeded.len(), 4, "{backend} @{n}: {succeeded:?}");
            assert!(
                succeeded.values().all(|&c| c == 1),
                "{backend} @{n}: {succeeded:?}"
            );
            assert!(
                executions.values().all(|&c| c <= 2),
                "{backend} @{n}: each read ran at most once more: {executions:?}"
            );
            // The ledger agrees with the checkpoints: one observation per success.
            let observed = cps.iter().filter(|c| c["to"] == "observing").count();
            assert_eq!(observed, 4, "{backend} @{n}");
        }
    }
}

/// Commit points of a clean C-103 run: before each of 5 tools, terminal.
const C103_COMMIT_POINTS: usize = 6;
const REQUEST_TOOL: &str = "caseops_request_missing_documents";

/// Polls a run until it is terminal (a sweeper may be finishing it).
async fn finished(api: &str, run: Value) -> Value {
    let mut run = run;
    for _ in 0..50 {
        if ["completed", "failed", "stopped", "needs_human"]
            .contains(&run["status"].as_str().unwrap_or(""))
        {
            return run;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        run = get(
            api,
            &format!("/v1/agent-runs/{}", run["run_id"].as_str().unwrap()),
        )
        .await;
    }
    run
}

async fn business_rows(url: &str, table: &str) -> i64 {
    let db = caseops_host::store::Db::open_existing(url, 1, &caseops_service::reference::SCHEMA)
        .await
        .unwrap();
    let rows = db
        .fetch_all(&format!("SELECT COUNT(*) AS n FROM {table}"), &[])
        .await
        .unwrap();
    let n: i64 = rows[0].get("n").unwrap();
    let verified = caseops_host::store::audit::verify(&db).await.unwrap();
    assert!(verified.problems.is_empty(), "{:?}", verified.problems);
    n
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_document_request_is_made_exactly_once_whatever_kills_or_stalls_its_run() {
    let mut faults: Vec<(String, (&str, String))> = (1..=C103_COMMIT_POINTS)
        .map(|n| {
            (
                format!("killed after commit {n}"),
                ("CASEOPS_FAULT_KILL_AT_COMMIT", n.to_string()),
            )
        })
        .collect();
    faults.push((
        "killed after the effect, before its commit".into(),
        ("CASEOPS_FAULT_KILL_AFTER_TOOL", REQUEST_TOOL.into()),
    ));
    faults.push((
        "tool server times out after the effect".into(),
        ("CASEOPS_FAULT_HANG_AFTER_TOOL", REQUEST_TOOL.into()),
    ));
    for (i, (what, fault)) in faults.into_iter().enumerate() {
        let stalls = fault.0 == "CASEOPS_FAULT_HANG_AFTER_TOOL";
        for (backend, url) in fresh_databases(&format!("crash_write_{i}")).await {
            let key = format!("crash-write-{i:02}");
            let dying = serve_with(&url, Some(fault.clone()));
            let first = post_case(dying.api.as_deref().unwrap(), "C-103", &key).await;
            let run = if stalls {
                // The same process settles the unknown effect through `confirm_with`.
                let (status, run) = first.unwrap();
                assert_eq!(status, 201, "{backend}, {what}: {run}");
                finished(dying.api.as_deref().unwrap(), run).await
            } else {
                assert!(
                    first.is_err() || first.as_ref().unwrap().0 >= 500,
                    "{backend}, {what}: the process should have died: {first:?}"
                );
                drop(dying);
                tokio::time::sleep(Duration::from_millis(1100)).await;
                let next = serve(&url, None);
                let api = next.api.clone().unwrap();
                let (status, run) = post_case(&api, "C-103", &key).await.unwrap();
                assert!(
                    status == 200 || status == 201,
                    "{backend}, {what}: {status} {run}"
                );
                let run = finished(&api, run).await;
                let ledger = get(
                    &api,
                    &format!(
                        "/v1/agent-runs/{}/tool-executions",
                        run["run_id"].as_str().unwrap()
                    ),
                )
                .await;
                let writes: Vec<&Value> = ledger["tool_executions"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter(|r| r["tool_name"] == REQUEST_TOOL)
                    .collect();
                assert_eq!(
                    writes.iter().filter(|r| r["status"] == "succeeded").count(),
                    1,
                    "{backend}, {what}: {writes:?}"
                );
                run
            };
            assert_eq!(run["status"], "completed", "{backend}, {what}: {run}");
            let result = &run["result"];
            assert_eq!(
                result["outcome"], "MISSING_REQUIRED_DOCUMENTS",
                "{backend}, {what}"
            );
            assert_eq!(
                result["missing_document_codes"],
                json!(["ACCIDENT_CERTIFICATE"])
            );
            assert!(
                result["evidence_refs"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|r| r.as_str().unwrap().starts_with("request://C-103/REQ-")),
                "{backend}, {what}: {result}"
            );
            assert_eq!(
                business_rows(&url, "document_requests").await,
                1,
                "{backend}, {what}: exactly one document request"
            );
        }
    }
}

const READY_TOOL: &str = "caseops_mark_case_ready_for_assessment";

async fn decide_first_pending(api: &str, run_id: &str) {
    let list: Value = reqwest::Client::new()
        .get(format!("{api}/v1/approvals?status=pending"))
        .header("x-api-key", "dev-key-tenant-demo")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = list["approvals"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["run_id"] == run_id)
        .unwrap_or_else(|| panic!("no pending approval for {run_id}: {list}"))["approval_id"]
        .as_str()
        .unwrap()
        .to_string();
    let r = reqwest::Client::new()
        .post(format!("{api}/v1/approvals/{id}/decision"))
        .header("x-api-key", "dev-key-tenant-demo-supervisor")
        .json(&json!({"decision": "approve"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
}

/// Polls until the run is parked in `waiting_approval`.
async fn parked(api: &str, run_id: &str) {
    for _ in 0..50 {
        let run = get(api, &format!("/v1/agent-runs/{run_id}")).await;
        if run["status"] == "waiting_approval" {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("run {run_id} never parked");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approved_case_transition_happens_exactly_once_whatever_kills_its_run() {
    // (what, fault while parking, fault while the approved call runs)
    let kill = |n: usize| Some(("CASEOPS_FAULT_KILL_AT_COMMIT", n.to_string()));
    type Fault<'a> = Option<(&'a str, String)>;
    let faults: Vec<(&str, Fault, Fault)> = vec![
        // A C-104 run commits before each of its 3 reads, then parks: commit 4.
        ("killed right after parking", kill(4), None),
        (
            "killed after the approved write's intent, before its effect",
            None,
            kill(1),
        ),
        (
            "killed after the effect, before its commit",
            None,
            Some(("CASEOPS_FAULT_KILL_AFTER_TOOL", READY_TOOL.into())),
        ),
        ("killed after the terminal commit", None, kill(2)),
        (
            "tool server times out after the effect",
            None,
            Some(("CASEOPS_FAULT_HANG_AFTER_TOOL", READY_TOOL.into())),
        ),
    ];
    for (i, (what, while_parking, while_running)) in faults.into_iter().enumerate() {
        for (backend, url) in fresh_databases(&format!("crash_approval_{i}")).await {
            let key = format!("crash-approval-{i:02}");
            // Start the run; a process dying while parking is replaced.
            let first = serve_with(&url, while_parking.clone());
            let posted = post_case(first.api.as_deref().unwrap(), "C-104", &key).await;
            let (run_id, first) = if while_parking.is_some() {
                assert!(
                    posted.is_err() || posted.as_ref().unwrap().0 >= 500,
                    "{backend}, {what}: the process should have died: {posted:?}"
                );
                drop(first);
                tokio::time::sleep(Duration::from_millis(1100)).await;
                let next = serve(&url, None);
                let (_, run) = post_case(next.api.as_deref().unwrap(), "C-104", &key)
                    .await
                    .unwrap();
                (run["run_id"].as_str().unwrap().to_string(), next)
            } else {
                let (_, run) = posted.unwrap();
                (run["run_id"].as_str().unwrap().to_string(), first)
            };
            parked(first.api.as_deref().unwrap(), &run_id).await;
            // The approved call runs in a process that may die or stall.
            drop(first);
            let running = serve_with(&url, while_running.clone());
            let api = running.api.clone().unwrap();
            decide_first_pending(&api, &run_id).await;
            let stalls =
                matches!(&while_running, Some((v, _)) if *v == "CASEOPS_FAULT_HANG_AFTER_TOOL");
            let dies = while_running.is_some() && !stalls;
            let (_survivor, api) = if dies {
                // Wait for the fault to take the process down, then let the lease run out.
                let mut running = running;
                let _ = tokio::task::spawn_blocking(move || {
                    let _ = running.child.wait();
                    running
                })
                .await;
                tokio::time::sleep(Duration::from_millis(1100)).await;
                let next = serve(&url, None);
                let api = next.api.clone().unwrap();
                (next, api)
            } else {
                (running, api)
            };
            let mut run = Value::Null;
            for _ in 0..100 {
                run = get(&api, &format!("/v1/agent-runs/{run_id}")).await;
                if ["completed", "failed", "stopped", "needs_human"]
                    .contains(&run["status"].as_str().unwrap_or(""))
                {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            assert_eq!(run["status"], "completed", "{backend}, {what}: {run}");
            assert_eq!(
                run["result"]["outcome"], "DOCUMENTS_COMPLETE",
                "{backend}, {what}"
            );
            assert!(
                run["result"]["evidence_refs"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|r| r == "case://C-104@2"),
                "{backend}, {what}: {run}"
            );
            assert_eq!(
                business_rows(&url, "case_transitions").await,
                1,
                "{backend}, {what}: exactly one status transition"
            );
        }
    }
}

/// Eight clients post C-102 runs, each with a key of its own, until the server has
/// answered `answered` of them; then it is killed with SIGKILL. On SQLite, eight
/// writers keep the one writer's group commit holding several transactions at once.
/// Returns the runs answered (key → answer) and the keys whose request got no answer.
async fn load_until_killed(
    serve: &mut Serve,
    answered: usize,
) -> (BTreeMap<String, Value>, Vec<String>) {
    let api = serve.api.clone().unwrap();
    let done = std::sync::Arc::new(std::sync::Mutex::new(BTreeMap::new()));
    let lost = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut clients = Vec::new();
    for c in 0..8 {
        let (api, done, lost, stop) = (api.clone(), done.clone(), lost.clone(), stop.clone());
        clients.push(tokio::spawn(async move {
            let mut i = 0;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                let key = format!("load-{c}-{i:05}");
                i += 1;
                match post(&api, &key).await {
                    Ok((201, run)) if run.is_object() => {
                        done.lock().unwrap().insert(key, run);
                    }
                    // No answer, or one cut short: the kill came first.
                    Err(_) | Ok((201, Value::Null)) => {
                        lost.lock().unwrap().push(key);
                        return;
                    }
                    Ok((status, run)) => panic!("{key}: {status} {run}"),
                }
            }
        }));
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while done.lock().unwrap().len() < answered {
        assert!(
            std::time::Instant::now() < deadline,
            "{answered} runs not answered in 60 s"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    serve.child.kill().unwrap();
    serve.child.wait().unwrap();
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    for c in clients {
        c.await.unwrap();
    }
    let done = std::mem::take(&mut *done.lock().unwrap());
    let lost = std::mem::take(&mut *lost.lock().unwrap());
    (done, lost)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_run_answered_before_a_sigkill_under_load_is_on_record_whole() {
    for (backend, url) in fresh_databases("crashload").await {
        let mut dying = serve(&url, None);
        let (answered, lost) = load_until_killed(&mut dying, 200).await;
        drop(dying);
        assert!(answered.len() >= 200, "{backend}");
        eprintln!(
            "{backend}: {} runs answered, {} cut off by the kill",
            answered.len(),
            lost.len()
        );
        let reference = answered.values().next().unwrap()["result"].clone();
        // Let the dead process's lease (1 s) expire.
        tokio::time::sleep(Duration::from_millis(1100)).await;

        let next = serve(&url, None);
        let api = next.api.clone().unwrap();
        for (key, run) in &answered {
            assert_eq!(run["status"], "completed", "{backend} {key}: {run}");
            let run_id = run["run_id"].as_str().unwrap();
            let stored = get(&api, &format!("/v1/agent-runs/{run_id}")).await;
            assert_eq!(stored["status"], "completed", "{backend} {key}: {stored}");
            assert_eq!(stored["result"], run["result"], "{backend} {key}");
            let cps = get(&api, &format!("/v1/agent-runs/{run_id}/checkpoints")).await;
            let cps = cps["checkpoints"].as_array().unwrap();
            assert!(
                cps.iter().enumerate().all(|(i, c)| c["sequence"] == i + 1),
                "{backend} {key}: checkpoints 1, 2, 3, …"
            );
            assert_eq!(cps.last().unwrap()["to"], "completed", "{backend} {key}");
            let ledger = get(&api, &format!("/v1/agent-runs/{run_id}/tool-executions")).await;
            let succeeded = ledger["tool_executions"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|r| r["status"] == "succeeded")
                .count();
            assert_eq!(succeeded, 4, "{backend} {key}: {ledger}");
        }
        // A request cut off by the kill is answered when it is made again.
        for key in &lost {
            let run = post_again(&api, key, &format!("{backend} {key}")).await;
            assert_eq!(run["status"], "completed", "{backend} {key}: {run}");
            assert_eq!(run["result"], reference, "{backend} {key}");
        }
        drop(next);
        let out = Command::new(env!("CARGO_BIN_EXE_caseops"))
            .args(["audit", "verify", "--database", &url])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{backend}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
