//! Run workers: a bounded pool in each process that drives runs to their end.
//!
//! A run is owned by a worker, never by the HTTP request that started it: the request
//! records the run, hands it here and only waits for it, so a client that gives up
//! changes nothing about its run. Workers also claim *due* runs — runs whose lease
//! expired (their replica died), was released (their replica shut down or its driver
//! hit a transient error), or that never got a checkpoint — in this process and, on
//! PostgreSQL, across replicas (`FOR UPDATE SKIP LOCKED`).
//!
//! Every driver task is owned by a [`TaskTracker`]; its lease heartbeat is polled
//! inside the driver's own future ([`SqlRunStore::while_leased`]), so nothing renews a
//! lease after its driver is gone.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use std::future::Future;
use std::pin::Pin;

use caseops_runtime::store::StoreError;
use caseops_runtime::{ContractBundle, Engine, Outcome, Planner, RunSpec, RuntimeError};
use tokio::sync::Semaphore;
use tokio::task::AbortHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use crate::mcp::client::McpClient;
use crate::metrics::Metrics;
use crate::store::runs::{RunRecord, RunSignals, Settlement, SqlRunStore};
use crate::store::{DbError, now_ms};

/// After a driver fails for a reason other than a lost lease (the database went
/// away mid-run, say), the run is released for a retry this much later.
const RETRY_AFTER_FAILURE_MS: i64 = 1_000;

/// How often a waiting request re-reads a run that another replica drives (in
/// this process, changes wake it at once).
const FOREIGN_POLL: Duration = Duration::from_millis(200);

/// A run being driven, to its end or its hand-over.
pub type Driving<'a> = Pin<Box<dyn Future<Output = Result<Outcome, RuntimeError>> + Send + 'a>>;

/// The typed half of driving runs (one bundle's engine, a planner, the MCP client)
/// behind one object, so that the worker pool and the API are not generic over the
/// bundle.
pub trait DriveRuns: Send + Sync + 'static {
    /// Drives a new run from its spec.
    fn start<'a>(
        &'a self,
        spec: RunSpec,
        runs: &'a SqlRunStore,
        interrupt: &'a AtomicBool,
    ) -> Driving<'a>;
    /// Drives a run from its last committed checkpoint.
    fn resume<'a>(
        &'a self,
        run_id: &'a str,
        runs: &'a SqlRunStore,
        interrupt: &'a AtomicBool,
    ) -> Driving<'a>;
    /// Checks that the tool server lists exactly the compiled tools.
    fn check_tools(&self) -> Pin<Box<dyn Future<Output = Result<(), String>> + Send + '_>>;
    /// The agent's name (spans name it).
    fn agent(&self) -> &'static str;
}

/// What runs of bundle `B` are driven with.
pub struct Driver<B: ContractBundle, P> {
    pub engine: Engine<B>,
    pub planner: P,
    pub executor: McpClient<B>,
}

impl<B: ContractBundle, P: Planner + 'static> DriveRuns for Driver<B, P> {
    fn start<'a>(
        &'a self,
        spec: RunSpec,
        runs: &'a SqlRunStore,
        interrupt: &'a AtomicBool,
    ) -> Driving<'a> {
        Box::pin(self.engine.start_interruptible(
            spec,
            &self.planner,
            &self.executor,
            runs,
            interrupt,
        ))
    }

    fn resume<'a>(
        &'a self,
        run_id: &'a str,
        runs: &'a SqlRunStore,
        interrupt: &'a AtomicBool,
    ) -> Driving<'a> {
        Box::pin(self.engine.resume_interruptible(
            run_id,
            &self.planner,
            &self.executor,
            runs,
            interrupt,
        ))
    }

    fn check_tools(&self) -> Pin<Box<dyn Future<Output = Result<(), String>> + Send + '_>> {
        Box::pin(async move {
            self.executor
                .check_listing()
                .await
                .map_err(|e| e.to_string())
        })
    }

    fn agent(&self) -> &'static str {
        B::AGENT
    }
}

#[derive(Debug, Clone, Copy)]
pub struct WorkerConfig {
    /// Runs this process drives at once.
    pub workers: usize,
    /// How often idle workers look for due runs.
    pub claim_every: Duration,
}

impl WorkerConfig {
    /// A claim interval of a fifth of the lease (at most a second), so that a dead
    /// replica's runs are claimed within about 1.2 leases of its last heartbeat.
    pub fn for_lease(workers: usize, lease_ms: i64) -> Self {
        let every = (lease_ms / 5).clamp(50, 1_000) as u64;
        Self {
            workers: workers.max(1),
            claim_every: Duration::from_millis(every),
        }
    }
}

