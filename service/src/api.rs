//! The HTTP API: start agent runs on cases, read runs, their ledger and checkpoints.
//! Errors are RFC 9457 problem details.

// Handlers return `Result<_, Response>` to short-circuit with a ready response; the
// size of the error variant does not matter on this path.
#![allow(clippy::result_large_err)]

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use caseops_generated::Bundle;
use caseops_runtime::fingerprint::{canonical_json, sha256_hex};
use caseops_runtime::{ContractBundle, Engine, Planner, Risk, RunSpec};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::mcp::client::McpClient;
use crate::planner::AnyPlanner;
use crate::store::reference::SqlRepository;
use crate::store::runs::{Allocation, NewRun, RunRecord, SqlRunStore};
use crate::tools::CaseRepository;

/// Who an API key belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiPrincipal {
    pub tenant_id: String,
    pub actor: String,
    pub scopes: Vec<String>,
}

/// Development keys: one per reference tenant. Production mode refuses them.
pub fn dev_keys() -> HashMap<String, ApiPrincipal> {
    let scopes: Vec<String> = Bundle::TOOLS
        .iter()
        .map(|t| t.required_scope.to_string())
        .collect();
    HashMap::from([
        (
            "dev-key-tenant-demo".to_string(),
            ApiPrincipal {
                tenant_id: "tenant-demo".into(),
                actor: "user:demo-investigator".into(),
                scopes: scopes.clone(),
            },
        ),
        (
            "dev-key-tenant-other".to_string(),
            ApiPrincipal {
                tenant_id: "tenant-other".into(),
                actor: "user:other-investigator".into(),
                scopes,
            },
        ),
    ])
}

#[derive(Debug, Default)]
pub struct Metrics {
    runs_started: AtomicU64,
    runs_replayed: AtomicU64,
    runs_by_status: std::sync::Mutex<HashMap<String, u64>>,
    /// `(tool, outcome)` → count, from the ledgers of finished runs.
    tool_calls: std::sync::Mutex<HashMap<(String, String), u64>>,
    steps: AtomicU64,
    run_latency_ms_sum: AtomicU64,
}

pub struct AppState {
    pub runs: SqlRunStore,
    pub repo: SqlRepository,
    pub engine: Engine<Bundle>,
    pub executor: McpClient<Bundle>,
    pub keys: HashMap<String, ApiPrincipal>,
    pub metrics: Metrics,
    pub planner: AnyPlanner,
    /// One driver per run inside this process (the lease guards across processes).
    pub run_locks: std::sync::Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

impl AppState {
    fn run_lock(&self, run_id: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self.run_locks.lock().expect("run locks");
        // Forget locks nobody holds, so the map does not grow with every run.
        locks.retain(|_, l| Arc::strong_count(l) > 1);
        locks.entry(run_id.to_string()).or_default().clone()
    }
}

pub fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/v1/cases/{case_id}/agent-runs", post(start_run))
        .route("/v1/agent-runs/{run_id}", get(get_run))
        .route("/v1/agent-runs/{run_id}/tool-executions", get(get_ledger))
        .route("/v1/agent-runs/{run_id}/checkpoints", get(get_checkpoints))
        .route("/health/live", get(|| async { "ok" }))
        .route("/health/ready", get(ready))
        .route("/metrics", get(metrics))
        .route("/openapi.json", get(|| async { axum::Json(openapi()) }))
        .with_state(state)
}

/// An RFC 9457 problem.
pub fn problem(status: StatusCode, title: &str, detail: &str) -> Response {
    let body = json!({
        "type": format!("https://caseops.dev/problems/{}", title.to_ascii_lowercase().replace(' ', "-")),
        "title": title,
        "status": status.as_u16(),
        "detail": detail,
    });
    let mut r = (status, body.to_string()).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/problem+json"),
    );
    r
}

fn principal(state: &AppState, headers: &HeaderMap) -> Result<ApiPrincipal, Response> {
    let key = headers.get("x-api-key").and_then(|v| v.to_str().ok());
    match key.and_then(|k| state.keys.get(k)) {
        Some(p) => Ok(p.clone()),
        None => Err(problem(
            StatusCode::UNAUTHORIZED,
            "Unauthorized",
            "a valid X-API-Key header is required",
        )),
    }
}

