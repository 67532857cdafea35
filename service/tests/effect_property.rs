//! Property: whatever faults strike a write run — answers lost after the effect,
//! requests lost before it, calls that hang, confirmations that cannot answer, the
//! process dying at any commit (any number of times) — the runtime never sends a
//! write again once its effect exists, so a tool server that did not deduplicate
//! would still hold at most one effect per idempotency key. Runs C-103 (a reversible
//! document request) and C-104 (an irreversible transition behind an approval) with
//! the real CaseOps handlers, the conformance driver and the shipped policies.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use caseops_generated::{Bundle, Dispatcher};
use caseops_runtime::store::{ApprovalStatus, Batch, MemoryStore, StoreError, StoredRun};
use caseops_runtime::{
    CallStatus, ContractBundle, Engine, ExecError, Executor, Outcome, RunSpec, RunStore,
    RuntimeError, ToolCall, ToolDispatch, ToolError,
};
use caseops_service::domain::{CaseTransition, DocumentRequest, reference_data};
use caseops_service::findings::DocumentRules;
use caseops_service::planner::ConformancePlanner;
use caseops_service::tools::{CaseOpsTools, CaseRepository, MemoryRepository};
use proptest::prelude::*;
use serde_json::Value;

/// The reference repository, counting every write that arrives for a key whose
/// effect already exists (what would be a second effect on a naive server).
#[derive(Clone, Default)]
struct Counting {
    inner: MemoryRepository,
    /// Idempotency key → writes received for it.
    sends: Arc<Mutex<HashMap<String, usize>>>,
    /// Writes that arrived after their key's effect existed.
    repeats: Arc<AtomicUsize>,
}

impl Counting {
    fn received(&self, key: &str, existed: bool) {
        *self.sends.lock().unwrap().entry(key.into()).or_default() += 1;
        if existed {
            self.repeats.fetch_add(1, Ordering::SeqCst);
        }
    }
}

impl CaseRepository for Counting {
    async fn request_documents(
        &self,
        request: &DocumentRequest,
    ) -> Result<DocumentRequest, ToolError> {
        let existed = self
            .inner
            .document_requests(&request.tenant_id, &request.case_id)
            .await?
            .iter()
            .any(|r| r.idempotency_key == request.idempotency_key);
        self.received(&request.idempotency_key, existed);
        self.inner.request_documents(request).await
    }
    async fn document_requests(
        &self,
        tenant: &str,
        case_id: &str,
    ) -> Result<Vec<DocumentRequest>, ToolError> {
        self.inner.document_requests(tenant, case_id).await
    }
    async fn transition_case(&self, t: &CaseTransition) -> Result<CaseTransition, ToolError> {
        let existed = self
            .inner
            .case_transitions(&t.tenant_id, &t.case_id)
            .await?
            .iter()
            .any(|x| x.idempotency_key == t.idempotency_key);
        self.received(&t.idempotency_key, existed);
        self.inner.transition_case(t).await
    }
    async fn case_transitions(
        &self,
        tenant: &str,
        case_id: &str,
    ) -> Result<Vec<CaseTransition>, ToolError> {
        self.inner.case_transitions(tenant, case_id).await
    }
    async fn case(
        &self,
        tenant: &str,
        case_id: &str,
    ) -> Result<Option<caseops_service::domain::Case>, ToolError> {
        self.inner.case(tenant, case_id).await
    }
    async fn policy(
        &self,
        tenant: &str,
        policy_id: &str,
        version: &str,
    ) -> Result<Option<caseops_service::domain::ClaimPolicy>, ToolError> {
        self.inner.policy(tenant, policy_id, version).await
    }
    async fn documents(
        &self,
        tenant: &str,
        case_id: &str,
    ) -> Result<Vec<caseops_service::domain::SourceDocument>, ToolError> {
        self.inner.documents(tenant, case_id).await
    }
    async fn alias_rule(
        &self,
        tenant: &str,
        label: &str,
    ) -> Result<Option<caseops_service::domain::AliasRule>, ToolError> {
        self.inner.alias_rule(tenant, label).await
    }
}