/// How a wait for a run ended.
#[derive(Debug)]
pub enum Waited {
    /// The run is terminal.
    Finished(RunRecord),
    /// The wait ran out (or this process is stopping) first; the run as it stands.
    Pending(RunRecord),
}

pub struct Workers {
    driver: Arc<dyn DriveRuns>,
    runs: SqlRunStore,
    metrics: Arc<Metrics>,
    slots: Arc<Semaphore>,
    workers: usize,
    tracker: TaskTracker,
    /// Drivers hand their runs over at their next step boundary once this is set.
    interrupt: Arc<AtomicBool>,
    /// Cancelled when the process stops: the claim loop ends, waits end early.
    stopping: CancellationToken,
    /// Runs driven in this process (one driver per run here; the lease guards
    /// across processes), with the handle to abort a driver that outstays the grace.
    local: std::sync::Mutex<HashMap<String, Option<AbortHandle>>>,
    signals: RunSignals,
    claim_every: Duration,
    /// Whether the MCP tool server answered its last check with the compiled
    /// listing: run requests are refused while it does not.
    mcp_ready: AtomicBool,
}

/// How often the MCP tool server is checked in the background.
const MCP_CHECK_EVERY: Duration = Duration::from_secs(2);
/// How long one check of the MCP tool server may take.
const MCP_CHECK_WITHIN: Duration = Duration::from_millis(900);

impl Workers {
    /// Creates the pool and starts its claim loop (owned by the pool's tracker).
    pub fn start(
        driver: impl DriveRuns,
        runs: SqlRunStore,
        metrics: Arc<Metrics>,
        signals: RunSignals,
        config: WorkerConfig,
    ) -> Arc<Self> {
        let workers = Arc::new(Self {
            driver: Arc::new(driver),
            runs,
            metrics,
            slots: Arc::new(Semaphore::new(config.workers)),
            workers: config.workers,
            tracker: TaskTracker::new(),
            interrupt: Arc::new(AtomicBool::new(false)),
            stopping: CancellationToken::new(),
            local: Default::default(),
            signals,
            claim_every: config.claim_every,
            mcp_ready: AtomicBool::new(true),
        });
        let looping = workers.clone();
        workers.tracker.spawn(looping.claim_loop());
        let checking = workers.clone();
        workers.tracker.spawn(checking.mcp_loop());
        workers
    }

    /// Checks the MCP tool server now (its listing must be the compiled one,
    /// within 900 ms) and remembers the answer for [`Workers::mcp_ready`].
    pub async fn check_mcp(&self) -> Result<(), String> {
        let checked = tokio::time::timeout(MCP_CHECK_WITHIN, self.driver.check_tools()).await;
        let result = match checked {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(e),
            Err(_) => Err("the mcp server did not answer within 900 ms".to_string()),
        };
        self.mcp_ready
            .store(result.is_ok(), std::sync::atomic::Ordering::Release);
        result
    }

    /// The MCP tool server's state at its last check.
    pub fn mcp_ready(&self) -> bool {
        self.mcp_ready.load(std::sync::atomic::Ordering::Acquire)
    }

    async fn mcp_loop(self: Arc<Self>) {
        loop {
            tokio::select! {
                () = self.stopping.cancelled() => return,
                () = tokio::time::sleep(MCP_CHECK_EVERY) => {}
            }
            let _ = self.check_mcp().await;
        }
    }

    pub fn runs(&self) -> &SqlRunStore {
        &self.runs
    }

    /// Whether the process is shutting down.
    pub fn is_stopping(&self) -> bool {
        self.stopping.is_cancelled()
    }

    pub fn stopping(&self) -> &CancellationToken {
        &self.stopping
    }

    pub fn signals(&self) -> &RunSignals {
        &self.signals
    }

    /// Drives a run this process holds the lease of, if a worker is free. `fresh`
    /// is the spec of a run this process has just created (it starts at once,
    /// without reading anything back). When no worker is free (or the process is
    /// stopping) the lease is released so that any replica's claim loop, this
    /// one's included, picks the run up.
    pub async fn hand_over(
        self: &Arc<Self>,
        run_id: &str,
        fresh: Option<RunSpec>,
    ) -> Result<(), DbError> {
        if !self.submit(run_id, fresh) {
            self.runs.release(run_id, 0).await?;
        }
        Ok(())
    }