fn valid_idempotency_key(k: &str) -> bool {
    (8..=120).contains(&k.len())
        && k.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b".-_:".contains(&b))
}

fn valid_case_id(c: &str) -> bool {
    (1..=80).contains(&c.len())
        && c.bytes().next().is_some_and(|b| b.is_ascii_alphanumeric())
        && c.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct StartBody {
    goal: String,
}

fn run_view(r: &RunRecord, replayed: bool) -> Value {
    json!({
        "run_id": r.run_id,
        "case_id": r.case_id,
        "status": r.status,
        "state": r.state,
        "step_count": r.step_count,
        "stop_reason": r.stop_reason,
        "result": r.final_result,
        "planner": r.planner_kind,
        "bundle_digest": r.bundle_digest,
        "replayed": replayed,
        "created_at_ms": r.created_at,
        "updated_at_ms": r.updated_at,
    })
}

fn not_found() -> Response {
    problem(StatusCode::NOT_FOUND, "Not Found", "no such case")
}

fn internal(e: impl std::fmt::Display) -> Response {
    eprintln!("caseops api: error: {e}");
    problem(
        StatusCode::INTERNAL_SERVER_ERROR,
        "Internal Server Error",
        "the run could not be processed; it is resumable",
    )
}

async fn start_run(
    State(state): State<Arc<AppState>>,
    Path(case_id): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let who = match principal(&state, &headers) {
        Ok(p) => p,
        Err(r) => return r,
    };
    let Some(key) = headers.get("idempotency-key").and_then(|v| v.to_str().ok()) else {
        return problem(
            StatusCode::UNPROCESSABLE_ENTITY,
            "Unprocessable Entity",
            "the Idempotency-Key header is required",
        );
    };
    if !valid_idempotency_key(key) {
        return problem(
            StatusCode::UNPROCESSABLE_ENTITY,
            "Unprocessable Entity",
            "Idempotency-Key must be 8-120 characters of [A-Za-z0-9._:-]",
        );
    }
    let body: StartBody = match serde_json::from_slice(&body) {
        Ok(b) => b,
        Err(e) => {
            return problem(
                StatusCode::UNPROCESSABLE_ENTITY,
                "Unprocessable Entity",
                &format!("invalid body: {e}"),
            );
        }
    };
    let goal = body.goal.trim();
    if goal.is_empty() || goal.chars().count() > 2000 {
        return problem(
            StatusCode::UNPROCESSABLE_ENTITY,
            "Unprocessable Entity",
            "`goal` must be 1-2000 characters",
        );
    }
    // A case of another tenant is exactly as absent as a case that does not exist.
    if !valid_case_id(&case_id) {
        return not_found();
    }
    match state.repo.case(&who.tenant_id, &case_id).await {
        Ok(Some(_)) => {}
        Ok(None) => return not_found(),
        Err(e) => return internal(e),
    }
    let request_id = headers
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
        .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
    let planner = &state.planner;
    let request_hash = sha256_hex(
        canonical_json(&json!({ "case_id": case_id, "goal": goal, "planner": planner.kind() }))
            .as_bytes(),
    );
    let spec = RunSpec {
        run_id: format!("run-{}", uuid::Uuid::new_v4()),
        tenant_id: who.tenant_id.clone(),
        task_id: format!("task-{}", uuid::Uuid::new_v4()),
        subject: who.actor.clone(),
        resource_id: case_id.clone(),
        scopes: who.scopes.clone(),
        catalog: Bundle::CATALOG.iter().map(|s| s.to_string()).collect(),
        allowed_risks: vec![Risk::ReadOnly],
        stage: Bundle::STAGES[0].to_string(),
        goal: goal.to_string(),
        correlation_id: request_id.clone(),
    };
    let new = NewRun {
        spec: spec.clone(),
        actor: who.actor.clone(),
        idempotency_key: key.to_string(),
        request_hash,
        request_id: Some(request_id),
        planner_kind: planner.kind().into(),
        model: planner.model(),
        bundle_digest: Bundle::BUNDLE_DIGEST.into(),
    };
    let started = std::time::Instant::now();
    let (record, status, replayed) = match state.runs.allocate(&new).await {
        Err(e) => return internal(e),
        Ok(Allocation::Conflict(_)) => {
            return problem(
                StatusCode::CONFLICT,
                "Conflict",
                "this Idempotency-Key was used with a different request",
            );
        }
        Ok(Allocation::Existing(r)) if SqlRunStore::outcome_of(&r).is_some() => {
            state.metrics.runs_replayed.fetch_add(1, Ordering::Relaxed);
            return (StatusCode::OK, axum::Json(run_view(&r, true))).into_response();
        }
        Ok(Allocation::Existing(r)) => {
            // A run left unfinished: resume it if its lease is free or expired (its
            // process died); never run it beside the process that holds it, nor
            // beside this process's own sweeper.
            let lock = state.run_lock(&r.run_id);
            let _driving = lock.lock().await;
            match state.runs.get(&who.tenant_id, &r.run_id).await {
                Ok(Some(now)) if SqlRunStore::outcome_of(&now).is_some() => {
                    return (StatusCode::OK, axum::Json(run_view(&now, false))).into_response();
                }
                Ok(_) => {}
                Err(e) => return internal(e),
            }
            match state.runs.claim(&r.run_id).await {
                Ok(true) => {}
                Ok(false) => {
                    return problem(
                        StatusCode::CONFLICT,
                        "Conflict",
                        "this run is being executed by another process; retry later",
                    );
                }
                Err(e) => return internal(e),
            }
            let outcome = match state.runs.load_started(&r.run_id).await {
                Ok(true) => {
                    let resume =
                        state
                            .engine
                            .resume(&r.run_id, planner, &state.executor, &state.runs);
                    state.runs.while_leased(&r.run_id, resume).await
                }
                Ok(false) => {
                    let start = state.engine.start(
                        r.spec.clone().unwrap_or(spec),
                        planner,
                        &state.executor,
                        &state.runs,
                    );
                    state.runs.while_leased(&r.run_id, start).await
                }
                Err(e) => return internal(e),
            };
            if let Err(e) = outcome {
                return internal(e);
            }
            (r, StatusCode::OK, false)
        }
        Ok(Allocation::New(r)) => {
            let lock = state.run_lock(&r.run_id);
            let _driving = lock.lock().await;
            state.metrics.runs_started.fetch_add(1, Ordering::Relaxed);
            let start = state
                .engine
                .start(spec, planner, &state.executor, &state.runs);
            if let Err(e) = state.runs.while_leased(&r.run_id, start).await {
                return internal(e);
            }
            (r, StatusCode::CREATED, false)
        }
    };
    let fresh = match state.runs.get(&who.tenant_id, &record.run_id).await {
        Ok(Some(r)) => r,
        Ok(None) => return internal("run vanished"),
        Err(e) => return internal(e),
    };
    state
        .metrics
        .steps
        .fetch_add(fresh.step_count as u64, Ordering::Relaxed);
    state
        .metrics
        .run_latency_ms_sum
        .fetch_add(started.elapsed().as_millis() as u64, Ordering::Relaxed);
    *state
        .metrics
        .runs_by_status
        .lock()
        .expect("metrics lock")
        .entry(fresh.status.clone())
        .or_default() += 1;
    if let Ok(rows) = state.runs.ledger(&who.tenant_id, &fresh.run_id).await {
        let mut calls = state.metrics.tool_calls.lock().expect("metrics lock");
        for row in rows {
            *calls
                .entry((row.tool_name, row.status.as_str().to_string()))
                .or_default() += 1;
        }
    }
    (status, axum::Json(run_view(&fresh, replayed))).into_response()
}

/// Resumes runs whose process died (their lease expired), forever, every `every`.
pub async fn sweep(state: Arc<AppState>, every: std::time::Duration) {
    loop {
        tokio::time::sleep(every).await;
        let Ok(runs) = state.runs.expired(10).await else {
            continue;
        };
        for (run_id, tenant) in runs {
            let lock = state.run_lock(&run_id);
            let _driving = lock.lock().await;
            // A request may have finished it while we waited for the lock.
            if let Ok(Some(r)) = state.runs.get(&tenant, &run_id).await
                && SqlRunStore::outcome_of(&r).is_some()
            {
                continue;
            }
            let resume = state
                .engine
                .resume(&run_id, &state.planner, &state.executor, &state.runs);
            let result = state.runs.while_leased(&run_id, resume).await;
            if let Err(e) = result {
                eprintln!("caseops: resuming `{run_id}` failed: {e}");
            }
        }
    }
}

async fn find(
    state: &AppState,
    headers: &HeaderMap,
    run_id: &str,
) -> Result<(ApiPrincipal, RunRecord), Response> {
    let who = principal(state, headers)?;
    match state.runs.get(&who.tenant_id, run_id).await {
        Ok(Some(r)) => Ok((who, r)),
        Ok(None) => Err(problem(StatusCode::NOT_FOUND, "Not Found", "no such run")),
        Err(e) => Err(internal(e)),
    }
}

async fn get_run(
    State(state): State<Arc<AppState>>,
    Path(run_id): Path<String>,
    headers: HeaderMap,
) -> Response {
    match find(&state, &headers, &run_id).await {
        Ok((_, r)) => axum::Json(run_view(&r, false)).into_response(),
        Err(r) => r,
    }
}

async fn get_ledger(
    State(state): State<Arc<AppState>>,
    Path(run_id): Path<String>,
    headers: HeaderMap,
) -> Response {
    let (who, _) = match find(&state, &headers, &run_id).await {
        Ok(x) => x,
        Err(r) => return r,
    };
    match state.runs.ledger(&who.tenant_id, &run_id).await {
        Ok(rows) => {
            axum::Json(json!({ "run_id": run_id, "tool_executions": rows })).into_response()
        }
        Err(e) => internal(e),
    }
}

async fn get_checkpoints(
    State(state): State<Arc<AppState>>,
    Path(run_id): Path<String>,
    headers: HeaderMap,
) -> Response {
    let (who, _) = match find(&state, &headers, &run_id).await {
        Ok(x) => x,
        Err(r) => return r,
    };
    match state.runs.checkpoints(&who.tenant_id, &run_id).await {
        Ok(cps) => {
            let list: Vec<Value> = cps
                .iter()
                .map(|c| json!({ "sequence": c.sequence, "from": c.from, "to": c.to, "at_ms": c.at_ms, "reason": c.reason }))
                .collect();
            axum::Json(json!({ "run_id": run_id, "checkpoints": list })).into_response()
        }
        Err(e) => internal(e),
    }
}

async fn ready(State(state): State<Arc<AppState>>) -> Response {
    let db = state.runs.db.fetch_optional("SELECT 1", &[]).await;
    let mcp = state.executor.check_listing().await;
    match (db, mcp) {
        (Ok(_), Ok(())) => {
            axum::Json(json!({ "status": "ready", "database": "ok", "mcp": "ok" })).into_response()
        }
        (db, mcp) => {
            let body = json!({
                "status": "not_ready",
                "database": db.map(|_| "ok".to_string()).unwrap_or_else(|e| e.to_string()),
                "mcp": mcp.map(|_| "ok".to_string()).unwrap_or_else(|e| e.to_string()),
            });
            (StatusCode::SERVICE_UNAVAILABLE, axum::Json(body)).into_response()
        }
    }
}

async fn metrics(State(state): State<Arc<AppState>>) -> Response {
    let m = &state.metrics;
    let mut out = String::new();
    out.push_str("# HELP caseops_runs_started_total Agent runs created.\n# TYPE caseops_runs_started_total counter\n");
    out.push_str(&format!(
        "caseops_runs_started_total {}\n",
        m.runs_started.load(Ordering::Relaxed)
    ));
    out.push_str("# HELP caseops_runs_replayed_total Requests answered from an existing run.\n# TYPE caseops_runs_replayed_total counter\n");
    out.push_str(&format!(
        "caseops_runs_replayed_total {}\n",
        m.runs_replayed.load(Ordering::Relaxed)
    ));
    out.push_str("# HELP caseops_runs_finished_total Runs by terminal status.\n# TYPE caseops_runs_finished_total counter\n");
    let mut by: Vec<(String, u64)> = m
        .runs_by_status
        .lock()
        .expect("metrics lock")
        .iter()
        .map(|(k, v)| (k.clone(), *v))
        .collect();
    by.sort();
    for (status, n) in by {
        out.push_str(&format!(
            "caseops_runs_finished_total{{status=\"{status}\"}} {n}\n"
        ));
    }
    out.push_str("# HELP caseops_tool_calls_total Tool calls by tool and outcome.\n# TYPE caseops_tool_calls_total counter\n");
    let mut calls: Vec<((String, String), u64)> = m
        .tool_calls
        .lock()
        .expect("metrics lock")
        .iter()
        .map(|(k, v)| (k.clone(), *v))
        .collect();
    calls.sort();
    for ((tool, outcome), n) in calls {
        out.push_str(&format!(
            "caseops_tool_calls_total{{tool=\"{tool}\",outcome=\"{outcome}\"}} {n}\n"
        ));
    }
    out.push_str("# HELP caseops_run_steps_total Tool steps of finished runs.\n# TYPE caseops_run_steps_total counter\n");
    out.push_str(&format!(
        "caseops_run_steps_total {}\n",
        m.steps.load(Ordering::Relaxed)
    ));
    out.push_str("# HELP caseops_run_latency_ms_sum Milliseconds spent serving run requests.\n# TYPE caseops_run_latency_ms_sum counter\n");
    out.push_str(&format!(
        "caseops_run_latency_ms_sum {}\n",
        m.run_latency_ms_sum.load(Ordering::Relaxed)
    ));
    let mut r = out.into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4"),
    );
    r
}

