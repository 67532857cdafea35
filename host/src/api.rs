//! The HTTP API: start agent runs on a bundle's resources (on the route its run
//! contract declares), read runs, their ledger and checkpoints.
//! Errors are RFC 9457 problem details.

// Handlers return `Result<_, Response>` to short-circuit with a ready response; the
// size of the error variant does not matter on this path.
#![allow(clippy::result_large_err)]

use std::collections::HashMap;
use std::sync::Arc;
use tracing::Instrument;

use axum::Router;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use caseops_runtime::{ContractBundle, RunSpec, RunStateEnum};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::http::{BodyError, is_json, read_body};
use crate::metrics::Metrics;
use crate::store::row_format;
use crate::store::runs::{Allocation, NewRun, ResourceCondition, RunRecord, SqlRunStore};
use crate::worker::{Waited, Workers};

/// Who an API key belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiPrincipal {
    pub tenant_id: String,
    pub actor: String,
    pub scopes: Vec<String>,
}

/// Whether a resource exists for a tenant: the application's answer (a row in one
/// of its tables, say). A resource of another tenant does not exist.
pub trait Resources: Send + Sync + 'static {
    fn exists<'a>(
        &'a self,
        tenant_id: &'a str,
        resource_id: &'a str,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<bool, String>> + Send + 'a>>;

    /// The same check as a condition on the host's database, for resources kept
    /// in the database the application's factory was given: the statement that
    /// creates a run checks it, and no statement of its own is spent on it (a
    /// round trip per run on PostgreSQL). A request that replays a key answers its
    /// run even if the resource is gone since. `None` (the default): [`Resources::exists`]
    /// is asked first.
    fn condition(&self) -> Option<ResourceCondition> {
        None
    }
}

/// What the API needs to know of the compiled bundle, as values.
#[derive(Debug, Clone)]
pub struct RunContract {
    pub resource_type: &'static str,
    pub resource_id_field: &'static str,
    pub runs_path: &'static str,
    pub catalog: caseops_runtime::Catalog,
    pub initial_stage: &'static str,
    pub bundle_digest: &'static str,
    pub final_answer_schema: &'static str,
    /// The agent's name (the console's heading).
    pub agent: &'static str,
    /// The run state machine: every state (with whether it is terminal) in
    /// declaration order, and every allowed transition (the console draws it).
    pub states: Vec<(&'static str, bool)>,
    pub transitions: Vec<(&'static str, &'static str)>,
    pub budgets: caseops_runtime::Budgets,
    pub tools: &'static [caseops_runtime::ToolContract],
}

impl RunContract {
    pub fn of<B: ContractBundle>() -> Self {
        Self {
            resource_type: B::RESOURCE_TYPE,
            resource_id_field: B::RESOURCE_ID_FIELD,
            runs_path: B::RUNS_PATH,
            catalog: B::CATALOG.iter().copied().collect(),
            initial_stage: B::STAGES.first().copied().unwrap_or_default(),
            bundle_digest: B::BUNDLE_DIGEST,
            final_answer_schema: B::FINAL_ANSWER_SCHEMA,
            agent: B::AGENT,
            states: <B::State as RunStateEnum>::ALL
                .iter()
                .map(|s| (s.as_str(), s.is_terminal()))
                .collect(),
            transitions: <B::State as RunStateEnum>::TRANSITIONS
                .iter()
                .map(|(from, to)| (from.as_str(), to.as_str()))
                .collect(),
            budgets: B::BUDGETS,
            tools: B::TOOLS,
        }
    }
}

pub struct AppState {
    pub contract: RunContract,
    pub runs: SqlRunStore,
    pub resources: std::sync::Arc<dyn Resources>,
    pub workers: Arc<Workers>,
    pub keys: HashMap<String, ApiPrincipal>,
    pub metrics: Arc<Metrics>,
    pub planner_kind: &'static str,
    pub planner_model: Option<String>,
    /// How long a run request waits for its run when the client states no
    /// preference (`Prefer: wait=N` overrides it, `respond-async` skips it).
    pub default_wait: std::time::Duration,
    /// A request body must have arrived within this.
    pub body_read: std::time::Duration,
    /// The in-process outbox relay's state, when this process runs one.
    pub relay: Option<Arc<crate::relay::RelayHealth>>,
}

pub fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route(state.contract.runs_path, post(start_run))
        .route("/v1/agent-runs/{run_id}", get(get_run))
        .route("/v1/agent-runs/{run_id}/tool-executions", get(get_ledger))
        .route("/v1/agent-runs/{run_id}/checkpoints", get(get_checkpoints))
        .route("/v1/agent-runs/{run_id}/events", get(crate::events::stream))
        .route("/v1/approvals", get(crate::approvals_api::list))
        .route(
            "/v1/approvals/{approval_id}",
            get(crate::approvals_api::get),
        )
        .route(
            "/v1/approvals/{approval_id}/decision",
            post(crate::approvals_api::decide),
        )
        .route("/health/live", get(|| async { "ok" }))
        .route("/health/ready", get(ready))
        .route("/metrics", get(metrics))
        .route("/openapi.json", get(openapi_json))
        .nest("/ui", crate::console::router(state.clone()))
        // Every answer is a problem document, the router's own included.
        .fallback(|| async { problem(StatusCode::NOT_FOUND, "Not Found", "no such route") })
        .method_not_allowed_fallback(|| async {
            problem(
                StatusCode::METHOD_NOT_ALLOWED,
                "Method Not Allowed",
                "this route does not take that method",
            )
        })
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            tenant_for_log,
        ))
        .layer(axum::middleware::from_fn(|r, n| {
            crate::logging::request_line("api", r, n)
        }))
        .with_state(state)
}

