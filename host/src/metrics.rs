//! The service's counters, exposed as Prometheus text at `/metrics`.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use caseops_runtime::{LedgerRow, Outcome};

#[derive(Debug, Default)]
pub struct Metrics {
    runs_started: AtomicU64,
    runs_replayed: AtomicU64,
    runs_by_status: Mutex<HashMap<String, u64>>,
    /// `(tool, outcome)` → count, from the ledgers of finished runs.
    tool_calls: Mutex<HashMap<(String, String), u64>>,
    steps: AtomicU64,
    run_latency_ms_sum: AtomicU64,
    requests_answered_async: AtomicU64,
}

impl Metrics {
    pub fn run_started(&self) {
        self.runs_started.fetch_add(1, Ordering::Relaxed);
    }

    pub fn run_replayed(&self) {
        self.runs_replayed.fetch_add(1, Ordering::Relaxed);
    }

    /// A request answered 202 before its run finished.
    pub fn answered_async(&self) {
        self.requests_answered_async.fetch_add(1, Ordering::Relaxed);
    }

    pub fn request_served(&self, elapsed: std::time::Duration) {
        self.run_latency_ms_sum
            .fetch_add(elapsed.as_millis() as u64, Ordering::Relaxed);
    }

    /// A run this process drove reached its end.
    pub fn run_finished(&self, outcome: &Outcome, ledger: &[LedgerRow]) {
        self.steps
            .fetch_add(u64::from(outcome.step_count), Ordering::Relaxed);
        *self
            .runs_by_status
            .lock()
            .expect("metrics lock")
            .entry(outcome.status.clone())
            .or_default() += 1;
        let mut calls = self.tool_calls.lock().expect("metrics lock");
        for row in ledger {
            *calls
                .entry((row.tool_name.clone(), row.status.as_str().to_string()))
                .or_default() += 1;
        }
    }

    /// The Prometheus text exposition (format 0.0.4).
    pub fn render(&self) -> String {
        let mut out = String::new();
        let mut counter = |name: &str, help: &str, value: u64| {
            out.push_str(&format!(
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {value}\n"
            ));
        };
        counter(
            "caseops_runs_started_total",
            "Agent runs created.",
            self.runs_started.load(Ordering::Relaxed),
        );
        counter(
            "caseops_runs_replayed_total",
            "Requests answered from an existing run.",
            self.runs_replayed.load(Ordering::Relaxed),
        );
        counter(
            "caseops_run_requests_async_total",
            "Run requests answered 202 before their run finished.",
            self.requests_answered_async.load(Ordering::Relaxed),
        );
        counter(
            "caseops_run_steps_total",
            "Tool steps of runs finished by this process.",
            self.steps.load(Ordering::Relaxed),
        );
        counter(
            "caseops_run_latency_ms_sum",
            "Milliseconds spent serving run requests.",
            self.run_latency_ms_sum.load(Ordering::Relaxed),
        );
        out.push_str("# HELP caseops_runs_finished_total Runs finished by this process, by terminal status.\n# TYPE caseops_runs_finished_total counter\n");
        let mut by: Vec<(String, u64)> = self
            .runs_by_status
            .lock()
            .expect("metrics lock")
            .iter()
            .map(|(k, v)| (k.clone(), *v))
            .collect();
        by.sort();
        for (status, n) in by {
            out.push_str(&format!(
                "caseops_runs_finished_total{{status=\"{status}\"}} {n}\n"
            ));
        }
        out.push_str("# HELP caseops_tool_calls_total Tool calls by tool and outcome.\n# TYPE caseops_tool_calls_total counter\n");
        let mut calls: Vec<((String, String), u64)> = self
            .tool_calls
            .lock()
            .expect("metrics lock")
            .iter()
            .map(|(k, v)| (k.clone(), *v))
            .collect();
        calls.sort();
        for ((tool, outcome), n) in calls {
            out.push_str(&format!(
                "caseops_tool_calls_total{{tool=\"{tool}\",outcome=\"{outcome}\"}} {n}\n"
            ));
        }
        out
    }
}
