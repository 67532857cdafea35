//! The outbox relay: publishes committed outbox events to a NATS JetStream stream,
//! in commit order per tenant, and marks each published once JetStream has
//! acknowledged it. At least once from here; exactly once as consumers see it,
//! because every message carries `Nats-Msg-Id` = the event id and JetStream drops a
//! duplicate within the stream's duplicate window (a relay killed between
//! publishing and marking publishes again on its next claim).
//!
//! NATS down: the relay backs off (up to 5 s between attempts) and keeps trying;
//! runs never wait for it — the outbox is the buffer. Its state is shared
//! ([`RelayHealth`]) for readiness and `/metrics`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream::{self, message::PublishMessage};
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::store::{Db, DbError, outbox};

/// How the relay runs.
#[derive(Debug, Clone)]
pub struct RelayConfig {
    /// `nats://host:port`.
    pub nats_url: String,
    /// The JetStream stream (created when missing).
    pub stream: String,
    /// Subjects are `<prefix>.<tenant>.<type>`.
    pub subject_prefix: String,
    /// Events claimed at once.
    pub batch: usize,
    /// Publishes awaiting their acknowledgement at once (per lane).
    pub window: usize,
    /// Batches in flight at once, each of another tenant (PostgreSQL only).
    pub lanes: usize,
    /// Pause when the outbox is empty.
    pub idle: Duration,
    /// Published events are deleted after this long.
    pub retention: Duration,
    /// Return once the outbox is empty, and on the first failure instead of
    /// retrying (a one-shot drain).
    pub drain: bool,
}

