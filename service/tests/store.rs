//! The run store on both backends: commit points, idempotent allocation under
//! concurrency, the audit hash chain, and runs driven through it.

mod db_support;

use std::sync::Arc;
use std::time::Duration;

use caseops_generated::{Bundle, Dispatcher};
use caseops_host::api::Resources;
use caseops_host::store::row_format::{self, RowFormat};
use caseops_host::store::runs::{Allocation, NewRun, SqlRunStore};
use caseops_host::store::{Db, audit};
use caseops_runtime::context::PlannerView;
use caseops_runtime::{
    ContractBundle, Engine, ExecError, Executor, Planner, PlannerError, RunSpec, ToolCall,
    ToolDispatch,
};
use caseops_service::domain::reference_data;
use caseops_service::planner::ConformancePlanner;
use caseops_service::reference::{SqlRepository, seed};
use caseops_service::tools::CaseOpsTools;
use db_support::fresh_databases;
use serde_json::{Value, json};

/// The envelopes the relay would publish now, in its order (one tenant's here).
async fn pending_envelopes(db: &Db) -> Vec<Value> {
    let claim = caseops_host::store::outbox::claim(db, 1000).await.unwrap();
    let envelopes = claim
        .events
        .iter()
        .map(|e| serde_json::from_str(&e.payload).unwrap())
        .collect();
    // Given back at once (none published): a dropped claim's PostgreSQL locks go
    // only when the server notices its connection closed.
    claim.finish(db, 0).await.unwrap();
    envelopes
}

/// Runs tools in-process against the database (no MCP hop): isolates the store.
struct Direct(Dispatcher<CaseOpsTools<SqlRepository>>);

impl Executor for Direct {
    async fn execute(&self, call: &ToolCall) -> Result<Value, ExecError> {
        self.0
            .call(call.tool, &call.context, call.arguments.clone())
            .await
            .map_err(|e| ExecError::Business {
                code: "E".into(),
                message: e.to_string(),
            })
    }
}

fn spec(run_id: &str) -> RunSpec {
    RunSpec {
        run_id: run_id.into(),
        tenant_id: "tenant-demo".into(),
        task_id: format!("task-{run_id}"),
        subject: "user:alice".into(),
        resource_id: "C-102".into(),
        scopes: Bundle::TOOLS
            .iter()
            .map(|t| t.required_scope.to_string())
            .collect(),
        catalog: Bundle::CATALOG.iter().map(|s| s.to_string()).collect(),
        stage: "investigating".into(),
        goal: "check".into(),
        correlation_id: "c".into(),
    }
}

fn new_run(run_id: &str, key: &str, hash: &str) -> NewRun {
    NewRun {
        spec: spec(run_id),
        actor: "user:alice".into(),
        idempotency_key: key.into(),
        request_hash: hash.into(),
        request_id: None,
        planner_kind: "conformance".into(),
        model: None,
        bundle_digest: Bundle::BUNDLE_DIGEST.into(),
    }
}

