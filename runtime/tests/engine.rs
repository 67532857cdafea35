//! The governed tool-call loop, driven end to end with scripted planners and executors
//! over the real CaseOps bundle (and the fixture bundle for write tools).

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use caseops_generated::{Bundle, RunState};
use caseops_runtime::machine::Machine;
use caseops_runtime::store::MemoryStore;
use caseops_runtime::{CallStatus, ContractBundle, Engine, ExecError, Outcome, RunStateEnum};
use serde_json::json;
use support::*;

fn engine() -> Engine<Bundle> {
    Engine::<Bundle>::new().expect("bundle loads")
}

fn c102_script() -> Vec<serde_json::Value> {
    vec![
        call("caseops_get_case_snapshot", json!({"case_id": "C-102"})),
        call(
            "caseops_get_policy_requirements",
            json!({"case_id": "C-102"}),
        ),
        call(
            "caseops_list_unclassified_documents",
            json!({"case_id": "C-102"}),
        ),
        call(
            "caseops_resolve_document_alias",
            json!({"case_id": "C-102", "document_id": "DOC-C102-003"}),
        ),
        final_answer(),
    ]
}

/// A clock the test moves by hand: the milliseconds it holds, and the engine's view.
fn manual_clock() -> (Arc<AtomicU64>, caseops_runtime::engine::Clock) {
    let now = Arc::new(AtomicU64::new(1_000_000));
    let read = now.clone();
    (now, Arc::new(move || read.load(Ordering::SeqCst)))
}

/// Every recorded checkpoint is a legal path of the table, numbered 1, 2, 3, …
fn assert_legal_path(store: &MemoryStore, run_id: &str) {
    let run = store.get(run_id).expect("run stored");
    let mut state = RunState::INITIAL;
    for (i, cp) in run.checkpoints.iter().enumerate() {
        assert_eq!(cp.sequence, i as u64 + 1, "sequence +1 each");
        assert_eq!(cp.from, state.as_str());
        let to = RunState::parse(&cp.to).unwrap();
        assert!(RunState::is_legal(state, to), "{} → {}", cp.from, cp.to);
        state = to;
    }
    assert!(state.is_terminal(), "ends terminal");
}

#[tokio::test]
async fn a_scripted_c102_run_completes_in_four_steps_with_two_commits_per_step() {
    let (planner, executor, store) = (
        ScriptPlanner::new(c102_script()),
        ok_executor(),
        MemoryStore::new(),
    );
    let out = engine()
        .start(spec("r1"), &planner, &executor, &store)
        .await
        .unwrap();
    assert_eq!(out.status, "completed", "{out:?}");
    assert_eq!(out.step_count, 4);
    assert_eq!(
        out.final_answer.as_ref().unwrap()["schema_version"],
        "caseops.agent-result.v1"
    );
    let run = store.get("r1").unwrap();
    let names: Vec<&str> = run.ledger.iter().map(|r| r.tool_name.as_str()).collect();
    assert_eq!(
        names,
        [
            "caseops_get_case_snapshot",
            "caseops_get_policy_requirements",
            "caseops_list_unclassified_documents",
            "caseops_resolve_document_alias"
        ]
    );
    assert!(run.ledger.iter().all(|r| r.status == CallStatus::Succeeded
        && r.attempt_count == 1
        && r.bundle_digest == Bundle::BUNDLE_DIGEST));
    // one commit before each planner call (5), one before each tool (4), one terminal
    assert_eq!(store.commits(), 10);
    assert_legal_path(&store, "r1");
}

#[tokio::test]
async fn an_in_process_planner_is_not_committed_before_but_with_the_next_tool_call() {
    let mut planner = ScriptPlanner::new(c102_script());
    planner.in_process = true;
    let (executor, store) = (ok_executor(), MemoryStore::new());
    let out = engine()
        .start(spec("r1"), &planner, &executor, &store)
        .await
        .unwrap();
    assert_eq!(out.status, "completed", "{out:?}");
    // one before each tool (4), one terminal; every transition still recorded
    assert_eq!(store.commits(), 5);
    assert_legal_path(&store, "r1");
    let run = store.get("r1").unwrap();
    assert!(run.ledger.iter().all(|r| r.status == CallStatus::Succeeded));
}

#[tokio::test]
async fn each_commit_but_the_terminal_one_leaves_a_snapshot_of_the_run_as_it_stands() {
    let mut planner = ScriptPlanner::new(c102_script());
    planner.in_process = true;
    let (executor, store) = (ok_executor(), MemoryStore::new());
    engine()
        .start(spec("r-snap"), &planner, &executor, &store)
        .await
        .unwrap();
    let run = store.get("r-snap").unwrap();
    let snapshots: Vec<_> = run
        .checkpoints
        .iter()
        .filter_map(|c| c.snapshot.as_ref().map(|s| (c, s.to_value())))
        .collect();
    // One per commit before a tool; a finished run is read from its outcome.
    assert_eq!(snapshots.len(), store.commits() - 1);
    assert!(run.checkpoints.last().unwrap().snapshot.is_none());
    for (cp, snapshot) in &snapshots {
        assert_eq!(snapshot["sequence"], serde_json::json!(cp.sequence));
        assert_eq!(snapshot["state"], serde_json::json!(cp.to));
    }
}

#[test]
fn illegal_transitions_are_rejected_and_never_applied() {
    let mut m = Machine::<RunState>::new();
    assert!(m.apply(RunState::Completed).is_err(), "created → completed");
    assert_eq!((m.state(), m.sequence()), (RunState::Created, 0));
    m.apply(RunState::Planning).unwrap();
    m.apply(RunState::ToolProposed).unwrap();
    let err = m.apply(RunState::ToolRunning).unwrap_err();
    assert_eq!(
        err.to_string(),
        "illegal transition `tool_proposed → tool_running`"
    );
    assert_eq!((m.state(), m.sequence()), (RunState::ToolProposed, 2));
}

async fn denied(
    spec: caseops_runtime::RunSpec,
    decision: serde_json::Value,
) -> (Outcome, usize, MemoryStore) {
    let (planner, executor, store) = (
        ScriptPlanner::new(vec![decision]),
        ok_executor(),
        MemoryStore::new(),
    );
    let run_id = spec.run_id.clone();
    let out = engine()
        .start(spec, &planner, &executor, &store)
        .await
        .unwrap();
    assert_legal_path(&store, &run_id);
    (out, executor.calls(), store)
}

#[tokio::test]
async fn an_unknown_argument_field_is_rejected_before_execution() {
    let (out, calls, store) = denied(
        spec("r2"),
        call(
            "caseops_get_case_snapshot",
            json!({"case_id": "C-102", "tenant_id": "other"}),
        ),
    )
    .await;
    assert_eq!(
        (out.status.as_str(), out.stop_reason.as_deref()),
        ("failed", Some("INVALID_ARGUMENTS"))
    );
    assert_eq!(calls, 0);
    assert_eq!(
        store.get("r2").unwrap().ledger[0].status,
        CallStatus::Failed
    );
}

