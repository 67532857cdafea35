//! The operator console at `/ui`: server-rendered pages of a tenant's runs, one
//! run's path through the state machine, the approval queue and the audit chain,
//! with a little script for live updates. Its assets are compiled in; it loads
//! nothing from elsewhere.
//!
//! It reads and decides through the same store functions as the API, scoped to the
//! signed-in key's tenant in the same way (another tenant's run is as absent as a
//! missing one), and an approval decided here goes through the very function the
//! API's decision endpoint calls.

mod approvals_page;
mod assets;
mod audit_page;
mod diagram;
mod live;
pub mod page;
mod run_page;
mod runs_page;
pub mod session;

use std::collections::HashMap;
use std::sync::Arc;

use axum::Router;
use axum::routing::{get, post};
use caseops_runtime::fingerprint::sha256_hex;

use crate::api::{ApiPrincipal, AppState};

/// How long a console session lasts (a working day).
pub const SESSION_TTL_MS: i64 = 8 * 60 * 60 * 1000;

pub struct Console {
    app: Arc<AppState>,
    /// SHA-256 (hex) of each API key → its principal: sessions name keys by hash.
    by_key_hash: HashMap<String, ApiPrincipal>,
    session_ttl_ms: i64,
}

/// The console's routes, to be nested at `/ui` (in a router of any state).
pub fn router<S: Clone + Send + Sync + 'static>(app: Arc<AppState>) -> Router<S> {
    let console = Console {
        by_key_hash: app
            .keys
            .iter()
            .map(|(key, p)| (sha256_hex(key.as_bytes()), p.clone()))
            .collect(),
        app,
        session_ttl_ms: SESSION_TTL_MS,
    };
    Router::new()
        .route("/", get(|| async { page::see_other("/ui/runs") }))
        .route("/sign-in", get(session::sign_in_page).post(session::sign_in))
        .route("/sign-out", post(session::sign_out))
        .route("/runs", get(runs_page::list))
        .route("/runs/{run_id}", get(run_page::show))
        .route("/runs/{run_id}/events", get(live::run_events))
        .route("/live", get(live::runs))
        .route("/approvals", get(approvals_page::list))
        .route("/approvals/{approval_id}/decision", post(approvals_page::decide))
        .route("/audit", get(audit_page::show))
        .route("/assets/{name}", get(assets::serve))
        .fallback(|| async {
            let main = "<h1>Not found</h1><p>There is no such console page.</p><p><a href=\"/ui/runs\">Back to the runs</a></p>";
            page::html(
                axum::http::StatusCode::NOT_FOUND,
                page::frame("Not found", "", main),
            )
        })
        .with_state(Arc::new(console))
}
