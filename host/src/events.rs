//! `GET /v1/agent-runs/{run_id}/events`: a run's progress as Server-Sent Events.
//!
//! Each committed checkpoint is one `checkpoint` event whose `id` is its sequence, so
//! a client that reconnects with `Last-Event-ID` gets only what it missed. After the
//! checkpoints of a commit come `tool_execution` events for the ledger rows that
//! changed (they carry no `id`: a reconnect sends the rows in their current state
//! again), and when the run is terminal one `end` event with the run's view, after
//! which the stream closes. Tenant-scoped like the other run endpoints.

use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use serde_json::json;
use tokio::sync::broadcast;

use crate::api::{AppState, find, run_view};
use crate::store::runs::{SqlRunStore, next_of};

/// How often a stream re-reads a run that another replica drives.
const FOREIGN_POLL: Duration = Duration::from_millis(250);

struct Follow {
    state: Arc<AppState>,
    tenant: String,
    run_id: String,
    /// The last checkpoint sequence sent (or the client's `Last-Event-ID`).
    after: u64,
    /// `tool_call_id` → (status, attempts) as last sent.
    ledger: HashMap<String, (String, u32)>,
    ready: VecDeque<Event>,
    changes: broadcast::Receiver<Arc<str>>,
    done: bool,
}

pub(crate) async fn stream(
    State(state): State<Arc<AppState>>,
    Path(run_id): Path<String>,
    headers: HeaderMap,
) -> Response {
    let (who, _) = match find(&state, &headers, &run_id).await {
        Ok(x) => x,
        Err(r) => return r,
    };
    // Ids this stream sent are checkpoint sequences; anything else was never ours.
    let after = match headers
        .get("last-event-id")
        .map(|v| v.to_str().ok().and_then(|v| v.trim().parse::<u64>().ok()))
    {
        None => 0,
        Some(Some(sequence)) => sequence,
        Some(None) => {
            return crate::api::problem(
                axum::http::StatusCode::BAD_REQUEST,
                "Bad Request",
                "Last-Event-ID must be a checkpoint sequence this stream sent (a whole number)",
            );
        }
    };
    follow(state, who.tenant_id, run_id, after)
}

/// The event stream of run `run_id` of `tenant` (known to exist), after checkpoint
/// `after`: the API's and the console's.
pub(crate) fn follow(state: Arc<AppState>, tenant: String, run_id: String, after: u64) -> Response {
    let follow = Follow {
        changes: state.workers.signals().commits(),
        state,
        tenant,
        run_id,
        after,
        ledger: HashMap::new(),
        ready: VecDeque::new(),
        done: false,
    };
    let events = futures_util::stream::unfold(follow, |mut f| async move {
        loop {
            if let Some(event) = f.ready.pop_front() {
                return Some((Ok::<_, Infallible>(event), f));
            }
            if f.done {
                return None;
            }
            match f.refill().await {
                Ok(true) => {}
                // Nothing new: wait for a change here, or poll for one elsewhere.
                Ok(false) => {
                    let stopping = f.state.workers.stopping().clone();
                    tokio::select! {
                        // The client reconnects (to another replica) where it left off.
                        () = stopping.cancelled() => return None,
                        () = tokio::time::sleep(FOREIGN_POLL) => {}
                        () = next_of(&mut f.changes, &f.run_id) => {}
                    }
                }
                Err(()) => return None,
            }
        }
    });
    Sse::new(events)
        .keep_alive(KeepAlive::default())
        .into_response()
}

impl Follow {
    /// Queues what changed since the last look; false when nothing did.
    async fn refill(&mut self) -> Result<bool, ()> {
        let runs = &self.state.runs;
        // The run first: a terminal status read before the checkpoints guarantees
        // the terminal checkpoint is among them.
        let record = match runs.get(&self.tenant, &self.run_id).await {
            Ok(Some(r)) => r,
            Ok(None) => return Err(()),
            Err(e) => {
                tracing::warn!("caseops api: events of `{}`: {e}", self.run_id);
                return Err(());
            }
        };
        let (checkpoints, ledger) = match tokio::try_join!(
            runs.transitions(&self.tenant, &self.run_id, self.after),
            runs.ledger(&self.tenant, &self.run_id)
        ) {
            Ok(x) => x,
            Err(e) => {
                tracing::warn!("caseops api: events of `{}`: {e}", self.run_id);
                return Err(());
            }
        };
        for c in &checkpoints {
            let data = json!({
                "sequence": c.sequence, "from": c.from, "to": c.to,
                "at_ms": c.at_ms, "reason": c.reason,
            });
            self.ready.push_back(
                Event::default()
                    .id(c.sequence.to_string())
                    .event("checkpoint")
                    .data(data.to_string()),
            );
            self.after = c.sequence;
        }
        for row in &ledger {
            let seen = (row.status.as_str().to_string(), row.attempt_count);
            if self.ledger.get(&row.tool_call_id) == Some(&seen) {
                continue;
            }
            self.ledger.insert(row.tool_call_id.clone(), seen);
            let data = serde_json::to_string(row).unwrap_or_default();
            self.ready
                .push_back(Event::default().event("tool_execution").data(data));
        }
        if SqlRunStore::outcome_of(&record).is_some() {
            self.ready.push_back(
                Event::default()
                    .event("end")
                    .data(run_view(&self.state, &record, false).to_string()),
            );
            self.done = true;
        }
        Ok(!self.ready.is_empty())
    }
}
