//! Scripted planners, scripted executors and failing stores for the runtime tests.
#![allow(dead_code)]

use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use caseops_runtime::context::PlannerView;
use caseops_runtime::store::{Batch, MemoryStore, StoreError, StoredRun};
use caseops_runtime::{ExecError, Executor, Planner, PlannerError, RunSpec, RunStore, ToolCall};
use serde_json::{Value, json};

pub fn spec(run_id: &str) -> RunSpec {
    RunSpec {
        run_id: run_id.into(),
        tenant_id: "tenant-demo".into(),
        task_id: format!("task-{run_id}"),
        subject: "user:alice".into(),
        resource_id: "C-102".into(),
        scopes: [
            "case:read",
            "policy:read",
            "document:read",
            "document:resolve",
        ]
        .map(String::from)
        .to_vec(),
        catalog: [
            "caseops_get_case_snapshot",
            "caseops_get_policy_requirements",
            "caseops_list_unclassified_documents",
            "caseops_resolve_document_alias",
        ]
        .into_iter()
        .collect(),
        stage: "investigating".into(),
        goal: "Check whether case C-102 has every required document".into(),
        correlation_id: "req-1".into(),
    }
}

pub fn call(tool: &str, args: Value) -> Value {
    json!({"decision": "tool_call", "tool": tool, "arguments": args})
}

pub fn final_answer() -> Value {
    json!({"decision": "final", "answer": {
        "outcome": "DOCUMENTS_COMPLETE_AFTER_NORMALIZATION",
        "summary": "all documents present",
        "received_document_codes": ["IDENTITY_DOCUMENT", "LOSS_STATEMENT"],
        "resolved_document_codes": ["ACCIDENT_CERTIFICATE"],
        "missing_document_codes": [],
        "evidence_refs": ["case://C-102@7"],
    }})
}

/// Answers with the next scripted decision; records every view it was given.
pub struct ScriptPlanner {
    script: Mutex<VecDeque<Value>>,
    pub views: Mutex<Vec<PlannerView>>,
    /// Declares the planner in-process (not an external call).
    pub in_process: bool,
}

impl ScriptPlanner {
    pub fn new(script: Vec<Value>) -> Self {
        Self {
            script: Mutex::new(script.into()),
            views: Mutex::new(Vec::new()),
            in_process: false,
        }
    }

    pub fn calls(&self) -> usize {
        self.views.lock().unwrap().len()
    }
}

impl Planner for ScriptPlanner {
    fn kind(&self) -> &'static str {
        "script"
    }

    fn is_external(&self) -> bool {
        !self.in_process
    }

    async fn propose(&self, view: &PlannerView) -> Result<Value, PlannerError> {
        self.views.lock().unwrap().push(view.clone());
        self.script
            .lock()
            .unwrap()
            .pop_front()
            .ok_or_else(|| PlannerError("script exhausted".into()))
    }
}

/// A conforming result for each CaseOps tool.
pub fn result_for(tool: &str, args: &Value) -> Value {
    let sha = "0".repeat(64);
    match tool {
        "caseops_get_case_snapshot" => {
            json!({"case_id": "C-102", "case_version": 7, "status": "waiting_for_documents",
            "policy_id": "motor-claim-standard", "policy_version": "2026.1",
            "received_document_codes": ["LOSS_STATEMENT", "IDENTITY_DOCUMENT"], "evidence_ref": "case://C-102@7", "evidence_sha256": sha})
        }
        "caseops_get_policy_requirements" => {
            json!({"policy_id": "motor-claim-standard", "policy_version": "2026.1",
            "required_documents": [{"code": "LOSS_STATEMENT", "label": "Loss statement"}],
            "evidence_ref": "policy://motor-claim-standard@2026.1", "evidence_sha256": sha})
        }
        "caseops_list_unclassified_documents" => json!({"case_id": "C-102", "documents": [
            {"document_id": "DOC-C102-003", "label": "道路交通事故认定书", "evidence_ref": "evidence://C-102/DOC-C102-003@1"}],
            "evidence_ref": "evidence://C-102/unclassified", "evidence_sha256": sha}),
        "caseops_resolve_document_alias" => {
            json!({"document_id": args["document_id"], "resolved": true,
            "canonical_code": "ACCIDENT_CERTIFICATE", "rule_version": "2026.1", "confidence": 1.0,
            "evidence_ref": "evidence://C-102/DOC-C102-003@1"})
        }
        "inventory_lookup" => {
            json!({"sku": args["sku"], "status": "LOW", "unit_price": 1.5, "locations": [], "evidence_ref": "inv://1"})
        }
        "inventory_reserve" => {
            json!({"reservation_id": "R-1", "units": args["units"], "type": "SOFT"})
        }
        _ => json!({}),
    }
}