#[tokio::test]
async fn a_tool_outside_the_catalog_is_denied_before_execution() {
    let mut s = spec("r3");
    s.catalog = s
        .catalog
        .names()
        .iter()
        .filter(|t| *t != "caseops_get_policy_requirements")
        .cloned()
        .collect();
    let (out, calls, store) = denied(
        s,
        call(
            "caseops_get_policy_requirements",
            json!({"case_id": "C-102"}),
        ),
    )
    .await;
    assert_eq!(
        (out.status.as_str(), out.stop_reason.as_deref()),
        ("needs_human", Some("TOOL_NOT_ALLOWLISTED"))
    );
    assert_eq!(calls, 0);
    let row = &store.get("r3").unwrap().ledger[0];
    assert_eq!(
        (row.status, row.error_code.as_deref()),
        (CallStatus::Denied, Some("TOOL_NOT_ALLOWLISTED"))
    );
}

#[tokio::test]
async fn a_missing_scope_is_denied_before_execution() {
    let mut s = spec("r4");
    s.scopes.retain(|x| x != "document:resolve");
    let (out, calls, _) = denied(
        s,
        call(
            "caseops_resolve_document_alias",
            json!({"case_id": "C-102", "document_id": "D"}),
        ),
    )
    .await;
    assert_eq!(
        (out.status.as_str(), out.stop_reason.as_deref()),
        ("needs_human", Some("TOOL_SCOPE_MISSING"))
    );
    assert_eq!(calls, 0);
}

#[tokio::test]
async fn a_foreign_case_is_denied_before_execution() {
    let (out, calls, store) = denied(
        spec("r5"),
        call("caseops_get_case_snapshot", json!({"case_id": "C-999"})),
    )
    .await;
    assert_eq!(
        (out.status.as_str(), out.stop_reason.as_deref()),
        ("needs_human", Some("TOOL_RESOURCE_MISMATCH"))
    );
    assert_eq!(calls, 0);
    assert_eq!(
        store.get("r5").unwrap().ledger[0].status,
        CallStatus::Denied
    );
}

#[tokio::test]
async fn a_repeated_fingerprint_stops_the_run_after_one_execution() {
    let same = call("caseops_get_case_snapshot", json!({"case_id": "C-102"}));
    let (planner, executor, store) = (
        ScriptPlanner::new(vec![same.clone(), same]),
        ok_executor(),
        MemoryStore::new(),
    );
    let out = engine()
        .start(spec("r6"), &planner, &executor, &store)
        .await
        .unwrap();
    assert_eq!(
        (out.status.as_str(), out.stop_reason.as_deref()),
        ("stopped", Some("REPEATED_ACTION_FINGERPRINT"))
    );
    assert_eq!(executor.calls(), 1);
    let ledger = store.get("r6").unwrap().ledger;
    assert_eq!(
        (ledger[0].status, ledger[1].status),
        (CallStatus::Succeeded, CallStatus::Denied)
    );
    assert_eq!(ledger[0].fingerprint, ledger[1].fingerprint);
    assert_ne!(ledger[0].tool_call_id, ledger[1].tool_call_id);
}

#[tokio::test(start_paused = true)]
async fn one_transient_error_then_success_takes_two_attempts() {
    let executor = ScriptExecutor::new(|c: &caseops_runtime::ToolCall, n| {
        if n == 0 {
            Err(ExecError::Transient {
                code: "UPSTREAM_BUSY".into(),
                message: "try later".into(),
            })
        } else {
            Ok(result_for(c.tool.name, &c.arguments))
        }
    });
    let planner = ScriptPlanner::new(vec![
        call("caseops_get_case_snapshot", json!({"case_id": "C-102"})),
        final_answer(),
    ]);
    let store = MemoryStore::new();
    let out = engine()
        .start(spec("r7"), &planner, &executor, &store)
        .await
        .unwrap();
    assert_eq!(out.status, "completed");
    assert_eq!(store.get("r7").unwrap().ledger[0].attempt_count, 2);
    assert_eq!(
        *executor.log.lock().unwrap(),
        [
            ("caseops_get_case_snapshot".to_string(), 1),
            ("caseops_get_case_snapshot".to_string(), 2)
        ]
    );
}

#[tokio::test]
async fn a_non_transient_error_is_not_retried() {
    let executor = ScriptExecutor::new(|_: &caseops_runtime::ToolCall, _| {
        Err(ExecError::Business {
            code: "CASE_NOT_FOUND".into(),
            message: "no such case".into(),
        })
    });
    let planner = ScriptPlanner::new(vec![call(
        "caseops_get_case_snapshot",
        json!({"case_id": "C-102"}),
    )]);
    let store = MemoryStore::new();
    let out = engine()
        .start(spec("r8"), &planner, &executor, &store)
        .await
        .unwrap();
    assert_eq!(
        (out.status.as_str(), out.stop_reason.as_deref()),
        ("failed", Some("CASE_NOT_FOUND"))
    );
    assert_eq!(executor.calls(), 1);
    let row = &store.get("r8").unwrap().ledger[0];
    assert_eq!(
        (row.attempt_count, row.error_class.as_deref()),
        (1, Some("business"))
    );
}

#[tokio::test]
async fn the_step_budget_stops_before_an_unbounded_second_call() {
    let mut budgets = Bundle::BUDGETS;
    budgets.max_steps = 1;
    let planner = ScriptPlanner::new(vec![
        call("caseops_get_case_snapshot", json!({"case_id": "C-102"})),
        call(
            "caseops_get_policy_requirements",
            json!({"case_id": "C-102"}),
        ),
    ]);
    let (executor, store) = (ok_executor(), MemoryStore::new());
    let out = engine()
        .with_budgets(budgets)
        .start(spec("r9"), &planner, &executor, &store)
        .await
        .unwrap();
    assert_eq!(
        (out.status.as_str(), out.stop_reason.as_deref()),
        ("stopped", Some("STEP_BUDGET_EXHAUSTED"))
    );
    assert_eq!(executor.calls(), 1);
    assert_eq!(
        store.get("r9").unwrap().ledger.len(),
        1,
        "the second call was never proposed"
    );
}