    /// Starts a driver for `run_id` unless one runs here already; false when no
    /// worker is free or the process is stopping.
    fn submit(self: &Arc<Self>, run_id: &str, fresh: Option<RunSpec>) -> bool {
        if self.stopping.is_cancelled() {
            return false;
        }
        let mut local = self.local.lock().expect("worker table");
        if local.contains_key(run_id) {
            return true;
        }
        let Ok(permit) = self.slots.clone().try_acquire_owned() else {
            return false;
        };
        local.insert(run_id.to_string(), None);
        let me = self.clone();
        let id = run_id.to_string();
        // A run started by a request is a child of the request's span (and so of
        // its `traceparent`); a run claimed by the loop starts a trace of its own.
        let span = tracing::info_span!(
            parent: &tracing::Span::current(),
            "invoke_agent",
            otel.name = format!("invoke_agent {}", self.driver.agent()),
            gen_ai.operation.name = "invoke_agent",
            gen_ai.agent.name = self.driver.agent(),
            caseops.run.id = run_id,
            caseops.run.resumed = fresh.is_none(),
            caseops.run.status = tracing::field::Empty,
        );
        // Boxed: a run's driver is a future of several kilobytes, which the task
        // would otherwise hold inline and copy as it is spawned and as it ends.
        let handle = self.tracker.spawn(
            Box::pin(async move {
                me.drive(&id, fresh).await;
                me.local.lock().expect("worker table").remove(&id);
                drop(permit);
                me.signals.settled(&id);
            })
            .instrument(span),
        );
        // INVARIANT: the entry is still ours: the task removes it only after it
        // takes this same lock, which we hold.
        local.insert(run_id.to_string(), Some(handle.abort_handle()));
        true
    }

    async fn drive(&self, run_id: &str, fresh: Option<RunSpec>) {
        let (d, runs) = (&*self.driver, &self.runs);
        let began = std::time::Instant::now();
        let is_fresh = fresh.is_some();
        let start = |spec: RunSpec| d.start(spec, runs, &self.interrupt);
        let work = async {
            if let Some(spec) = fresh {
                return start(spec).await;
            }
            let resumed = d.resume(run_id, runs, &self.interrupt).await;
            if !matches!(resumed, Err(RuntimeError::NotFound(_))) {
                self.metrics.run_recovered();
            }
            match resumed {
                // Never committed a checkpoint: it starts from the beginning with
                // the spec recorded when it was created.
                Err(RuntimeError::NotFound(_)) => match runs.record(run_id).await {
                    Ok(Some(RunRecord {
                        spec: Some(spec), ..
                    })) => start(spec).await,
                    Ok(_) => Err(RuntimeError::NotFound(run_id.to_string())),
                    Err(e) => Err(StoreError::Unavailable(e.to_string()).into()),
                },
                other => other,
            }
        };
        match runs.while_leased(run_id, work).await {
            Some(Ok(outcome)) => {
                self.finished(&outcome, is_fresh.then(|| began.elapsed()))
                    .await
            }
            Some(Err(RuntimeError::Interrupted(_))) => {
                if let Err(e) = runs.release(run_id, 0).await {
                    tracing::warn!(
                        "caseops: releasing `{run_id}` failed (its lease will expire): {e}"
                    );
                }
            }
            // Parked for a person's decision: its commit let the lease go already.
            Some(Err(RuntimeError::AwaitingApproval(_))) => {
                tracing::info!(run_id, "run waits for an approval");
            }
            // Another replica took the run over; it is theirs now.
            None | Some(Err(RuntimeError::Store(StoreError::LeaseLost { .. }))) => {}
            Some(Err(e)) => {
                tracing::warn!("caseops: driving `{run_id}` failed; it will be retried: {e}");
                let _ = runs.release(run_id, RETRY_AFTER_FAILURE_MS).await;
            }
        }
    }

    /// Counts a finished run; `lasted` is known for a run this process created
    /// (it began here), otherwise read from the run's creation time.
    async fn finished(&self, outcome: &Outcome, lasted: Option<Duration>) {
        tracing::Span::current().record("caseops.run.status", outcome.status.as_str());
        let lasted = match lasted {
            Some(d) => d,
            None => match self.runs.record(&outcome.run_id).await {
                Ok(Some(r)) => {
                    Duration::from_millis(now_ms().saturating_sub(r.created_at).max(0) as u64)
                }
                _ => Duration::ZERO,
            },
        };
        self.metrics.run_finished(outcome, lasted);
    }