/// Names the tenant of a request's API key for its log line (a map lookup; the
/// handlers authenticate on their own).
async fn tenant_for_log(
    State(state): State<Arc<AppState>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let tenant = principal(&state, request.headers())
        .ok()
        .map(|p| p.tenant_id);
    let mut response = next.run(request).await;
    if let Some(tenant) = tenant {
        response
            .extensions_mut()
            .insert(crate::logging::LogTenant(tenant));
    }
    response
}

/// A run request's body: `{"goal": …}` with at most 2,000 characters of goal. A
/// character outside the BMP written as a JSON escape pair takes 12 bytes, so a
/// valid goal can need 24,000 bytes before the JSON around it.
pub const MAX_START_BODY_BYTES: usize = 32 * 1024;

/// The longest `X-Request-Id` a run request may send (and the request log writes).
pub const MAX_REQUEST_ID_LEN: usize = 200;

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

pub(crate) fn principal(state: &AppState, headers: &HeaderMap) -> Result<ApiPrincipal, Response> {
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

fn valid_resource_id(c: &str) -> bool {
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

pub(crate) fn run_view(state: &AppState, r: &RunRecord, replayed: bool) -> Value {
    let mut view = json!({
        "run_id": r.run_id,
        "status": r.status,
        "state": r.state,
        "step_count": r.step_count,
        "stop_reason": r.stop_reason,
        "result": r.final_result,
        "provenance": r.provenance,
        "planner": r.planner_kind,
        "bundle_digest": r.bundle_digest,
        "replayed": replayed,
        "created_at_ms": r.created_at,
        "updated_at_ms": r.updated_at,
    });
    // The resource id under the bundle's own name for it (e.g. `order_id`).
    view[state.contract.resource_id_field] = json!(r.resource_id);
    view
}

fn not_found(state: &AppState) -> Response {
    problem(
        StatusCode::NOT_FOUND,
        "Not Found",
        &format!(
            "no such {}",
            state.contract.resource_type.to_ascii_lowercase()
        ),
    )
}

pub(crate) fn internal(e: impl std::fmt::Display) -> Response {
    tracing::error!("caseops api: error: {e}");
    problem(
        StatusCode::INTERNAL_SERVER_ERROR,
        "Internal Server Error",
        "the run could not be processed; it is resumable",
    )
}

/// What a client asked for in `Prefer` (RFC 7240): `respond-async` and `wait=N`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Prefer {
    pub respond_async: bool,
    pub wait_seconds: Option<u64>,
}

impl Prefer {
    /// Reads every `Prefer` header; unknown preferences are ignored, as the RFC says.
    pub(crate) fn from_headers(headers: &HeaderMap) -> Self {
        let mut prefer = Prefer::default();
        for value in headers.get_all("prefer") {
            let Ok(text) = value.to_str() else { continue };
            for pref in text.split(',') {
                let pref = pref.split(';').next().unwrap_or_default().trim();
                let (name, value) = match pref.split_once('=') {
                    Some((n, v)) => (n.trim(), Some(v.trim().trim_matches('"'))),
                    None => (pref, None),
                };
                if name.eq_ignore_ascii_case("respond-async") {
                    prefer.respond_async = true;
                } else if name.eq_ignore_ascii_case("wait") {
                    prefer.wait_seconds = value.and_then(|v| v.parse().ok());
                }
            }
        }
        prefer
    }

    /// How long to wait for the run: `wait=N` bounds it (with or without
    /// `respond-async`); `respond-async` alone does not wait.
    fn wait(self, default: std::time::Duration) -> std::time::Duration {
        match (self.wait_seconds, self.respond_async) {
            (Some(n), _) => std::time::Duration::from_secs(n).min(default),
            (None, true) => std::time::Duration::ZERO,
            (None, false) => default,
        }
    }
}

/// How the request found its run.
enum Admitted {
    /// This request created it.
    New(RunRecord),
    /// A run with this key and request exists and is not finished.
    Unfinished(RunRecord),
    /// A finished run with this key and request: a replay.
    Finished(RunRecord),
    Conflict,
    /// No run with this key, and no resource to start one on.
    Absent,
}

/// Records the run (or finds it by its key) and hands an unfinished one to a
/// worker. It runs in a task of its own, so a client that disconnects meanwhile
/// cannot leave it half done.
async fn admit(
    state: Arc<AppState>,
    new: NewRun,
    known: Option<RunRecord>,
    condition: Option<ResourceCondition>,
) -> Result<Admitted, crate::store::DbError> {
    let runs = &state.runs;
    let allocation = match known {
        // The handler has just read the key: an unfinished run, or none yet.
        Some(r) => Allocation::Existing(r),
        None => runs.create_where(&new, condition).await?,
    };
    match allocation {
        Allocation::Conflict(_) => Ok(Admitted::Conflict),
        Allocation::Absent => Ok(Admitted::Absent),
        Allocation::Existing(r) if SqlRunStore::outcome_of(&r).is_some() => {
            Ok(Admitted::Finished(r))
        }
        Allocation::Existing(r) => {
            // Left unfinished: take it over if its lease is free or expired (its
            // process died); if a live process holds it, that one drives it and
            // this request only waits.
            if runs.claim(&r.run_id).await? {
                state.workers.hand_over(&r.run_id, None).await?;
            }
            Ok(Admitted::Unfinished(r))
        }
        Allocation::New(r) => {
            state.metrics.run_started();
            state.workers.hand_over(&r.run_id, r.spec.clone()).await?;
            Ok(Admitted::New(r))
        }
    }
}

/// 202 Accepted: the run goes on; poll `Location` or follow its events.
fn accepted(state: &AppState, r: &RunRecord, prefer: Prefer) -> Response {
    let mut response =
        (StatusCode::ACCEPTED, axum::Json(run_view(state, r, false))).into_response();
    let h = response.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&format!("/v1/agent-runs/{}", r.run_id)) {
        h.insert(header::LOCATION, v);
    }
    h.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    if prefer.respond_async {
        h.insert(
            "preference-applied",
            HeaderValue::from_static("respond-async"),
        );
    }
    response
}