fn openapi() -> Value {
    let problem = json!({ "$ref": "#/components/schemas/Problem" });
    let err = |d: &str| json!({ "description": d, "content": { "application/problem+json": { "schema": problem } } });
    json!({
        "openapi": "3.1.0",
        "info": { "title": "CaseOps API", "version": env!("CARGO_PKG_VERSION") },
        "components": {
            "securitySchemes": { "apiKey": { "type": "apiKey", "in": "header", "name": "X-API-Key" } },
            "schemas": {
                "Problem": { "type": "object", "properties": { "type": {"type": "string"}, "title": {"type": "string"}, "status": {"type": "integer"}, "detail": {"type": "string"} } },
                "StartRun": { "type": "object", "required": ["goal"], "additionalProperties": false, "properties": { "goal": { "type": "string", "minLength": 1, "maxLength": 2000 } } },
                "Run": { "type": "object", "properties": { "run_id": {"type": "string"}, "case_id": {"type": "string"}, "status": {"type": "string"}, "step_count": {"type": "integer"}, "replayed": {"type": "boolean"}, "result": serde_json::from_str::<Value>(Bundle::FINAL_ANSWER_SCHEMA).unwrap_or(Value::Null) } },
            },
        },
        "security": [ { "apiKey": [] } ],
        "paths": {
            "/v1/cases/{case_id}/agent-runs": { "post": {
                "summary": "Start (or replay) an agent run on a case",
                "parameters": [
                    { "name": "case_id", "in": "path", "required": true, "schema": { "type": "string" } },
                    { "name": "Idempotency-Key", "in": "header", "required": true, "schema": { "type": "string", "minLength": 8, "maxLength": 120, "pattern": "^[A-Za-z0-9._:-]+$" } },
                ],
                "requestBody": { "required": true, "content": { "application/json": { "schema": { "$ref": "#/components/schemas/StartRun" } } } },
                "responses": {
                    "201": { "description": "new run", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Run" } } } },
                    "200": { "description": "replayed or resumed run", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Run" } } } },
                    "401": err("no or bad API key"), "404": err("unknown case"), "409": err("key reused with another request"), "422": err("invalid body or header"),
                },
            } },
            "/v1/agent-runs/{run_id}": { "get": { "summary": "A run", "responses": { "200": { "description": "the run" }, "404": err("unknown run") } } },
            "/v1/agent-runs/{run_id}/tool-executions": { "get": { "summary": "The run's tool ledger", "responses": { "200": { "description": "ledger rows" }, "404": err("unknown run") } } },
            "/v1/agent-runs/{run_id}/checkpoints": { "get": { "summary": "The run's checkpoints", "responses": { "200": { "description": "checkpoints" }, "404": err("unknown run") } } },
        },
    })
}