#[tokio::test(start_paused = true)]
async fn a_tool_that_exceeds_its_timeout_is_cut_off_and_retried_within_attempts() {
    let mut executor = ok_executor();
    executor.delay = Some(Duration::from_secs(3600));
    let planner = ScriptPlanner::new(vec![call(
        "caseops_get_case_snapshot",
        json!({"case_id": "C-102"}),
    )]);
    let store = MemoryStore::new();
    let started = tokio::time::Instant::now();
    let out = engine()
        .start(spec("r10"), &planner, &executor, &store)
        .await
        .unwrap();
    assert_eq!(
        (out.status.as_str(), out.stop_reason.as_deref()),
        ("failed", Some("TOOL_TIMEOUT"))
    );
    assert_eq!(executor.calls(), 2, "max_attempts 2 for a read-only tool");
    // two 5 s timeouts (min of contract 5 and ceiling 8) plus one backoff pause
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_secs(10) && waited < Duration::from_secs(12),
        "{waited:?}"
    );
}

#[tokio::test]
async fn the_wall_clock_budget_stops_the_run() {
    let (now, clock) = manual_clock();
    let executor = ScriptExecutor::new(move |c: &caseops_runtime::ToolCall, _| {
        now.fetch_add(61_000, Ordering::SeqCst); // each call takes 61 s of a 60 s budget
        Ok(result_for(c.tool.name, &c.arguments))
    });
    let planner = ScriptPlanner::new(c102_script());
    let store = MemoryStore::new();
    let out = engine()
        .with_clock(clock)
        .start(spec("r11"), &planner, &executor, &store)
        .await
        .unwrap();
    assert_eq!(
        (out.status.as_str(), out.stop_reason.as_deref()),
        ("stopped", Some("WALL_CLOCK_EXHAUSTED"))
    );
    assert_eq!(executor.calls(), 1);
}

#[tokio::test]
async fn a_malformed_planner_decision_fails_the_run() {
    for (i, bad) in [
        json!({"decision": "maybe"}),
        json!({"decision": "tool_call", "tool": "caseops_get_case_snapshot"}),
        json!({"decision": "tool_call", "tool": "no_such_tool", "arguments": {}}),
        json!({"decision": "final", "answer": {"outcome": "DONE"}}),
        json!(["not", "an", "object"]),
        json!({"decision": "final", "answer": {}, "extra": 1}),
    ]
    .into_iter()
    .enumerate()
    {
        let run_id = format!("r12-{i}");
        let (out, calls, _) = denied(spec(&run_id), bad.clone()).await;
        assert_eq!(
            (out.status.as_str(), out.stop_reason.as_deref()),
            ("failed", Some("PROTOCOL_ERROR")),
            "{bad}"
        );
        assert_eq!(calls, 0);
    }
}

#[tokio::test]
async fn no_credential_claim_or_injected_field_reaches_the_planner() {
    let (planner, executor, store) = (
        ScriptPlanner::new(c102_script()),
        ok_executor(),
        MemoryStore::new(),
    );
    let mut s = spec("r13");
    s.tenant_id = "tenant-SECRET-9f3".into();
    s.task_id = "task-SECRET-77a".into();
    s.subject = "user:SECRET-alice".into();
    s.correlation_id = "corr-SECRET".into();
    engine()
        .start(s, &planner, &executor, &store)
        .await
        .unwrap();
    let views = serde_json::to_string(&*planner.views.lock().unwrap()).unwrap();
    for secret in [
        "SECRET",
        "tenant_id",
        "scope",
        "document:resolve",
        "TOOL_",
        "forbid",
        "permit",
        "principal",
    ] {
        assert!(!views.contains(secret), "`{secret}` reached the planner");
    }
    assert!(views.contains("caseops_get_case_snapshot") && views.contains("C-102"));
}

#[tokio::test]
async fn the_planner_sees_only_tools_whose_required_evidence_exists() {
    let (planner, executor, store) = (
        ScriptPlanner::new(c102_script()),
        ok_executor(),
        MemoryStore::new(),
    );
    engine()
        .start(spec("r14"), &planner, &executor, &store)
        .await
        .unwrap();
    let views = planner.views.lock().unwrap();
    let names = |i: usize| {
        views[i]
            .tools
            .iter()
            .map(|t| t.name.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        names(0),
        [
            "caseops_get_case_snapshot",
            "caseops_list_unclassified_documents"
        ]
    );
    assert!(names(1).contains(&"caseops_get_policy_requirements".to_string()));
    assert_eq!(views[4].observations.len(), 4);
}

#[tokio::test]
async fn read_only_recovery_from_tool_running_completes_with_one_more_execution() {
    // Commit 1 before the first planner call, 2 before the tool: the 3rd (before the
    // next planner call) fails, as if the process died after the tool ran.
    let store = FailingStore::new(3);
    let (planner, executor) = (ScriptPlanner::new(c102_script()), ok_executor());
    let err = engine()
        .start(spec("r15"), &planner, &executor, &store)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("injected failure"));
    let stored = store.inner.get("r15").unwrap();
    assert_eq!(stored.checkpoints.last().unwrap().to, "tool_running");

    let planner2 = ScriptPlanner::new(c102_script());
    let executor2 = ok_executor();
    let out = engine()
        .resume("r15", &planner2, &executor2, &store.inner)
        .await
        .unwrap();
    assert_eq!(out.status, "completed", "{out:?}");
    assert_eq!(out.recovery_count, 1);
    assert_eq!(
        executor2.calls_of("caseops_get_case_snapshot"),
        1,
        "re-planned and run once"
    );
    let run = store.inner.get("r15").unwrap();
    assert_eq!(
        run.ledger[0].error_code.as_deref(),
        Some("RECOVERED_DISCARDED")
    );
    assert_legal_path(&store.inner, "r15");
}

#[tokio::test]
async fn the_spec_is_stored_once_and_a_snapshot_that_still_holds_it_resumes() {
    use caseops_runtime::store::{Batch, CommitPoint};
    use caseops_runtime::{RunStore, SnapshotText};
    // Interrupted like the recovery test above: two commits are on record.
    let store = FailingStore::new(3);
    let (planner, executor) = (ScriptPlanner::new(c102_script()), ok_executor());
    engine()
        .start(spec("r-spec"), &planner, &executor, &store)
        .await
        .unwrap_err();
    let stored = store.inner.get("r-spec").unwrap();
    assert_eq!(stored.spec, Some(spec("r-spec")));
    assert!(
        stored
            .checkpoints
            .iter()
            .filter_map(|c| c.snapshot.as_ref())
            .all(|s| s.to_value().get("spec").is_none()),
        "no snapshot repeats the spec"
    );

    // As an older version left it: no spec on record, the spec inside the snapshot.
    let as_stored = |spec_in_snapshot: bool| {
        let mut checkpoints = stored.checkpoints.clone();
        if spec_in_snapshot {
            let last = checkpoints.last_mut().unwrap();
            let mut snapshot = last.snapshot.as_ref().unwrap().to_value();
            snapshot["spec"] = serde_json::to_value(spec("r-spec")).unwrap();
            last.snapshot = Some(SnapshotText::from_text(snapshot.to_string()).unwrap());
        }
        Batch {
            run_id: "r-spec".into(),
            point: CommitPoint::Suspend,
            spec: None,
            checkpoints,
            ledger: stored.ledger.clone(),
            state: "tool_running".into(),
            step_count: 1,
            outcome: None,
            approval: None,
        }
    };
    // Resumes the run from a store that holds only `batch`.
    let resume_from = |batch: Batch| async move {
        let store = MemoryStore::new();
        store.commit(batch).await.unwrap();
        let planner = ScriptPlanner::new(c102_script());
        let out = engine()
            .resume("r-spec", &planner, &ok_executor(), &store)
            .await;
        (out, store)
    };
    let (out, legacy) = resume_from(as_stored(true)).await;
    let out = out.unwrap();
    assert_eq!(out.status, "completed", "{out:?}");
    assert_eq!(legacy.get("r-spec").unwrap().spec, Some(spec("r-spec")));

    // With the spec nowhere, the run cannot be resumed and says why.
    let err = resume_from(as_stored(false)).await.0.unwrap_err();
    assert!(err.to_string().contains("no spec on record"), "{err}");
}