/// Whether `goal` holds a control character a database could not store the same
/// way everywhere (PostgreSQL refuses NUL in text); tab and newlines are text.
fn has_control(goal: &str) -> bool {
    goal.chars()
        .any(|c| c.is_control() && !matches!(c, '\t' | '\n' | '\r'))
}

async fn start_run(
    State(state): State<Arc<AppState>>,
    Path(resource_id): Path<String>,
    headers: HeaderMap,
    body: axum::body::Body,
) -> Response {
    // The key first and the body last: an unknown caller gets nothing read.
    let who = match principal(&state, &headers) {
        Ok(p) => p,
        Err(r) => return r,
    };
    if !is_json(&headers) {
        return problem(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "Unsupported Media Type",
            "the body must be `Content-Type: application/json`",
        );
    }
    let key = match headers.get("idempotency-key").map(|v| v.to_str()) {
        None => {
            return problem(
                StatusCode::UNPROCESSABLE_ENTITY,
                "Unprocessable Entity",
                "the Idempotency-Key header is required",
            );
        }
        Some(Ok(k)) if valid_idempotency_key(k) => k,
        Some(_) => {
            return problem(
                StatusCode::UNPROCESSABLE_ENTITY,
                "Unprocessable Entity",
                "Idempotency-Key is invalid: it must be 8-120 characters of [A-Za-z0-9._:-]",
            );
        }
    };
    // Stored with the run and in its events: bounded like the key, and never
    // silently dropped (the request log leaves out a longer one).
    let asked_request_id = match headers.get("x-request-id").map(|v| v.to_str()) {
        None => None,
        Some(Ok("")) => None,
        Some(Ok(id)) if id.len() <= MAX_REQUEST_ID_LEN => Some(id.to_string()),
        Some(_) => {
            return problem(
                StatusCode::UNPROCESSABLE_ENTITY,
                "Unprocessable Entity",
                &format!(
                    "X-Request-Id is invalid: it must be at most {MAX_REQUEST_ID_LEN} characters of printable ASCII"
                ),
            );
        }
    };
    let body = match read_body(body, MAX_START_BODY_BYTES, state.body_read).await {
        Ok(b) => b,
        Err(BodyError::TooLarge) => {
            return problem(
                StatusCode::PAYLOAD_TOO_LARGE,
                "Payload Too Large",
                &format!("the body exceeds {MAX_START_BODY_BYTES} bytes"),
            );
        }
        Err(BodyError::TooSlow) => {
            return problem(
                StatusCode::REQUEST_TIMEOUT,
                "Request Timeout",
                &format!(
                    "the body did not arrive within {} s",
                    state.body_read.as_secs()
                ),
            );
        }
        Err(BodyError::Broken) => {
            return problem(
                StatusCode::BAD_REQUEST,
                "Bad Request",
                "the body could not be read",
            );
        }
    };
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
    // The rules the OpenAPI schema states, exactly: at most 2,000 characters, no
    // control characters but tab and line breaks, something besides whitespace.
    if body.goal.chars().count() > 2000 {
        return problem(
            StatusCode::UNPROCESSABLE_ENTITY,
            "Unprocessable Entity",
            "`goal` must be at most 2000 characters",
        );
    }
    if has_control(&body.goal) {
        return problem(
            StatusCode::UNPROCESSABLE_ENTITY,
            "Unprocessable Entity",
            "`goal` must not contain control characters other than tab and line breaks",
        );
    }
    let goal = body
        .goal
        .trim_matches(|c: char| c.is_whitespace() || c == '\u{feff}');
    if goal.is_empty() {
        return problem(
            StatusCode::UNPROCESSABLE_ENTITY,
            "Unprocessable Entity",
            "`goal` must contain something besides whitespace",
        );
    }
    // A resource of another tenant is exactly as absent as one that does not exist.
    if !valid_resource_id(&resource_id) {
        return not_found(&state);
    }
    let condition = state.resources.condition();
    if condition.is_none() {
        match state.resources.exists(&who.tenant_id, &resource_id).await {
            Ok(true) => {}
            Ok(false) => return not_found(&state),
            Err(e) => return unavailable(e),
        }
    }
    if state.workers.is_stopping() {
        return service_unavailable(
            "this replica is shutting down; retry with the same Idempotency-Key",
            "1",
        );
    }
    // A run started now could only fail at its first tool call.
    if !state.workers.mcp_ready() {
        return service_unavailable(
            "the MCP tool server is not ready (see /health/ready); retry with the same Idempotency-Key",
            "2",
        );
    }
    // Time-ordered (UUIDv7): a run's rows are keyed by its id, and new ids that
    // sort after the old ones are appended at the B-trees' right edge instead of
    // splitting pages anywhere in them.
    let run_id = format!("run-{}", uuid::Uuid::now_v7());
    // A request without its own id is known by the run it starts (which the
    // store then need not write twice).
    let request_id = asked_request_id.unwrap_or_else(|| run_id.clone());
    let request_hash = row_format::request_hash(
        state.contract.resource_id_field,
        &resource_id,
        goal,
        state.planner_kind,
    );
    let spec = RunSpec {
        run_id,
        tenant_id: who.tenant_id.clone(),
        task_id: format!("task-{}", uuid::Uuid::new_v4()),
        subject: who.actor.clone(),
        resource_id: resource_id.clone(),
        scopes: who.scopes.clone(),
        catalog: state.contract.catalog.clone(),
        stage: state.contract.initial_stage.to_string(),
        goal: goal.to_string(),
        correlation_id: request_id.clone(),
    };
    let new = NewRun {
        spec,
        actor: who.actor.clone(),
        idempotency_key: key.to_string(),
        request_hash,
        request_id: Some(request_id),
        planner_kind: state.planner_kind.into(),
        model: state.planner_model.clone(),
        bundle_digest: state.contract.bundle_digest.into(),
    };
    let started = std::time::Instant::now();
    // On SQLite a replay is answered from one read, here: nothing to write (its one
    // writer stays free), nothing that a client going away could interrupt. On
    // PostgreSQL the statement that creates a run finds an existing one itself
    // (`create`), which spares every new run this read's round trip.
    let known = match state.runs.db.dialect {
        crate::store::Dialect::Postgres => None,
        crate::store::Dialect::Sqlite => match state
            .runs
            .by_key(&new.spec.tenant_id, &new.idempotency_key)
            .await
        {
            Ok(k) => k,
            Err(e) => return unavailable(e),
        },
    };
    if let Some(r) = &known {
        if r.request_hash != new.request_hash {
            return conflict();
        }
        if SqlRunStore::outcome_of(r).is_some() {
            state.metrics.run_replayed();
            return (StatusCode::OK, axum::Json(run_view(&state, r, true))).into_response();
        }
    }
    // Registered before the run is created or read again, so that its settlement
    // cannot fall between the two.
    let expected = known
        .as_ref()
        .map_or_else(|| new.spec.run_id.clone(), |r| r.run_id.clone());
    let signals = state.workers.signals();
    let mut settlement = signals.watch(&expected);
    // Detachable (a client that gives up cannot cancel a creation half-way),
    // still under the request's span so that the run's trace hangs from it.
    let admitting = admit(state.clone(), new, known, condition).in_current_span();
    let admitted = match crate::detachable::Detachable::new(admitting).await {
        Some(Ok(a)) => a,
        Some(Err(e)) => return unavailable(e),
        None => return internal("the run's admission panicked"),
    };
    let (record, created) = match admitted {
        Admitted::Conflict => return conflict(),
        Admitted::Absent => return not_found(&state),
        Admitted::Finished(r) => {
            state.metrics.run_replayed();
            return (StatusCode::OK, axum::Json(run_view(&state, &r, true))).into_response();
        }
        Admitted::New(r) => (r, true),
        Admitted::Unfinished(r) => (r, false),
    };
    let prefer = Prefer::from_headers(&headers);
    let wait = prefer.wait(state.default_wait);
    let waited = if wait.is_zero() {
        Waited::Pending(record)
    } else {
        let run_id = record.run_id.clone();
        // Another request created the key's run meanwhile: watch that one and
        // read it again.
        let current = if run_id == expected {
            Some(record)
        } else {
            settlement = signals.watch(&run_id);
            None
        };
        match state
            .workers
            .wait(&settlement, &who.tenant_id, &run_id, current, wait)
            .await
        {
            Ok(w) => w,
            Err(e) => return unavailable(e),
        }
    };
    state.metrics.request_served(started.elapsed());
    match waited {
        Waited::Finished(r) => {
            let status = if created {
                StatusCode::CREATED
            } else {
                StatusCode::OK
            };
            (status, axum::Json(run_view(&state, &r, false))).into_response()
        }
        Waited::Pending(r) => {
            state.metrics.answered_async();
            accepted(&state, &r, prefer)
        }
    }
}

