//! The host's metrics, recorded through the `metrics` facade and exposed as
//! Prometheus text at `/metrics`. The runtime records its own (tool calls,
//! planner rounds, authorization decisions, retries: `caseops_runtime::telemetry`)
//! into the same recorder.

use std::sync::OnceLock;
use std::time::Duration;

use caseops_runtime::Outcome;
use caseops_runtime::telemetry::names as runtime;
use metrics::{
    Unit, counter, describe_counter, describe_gauge, describe_histogram, gauge, histogram,
};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

const RUNS_STARTED: &str = "caseops_runs_started_total";
const RUNS_REPLAYED: &str = "caseops_runs_replayed_total";
const REQUESTS_ASYNC: &str = "caseops_run_requests_async_total";
const RUN_REQUEST_DURATION: &str = "caseops_run_request_duration_seconds";
const RUNS_FINISHED: &str = "caseops_runs_finished_total";
const RUN_DURATION: &str = "caseops_run_duration_seconds";
const RUN_STEPS: &str = "caseops_run_steps_total";
const RECOVERIES: &str = "caseops_run_recoveries_total";
const LEASE_TAKEOVERS: &str = "caseops_lease_takeovers_total";
const COMMIT_DURATION: &str = "caseops_commit_duration_seconds";
const RUNS_IN_FLIGHT: &str = "caseops_runs_in_flight";
const WORKERS_BUSY: &str = "caseops_workers_busy";
const WORKERS: &str = "caseops_workers";
const OUTBOX_PUBLISHED: &str = "caseops_outbox_published_total";
const OUTBOX_BACKLOG: &str = "caseops_outbox_backlog_events";
const OUTBOX_OLDEST: &str = "caseops_outbox_oldest_pending_age_seconds";

/// Bucket bounds in seconds, from a fast tool call (0.1 ms) to a long run (2 min).
const BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0, 30.0, 60.0, 120.0,
];

/// How often queued histogram samples are folded into their buckets.
const UPKEEP_EVERY: Duration = Duration::from_secs(2);

/// The process's one recorder: the first host installs it, later ones (tests
/// that start several hosts in one process) share it.
static RECORDER: OnceLock<Option<PrometheusHandle>> = OnceLock::new();

fn install() -> Option<PrometheusHandle> {
    RECORDER
        .get_or_init(|| {
            let recorder = PrometheusBuilder::new()
                .set_buckets(BUCKETS)
                .ok()?
                .build_recorder();
            let handle = recorder.handle();
            // Another recorder installed by an embedding program wins; `/metrics`
            // then says so instead of showing an empty page.
            metrics::set_global_recorder(recorder).ok()?;
            describe();
            // Histogram samples wait in a queue until they are folded into their
            // buckets; without a scrape that queue grows with every run (3.6 MB over
            // 10,000 runs in service/tests/memory.rs), so fold them every few seconds.
            let upkeep = handle.clone();
            let _ = std::thread::Builder::new()
                .name("caseops-metrics-upkeep".into())
                .spawn(move || {
                    loop {
                        std::thread::sleep(UPKEEP_EVERY);
                        upkeep.run_upkeep();
                    }
                });
            Some(handle)
        })
        .clone()
}

fn describe() {
    describe_counter!(
        OUTBOX_PUBLISHED,
        "Outbox events this process's relay published and JetStream acknowledged."
    );
    describe_gauge!(
        OUTBOX_BACKLOG,
        "Outbox events not yet published, across every relay."
    );
    describe_gauge!(
        OUTBOX_OLDEST,
        Unit::Seconds,
        "Age of the oldest unpublished outbox event (0 when none)."
    );
    describe_counter!(RUNS_STARTED, "Agent runs created.");
    describe_counter!(RUNS_REPLAYED, "Run requests answered from an existing run.");
    describe_counter!(
        REQUESTS_ASYNC,
        "Run requests answered 202 before their run finished."
    );
    describe_histogram!(
        RUN_REQUEST_DURATION,
        Unit::Seconds,
        "Time to answer a run request."
    );
    describe_counter!(
        RUNS_FINISHED,
        "Runs finished by this process, by status and stop reason."
    );
    describe_histogram!(
        RUN_DURATION,
        Unit::Seconds,
        "From a run's creation to its end, by status."
    );
    describe_counter!(RUN_STEPS, "Tool steps of runs finished by this process.");
    describe_counter!(
        RECOVERIES,
        "Runs this process resumed from a committed checkpoint."
    );
    describe_counter!(
        LEASE_TAKEOVERS,
        "Runs claimed after another process's lease expired."
    );
    describe_histogram!(
        COMMIT_DURATION,
        Unit::Seconds,
        "One run commit, by database backend."
    );
    describe_gauge!(
        RUNS_IN_FLIGHT,
        "Runs not yet finished in the database (all replicas)."
    );
    describe_gauge!(WORKERS_BUSY, "Run drivers busy in this process.");
    describe_gauge!(WORKERS, "Run drivers this process may run at once.");
    describe_histogram!(
        runtime::TOOL_CALL_DURATION,
        Unit::Seconds,
        "One tool call with its retries, by tool and outcome."
    );
    describe_histogram!(
        runtime::PLANNER_DURATION,
        Unit::Seconds,
        "One planner round, by outcome."
    );
    describe_counter!(
        runtime::AUTHORIZATION_DECISIONS,
        "Authorization decisions by tool, decision and reason."
    );
    describe_counter!(
        runtime::RETRIES,
        "Tool attempts repeated after a transient error, by tool and error class."
    );
}