impl Default for RelayConfig {
    fn default() -> Self {
        Self {
            nats_url: "nats://127.0.0.1:4222".into(),
            stream: "CASEOPS".into(),
            subject_prefix: "caseops".into(),
            batch: 1000,
            window: 1024,
            lanes: 2,
            idle: Duration::from_millis(20),
            retention: Duration::from_secs(7 * 24 * 3600),
            drain: false,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    #[error("cannot reach NATS at `{url}`: {message}")]
    Connect { url: String, message: String },
    #[error("cannot create or open the JetStream stream `{stream}`: {message}")]
    Stream { stream: String, message: String },
    #[error("JetStream did not acknowledge event `{event_id}`: {message}")]
    Publish { event_id: String, message: String },
    #[error(transparent)]
    Db(#[from] DbError),
}

/// What the relay has done and what it is waiting for, shared with readiness and
/// `/metrics`.
#[derive(Debug, Default)]
pub struct RelayHealth {
    inner: Mutex<HealthState>,
}

#[derive(Debug, Default, Clone)]
struct HealthState {
    published: u64,
    duplicates: u64,
    /// Why the relay cannot publish now (`None` while it can).
    problem: Option<String>,
    connected: bool,
}

impl RelayHealth {
    fn update(&self, f: impl FnOnce(&mut HealthState)) {
        f(&mut self.inner.lock().unwrap_or_else(|e| e.into_inner()));
    }

    /// Events published and, of those, ones JetStream already had.
    pub fn counts(&self) -> (u64, u64) {
        let s = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        (s.published, s.duplicates)
    }

    /// `Ok` while the relay can publish; else why not.
    pub fn ready(&self) -> Result<(), String> {
        let s = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        match (&s.problem, s.connected) {
            (Some(p), _) => Err(p.clone()),
            (None, false) => Err("the relay has not connected to NATS yet".into()),
            (None, true) => Ok(()),
        }
    }

    pub fn as_json(&self) -> Value {
        let s = self.inner.lock().unwrap_or_else(|e| e.into_inner()).clone();
        json!({ "published": s.published, "duplicates": s.duplicates, "problem": s.problem })
    }
}

/// Commits of this process's runs: an idle relay claims again at once instead of
/// at the end of its poll interval.
pub type Wake = tokio::sync::broadcast::Receiver<Arc<str>>;

/// Runs the relay until `stop` turns true: connects (retrying), makes sure the
/// stream exists, then publishes whatever the outbox holds.
pub async fn run(
    db: Db,
    config: RelayConfig,
    health: Arc<RelayHealth>,
    mut stop: watch::Receiver<bool>,
    wake: Option<Wake>,
) -> Result<(), RelayError> {
    let mut backoff = Backoff::default();
    let context = loop {
        match connect(&config).await {
            Ok(c) => break c,
            Err(e) if config.drain => return Err(e),
            Err(e) => {
                tracing::warn!(error = %e, "relay cannot start publishing; retrying");
                health.update(|s| s.problem = Some(e.to_string()));
                if sleep_or_stop(backoff.next(), &mut stop).await {
                    return Ok(());
                }
            }
        }
    };
    health.update(|s| {
        s.connected = true;
        s.problem = None;
    });
    // PostgreSQL: lanes claim different tenants (the advisory lock keeps each
    // tenant in one lane), so one lane's database work overlaps another's
    // publishing. SQLite: a claim locks nothing, so one lane.
    let lanes = match db.dialect {
        crate::store::Dialect::Postgres => config.lanes.max(1),
        crate::store::Dialect::Sqlite => 1,
    };
    tracing::info!(stream = %config.stream, nats = %config.nats_url, lanes, "relay publishing");
    let results = futures_util::future::join_all((0..lanes).map(|lane| {
        let wake = wake.as_ref().map(Wake::resubscribe);
        publish_lane(
            &db,
            &context,
            &config,
            &health,
            stop.clone(),
            wake,
            lane == 0,
        )
    }))
    .await;
    results.into_iter().collect()
}

/// Claims and publishes batches until `stop` (or, draining, until a claim finds
/// nothing); the first lane also prunes.
async fn publish_lane(
    db: &Db,
    context: &jetstream::Context,
    config: &RelayConfig,
    health: &RelayHealth,
    mut stop: watch::Receiver<bool>,
    mut wake: Option<Wake>,
    prunes: bool,
) -> Result<(), RelayError> {
    let mut backoff = Backoff::default();
    let mut last_prune = std::time::Instant::now() - Duration::from_secs(3600);
    loop {
        if *stop.borrow() {
            return Ok(());
        }
        if prunes && last_prune.elapsed() > Duration::from_secs(60) {
            last_prune = std::time::Instant::now();
            match outbox::prune(db, config.retention.as_millis() as i64).await {
                Ok(0) => {}
                Ok(n) => tracing::info!(events = n, "pruned published outbox events"),
                Err(e) => tracing::warn!(error = %e, "pruning the outbox failed"),
            }
        }
        match relay_batch(db, context, config, health).await {
            Ok(0) if config.drain => return Ok(()),
            Err(e) if config.drain => return Err(e),
            Ok(0) => {
                if idle(config.idle, &mut stop, &mut wake).await {
                    return Ok(());
                }
            }
            Ok(_) => backoff = Backoff::default(),
            Err(e) => {
                tracing::warn!(error = %e, "relay batch failed; backing off");
                health.update(|s| s.problem = Some(e.to_string()));
                if sleep_or_stop(backoff.next(), &mut stop).await {
                    return Ok(());
                }
            }
        }
    }
}

async fn connect(config: &RelayConfig) -> Result<jetstream::Context, RelayError> {
    let client = async_nats::ConnectOptions::new()
        .name("caseops-relay")
        .connection_timeout(Duration::from_secs(2))
        .connect(config.nats_url.as_str())
        .await
        .map_err(|e| RelayError::Connect {
            url: config.nats_url.clone(),
            message: e.to_string(),
        })?;
    let mut context = jetstream::new(client);
    context.set_timeout(Duration::from_secs(3));
    context
        .get_or_create_stream(jetstream::stream::Config {
            name: config.stream.clone(),
            subjects: vec![format!("{}.>", config.subject_prefix)],
            storage: jetstream::stream::StorageType::File,
            duplicate_window: Duration::from_secs(120),
            ..Default::default()
        })
        .await
        .map_err(|e| RelayError::Stream {
            stream: config.stream.clone(),
            message: e.to_string(),
        })?;
    Ok(context)
}

/// Claims, publishes and marks one batch; returns how many events it published.
async fn relay_batch(
    db: &Db,
    context: &jetstream::Context,
    config: &RelayConfig,
    health: &RelayHealth,
) -> Result<usize, RelayError> {
    let claim = outbox::claim(db, config.batch).await?;
    if claim.events.is_empty() {
        claim.finish(db, 0).await?;
        return Ok(0);
    }
    let (acked, failure) = publish_in_order(context, config, &claim.events, health).await;
    claim.finish(db, acked).await?;
    crate::metrics::outbox_published(acked as u64);
    match failure {
        Some(e) => Err(e),
        None => {
            health.update(|s| s.problem = None);
            Ok(acked)
        }
    }
}

/// Publishes `events` with up to `window` acknowledgements outstanding; returns how
/// many, from the first, JetStream acknowledged, and the first failure. Nothing is
/// handed to a disconnected client: it would send it after reconnecting, possibly
/// ahead of an earlier event lost with the old connection.
async fn publish_in_order(
    context: &jetstream::Context,
    config: &RelayConfig,
    events: &[outbox::PendingEvent],
    health: &RelayHealth,
) -> (usize, Option<RelayError>) {
    let mut acked = 0;
    let mut pending = std::collections::VecDeque::new();
    let failed = |e: &outbox::PendingEvent, message: String| RelayError::Publish {
        event_id: e.event_id.clone(),
        message,
    };
    for (i, event) in events.iter().enumerate() {
        let subject =
            crate::event_types::subject(&config.subject_prefix, &event.tenant_id, &event.topic);
        let message = PublishMessage::build()
            .payload(event.payload.clone().into_bytes().into())
            .message_id(&event.event_id);
        if context.client().connection_state() != async_nats::connection::State::Connected {
            return (acked, Some(failed(event, "NATS is disconnected".into())));
        }
        match context.send_publish(subject, message).await {
            Ok(ack) => pending.push_back((i, ack)),
            Err(e) => return (acked, Some(failed(event, e.to_string()))),
        }
        while pending.len() >= config.window.max(1)
            || (i + 1 == events.len() && !pending.is_empty())
        {
            let (j, ack) = pending.pop_front().expect("not empty");
            match ack.await {
                Ok(a) => {
                    acked = j + 1;
                    health.update(|s| {
                        s.published += 1;
                        s.duplicates += u64::from(a.duplicate);
                    });
                }
                Err(e) => return (acked, Some(failed(&events[j], e.to_string()))),
            }
        }
    }
    (acked, None)
}

/// Doubling from 100 ms to 5 s.
#[derive(Debug)]
struct Backoff(Duration);

impl Default for Backoff {
    fn default() -> Self {
        Self(Duration::from_millis(100))
    }
}

impl Backoff {
    fn next(&mut self) -> Duration {
        let now = self.0;
        self.0 = (self.0 * 2).min(Duration::from_secs(5));
        now
    }
}

/// Waits for `d`, a commit (`wake`) or `stop`; true when stopping.
async fn idle(d: Duration, stop: &mut watch::Receiver<bool>, wake: &mut Option<Wake>) -> bool {
    let Some(commits) = wake else {
        return sleep_or_stop(d, stop).await;
    };
    tokio::select! {
        _ = tokio::time::sleep(d) => *stop.borrow(),
        _ = stop.changed() => true,
        got = commits.recv() => {
            if matches!(got, Err(tokio::sync::broadcast::error::RecvError::Closed)) {
                // The runs are gone (shutting down): poll from now on.
                *wake = None;
            }
            *stop.borrow()
        }
    }
}

/// Sleeps for `d` unless `stop` turns true first (then returns true).
async fn sleep_or_stop(d: Duration, stop: &mut watch::Receiver<bool>) -> bool {
    tokio::select! {
        _ = tokio::time::sleep(d) => *stop.borrow(),
        _ = stop.changed() => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_five_seconds() {
        let mut b = Backoff::default();
        let seen: Vec<u64> = (0..8).map(|_| b.next().as_millis() as u64).collect();
        assert_eq!(seen, [100, 200, 400, 800, 1600, 3200, 5000, 5000]);
    }
}