    /// Run drivers busy now, and how many may run at once.
    pub fn busy(&self) -> (usize, usize) {
        let available = self.slots.available_permits();
        (self.workers.saturating_sub(available), self.workers)
    }

    /// Claims due runs while workers are free, every `claim_every`, until stopped.
    async fn claim_loop(self: Arc<Self>) {
        let mut failing = false;
        let mut expired_at = std::time::Instant::now();
        loop {
            tokio::select! {
                () = self.stopping.cancelled() => return,
                () = tokio::time::sleep(self.claim_every) => {}
            }
            // Approvals nobody decided in time expire (about once a second), which
            // makes their runs due: the claim below picks them up.
            if expired_at.elapsed() >= Duration::from_secs(1) {
                expired_at = std::time::Instant::now();
                match crate::store::approvals::expire_due(&self.runs.db, 100).await {
                    Ok(0) => {}
                    Ok(n) => tracing::info!(expired = n, "approvals expired"),
                    Err(e) => tracing::warn!("caseops: expiring approvals failed: {e}"),
                }
            }
            let free = self.slots.available_permits();
            if free == 0 {
                continue;
            }
            match self.runs.claim_due(free as i64).await {
                Ok(ids) => {
                    failing = false;
                    for id in ids {
                        if let Err(e) = self.hand_over(&id, None).await {
                            tracing::warn!("caseops: handing `{id}` back failed: {e}");
                        }
                    }
                }
                // Said once per outage, not once per interval.
                Err(e) if !failing => {
                    failing = true;
                    tracing::warn!("caseops: claiming due runs failed (will keep trying): {e}");
                }
                Err(_) => {}
            }
        }
    }

    /// Waits until the run is terminal, at most `wait`, or until the process
    /// stops. Changes in this process wake the wait at once, and a commit here
    /// that ended or parked the run hands over what it wrote instead of the run
    /// being read back; a run driven by another replica is re-read every 200 ms.
    /// `settlement` must have been registered before `current` (the run as last
    /// read, if the caller has it) was read, so that no change falls between the
    /// two.
    pub async fn wait(
        &self,
        settlement: &Settlement,
        tenant: &str,
        run_id: &str,
        mut current: Option<RunRecord>,
        wait: Duration,
    ) -> Result<Waited, DbError> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let record = match current.take() {
                Some(r) => r,
                None => self
                    .runs
                    .get(tenant, run_id)
                    .await?
                    .ok_or_else(|| DbError::Corrupt {
                        table: "runs",
                        message: format!("run `{run_id}` vanished"),
                    })?,
            };
            if SqlRunStore::outcome_of(&record).is_some() {
                return Ok(Waited::Finished(record));
            }
            // Parked for a person: waiting longer here would only hold the client.
            if tokio::time::Instant::now() >= deadline || record.status == "waiting_approval" {
                return Ok(Waited::Pending(record));
            }
            tokio::select! {
                () = self.stopping.cancelled() => return Ok(Waited::Pending(record)),
                () = tokio::time::sleep_until(deadline) => {}
                () = tokio::time::sleep(FOREIGN_POLL) => {}
                written = settlement.settled() => {
                    // Settled by a commit here: it says what the row now holds,
                    // so the run need not be read back.
                    if let Some(written) = written {
                        current = Some(written.apply(record)?);
                    }
                }
            }
        }
    }

    /// Stops the pool: no more claims, drivers hand their runs over at their next
    /// step boundary; after `grace` the drivers still running are aborted. Then
    /// every lease this process holds is released, so other replicas resume its
    /// runs at once instead of after the lease.
    pub async fn shutdown(&self, grace: Duration) {
        self.stopping.cancel();
        self.interrupt
            .store(true, std::sync::atomic::Ordering::Release);
        self.tracker.close();
        if tokio::time::timeout(grace, self.tracker.wait())
            .await
            .is_err()
        {
            let handles: Vec<AbortHandle> = self
                .local
                .lock()
                .expect("worker table")
                .values()
                .flatten()
                .cloned()
                .collect();
            tracing::warn!(
                "caseops: {} runs outlasted the shutdown grace; handing them over mid-step",
                handles.len()
            );
            for h in handles {
                h.abort();
            }
            let _ = tokio::time::timeout(Duration::from_secs(2), self.tracker.wait()).await;
        }
        match self.runs.release_all().await {
            Ok(0) => {}
            Ok(n) => tracing::info!("caseops: released {n} runs for other replicas"),
            Err(e) => tracing::warn!("caseops: releasing leases failed (they will expire): {e}"),
        }
    }
}
