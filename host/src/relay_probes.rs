//! A standalone relay's HTTP surface (`caseops relay --listen`): liveness,
//! readiness — the relay can publish and the database answers — and `/metrics`
//! with the outbox's backlog and what this relay published.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::json;

use crate::metrics::Metrics;
use crate::relay::RelayHealth;
use crate::store::Db;

struct Probes {
    db: Db,
    health: Arc<RelayHealth>,
    metrics: Metrics,
}

pub fn router(db: Db, health: Arc<RelayHealth>) -> Router {
    let probes = Arc::new(Probes {
        db,
        health,
        metrics: Metrics::default(),
    });
    Router::new()
        .route(
            "/health/live",
            get(|| async { axum::Json(json!({ "status": "live" })) }),
        )
        .route("/health/ready", get(ready))
        .route("/metrics", get(metrics))
        .with_state(probes)
}

/// Ready while the relay is connected to NATS with its stream and the database
/// takes a write within 900 ms (the relay marks what it published).
async fn ready(State(p): State<Arc<Probes>>) -> Response {
    let db = p.db.probe_write_within(Duration::from_millis(900)).await;
    let relay = p.health.ready();
    let ready = db.is_ok() && relay.is_ok();
    let body = json!({
        "status": if ready { "ready" } else { "not_ready" },
        "database": db.err().unwrap_or_else(|| "ok".into()),
        "relay": relay.err().unwrap_or_else(|| "ok".into()),
    });
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, axum::Json(body)).into_response()
}

async fn metrics(State(p): State<Arc<Probes>>) -> Response {
    crate::metrics::refresh_outbox_backlog(&p.db).await;
    crate::metrics::exposition(p.metrics.render_exposition())
}