fn conflict() -> Response {
    problem(
        StatusCode::CONFLICT,
        "Conflict",
        "this Idempotency-Key was used with a different request",
    )
}

/// The database failed this request; the run (if any) is safe and resumable.
pub(crate) fn unavailable(e: impl std::fmt::Display) -> Response {
    tracing::warn!("caseops api: database error: {e}");
    service_unavailable(
        "the database did not answer; retry with the same Idempotency-Key",
        "1",
    )
}

/// 503 with `Retry-After` (seconds): nothing was lost, the client may retry.
fn service_unavailable(detail: &str, retry_after: &'static str) -> Response {
    let mut r = problem(
        StatusCode::SERVICE_UNAVAILABLE,
        "Service Unavailable",
        detail,
    );
    r.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static(retry_after));
    r
}

pub(crate) async fn find(
    state: &AppState,
    headers: &HeaderMap,
    run_id: &str,
) -> Result<(ApiPrincipal, RunRecord), Response> {
    let who = principal(state, headers)?;
    match state.runs.get(&who.tenant_id, run_id).await {
        Ok(Some(r)) => Ok((who, r)),
        Ok(None) => Err(problem(StatusCode::NOT_FOUND, "Not Found", "no such run")),
        Err(e) => Err(unavailable(e)),
    }
}

