//! The control plane's own cost: one whole tool step with an in-memory store and a
//! no-op executor, and each stage alone. Run with
//! `cargo bench -p caseops-runtime --bench step`.

use std::hint::black_box;
use std::sync::Mutex;

use caseops_generated::{Bundle, RunState};
use caseops_runtime::capability_filter::{Health, effective_tools};
use caseops_runtime::context::PlannerView;
use caseops_runtime::fingerprint::action_fingerprint;
use caseops_runtime::machine::Machine;
use caseops_runtime::{
    Catalog, ContractBundle, Engine, ExecError, Executor, Planner, PlannerError, RunSpec, ToolCall,
};
use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::{Value, json};

fn spec(run_id: String) -> RunSpec {
    RunSpec {
        run_id,
        tenant_id: "tenant-demo".into(),
        task_id: "task".into(),
        subject: "user".into(),
        resource_id: "C-102".into(),
        scopes: [
            "case:read",
            "policy:read",
            "document:read",
            "document:resolve",
        ]
        .map(String::from)
        .to_vec(),
        catalog: Bundle::CATALOG.iter().map(|s| s.to_string()).collect(),
        stage: "investigating".into(),
        goal: "check documents".into(),
        correlation_id: "c".into(),
    }
}

/// One tool call, then a final answer.
struct OneStep(Mutex<u8>);

impl Planner for OneStep {
    fn kind(&self) -> &'static str {
        "bench"
    }
    async fn propose(&self, _: &PlannerView) -> Result<Value, PlannerError> {
        let mut n = self.0.lock().unwrap();
        *n += 1;
        Ok(if *n == 1 {
            json!({"decision": "tool_call", "tool": "caseops_get_case_snapshot",
                   "arguments": {"case_id": "C-102"}})
        } else {
            json!({"decision": "final", "answer": {
                "outcome": "DOCUMENTS_COMPLETE", "summary": "ok",
                "received_document_codes": [], "resolved_document_codes": [],
                "missing_document_codes": [], "evidence_refs": ["case://C-102@7"]}})
        })
    }
}

struct Noop;

/// Discards batches: the benchmark measures the control plane, not a store.
struct NullStore;

impl caseops_runtime::RunStore for NullStore {
    async fn commit(
        &self,
        batch: caseops_runtime::store::Batch,
    ) -> Result<(), caseops_runtime::store::StoreError> {
        black_box(batch);
        Ok(())
    }
    async fn load(
        &self,
        _: &str,
    ) -> Result<Option<caseops_runtime::store::StoredRun>, caseops_runtime::store::StoreError> {
        Ok(None)
    }
}

impl Executor for Noop {
    async fn execute(&self, _: &ToolCall) -> Result<Value, ExecError> {
        Ok(
            json!({"case_id": "C-102", "case_version": 7, "status": "waiting_for_documents",
                  "policy_id": "motor-claim-standard", "policy_version": "2026.1",
                  "received_document_codes": ["LOSS_STATEMENT"], "evidence_ref": "case://C-102@7",
                  "evidence_sha256": "0".repeat(64)}),
        )
    }
}

fn bench(c: &mut Criterion) {
    let engine = Engine::<Bundle>::new().unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let store = NullStore;
    let mut n = 0u64;
    // The second: the same run in a tenant whose catalog lists 1,000 tools. The run
    // still sees only what its scopes allow, so its cost should not grow with it.
    // Like a host, the bench builds each tenant's catalog once and shares it.
    for (name, size) in [
        ("run/one_tool_step_and_final", 0),
        ("run/one_tool_step_and_final_1000_tool_catalog", 1000),
    ] {
        let known = Bundle::CATALOG.len();
        let catalog: Catalog = Bundle::CATALOG
            .iter()
            .map(|s| s.to_string())
            .chain((known..size.max(known)).map(|i| format!("other_tool_{i:04}")))
            .collect();
        c.bench_function(name, |b| {
            b.iter(|| {
                n += 1;
                let mut s = spec(format!("b{n}"));
                s.catalog = catalog.clone();
                let planner = OneStep(Mutex::new(0));
                let out = rt
                    .block_on(engine.start(s, &planner, &Noop, &store))
                    .unwrap();
                assert_eq!(out.status, "completed", "{:?}", out.stop_reason);
            })
        });
    }

    let s = spec("stage".into());
    let tool = Bundle::tool("caseops_resolve_document_alias").unwrap();
    let args = json!({"case_id": "C-102", "document_id": "DOC-C102-003"});
    let health = Health::default();
    let succeeded = vec!["caseops_list_unclassified_documents".to_string()];
    c.bench_function("stage/capability_filter", |b| {
        b.iter(|| {
            black_box(effective_tools::<Bundle>(
                &s,
                "investigating",
                &succeeded,
                &health,
                &[true; Bundle::TOOLS.len()],
            ))
        })
    });
    let principal = engine
        .authorization()
        .principal(&s, "investigating", Bundle::TOOLS)
        .unwrap();
    c.bench_function("stage/policy_visibility", |b| {
        b.iter(|| black_box(engine.authorization().may_call(&principal, black_box(tool))))
    });
    c.bench_function("stage/argument_validation", |b| {
        b.iter(|| black_box(engine.validators().arguments(tool.name, black_box(&args))))
    });
    c.bench_function("stage/cedar_authorization", |b| {
        b.iter(|| {
            black_box(
                engine
                    .authorization()
                    .authorize(&s, "investigating", tool, &args),
            )
        })
    });
    // A question never asked before: the decision cache misses, Cedar decides.
    let mut n = 0u64;
    c.bench_function("stage/cedar_authorization_first_ask", |b| {
        b.iter(|| {
            n += 1;
            let fresh = json!({"case_id": "C-102", "document_id": format!("DOC-{n}")});
            black_box(
                engine
                    .authorization()
                    .authorize(&s, "investigating", tool, &fresh),
            )
        })
    });
    c.bench_function("stage/fingerprint", |b| {
        b.iter(|| black_box(action_fingerprint(tool.name, black_box(&args))))
    });
    c.bench_function("stage/transition_and_checkpoint", |b| {
        b.iter(|| {
            let mut m = Machine::<RunState>::new();
            m.apply(RunState::Planning).unwrap();
            // the checkpoint's snapshot is the serialized run state
            black_box(serde_json::to_value(&s).unwrap());
            black_box(m.sequence())
        })
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