/// A C-102 run stopped by a failed commit after its third observation: the
/// store that holds the seven commits before it, and what the run had planned.
async fn c102_stopped_after_three_observations(run_id: &str) -> MemoryStore {
    // Commits 1, 3, 5, 7 come before planner calls, 2, 4, 6 before tools: the 8th
    // (before the fourth tool) fails.
    let store = FailingStore::new(8);
    let (planner, executor) = (ScriptPlanner::new(c102_script()), ok_executor());
    let err = engine()
        .start(spec(run_id), &planner, &executor, &store)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("injected failure"), "{err}");
    store.inner
}

/// The batch that puts `stored` into a new store, its last snapshot rewritten
/// by `edit` and its ledger by `ledger`.
fn restored_batch(
    run_id: &str,
    stored: &caseops_runtime::store::StoredRun,
    edit: impl FnOnce(&mut serde_json::Value),
    ledger: impl FnOnce(&mut Vec<caseops_runtime::LedgerRow>),
) -> caseops_runtime::store::Batch {
    let mut checkpoints = stored.checkpoints.clone();
    let last = checkpoints.last_mut().unwrap();
    let mut snapshot = last.snapshot.as_ref().unwrap().to_value();
    edit(&mut snapshot);
    last.snapshot = Some(caseops_runtime::SnapshotText::from_text(snapshot.to_string()).unwrap());
    let mut rows = stored.ledger.clone();
    ledger(&mut rows);
    caseops_runtime::store::Batch {
        run_id: run_id.into(),
        point: caseops_runtime::store::CommitPoint::Suspend,
        spec: stored.spec.clone(),
        checkpoints,
        ledger: rows,
        state: "planning".into(),
        step_count: 3,
        outcome: None,
        approval: None,
    }
}

/// Resumes `run_id` from a store holding only `batch`, with a planner that
/// answers with `script`: the outcome, the store and the views the planner was given.
async fn resume_scripted(
    run_id: &str,
    batch: caseops_runtime::store::Batch,
    script: Vec<serde_json::Value>,
) -> Result<
    (
        Outcome,
        MemoryStore,
        Vec<caseops_runtime::context::PlannerView>,
    ),
    caseops_runtime::RuntimeError,
> {
    use caseops_runtime::RunStore;
    let store = MemoryStore::new();
    store.commit(batch).await.unwrap();
    let planner = ScriptPlanner::new(script);
    let out = engine()
        .resume(run_id, &planner, &ok_executor(), &store)
        .await?;
    let views = planner.views.lock().unwrap().clone();
    Ok((out, store, views))
}

/// Resumes `run_id` from a store holding only `batch`: the outcome, and the view
/// the planner was given first.
async fn resume_from(
    run_id: &str,
    batch: caseops_runtime::store::Batch,
) -> Result<(Outcome, caseops_runtime::context::PlannerView), caseops_runtime::RuntimeError> {
    let (out, _, views) = resume_scripted(run_id, batch, c102_script().split_off(3)).await?;
    Ok((out, views[0].clone()))
}

#[tokio::test]
async fn a_pending_call_is_named_in_the_snapshot_and_its_row_taken_from_the_ledger() {
    // Stopped in `tool_running`: the commit before the first tool is on record,
    // the one after it fails.
    let store = FailingStore::new(3);
    let (planner, executor) = (ScriptPlanner::new(c102_script()), ok_executor());
    engine()
        .start(spec("r-pend"), &planner, &executor, &store)
        .await
        .unwrap_err();
    let stored = store.inner.get("r-pend").unwrap();
    let snapshot = stored.checkpoints.last().unwrap().snapshot.clone().unwrap();
    let row = stored.ledger[0].clone();
    assert_eq!(row.status, CallStatus::Running);
    assert_eq!(
        snapshot.to_value()["pending"],
        json!({"tool_call_id": row.tool_call_id}),
        "the pending call by its id alone"
    );

    // Recovery discards the interrupted read and runs it again, whichever way the
    // snapshot holds the pending call: by name, or whole as earlier versions did.
    let whole = {
        let row = serde_json::to_value(&row).unwrap();
        move |s: &mut serde_json::Value| s["pending"] = json!({"row": row})
    };
    for batch in [
        restored_batch("r-pend", &stored, |_| {}, |_| {}),
        restored_batch("r-pend", &stored, whole, |_| {}),
    ] {
        let (out, resumed, _) = resume_scripted("r-pend", batch, c102_script())
            .await
            .unwrap();
        assert_eq!(out.status, "completed", "{out:?}");
        assert_eq!(out.recovery_count, 1);
        let first = resumed.get("r-pend").unwrap().ledger[0].clone();
        assert_eq!(
            (first.tool_call_id, first.error_code.as_deref()),
            (row.tool_call_id.clone(), Some("RECOVERED_DISCARDED"))
        );
    }

    // Named, but not in the ledger: the run cannot say what was in flight.
    let gone = resume_scripted(
        "r-pend",
        restored_batch("r-pend", &stored, |_| {}, |rows| rows.clear()),
        c102_script(),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(gone, caseops_runtime::RuntimeError::Corrupt { .. })
            && gone.to_string().contains(&format!(
                "pending call `{}` is not in the ledger",
                row.tool_call_id
            )),
        "{gone}"
    );
}

/// An uninterrupted C-102 run: its outcome, and the view its planner was shown
/// before the fourth step (three observations).
async fn uninterrupted_c102(run_id: &str) -> (Outcome, caseops_runtime::context::PlannerView) {
    let planner = ScriptPlanner::new(c102_script());
    let out = engine()
        .start(spec(run_id), &planner, &ok_executor(), &MemoryStore::new())
        .await
        .unwrap();
    let before_fourth = planner.views.lock().unwrap()[3].clone();
    assert_eq!(before_fourth.observations.len(), 3);
    (out, before_fourth)
}

