//! Commit-to-consumer latency of relayed events, for `caseops bench --events-from`.
//!
//! A JetStream consumer (ordered, new messages only) on the relay's stream reads
//! every event while the load runs and records how long after its `time` — set in
//! the transaction that committed it — it arrived. `time` has millisecond
//! precision, so each figure may read up to 1 ms long.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_nats::jetstream::{self, consumer::DeliverPolicy};
use futures_util::StreamExt;
use hdrhistogram::Histogram;
use tokio::sync::watch;

/// What the consumer saw of events committed while the load was measured.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct EventLatency {
    pub received: u64,
    pub p50_ms: f64,
    pub p95_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

/// A consumer reading in the background; [`EventWatch::finish`] stops it.
pub struct EventWatch {
    /// Events committed before this (ms since the epoch) are not counted; `i64::MAX`
    /// until the measurement starts.
    since_ms: Arc<AtomicI64>,
    until_ms: Arc<AtomicI64>,
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<Histogram<u64>>,
}

fn now_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or_default()
}

/// Subscribes to `stream` on `nats_url`, from its next message on.
pub async fn watch(nats_url: &str, stream: &str) -> Result<EventWatch, String> {
    let client = async_nats::ConnectOptions::new()
        .name("caseops-bench")
        .connection_timeout(Duration::from_secs(2))
        .connect(nats_url)
        .await
        .map_err(|e| format!("cannot reach NATS at `{nats_url}`: {e}"))?;
    let js = jetstream::new(client);
    // A relay that has just started may not have created its stream yet.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let stream_handle = loop {
        match js.get_stream(stream).await {
            Ok(s) => break s,
            Err(_) if std::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await
            }
            Err(e) => {
                return Err(format!(
                    "cannot open the JetStream stream `{stream}` (is `serve --relay` running?): {e}"
                ));
            }
        }
    };
    let consumer = stream_handle
        .create_consumer(jetstream::consumer::pull::OrderedConfig {
            deliver_policy: DeliverPolicy::New,
            ..Default::default()
        })
        .await
        .map_err(|e| format!("cannot create a consumer on `{stream}`: {e}"))?;
    let mut messages = consumer
        .messages()
        .await
        .map_err(|e| format!("cannot read `{stream}`: {e}"))?;
    let since_ms = Arc::new(AtomicI64::new(i64::MAX));
    let until_ms = Arc::new(AtomicI64::new(i64::MAX));
    let (stop, mut stopped) = watch::channel(false);
    let (since, until) = (since_ms.clone(), until_ms.clone());
    let task = tokio::spawn(async move {
        let mut hist = Histogram::<u64>::new_with_bounds(1, 600_000_000, 3).expect("valid bounds");
        loop {
            let message = tokio::select! {
                m = messages.next() => m,
                _ = stopped.changed() => break,
            };
            let Some(Ok(message)) = message else { break };
            let arrived = now_us();
            let committed = serde_json::from_slice::<serde_json::Value>(&message.payload)
                .ok()
                .and_then(|v| {
                    v["time"]
                        .as_str()
                        .and_then(caseops_host::event_types::parse_rfc3339_ms)
                });
            if let Some(at) = committed
                && at >= since.load(Ordering::Relaxed)
                && at <= until.load(Ordering::Relaxed)
            {
                let _ = hist.record((arrived - at * 1000).max(1) as u64);
            }
        }
        hist
    });
    Ok(EventWatch {
        since_ms,
        until_ms,
        stop,
        task,
    })
}

impl EventWatch {
    /// Counts events committed from now on.
    pub fn start(&self) {
        self.since_ms.store(now_us() / 1000, Ordering::Relaxed);
    }

    /// Stops counting events committed from now on, gives the ones already
    /// committed `settle` to arrive, and reports.
    pub async fn finish(self, settle: Duration) -> Result<EventLatency, String> {
        self.until_ms.store(now_us() / 1000, Ordering::Relaxed);
        tokio::time::sleep(settle).await;
        let _ = self.stop.send(true);
        let hist = self.task.await.map_err(|e| e.to_string())?;
        let ms = |q: f64| hist.value_at_quantile(q) as f64 / 1000.0;
        Ok(EventLatency {
            received: hist.len(),
            p50_ms: ms(0.5),
            p95_ms: ms(0.95),
            p99_ms: ms(0.99),
            max_ms: hist.max() as f64 / 1000.0,
        })
    }
}
