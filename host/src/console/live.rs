//! Live updates for console pages, as Server-Sent Events a browser's
//! `EventSource` follows with the session cookie (it cannot send an API key).
//!
//! - `GET /ui/runs/{run_id}/events`: the run's own stream, the API's events.
//! - `GET /ui/live?watch=<ids>&since=<ms>`: for the runs list, one `run` event each
//!   time a watched run moves (status, state or step), and a `new` event with the
//!   count of runs created after `since`. One stream per page, however many rows it
//!   shows, so a browser's few connections per host are not used up; it re-reads on
//!   a commit in this process and every second for commits on other replicas.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::Console;
use super::page::{pairs, value};
use super::session::{NoViewer, Viewer};
use crate::store::runs::RunStatus;

/// How often the list stream re-reads without a local commit.
const POLL: Duration = Duration::from_secs(1);
/// At most this many runs are watched by one stream (a page shows 25).
const MAX_WATCHED: usize = 50;

async fn viewer(console: &Console, headers: &HeaderMap) -> Result<Viewer, Response> {
    match console.viewer(headers).await {
        Ok(v) => Ok(v),
        Err(NoViewer::SignIn) => Err((StatusCode::UNAUTHORIZED, "sign in first").into_response()),
        Err(NoViewer::Unavailable(e)) => Err(super::session::unavailable(e)),
    }
}

pub async fn run_events(
    State(console): State<Arc<Console>>,
    Path(run_id): Path<String>,
    headers: HeaderMap,
) -> Response {
    let viewer = match viewer(&console, &headers).await {
        Ok(v) => v,
        Err(r) => return r,
    };
    let tenant = viewer.who.tenant_id;
    match console.app.runs.get(&tenant, &run_id).await {
        Ok(Some(_)) => {}
        Ok(None) => return (StatusCode::NOT_FOUND, "no such run").into_response(),
        Err(e) => return super::session::unavailable(e),
    }
    let after = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    crate::events::follow(console.app.clone(), tenant, run_id, after)
}

struct Watch {
    console: Arc<Console>,
    tenant: String,
    /// Run id → what was last sent of it.
    sent: HashMap<String, (String, String, i64)>,
    watched: Vec<String>,
    since: i64,
    announced: i64,
    first: bool,
    /// Events found by the last look, not sent yet (last first).
    ready: Vec<Event>,
    changes: tokio::sync::broadcast::Receiver<Arc<str>>,
}

impl Watch {
    /// The events for what changed since the last look.
    async fn look(&mut self) -> Result<Vec<Event>, ()> {
        let runs = &self.console.app.runs;
        let statuses: Vec<RunStatus> = runs
            .statuses(&self.tenant, &self.watched)
            .await
            .map_err(|_| ())?;
        let mut events = Vec::new();
        for s in statuses {
            let now = (s.status.clone(), s.state.clone(), s.step_count);
            if self.sent.get(&s.run_id) == Some(&now) {
                continue;
            }
            // The first look only records: the page was rendered from the same rows.
            if !self.first {
                events.push(
                    Event::default()
                        .event("run")
                        .data(serde_json::to_string(&s).unwrap_or_default()),
                );
            }
            self.sent.insert(s.run_id.clone(), now);
        }
        self.first = false;
        if self.since < i64::MAX {
            let created = runs
                .created_since(&self.tenant, self.since)
                .await
                .map_err(|_| ())?;
            if created != self.announced {
                self.announced = created;
                events.push(
                    Event::default()
                        .event("new")
                        .data(json!({ "count": created }).to_string()),
                );
            }
        }
        Ok(events)
    }
}

pub async fn runs(State(console): State<Arc<Console>>, headers: HeaderMap, uri: Uri) -> Response {
    let viewer = match viewer(&console, &headers).await {
        Ok(v) => v,
        Err(r) => return r,
    };
    let query = pairs(uri.query().unwrap_or(""));
    let watched: Vec<String> = value(&query, "watch")
        .unwrap_or_default()
        .split(',')
        .filter(|id| !id.is_empty())
        .take(MAX_WATCHED)
        .map(str::to_string)
        .collect();
    let since = value(&query, "since")
        .and_then(|s| s.parse().ok())
        .unwrap_or(i64::MAX);
    let changes = console.app.workers.signals().commits();
    let stopping = console.app.workers.stopping().clone();
    let watch = Watch {
        console,
        tenant: viewer.who.tenant_id,
        sent: HashMap::new(),
        watched,
        since,
        announced: 0,
        first: true,
        ready: Vec::new(),
        changes,
    };
    let events = futures_util::stream::unfold(watch, move |mut w| {
        let stopping = stopping.clone();
        async move {
            loop {
                if let Some(e) = w.ready.pop() {
                    return Some((Ok::<_, Infallible>(e), w));
                }
                if !w.first {
                    tokio::select! {
                        () = stopping.cancelled() => return None,
                        () = tokio::time::sleep(POLL) => {}
                        // A lagged receiver has missed commits: a look covers them.
                        r = w.changes.recv() => {
                            if matches!(r, Err(tokio::sync::broadcast::error::RecvError::Closed)) {
                                tokio::time::sleep(POLL).await;
                            }
                        }
                    }
                }
                match w.look().await {
                    Ok(mut events) => {
                        // Sent in order: `pop` takes from the end.
                        events.reverse();
                        w.ready = events;
                    }
                    Err(()) => return None,
                }
            }
        }
    });
    Sse::new(events)
        .keep_alive(KeepAlive::default())
        .into_response()
}