#[tokio::test]
async fn a_snapshot_names_its_observations_and_recovery_rebuilds_them_from_the_ledger() {
    let (straight_out, before_fourth) = uninterrupted_c102("r-obs").await;

    let stored = c102_stopped_after_three_observations("r-obs")
        .await
        .get("r-obs")
        .unwrap();
    let snapshot = stored.checkpoints.last().unwrap().snapshot.clone().unwrap();
    let controls = &snapshot.to_value()["controls"];
    assert!(controls.get("observations").is_none(), "{controls}");
    let named: Vec<&str> = controls["observed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["tool_call_id"].as_str().unwrap())
        .collect();
    let ledger: Vec<&str> = stored
        .ledger
        .iter()
        .map(|r| r.tool_call_id.as_str())
        .collect();
    assert_eq!(named, ledger, "each observed call, in order");
    assert!(
        !snapshot.as_str().contains("waiting_for_documents"),
        "no tool result is repeated in the snapshot: {}",
        snapshot.as_str()
    );

    let (out, view) = resume_from("r-obs", restored_batch("r-obs", &stored, |_| {}, |_| {}))
        .await
        .unwrap();
    assert_eq!(
        view, before_fourth,
        "the resumed planner sees what it would have"
    );
    assert_eq!(out.status, "completed", "{out:?}");
    assert_eq!(out.final_answer, straight_out.final_answer);
    assert_eq!(out.provenance, straight_out.provenance);
}

#[tokio::test]
async fn a_snapshot_written_with_its_observations_whole_still_resumes_from_them() {
    let (_, before_fourth) = uninterrupted_c102("r-old").await;
    let stored = c102_stopped_after_three_observations("r-old")
        .await
        .get("r-old")
        .unwrap();
    // As versions before this one wrote it: each observation whole, none named.
    let whole: Vec<serde_json::Value> = stored
        .ledger
        .iter()
        .map(|r| {
            let result = r.result.clone().unwrap();
            json!({"tool_call_id": r.tool_call_id, "tool": r.tool_name, "arguments": r.arguments,
                "evidence_ref": result["evidence_ref"], "result": result,
                "attempt": r.attempt_count, "bundle_digest": r.bundle_digest})
        })
        .collect();
    let old = |s: &mut serde_json::Value| {
        let controls = s["controls"].as_object_mut().unwrap();
        controls.remove("observed");
        controls.insert("observations".into(), json!(whole));
    };
    // Its ledger rows are not read for them: results blanked there do not matter.
    let blank = |rows: &mut Vec<caseops_runtime::LedgerRow>| {
        rows.iter_mut().for_each(|r| r.result = Some(json!({})))
    };
    let (out, view) = resume_from("r-old", restored_batch("r-old", &stored, old, blank))
        .await
        .unwrap();
    assert_eq!(view, before_fourth);
    assert_eq!(out.status, "completed", "{out:?}");
}

#[tokio::test]
async fn an_observed_call_missing_from_the_ledger_makes_the_run_corrupt_naming_the_call() {
    let stored = c102_stopped_after_three_observations("r-gone")
        .await
        .get("r-gone")
        .unwrap();
    let second = stored.ledger[1].tool_call_id.clone();
    let drop_second = |rows: &mut Vec<caseops_runtime::LedgerRow>| {
        rows.remove(1);
    };
    let err = resume_from(
        "r-gone",
        restored_batch("r-gone", &stored, |_| {}, drop_second),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(err, caseops_runtime::RuntimeError::Corrupt { .. })
            && err
                .to_string()
                .contains(&format!("`{second}` is not in the ledger")),
        "{err}"
    );

    // A call the ledger holds without a result cannot give one back either.
    let unfinished = |rows: &mut Vec<caseops_runtime::LedgerRow>| {
        rows[0].status = CallStatus::Running;
    };
    let err = resume_from(
        "r-gone",
        restored_batch("r-gone", &stored, |_| {}, unfinished),
    )
    .await
    .unwrap_err();
    assert!(
        err.to_string().contains("has no result in the ledger"),
        "{err}"
    );
}

#[tokio::test]
async fn a_write_pending_at_tool_running_goes_to_a_human() {
    use caseops_fixture_generated::Bundle as Fixture;
    let mut s = spec("w1");
    s.tenant_id = "t1".into();
    s.resource_id = "S-1".into();
    s.scopes = vec!["inventory:read".into(), "inventory:reserve".into()];
    s.catalog = ["inventory_lookup", "inventory_reserve"]
        .into_iter()
        .collect();
    s.stage = "restocking".into();
    let script = vec![
        call("inventory_lookup", json!({"shelf_id": "S-1", "sku": "ABC"})),
        call(
            "inventory_reserve",
            json!({"shelf_id": "S-1", "sku": "ABC", "units": 5}),
        ),
    ];
    // commits: planner, tool, planner, tool (reserve) — the 5th (next planner) fails
    let store = FailingStore::new(5);
    let engine = Engine::<Fixture>::new().unwrap();
    let executor = ok_executor();
    engine
        .start(s, &ScriptPlanner::new(script), &executor, &store)
        .await
        .unwrap_err();
    assert_eq!(
        store
            .inner
            .get("w1")
            .unwrap()
            .checkpoints
            .last()
            .unwrap()
            .to,
        "tool_running"
    );
    let out = engine
        .resume(
            "w1",
            &ScriptPlanner::new(vec![]),
            &ok_executor(),
            &store.inner,
        )
        .await
        .unwrap();
    assert_eq!(
        (out.status.as_str(), out.stop_reason.as_deref()),
        ("needs_human", Some("EFFECT_UNKNOWN"))
    );
}

#[tokio::test]
async fn resuming_a_finished_run_returns_its_outcome_without_running_anything() {
    let (planner, executor, store) = (
        ScriptPlanner::new(c102_script()),
        ok_executor(),
        MemoryStore::new(),
    );
    let first = engine()
        .start(spec("r16"), &planner, &executor, &store)
        .await
        .unwrap();
    let (p2, e2) = (ScriptPlanner::new(vec![]), ok_executor());
    assert_eq!(
        engine().resume("r16", &p2, &e2, &store).await.unwrap(),
        first
    );
    assert_eq!((p2.calls(), e2.calls()), (0, 0));
}

#[tokio::test]
async fn time_a_run_lay_orphaned_is_not_charged_to_its_wall_clock_budget() {
    let (now, clock) = manual_clock();
    // The driver dies after its second commit (the first tool ran); the run then
    // lies orphaned for ten minutes, ten times its 60 s budget.
    let store = FailingStore::new(3);
    let planner = ScriptPlanner::new(c102_script());
    let engine = engine().with_clock(clock);
    let err = engine
        .start(spec("r-orphan"), &planner, &ok_executor(), &store)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("injected failure"), "{err}");
    now.fetch_add(600_000, Ordering::SeqCst);

    let out = engine
        .resume(
            "r-orphan",
            &ScriptPlanner::new(c102_script()),
            &ok_executor(),
            &store.inner,
        )
        .await
        .unwrap();
    assert_eq!(
        (out.status.as_str(), out.stop_reason.as_deref()),
        ("completed", None),
        "{out:?}"
    );
    assert_eq!(out.step_count, 4);
    assert_legal_path(&store.inner, "r-orphan");
}

