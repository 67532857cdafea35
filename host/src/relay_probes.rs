//! A standalone relay's HTTP surface (`caseops relay --listen`): liveness,
//! readiness — the relay can publish and the database answers — and `/metrics`
//! with the outbox's backlog and what this relay published.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::json;

use crate::metrics::Metrics;
use crate::relay::RelayHealth;
use crate::store::{Db, outbox};

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
    let db = match tokio::time::timeout(Duration::from_millis(900), p.db.probe_write()).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("the database did not answer within 900 ms".to_string()),
    };
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
    if let Ok((events, oldest)) = outbox::backlog(&p.db).await {
        crate::metrics::outbox_backlog(events, oldest);
    }
    let mut r = p.metrics.render_exposition().into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4"),
    );
    r
}