/// The host's view of the recorder: what it counts and how it renders.
#[derive(Debug, Clone)]
pub struct Metrics {
    handle: Option<PrometheusHandle>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self { handle: install() }
    }
}

impl Metrics {
    pub fn run_started(&self) {
        counter!(RUNS_STARTED).increment(1);
    }

    pub fn run_replayed(&self) {
        counter!(RUNS_REPLAYED).increment(1);
    }

    /// A request answered 202 before its run finished.
    pub fn answered_async(&self) {
        counter!(REQUESTS_ASYNC).increment(1);
    }

    pub fn request_served(&self, elapsed: Duration) {
        histogram!(RUN_REQUEST_DURATION).record(elapsed);
    }

    /// A run this process drove reached its end, `lasted` after it was created.
    pub fn run_finished(&self, outcome: &Outcome, lasted: Duration) {
        counter!(RUN_STEPS).increment(u64::from(outcome.step_count));
        let reason = outcome.stop_reason.clone().unwrap_or_else(|| "none".into());
        counter!(RUNS_FINISHED, "status" => outcome.status.clone(), "stop_reason" => reason)
            .increment(1);
        histogram!(RUN_DURATION, "status" => outcome.status.clone()).record(lasted);
    }

    pub fn run_recovered(&self) {
        counter!(RECOVERIES).increment(1);
    }

    /// The Prometheus text exposition (format 0.0.4), with the gauges read now.
    pub fn render(&self, in_flight: Option<u64>, workers_busy: usize, workers: usize) -> String {
        if let Some(n) = in_flight {
            gauge!(RUNS_IN_FLIGHT).set(n as f64);
        }
        gauge!(WORKERS_BUSY).set(workers_busy as f64);
        gauge!(WORKERS).set(workers as f64);
        self.render_exposition()
    }

    /// The exposition as recorded, for a process that runs no runs (a relay).
    pub fn render_exposition(&self) -> String {
        match &self.handle {
            Some(handle) => handle.render(),
            None => "# another metrics recorder is installed in this process\n".into(),
        }
    }
}

/// A `/metrics` answer: `text` as Prometheus text format 0.0.4.
pub fn exposition(text: String) -> axum::response::Response {
    use axum::response::IntoResponse;
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4",
        )],
        text,
    )
        .into_response()
}

/// Reads the outbox's backlog into its gauges (at scrape time); a database that
/// does not answer leaves the last values.
pub(crate) async fn refresh_outbox_backlog(db: &crate::store::Db) {
    if let Ok((events, oldest)) = crate::store::outbox::backlog(db).await {
        outbox_backlog(events, oldest);
    }
}

/// The outbox's backlog, read from the database at scrape time.
fn outbox_backlog(events: u64, oldest_age_ms: Option<i64>) {
    gauge!(OUTBOX_BACKLOG).set(events as f64);
    gauge!(OUTBOX_OLDEST).set(oldest_age_ms.unwrap_or(0) as f64 / 1000.0);
}

pub(crate) fn outbox_published(n: u64) {
    counter!(OUTBOX_PUBLISHED).increment(n);
}

/// The store's measurements (it holds no [`Metrics`]: the recorder is global).
pub(crate) fn leases_taken_over(n: u64) {
    counter!(LEASE_TAKEOVERS).increment(n);
}

pub(crate) fn committed(backend: &'static str, elapsed: Duration) {
    histogram!(COMMIT_DURATION, "backend" => backend).record(elapsed);
}