#[tokio::test]
async fn time_driven_before_a_takeover_still_counts_against_the_budget() {
    let (now, clock) = manual_clock();
    let tick = now.clone();
    // Every call takes 25 s of a 60 s budget. The first driver commits before its
    // second call at 25 s driven and dies after it; an hour passes. The second
    // driver redoes that call (50 s) and the third (75 s): there the budget ends the
    // run, after three steps. Had the first 25 s been forgotten, it would run four.
    let executor = ScriptExecutor::new(move |c: &caseops_runtime::ToolCall, _| {
        tick.fetch_add(25_000, Ordering::SeqCst);
        Ok(result_for(c.tool.name, &c.arguments))
    });
    let store = FailingStore::new(5);
    let engine = engine().with_clock(clock);
    engine
        .start(
            spec("r-driven"),
            &ScriptPlanner::new(c102_script()),
            &executor,
            &store,
        )
        .await
        .unwrap_err();
    now.fetch_add(3_600_000, Ordering::SeqCst);
    let out = engine
        .resume(
            "r-driven",
            &ScriptPlanner::new(c102_script().split_off(1)),
            &executor,
            &store.inner,
        )
        .await
        .unwrap();
    assert_eq!(
        (out.status.as_str(), out.stop_reason.as_deref()),
        ("stopped", Some("WALL_CLOCK_EXHAUSTED")),
        "{out:?}"
    );
    assert_eq!(out.step_count, 3, "{out:?}");
}

#[tokio::test]
async fn an_interrupted_driver_hands_the_run_over_between_steps_and_it_resumes_to_the_same_result()
{
    use std::sync::atomic::AtomicBool;
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    // The interrupt arrives while the second tool runs: that step finishes first.
    let executor = ScriptExecutor::new(move |c: &caseops_runtime::ToolCall, n| {
        if n == 1 {
            flag.store(true, Ordering::SeqCst);
        }
        Ok(result_for(c.tool.name, &c.arguments))
    });
    let store = MemoryStore::new();
    let engine = engine();
    let err = engine
        .start_interruptible(
            spec("r-handover"),
            &ScriptPlanner::new(c102_script()),
            &executor,
            &store,
            &*stop,
        )
        .await
        .unwrap_err();
    assert!(
        matches!(err, caseops_runtime::RuntimeError::Interrupted(ref id) if id == "r-handover"),
        "{err}"
    );
    assert_eq!(executor.calls(), 2, "the step in progress finished");
    let stored = store.get("r-handover").unwrap();
    assert_eq!(
        stored.checkpoints.last().unwrap().to,
        "observing",
        "the finished step was committed before the hand-over"
    );

    // The next driver goes on from there: the two reads are not repeated.
    let planner = ScriptPlanner::new(c102_script().split_off(2));
    let next = ok_executor();
    let out = engine
        .resume("r-handover", &planner, &next, &store)
        .await
        .unwrap();
    assert_eq!(out.status, "completed", "{out:?}");
    assert_eq!((out.step_count, out.recovery_count), (4, 0));
    assert_eq!(next.calls(), 2);
    assert_legal_path(&store, "r-handover");
}

fn shelf_spec(run_id: &str, scopes: &[&str]) -> caseops_runtime::RunSpec {
    let mut s = spec(run_id);
    s.tenant_id = "t1".into();
    s.resource_id = "S-1".into();
    s.scopes = scopes.iter().map(|s| s.to_string()).collect();
    s.catalog = ["inventory_lookup", "inventory_reserve"]
        .into_iter()
        .collect();
    s.stage = "restocking".into();
    s
}

#[tokio::test]
async fn a_write_tool_a_policy_may_permit_is_offered_to_the_planner() {
    use caseops_fixture_generated::Bundle as Fixture;
    let s = shelf_spec("vis1", &["inventory:read", "inventory:reserve"]);
    let planner = ScriptPlanner::new(vec![
        call("inventory_lookup", json!({"shelf_id": "S-1", "sku": "ABC"})),
        json!({"decision": "needs_human", "reason": "look"}),
    ]);
    let engine = Engine::<Fixture>::new().unwrap();
    engine
        .start(s, &planner, &ok_executor(), &MemoryStore::default())
        .await
        .unwrap();
    let views = planner.views.lock().unwrap();
    // The reservation requires a lookup first, so it appears in the second round.
    let names: Vec<&str> = views[1].tools.iter().map(|t| t.name.as_str()).collect();
    // No risk class is refused by the runtime: the reservation (a reversible write)
    // is offered because `permit-small-reservations` can permit it.
    assert_eq!(names, ["inventory_lookup", "inventory_reserve"]);
}

#[test]
fn policies_decide_visibility_before_arguments_exist() {
    use caseops_fixture_generated::Bundle as Fixture;
    let engine = Engine::<Fixture>::new().unwrap();
    let authz = engine.authorization();
    let s = shelf_spec("vis3", &["inventory:read"]);
    let p = authz.principal(&s, "restocking", Fixture::TOOLS).unwrap();
    let lookup = Fixture::tool("inventory_lookup").unwrap();
    let reserve = Fixture::tool("inventory_reserve").unwrap();
    assert!(authz.may_call(&p, lookup), "a read the policy permits");
    // The reservation's permit needs `units`: undecidable now, decided at call time.
    assert!(authz.may_call(&p, reserve));
    let denied = authz.authorize_as(
        &p,
        reserve,
        &json!({"shelf_id": "S-1", "sku": "A", "units": 500}),
    );
    assert!(matches!(
        denied,
        caseops_runtime::authorization::AuthzDecision::Deny { .. }
    ));
    // Without `inventory:read` no permit applies to the lookup whatever the
    // arguments: withheld.
    let s = shelf_spec("vis4", &["inventory:reserve"]);
    let p = authz.principal(&s, "restocking", Fixture::TOOLS).unwrap();
    assert!(!authz.may_call(&p, lookup));
}

fn answer_citing(refs: &[&str]) -> serde_json::Value {
    let mut answer = final_answer();
    answer["answer"]["evidence_refs"] = json!(refs);
    answer
}

