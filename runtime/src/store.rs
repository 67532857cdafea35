//! Durable runs: the `RunStore` trait and an in-memory implementation.
//!
//! The runtime hands the store one [`Batch`] per commit point (before each external planner
//! call, before each tool execution, at the terminal state). Everything in a batch
//! belongs in one transaction; every checkpoint row is still written.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::run::{Checkpoint, LedgerRow, Outcome, RunSpec};

/// Why the runtime commits now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommitPoint {
    /// The state is durable before the planner (an external call) runs.
    BeforePlanner,
    /// The state is durable before a tool (an external call) runs.
    BeforeTool { read_only: bool },
    /// The run ended; the outcome is durable with its terminal checkpoint.
    Terminal,
    /// The driver stops between steps (its process shuts down) and hands the run
    /// over: what it did since its last commit is kept for the next driver.
    Suspend,
    /// A call waits for a person's approval: the run is parked (no driver holds it)
    /// until the decision makes it due again.
    AwaitingApproval,
}

impl CommitPoint {
    /// Whether the commit must reach stable storage before the store returns.
    ///
    /// Every commit is atomic and visible at once. But what follows a commit before
    /// the planner or before a read-only tool may safely happen twice, so a store
    /// may let that commit reach the disk a moment later (PostgreSQL's
    /// `synchronous_commit = off`): if the database crashes and loses it, recovery
    /// resumes from the last flushed checkpoint and repeats the step, as it repeats
    /// an interrupted read anyway. Before a write and at the terminal state it must
    /// be flushed; a flushed commit also flushes every commit before it.
    pub fn must_flush(self) -> bool {
        match self {
            CommitPoint::BeforePlanner | CommitPoint::Suspend => false,
            CommitPoint::BeforeTool { read_only } => !read_only,
            CommitPoint::Terminal | CommitPoint::AwaitingApproval => true,
        }
    }
}

/// What one commit point writes.
#[derive(Debug, Clone, PartialEq)]
pub struct Batch {
    pub run_id: String,
    pub point: CommitPoint,
    /// What the run was asked, on its first commit only: the store keeps it for
    /// recovery (snapshots do not repeat it). A store that recorded the spec when
    /// the run was created may ignore it.
    pub spec: Option<RunSpec>,
    pub checkpoints: Vec<Checkpoint>,
    /// Ledger rows to insert or update (by `tool_call_id`).
    pub ledger: Vec<LedgerRow>,
    /// The run's current state name and step count, for the run record.
    pub state: String,
    pub step_count: u32,
    pub outcome: Option<Outcome>,
    /// The approval this commit asks for ([`CommitPoint::AwaitingApproval`] only).
    pub approval: Option<ApprovalRequest>,
}

/// What a person is asked to approve: one exact call of one run.
#[derive(Debug, Clone, PartialEq)]
pub struct ApprovalRequest {
    pub approval_id: String,
    pub tool_call_id: String,
    pub tool_name: String,
    /// The model-visible arguments, exactly as they will be executed.
    pub arguments: serde_json::Value,
    pub fingerprint: String,
    /// Who may approve, from the tool contract's `approval`.
    pub approver_role: String,
    pub expires_at_ms: u64,
}

/// Where an approval stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApprovalStatus {
    Pending,
    Approved,
    Rejected,
    Expired,
}

impl ApprovalStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalStatus::Pending => "pending",
            ApprovalStatus::Approved => "approved",
            ApprovalStatus::Rejected => "rejected",
            ApprovalStatus::Expired => "expired",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "pending" => ApprovalStatus::Pending,
            "approved" => ApprovalStatus::Approved,
            "rejected" => ApprovalStatus::Rejected,
            "expired" => ApprovalStatus::Expired,
            _ => return None,
        })
    }
}

/// The latest approval of a run, as recorded: what it binds and its status.
#[derive(Debug, Clone, PartialEq)]
pub struct ApprovalRecord {
    pub approval_id: String,
    pub tool_call_id: String,
    pub fingerprint: String,
    pub status: ApprovalStatus,
}