/// What happens to one write sent to the tool server.
#[derive(Debug, Clone, Copy)]
enum WriteFault {
    Answered,
    /// Applied, and the answer lost on the way back (connection cut).
    AnswerLost,
    /// Applied, and no answer ever (the call times out).
    HangsAfterEffect,
    /// Lost on the way there: not applied, and no answer.
    RequestLost,
    /// Refused before it was sent (connection refused): not applied, retryable.
    RefusedBeforeSend,
}

fn write_fault() -> impl Strategy<Value = WriteFault> {
    prop_oneof![
        3 => Just(WriteFault::Answered),
        2 => Just(WriteFault::AnswerLost),
        1 => Just(WriteFault::HangsAfterEffect),
        2 => Just(WriteFault::RequestLost),
        1 => Just(WriteFault::RefusedBeforeSend),
    ]
}

/// The real handlers behind a wire that fails as scheduled: the n-th write meets
/// `writes[n]`, the n-th confirmation cannot answer when `confirms[n]` says so.
struct FaultyWire {
    tools: Dispatcher<CaseOpsTools<Counting>>,
    writes: Vec<WriteFault>,
    confirms: Vec<bool>,
    sent_writes: AtomicUsize,
    sent_confirms: AtomicUsize,
}

fn exec_error(e: ToolError) -> ExecError {
    match e {
        ToolError::Business { code, message } => ExecError::Business { code, message },
        ToolError::Transient { code, message } => ExecError::Transient { code, message },
        other => ExecError::Protocol(other.to_string()),
    }
}

impl Executor for FaultyWire {
    async fn execute(&self, call: &ToolCall) -> Result<Value, ExecError> {
        let send = || async {
            self.tools
                .call(call.tool, &call.context, call.arguments.clone())
                .await
                .map_err(exec_error)
        };
        let confirming = Bundle::TOOLS
            .iter()
            .filter_map(|t| t.effects)
            .any(|e| e.confirm_with == call.tool.name);
        if confirming {
            let n = self.sent_confirms.fetch_add(1, Ordering::SeqCst);
            if !self.confirms[n % self.confirms.len()] {
                return Err(ExecError::Transient {
                    code: "UNAVAILABLE".into(),
                    message: "the confirming call could not be made".into(),
                });
            }
            return send().await;
        }
        if !call.tool.risk.is_write() {
            return send().await;
        }
        let n = self.sent_writes.fetch_add(1, Ordering::SeqCst);
        let lost = || ExecError::UnknownEffect("sent, no answer".into());
        match self.writes[n % self.writes.len()] {
            WriteFault::Answered => send().await,
            WriteFault::AnswerLost => {
                let _ = send().await;
                Err(lost())
            }
            WriteFault::HangsAfterEffect => {
                let _ = send().await;
                std::future::pending().await
            }
            WriteFault::RequestLost => Err(lost()),
            WriteFault::RefusedBeforeSend => Err(ExecError::Transient {
                code: "CONNECTION_REFUSED".into(),
                message: "not sent".into(),
            }),
        }
    }
}

/// A memory store whose process dies at the scheduled commits (counted across
/// restarts): the commit is not written, and the driver is gone.
struct DyingStore {
    inner: MemoryStore,
    dies_at: BTreeSet<usize>,
    commits: AtomicUsize,
}

impl RunStore for DyingStore {
    async fn commit(&self, batch: Batch) -> Result<(), StoreError> {
        let n = self.commits.fetch_add(1, Ordering::SeqCst) + 1;
        if self.dies_at.contains(&n) {
            return Err(StoreError::Unavailable("the process died here".into()));
        }
        self.inner.commit(batch).await
    }

    async fn load(&self, run_id: &str) -> Result<Option<StoredRun>, StoreError> {
        self.inner.load(run_id).await
    }
}

fn spec(case_id: &str) -> RunSpec {
    RunSpec {
        run_id: format!("run-{case_id}"),
        tenant_id: "tenant-demo".into(),
        task_id: format!("task-{case_id}"),
        subject: "user:alice".into(),
        resource_id: case_id.into(),
        scopes: Bundle::TOOLS
            .iter()
            .map(|t| t.required_scope.to_string())
            .collect(),
        catalog: Bundle::TOOLS.iter().map(|t| t.name.to_string()).collect(),
        stage: "investigating".into(),
        goal: format!("Check whether case {case_id} has every required document"),
        correlation_id: "prop".into(),
    }
}