#[tokio::test]
async fn a_fabricated_reference_gets_one_correction_round_then_needs_a_human() {
    let mut script = c102_script();
    script.pop();
    script.push(answer_citing(&[
        "case://C-102@7",
        "evidence://C-102/DOC-FABRICATED@1",
    ]));
    script.push(answer_citing(&["evidence://C-102/DOC-FABRICATED@1"]));
    let (planner, store) = (ScriptPlanner::new(script), MemoryStore::new());
    let out = engine()
        .start(spec("fab"), &planner, &ok_executor(), &store)
        .await
        .unwrap();
    assert_eq!(out.status, "needs_human", "{out:?}");
    assert_eq!(out.stop_reason.as_deref(), Some("EVIDENCE_NOT_OBSERVED"));
    assert!(out.final_answer.is_none() && out.provenance.is_none());
    // The second answer was planned with the reason the first was rejected.
    let views = planner.views.lock().unwrap();
    let last = views.last().unwrap();
    assert_eq!(last.corrections.len(), 1);
    assert!(
        last.corrections[0].contains("`evidence://C-102/DOC-FABRICATED@1`"),
        "{:?}",
        last.corrections
    );
    let run = store.get("fab").unwrap();
    assert!(run.checkpoints.iter().any(|c| c.from == "planning"
        && c.to == "observing"
        && c.reason.as_deref() == Some("EVIDENCE_NOT_OBSERVED")));
    assert_legal_path(&store, "fab");
}

#[tokio::test]
async fn a_corrected_answer_completes_with_the_provenance_of_each_cited_reference() {
    let mut script = c102_script();
    script.pop();
    script.push(answer_citing(&["evidence://C-102/DOC-FABRICATED@1"]));
    script.push(answer_citing(&[
        "case://C-102@7",
        "evidence://C-102/DOC-C102-003@1",
    ]));
    let (planner, store) = (ScriptPlanner::new(script), MemoryStore::new());
    let out = engine()
        .start(spec("fixed"), &planner, &ok_executor(), &store)
        .await
        .unwrap();
    assert_eq!(out.status, "completed", "{out:?}");
    let provenance = out.provenance.expect("a completed run has provenance");
    assert_eq!(
        provenance["case://C-102@7"]["tool"],
        "caseops_get_case_snapshot"
    );
    assert_eq!(provenance["case://C-102@7"]["tool_call_id"], "fixed:2");
    assert_eq!(provenance["case://C-102@7"]["attempt"], 1);
    assert_eq!(
        provenance["case://C-102@7"]["bundle_digest"],
        Bundle::BUNDLE_DIGEST
    );
    // The listing also returns DOC-C102-003's reference inside a list; only the
    // resolution returned it as its evidence.
    assert_eq!(
        provenance["evidence://C-102/DOC-C102-003@1"]["tool"],
        "caseops_resolve_document_alias"
    );
}

#[tokio::test]
async fn an_answer_citing_nothing_is_rejected_when_the_contract_requires_evidence() {
    let mut script = c102_script();
    script.pop();
    script.push(answer_citing(&[]));
    script.push(answer_citing(&[]));
    let (planner, store) = (ScriptPlanner::new(script), MemoryStore::new());
    let out = engine()
        .start(spec("none"), &planner, &ok_executor(), &store)
        .await
        .unwrap();
    assert_eq!(out.status, "needs_human");
    assert_eq!(out.stop_reason.as_deref(), Some("EVIDENCE_NOT_OBSERVED"));
}

#[test]
fn a_cached_decision_is_the_one_a_fresh_evaluation_gives() {
    use caseops_runtime::authorization::Approval;
    // One engine answers every question twice (the second from its cache); a fresh
    // engine per question answers it from Cedar alone.
    let warm = engine();
    let all_scopes: Vec<String> = Bundle::TOOLS
        .iter()
        .map(|t| t.required_scope.to_string())
        .collect();
    let mut specs = Vec::new();
    for (i, (tenant, scopes)) in [
        ("tenant-demo", all_scopes.clone()),
        ("tenant-demo", vec!["case:read".to_string()]),
        ("tenant-other", all_scopes.clone()),
    ]
    .into_iter()
    .enumerate()
    {
        for stage in ["investigating", "closing"] {
            let mut s = spec(&format!("cache-{i}-{stage}"));
            s.tenant_id = tenant.into();
            s.scopes = scopes.clone();
            s.catalog = Bundle::CATALOG.iter().map(|c| c.to_string()).collect();
            specs.push((s, stage));
        }
    }
    let mut asked = 0;
    for (s, stage) in &specs {
        let p = warm
            .authorization()
            .principal(s, stage, Bundle::TOOLS)
            .unwrap();
        // Every question put to it is a new one, so each answer is Cedar's.
        let cold = engine();
        let cold_p = cold
            .authorization()
            .principal(s, stage, Bundle::TOOLS)
            .unwrap();
        for tool in Bundle::TOOLS {
            for case in ["C-102", "C-999"] {
                let args = json!({"case_id": case, "document_id": "DOC-C102-003", "document_codes": ["ACCIDENT_CERTIFICATE"], "reason": "missing"});
                for approval in [Approval::None, Approval::Approved] {
                    let expected = cold
                        .authorization()
                        .authorize_with(&cold_p, tool, &args, approval);
                    for _ in 0..2 {
                        let got = warm
                            .authorization()
                            .authorize_with(&p, tool, &args, approval);
                        assert_eq!(
                            got, expected,
                            "{} {stage} {} {case} {approval:?}",
                            s.tenant_id, tool.name
                        );
                    }
                    asked += 1;
                }
            }
            assert_eq!(
                warm.authorization().may_call(&p, tool),
                cold.authorization().may_call(&cold_p, tool),
                "{} {stage} {}",
                s.tenant_id,
                tool.name
            );
        }
    }
    assert!(asked > 100);
    // Another task with the same facts gets the same answers (and may share them).
    let (s, stage) = &specs[0];
    let mut other_task = s.clone();
    other_task.task_id = "task-another".into();
    let a = warm
        .authorization()
        .principal(s, stage, Bundle::TOOLS)
        .unwrap();
    let b = warm
        .authorization()
        .principal(&other_task, stage, Bundle::TOOLS)
        .unwrap();
    let tool = Bundle::tool("caseops_get_case_snapshot").unwrap();
    let args = json!({"case_id": "C-102"});
    assert_eq!(
        warm.authorization().authorize_as(&a, tool, &args),
        warm.authorization().authorize_as(&b, tool, &args)
    );
}