/// A run as the store holds it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StoredRun {
    /// What the run was asked (recovery resumes it with this spec).
    pub spec: Option<RunSpec>,
    pub checkpoints: Vec<Checkpoint>,
    pub ledger: Vec<LedgerRow>,
    pub outcome: Option<Outcome>,
    /// The run's latest approval, if it ever asked for one.
    pub approval: Option<ApprovalRecord>,
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("checkpoint sequence {got} of run `{run_id}` does not follow {last}")]
    SequenceGap { run_id: String, last: u64, got: u64 },
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// Another driver holds the run now (this one's lease expired and was taken
    /// over); nothing of the batch was written and this driver must stop.
    #[error("run `{run_id}` is driven elsewhere: this driver lost its lease")]
    LeaseLost { run_id: String },
}

pub trait RunStore: Send + Sync {
    /// Writes a batch atomically: all of it or none of it.
    fn commit(&self, batch: Batch) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Reads what was committed for a run.
    fn load(
        &self,
        run_id: &str,
    ) -> impl Future<Output = Result<Option<StoredRun>, StoreError>> + Send;

    /// Whether a commit waits on another process (a database server across a
    /// socket). The runtime then sends a read-only call while its commit is under
    /// way instead of after it, which takes that round trip out of the run's
    /// latency. A store that commits in-process gains nothing by it.
    fn commits_remotely(&self) -> bool {
        false
    }
}

/// Keeps runs in memory; counts commits (for tests and benchmarks).
#[derive(Debug, Default)]
pub struct MemoryStore {
    runs: Mutex<HashMap<String, StoredRun>>,
    commits: AtomicUsize,
}

impl MemoryStore {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn commits(&self) -> usize {
        self.commits.load(Ordering::SeqCst)
    }

    pub fn get(&self, run_id: &str) -> Option<StoredRun> {
        self.runs.lock().expect("store lock").get(run_id).cloned()
    }

    /// Records a decision on the run's pending approval (what an approvals API does).
    pub fn decide(&self, run_id: &str, status: ApprovalStatus) -> bool {
        let mut runs = self.runs.lock().expect("store lock");
        match runs.get_mut(run_id).and_then(|r| r.approval.as_mut()) {
            Some(a) if a.status == ApprovalStatus::Pending => {
                a.status = status;
                true
            }
            _ => false,
        }
    }
}

impl RunStore for MemoryStore {
    async fn commit(&self, batch: Batch) -> Result<(), StoreError> {
        let mut runs = self.runs.lock().expect("store lock");
        let run = runs.entry(batch.run_id.clone()).or_default();
        // INVARIANT: sequences are contiguous; a gap means a lost or duplicated batch.
        let mut last = run.checkpoints.last().map(|c| c.sequence).unwrap_or(0);
        for cp in &batch.checkpoints {
            if cp.sequence != last + 1 {
                return Err(StoreError::SequenceGap {
                    run_id: batch.run_id.clone(),
                    last,
                    got: cp.sequence,
                });
            }
            last = cp.sequence;
        }
        if run.spec.is_none() {
            run.spec = batch.spec;
        }
        run.checkpoints.extend(batch.checkpoints);
        for row in batch.ledger {
            match run
                .ledger
                .iter_mut()
                .find(|r| r.tool_call_id == row.tool_call_id)
            {
                Some(existing) => *existing = row,
                None => run.ledger.push(row),
            }
        }
        if batch.outcome.is_some() {
            run.outcome = batch.outcome;
        }
        if let Some(a) = batch.approval {
            run.approval = Some(ApprovalRecord {
                approval_id: a.approval_id,
                tool_call_id: a.tool_call_id,
                fingerprint: a.fingerprint,
                status: ApprovalStatus::Pending,
            });
        }
        self.commits.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    async fn load(&self, run_id: &str) -> Result<Option<StoredRun>, StoreError> {
        Ok(self.get(run_id))
    }
}

#[cfg(test)]
mod tests {
    use super::CommitPoint;

    #[test]
    fn only_commits_before_a_write_and_at_the_end_must_be_flushed() {
        assert!(!CommitPoint::BeforePlanner.must_flush());
        assert!(!CommitPoint::BeforeTool { read_only: true }.must_flush());
        assert!(CommitPoint::BeforeTool { read_only: false }.must_flush());
        assert!(CommitPoint::Terminal.must_flush());
        assert!(!CommitPoint::Suspend.must_flush());
        assert!(CommitPoint::AwaitingApproval.must_flush());
    }
}