/// Answers from a function of the call; counts calls per tool; may sleep first.
pub struct ScriptExecutor<F> {
    pub respond: F,
    pub calls: AtomicUsize,
    pub log: Mutex<Vec<(String, u32)>>,
    pub delay: Option<Duration>,
}

impl<F> ScriptExecutor<F>
where
    F: Fn(&ToolCall, usize) -> Result<Value, ExecError> + Send + Sync,
{
    pub fn new(respond: F) -> Self {
        Self {
            respond,
            calls: AtomicUsize::new(0),
            log: Mutex::new(Vec::new()),
            delay: None,
        }
    }

    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }

    pub fn calls_of(&self, tool: &str) -> usize {
        self.log
            .lock()
            .unwrap()
            .iter()
            .filter(|(t, _)| t == tool)
            .count()
    }
}

pub fn ok_executor()
-> ScriptExecutor<impl Fn(&ToolCall, usize) -> Result<Value, ExecError> + Send + Sync> {
    ScriptExecutor::new(|c: &ToolCall, _| Ok(result_for(c.tool.name, &c.arguments)))
}

impl<F> Executor for ScriptExecutor<F>
where
    F: Fn(&ToolCall, usize) -> Result<Value, ExecError> + Send + Sync,
{
    async fn execute(&self, call: &ToolCall) -> Result<Value, ExecError> {
        let n = self.calls.fetch_add(1, Ordering::SeqCst);
        self.log
            .lock()
            .unwrap()
            .push((call.tool.name.to_string(), call.attempt));
        if let Some(d) = self.delay {
            tokio::time::sleep(d).await;
        }
        (self.respond)(call, n)
    }
}

/// A memory store that refuses its `fail_at`-th commit (1-based), as if the process
/// died right there.
pub struct FailingStore {
    pub inner: MemoryStore,
    pub fail_at: usize,
    seen: AtomicUsize,
    /// Whether it says its commits cross a socket ([`RunStore::commits_remotely`]).
    pub remote: bool,
}

impl FailingStore {
    pub fn new(fail_at: usize) -> Self {
        Self {
            inner: MemoryStore::new(),
            fail_at,
            seen: AtomicUsize::new(0),
            remote: false,
        }
    }

    /// The same store, saying its commits cross a socket.
    pub fn remote(self) -> Self {
        Self {
            remote: true,
            ..self
        }
    }
}

impl RunStore for FailingStore {
    async fn commit(&self, batch: Batch) -> Result<(), StoreError> {
        if self.remote {
            // An answer across a socket comes later, not at the first poll.
            tokio::task::yield_now().await;
        }
        if self.seen.fetch_add(1, Ordering::SeqCst) + 1 == self.fail_at {
            return Err(StoreError::Unavailable("injected failure".into()));
        }
        self.inner.commit(batch).await
    }

    async fn load(&self, run_id: &str) -> Result<Option<StoredRun>, StoreError> {
        self.inner.load(run_id).await
    }

    fn commits_remotely(&self) -> bool {
        self.remote
    }
}