/// A memory store that logs when each commit returns, and makes the commits before
/// a tool wait: a read-only call's, when the store says its commits cross a socket,
/// until its tool has run (or 2 s have passed, when it refuses); any other for a
/// moment, so that a call run too early shows.
struct WatchingStore {
    inner: MemoryStore,
    log: Arc<std::sync::Mutex<Vec<String>>>,
    remote: bool,
}

impl caseops_runtime::RunStore for WatchingStore {
    async fn commit(
        &self,
        batch: caseops_runtime::store::Batch,
    ) -> Result<(), caseops_runtime::store::StoreError> {
        use caseops_runtime::store::{CommitPoint, StoreError};
        let executed = || self.log.lock().unwrap().len();
        match batch.point {
            CommitPoint::BeforeTool { read_only: true } if self.remote => {
                let before = executed();
                let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
                while executed() == before {
                    if tokio::time::Instant::now() > deadline {
                        return Err(StoreError::Unavailable(
                            "the call did not run while its commit was under way".into(),
                        ));
                    }
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            }
            CommitPoint::BeforeTool { .. } => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            _ => {}
        }
        let point = format!("{:?}", batch.point);
        self.inner.commit(batch).await?;
        self.log.lock().unwrap().push(format!("committed {point}"));
        Ok(())
    }

    async fn load(
        &self,
        run_id: &str,
    ) -> Result<Option<caseops_runtime::store::StoredRun>, caseops_runtime::store::StoreError> {
        self.inner.load(run_id).await
    }

    fn commits_remotely(&self) -> bool {
        self.remote
    }
}

/// An executor answering as `ok_executor` does, logging each call in `log`.
fn logging_executor(
    log: Arc<std::sync::Mutex<Vec<String>>>,
) -> ScriptExecutor<
    impl Fn(&caseops_runtime::ToolCall, usize) -> Result<serde_json::Value, ExecError> + Send + Sync,
> {
    ScriptExecutor::new(move |c: &caseops_runtime::ToolCall, _| {
        log.lock()
            .unwrap()
            .push(format!("executed {}", c.tool.name));
        Ok(result_for(c.tool.name, &c.arguments))
    })
}

/// A C-102 run on a [`WatchingStore`]: the log of calls made and commits returned,
/// and the position of the first call in it.
async fn c102_logged(run_id: &str, remote: bool) -> (Vec<String>, usize) {
    let log = Arc::new(std::sync::Mutex::new(Vec::new()));
    let store = WatchingStore {
        inner: MemoryStore::new(),
        log: log.clone(),
        remote,
    };
    let out = engine()
        .start(
            spec(run_id),
            &ScriptPlanner::new(c102_script()),
            &logging_executor(log.clone()),
            &store,
        )
        .await
        .unwrap();
    assert_eq!(out.status, "completed", "{out:?}");
    assert_legal_path(&store.inner, run_id);
    let log = log.lock().unwrap().clone();
    let first = log
        .iter()
        .position(|l| l == "executed caseops_get_case_snapshot")
        .unwrap();
    (log, first)
}

#[tokio::test]
async fn a_read_only_call_runs_while_its_commit_crosses_a_socket() {
    let (log, first) = c102_logged("r-beside", true).await;
    // The call ran before the commit that precedes it returned.
    assert_eq!(
        log[first + 1],
        "committed BeforeTool { read_only: true }",
        "{log:?}"
    );
}

#[tokio::test]
async fn a_write_call_runs_only_after_its_commit_returned() {
    use caseops_fixture_generated::Bundle as Fixture;
    let log = Arc::new(std::sync::Mutex::new(Vec::new()));
    let store = WatchingStore {
        inner: MemoryStore::new(),
        log: log.clone(),
        remote: true,
    };
    let script = vec![
        call("inventory_lookup", json!({"shelf_id": "S-1", "sku": "ABC"})),
        call(
            "inventory_reserve",
            json!({"shelf_id": "S-1", "sku": "ABC", "units": 5}),
        ),
        final_answer(),
    ];
    Engine::<Fixture>::new()
        .unwrap()
        .start(
            shelf_spec("w-after", &["inventory:read", "inventory:reserve"]),
            &ScriptPlanner::new(script),
            &logging_executor(log.clone()),
            &store,
        )
        .await
        .unwrap();
    let log = log.lock().unwrap();
    let write = log
        .iter()
        .position(|l| l == "executed inventory_reserve")
        .unwrap_or_else(|| panic!("the write ran: {log:?}"));
    assert_eq!(
        log[write - 1],
        "committed BeforeTool { read_only: false }",
        "{log:?}"
    );
}

#[tokio::test]
async fn a_read_only_result_whose_commit_failed_is_discarded_and_the_call_runs_again() {
    // Commit 1 is before the first planner call, 2 before the first tool: it fails
    // while the tool runs beside it.
    let store = FailingStore::new(2).remote();
    let executor = ok_executor();
    let err = engine()
        .start(
            spec("r-lost"),
            &ScriptPlanner::new(c102_script()),
            &executor,
            &store,
        )
        .await
        .unwrap_err();
    assert!(err.to_string().contains("injected failure"), "{err}");
    assert_eq!(executor.calls_of("caseops_get_case_snapshot"), 1);
    let stored = store.inner.get("r-lost").unwrap();
    assert!(
        stored.ledger.is_empty(),
        "nothing of the call is on record: {:?}",
        stored.ledger
    );

    let again = ok_executor();
    let out = engine()
        .resume(
            "r-lost",
            &ScriptPlanner::new(c102_script()),
            &again,
            &store.inner,
        )
        .await
        .unwrap();
    assert_eq!(out.status, "completed", "{out:?}");
    assert_eq!(again.calls_of("caseops_get_case_snapshot"), 1);
    assert_legal_path(&store.inner, "r-lost");
}

#[tokio::test]
async fn a_store_that_commits_in_process_commits_before_a_read_only_call() {
    let (log, first) = c102_logged("r-local", false).await;
    assert_eq!(
        log[first - 1],
        "committed BeforeTool { read_only: true }",
        "{log:?}"
    );
}

#[tokio::test]
async fn a_failed_commit_stops_the_read_only_call_beside_it_without_waiting_for_it() {
    // Commit 2, before the first tool, fails while the call beside it would take
    // an hour: the run ends with the commit's error, well before even the tool's
    // own timeout (10 s) would end the call.
    let store = FailingStore::new(2).remote();
    let mut executor = ok_executor();
    executor.delay = Some(Duration::from_secs(3600));
    let ended = tokio::time::timeout(
        Duration::from_secs(5),
        engine().start(
            spec("r-stop"),
            &ScriptPlanner::new(c102_script()),
            &executor,
            &store,
        ),
    )
    .await
    .expect("the run waited for the call");
    let err = ended.unwrap_err();
    assert!(err.to_string().contains("injected failure"), "{err}");
    assert_eq!(executor.calls_of("caseops_get_case_snapshot"), 1);
}
