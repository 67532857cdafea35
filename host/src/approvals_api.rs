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

use crate::api::{ApiPrincipal, AppState, principal, problem, unavailable};
use crate::store::approvals::{self, Approval, DecideError, Decision};

/// The scope a principal needs to decide approvals.
pub const DECIDE_SCOPE: &str = "approval:decide";

/// A decision's body can be no larger (a comment of a few thousand characters).
pub(crate) const MAX_DECISION_BODY: usize = 16 * 1024;
pub(crate) const MAX_COMMENT_CHARS: usize = 2000;

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
    // The scope before the body: a principal that may not decide learns nothing
    // from how its body would have been judged.
    if let Err(refused) = may_decide(&who) {
        return refused.into_problem();
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
    match decide_as(&state, &who, &id, &body.decision, body.comment.as_deref()).await {
        Ok(a) => axum::Json(a.to_json()).into_response(),
        Err(refused) => refused.into_problem(),
    }
}

/// Why a decision was not recorded, for whoever asked: the API answers it as a
/// problem document, the console shows it beside the approval.
#[derive(Debug)]
pub(crate) enum Refused {
    /// The request cannot be taken as it is (status and why).
    Rule(StatusCode, String),
    /// The database did not answer: nothing was recorded, a retry may succeed.
    Unavailable(crate::store::DbError),
}

impl Refused {
    fn rule(status: StatusCode, message: impl Into<String>) -> Self {
        Refused::Rule(status, message.into())
    }

    pub(crate) fn message(&self) -> String {
        match self {
            Refused::Rule(_, m) => m.clone(),
            Refused::Unavailable(_) => {
                "the database did not answer: nothing was recorded, try again".into()
            }
        }
    }

    pub(crate) fn status(&self) -> StatusCode {
        match self {
            Refused::Rule(s, _) => *s,
            Refused::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    fn into_problem(self) -> Response {
        match self {
            Refused::Rule(status, message) => problem(
                status,
                status.canonical_reason().unwrap_or("Error"),
                &message,
            ),
            Refused::Unavailable(e) => unavailable(e),
        }
    }
}

/// Whether `who` holds the scope that decides approvals.
pub(crate) fn may_decide(who: &ApiPrincipal) -> Result<(), Refused> {
    match who.scopes.iter().any(|s| s == DECIDE_SCOPE) {
        true => Ok(()),
        false => Err(Refused::rule(
            StatusCode::FORBIDDEN,
            format!("deciding approvals needs the `{DECIDE_SCOPE}` scope"),
        )),
    }
}

/// Records `who`'s decision (`approve` or `reject`) on approval `id` of its
/// tenant, with every rule the API applies: the scope, the comment's length, and
/// the store's (pending, not expired, not the requester's own). The one way a
/// decision is made, whether it comes from the API or the console.
pub(crate) async fn decide_as(
    state: &AppState,
    who: &ApiPrincipal,
    id: &str,
    decision: &str,
    comment: Option<&str>,
) -> Result<Approval, Refused> {
    may_decide(who)?;
    let Some(decision) = Decision::parse(decision) else {
        return Err(Refused::rule(
            StatusCode::UNPROCESSABLE_ENTITY,
            format!("`decision` must be `approve` or `reject`, not `{decision}`"),
        ));
    };
    if comment.is_some_and(|c| c.chars().count() > MAX_COMMENT_CHARS) {
        return Err(Refused::rule(
            StatusCode::UNPROCESSABLE_ENTITY,
            format!("`comment` must be at most {MAX_COMMENT_CHARS} characters"),
        ));
    }
    let decided = approvals::decide(
        &state.runs.db,
        &who.tenant_id,
        id,
        &who.actor,
        decision,
        comment,
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
            Ok(a)
        }
        Err(DecideError::NotFound) => Err(Refused::rule(StatusCode::NOT_FOUND, "no such approval")),
        Err(e @ (DecideError::AlreadyDecided(_) | DecideError::Expired)) => {
            Err(Refused::rule(StatusCode::CONFLICT, e.to_string()))
        }
        Err(e @ DecideError::SameActor) => Err(Refused::rule(StatusCode::FORBIDDEN, e.to_string())),
        Err(DecideError::Db(e)) => Err(Refused::Unavailable(e)),
    }
}

fn not_found() -> Response {
    problem(StatusCode::NOT_FOUND, "Not Found", "no such approval")
}