async fn get_run(
    State(state): State<Arc<AppState>>,
    Path(run_id): Path<String>,
    headers: HeaderMap,
) -> Response {
    match find(&state, &headers, &run_id).await {
        Ok((_, r)) => axum::Json(run_view(&state, &r, false)).into_response(),
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
        Err(e) => unavailable(e),
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
    match state.runs.transitions(&who.tenant_id, &run_id, 0).await {
        Ok(cps) => {
            let list: Vec<Value> = cps
                .iter()
                .map(|c| json!({ "sequence": c.sequence, "from": c.from, "to": c.to, "at_ms": c.at_ms, "reason": c.reason }))
                .collect();
            axum::Json(json!({ "run_id": run_id, "checkpoints": list })).into_response()
        }
        Err(e) => unavailable(e),
    }
}

/// Ready when the database commits a write and the MCP server lists the compiled
/// tools, each checked within 900 ms: a database that restarts, fills up or turns
/// read-only makes this answer 503 within a second, and it recovers by itself.
/// A process that is shutting down is not ready either (balancers drain it).
async fn ready(State(state): State<Arc<AppState>>) -> Response {
    let (db, mcp) = tokio::join!(
        state
            .runs
            .db
            .probe_write_within(std::time::Duration::from_millis(900)),
        state.workers.check_mcp(),
    );
    let stopping = state.workers.is_stopping();
    // The relay is reported, not required: runs go on while NATS is down (the
    // outbox holds their events), so a replica stays in its balancer.
    let relay = state
        .relay
        .as_ref()
        .map(|r| r.ready().err().unwrap_or_else(|| "ok".into()));
    if db.is_ok() && mcp.is_ok() && !stopping {
        let mut body = json!({ "status": "ready", "database": "ok", "mcp": "ok" });
        if let Some(relay) = relay {
            body["relay"] = json!(relay);
        }
        return axum::Json(body).into_response();
    }
    let mut body = json!({
        "status": if stopping { "stopping" } else { "not_ready" },
        "database": db.err().unwrap_or_else(|| "ok".into()),
        "mcp": mcp.err().unwrap_or_else(|| "ok".into()),
    });
    if let Some(relay) = relay {
        body["relay"] = json!(relay);
    }
    (StatusCode::SERVICE_UNAVAILABLE, axum::Json(body)).into_response()
}

async fn metrics(State(state): State<Arc<AppState>>) -> Response {
    let in_flight = state.runs.running_count().await.ok();
    crate::metrics::refresh_outbox_backlog(&state.runs.db).await;
    let (busy, workers) = state.workers.busy();
    crate::metrics::exposition(state.metrics.render(in_flight, busy, workers))
}

async fn openapi_json(State(state): State<Arc<AppState>>) -> axum::Json<Value> {
    axum::Json(openapi(&state.contract))
}

fn openapi(contract: &RunContract) -> Value {
    let field = contract.resource_id_field;
    let resource = contract.resource_type.to_ascii_lowercase();
    let problem = json!({ "$ref": "#/components/schemas/Problem" });
    let err = |d: &str| json!({ "description": d, "content": { "application/problem+json": { "schema": problem } } });
    let ok = |d: &str, schema: &str| json!({ "description": d, "content": { "application/json": { "schema": { "$ref": format!("#/components/schemas/{schema}") } } } });
    let run_id =
        json!({ "name": "run_id", "in": "path", "required": true, "schema": { "type": "string" } });
    let unauthorized = err("no or unknown X-API-Key");
    let unknown_run = err("no such run for this tenant");
    let unavailable = err("the database did not answer; retry (see Retry-After)");
    let nullable = |t: &str| json!({ "type": [t, "null"] });
    let final_answer =
        serde_json::from_str::<Value>(contract.final_answer_schema).unwrap_or(json!({}));
    // The routes anyone may call (probes, metrics, this document) need no key.
    let open = json!([]);
    // A started run leads to its reads (OpenAPI links, followed by API fuzzers).
    let follow = |op: &str| json!({ "operationId": op, "parameters": { "run_id": "$response.body#/run_id" } });
    let run_links = json!({
        "GetRun": follow("getRun"), "GetToolExecutions": follow("getToolExecutions"),
        "GetCheckpoints": follow("getCheckpoints"), "GetRunEvents": follow("getRunEvents"),
    });
    let started = |d: &str| json!({ "description": d, "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Run" } } }, "links": run_links });
    json!({
        "openapi": "3.1.0",
        "info": { "title": format!("{} agent runs API", contract.resource_type), "version": env!("CARGO_PKG_VERSION") },
        "components": {
            "securitySchemes": { "apiKey": { "type": "apiKey", "in": "header", "name": "X-API-Key" } },
            "schemas": {
                "Problem": { "type": "object", "required": ["title", "status"], "properties": { "type": {"type": "string"}, "title": {"type": "string"}, "status": {"type": "integer"}, "detail": {"type": "string"} } },
                "StartRun": { "type": "object", "required": ["goal"], "additionalProperties": false, "properties": { "goal": { "type": "string", "minLength": 1, "maxLength": 2000, "pattern": "^[^\\x00-\\x08\\x0b\\x0c\\x0e-\\x1f\\x7f-\\x9f]*[^\\s\\x00-\\x1f\\x7f-\\x9f][^\\x00-\\x08\\x0b\\x0c\\x0e-\\x1f\\x7f-\\x9f]*$", "description": "What the run is to find out: at most 2,000 characters, at least one of them not whitespace, no control characters other than tab and line breaks. Leading and trailing whitespace is dropped." } } },
                "Run": {
                    "type": "object",
                    "required": ["run_id", field, "status", "state", "step_count", "replayed"],
                    "properties": {
                        "run_id": {"type": "string"}, field: {"type": "string"},
                        "status": { "type": "string", "enum": ["running", "waiting_approval", "completed", "needs_human", "stopped", "failed"] },
                        "state": {"type": "string"}, "step_count": {"type": "integer", "minimum": 0},
                        "stop_reason": nullable("string"),
                        "result": { "description": "the final answer once the run completed", "anyOf": [final_answer, {"type": "null"}] },
                        "provenance": {
                            "description": "for a completed run: each evidence reference its answer cites → the tool call that returned it",
                            "anyOf": [{"type": "object", "additionalProperties": {
                                "type": "object",
                                "required": ["tool_call_id", "tool", "attempt", "bundle_digest"],
                                "properties": {
                                    "tool_call_id": {"type": "string"}, "tool": {"type": "string"},
                                    "attempt": {"type": "integer", "minimum": 0}, "bundle_digest": {"type": "string"},
                                },
                            }}, {"type": "null"}],
                        },
                        "planner": {"type": "string"}, "bundle_digest": {"type": "string"}, "replayed": {"type": "boolean"},
                        "created_at_ms": {"type": "integer"}, "updated_at_ms": {"type": "integer"},
                    },
                },
                "ToolExecutions": {
                    "type": "object", "required": ["run_id", "tool_executions"],
                    "properties": { "run_id": {"type": "string"}, "tool_executions": { "type": "array", "items": {
                        "type": "object",
                        "required": ["tool_call_id", "tool_name", "status", "attempt_count"],
                        "properties": {
                            "run_id": {"type": "string"}, "tool_call_id": {"type": "string"}, "tool_name": {"type": "string"},
                            "tool_version": {"type": "string"}, "arguments": {"type": "object"}, "arguments_hash": {"type": "string"},
                            "fingerprint": {"type": "string"}, "idempotency_key": {"type": "string", "description": "a write's business idempotency key (absent for reads)"},
                            "status": {"type": "string"}, "attempt_count": {"type": "integer"},
                            "result": {}, "error_class": nullable("string"), "error_code": nullable("string"),
                            "bundle_digest": {"type": "string"}, "started_at_ms": {"type": "integer"}, "finished_at_ms": nullable("integer"),
                        },
                    } } },
                },
                "Checkpoints": {
                    "type": "object", "required": ["run_id", "checkpoints"],
                    "properties": { "run_id": {"type": "string"}, "checkpoints": { "type": "array", "items": {
                        "type": "object", "required": ["sequence", "from", "to"],
                        "properties": { "sequence": {"type": "integer"}, "from": {"type": "string"}, "to": {"type": "string"}, "at_ms": {"type": "integer"}, "reason": nullable("string") },
                    } } },
                },
                "Approval": {
                    "type": "object",
                    "required": ["approval_id", "run_id", "tool_call_id", "tool", "arguments", "action_fingerprint", "approver_role", "requested_by", "status", "created_at_ms", "expires_at_ms"],
                    "properties": {
                        "approval_id": {"type": "string"}, "run_id": {"type": "string"}, "tool_call_id": {"type": "string"},
                        "tool": {"type": "string"}, "arguments": {"type": "object"}, "action_fingerprint": {"type": "string"},
                        "approver_role": {"type": "string"}, "requested_by": {"type": "string"},
                        "status": { "type": "string", "enum": ["pending", "approved", "rejected", "expired"] },
                        "created_at_ms": {"type": "integer"}, "expires_at_ms": {"type": "integer"},
                        "decided_by": nullable("string"), "decided_at_ms": nullable("integer"), "comment": nullable("string"),
                    },
                },
                "Approvals": {
                    "type": "object", "required": ["approvals"],
                    "properties": { "approvals": { "type": "array", "items": { "$ref": "#/components/schemas/Approval" } } },
                },
                "Decision": {
                    "type": "object", "required": ["decision"], "additionalProperties": false,
                    "properties": {
                        "decision": { "type": "string", "enum": ["approve", "reject"] },
                        "comment": { "type": ["string", "null"], "maxLength": 2000 },
                    },
                },
                "Readiness": {
                    "type": "object", "required": ["status", "database", "mcp"],
                    "properties": { "status": { "type": "string", "enum": ["ready", "not_ready", "stopping"] }, "database": {"type": "string"}, "mcp": {"type": "string"} },
                },
            },
        },
        "security": [ { "apiKey": [] } ],
        "paths": {
            contract.runs_path: { "post": {
                "operationId": "startRun",
                "summary": format!("Start (or replay) an agent run on a {resource}"),
                "description": "The run is recorded and handed to a run worker; the request only waits for it. A client that disconnects changes nothing about its run. By default the request waits until the run finishes (up to the run's wall-clock budget plus 10 s); `Prefer: respond-async` answers 202 at once, `Prefer: wait=N` waits at most N seconds. A run that another replica is driving is waited for the same way.",
                "parameters": [
                    { "name": field, "in": "path", "required": true, "schema": { "type": "string" } },
                    { "name": "Idempotency-Key", "in": "header", "required": true, "schema": { "type": "string", "minLength": 8, "maxLength": 120, "pattern": "^[A-Za-z0-9._:-]+$" } },
                    { "name": "Prefer", "in": "header", "required": false, "description": "RFC 7240: `respond-async` and/or `wait=N` (seconds).", "schema": { "type": "string" } },
                    { "name": "X-Request-Id", "in": "header", "required": false, "description": "The request's id, in the run's events and the request log; without one (or with an empty one) the run's id is the request's.", "schema": { "type": "string", "maxLength": 200 } },
                ],
                "requestBody": { "required": true, "content": { "application/json": { "schema": { "$ref": "#/components/schemas/StartRun" } } } },
                "responses": {
                    "201": started("new run, finished"),
                    "200": started("replayed or resumed run, finished"),
                    "202": {
                        "description": "the run goes on: follow `Location` or its events",
                        "headers": {
                            "Location": { "schema": { "type": "string" }, "description": "/v1/agent-runs/{run_id}" },
                            "Retry-After": { "schema": { "type": "integer" } },
                            "Preference-Applied": { "schema": { "type": "string" } },
                        },
                        "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Run" } } },
                        "links": run_links,
                    },
                    "401": unauthorized, "404": err(&format!("unknown {resource}")), "409": err("key reused with another request"), "413": err("body larger than 32 KiB"), "415": err("body not `application/json`"), "408": err("the body did not arrive in time"), "422": err("invalid body or header"),
                    "503": err("the database did not answer, the tool server is not ready, or this replica is shutting down; retry with the same Idempotency-Key (see Retry-After)"),
                },
            } },
            "/v1/agent-runs/{run_id}": { "get": {
                "operationId": "getRun", "summary": "A run", "parameters": [run_id],
                "responses": { "200": ok("the run", "Run"), "401": unauthorized, "404": unknown_run, "503": unavailable },
            } },
            "/v1/agent-runs/{run_id}/events": { "get": {
                "operationId": "getRunEvents",
                "summary": "The run's progress as Server-Sent Events",
                "description": "`checkpoint` events (id = checkpoint sequence) for every committed checkpoint, `tool_execution` events (no id) for ledger rows that changed, and one `end` event with the run when it is terminal, after which the stream closes. Reconnect with `Last-Event-ID` to receive only later checkpoints.",
                "parameters": [
                    run_id,
                    { "name": "Last-Event-ID", "in": "header", "required": false, "schema": { "type": "integer", "minimum": 0, "maximum": 18446744073709551615_u64 } },
                ],
                "responses": {
                    "200": { "description": "an event stream; each event's `data` is JSON: a checkpoint, a ledger row, or the run", "content": { "text/event-stream": { "schema": {
                        "type": "object", "required": ["event", "data"],
                        "properties": { "event": { "type": "string", "enum": ["checkpoint", "tool_execution", "end"] }, "data": {"type": "string"}, "id": {"type": "string"} },
                    } } } },
                    "400": err("`Last-Event-ID` is not a sequence this stream sent"),
                    "401": unauthorized, "404": unknown_run, "503": unavailable,
                },
            } },
            "/v1/agent-runs/{run_id}/tool-executions": { "get": {
                "operationId": "getToolExecutions", "summary": "The run's tool ledger", "parameters": [run_id],
                "responses": { "200": ok("ledger rows, oldest first", "ToolExecutions"), "401": unauthorized, "404": unknown_run, "503": unavailable },
            } },
            "/v1/agent-runs/{run_id}/checkpoints": { "get": {
                "operationId": "getCheckpoints", "summary": "The run's checkpoints", "parameters": [run_id],
                "responses": { "200": ok("checkpoints, in order", "Checkpoints"), "401": unauthorized, "404": unknown_run, "503": unavailable },
            } },
            "/v1/approvals": { "get": {
                "operationId": "listApprovals", "summary": "The tenant's approvals, newest first",
                "parameters": [
                    { "name": "status", "in": "query", "required": false, "schema": { "type": "string", "enum": ["pending", "approved", "rejected", "expired"] } },
                    { "name": "limit", "in": "query", "required": false, "schema": { "type": "integer", "minimum": 1, "maximum": 500 } },
                ],
                "responses": { "200": ok("approvals", "Approvals"), "401": unauthorized, "422": err("an unknown status or parameter"), "503": unavailable },
            } },
            "/v1/approvals/{approval_id}": { "get": {
                "operationId": "getApproval", "summary": "One approval",
                "parameters": [ { "name": "approval_id", "in": "path", "required": true, "schema": { "type": "string" } } ],
                "responses": { "200": ok("the approval", "Approval"), "401": unauthorized, "404": err("no such approval for this tenant"), "503": unavailable },
            } },
            "/v1/approvals/{approval_id}/decision": { "post": {
                "operationId": "decideApproval",
                "summary": "Approve or reject a pending approval",
                "description": "Needs the `approval:decide` scope and a principal other than the one that started the run (separation of duties). Approved, the run resumes on a worker and executes exactly the approved call; rejected, it stops with `APPROVAL_REJECTED`.",
                "parameters": [ { "name": "approval_id", "in": "path", "required": true, "schema": { "type": "string" } } ],
                "requestBody": { "required": true, "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Decision" } } } },
                "responses": {
                    "200": ok("the decided approval", "Approval"), "401": unauthorized,
                    "403": err("no `approval:decide` scope, or the run's own requester"),
                    "404": err("no such approval for this tenant"),
                    "409": err("already decided, or expired"),
                    "413": err("body larger than 16 KiB"), "422": err("invalid body"), "503": unavailable,
                },
            } },
            "/health/live": { "get": {
                "summary": "Liveness: the process answers", "security": open,
                "responses": { "200": { "description": "`ok`", "content": { "text/plain": { "schema": { "type": "string" } } } } },
            } },
            "/health/ready": { "get": {
                "summary": "Readiness: the database commits and the tool server lists the compiled tools", "security": open,
                "responses": { "200": ok("ready", "Readiness"), "503": ok("not ready, with the reason per dependency", "Readiness") },
            } },
            "/metrics": { "get": {
                "summary": "Prometheus text metrics", "security": open,
                "responses": { "200": { "description": "exposition format 0.0.4", "content": { "text/plain": { "schema": { "type": "string" } } } } },
            } },
            "/openapi.json": { "get": {
                "summary": "This document", "security": open,
                "responses": { "200": { "description": "OpenAPI 3.1", "content": { "application/json": { "schema": { "type": "object" } } } } },
            } },
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn contract() -> RunContract {
        RunContract {
            resource_type: "Order",
            resource_id_field: "order_id",
            runs_path: "/v1/orders/{order_id}/agent-runs",
            catalog: caseops_runtime::Catalog::default(),
            initial_stage: "working",
            bundle_digest: "d",
            final_answer_schema: r#"{"type": "object"}"#,
            agent: "orders",
            states: vec![("created", false), ("done", true)],
            transitions: vec![("created", "done")],
            budgets: caseops_runtime::Budgets {
                max_steps: 4,
                repeat_limit: 2,
                max_wall_clock_seconds: 60,
                tool_timeout_ceiling_seconds: 10,
                max_no_new_evidence_steps: 2,
                max_tokens: None,
                max_cost_micro_usd: None,
            },
            tools: &[],
        }
    }

    /// The routes `router` serves, as the document must name them.
    const SERVED: &[(&str, &str)] = &[
        ("/v1/agent-runs/{run_id}", "get"),
        ("/v1/agent-runs/{run_id}/tool-executions", "get"),
        ("/v1/agent-runs/{run_id}/checkpoints", "get"),
        ("/v1/agent-runs/{run_id}/events", "get"),
        ("/v1/approvals", "get"),
        ("/v1/approvals/{approval_id}", "get"),
        ("/v1/approvals/{approval_id}/decision", "post"),
        ("/health/live", "get"),
        ("/health/ready", "get"),
        ("/metrics", "get"),
        ("/openapi.json", "get"),
    ];

    #[test]
    fn the_openapi_document_names_every_route_its_parameters_and_401_where_a_key_is_needed() {
        let doc = openapi(&contract());
        let paths = doc["paths"].as_object().unwrap();
        let mut served: Vec<(&str, &str)> = SERVED.to_vec();
        served.push(("/v1/orders/{order_id}/agent-runs", "post"));
        assert_eq!(paths.len(), served.len(), "{:?}", paths.keys());
        for (path, method) in served {
            let op = &doc["paths"][path][method];
            assert!(op.is_object(), "`{method} {path}` is not documented");
            let declared: Vec<&str> = op["parameters"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|p| p["in"] == "path")
                .map(|p| p["name"].as_str().unwrap())
                .collect();
            let templated: Vec<&str> = path
                .split('{')
                .skip(1)
                .map(|s| s.split('}').next().unwrap())
                .collect();
            assert_eq!(declared, templated, "path parameters of `{path}`");
            let open = op["security"] == json!([]);
            assert_eq!(
                op["responses"]["401"].is_object(),
                !open,
                "401 on `{method} {path}`"
            );
            let ok = op["responses"].as_object().unwrap();
            assert!(
                ok.keys().any(|k| k.starts_with('2')),
                "`{path}` has a success response"
            );
        }
    }
}