async fn setup(url: &str) -> (Db, SqlRunStore, Direct) {
    let db = Db::connect(url, 8, &caseops_service::reference::SCHEMA)
        .await
        .unwrap();
    seed(&db, &reference_data()).await.unwrap();
    let direct = Direct(Dispatcher(CaseOpsTools {
        repo: SqlRepository { db: db.clone() },
    }));
    (db.clone(), SqlRunStore::new(db), direct)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_c102_run_commits_at_most_two_transactions_per_tool_step() {
    for (backend, url) in fresh_databases("commits").await {
        let (db, store, direct) = setup(&url).await;
        // Only across a socket does a read-only call run beside its commit.
        assert_eq!(
            caseops_runtime::RunStore::commits_remotely(&store),
            backend == "postgres"
        );
        assert!(matches!(
            store
                .allocate(&new_run("r1", "key-00001", "h"))
                .await
                .unwrap(),
            Allocation::New(_)
        ));
        let out = Engine::<Bundle>::new()
            .unwrap()
            .start(spec("r1"), &ConformancePlanner, &direct, &store)
            .await
            .unwrap();
        assert_eq!(out.status, "completed", "{backend}: {out:?}");
        assert_eq!(out.step_count, 4);
        // the conformance driver runs in-process: one commit before each of 4
        // tools, one terminal
        assert_eq!(db.commits(), 5, "{backend}");
        let cps = store.checkpoints("tenant-demo", "r1").await.unwrap();
        assert!(
            cps.iter()
                .enumerate()
                .all(|(i, c)| c.sequence == i as u64 + 1),
            "{backend}"
        );
        assert_eq!(cps.last().unwrap().to, "completed");
        let ledger = store.ledger("tenant-demo", "r1").await.unwrap();
        let names: Vec<&str> = ledger.iter().map(|r| r.tool_name.as_str()).collect();
        assert_eq!(
            names,
            [
                "caseops_get_case_snapshot",
                "caseops_get_policy_requirements",
                "caseops_list_unclassified_documents",
                "caseops_resolve_document_alias"
            ],
            "{backend}"
        );
        let run = store.get("tenant-demo", "r1").await.unwrap().unwrap();
        assert_eq!((run.status.as_str(), run.step_count), ("completed", 4));
        assert!(
            store.get("tenant-other", "r1").await.unwrap().is_none(),
            "tenant-scoped"
        );
        // The run's start and its end.
        let v = audit::verify(&db).await.unwrap();
        assert_eq!((v.events, v.problems.len()), (2, 0), "{backend}");
    }
}

/// The conformance driver, declared an external call (as a model API is).
struct External(ConformancePlanner);

impl Planner for External {
    fn kind(&self) -> &'static str {
        "external"
    }

    async fn propose(&self, view: &PlannerView) -> Result<Value, PlannerError> {
        self.0.propose(view).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_with_an_external_planner_also_commits_before_every_planner_call() {
    for (backend, url) in fresh_databases("external").await {
        let (db, store, direct) = setup(&url).await;
        store
            .allocate(&new_run("r1", "key-00001", "h"))
            .await
            .unwrap();
        let out = Engine::<Bundle>::new()
            .unwrap()
            .start(spec("r1"), &External(ConformancePlanner), &direct, &store)
            .await
            .unwrap();
        assert_eq!(out.status, "completed", "{backend}: {out:?}");
        // one before each of 5 planner calls, one before each of 4 tools, one terminal
        assert_eq!(db.commits(), 10, "{backend}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_concurrent_requests_with_one_key_allocate_exactly_one_run() {
    for (backend, url) in fresh_databases("idem").await {
        let (_, store, _) = setup(&url).await;
        let store = Arc::new(store);
        let mut tasks = Vec::new();
        for i in 0..50 {
            let store = store.clone();
            tasks.push(tokio::spawn(async move {
                store
                    .allocate(&new_run(&format!("run-{i}"), "same-key-1", "same-hash"))
                    .await
                    .unwrap()
            }));
        }
        let mut new = 0;
        let mut ids = std::collections::BTreeSet::new();
        for t in tasks {
            match t.await.unwrap() {
                Allocation::New(r) => {
                    new += 1;
                    ids.insert(r.run_id);
                }
                Allocation::Existing(r) => {
                    ids.insert(r.run_id);
                }
                Allocation::Conflict(_) => panic!("{backend}: same body is no conflict"),
                Allocation::Absent => panic!("{backend}: no resource check was asked for"),
            }
        }
        assert_eq!(
            (new, ids.len()),
            (1, 1),
            "{backend}: exactly one run, everyone gets its id"
        );
        assert!(
            matches!(
                store
                    .allocate(&new_run("other", "same-key-1", "another-hash"))
                    .await
                    .unwrap(),
                Allocation::Conflict(_)
            ),
            "{backend}"
        );
    }
}

/// The API's check that the case exists, made by the statement that creates the
/// run: a run on a case that does not exist (or is another tenant's) writes
/// nothing at all, and a key already used still answers its run once the case is
/// gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_creation_checks_its_case_itself_and_a_replay_outlives_the_case() {
    for (backend, url) in fresh_databases("condition").await {
        let (db, store, _) = setup(&url).await;
        let condition = SqlRepository { db: db.clone() }.condition();
        assert!(condition.is_some());
        let rows = |table: &'static str| {
            let db = db.clone();
            async move {
                let row = db
                    .fetch_optional(&format!("SELECT COUNT(*) AS n FROM {table}"), &[])
                    .await
                    .unwrap()
                    .unwrap();
                row.get::<i64>("n").unwrap()
            }
        };
        let mut unknown = new_run("m1", "cond-key-1", "h");
        unknown.spec.resource_id = "C-404".into();
        let mut foreign = new_run("m2", "cond-key-2", "h");
        foreign.spec.tenant_id = "tenant-other".into();
        for missing in [&unknown, &foreign] {
            assert_eq!(
                store.create_where(missing, condition).await.unwrap(),
                Allocation::Absent,
                "{backend}: {}/{}",
                missing.spec.tenant_id,
                missing.spec.resource_id
            );
        }
        let written = (
            rows("runs").await,
            rows("audit_events").await,
            rows("outbox_events").await,
        );
        assert_eq!(written, (0, 0, 0), "{backend}: nothing written");

        db.execute(
            "INSERT INTO cases (tenant_id, case_id, version, status, policy_id, policy_version, received_codes) \
             VALUES ('tenant-demo', 'C-TMP', 1, 'open', 'POL-1', 'v1', '[]')",
            &[],
        )
        .await
        .unwrap();
        let on_tmp = |run_id: &str| {
            let mut run = new_run(run_id, "cond-key-3", "h");
            run.spec.resource_id = "C-TMP".into();
            run
        };
        let first = on_tmp("n1");
        assert!(
            matches!(store.create_where(&first, condition).await.unwrap(), Allocation::New(r) if r.run_id == "n1"),
            "{backend}"
        );
        db.execute("DELETE FROM cases WHERE case_id = 'C-TMP'", &[])
            .await
            .unwrap();
        let mut replay = on_tmp("n2");
        assert!(
            matches!(store.create_where(&replay, condition).await.unwrap(), Allocation::Existing(r) if r.run_id == "n1"),
            "{backend}: the replay answers the run it names"
        );
        replay.request_hash = "another".into();
        assert!(
            matches!(
                store.create_where(&replay, condition).await.unwrap(),
                Allocation::Conflict(_)
            ),
            "{backend}"
        );
        replay.idempotency_key = "cond-key-4".into();
        assert_eq!(
            store.create_where(&replay, condition).await.unwrap(),
            Allocation::Absent,
            "{backend}: a new key on the deleted case"
        );
        assert_eq!(
            (rows("runs").await, rows("audit_events").await),
            (1, 1),
            "{backend}: one run and its start"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_audit_chain_detects_an_edited_or_deleted_event() {
    for (backend, url) in fresh_databases("audit").await {
        let (db, store, direct) = setup(&url).await;
        let engine = Engine::<Bundle>::new().unwrap();
        for i in 0..3 {
            let id = format!("a{i}");
            store
                .allocate(&new_run(&id, &format!("audit-key-{i}"), "h"))
                .await
                .unwrap();
            engine
                .start(spec(&id), &ConformancePlanner, &direct, &store)
                .await
                .unwrap();
        }
        assert_eq!(
            audit::verify(&db).await.unwrap().problems,
            Vec::<String>::new()
        );
        db.execute(
            "UPDATE audit_events SET payload = REPLACE(payload, 'completed', 'failed') WHERE seq = 2",
            &[],
        )
        .await
        .unwrap();
        let v = audit::verify(&db).await.unwrap();
        assert!(
            v.problems.iter().any(|p| p.contains("event 2 was altered")),
            "{backend}: {:?}",
            v.problems
        );
        db.execute("DELETE FROM audit_events WHERE seq = 2", &[])
            .await
            .unwrap();
        let v = audit::verify(&db).await.unwrap();
        assert!(
            v.problems.iter().any(|p| p.contains("event 3 follows 1")),
            "{backend}: {:?}",
            v.problems
        );
        let count = |topic: &'static str| {
            let db = db.clone();
            async move {
                db.fetch_optional(
                    "SELECT COUNT(*) AS n FROM outbox_events WHERE topic LIKE ?",
                    &[topic.into()],
                )
                .await
                .unwrap()
                .unwrap()
                .get::<i64>("n")
                .unwrap()
            }
        };
        assert_eq!(
            count("%.agent-run.completed.v1").await,
            3,
            "{backend}: one outbox event per terminal run"
        );
        assert_eq!(
            count("%.agent-run.started.v1").await,
            3,
            "{backend}: one outbox event per started run"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_completed_runs_audit_and_outbox_events_name_the_call_behind_each_cited_reference() {
    for (backend, url) in fresh_databases("provenance").await {
        let (db, store, direct) = setup(&url).await;
        let engine = Engine::<Bundle>::new().unwrap();
        store
            .allocate(&new_run("p1", "provenance-key-1", "h"))
            .await
            .unwrap();
        let outcome = engine
            .start(spec("p1"), &ConformancePlanner, &direct, &store)
            .await
            .unwrap();
        let cited = outcome.final_answer.as_ref().unwrap()["evidence_refs"]
            .as_array()
            .cloned()
            .unwrap();
        assert!(!cited.is_empty(), "{backend}");
        let ledger: Vec<(String, String)> = db
            .fetch_all(
                "SELECT tool_call_id, tool_name FROM tool_executions WHERE run_id = 'p1'",
                &[],
            )
            .await
            .unwrap()
            .into_iter()
            .map(|r| (r.get("tool_call_id").unwrap(), r.get("tool_name").unwrap()))
            .collect();
        let audit: String = db
            .fetch_optional(
                "SELECT payload FROM audit_events WHERE run_id = 'p1' AND kind = 'agent.run'",
                &[],
            )
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("{backend}: no audit event for the run"))
            .get("payload")
            .unwrap();
        // The relay's envelope: its `data` is what the audit event says.
        let published = pending_envelopes(&db).await;
        let completed = published
            .iter()
            .find(|e| {
                e["type"]
                    .as_str()
                    .is_some_and(|t| t.ends_with(".agent-run.completed.v1"))
            })
            .unwrap_or_else(|| panic!("{backend}: no completed event in {published:?}"));
        assert_eq!(
            completed["data"]["result"],
            outcome.final_answer.clone().unwrap(),
            "{backend}"
        );
        for (table, payload) in [
            (
                "audit_events",
                serde_json::from_str::<Value>(&audit).unwrap(),
            ),
            ("outbox_events", completed["data"].clone()),
        ] {
            for reference in &cited {
                let from = &payload["provenance"][reference.as_str().unwrap()];
                let call = (
                    from["tool_call_id"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                    from["tool"].as_str().unwrap_or_default().to_string(),
                );
                assert!(
                    ledger.contains(&call),
                    "{backend} {table}: {reference} came from {from}, not a call in the ledger {ledger:?}"
                );
                assert_eq!(from["bundle_digest"], Bundle::BUNDLE_DIGEST, "{backend}");
            }
        }
        // The provenance is inside the hash chain: rewriting it is detected.
        db.execute(
            "UPDATE audit_events SET payload = REPLACE(payload, '\"attempt\":1', '\"attempt\":2') WHERE run_id = 'p1'",
            &[],
        )
        .await
        .unwrap();
        let v = audit::verify(&db).await.unwrap();
        assert!(
            v.problems.iter().any(|p| p.contains("was altered")),
            "{backend}: {:?}",
            v.problems
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_resumes_from_the_database_after_its_process_stopped() {
    for (backend, url) in fresh_databases("resume").await {
        let (_, store, direct) = setup(&url).await;
        store
            .allocate(&new_run("r9", "resume-key-1", "h"))
            .await
            .unwrap();
        // A process that died after its third commit (before the first tool).
        let dying = DiesAt(&store, 2, Default::default());
        let engine = Engine::<Bundle>::new().unwrap();
        assert!(
            engine
                .start(spec("r9"), &ConformancePlanner, &direct, &dying)
                .await
                .is_err()
        );
        let out = engine
            .resume("r9", &ConformancePlanner, &direct, &store)
            .await
            .unwrap();
        assert_eq!(
            (out.status.as_str(), out.step_count, out.recovery_count),
            ("completed", 4, 1),
            "{backend}"
        );
        let cps = store.checkpoints("tenant-demo", "r9").await.unwrap();
        assert!(
            cps.iter()
                .enumerate()
                .all(|(i, c)| c.sequence == i as u64 + 1),
            "{backend}: no sequence duplicated or skipped"
        );
    }
}

/// A store that fails its `n`th commit, as a process killed just before it would.
struct DiesAt<'a>(&'a SqlRunStore, usize, std::sync::atomic::AtomicUsize);

impl caseops_runtime::RunStore for DiesAt<'_> {
    async fn commit(
        &self,
        b: caseops_runtime::store::Batch,
    ) -> Result<(), caseops_runtime::store::StoreError> {
        if self.2.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == self.1 {
            return Err(caseops_runtime::store::StoreError::Unavailable(
                "killed".into(),
            ));
        }
        self.0.commit(b).await
    }
    async fn load(
        &self,
        id: &str,
    ) -> Result<Option<caseops_runtime::store::StoredRun>, caseops_runtime::store::StoreError> {
        self.0.load(id).await
    }
}

async fn count(db: &Db, sql: &str) -> i64 {
    db.fetch_all(sql, &[]).await.unwrap()[0]
        .get::<i64>("n")
        .unwrap()
}

/// Columns of run `run_id`'s row as stored, not as a reader rebuilds them.
async fn stored_row(db: &Db, columns: &str, run_id: &str) -> caseops_host::store::sql::Row {
    db.fetch_optional(
        &format!("SELECT {columns} FROM runs WHERE run_id = ?"),
        &caseops_host::params![run_id],
    )
    .await
    .unwrap()
    .unwrap_or_else(|| panic!("no run `{run_id}`"))
}

/// Run `run_id` on `url` until its process stops mid-run (at the fourth commit).
async fn stopped_mid_run(url: &str, run_id: &str) -> (Db, SqlRunStore, Direct) {
    let (db, store, direct) = setup(url).await;
    store
        .allocate(&new_run(run_id, &format!("{run_id}-key"), "h"))
        .await
        .unwrap();
    let dying = DiesAt(&store, 3, Default::default());
    let started = Engine::<Bundle>::new()
        .unwrap()
        .start(spec(run_id), &ConformancePlanner, &direct, &dying)
        .await;
    assert!(started.is_err(), "the run stopped mid-way");
    (db, store, direct)
}

/// The ledger and checkpoints of `run_id` as a reader sees them, without what
/// differs between two runs of the same work (ids and times).
/// What readers see of a run: its ledger, its checkpoints, and its spec,
/// provenance and result with the run id written as `RUN`.
async fn as_read(store: &SqlRunStore, run_id: &str) -> (Vec<Value>, Vec<Value>, String) {
    let ledger = store.ledger("tenant-demo", run_id).await.unwrap();
    let checkpoints = store.checkpoints("tenant-demo", run_id).await.unwrap();
    let record = store.record(run_id).await.unwrap().unwrap();
    (
        ledger
            .iter()
            .map(|r| {
                serde_json::json!([
                    r.tool_name,
                    r.tool_version,
                    r.arguments,
                    r.arguments_hash,
                    r.fingerprint,
                    r.status.as_str(),
                    r.attempt_count,
                    r.result,
                    r.bundle_digest
                ])
            })
            .collect(),
        checkpoints
            .iter()
            .map(|c| serde_json::json!([c.sequence, c.from, c.to, c.reason]))
            .collect(),
        serde_json::json!([record.spec, record.provenance, record.final_result])
            .to_string()
            .replace(run_id, "RUN"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compact_rows_read_back_as_full_rows_and_leave_out_what_readers_derive() {
    for (backend, url) in fresh_databases("row_format").await {
        let (db, full, direct) = setup(&url).await;
        assert_eq!(
            RowFormat::of(&db).await.unwrap(),
            RowFormat::NEWEST,
            "{backend}: a new database starts at the most compact format"
        );
        let compact = SqlRunStore::new(db.clone()).with_row_format(RowFormat::Compact);
        let runs = SqlRunStore::new(db.clone()).with_row_format(RowFormat::CompactRuns);
        let history = SqlRunStore::new(db.clone()).with_row_format(RowFormat::CompactHistory);
        let timeline = SqlRunStore::new(db.clone()).with_row_format(RowFormat::CompactTimeline);
        let requests = SqlRunStore::new(db.clone()).with_row_format(RowFormat::CompactRequests);
        let engine = Engine::<Bundle>::new().unwrap();
        let new_run = |run_id: &str| NewRun {
            // The spec's correlation id is the request id: a column holds it.
            request_id: Some("c".into()),
            ..new_run(run_id, &format!("{run_id}-key"), "h")
        };
        for (store, format) in [
            (&full, "full"),
            (&compact, "compact"),
            (&runs, "compact-runs"),
            (&history, "compact-history"),
            (&timeline, "compact-timeline"),
            (&requests, "compact-requests"),
        ] {
            let run_id = format!("r-{format}");
            store.allocate(&new_run(&run_id)).await.unwrap();
            let out = engine
                .start(spec(&run_id), &ConformancePlanner, &direct, store)
                .await
                .unwrap();
            assert_eq!(out.status, "completed", "{backend}: {out:?}");
            // A run that stopped mid-way resumes from what it stored.
            let run_id = format!("r-resumed-{format}");
            store.allocate(&new_run(&run_id)).await.unwrap();
            let dying = DiesAt(store, 3, Default::default());
            assert!(
                engine
                    .start(spec(&run_id), &ConformancePlanner, &direct, &dying)
                    .await
                    .is_err()
            );
            let out = engine
                .resume(&run_id, &ConformancePlanner, &direct, store)
                .await
                .unwrap();
            assert_eq!(
                (out.status.as_str(), out.recovery_count),
                ("completed", 1),
                "{backend}: {format}"
            );
        }
        // Two replicas of different formats drive one run (a rolling deploy,
        // before every replica has restarted after `--compact-rows`): one stops
        // mid-run and the other takes the run over.
        for (first, then, run_id) in [
            (&full, &runs, "r-to-compact-runs"),
            (&runs, &full, "r-to-full"),
            (&full, &history, "r-to-compact-history"),
            (&history, &full, "r-history-to-full"),
            (&history, &timeline, "r-to-compact-timeline"),
            (&timeline, &history, "r-timeline-to-history"),
            (&timeline, &requests, "r-to-compact-requests"),
            (&requests, &timeline, "r-requests-to-timeline"),
        ] {
            let first = first.clone().with_lease_ms(0);
            first.allocate(&new_run(run_id)).await.unwrap();
            let dying = DiesAt(&first, 3, Default::default());
            assert!(
                engine
                    .start(spec(run_id), &ConformancePlanner, &direct, &dying)
                    .await
                    .is_err()
            );
            // A lease of 0 ms ends after the millisecond it was taken in.
            tokio::time::sleep(Duration::from_millis(2)).await;
            assert!(then.claim(run_id).await.unwrap(), "{backend}: {run_id}");
            let out = engine
                .resume(run_id, &ConformancePlanner, &direct, then)
                .await
                .unwrap();
            assert_eq!(
                (out.status.as_str(), out.recovery_count),
                ("completed", 1),
                "{backend}: {run_id}"
            );
        }
        // A run created under another bundle keeps its ledger rows' digest, and
        // its provenance (whose calls ran under this bundle) stays in full.
        let mut earlier = new_run("r-deployed");
        earlier.bundle_digest = "digest-of-an-earlier-bundle".into();
        runs.allocate(&earlier).await.unwrap();
        engine
            .start(spec("r-deployed"), &ConformancePlanner, &direct, &runs)
            .await
            .unwrap();

        let reference = as_read(&full, "r-full").await;
        assert_eq!(reference.0.len(), 4, "{backend}");
        assert!(reference.2.contains("tool_call_id"), "{backend}");
        let resumed = as_read(&full, "r-resumed-full").await;
        assert!(resumed.1.len() > reference.1.len(), "{backend}");
        for (run_id, expected) in [
            ("r-compact", &reference),
            ("r-compact-runs", &reference),
            ("r-resumed-compact", &resumed),
            ("r-resumed-compact-runs", &resumed),
            ("r-to-compact-runs", &resumed),
            ("r-to-full", &resumed),
            ("r-compact-history", &reference),
            ("r-resumed-compact-history", &resumed),
            ("r-to-compact-history", &resumed),
            ("r-history-to-full", &resumed),
            ("r-compact-timeline", &reference),
            ("r-resumed-compact-timeline", &resumed),
            ("r-to-compact-timeline", &resumed),
            ("r-timeline-to-history", &resumed),
            ("r-compact-requests", &reference),
            ("r-resumed-compact-requests", &resumed),
            ("r-to-compact-requests", &resumed),
            ("r-requests-to-timeline", &resumed),
        ] {
            for reader in [&full, &compact, &runs, &history, &timeline, &requests] {
                assert_eq!(
                    &as_read(reader, run_id).await,
                    expected,
                    "{backend}: {run_id}"
                );
            }
        }
        let deployed = as_read(&runs, "r-deployed").await;
        assert_eq!((&deployed.0, &deployed.1), (&reference.0, &reference.1));

        let blanks = |column: &'static str, run_id: &'static str| {
            let db = db.clone();
            async move {
                let table = if column == "from_state" {
                    "checkpoints"
                } else {
                    "tool_executions"
                };
                count(
                    &db,
                    &format!("SELECT count(*) AS n FROM {table} WHERE run_id = '{run_id}' AND {column} = ''"),
                )
                .await
            }
        };
        let checkpoints = reference.1.len() as i64;
        for column in [
            "arguments_hash",
            "fingerprint",
            "bundle_digest",
            "from_state",
        ] {
            assert_eq!(blanks(column, "r-full").await, 0, "{backend}: {column}");
        }
        for run_id in ["r-compact", "r-compact-runs"] {
            for column in ["arguments_hash", "fingerprint", "bundle_digest"] {
                assert_eq!(blanks(column, run_id).await, 4, "{backend}: {column}");
            }
            // Each commit's first checkpoint names its `from_state`; the rest leave it.
            let compacted = blanks("from_state", run_id).await;
            assert!(
                compacted >= checkpoints / 2 && compacted < checkpoints,
                "{backend}: {compacted} of {checkpoints}"
            );
        }
        assert_eq!(blanks("arguments_hash", "r-deployed").await, 4, "{backend}");
        assert_eq!(blanks("bundle_digest", "r-deployed").await, 0, "{backend}");

        // Run rows: only `compact-runs` leaves the spec's repeated fields and the
        // provenance's run ids and digests out.
        let stored = |run_id: &'static str| {
            let db = db.clone();
            async move {
                let row = stored_row(&db, "spec, provenance", run_id).await;
                (
                    row.get::<String>("spec").unwrap(),
                    row.get::<String>("provenance").unwrap(),
                )
            }
        };
        // What a compact-runs spec leaves to its columns and `run_catalogs`.
        let left_out = [
            "catalog",
            "run_id",
            "tenant_id",
            "resource_id",
            "subject",
            "correlation_id",
            "goal",
        ]
        .map(|field| format!("\"{field}\""));
        for run_id in ["r-full", "r-compact"] {
            let (spec, provenance) = stored(run_id).await;
            for field in &left_out {
                assert!(spec.contains(field), "{backend}: {run_id} {field}");
            }
            assert!(provenance.contains(run_id) && provenance.contains(Bundle::BUNDLE_DIGEST));
        }
        let (spec, provenance) = stored("r-compact-runs").await;
        for field in &left_out {
            assert!(!spec.contains(field), "{backend}: {field} in {spec}");
        }
        assert!(spec.contains("\"task_id\""), "{backend}: {spec}");
        assert!(
            provenance.starts_with('[')
                && !provenance.contains("r-compact-runs")
                && !provenance.contains(Bundle::BUNDLE_DIGEST),
            "{backend}: {provenance}"
        );
        // One catalog row, however many runs name it; none for the other formats.
        let catalogs = "SELECT count(*) AS n FROM run_catalogs";
        assert_eq!(count(&db, catalogs).await, 1, "{backend}");
        let naming = "SELECT count(*) AS n FROM runs WHERE catalog_digest IS NOT NULL";
        // r-compact-runs, r-resumed-compact-runs, r-to-full, r-deployed, the
        // three compact-history runs created as such, the four created
        // compact-history or compact-timeline and the four created
        // compact-timeline or compact-requests.
        assert_eq!(count(&db, naming).await, 15, "{backend}");
        // Transitions by run number: all of a run created compact-history,
        // whichever format's replica wrote them; a run created earlier keeps
        // writing them by id.
        let by_number = |run_id: &'static str| {
            let db = db.clone();
            async move {
                let by_id = count(
                    &db,
                    &format!("SELECT count(*) AS n FROM checkpoints WHERE run_id = '{run_id}'"),
                )
                .await;
                let by_number = count(
                    &db,
                    &format!(
                        "SELECT count(*) AS n FROM run_transitions t JOIN runs r ON r.run_no = t.run_no WHERE r.run_id = '{run_id}'"
                    ),
                )
                .await;
                (by_id, by_number)
            }
        };
        assert_eq!(
            by_number("r-compact-history").await,
            (0, checkpoints),
            "{backend}"
        );
        let (by_id, by_num) = by_number("r-history-to-full").await;
        assert!(
            by_id == 0 && by_num > checkpoints,
            "{backend}: {by_id} and {by_num}"
        );
        assert_eq!(by_number("r-to-compact-history").await.1, 0, "{backend}");
        assert_eq!(by_number("r-compact-runs").await.1, 0, "{backend}");
        // Tool calls likewise, keyed by the run's number and the call's own part.
        let calls = |table: &'static str, run_id: &'static str| {
            let db = db.clone();
            async move {
                let sql = match table {
                    "tool_executions" => format!(
                        "SELECT count(*) AS n FROM tool_executions WHERE run_id = '{run_id}'"
                    ),
                    _ => format!(
                        "SELECT count(*) AS n FROM run_calls c JOIN runs r ON r.run_no = c.run_no WHERE r.run_id = '{run_id}' AND c.call LIKE ':%'"
                    ),
                };
                count(&db, &sql).await
            }
        };
        for run_id in ["r-compact-history", "r-history-to-full"] {
            assert_eq!(
                calls("tool_executions", run_id).await,
                0,
                "{backend}: {run_id}"
            );
            let ledger = as_read(&full, run_id).await.0.len() as i64;
            assert_eq!(
                calls("run_calls", run_id).await,
                ledger,
                "{backend}: {run_id}"
            );
        }
        let ledger = as_read(&full, "r-to-compact-history").await.0.len() as i64;
        assert_eq!(
            calls("tool_executions", "r-to-compact-history").await,
            ledger,
            "{backend}"
        );
        // A timeline: every transition of a run created compact-timeline is a line
        // of its row, whichever format's replica committed it; a run created
        // earlier keeps its rows.
        let history_of = |run_id: &'static str| {
            let db = db.clone();
            async move {
                db.fetch_optional(
                    "SELECT history FROM runs WHERE run_id = ?",
                    &caseops_host::params![run_id],
                )
                .await
                .unwrap()
                .unwrap()
                .get::<Option<String>>("history")
                .unwrap()
            }
        };
        for (run_id, lines) in [
            ("r-compact-timeline", checkpoints as usize),
            ("r-resumed-compact-timeline", resumed.1.len()),
            ("r-timeline-to-history", resumed.1.len()),
        ] {
            let history = history_of(run_id).await.unwrap_or_default();
            assert_eq!(
                history.lines().count(),
                lines,
                "{backend}: {run_id}: {history}"
            );
            assert_eq!(by_number(run_id).await, (0, 0), "{backend}: {run_id}");
        }
        assert_eq!(history_of("r-to-compact-timeline").await, None, "{backend}");
        assert_eq!(
            by_number("r-to-compact-timeline").await.1,
            resumed.1.len() as i64,
            "{backend}"
        );
        let (_, provenance) = stored("r-deployed").await;
        assert!(provenance.starts_with('{'), "{backend}: {provenance}");
        let full_size = stored("r-full").await;
        let runs_size = stored("r-compact-runs").await;
        let (compact_len, full_len) = (
            runs_size.0.len() + runs_size.1.len(),
            full_size.0.len() + full_size.1.len(),
        );
        assert!(
            compact_len * 4 < full_len * 3,
            "{backend}: {compact_len} of {full_len} bytes: {runs_size:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_events_left_to_their_rows_publish_and_verify_as_if_written_out_and_chain_the_rows() {
    for (backend, url) in fresh_databases("run_events").await {
        let (db, full, direct) = setup(&url).await;
        let events = SqlRunStore::new(db.clone()).with_row_format(RowFormat::CompactHistory);
        let linked = SqlRunStore::new(db.clone()).with_row_format(RowFormat::CompactTimeline);
        let engine = Engine::<Bundle>::new().unwrap();
        for (store, run_id) in [
            (&full, "e-full"),
            (&events, "e-events"),
            (&linked, "e-linked"),
        ] {
            let run = NewRun {
                request_id: Some("q-1".into()),
                ..new_run(run_id, &format!("{run_id}-key"), "h")
            };
            store.allocate(&run).await.unwrap();
            let out = engine
                .start(spec(run_id), &ConformancePlanner, &direct, store)
                .await
                .unwrap();
            assert_eq!(out.status, "completed", "{backend}: {out:?}");
        }
        let payloads = |run_id: &'static str| {
            let db = db.clone();
            async move {
                db.fetch_all(
                    "SELECT payload FROM audit_events WHERE run_id = ? ORDER BY seq",
                    &caseops_host::params![run_id],
                )
                .await
                .unwrap()
                .iter()
                .map(|r| r.get::<String>("payload").unwrap())
                .collect::<Vec<_>>()
            }
        };
        assert_eq!(
            payloads("e-events").await,
            // This store's event names are the default ones.
            ["\"resource_id\"", "\"resource_id\""],
            "{backend}: both of the run's events keep only the resource key"
        );
        assert_eq!(payloads("e-linked").await, payloads("e-events").await);
        let written = payloads("e-full").await;
        assert!(
            written.len() == 2 && written.iter().all(|p| p.starts_with('{')),
            "{backend}: {written:?}"
        );
        // compact-timeline: no predecessor hash, no outbox subject; both follow.
        let blank = |sql: &'static str| {
            let db = db.clone();
            async move { count(&db, sql).await }
        };
        let unlinked =
            "SELECT count(*) AS n FROM audit_events WHERE run_id = 'e-linked' AND prev_hash = ''";
        assert_eq!(blank(unlinked).await, 2, "{backend}");
        let linked_elsewhere =
            "SELECT count(*) AS n FROM audit_events WHERE run_id <> 'e-linked' AND prev_hash = ''";
        assert_eq!(blank(linked_elsewhere).await, 0, "{backend}");
        let subjects = "SELECT count(*) AS n FROM outbox_events o JOIN audit_events a ON a.tenant_id = o.tenant_id AND a.seq = o.seq \
             WHERE a.run_id = 'e-linked' AND o.subject IS NULL AND o.run_id = ''";
        assert_eq!(blank(subjects).await, 2, "{backend}");
        assert_eq!(
            audit::verify(&db).await.unwrap().problems,
            Vec::<String>::new(),
            "{backend}"
        );
        // The relay publishes the same text, key order included, for both.
        let published = pending_envelopes(&db).await;
        let data_of = |run_id: &str| {
            published
                .iter()
                .filter(|e| e["subject"] == format!("agent-runs/{run_id}"))
                .map(|e| e["data"].to_string().replace(run_id, "RUN"))
                .collect::<Vec<_>>()
        };
        assert_eq!(data_of("e-events").len(), 2, "{backend}: {published:?}");
        assert_eq!(data_of("e-events"), data_of("e-full"), "{backend}");
        assert_eq!(data_of("e-linked"), data_of("e-full"), "{backend}");
        // An application's event of its own kind keeps a string payload as
        // written: only the host's run events are ever left to a row.
        audit::append_event(
            &db,
            "tenant-demo",
            "e-events",
            "note.added",
            "note.added.v1",
            "notes/1",
            &serde_json::json!("resource_id"),
        )
        .await
        .unwrap();
        assert_eq!(
            audit::verify(&db).await.unwrap().problems,
            Vec::<String>::new(),
            "{backend}"
        );
        let note = pending_envelopes(&db)
            .await
            .into_iter()
            .find(|e| e["subject"] == "notes/1")
            .unwrap_or_else(|| panic!("{backend}: the note is published"));
        assert_eq!(note["data"], "resource_id", "{backend}");

        // The row a payload is rebuilt from is inside the chain: editing what a
        // finished run's row says breaks the event built from it.
        let altered = |v: &audit::Verification| {
            v.problems
                .iter()
                .filter(|p| p.contains("was altered"))
                .count()
        };
        for (edit, undo) in [
            (
                "UPDATE runs SET step_count = step_count + 1 WHERE run_id = 'e-events'",
                "UPDATE runs SET step_count = step_count - 1 WHERE run_id = 'e-events'",
            ),
            (
                "UPDATE runs SET goal = 'another' WHERE run_id = 'e-events'",
                "UPDATE runs SET goal = 'check' WHERE run_id = 'e-events'",
            ),
        ] {
            db.execute(edit, &[]).await.unwrap();
            let v = audit::verify(&db).await.unwrap();
            assert_eq!(altered(&v), 1, "{backend}: {edit}: {:?}", v.problems);
            db.execute(undo, &[]).await.unwrap();
        }
        assert!(audit::verify(&db).await.unwrap().problems.is_empty());
        // An event whose run is gone is a located problem, not an error.
        db.execute(
            "UPDATE audit_events SET run_id = 'e-gone' WHERE run_id = 'e-events' AND kind = 'agent.run'",
            &[],
        )
        .await
        .unwrap();
        let v = audit::verify(&db).await.unwrap();
        assert!(
            v.problems
                .iter()
                .any(|p| p.contains("its run `e-gone`, which holds its payload, is missing")),
            "{backend}: {:?}",
            v.problems
        );
        // An event without its predecessor's hash still proves its predecessor:
        // deleting that one breaks it.
        let first = count(
            &db,
            "SELECT min(seq) AS n FROM audit_events WHERE run_id = 'e-linked'",
        )
        .await;
        db.execute(
            &format!(
                "DELETE FROM audit_events WHERE tenant_id = 'tenant-demo' AND seq = {}",
                first - 1
            ),
            &[],
        )
        .await
        .unwrap();
        let v = audit::verify(&db).await.unwrap();
        for problem in [
            format!("event {first} follows {}", first - 2),
            format!("event {first} was altered"),
        ] {
            assert!(
                v.problems.iter().any(|p| p.contains(&problem)),
                "{backend}: {problem}: {:?}",
                v.problems
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_known_by_its_own_columns_stores_no_request_hash_or_id_and_reads_both_back() {
    for (backend, url) in fresh_databases("requests").await {
        let (db, _, direct) = setup(&url).await;
        let store = SqlRunStore::new(db.clone())
            .for_bundle::<Bundle>()
            .with_row_format(RowFormat::CompactRequests);
        let engine = Engine::<Bundle>::new().unwrap();
        let hash_of = |goal: &str| {
            row_format::request_hash(Bundle::RESOURCE_ID_FIELD, "C-102", goal, "conformance")
        };
        // As the API asks: the hash of the request, and no request id of its own.
        let asked = |run_id: &str, key: &str, request_id: Option<&str>, hash: &str| {
            let mut run = new_run(run_id, key, hash);
            run.request_id = request_id.map(str::to_string);
            run.spec.correlation_id = request_id.unwrap_or_default().to_string();
            run
        };
        for (run_id, request_id, hash, on_disk) in [
            ("q-own", Some("q-own"), hash_of("check"), ("", Some(""))),
            (
                "q-given",
                Some("req-7"),
                hash_of("check"),
                ("", Some("req-7")),
            ),
            ("q-hash", Some("q-hash"), "h".to_string(), ("h", Some(""))),
            ("q-empty", Some(""), hash_of("check"), ("", None)),
            ("q-none", None, hash_of("check"), ("", None)),
        ] {
            let run = asked(run_id, &format!("{run_id}-key"), request_id, &hash);
            let Allocation::New(created) = store.allocate(&run).await.unwrap() else {
                panic!("{backend}: {run_id} is new");
            };
            let out = engine
                .start(run.spec.clone(), &ConformancePlanner, &direct, &store)
                .await
                .unwrap();
            assert_eq!(out.status, "completed", "{backend}: {out:?}");
            let row = stored_row(&db, "request_hash, request_id", run_id).await;
            let (hash_on_disk, id_on_disk): (String, Option<String>) = (
                row.get("request_hash").unwrap(),
                row.get("request_id").unwrap(),
            );
            assert_eq!(
                (hash_on_disk.as_str(), id_on_disk.as_deref()),
                on_disk,
                "{backend}: {run_id}"
            );
            // Every reader of this version, whatever it writes, reads what was asked.
            for reader in [
                SqlRunStore::new(db.clone()).for_bundle::<Bundle>(),
                store.clone(),
            ] {
                let read = reader.record(run_id).await.unwrap().unwrap();
                assert_eq!(read.request_hash, hash, "{backend}: {run_id}");
                assert_eq!(read.spec, created.spec, "{backend}: {run_id}");
                assert_eq!(
                    read.spec.as_ref().map(|s| s.correlation_id.as_str()),
                    Some(run.spec.correlation_id.as_str()),
                    "{backend}: {run_id}"
                );
            }
        }
        // A replay is told from another request by the columns the hash covers.
        let replay = asked("q-again", "q-own-key", Some("q-again"), &hash_of("check"));
        assert!(
            matches!(store.allocate(&replay).await.unwrap(), Allocation::Existing(r) if r.run_id == "q-own"),
            "{backend}"
        );
        let mut other = asked("q-other", "q-own-key", Some("q-other"), &hash_of("other"));
        other.spec.goal = "other".into();
        assert!(
            matches!(
                store.allocate(&other).await.unwrap(),
                Allocation::Conflict(_)
            ),
            "{backend}"
        );
        // The run's events carry the request id rebuilt from the row, and the
        // chain proves them.
        assert_eq!(
            audit::verify(&db).await.unwrap().problems,
            Vec::<String>::new(),
            "{backend}"
        );
        let published = pending_envelopes(&db).await;
        let request_ids = |run_id: &str| {
            published
                .iter()
                .filter(|e| e["subject"] == format!("agent-runs/{run_id}"))
                .map(|e| e["data"]["request_id"].clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(
            request_ids("q-own"),
            [json!("q-own"), json!("q-own")],
            "{backend}"
        );
        assert_eq!(
            request_ids("q-given"),
            [json!("req-7"), json!("req-7")],
            "{backend}"
        );
        assert_eq!(
            request_ids("q-empty"),
            [Value::Null, Value::Null],
            "{backend}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_catalog_is_keyed_by_its_digests_prefix_unless_another_catalog_holds_it() {
    for (backend, url) in fresh_databases("catalog_key").await {
        let (db, _, _) = setup(&url).await;
        let store = SqlRunStore::new(db.clone()).with_row_format(RowFormat::NEWEST);
        let key_of = |run_id: &'static str| {
            let db = db.clone();
            async move {
                stored_row(&db, "catalog_digest", run_id)
                    .await
                    .get::<String>("catalog_digest")
                    .unwrap()
            }
        };
        let whole = new_run("k-whole", "k-whole-key", "h");
        store.allocate(&whole).await.unwrap();
        let digest = whole.spec.catalog.digest().to_string();
        assert_eq!(key_of("k-whole").await, digest[..16], "{backend}");

        // Another catalog whose prefix a row already holds (as a collision of
        // 64 bits would): its runs name it by its whole digest.
        let mut fewer = new_run("k-fewer", "k-fewer-key", "h");
        fewer.spec.catalog = Bundle::CATALOG[..2].iter().map(|s| s.to_string()).collect();
        let other = fewer.spec.catalog.digest().to_string();
        db.execute(
            "INSERT INTO run_catalogs (digest, names) VALUES (?, '[\"someone_else\"]')",
            &caseops_host::params![&other[..16]],
        )
        .await
        .unwrap();
        store.allocate(&fewer).await.unwrap();
        let mut again = fewer.clone();
        again.spec.run_id = "k-fewer-again".into();
        again.idempotency_key = "k-fewer-again-key".into();
        store.allocate(&again).await.unwrap();
        assert_eq!(key_of("k-fewer").await, other, "{backend}");
        assert_eq!(key_of("k-fewer-again").await, other, "{backend}");

        for (run_id, asked) in [
            ("k-whole", &whole),
            ("k-fewer", &fewer),
            ("k-fewer-again", &again),
        ] {
            let read = store.record(run_id).await.unwrap().unwrap();
            assert_eq!(
                read.spec.map(|s| s.catalog),
                Some(asked.spec.catalog.clone()),
                "{backend}: {run_id}"
            );
        }
        // One row per catalog and key: the two kept, the one held by another.
        assert_eq!(
            count(&db, "SELECT count(*) AS n FROM run_catalogs").await,
            3,
            "{backend}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_newest_snapshot_is_stored_and_none_once_the_run_has_ended() {
    for (backend, url) in fresh_databases("snapshots").await {
        // Stopped mid-run: a snapshot on the run's row only.
        let (db, store, direct) = stopped_mid_run(&url, "r10").await;
        let engine = Engine::<Bundle>::new().unwrap();
        let on_row = "SELECT COUNT(*) AS n FROM runs WHERE run_id = 'r10' AND snapshot IS NOT NULL";
        let in_checkpoints =
            "SELECT COUNT(*) AS n FROM checkpoints WHERE run_id = 'r10' AND snapshot IS NOT NULL";
        assert_eq!(count(&db, on_row).await, 1, "{backend}");
        assert_eq!(count(&db, in_checkpoints).await, 0, "{backend}");
        let out = engine
            .resume("r10", &ConformancePlanner, &direct, &store)
            .await
            .unwrap();
        assert_eq!(out.status, "completed", "{backend}");
        assert_eq!(
            count(&db, on_row).await,
            0,
            "{backend}: a finished run keeps none"
        );
        assert_eq!(count(&db, in_checkpoints).await, 0, "{backend}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_checkpointed_before_snapshots_moved_to_its_row_still_resumes() {
    for (backend, url) in fresh_databases("legacy_snapshot").await {
        let (db, store, direct) = stopped_mid_run(&url, "r11").await;
        let engine = Engine::<Bundle>::new().unwrap();
        // As an older version wrote it: the snapshot in the last checkpoint.
        db.execute(
            "UPDATE checkpoints SET snapshot = (SELECT snapshot FROM runs WHERE run_id = 'r11') \
             WHERE run_id = 'r11' AND sequence = (SELECT MAX(sequence) FROM checkpoints WHERE run_id = 'r11')",
            &[],
        )
        .await
        .unwrap();
        db.execute("UPDATE runs SET snapshot = NULL WHERE run_id = 'r11'", &[])
            .await
            .unwrap();
        let out = engine
            .resume("r11", &ConformancePlanner, &direct, &store)
            .await
            .unwrap();
        assert_eq!(
            (out.status.as_str(), out.step_count),
            ("completed", 4),
            "{backend}"
        );
    }
}

#[tokio::test]
async fn an_unreachable_database_is_one_line_naming_the_url_without_its_password() {
    let err = Db::connect(
        "postgres://app:hunter2@127.0.0.1:1/caseops",
        1,
        &caseops_service::reference::SCHEMA,
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("postgres://app:***@127.0.0.1:1/caseops"),
        "{err}"
    );
    assert!(!err.contains("hunter2") && !err.contains('\n'), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_runs_on_one_database_all_complete_and_keep_one_audit_chain() {
    for (backend, url) in fresh_databases("concurrent").await {
        let (db, store, direct) = setup(&url).await;
        let (store, direct) = (Arc::new(store), Arc::new(direct));
        let engine = Arc::new(Engine::<Bundle>::new().unwrap());
        let mut tasks = Vec::new();
        for i in 0..16 {
            let (store, direct, engine) = (store.clone(), direct.clone(), engine.clone());
            tasks.push(tokio::spawn(async move {
                let id = format!("c{i}");
                store
                    .allocate(&new_run(&id, &format!("concurrent-key-{i}"), "h"))
                    .await
                    .unwrap();
                engine
                    .start(spec(&id), &ConformancePlanner, &*direct, &*store)
                    .await
            }));
        }
        for t in tasks {
            let out = t
                .await
                .unwrap()
                .unwrap_or_else(|e| panic!("{backend}: {e}"));
            assert_eq!(out.status, "completed", "{backend}");
        }
        // Sixteen starts and sixteen ends appended from concurrent transactions:
        // each took the tenant chain's lock, so none forked it.
        let v = audit::verify(&db).await.unwrap();
        assert_eq!((v.events, v.problems.len()), (32, 0), "{backend}: {v:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_appended_by_every_path_and_by_an_earlier_version_form_one_chain() {
    for (backend, url) in fresh_databases("chainpaths").await {
        let (db, store, direct) = setup(&url).await;
        let engine = Engine::<Bundle>::new().unwrap();
        // Created and ended by one store: on PostgreSQL each event is appended and
        // hashed by the database in the statement that writes it. The goal puts
        // what JSON escapes and multi-byte UTF-8 into the hashed payload.
        let mut tricky = new_run("r1", "key-paths-1", "h");
        tricky.spec.goal = "check «Ü» \"quoted\"\nnext line \\ tab\t ✓".into();
        store.allocate(&tricky).await.unwrap();
        let out = engine
            .start(tricky.spec.clone(), &ConformancePlanner, &direct, &store)
            .await
            .unwrap();
        assert_eq!(out.status, "completed", "{backend}");
        // Ended by another process (it read the run's facts in its transaction).
        let creator = SqlRunStore::new(db.clone()).with_lease_ms(0);
        creator
            .allocate(&new_run("r2", "key-paths-2", "h"))
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(10)).await;
        let other = SqlRunStore::new(db.clone());
        assert!(other.claim("r2").await.unwrap(), "{backend}");
        let out = engine
            .start(spec("r2"), &ConformancePlanner, &direct, &other)
            .await
            .unwrap();
        assert_eq!(out.status, "completed", "{backend}");
        // An application's own fact, in a transaction of its own.
        audit::append_event(
            &db,
            "tenant-demo",
            "r2",
            "note.added",
            "note.added.v1",
            "notes/1",
            &serde_json::json!({"text": "é"}),
        )
        .await
        .unwrap();
        // An append by a version before the chain head had a row of its own: it
        // reads the head from the events and inserts only the event.
        let last = audit::latest(&db, "tenant-demo", 1).await.unwrap();
        let (seq, prev) = (last[0].seq + 1, last[0].hash.clone());
        let payload = serde_json::json!({"by": "an earlier version"});
        let hash = audit::event_hash(&prev, seq, "note.added", "r2", &payload);
        db.execute(
            "INSERT INTO audit_events (tenant_id, seq, event_id, run_id, kind, payload, prev_hash, hash, at_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            &caseops_host::params!["tenant-demo", seq, "ev-earlier", "r2", "note.added", payload.to_string(), &prev, &hash, 0],
        )
        .await
        .unwrap();
        // Appends after it link to it.
        store
            .allocate(&new_run("r3", "key-paths-3", "h"))
            .await
            .unwrap();
        let out = engine
            .start(spec("r3"), &ConformancePlanner, &direct, &store)
            .await
            .unwrap();
        assert_eq!(out.status, "completed", "{backend}");
        let v = audit::verify(&db).await.unwrap();
        assert_eq!((v.events, v.problems.len()), (8, 0), "{backend}: {v:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_is_not_taken_over_while_a_long_call_keeps_its_lease_alive() {
    for (backend, url) in fresh_databases("heartbeat").await {
        let (db, store, _) = setup(&url).await;
        let holder = store.with_lease_ms(600);
        holder
            .allocate(&new_run("r1", "key-00001", "h"))
            .await
            .unwrap();
        let other = SqlRunStore::new(db.clone()).with_lease_ms(600);
        // A call three lease lengths long, with another process trying to take
        // the run over in the middle of it.
        let (_, claimed_meanwhile) = tokio::join!(
            holder.while_leased("r1", tokio::time::sleep(Duration::from_millis(1800))),
            async {
                tokio::time::sleep(Duration::from_millis(1200)).await;
                other.claim("r1").await.unwrap()
            }
        );
        assert!(!claimed_meanwhile, "{backend}: the lease was renewed");
        // Once the work is over the heartbeat stops, and the lease runs out.
        tokio::time::sleep(Duration::from_millis(800)).await;
        assert!(other.claim("r1").await.unwrap(), "{backend}: lease expired");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_driver_dropped_mid_run_stops_renewing_its_lease() {
    for (backend, url) in fresh_databases("dropped").await {
        let (db, store, _) = setup(&url).await;
        let holder = store.with_lease_ms(600);
        holder
            .allocate(&new_run("r1", "key-00002", "h"))
            .await
            .unwrap();
        // The driver is dropped (its request was cancelled, its task aborted)
        // in the middle of a long call.
        let dropped = tokio::time::timeout(
            Duration::from_millis(300),
            holder.while_leased("r1", tokio::time::sleep(Duration::from_secs(60))),
        )
        .await;
        assert!(dropped.is_err());
        // Its heartbeat went with it: the lease runs out and another process
        // may take the run over.
        tokio::time::sleep(Duration::from_millis(1000)).await;
        let other = SqlRunStore::new(db.clone()).with_lease_ms(600);
        assert!(
            other.claim("r1").await.unwrap(),
            "{backend}: nothing renews a dropped driver's lease"
        );
    }
}

/// The run's lease as stored: owner and expiry.
async fn lease_of(db: &Db, run_id: &str) -> (Option<String>, Option<i64>) {
    let rows = db
        .fetch_all(
            "SELECT lease_owner, lease_expires_at FROM runs WHERE run_id = ?",
            &caseops_host::params![run_id],
        )
        .await
        .unwrap();
    (
        rows[0].get("lease_owner").unwrap(),
        rows[0].get("lease_expires_at").unwrap(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commits_between_steps_leave_the_lease_to_the_heartbeat_and_the_last_one_releases_it() {
    for (backend, url) in fresh_databases("lease_commits").await {
        let (db, store, direct) = setup(&url).await;
        store
            .allocate(&new_run("r1", "key-00004", "h"))
            .await
            .unwrap();
        let allocated = lease_of(&db, "r1").await;
        assert!(allocated.1.is_some(), "{backend}: a new run is leased");
        // Later than the allocation, so a renewing commit would move the expiry.
        tokio::time::sleep(Duration::from_millis(20)).await;
        let dying = DiesAt(&store, 3, Default::default());
        let engine = Engine::<Bundle>::new().unwrap();
        assert!(
            engine
                .start(spec("r1"), &ConformancePlanner, &direct, &dying)
                .await
                .is_err()
        );
        let committed = count(
            &db,
            "SELECT COUNT(*) AS n FROM checkpoints WHERE run_id = 'r1'",
        )
        .await;
        assert!(committed > 0, "{backend}: three commits were made");
        // No indexed column of the row moved: PostgreSQL updates it in place.
        assert_eq!(lease_of(&db, "r1").await, allocated, "{backend}");

        let out = engine
            .resume("r1", &ConformancePlanner, &direct, &store)
            .await
            .unwrap();
        assert_eq!(out.status, "completed", "{backend}");
        assert_eq!(lease_of(&db, "r1").await, (None, None), "{backend}");
    }
}

/// SQLite rewrites the entry of every index whose column an UPDATE assigns, even
/// to the value it had; `status` is in `runs_by_lease`. A trigger `UPDATE OF
/// status` fires exactly when the column is assigned, on both backends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commits_that_keep_a_run_running_leave_its_indexed_status_unassigned() {
    for (backend, url) in fresh_databases("status_writes").await {
        let (db, store, direct) = setup(&url).await;
        db.execute("CREATE TABLE status_writes (run_id TEXT NOT NULL)", &[])
            .await
            .unwrap();
        if backend == "postgres" {
            db.execute(
                "CREATE FUNCTION note_status() RETURNS trigger LANGUAGE plpgsql AS \
                 $$ BEGIN INSERT INTO status_writes VALUES (NEW.run_id); RETURN NULL; END $$",
                &[],
            )
            .await
            .unwrap();
            db.execute(
                "CREATE TRIGGER status_assigned AFTER UPDATE OF status ON runs \
                 FOR EACH ROW EXECUTE FUNCTION note_status()",
                &[],
            )
            .await
            .unwrap();
        } else {
            db.execute(
                "CREATE TRIGGER status_assigned AFTER UPDATE OF status ON runs \
                 BEGIN INSERT INTO status_writes VALUES (NEW.run_id); END",
                &[],
            )
            .await
            .unwrap();
        }
        store
            .allocate(&new_run("r1", "key-00005", "h"))
            .await
            .unwrap();
        let dying = DiesAt(&store, 3, Default::default());
        let engine = Engine::<Bundle>::new().unwrap();
        assert!(
            engine
                .start(spec("r1"), &ConformancePlanner, &direct, &dying)
                .await
                .is_err()
        );
        let writes = "SELECT COUNT(*) AS n FROM status_writes";
        assert_eq!(count(&db, writes).await, 0, "{backend}: three commits");

        let out = engine
            .resume("r1", &ConformancePlanner, &direct, &store)
            .await
            .unwrap();
        assert_eq!(out.status, "completed", "{backend}");
        assert_eq!(count(&db, writes).await, 1, "{backend}: the terminal one");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_driver_that_lost_its_lease_writes_nothing() {
    for (backend, url) in fresh_databases("fenced").await {
        let (db, store, direct) = setup(&url).await;
        let stale = store.with_lease_ms(200);
        stale
            .allocate(&new_run("r1", "key-00003", "h"))
            .await
            .unwrap();
        // The holder stalls past its lease and another replica claims the run.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let other = SqlRunStore::new(db.clone());
        assert_eq!(other.claim_due(10).await.unwrap(), vec!["r1".to_string()]);

        let engine = Engine::<Bundle>::new().unwrap();
        let err = engine
            .start(spec("r1"), &ConformancePlanner, &direct, &stale)
            .await
            .unwrap_err();
        assert!(
            matches!(
                err,
                caseops_runtime::RuntimeError::Store(
                    caseops_runtime::store::StoreError::LeaseLost { .. }
                )
            ),
            "{backend}: {err}"
        );
        let written = db
            .fetch_all("SELECT sequence FROM checkpoints WHERE run_id = 'r1'", &[])
            .await
            .unwrap();
        assert!(
            written.is_empty(),
            "{backend}: the stale driver wrote nothing"
        );
        let ledger = db
            .fetch_all(
                "SELECT tool_call_id FROM tool_executions WHERE run_id = 'r1'",
                &[],
            )
            .await
            .unwrap();
        assert!(ledger.is_empty(), "{backend}: nor any ledger row");

        // The new holder drives it to the end.
        let out = engine
            .start(spec("r1"), &ConformancePlanner, &direct, &other)
            .await
            .unwrap();
        assert_eq!(out.status, "completed", "{backend}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claiming_due_runs_takes_expired_and_released_leases_once_each() {
    for (backend, url) in fresh_databases("claims").await {
        let (db, store, _) = setup(&url).await;
        let dead = store.with_lease_ms(100);
        for i in 0..3 {
            dead.allocate(&new_run(&format!("r{i}"), &format!("key-claim-{i}"), "h"))
                .await
                .unwrap();
        }
        let live = SqlRunStore::new(db.clone());
        live.allocate(&new_run("r-live", "key-claim-live", "h"))
            .await
            .unwrap();
        assert!(dead.release("r2", 0).await.unwrap());
        tokio::time::sleep(Duration::from_millis(150)).await;

        let (a, b) = (SqlRunStore::new(db.clone()), SqlRunStore::new(db.clone()));
        let (got_a, got_b) = tokio::join!(a.claim_due(10), b.claim_due(10));
        let mut all = got_a.unwrap();
        all.extend(got_b.unwrap());
        all.sort();
        assert_eq!(
            all,
            ["r0", "r1", "r2"],
            "{backend}: each due run claimed by exactly one replica, the live one by none"
        );
    }
}

#[tokio::test]
async fn a_write_is_recorded_once_per_key_and_the_first_comes_back() {
    use caseops_service::domain::{CaseTransition, DocumentRequest};
    use caseops_service::tools::CaseRepository;
    for (backend, url) in fresh_databases("effects").await {
        let (db, _, _) = setup(&url).await;
        let repo = SqlRepository { db: db.clone() };
        let request = |id: &str| DocumentRequest {
            tenant_id: "tenant-demo".into(),
            case_id: "C-103".into(),
            request_id: id.into(),
            idempotency_key: "key-1".into(),
            document_codes: vec!["ACCIDENT_CERTIFICATE".into()],
            status: "requested".into(),
        };
        assert_eq!(
            repo.request_documents(&request("REQ-1")).await.unwrap(),
            request("REQ-1")
        );
        // The same key again (a retry, a resumed run): the first effect, no second.
        assert_eq!(
            repo.request_documents(&request("REQ-2")).await.unwrap(),
            request("REQ-1"),
            "{backend}"
        );
        let count = |table: &'static str| {
            let db = db.clone();
            async move {
                db.fetch_optional(&format!("SELECT COUNT(*) AS n FROM {table}"), &[])
                    .await
                    .unwrap()
                    .unwrap()
                    .get::<i64>("n")
                    .unwrap()
            }
        };
        assert_eq!(count("document_requests").await, 1, "{backend}");

        let transition = |key: &str| CaseTransition {
            tenant_id: "tenant-demo".into(),
            case_id: "C-104".into(),
            idempotency_key: key.into(),
            from_status: "waiting_for_documents".into(),
            to_status: "ready_for_assessment".into(),
            from_version: 1,
            to_version: 2,
        };
        assert_eq!(
            repo.transition_case(&transition("t-1")).await.unwrap(),
            transition("t-1")
        );
        assert_eq!(
            repo.transition_case(&transition("t-1")).await.unwrap(),
            transition("t-1"),
            "{backend}: the same key gets the first transition back"
        );
        let moved = repo.case("tenant-demo", "C-104").await.unwrap().unwrap();
        assert_eq!(
            (moved.status.as_str(), moved.version),
            ("ready_for_assessment", 2)
        );
        let err = repo.transition_case(&transition("t-2")).await.unwrap_err();
        assert!(
            err.to_string().contains("CASE_STATUS_CHANGED"),
            "{backend}: another key finds the case moved on: {err}"
        );
        assert_eq!(count("case_transitions").await, 1, "{backend}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_run_writes_started_effect_and_finished_events_each_matching_its_catalog_schema() {
    use caseops_host::event_types::{catalog, envelope_schema};
    for (backend, url) in fresh_databases("event_types").await {
        let (db, _, direct) = setup(&url).await;
        let store = SqlRunStore::new(db.clone()).for_bundle::<Bundle>();
        let mut run = new_run("w1", "events-key-1", "h");
        run.spec.resource_id = "C-103".into();
        run.spec.catalog = Bundle::TOOLS.iter().map(|t| t.name.to_string()).collect();
        store.allocate(&run).await.unwrap();
        let out = Engine::<Bundle>::new()
            .unwrap()
            .start(run.spec.clone(), &ConformancePlanner, &direct, &store)
            .await
            .unwrap();
        assert_eq!(out.status, "completed", "{backend}: {out:?}");
        let rows = pending_envelopes(&db).await;
        let topics: Vec<&str> = rows.iter().map(|e| e["type"].as_str().unwrap()).collect();
        assert_eq!(
            topics,
            [
                "case.agent-run.started.v1",
                "effect.confirmed.v1",
                "case.agent-run.completed.v1"
            ],
            "{backend}"
        );
        let types = catalog(&audit::EventNames::of::<Bundle>());
        for payload in &rows {
            let topic = payload["type"].as_str().unwrap();
            let event = types.iter().find(|t| t.name == topic).unwrap();
            let schema = jsonschema::validator_for(&envelope_schema(event)).unwrap();
            let errors: Vec<String> = schema.iter_errors(payload).map(|e| e.to_string()).collect();
            assert!(
                errors.is_empty(),
                "{backend}: {topic}: {errors:?} in {payload}"
            );
            assert_eq!(payload["tenant"], "tenant-demo");
        }
        let effect = &rows[1];
        assert_eq!(effect["data"]["tool"], "caseops_request_missing_documents");
        assert_eq!(
            effect["data"]["idempotency_key"].as_str().map(str::len),
            Some(64)
        );
        assert_eq!(
            audit::verify(&db).await.unwrap().problems,
            Vec::<String>::new()
        );
    }
}

/// Rows written before migration 1008 (or by a replica of an earlier version
/// during a rolling deploy) kept their envelope: the relay publishes those as
/// written, in order beside the rows it renders from the audit chain. A row with
/// nothing to render it from stops the claim with the event named; it is never
/// published empty or skipped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outbox_row_that_kept_its_envelope_is_published_as_written() {
    for (backend, url) in fresh_databases("outbox_kept").await {
        let (db, store, direct) = setup(&url).await;
        let written = r#"{"specversion":"1.0","id":"ev-earlier","type":"case.agent-run.completed.v1","data":{"kept":true}}"#;
        db.execute(
            "INSERT INTO outbox_events (event_id, tenant_id, run_id, topic, payload, created_at, seq) VALUES ('ev-earlier', 'tenant-demo', 'r-earlier', 'case.agent-run.completed.v1', ?, 1, 0)",
            &caseops_host::params![written],
        )
        .await
        .unwrap();
        store
            .allocate(&new_run("k1", "kept-key-1", "h"))
            .await
            .unwrap();
        Engine::<Bundle>::new()
            .unwrap()
            .start(spec("k1"), &ConformancePlanner, &direct, &store)
            .await
            .unwrap();
        let claim = caseops_host::store::outbox::claim(&db, 100).await.unwrap();
        let ids: Vec<&str> = claim.events.iter().map(|e| e.event_id.as_str()).collect();
        assert_eq!(claim.events.len(), 3, "{backend}: {ids:?}");
        assert_eq!(claim.events[0].payload, written, "{backend}");
        for event in &claim.events[1..] {
            let envelope: Value = serde_json::from_str(&event.payload).unwrap();
            assert_eq!(envelope["id"], event.event_id.as_str(), "{backend}");
            assert_eq!(envelope["subject"], "agent-runs/k1", "{backend}");
            assert_eq!(envelope["data"]["run_id"], "k1", "{backend}");
        }
        // Given back (none published), so its tenant lock is free for the next claim.
        claim.finish(&db, 0).await.unwrap();

        db.execute(
            "INSERT INTO outbox_events (event_id, tenant_id, run_id, topic, created_at, seq) VALUES ('ev-orphan', 'tenant-demo', 'k1', 'case.agent-run.completed.v1', 1, 999)",
            &[],
        )
        .await
        .unwrap();
        let err = caseops_host::store::outbox::claim(&db, 100)
            .await
            .err()
            .unwrap_or_else(|| panic!("{backend}: an orphan row was claimed"));
        assert!(err.to_string().contains("`ev-orphan`"), "{backend}: {err}");

        // An application cannot append the host's own kind, whose event the relay
        // renders from the run: refused before anything is written.
        let count = |db: Db| async move {
            let row = db
                .fetch_optional("SELECT COUNT(*) AS n FROM outbox_events", &[])
                .await
                .unwrap()
                .unwrap();
            row.get::<i64>("n").unwrap()
        };
        let before = count(db.clone()).await;
        let refused = audit::append_event(
            &db,
            "tenant-demo",
            "k1",
            audit::RUN_EVENT,
            "note.added.v1",
            "notes/1",
            &serde_json::json!({}),
        )
        .await
        .unwrap_err();
        assert!(
            refused
                .to_string()
                .contains("`agent.run` is the host's own"),
            "{backend}: {refused}"
        );
        assert_eq!(count(db.clone()).await, before, "{backend}");
        // Nor its start: the host's own events of that kind may be stored
        // without their payload, and a string payload would read as one.
        let refused = audit::append_event(
            &db,
            "tenant-demo",
            "k1",
            audit::RUN_STARTED_EVENT,
            "note.added.v1",
            "notes/1",
            &serde_json::json!("resource_id"),
        )
        .await
        .unwrap_err();
        assert!(
            refused
                .to_string()
                .contains("`agent.run.started` is the host's own"),
            "{backend}: {refused}"
        );
        assert_eq!(count(db.clone()).await, before, "{backend}");
    }
}

/// PostgreSQL connections are reused without a round trip to test them, so one
/// that a caller gave up on mid-statement, or left inside a transaction, must never
/// serve the next statement. One connection, so any reuse would show.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_given_up_mid_statement_or_mid_transaction_is_not_reused() {
    let databases = fresh_databases("lease").await;
    let Some(url) = databases.postgres() else {
        return;
    };
    let db = Db::connect(url, 1, &caseops_service::reference::SCHEMA)
        .await
        .unwrap();
    let slow = db.fetch_all("SELECT pg_sleep(5) AS slept", &[]);
    assert!(
        tokio::time::timeout(Duration::from_millis(200), slow)
            .await
            .is_err(),
        "the sleep was given up"
    );
    // On the same connection this would wait for the sleep, or read its row.
    let answer = tokio::time::timeout(Duration::from_secs(3), db.fetch_all("SELECT 7 AS v", &[]))
        .await
        .expect("the next statement does not wait for the abandoned one")
        .unwrap();
    assert_eq!(answer[0].get::<i64>("v").unwrap(), 7);

    db.execute("CREATE TABLE lease_probe (v BIGINT)", &[])
        .await
        .unwrap();
    let mut tx = db.begin_lazy_write().await.unwrap();
    tx.execute("INSERT INTO lease_probe VALUES (1)", &[])
        .await
        .unwrap();
    drop(tx);
    // Not inside the dropped transaction: its row is gone, and this insert stays.
    db.execute("INSERT INTO lease_probe VALUES (2)", &[])
        .await
        .unwrap();
    let rows = db
        .fetch_all("SELECT v FROM lease_probe ORDER BY v", &[])
        .await
        .unwrap();
    let values: Vec<i64> = rows.iter().map(|r| r.get("v").unwrap()).collect();
    assert_eq!(values, vec![2]);

    // A statement the server refused leaves the connection usable.
    assert!(
        db.execute("INSERT INTO no_such_table VALUES (1)", &[])
            .await
            .is_err()
    );
    let answer = db.fetch_all("SELECT 8 AS v", &[]).await.unwrap();
    assert_eq!(answer[0].get::<i64>("v").unwrap(), 8);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sql_repository_reads_a_case_with_its_policy_and_documents_as_the_memory_one_does() {
    use caseops_service::domain::{AliasRule, Case, DEMO_TENANT, OTHER_TENANT};
    use caseops_service::tools::{CaseRepository, MemoryRepository};
    let mut data = reference_data();
    // A case whose policy is missing and which has no documents.
    data.cases.push(Case {
        tenant_id: DEMO_TENANT.into(),
        case_id: "C-900".into(),
        version: 2,
        status: "open".into(),
        policy_id: "retired-policy".into(),
        policy_version: "2019.4".into(),
        received_codes: vec!["LOSS_STATEMENT".into()],
    });
    // A rule that is not active, for a label a document has: it resolves nothing.
    data.alias_rules.push(AliasRule {
        tenant_id: DEMO_TENANT.into(),
        label: "车辆维修报价单".into(),
        code: "REPAIR_QUOTE".into(),
        rule_version: "2025.9".into(),
        confidence: 0.5,
        active: false,
    });
    // Two more active rules for the label of C-102's document, one older and one
    // newer than the reference data's `2026.1`, listed after it: the newest
    // applies whatever the order they were given in.
    for (version, code) in [("2025.12", "OLDER_CODE"), ("2026.2", "NEWER_CODE")] {
        data.alias_rules.push(AliasRule {
            tenant_id: DEMO_TENANT.into(),
            label: "道路交通事故认定书".into(),
            code: code.into(),
            rule_version: version.into(),
            confidence: 0.9,
            active: true,
        });
    }
    let memory = MemoryRepository::new(data.clone());
    for (backend, url) in fresh_databases("joined").await {
        let db = Db::connect(&url, 4, &caseops_service::reference::SCHEMA)
            .await
            .unwrap();
        seed(&db, &data).await.unwrap();
        let sql = SqlRepository { db };
        let mut seen_without_policy = false;
        let (mut seen_rule, mut seen_document_without_rule, mut seen_case_without_document) =
            (false, false, false);
        for tenant in [DEMO_TENANT, OTHER_TENANT] {
            for case in ["C-102", "C-103", "C-104", "C-555", "C-900", "C-404"] {
                let joined = sql.case_policy(tenant, case).await.unwrap();
                assert_eq!(
                    joined,
                    memory.case_policy(tenant, case).await.unwrap(),
                    "{backend}: {tenant} {case}"
                );
                seen_without_policy |= matches!(joined, Some((_, None)));
                assert_eq!(
                    sql.case_documents(tenant, case).await.unwrap(),
                    memory.case_documents(tenant, case).await.unwrap(),
                    "{backend}: {tenant} {case}"
                );
                for document in ["DOC-C102-003", "DOC-C103-003", "DOC-NONE"] {
                    let joined = sql.document_rule(tenant, case, document).await.unwrap();
                    assert_eq!(
                        joined,
                        memory.document_rule(tenant, case, document).await.unwrap(),
                        "{backend}: {tenant} {case} {document}"
                    );
                    match &joined {
                        Some((Some(_), Some(_))) => seen_rule = true,
                        Some((Some(_), None)) => seen_document_without_rule = true,
                        Some((None, None)) => seen_case_without_document = true,
                        _ => {}
                    }
                }
            }
        }
        assert!(seen_without_policy, "{backend}");
        assert!(
            seen_rule && seen_document_without_rule && seen_case_without_document,
            "{backend}"
        );
        for label in ["道路交通事故认定书", "车辆维修报价单", "no such label"] {
            assert_eq!(
                sql.alias_rule(DEMO_TENANT, label).await.unwrap(),
                memory.alias_rule(DEMO_TENANT, label).await.unwrap(),
                "{backend}: {label}"
            );
        }
        let newest = memory
            .alias_rule(DEMO_TENANT, "道路交通事故认定书")
            .await
            .unwrap()
            .map(|r| r.code);
        assert_eq!(newest.as_deref(), Some("NEWER_CODE"), "{backend}");
        let (_, none) = sql
            .case_documents(DEMO_TENANT, "C-900")
            .await
            .unwrap()
            .unwrap();
        assert!(none.is_empty(), "{backend}");
        let (_, some) = sql
            .case_documents(DEMO_TENANT, "C-102")
            .await
            .unwrap()
            .unwrap();
        assert!(!some.is_empty(), "{backend}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timeline_takes_each_sequence_once_and_only_the_next_one() {
    for (backend, url) in fresh_databases("timeline_guard").await {
        let (db, store, direct) = setup(&url).await;
        let store = store.with_row_format(RowFormat::CompactTimeline);
        store
            .allocate(&new_run("r-guard", "r-guard-key", "h"))
            .await
            .unwrap();
        let dying = DiesAt(&store, 3, Default::default());
        Engine::<Bundle>::new()
            .unwrap()
            .start(spec("r-guard"), &ConformancePlanner, &direct, &dying)
            .await
            .unwrap_err();
        let before = store.checkpoints("tenant-demo", "r-guard").await.unwrap();
        let last = before.last().unwrap().clone();
        let history = || {
            let db = db.clone();
            async move {
                db.fetch_optional("SELECT history FROM runs WHERE run_id = 'r-guard'", &[])
                    .await
                    .unwrap()
                    .unwrap()
                    .get::<String>("history")
                    .unwrap()
            }
        };
        let stored = history().await;
        let batch = |sequence: u64| caseops_runtime::store::Batch {
            run_id: "r-guard".into(),
            point: caseops_runtime::store::CommitPoint::BeforePlanner,
            spec: None,
            checkpoints: vec![caseops_runtime::Checkpoint {
                run_id: "r-guard".into(),
                sequence,
                from: last.to.clone(),
                to: "planning".into(),
                at_ms: last.at_ms + 5,
                reason: Some("again".into()),
                snapshot: None,
            }],
            ledger: vec![],
            state: "planning".into(),
            step_count: 1,
            outcome: None,
            approval: None,
        };
        // A sequence already taken, and one past the next: refused, nothing written.
        for sequence in [last.sequence, last.sequence + 2] {
            let err = caseops_runtime::RunStore::commit(&store, batch(sequence)).await;
            assert!(err.is_err(), "{backend}: sequence {sequence} was taken");
            assert_eq!(history().await, stored, "{backend}: sequence {sequence}");
        }
        caseops_runtime::RunStore::commit(&store, batch(last.sequence + 1))
            .await
            .unwrap();
        let after = store.checkpoints("tenant-demo", "r-guard").await.unwrap();
        assert_eq!(after.len(), before.len() + 1, "{backend}");
        let new = after.last().unwrap();
        assert_eq!(
            (
                new.sequence,
                new.from.as_str(),
                new.to.as_str(),
                new.at_ms,
                new.reason.as_deref()
            ),
            (
                last.sequence + 1,
                last.to.as_str(),
                "planning",
                last.at_ms + 5,
                Some("again")
            ),
            "{backend}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_whose_caller_stops_waiting_is_still_made() {
    for (backend, url) in fresh_databases("giveup").await {
        let (db, _, _) = setup(&url).await;
        db.execute("CREATE TABLE given_up (v TEXT PRIMARY KEY)", &[])
            .await
            .unwrap();
        for i in 0..20 {
            let v = format!("row-{i:02}");
            let mut tx = db.begin_write().await.unwrap();
            tx.execute(
                "INSERT INTO given_up (v) VALUES (?)",
                &caseops_host::params![v.clone()],
            )
            .await
            .unwrap();
            // The caller polls the commit once and gives up (a timeout, a client
            // gone): what it asked for is still committed.
            let _ = tokio::time::timeout(Duration::ZERO, tx.commit()).await;
        }
        let mut rows = 0;
        for _ in 0..200 {
            rows = db
                .fetch_all("SELECT v FROM given_up", &[])
                .await
                .unwrap()
                .len();
            if rows == 20 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(rows, 20, "{backend}");
        // Every connection went back clean: a transaction on each still works.
        for _ in 0..16 {
            let mut tx = db.begin_write().await.unwrap();
            tx.execute("DELETE FROM given_up", &[]).await.unwrap();
            drop(tx);
        }
        assert_eq!(
            db.fetch_all("SELECT v FROM given_up", &[])
                .await
                .unwrap()
                .len(),
            20,
            "{backend}: the dropped transactions undid their deletes"
        );
    }
}

/// Every kind of value the stores bind goes in and comes back as itself: integers
/// of each width, doubles and reals, long non-ASCII text, and NULLs of each type.
/// An application's own tables may hold booleans and binary too: both backends
/// read them the same way (0 and 1, text). On PostgreSQL a `real` and a `boolean`
/// used to read back as NULL.
#[tokio::test]
async fn each_bound_value_and_column_type_reads_back_as_it_was_written() {
    for (backend, url) in fresh_databases("coltypes").await {
        let (db, _, _) = setup(&url).await;
        db.execute(
            "CREATE TABLE typed (k TEXT PRIMARY KEY, s SMALLINT, i INTEGER, b BIGINT, r REAL, d DOUBLE PRECISION, t TEXT, nb BIGINT, nt TEXT, yes BOOLEAN, no BOOLEAN)",
            &[],
        )
        .await
        .unwrap();
        let long = "é🦀\"'\\".repeat(2000);
        db.execute(
            "INSERT INTO typed VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, TRUE, FALSE)",
            &caseops_host::params![
                "a",
                -7i64,
                70_000i64,
                i64::MAX,
                1.5f64,
                -2.25e300f64,
                long.as_str(),
                None::<i64>,
                None::<String>
            ],
        )
        .await
        .unwrap();
        let rows = db
            .fetch_all(
                "SELECT * FROM typed WHERE k = ?",
                &caseops_host::params!["a"],
            )
            .await
            .unwrap();
        assert_eq!(rows.len(), 1, "{backend}");
        let row = &rows[0];
        assert_eq!(row.get::<i64>("s").unwrap(), -7, "{backend}");
        assert_eq!(row.get::<i64>("i").unwrap(), 70_000, "{backend}");
        assert_eq!(row.get::<i64>("b").unwrap(), i64::MAX, "{backend}");
        assert_eq!(row.get::<f64>("r").unwrap(), 1.5, "{backend}");
        assert_eq!(row.get::<f64>("d").unwrap(), -2.25e300, "{backend}");
        assert_eq!(row.get::<String>("t").unwrap(), long, "{backend}");
        assert_eq!(row.get::<Option<i64>>("nb").unwrap(), None, "{backend}");
        assert_eq!(row.get::<Option<String>>("nt").unwrap(), None, "{backend}");
        assert_eq!(row.get::<i64>("yes").unwrap(), 1, "{backend}");
        assert_eq!(row.get::<i64>("no").unwrap(), 0, "{backend}");
        let blob = match backend {
            "postgres" => "SELECT CAST('é-bytes' AS BYTEA) AS raw",
            _ => "SELECT CAST('é-bytes' AS BLOB) AS raw",
        };
        let raw = db.fetch_optional(blob, &[]).await.unwrap().unwrap();
        assert_eq!(raw.get::<String>("raw").unwrap(), "é-bytes", "{backend}");
        // Computed columns of a single statement, and a result of no rows.
        let row = db
            .fetch_optional("SELECT COUNT(*) AS n, MAX(b) AS m FROM typed", &[])
            .await
            .unwrap()
            .unwrap();
        assert_eq!(row.get::<i64>("n").unwrap(), 1, "{backend}");
        assert_eq!(row.get::<i64>("m").unwrap(), i64::MAX, "{backend}");
        let none = db
            .fetch_all(
                "SELECT * FROM typed WHERE k = ?",
                &caseops_host::params!["b"],
            )
            .await
            .unwrap();
        assert!(none.is_empty(), "{backend}");
        // A type the stores do not read (SQLite has none) is an error naming the
        // column, not a NULL.
        if backend == "postgres" {
            let err = db
                .fetch_all("SELECT CAST(1.5 AS NUMERIC) AS amount", &[])
                .await
                .unwrap_err()
                .to_string();
            assert!(err.contains("amount"), "{err}");
        }
    }
}