/// Drives the run like the worker fleet would: after every death a fresh driver
/// resumes it, and a run that waits for its approval gets it.
async fn drive(case_id: &str, wire: &FaultyWire, store: &DyingStore) -> Outcome {
    let run = spec(case_id);
    let mut started = false;
    for _ in 0..64 {
        let engine = Engine::<Bundle>::new()
            .unwrap()
            .with_conclusion_check(Arc::new(DocumentRules));
        let planner = ConformancePlanner;
        let result = if started && store.inner.get(&run.run_id).is_some() {
            engine.resume(&run.run_id, &planner, wire, store).await
        } else {
            started = true;
            engine.start(run.clone(), &planner, wire, store).await
        };
        match result {
            Ok(outcome) => return outcome,
            Err(RuntimeError::AwaitingApproval(id)) => {
                store.inner.decide(&id, ApprovalStatus::Approved);
            }
            Err(RuntimeError::Store(_) | RuntimeError::NotFound(_)) => {}
            Err(e) => panic!("driver error: {e}"),
        }
    }
    panic!("the run did not end within 64 drivers")
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn no_fault_schedule_produces_a_second_effect_for_one_idempotency_key(
        irreversible in any::<bool>(),
        writes in prop::collection::vec(write_fault(), 1..6),
        confirms in prop::collection::vec(prop::bool::weighted(0.8), 1..6),
        dies_at in prop::collection::btree_set(1usize..24, 0..4),
    ) {
        let case_id = if irreversible { "C-104" } else { "C-103" };
        let repo = Counting { inner: MemoryRepository::new(reference_data()), ..Default::default() };
        let wire = FaultyWire {
            tools: Dispatcher(CaseOpsTools { repo: repo.clone() }),
            writes,
            confirms,
            sent_writes: AtomicUsize::new(0),
            sent_confirms: AtomicUsize::new(0),
        };
        let store = DyingStore { inner: MemoryStore::new(), dies_at, commits: AtomicUsize::new(0) };
        let rt = tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build().unwrap();
        let outcome = rt.block_on(drive(case_id, &wire, &store));

        prop_assert_eq!(repo.repeats.load(Ordering::SeqCst), 0, "a write was sent again after its effect existed");
        let effects = {
            let writes = repo.inner.1.lock().unwrap();
            writes.requests.len() + writes.transitions.len()
        };
        prop_assert!(effects <= 1, "{} effects", effects);

        let stored = store.inner.get(&format!("run-{case_id}")).unwrap();
        let write_rows: Vec<_> = stored.ledger.iter()
            .filter(|r| Bundle::tool(&r.tool_name).is_some_and(|t| t.risk.is_write()))
            .collect();
        // Every write's intent names the key the server received it under.
        let sends = repo.sends.lock().unwrap();
        for key in sends.keys() {
            prop_assert!(write_rows.iter().any(|r| r.idempotency_key.as_deref() == Some(key.as_str())), "no ledger intent for {}", key);
        }
        match outcome.status.as_str() {
            "completed" => {
                prop_assert_eq!(effects, 1, "a completed write run made its effect once");
                let answer = outcome.final_answer.as_ref().unwrap();
                let expected = if irreversible { "DOCUMENTS_COMPLETE" } else { "MISSING_REQUIRED_DOCUMENTS" };
                prop_assert_eq!(answer["outcome"].as_str(), Some(expected));
                prop_assert!(write_rows.iter().any(|r| r.status == CallStatus::Succeeded));
            }
            // Unknown effects and unsafe resume points go to a person, budgets stop.
            "needs_human" | "stopped" | "failed" => {
                let reason = outcome.stop_reason.clone().unwrap_or_default();
                prop_assert!(
                    ["EFFECT_UNKNOWN", "UNSAFE_RESUME_POINT", "STEP_BUDGET_EXHAUSTED", "CONNECTION_REFUSED"].contains(&reason.as_str()),
                    "{} with {}", outcome.status, reason
                );
            }
            other => prop_assert!(false, "unexpected end {}", other),
        }
    }
}
