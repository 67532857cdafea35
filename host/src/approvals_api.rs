//! The approvals API: a tenant's approvals listed, one read, one decided.
//!
//! `GET /v1/approvals?status=pending` and `GET /v1/approvals/{id}` answer any
//! principal of the tenant; `POST /v1/approvals/{id}/decision` needs the
//! `approval:decide` scope and a principal other than the run's requester
//! (separation of duties). Another tenant's approval is as absent as a missing one.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::json;

use crate::api::{AppState, principal, problem, unavailable};
use crate::store::approvals::{self, DecideError, Decision};

/// The scope a principal needs to decide approvals.
pub const DECIDE_SCOPE: &str = "approval:decide";

/// A decision's body can be no larger (a comment of a few thousand characters).
const MAX_DECISION_BODY: usize = 16 * 1024;
const MAX_COMMENT_CHARS: usize = 2000;

/// `?status=…&limit=…` (values are plain words and numbers: no decoding needed).
#[derive(Debug, Default)]
struct ListQuery {
    status: Option<String>,
    limit: Option<i64>,
}

fn list_query(uri: &Uri) -> Result<ListQuery, String> {
    let mut q = ListQuery::default();
    for pair in uri
        .query()
        .unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty())
    {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        match k {
            "status" => q.status = Some(v.to_string()),
            "limit" => {
                q.limit = Some(
                    v.parse()
                        .map_err(|_| format!("`limit` must be a number, not `{v}`"))?,
                )
            }
            other => return Err(format!("unknown query parameter `{other}`")),
        }
    }
    Ok(q)
}

pub(crate) async fn list(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    uri: Uri,
) -> Response {
    let who = match principal(&state, &headers) {
        Ok(w) => w,
        Err(r) => return r,
    };
    let q = match list_query(&uri) {
        Ok(q) => q,
        Err(e) => return problem(StatusCode::UNPROCESSABLE_ENTITY, "Unprocessable Entity", &e),
    };
    if let Some(s) = &q.status
        && !["pending", "approved", "rejected", "expired"].contains(&s.as_str())
    {
        return problem(
            StatusCode::UNPROCESSABLE_ENTITY,
            "Unprocessable Entity",
            &format!("`status` must be `pending`, `approved`, `rejected` or `expired`, not `{s}`"),
        );
    }
    let limit = q.limit.unwrap_or(50);
    if !(1..=500).contains(&limit) {
        return problem(
            StatusCode::UNPROCESSABLE_ENTITY,
            "Unprocessable Entity",
            "`limit` must be within 1..=500",
        );
    }
    match approvals::list(&state.runs.db, &who.tenant_id, q.status.as_deref(), limit).await {
        Ok(list) => axum::Json(json!({
            "approvals": list.iter().map(approvals::Approval::to_json).collect::<Vec<_>>()
        }))
        .into_response(),
        Err(e) => unavailable(e),
    }
}

pub(crate) async fn get(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    let who = match principal(&state, &headers) {
        Ok(w) => w,
        Err(r) => return r,
    };
    match approvals::get(&state.runs.db, &who.tenant_id, &id).await {
        Ok(Some(a)) => axum::Json(a.to_json()).into_response(),
        Ok(None) => not_found(),
        Err(e) => unavailable(e),
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DecisionBody {
    decision: String,
    comment: Option<String>,
}

pub(crate) async fn decide(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let who = match principal(&state, &headers) {
        Ok(w) => w,
        Err(r) => return r,
    };
    if !who.scopes.iter().any(|s| s == DECIDE_SCOPE) {
        return problem(
            StatusCode::FORBIDDEN,
            "Forbidden",
            &format!("deciding approvals needs the `{DECIDE_SCOPE}` scope"),
        );
    }
    if body.len() > MAX_DECISION_BODY {
        return problem(
            StatusCode::PAYLOAD_TOO_LARGE,
            "Payload Too Large",
            &format!("the body is over {MAX_DECISION_BODY} bytes"),
        );
    }
    let body: DecisionBody = match serde_json::from_slice(&body) {
        Ok(b) => b,
        Err(e) => {
            return problem(
                StatusCode::UNPROCESSABLE_ENTITY,
                "Unprocessable Entity",
                &format!("invalid body: {e}"),
            );
        }
    };
    let Some(decision) = Decision::parse(&body.decision) else {
        return problem(
            StatusCode::UNPROCESSABLE_ENTITY,
            "Unprocessable Entity",
            &format!(
                "`decision` must be `approve` or `reject`, not `{}`",
                body.decision
            ),
        );
    };
    if body
        .comment
        .as_ref()
        .is_some_and(|c| c.chars().count() > MAX_COMMENT_CHARS)
    {
        return problem(
            StatusCode::UNPROCESSABLE_ENTITY,
            "Unprocessable Entity",
            &format!("`comment` must be at most {MAX_COMMENT_CHARS} characters"),
        );
    }
    let decided = approvals::decide(
        &state.runs.db,
        &who.tenant_id,
        &id,
        &who.actor,
        decision,
        body.comment.as_deref(),
    )
    .await;
    match decided {
        Ok(a) => {
            tracing::info!(
                approval_id = %a.approval_id,
                run_id = %a.run_id,
                decision = %a.status,
                "approval decided"
            );
            axum::Json(a.to_json()).into_response()
        }
        Err(DecideError::NotFound) => not_found(),
        Err(e @ (DecideError::AlreadyDecided(_) | DecideError::Expired)) => {
            problem(StatusCode::CONFLICT, "Conflict", &e.to_string())
        }
        Err(e @ DecideError::SameActor) => {
            problem(StatusCode::FORBIDDEN, "Forbidden", &e.to_string())
        }
        Err(DecideError::Db(e)) => unavailable(e),
    }
}

fn not_found() -> Response {
    problem(StatusCode::NOT_FOUND, "Not Found", "no such approval")
}
