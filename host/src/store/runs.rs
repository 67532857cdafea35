//! The run store: idempotent run allocation and the runtime's `RunStore`, one
//! transaction per commit point (checkpoints, ledger rows, run record, and at the
//! terminal state the audit and outbox events too).

use super::row_format::{self, RowFormat, RunColumns};
use super::sql::{Row, Statement, Tx};
use super::timeline;
use super::{Db, DbError, Dialect, audit, now_ms};
use crate::params;
use caseops_runtime::store::{Batch, StoreError, StoredRun};
use caseops_runtime::{
    CallStatus, Checkpoint, LedgerRow, Outcome, RunSpec, RunStore, SnapshotText,
};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Arc;
use tracing::Instrument;

/// A run as the API shows it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct RunRecord {
    pub run_id: String,
    pub tenant_id: String,
    /// The id of the run-bound resource.
    pub resource_id: String,
    pub actor: String,
    pub idempotency_key: String,
    pub request_hash: String,
    pub goal: String,
    pub planner_kind: String,
    pub model: Option<String>,
    pub status: String,
    pub state: String,
    pub step_count: i64,
    pub final_result: Option<Value>,
    /// Cited evidence reference → the tool call that returned it (completed runs).
    pub provenance: Option<Value>,
    pub stop_reason: Option<String>,
    pub bundle_digest: String,
    pub created_at: i64,
    pub updated_at: i64,
    #[serde(skip)]
    pub spec: Option<RunSpec>,
}

impl RunRecord {
    /// The record as JSON, with its resource id under the bundle's name for it
    /// (e.g. `order_id`) rather than the generic `resource_id`.
    pub fn to_json(&self, resource_key: &str) -> Value {
        let mut v = serde_json::to_value(self).unwrap_or_default();
        if let Some(obj) = v.as_object_mut()
            && let Some(id) = obj.remove("resource_id")
        {
            obj.insert(resource_key.to_string(), id);
        }
        v
    }
}

/// What a list of runs is narrowed to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunFilter {
    pub status: Option<String>,
    pub resource_id: Option<String>,
    pub stop_reason: Option<String>,
    /// The last run of the previous page (`created_at`, `run_id`): this page
    /// starts after it.
    pub after: Option<(i64, String)>,
}

/// Where a run stands, without its record's weight.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct RunStatus {
    pub run_id: String,
    pub status: String,
    pub state: String,
    pub step_count: i64,
    pub stop_reason: Option<String>,
    pub updated_at: i64,
}

/// What a POST asks for, before a run exists.
#[derive(Debug, Clone)]
pub struct NewRun {
    pub spec: RunSpec,
    pub actor: String,
    pub idempotency_key: String,
    /// What tells a replay from another request under the same key, normally
    /// [`row_format::request_hash`] of the run's resource id, goal and planner.
    pub request_hash: String,
    /// The request's `X-Request-Id`; the API takes the run's id when it has
    /// none. An empty one is stored as none from `compact-requests` on.
    pub request_id: Option<String>,
    pub planner_kind: String,
    pub model: Option<String>,
    pub bundle_digest: String,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Allocation {
    /// This request created the run.
    New(RunRecord),
    /// A run with this key and the same request exists.
    Existing(RunRecord),
    /// The key was used with a different request.
    Conflict(RunRecord),
    /// No run has the key, and the resource does not exist (so none was created).
    Absent,
}

/// The application's check that a run's resource exists, as a condition on the
/// run store's own database: SQL with exactly two `?` placeholders, the tenant's
/// id and then the resource's, as in
/// `EXISTS (SELECT 1 FROM orders WHERE tenant_id = ? AND order_id = ?)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResourceCondition(pub &'static str);

/// Changes to runs, announced inside this process: every commit (for event
/// streams, which follow runs through a broadcast) and every run that settled —
/// reached a terminal state, or whose driver here stopped — for the requests
/// waiting on that run alone (one registry entry per waiter, so a settlement wakes
/// its own waiters, not every waiting request).
#[derive(Debug, Clone)]
pub struct RunSignals {
    commits: tokio::sync::broadcast::Sender<std::sync::Arc<str>>,
    waiters: std::sync::Arc<std::sync::Mutex<Waiters>>,
}

type Waiters = std::collections::HashMap<String, Vec<std::sync::Arc<Waiter>>>;

/// One waiting request: its wake-up, and what the commit that woke it wrote.
#[derive(Debug, Default)]
struct Waiter {
    notify: tokio::sync::Notify,
    written: std::sync::Mutex<Option<std::sync::Arc<Settled>>>,
}

/// What a commit that ended or parked a run wrote to the run's row: with the row
/// as it was created, all a waiting request needs to answer without reading the
/// row back (the fence is the only statement that changes these fields).
#[derive(Debug, Clone, PartialEq)]
pub struct Settled {
    state: String,
    status: String,
    step_count: i64,
    final_result: Option<String>,
    provenance: Option<String>,
    stop_reason: Option<String>,
    updated_at: i64,
}

impl Settled {
    /// `record` as the row reads after this commit. The JSON columns are parsed
    /// from the text that was stored, exactly as a read parses them.
    pub fn apply(&self, mut record: RunRecord) -> Result<RunRecord, DbError> {
        record.state.clone_from(&self.state);
        record.status.clone_from(&self.status);
        record.step_count = self.step_count;
        record.final_result = parse_json(self.final_result.clone(), "runs")?;
        record.provenance = parse_json(self.provenance.clone(), "runs")?;
        record.stop_reason.clone_from(&self.stop_reason);
        record.updated_at = self.updated_at;
        Ok(record)
    }
}

impl Default for RunSignals {
    fn default() -> Self {
        // Room for many runs' commits: a stream that falls behind re-reads.
        Self {
            commits: tokio::sync::broadcast::channel(1024).0,
            waiters: Default::default(),
        }
    }
}

/// What a commit or a driver tells a run's waiters.
enum Word {
    /// A commit here ended or parked the run: answer from what it wrote.
    Written(std::sync::Arc<Settled>),
    /// A commit moved the row past any earlier word (a parked run went on): a
    /// waiter that has not taken that word must read. Not a wake-up.
    Moved,
    /// The run's driver here stopped: wake, and answer from the word held, if
    /// any (no commit here came after it), or read.
    Stopped,
}

/// A registration for one run's settlement; dropping it deregisters.
pub struct Settlement {
    run_id: String,
    waiter: std::sync::Arc<Waiter>,
    waiters: std::sync::Arc<std::sync::Mutex<Waiters>>,
}

impl Settlement {
    /// Resolves at the run's next settlement (or at once if one came since the
    /// registration or the last call), with what the settling commit wrote when
    /// it was a commit of this process (`None`: read the run).
    pub async fn settled(&self) -> Option<std::sync::Arc<Settled>> {
        self.waiter.notify.notified().await;
        self.waiter.written.lock().expect("waiter lock").take()
    }
}

impl Drop for Settlement {
    fn drop(&mut self) {
        let mut waiters = self.waiters.lock().expect("waiters lock");
        if let Some(list) = waiters.get_mut(&self.run_id) {
            list.retain(|w| !std::sync::Arc::ptr_eq(w, &self.waiter));
            if list.is_empty() {
                waiters.remove(&self.run_id);
            }
        }
    }
}

impl RunSignals {
    /// A commit of `run_id`; `settled` with what it wrote when it ended or parked
    /// the run.
    pub fn committed(&self, run_id: &str, settled: Option<Settled>) {
        match settled {
            Some(written) => self.tell(run_id, Word::Written(std::sync::Arc::new(written))),
            None => self.tell(run_id, Word::Moved),
        }
        // No receiver is not an error: nobody follows the run.
        if self.commits.receiver_count() > 0 {
            let _ = self.commits.send(run_id.into());
        }
    }

    /// `run_id`'s driver here stopped. Its waiters wake; one that holds the
    /// word of the run's last commit here answers from it, the others read.
    pub fn settled(&self, run_id: &str) {
        self.tell(run_id, Word::Stopped);
    }

    fn tell(&self, run_id: &str, word: Word) {
        let waiters = self.waiters.lock().expect("waiters lock");
        for w in waiters.get(run_id).into_iter().flatten() {
            match &word {
                Word::Written(written) => {
                    *w.written.lock().expect("waiter lock") = Some(written.clone());
                }
                Word::Moved => {
                    *w.written.lock().expect("waiter lock") = None;
                    continue;
                }
                Word::Stopped => {}
            }
            // A permit is kept if the waiter is not polling right now.
            w.notify.notify_one();
        }
    }

    /// Registers for `run_id`'s settlements. Register before reading the run, so
    /// that no settlement falls between the read and the wait.
    pub fn watch(&self, run_id: &str) -> Settlement {
        let waiter = std::sync::Arc::new(Waiter::default());
        self.waiters
            .lock()
            .expect("waiters lock")
            .entry(run_id.to_string())
            .or_default()
            .push(waiter.clone());
        Settlement {
            run_id: run_id.to_string(),
            waiter,
            waiters: self.waiters.clone(),
        }
    }

    pub fn commits(&self) -> tokio::sync::broadcast::Receiver<std::sync::Arc<str>> {
        self.commits.subscribe()
    }
}

/// Resolves when `changes` carries `run_id`, or when changes were missed (the
/// caller re-reads the run either way).
pub async fn next_of(
    changes: &mut tokio::sync::broadcast::Receiver<std::sync::Arc<str>>,
    run_id: &str,
) {
    use tokio::sync::broadcast::error::RecvError;
    loop {
        match changes.recv().await {
            Ok(id) if &*id == run_id => return,
            Ok(_) => {}
            Err(RecvError::Lagged(_)) => return,
            Err(RecvError::Closed) => std::future::pending().await,
        }
    }
}

/// `RunStore` over a database.
#[derive(Debug, Clone)]
pub struct SqlRunStore {
    pub db: Db,
    /// This process's identity for run leases.
    pub owner: String,
    /// How long a lease lasts without a heartbeat renewing it.
    pub lease_ms: i64,
    /// Where commits are announced (waiting requests, event streams).
    signals: Option<RunSignals>,
    /// How terminal audit and outbox events name the run's resource.
    events: audit::EventNames,
    facts: RunFacts,
    /// How ledger rows and checkpoints are written (see [`RowFormat`]).
    rows: RowFormat,
    hashes: row_format::HashMemo,
}

/// Who each run this process created is about, kept until the run ends or parks
/// here, so that its terminal commit need not read them back: on PostgreSQL that
/// commit is then one statement. A run it does not hold (created elsewhere, or
/// forgotten) is committed the longer way, which reads them.
#[derive(Debug, Clone, Default)]
struct RunFacts(Arc<std::sync::Mutex<HashMap<String, Facts>>>);

#[derive(Debug, Clone)]
struct Facts {
    tenant: String,
    resource_id: String,
    actor: String,
    request_id: Option<String>,
    place: Place,
}

/// Where a run's history goes, which the run decides by the format it was
/// created in, not the process that drives it: a run keeps its history in one
/// place when a replica in another format (of this version, during the restarts
/// after `migrate --compact-rows`) takes it over.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Place {
    /// The run's number (`compact-history`), which keys its calls in `run_calls`
    /// and, without a timeline, its transitions in `run_transitions`; `None` for
    /// a run created earlier, whose history is keyed by its id.
    number: Option<i64>,
    /// The run's `created_at` when its transitions are lines of its row
    /// (`compact-timeline`): they are written as offsets from it.
    timeline: Option<i64>,
}

/// Runs in flight in one process stay far below this. Runs that never end here
/// (taken over by another replica, say) leave entries behind: at the bound all
/// are forgotten, which costs those still running one read each at their end.
const REMEMBERED_RUNS: usize = 4096;

impl RunFacts {
    fn remember(&self, run_id: &str, who: &audit::Who<'_>, place: Place) {
        let mut facts = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if facts.len() >= REMEMBERED_RUNS {
            facts.clear();
        }
        facts.insert(
            run_id.to_string(),
            Facts {
                tenant: who.tenant.to_string(),
                resource_id: who.resource_id.to_string(),
                actor: who.actor.to_string(),
                request_id: who.request_id.map(str::to_string),
                place,
            },
        );
    }

    /// Where the run's history goes, if this process remembers the run.
    fn place(&self, run_id: &str) -> Option<Place> {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(run_id)
            .map(|f| f.place)
    }

    fn take(&self, run_id: &str) -> Option<Facts> {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(run_id)
    }
}

/// Default lease. A driver renews its lease every third of it, so a live process
/// loses a run only after missing three heartbeats in a row (a database stalled
/// for that long); a dead one's runs are claimed at most a lease
/// plus one claim interval after its last heartbeat. Five seconds keeps a rolling
/// deploy's SIGKILLed replica from holding runs for more than a few seconds while
/// costing one small UPDATE per running run every 1.7 s.
pub const DEFAULT_LEASE_MS: i64 = 5_000;

/// A `compact-runs` run's catalog, stored once per distinct list of names under
/// its key ([`row_format::CATALOG_KEY_SQL`], then the names): the first run that
/// names it inserts it, in the statement or transaction that creates the run, and
/// decides its key from the same rows as the run's own column does.
fn catalog_sql(dialect: Dialect) -> String {
    let only_with_run = match dialect {
        // SQLite's upsert needs a `WHERE` after an `INSERT … SELECT`.
        Dialect::Sqlite => "true",
        Dialect::Postgres => "EXISTS (SELECT 1 FROM run)",
    };
    format!(
        "INSERT INTO run_catalogs (digest, names) SELECT {}, ? WHERE {only_with_run} \
         ON CONFLICT (digest) DO NOTHING",
        row_format::CATALOG_KEY_SQL
    )
}

/// PostgreSQL: a fenced batch's writes happen only if its fence matched (see
/// [`Statement::gated`]).
const PG_GATE: &str = "EXISTS (SELECT 1 FROM fence)";

/// `SELECT <the columns [`record`] reads> FROM runs <tail>`, as a literal.
macro_rules! select_runs {
    ($tail:literal) => {
        concat!("SELECT run_id, tenant_id, resource_id, actor, idempotency_key, request_hash, request_id, goal, planner_kind, model, status, state, step_count, spec, \
                 (SELECT c.names FROM run_catalogs c WHERE c.digest = runs.catalog_digest) AS catalog_names, \
                 final_result, provenance, stop_reason, bundle_digest, created_at, updated_at FROM runs ", $tail)
    };
}

/// A tool call id as `run_calls` keys it: from the `:` on when it starts with its
/// run's id and `:` (as the ids the runtime gives do), else whole after `=`.
/// Readers tell the two apart by the first character.
fn stored_call(run_id: &str, call_id: &str) -> String {
    match call_id.strip_prefix(run_id) {
        Some(rest) if rest.starts_with(':') => rest.to_string(),
        _ => format!("={call_id}"),
    }
}

/// A run's checkpoints of `tenant`, from wherever they are: by run id
/// (`checkpoints`), by run number (`run_transitions`) for a run that has one, or
/// in its row's timeline (`history`). Parameters: tenant, run id, then any the
/// `$more` condition takes, the same again, then tenant and run id. `$snapshot` is the snapshot column of
/// `checkpoints`. A compact checkpoint's '' `from_state` is the `to_state` of the
/// one before it, written in the same statement, so in the same table.
macro_rules! select_checkpoints {
    ($snapshot:literal, $more:literal) => {
        concat!(
            "SELECT c.run_id, c.sequence, \
             COALESCE(NULLIF(c.from_state, ''), (SELECT p.to_state FROM checkpoints p WHERE p.run_id = c.run_id AND p.sequence = c.sequence - 1)) AS from_state, \
             c.to_state, c.at_ms, c.reason, ",
            $snapshot,
            " FROM checkpoints c JOIN runs r ON r.run_id = c.run_id WHERE r.tenant_id = ? AND c.run_id = ? ",
            $more,
            "UNION ALL SELECT r.run_id, c.sequence, \
             COALESCE(NULLIF(c.from_state, ''), (SELECT p.to_state FROM run_transitions p WHERE p.run_no = c.run_no AND p.sequence = c.sequence - 1)) AS from_state, \
             c.to_state, c.at_ms, c.reason, CAST(NULL AS TEXT) AS snapshot \
             FROM run_transitions c JOIN runs r ON r.run_no = c.run_no WHERE r.tenant_id = ? AND r.run_id = ? ",
            $more,
            // The run's timeline as one row of sequence -1, read by `checkpoints_of`.
            "UNION ALL SELECT r.run_id, -1, CAST(NULL AS TEXT), r.history, r.created_at, CAST(NULL AS TEXT), CAST(NULL AS TEXT) \
             FROM runs r WHERE r.tenant_id = ? AND r.run_id = ? AND r.history <> '' \
             ORDER BY 2"
        )
    };
}

/// What [`place`] reads, by run id.
const PLACE_SQL: &str = "SELECT run_no, CASE WHEN history IS NULL THEN NULL ELSE created_at END AS timeline FROM runs WHERE run_id = ?";

fn place(r: &Row) -> Result<Place, DbError> {
    Ok(Place {
        number: r.get("run_no")?,
        timeline: r.get("timeline")?,
    })
}

fn parse_json(text: Option<String>, table: &'static str) -> Result<Option<Value>, DbError> {
    text.map(|t| {
        serde_json::from_str(&t).map_err(|e| DbError::Corrupt {
            table,
            message: e.to_string(),
        })
    })
    .transpose()
}

/// A stored snapshot, kept as its text; SQL `NULL` and JSON `null` are none.
fn parse_snapshot(
    text: Option<String>,
    table: &'static str,
) -> Result<Option<SnapshotText>, DbError> {
    match text {
        Some(t) if t != "null" => {
            SnapshotText::from_text(t)
                .map(Some)
                .map_err(|e| DbError::Corrupt {
                    table,
                    message: e.to_string(),
                })
        }
        _ => Ok(None),
    }
}

/// The checkpoints `select_checkpoints!` read, after sequence `after`, in order:
/// a timeline row is read into its lines.
fn checkpoints_of(rows: &[Row], after: u64) -> Result<Vec<Checkpoint>, DbError> {
    let mut out = Vec::with_capacity(rows.len());
    let mut timeline = false;
    for r in rows {
        if r.get::<i64>("sequence")? >= 0 {
            out.push(checkpoint(r)?);
            continue;
        }
        let run_id: String = r.get("run_id")?;
        let history: String = r.get("to_state")?;
        let lines =
            timeline::read(&history, r.get("at_ms")?, &run_id).map_err(|e| DbError::Corrupt {
                table: "runs",
                message: format!(
                    "line {} of the history of run `{run_id}`: {}",
                    e.line, e.message
                ),
            })?;
        out.extend(lines.into_iter().filter(|c| c.sequence > after));
        timeline = true;
    }
    // The timeline row comes first (sequence -1): a run whose transitions are
    // also in a table (none this version writes) still reads in sequence order.
    if timeline {
        out.sort_by_key(|c| c.sequence);
    }
    Ok(out)
}

fn checkpoint(r: &Row) -> Result<Checkpoint, DbError> {
    Ok(Checkpoint {
        run_id: r.get("run_id")?,
        sequence: r.get::<i64>("sequence")? as u64,
        from: r
            .get::<Option<String>>("from_state")?
            .ok_or_else(|| DbError::Corrupt {
                table: "checkpoints",
                message: "a checkpoint without `from_state` follows no checkpoint".into(),
            })?,
        to: r.get("to_state")?,
        at_ms: r.get::<i64>("at_ms")? as u64,
        reason: r.get("reason")?,
        snapshot: parse_snapshot(r.get("snapshot")?, "checkpoints")?,
    })
}

fn status_of(s: &str) -> Result<CallStatus, DbError> {
    serde_json::from_value(Value::String(s.to_string())).map_err(|_| DbError::Corrupt {
        table: "tool_executions",
        message: format!("unknown status `{s}`"),
    })
}

/// A run's row as read, its stored request hash rebuilt under `resource_key`.
fn record(row: &Row, resource_key: &str) -> Result<RunRecord, DbError> {
    let run_id: String = row.get("run_id")?;
    let tenant_id: String = row.get("tenant_id")?;
    let resource_id: String = row.get("resource_id")?;
    let actor: String = row.get("actor")?;
    let request_id = row_format::read_request_id(row.get("request_id")?, &run_id);
    let goal: String = row.get("goal")?;
    let planner_kind: String = row.get("planner_kind")?;
    let bundle_digest: String = row.get("bundle_digest")?;
    let spec = row_format::read_spec(
        &row.get::<String>("spec")?,
        &RunColumns {
            run_id: &run_id,
            tenant_id: &tenant_id,
            resource_id: &resource_id,
            actor: &actor,
            request_id: request_id.as_deref(),
            goal: &goal,
        },
        row.get::<Option<String>>("catalog_names")?.as_deref(),
    )?;
    let request_hash = row_format::read_request_hash(
        row.get("request_hash")?,
        resource_key,
        &resource_id,
        &goal,
        &planner_kind,
    );
    Ok(RunRecord {
        provenance: row_format::read_provenance(row.get("provenance")?, &run_id, &bundle_digest)?,
        request_hash,
        run_id,
        tenant_id,
        resource_id,
        actor,
        idempotency_key: row.get("idempotency_key")?,
        goal,
        planner_kind,
        model: row.get("model")?,
        status: row.get("status")?,
        state: row.get("state")?,
        step_count: row.get("step_count")?,
        final_result: parse_json(row.get("final_result")?, "runs")?,
        stop_reason: row.get("stop_reason")?,
        bundle_digest,
        created_at: row.get("created_at")?,
        updated_at: row.get("updated_at")?,
        spec: Some(spec),
    })
}

impl SqlRunStore {
    pub fn new(db: Db) -> Self {
        Self {
            db,
            owner: format!(
                "caseops-{}-{}",
                std::process::id(),
                uuid::Uuid::new_v4().simple()
            ),
            lease_ms: DEFAULT_LEASE_MS,
            signals: None,
            events: audit::EventNames::default(),
            facts: RunFacts::default(),
            rows: RowFormat::Full,
            hashes: row_format::HashMemo::default(),
        }
    }

    /// Names terminal events after bundle `B` (topic and resource key).
    pub fn for_bundle<B: caseops_runtime::ContractBundle>(mut self) -> Self {
        self.events = audit::EventNames::of::<B>();
        self
    }

    /// Announces every commit on `changes`.
    pub fn with_signals(mut self, signals: RunSignals) -> Self {
        self.signals = Some(signals);
        self
    }

    /// A tenant's runs, newest first, optionally only those in `status`.
    pub async fn list(
        &self,
        tenant: &str,
        status: Option<&str>,
        limit: i64,
    ) -> Result<Vec<RunRecord>, DbError> {
        let filter = RunFilter {
            status: status.map(str::to_string),
            ..RunFilter::default()
        };
        self.search(tenant, &filter, limit).await
    }

    /// A page of a tenant's runs, newest first, as `filter` narrows them.
    pub async fn search(
        &self,
        tenant: &str,
        filter: &RunFilter,
        limit: i64,
    ) -> Result<Vec<RunRecord>, DbError> {
        let (before_at, before_id) = match &filter.after {
            Some((at, id)) => (Some(*at), Some(id.as_str())),
            None => (None, None),
        };
        let rows = self.db.fetch_all(select_runs!("WHERE tenant_id = ? AND (? IS NULL OR status = ?) AND (? IS NULL OR resource_id = ?) AND (? IS NULL OR stop_reason = ?) \
             AND (? IS NULL OR created_at < ? OR (created_at = ? AND run_id > ?)) ORDER BY created_at DESC, run_id LIMIT ?"),
            &params![tenant, filter.status.as_deref(), filter.status.as_deref(), filter.resource_id.as_deref(), filter.resource_id.as_deref(),
                filter.stop_reason.as_deref(), filter.stop_reason.as_deref(), before_at, before_at, before_at, before_id, limit])
        .await?;
        rows.iter()
            .map(|r| record(r, self.events.resource_key))
            .collect()
    }

    /// The stop reasons among a tenant's latest `recent` runs (what a filter offers).
    pub async fn recent_stop_reasons(
        &self,
        tenant: &str,
        recent: i64,
    ) -> Result<Vec<String>, DbError> {
        let rows = self.db.fetch_all("SELECT DISTINCT stop_reason FROM (SELECT stop_reason FROM runs WHERE tenant_id = ? ORDER BY created_at DESC LIMIT ?) AS recent WHERE stop_reason IS NOT NULL ORDER BY stop_reason", &params![tenant, recent])
            .await?;
        rows.iter().map(|r| r.get("stop_reason")).collect()
    }

    /// How the runs `ids` of a tenant stand now (the console's live list).
    pub async fn statuses(&self, tenant: &str, ids: &[String]) -> Result<Vec<RunStatus>, DbError> {
        let mut out = Vec::with_capacity(ids.len());
        // A handful of ids per page: one indexed read each keeps the SQL static.
        for id in ids {
            let row = self.db.fetch_optional("SELECT run_id, status, state, step_count, stop_reason, updated_at FROM runs WHERE tenant_id = ? AND run_id = ?", &params![tenant, id.as_str()])
                .await?;
            if let Some(r) = row {
                out.push(RunStatus {
                    run_id: r.get("run_id")?,
                    status: r.get("status")?,
                    state: r.get("state")?,
                    step_count: r.get("step_count")?,
                    stop_reason: r.get("stop_reason")?,
                    updated_at: r.get("updated_at")?,
                });
            }
        }
        Ok(out)
    }

    /// How many runs of a tenant were created after `after_ms`.
    pub async fn created_since(&self, tenant: &str, after_ms: i64) -> Result<i64, DbError> {
        let row = self
            .db
            .fetch_optional(
                "SELECT COUNT(*) AS n FROM runs WHERE tenant_id = ? AND created_at > ?",
                &params![tenant, after_ms],
            )
            .await?;
        row.map_or(Ok(0), |r| r.get("n"))
    }

    /// A run of any tenant, for the workers that drive it.
    pub async fn record(&self, run_id: &str) -> Result<Option<RunRecord>, DbError> {
        let row = self
            .db
            .fetch_optional(select_runs!("WHERE run_id = ?"), &params![run_id])
            .await?;
        row.as_ref()
            .map(|r| record(r, self.events.resource_key))
            .transpose()
    }

    /// Writes ledger rows and checkpoints in `rows` (the database's
    /// [`RowFormat::of`]); reading takes either.
    pub fn with_row_format(mut self, rows: RowFormat) -> Self {
        self.rows = rows;
        self
    }

    pub fn with_lease_ms(mut self, lease_ms: i64) -> Self {
        self.lease_ms = lease_ms;
        self
    }

    /// Takes the run's lease if it is free, ours, or expired (its process died). The
    /// conditional update is atomic, so two processes never both hold it.
    pub async fn claim(&self, run_id: &str) -> Result<bool, DbError> {
        let now = now_ms();
        let done = self.db.execute("UPDATE runs SET lease_owner = ?, lease_expires_at = ? WHERE run_id = ? AND status = 'running' \
             AND (lease_owner IS NULL OR lease_owner = ? OR lease_expires_at < ?)", &params![&self.owner, now + self.lease_ms, run_id, &self.owner, now])
        .await?;
        Ok(done == 1)
    }

    /// Extends this process's lease on a run it holds; false when it no longer
    /// holds it (taken over after expiring, or finished).
    pub async fn renew(&self, run_id: &str) -> Result<bool, DbError> {
        let done = self
            .db
            .execute(
                "UPDATE runs SET lease_expires_at = ? WHERE run_id = ? AND lease_owner = ? AND status = 'running'",
                &params![now_ms() + self.lease_ms, run_id, &self.owner],
            )
            .await?;
        Ok(done == 1)
    }

    /// Gives the lease up so that any replica's worker may claim the run
    /// `after_ms` from now (0: at once). Only the holder can release it.
    pub async fn release(&self, run_id: &str, after_ms: i64) -> Result<bool, DbError> {
        let done = self
            .db
            .execute(
                "UPDATE runs SET lease_owner = NULL, lease_expires_at = ? WHERE run_id = ? AND lease_owner = ? AND status = 'running'",
                &params![now_ms() + after_ms, run_id, &self.owner],
            )
            .await?;
        Ok(done == 1)
    }

    /// Releases every lease this process holds (a shutdown, after its drivers
    /// stopped), so other replicas resume those runs at once.
    pub async fn release_all(&self) -> Result<u64, DbError> {
        self.db
            .execute(
                "UPDATE runs SET lease_owner = NULL, lease_expires_at = ? WHERE lease_owner = ? AND status = 'running'",
                &params![now_ms(), &self.owner],
            )
            .await
    }

    /// Renews the lease every third of its length until this process no longer
    /// holds it; never returns while it does. Poll it beside the work it guards
    /// (see [`SqlRunStore::while_leased`]): it must live and die with its driver.
    pub async fn heartbeat(&self, run_id: &str) {
        let every = std::time::Duration::from_millis((self.lease_ms / 3).max(1) as u64);
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        loop {
            tick.tick().await;
            match self.renew(run_id).await {
                Ok(true) => {}
                // Finished, or another process took it over: nothing to keep.
                Ok(false) => return,
                // A database that does not answer: the lease may run out, and then
                // the fenced commit tells this driver it lost the run.
                Err(e) => tracing::warn!("caseops: renewing the lease of `{run_id}` failed: {e}"),
            }
        }
    }

    /// Runs `work` on a run this process holds, renewing the lease meanwhile:
    /// commits do not renew it, and a single planner or tool call may outlast a
    /// lease, so the run must not look abandoned while it runs. The heartbeat is
    /// polled inside this future, so dropping it (a cancelled driver) stops the
    /// renewals too and the lease runs out. `None` when the lease was lost first: another
    /// replica drives the run now and `work` was dropped.
    pub async fn while_leased<F: std::future::Future>(
        &self,
        run_id: &str,
        work: F,
    ) -> Option<F::Output> {
        tokio::select! {
            out = work => Some(out),
            () = self.heartbeat(run_id) => None,
        }
    }

    /// Claims up to `limit` runs that are due — their lease expired (the holder
    /// died), was released, or was never renewed (a run that has no checkpoint yet
    /// included) — for this process, oldest first, and returns their ids. On
    /// PostgreSQL the rows are locked with `FOR UPDATE SKIP LOCKED`, so replicas
    /// claiming at the same moment never pick the same run.
    pub async fn claim_due(&self, limit: i64) -> Result<Vec<String>, DbError> {
        let now = now_ms();
        let lock = match self.db.dialect {
            Dialect::Postgres => " FOR UPDATE SKIP LOCKED",
            Dialect::Sqlite => "",
        };
        // RETURNING sees only new values, so whether the lease still had an owner
        // (a takeover, not a released run) travels as one extra millisecond on the
        // new expiry: the claim stays one atomic statement on both dialects.
        let until = now + self.lease_ms;
        let sql = format!(
            "UPDATE runs SET lease_owner = ?, lease_expires_at = ? + (CASE WHEN lease_owner IS NULL THEN 0 ELSE 1 END) WHERE run_id IN \
             (SELECT run_id FROM runs WHERE status = 'running' AND lease_expires_at < ? ORDER BY lease_expires_at LIMIT ?{lock}) \
             AND status = 'running' AND lease_expires_at < ? RETURNING run_id, lease_expires_at"
        );
        let rows = self
            .db
            .write_returning(&sql, &params![&self.owner, until, now, limit, now])
            .await?;
        let mut taken_over = 0;
        let mut ids = Vec::with_capacity(rows.len());
        for r in &rows {
            let expires: i64 = r.get("lease_expires_at")?;
            taken_over += u64::from(expires != until);
            ids.push(r.get("run_id")?);
        }
        if taken_over > 0 {
            crate::metrics::leases_taken_over(taken_over);
        }
        Ok(ids)
    }

    /// Runs not yet finished, across every replica (the `/metrics` gauge).
    pub async fn running_count(&self) -> Result<u64, DbError> {
        let rows = self
            .db
            .fetch_all(
                "SELECT COUNT(*) AS n FROM runs WHERE status = 'running'",
                &params![],
            )
            .await?;
        let n: i64 = match rows.first() {
            Some(r) => r.get("n")?,
            None => 0,
        };
        Ok(n.max(0) as u64)
    }

    /// Creates the run unless `(tenant, idempotency key)` exists; the unique
    /// constraint decides between concurrent requests, across processes too.
    pub async fn allocate(&self, new: &NewRun) -> Result<Allocation, DbError> {
        // A replay is answered from a read, without taking the write lock.
        if let Some(existing) = self
            .by_key(&new.spec.tenant_id, &new.idempotency_key)
            .await?
        {
            return Ok(Self::classify(existing, new));
        }
        self.create(new).await
    }

    /// [`SqlRunStore::allocate`] for a caller that has just found no run with the
    /// key: inserts without reading first (a concurrent insert still wins through
    /// the unique constraint and is returned as it is).
    pub async fn create(&self, new: &NewRun) -> Result<Allocation, DbError> {
        self.create_where(new, None).await
    }

    /// [`SqlRunStore::create`], inserting only where `resource` holds (see
    /// [`ResourceCondition`]), checked by the inserting statement itself: on
    /// PostgreSQL that spares a run the round trip of a check of its own. A key
    /// already used is found whether or not the resource still exists: a replay
    /// answers the run it names. [`Allocation::Absent`] when nothing was found or
    /// created because the resource does not exist.
    pub async fn create_where(
        &self,
        new: &NewRun,
        resource: Option<ResourceCondition>,
    ) -> Result<Allocation, DbError> {
        // `compact-requests` reads a stored '' as the run's id, so an empty
        // request id is none there, in the row and in every event about it.
        let without_id;
        let new =
            if self.rows >= RowFormat::CompactRequests && new.request_id.as_deref() == Some("") {
                without_id = NewRun {
                    request_id: None,
                    ..new.clone()
                };
                &without_id
            } else {
                new
            };
        let (request_hash, request_id) =
            row_format::stored_request(self.rows, self.events.resource_key, new);
        let now = now_ms();
        let (spec, catalog) = row_format::stored_spec(
            self.rows,
            &new.spec,
            &RunColumns {
                run_id: &new.spec.run_id,
                tenant_id: &new.spec.tenant_id,
                resource_id: &new.spec.resource_id,
                actor: &new.actor,
                request_id: new.request_id.as_deref(),
                goal: &new.spec.goal,
            },
        );
        // The run's number (`compact-history`): PostgreSQL's sequence, or on
        // SQLite, whose one writer holds the database for the transaction, the
        // next after the highest (read through `runs_by_no`, inside it).
        let numbered = self.rows >= RowFormat::CompactHistory;
        let number = match (numbered, self.db.dialect) {
            (false, _) => "NULL",
            (true, Dialect::Postgres) => "nextval('run_numbers')",
            (true, Dialect::Sqlite) => "?",
        };
        // `compact-timeline`: an empty history, to which each commit appends its
        // transitions.
        let timeline = self.rows >= RowFormat::CompactTimeline;
        let history = if timeline { "''" } else { "NULL" };
        let catalog_key = match catalog {
            Some(_) => row_format::CATALOG_KEY_SQL,
            None => "NULL",
        };
        let (source, condition) = match resource {
            // `INSERT … SELECT … WHERE`: SQLite needs the `WHERE` before an
            // `ON CONFLICT` anyway, to tell the two apart.
            Some(c) => (
                format!(
                    "SELECT ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'running', 'created', 0, ?, {catalog_key}, ?, ?, ?, ?, ?, {number}, {history} WHERE "
                ),
                c.0,
            ),
            None => (
                format!(
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'running', 'created', 0, ?, {catalog_key}, ?, ?, ?, ?, ?, {number}, {history})"
                ),
                "",
            ),
        };
        let mut insert = Statement::new(
            format!(
                "INSERT INTO runs (run_id, tenant_id, resource_id, actor, idempotency_key, request_hash, request_id, goal, planner_kind, model, status, state, step_count, spec, catalog_digest, bundle_digest, created_at, updated_at, lease_owner, lease_expires_at, run_no, history) \
             {source}{condition} ON CONFLICT (tenant_id, idempotency_key) DO NOTHING"
            ),
            params![
                &new.spec.run_id,
                &new.spec.tenant_id,
                &new.spec.resource_id,
                &new.actor,
                &new.idempotency_key,
                request_hash,
                request_id,
                &new.spec.goal,
                &new.planner_kind,
                &new.model,
                spec
            ],
        );
        if let Some(c) = &catalog {
            insert.params.extend(c.key_params());
        }
        insert.params.extend(params![
            &new.bundle_digest,
            now,
            now,
            &self.owner,
            now + self.lease_ms
        ]);
        // SQLite's number goes here, before the condition's parameters: the
        // transaction below reads it first.
        let number_at = insert.params.len();
        if resource.is_some() {
            insert
                .params
                .extend(params![&new.spec.tenant_id, &new.spec.resource_id]);
        }
        let who = audit::Who {
            tenant: &new.spec.tenant_id,
            resource_id: &new.spec.resource_id,
            actor: &new.actor,
            request_id: new.request_id.as_deref(),
        };
        let started = audit::Started {
            run_id: &new.spec.run_id,
            goal: &new.spec.goal,
            planner: &new.planner_kind,
        };
        // The row holds every field of the event's payload, as written here.
        let mut event = audit::started_event(&who, &self.events, &started);
        if self.rows >= RowFormat::CompactHistory {
            event = event.left_to_run();
        }
        if self.rows >= RowFormat::CompactTimeline {
            event = event.linked_by_sequence();
        }
        // The run and its `started` event commit together, or neither does.
        let (inserted, number) = match self.db.dialect {
            // One statement: the event is appended only if the row was inserted.
            Dialect::Postgres => {
                let mut parts = vec![(
                    "run".to_string(),
                    Statement::new(
                        format!("{} RETURNING run_id, run_no", insert.sql),
                        insert.params,
                    ),
                )];
                if let Some(c) = &catalog {
                    parts.push((
                        "catalog".to_string(),
                        Statement::new(catalog_sql(Dialect::Postgres), c.row_params()),
                    ));
                }
                parts.extend(audit::appended(&event, "EXISTS (SELECT 1 FROM run)"));
                let created = Statement::with(
                    parts,
                    Statement::new("SELECT run_id, run_no FROM run", Vec::new()),
                );
                let rows = self
                    .db
                    .write_returning(&created.sql, &created.params)
                    .await?;
                let number = match rows.first() {
                    Some(r) => r.get::<Option<i64>>("run_no")?,
                    None => None,
                };
                (rows.len(), number)
            }
            Dialect::Sqlite => {
                let mut tx = self.db.begin_lazy_write().await?;
                let mut number = None;
                if numbered {
                    let next = tx
                        .fetch_optional(
                            "SELECT COALESCE(MAX(run_no), 0) + 1 AS next FROM runs",
                            &[],
                        )
                        .await?
                        .map(|r| r.get::<i64>("next"))
                        .transpose()?
                        .unwrap_or(1);
                    insert.params.insert(number_at, next.into());
                    number = Some(next);
                }
                let inserted = tx.execute(&insert.sql, &insert.params).await? as usize;
                if let (1, Some(c)) = (inserted, &catalog) {
                    tx.execute(&catalog_sql(Dialect::Sqlite), &c.row_params())
                        .await?;
                }
                if inserted == 1 {
                    let mut head = audit::ChainHead::default();
                    let events = audit::chain_events(&self.db, &mut tx, &mut head, &event).await?;
                    for e in &events {
                        tx.execute(&e.sql, &e.params).await?;
                    }
                }
                tx.commit().await?;
                (inserted, number)
            }
        };
        if inserted == 1 {
            let place = Place {
                number,
                timeline: timeline.then_some(now),
            };
            self.facts.remember(&new.spec.run_id, &who, place);
            // This request created it: the record is what was just written.
            return Ok(Allocation::New(RunRecord {
                run_id: new.spec.run_id.clone(),
                tenant_id: new.spec.tenant_id.clone(),
                resource_id: new.spec.resource_id.clone(),
                actor: new.actor.clone(),
                idempotency_key: new.idempotency_key.clone(),
                request_hash: new.request_hash.clone(),
                goal: new.spec.goal.clone(),
                planner_kind: new.planner_kind.clone(),
                model: new.model.clone(),
                status: "running".into(),
                state: "created".into(),
                step_count: 0,
                final_result: None,
                provenance: None,
                stop_reason: None,
                bundle_digest: new.bundle_digest.clone(),
                created_at: now,
                updated_at: now,
                spec: Some(new.spec.clone()),
            }));
        }
        match self
            .by_key(&new.spec.tenant_id, &new.idempotency_key)
            .await?
        {
            Some(existing) => Ok(Self::classify(existing, new)),
            None if resource.is_some() => Ok(Allocation::Absent),
            None => Err(DbError::Corrupt {
                table: "runs",
                message: "allocated run vanished".into(),
            }),
        }
    }

    fn classify(existing: RunRecord, new: &NewRun) -> Allocation {
        if existing.run_id == new.spec.run_id {
            Allocation::New(existing)
        } else if existing.request_hash == new.request_hash {
            Allocation::Existing(existing)
        } else {
            Allocation::Conflict(existing)
        }
    }

    pub async fn by_key(&self, tenant: &str, key: &str) -> Result<Option<RunRecord>, DbError> {
        let sql = select_runs!("WHERE tenant_id = ? AND idempotency_key = ?");
        let row = self.db.fetch_optional(sql, &params![tenant, key]).await?;
        row.as_ref()
            .map(|r| record(r, self.events.resource_key))
            .transpose()
    }

    /// A run of `tenant` (another tenant's run is as absent as a missing one).
    pub async fn get(&self, tenant: &str, run_id: &str) -> Result<Option<RunRecord>, DbError> {
        let row = self
            .db
            .fetch_optional(
                select_runs!("WHERE tenant_id = ? AND run_id = ?"),
                &params![tenant, run_id],
            )
            .await?;
        row.as_ref()
            .map(|r| record(r, self.events.resource_key))
            .transpose()
    }

    /// The ledger of a run of `tenant` (another tenant's run has none).
    pub async fn ledger(&self, tenant: &str, run_id: &str) -> Result<Vec<LedgerRow>, DbError> {
        self.ledger_rows(
            "r.tenant_id = ? AND r.run_id = ?",
            &params![tenant, run_id, tenant, run_id],
        )
        .await
    }

    /// The ledger of a run of any tenant, for the process that drove it.
    pub async fn ledger_of(&self, run_id: &str) -> Result<Vec<LedgerRow>, DbError> {
        self.ledger_rows("r.run_id = ?", &params![run_id, run_id])
            .await
    }

    async fn ledger_rows(
        &self,
        filter: &str,
        params: &[super::sql::Param],
    ) -> Result<Vec<LedgerRow>, DbError> {
        // From whichever table holds the run's calls: by run id
        // (`tool_executions`), or by run number (`run_calls`, see `stored_call`).
        // A compact row's '' bundle digest is its run's (see `RowFormat`).
        let columns = "c.tool_name, c.tool_version, c.arguments, c.arguments_hash, c.fingerprint, c.idempotency_key, c.status, c.attempt_count, c.result, c.error_class, c.error_code, \
             CASE WHEN c.bundle_digest = '' THEN r.bundle_digest ELSE c.bundle_digest END AS bundle_digest, c.started_at, c.finished_at";
        let rows = self.db.fetch_all(&format!("SELECT r.run_id, c.tool_call_id, {columns} \
             FROM tool_executions c JOIN runs r ON r.run_id = c.run_id WHERE {filter} \
             UNION ALL SELECT r.run_id, CASE substr(c.call, 1, 1) WHEN ':' THEN r.run_id || c.call ELSE substr(c.call, 2) END, {columns} \
             FROM run_calls c JOIN runs r ON r.run_no = c.run_no WHERE {filter} ORDER BY 15, 2"), params)
        .await?;
        let mut out: Vec<LedgerRow> = rows
            .iter()
            .map(|r| -> Result<LedgerRow, DbError> {
                let arguments: String = r.get("arguments")?;
                let arguments: Value =
                    serde_json::from_str(&arguments).map_err(|e| DbError::Corrupt {
                        table: "tool_executions",
                        message: e.to_string(),
                    })?;
                let tool_name: String = r.get("tool_name")?;
                let (mut arguments_hash, mut fingerprint): (String, String) =
                    (r.get("arguments_hash")?, r.get("fingerprint")?);
                if arguments_hash.is_empty() || fingerprint.is_empty() {
                    let derived = row_format::derived_hashes(&tool_name, &arguments);
                    if arguments_hash.is_empty() {
                        arguments_hash = derived.0;
                    }
                    if fingerprint.is_empty() {
                        fingerprint = derived.1;
                    }
                }
                Ok(LedgerRow {
                    run_id: r.get("run_id")?,
                    tool_call_id: r.get("tool_call_id")?,
                    tool_name,
                    tool_version: r.get("tool_version")?,
                    arguments,
                    arguments_hash,
                    fingerprint,
                    idempotency_key: r.get("idempotency_key")?,
                    status: status_of(&r.get::<String>("status")?)?,
                    attempt_count: r.get::<i64>("attempt_count")? as u32,
                    result: parse_json(r.get("result")?, "tool_executions")?,
                    error_class: r.get("error_class")?,
                    error_code: r.get("error_code")?,
                    bundle_digest: r.get("bundle_digest")?,
                    started_at_ms: r.get::<i64>("started_at")? as u64,
                    finished_at_ms: r.get::<Option<i64>>("finished_at")?.map(|v| v as u64),
                })
            })
            .collect::<Result<_, _>>()?;
        // Tool call ids end in the sequence number they were proposed at.
        out.sort_by_key(|r| {
            r.tool_call_id
                .rsplit(':')
                .next()
                .and_then(|n| n.parse::<u64>().ok())
                .unwrap_or(0)
        });
        Ok(out)
    }

    /// Checkpoints of a run of `tenant`, in sequence order.
    pub async fn checkpoints(
        &self,
        tenant: &str,
        run_id: &str,
    ) -> Result<Vec<Checkpoint>, DbError> {
        let rows = self
            .db
            .fetch_all(
                select_checkpoints!("c.snapshot", ""),
                &params![tenant, run_id, tenant, run_id, tenant, run_id],
            )
            .await?;
        checkpoints_of(&rows, 0)
    }

    /// The transitions of a run of `tenant` after sequence `after`, without their
    /// snapshots (what readers show; a snapshot is for recovery and weighs
    /// kilobytes).
    pub async fn transitions(
        &self,
        tenant: &str,
        run_id: &str,
        after: u64,
    ) -> Result<Vec<Checkpoint>, DbError> {
        let rows = self
            .db
            .fetch_all(
                select_checkpoints!("CAST(NULL AS TEXT) AS snapshot", "AND c.sequence > ? "),
                &params![
                    tenant,
                    run_id,
                    after as i64,
                    tenant,
                    run_id,
                    after as i64,
                    tenant,
                    run_id
                ],
            )
            .await?;
        checkpoints_of(&rows, after)
    }

    /// The run record's update, fenced by the lease: it changes the row only
    /// while this process holds the run, so a driver that lost its lease (taken
    /// over after it stalled) cannot write beside the new holder.
    fn fence(&self, batch: &Batch, place: Place) -> Result<(Statement, Settled), DbError> {
        let status = match (&batch.outcome, &batch.approval) {
            (Some(o), _) => o.status.clone(),
            (None, Some(_)) => "waiting_approval".to_string(),
            (None, None) => "running".to_string(),
        };
        // The terminal commit releases the lease, and so does parking the run for
        // an approval (nobody drives it until decided). Any other commit leaves the
        // lease as it is: the driver's heartbeat renews it (`while_leased`), and a
        // commit that changes no indexed column lets PostgreSQL update the row in
        // place (a HOT update) instead of adding an entry to each of its indexes.
        let now = now_ms();
        let holds = batch.outcome.is_none() && batch.approval.is_none();
        let lease_set = if holds {
            ""
        } else {
            "lease_owner = NULL, lease_expires_at = NULL, "
        };
        // A commit that keeps the run running leaves `status` out of its SET list
        // (the WHERE clause already requires it): SQLite rewrites the entry of every
        // index whose column is assigned, changed or not, so naming it cost a page of
        // `runs_by_lease` per commit.
        let status_set = if holds { "" } else { "status = ?, " };
        // Recovery reads only the newest snapshot, so one lives on the run's row:
        // the batch's (kept when it brought none), and none once the run has ended.
        let snapshot = batch
            .checkpoints
            .last()
            .and_then(|cp| cp.snapshot.as_ref())
            .map(|s| s.as_str().to_string());
        let snapshot_set = match batch.outcome {
            Some(_) => "NULL",
            None => "COALESCE(?, snapshot)",
        };
        let provenance = batch.outcome.as_ref().and_then(|o| o.provenance.as_ref());
        // Compact provenance leaves out the digest its entries share: stored only
        // where the row's own digest is that one (see `provenance_sql`).
        let compact = provenance
            .filter(|_| self.rows >= RowFormat::CompactRuns)
            .and_then(|p| row_format::compact_provenance(p, &batch.run_id));
        let provenance_sql = match compact {
            Some(_) => row_format::provenance_sql(self.rows),
            None => "?",
        };
        // `compact-timeline`: the transitions are appended to the row, and only
        // to a row that holds exactly those before them.
        let append = match place.timeline {
            Some(created_at) if !batch.checkpoints.is_empty() => Some(
                timeline::append(&batch.checkpoints, created_at).ok_or_else(|| DbError::Gap {
                    run_id: batch.run_id.clone(),
                })?,
            ),
            _ => None,
        };
        let (history_set, history_guard) = match &append {
            Some(a) => (
                match a.endings() {
                    Some(_) => format!(
                        "history = history || {}, ",
                        timeline::Append::choice_sql(self.db.dialect)
                    ),
                    None => "history = history || ?, ".to_string(),
                },
                format!(" AND {}", timeline::Append::guard_sql(self.db.dialect)),
            ),
            None => (String::new(), String::new()),
        };
        let sql = format!(
            "UPDATE runs SET state = ?, {status_set}step_count = ?, final_result = ?, provenance = {provenance_sql}, stop_reason = ?, updated_at = ?, {lease_set}{history_set}snapshot = {snapshot_set} \
             WHERE run_id = ? AND lease_owner = ? AND status = 'running'{history_guard}"
        );
        let written = Settled {
            state: batch.state.clone(),
            status,
            step_count: i64::from(batch.step_count),
            final_result: batch
                .outcome
                .as_ref()
                .and_then(|o| o.final_answer.as_ref())
                .map(super::json_text),
            provenance: provenance.map(super::json_text),
            stop_reason: batch.outcome.as_ref().and_then(|o| o.stop_reason.clone()),
            updated_at: now,
        };
        let mut values = Vec::from(params![&written.state]);
        if !holds {
            values.extend(params![&written.status]);
        }
        values.extend(params![written.step_count, written.final_result.clone()]);
        if let Some((digest, text)) = compact {
            values.extend(params![digest, text]);
        }
        values.extend(params![
            written.provenance.clone(),
            written.stop_reason.clone(),
            now
        ]);
        if let Some(a) = &append {
            match a.endings() {
                Some((n, space, newline)) => values.extend(params![
                    n,
                    space,
                    newline,
                    a.short.as_str(),
                    a.long.as_str()
                ]),
                None => values.extend(params![a.long.as_str()]),
            }
        }
        if batch.outcome.is_none() {
            values.extend(params![snapshot]);
        }
        values.extend(params![&batch.run_id, &self.owner]);
        if let Some(a) = &append {
            values.extend(params![a.before]);
        }
        Ok((Statement::new(sql, values), written))
    }

    /// What a batch writes after its fence: checkpoints and ledger rows. `gate` is
    /// the condition under which they are written (PostgreSQL: that the fence
    /// matched, in the same statement; SQLite checks the fence's row count first).
    fn batch_statements(&self, batch: &Batch, gate: &str, place: Place) -> Vec<Statement> {
        let number = place.number;
        let mut parts = Vec::with_capacity(batch.ledger.len() + 1);
        // A timeline's transitions went into the row with the fence.
        if !batch.checkpoints.is_empty() && place.timeline.is_none() {
            // One statement for the batch's checkpoints; the primary key
            // (run_id, sequence) still refuses a duplicated sequence.
            // Their snapshot goes to the run's row (see `fence`).
            let tuples = vec!["(?, ?, ?, ?, ?, ?)"; batch.checkpoints.len()].join(", ");
            let mut values = Vec::with_capacity(batch.checkpoints.len() * 6);
            let mut before = None;
            for cp in &batch.checkpoints {
                let from = row_format::stored_from(self.rows, before, cp);
                before = Some(cp);
                match number {
                    Some(n) => values.extend(params![n]),
                    None => values.extend(params![&cp.run_id]),
                }
                values.extend(params![
                    cp.sequence as i64,
                    from,
                    &cp.to,
                    cp.at_ms as i64,
                    cp.reason.clone()
                ]);
            }
            parts.push(Statement::new(
                match number {
                    Some(_) => format!("INSERT INTO run_transitions (run_no, sequence, from_state, to_state, at_ms, reason) \
                         SELECT * FROM (VALUES {tuples}) AS v WHERE {gate}"),
                    None => format!("INSERT INTO checkpoints (run_id, sequence, from_state, to_state, at_ms, reason) \
                         SELECT * FROM (VALUES {tuples}) AS v WHERE {gate}"),
                },
                values,
            ));
        }
        let digest_sql = row_format::bundle_digest_sql(self.rows);
        for row in &batch.ledger {
            let arguments = super::json_text(&row.arguments);
            let (arguments_hash, fingerprint) = self.hashes.stored(
                self.rows,
                &row.tool_call_id,
                row.finished_at_ms.is_some(),
                &row.tool_name,
                &arguments,
                &row.arguments_hash,
                &row.fingerprint,
            );
            let mut values = match number {
                Some(n) => Vec::from(params![n, stored_call(&row.run_id, &row.tool_call_id)]),
                None => Vec::from(params![&row.run_id, &row.tool_call_id, &row.run_id]),
            };
            values.extend(params![
                &row.tool_name,
                &row.tool_version,
                arguments.as_str(),
                arguments_hash,
                fingerprint,
                row.idempotency_key.clone(),
                row.status.as_str(),
                i64::from(row.attempt_count),
                row.result.as_ref().map(super::json_text),
                row.error_class.clone(),
                row.error_code.clone(),
                &row.bundle_digest
            ]);
            if self.rows >= RowFormat::Compact {
                values.extend(params![&row.run_id, &row.bundle_digest]);
            }
            values.extend(params![
                row.started_at_ms as i64,
                row.finished_at_ms.map(|v| v as i64)
            ]);
            // (the table and its key columns, their values, the key)
            let (into, key_values, key) = match number {
                Some(_) => ("run_calls (run_no, call", "?, ?", "run_no, call"),
                None => (
                    "tool_executions (run_id, tool_call_id, tenant_id",
                    "?, ?, (SELECT tenant_id FROM runs WHERE run_id = ?)",
                    "run_id, tool_call_id",
                ),
            };
            parts.push(Statement::new(
                format!("INSERT INTO {into}, tool_name, tool_version, arguments, arguments_hash, fingerprint, idempotency_key, status, attempt_count, result, error_class, error_code, bundle_digest, started_at, finished_at) \
                 SELECT {key_values}, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, {digest_sql}, ?, ? WHERE {gate} \
                 ON CONFLICT ({key}) DO UPDATE SET status = excluded.status, attempt_count = excluded.attempt_count, result = excluded.result, \
                 error_class = excluded.error_class, error_code = excluded.error_code, finished_at = excluded.finished_at"),
                values,
            ));
        }
        parts
    }

    /// Where the run's history goes (see [`Place`]).
    async fn place_of(&self, run_id: &str) -> Result<Place, DbError> {
        if let Some(place) = self.facts.place(run_id) {
            return Ok(place);
        }
        // Forgotten (or driven without a load here): one read.
        let row = self.db.fetch_optional(PLACE_SQL, &params![run_id]).await?;
        row.map(|r| place(&r))
            .transpose()
            .map(Option::unwrap_or_default)
    }

    /// A run's `agent.run` event, left to its row (`compact-history`) when the
    /// row this batch writes holds exactly what the payload is built from: the
    /// fence writes the outcome's status, stop reason, result and provenance, and
    /// `who` was read from the row. A value whose text would not parse back to
    /// itself (a float the text rounds) keeps the payload written out; the text is
    /// the fence's (`written`), the one the row gets.
    fn terminal_event<'a>(
        &self,
        who: &audit::Who<'a>,
        batch: &Batch,
        outcome: &'a Outcome,
        written: &Settled,
    ) -> audit::Event<'a> {
        let event = audit::terminal_event(who, &self.events, outcome);
        let round_trips = |v: Option<&Value>, text: Option<&str>| match (v, text) {
            (None, _) => true,
            (Some(v), Some(text)) => serde_json::from_str::<Value>(text).ok().as_ref() == Some(v),
            (Some(_), None) => false,
        };
        if self.rows >= RowFormat::CompactHistory
            && outcome.run_id == batch.run_id
            && outcome.step_count == batch.step_count
            && round_trips(
                outcome.final_answer.as_ref(),
                written.final_result.as_deref(),
            )
            && round_trips(outcome.provenance.as_ref(), written.provenance.as_deref())
        {
            let event = event.left_to_run();
            if self.rows >= RowFormat::CompactTimeline {
                event.linked_by_sequence()
            } else {
                event
            }
        } else {
            event
        }
    }

    async fn write(&self, batch: &Batch) -> Result<(), DbError> {
        let db = &self.db;
        let place = self.place_of(&batch.run_id).await?;
        let (fence, written) = self.fence(batch, place)?;
        let flush = batch.point.must_flush();
        let effects: Vec<&LedgerRow> = batch
            .ledger
            .iter()
            .filter(|r| {
                r.status == CallStatus::Succeeded
                    && self.events.write_tools.contains(&r.tool_name.as_str())
            })
            .collect();
        // A run that ends or parks here is forgotten either way.
        let facts = (batch.outcome.is_some() || batch.approval.is_some())
            .then(|| self.facts.take(&batch.run_id))
            .flatten();
        let held = if db.dialect == Dialect::Postgres
            && batch.approval.is_none()
            && effects.is_empty()
            && (batch.outcome.is_none() || facts.is_some())
        {
            // One statement, atomic on its own: one round trip.
            let mut parts = Statement::numbered(self.batch_statements(batch, PG_GATE, place));
            if let (Some(outcome), Some(facts)) = (&batch.outcome, &facts) {
                let who = audit::Who {
                    tenant: &facts.tenant,
                    resource_id: &facts.resource_id,
                    actor: &facts.actor,
                    request_id: facts.request_id.as_deref(),
                };
                let event = self.terminal_event(&who, batch, outcome, &written);
                parts.extend(audit::appended(&event, PG_GATE));
            }
            // Lazy by the connection's default, unless this commit must be flushed.
            let gated = Statement::gated_named(fence, parts, flush);
            db.write_returning(&gated.sql, &gated.params).await?.len()
        } else {
            // SQLite's one writer is held from here to the commit, and at c=8 it is
            // what runs wait for: what needs nothing from the transaction (the
            // batch's rows, serialized) is built before it begins.
            let sqlite_parts = (db.dialect == Dialect::Sqlite)
                .then(|| self.batch_statements(batch, "true", place));
            let mut tx = if flush {
                db.begin_write().await?
            } else {
                db.begin_lazy_write().await?
            };
            let mut events = Vec::new();
            let mut head = audit::ChainHead::default();
            if let Some(asked) = &batch.approval {
                let run =
                    run_facts(db, &mut tx, &mut head, &batch.run_id, "tenant_id, actor").await?;
                let (tenant, actor): (String, String) = (run.get("tenant_id")?, run.get("actor")?);
                events.push(super::approvals::insert(
                    asked,
                    &tenant,
                    &batch.run_id,
                    &actor,
                ));
                let payload = serde_json::json!({
                    "approval_id": asked.approval_id,
                    "run_id": batch.run_id,
                    "tool": asked.tool_name,
                    "arguments": asked.arguments,
                    "action_fingerprint": asked.fingerprint,
                    "approver_role": asked.approver_role,
                    "requested_by": actor,
                    "expires_at_ms": asked.expires_at_ms,
                });
                events.extend(
                    super::audit::fact_events(
                        db,
                        &mut tx,
                        &mut head,
                        &tenant,
                        &batch.run_id,
                        "approval.requested",
                        super::approvals::REQUESTED_TOPIC,
                        format!("approvals/{}", asked.approval_id),
                        &payload,
                    )
                    .await?,
                );
            }
            if !effects.is_empty() {
                let tenant: String = run_facts(db, &mut tx, &mut head, &batch.run_id, "tenant_id")
                    .await?
                    .get("tenant_id")?;
                for row in &effects {
                    let data = serde_json::json!({
                        "run_id": row.run_id,
                        "tool_call_id": row.tool_call_id,
                        "tool": row.tool_name,
                        "idempotency_key": row.idempotency_key,
                        "result": row.result,
                    });
                    events.extend(
                        super::audit::fact_events(
                            db,
                            &mut tx,
                            &mut head,
                            &tenant,
                            &batch.run_id,
                            "effect.confirmed",
                            crate::event_types::EFFECT_CONFIRMED,
                            format!(
                                "agent-runs/{}/tool-executions/{}",
                                row.run_id, row.tool_call_id
                            ),
                            &data,
                        )
                        .await?,
                    );
                }
            }
            if let Some(outcome) = &batch.outcome {
                let run = run_facts(
                    db,
                    &mut tx,
                    &mut head,
                    &batch.run_id,
                    "tenant_id, resource_id, actor, request_id",
                )
                .await?;
                let (tenant, resource, actor): (String, String, String) = (
                    run.get("tenant_id")?,
                    run.get("resource_id")?,
                    run.get("actor")?,
                );
                let request_id = row_format::read_request_id(run.get("request_id")?, &batch.run_id);
                let who = audit::Who {
                    tenant: &tenant,
                    resource_id: &resource,
                    actor: &actor,
                    request_id: request_id.as_deref(),
                };
                let event = self.terminal_event(&who, batch, outcome, &written);
                events.extend(audit::chain_events(db, &mut tx, &mut head, &event).await?);
            }
            let held = match db.dialect {
                Dialect::Postgres => {
                    let mut parts = self.batch_statements(batch, PG_GATE, place);
                    parts.extend(events);
                    let gated = Statement::gated(fence, parts);
                    tx.fetch_all(&gated.sql, &gated.params).await?.len()
                }
                Dialect::Sqlite => {
                    let held = tx.execute(&fence.sql, &fence.params).await? as usize;
                    if held == 1 {
                        let mut parts = sqlite_parts.unwrap_or_default();
                        parts.extend(events);
                        for part in &parts {
                            tx.execute(&part.sql, &part.params).await?;
                        }
                    }
                    held
                }
            };
            // Not held: the transaction is dropped, which rolls it back.
            if held == 1 {
                tx.commit().await?;
            }
            held
        };
        if held != 1 {
            return Err(DbError::LeaseLost {
                run_id: batch.run_id.clone(),
            });
        }
        db.count_commit();
        crate::fault::after_commit(db.commits());
        if let Some(signals) = &self.signals {
            // A parked run settles its waiters too: they answer with its state.
            let settled = batch.outcome.is_some() || batch.approval.is_some();
            signals.committed(&batch.run_id, settled.then_some(written));
        }
        Ok(())
    }

    /// The outcome of a finished run, if it finished.
    pub fn outcome_of(record: &RunRecord) -> Option<Outcome> {
        matches!(
            record.status.as_str(),
            "completed" | "needs_human" | "stopped" | "failed"
        )
        .then(|| Outcome {
            run_id: record.run_id.clone(),
            status: record.status.clone(),
            stop_reason: record.stop_reason.clone(),
            final_answer: record.final_result.clone(),
            provenance: record.provenance.clone(),
            step_count: record.step_count as u32,
            recovery_count: 0,
        })
    }
}

/// What a commit made durable, for the log: each state change at debug, each
/// denied or failed call and the run's end with their reason codes.
fn log_committed(batch: &Batch) {
    for c in &batch.checkpoints {
        tracing::debug!(
            run_id = %c.run_id,
            sequence = c.sequence,
            from = %c.from,
            to = %c.to,
            reason = c.reason.as_deref(),
            "run state changed"
        );
    }
    for row in &batch.ledger {
        let (class, code) = (row.error_class.as_deref(), row.error_code.as_deref());
        match row.status {
            CallStatus::Denied => tracing::info!(
                run_id = %row.run_id,
                tool_call_id = %row.tool_call_id,
                tool = %row.tool_name,
                class,
                reason = code,
                "tool call denied"
            ),
            CallStatus::Failed => tracing::warn!(
                run_id = %row.run_id,
                tool_call_id = %row.tool_call_id,
                tool = %row.tool_name,
                attempts = row.attempt_count,
                class,
                code,
                "tool call failed"
            ),
            _ => {}
        }
    }
    if let Some(o) = &batch.outcome {
        let reason = o.stop_reason.as_deref();
        match o.status.as_str() {
            "completed" => {
                tracing::info!(run_id = %o.run_id, status = %o.status, steps = o.step_count, "run finished")
            }
            "failed" => {
                tracing::warn!(run_id = %o.run_id, status = %o.status, reason, steps = o.step_count, "run finished")
            }
            _ => {
                tracing::info!(run_id = %o.run_id, status = %o.status, reason, steps = o.step_count, "run finished")
            }
        }
    }
}

impl RunStore for SqlRunStore {
    async fn commit(&self, batch: Batch) -> Result<(), StoreError> {
        // A busy audit chain (two terminal runs of one tenant) is retried a few times.
        let mut last = None;
        for _ in 0..5 {
            let started = std::time::Instant::now();
            let span = tracing::info_span!(
                "commit",
                db.system.name = self.db.dialect.name(),
                caseops.commit.point = ?batch.point,
                caseops.run.id = %batch.run_id,
            );
            match self.write(&batch).instrument(span).await {
                Ok(()) => {
                    crate::metrics::committed(self.db.dialect.name(), started.elapsed());
                    log_committed(&batch);
                    return Ok(());
                }
                Err(DbError::LeaseLost { run_id }) => return Err(StoreError::LeaseLost { run_id }),
                Err(e) if is_conflict(&e) && batch.outcome.is_some() => last = Some(e.to_string()),
                Err(e) => return Err(StoreError::Unavailable(e.to_string())),
            }
        }
        Err(StoreError::Unavailable(last.unwrap_or_default()))
    }

    fn commits_remotely(&self) -> bool {
        self.db.dialect == Dialect::Postgres
    }

    async fn load(&self, run_id: &str) -> Result<Option<StoredRun>, StoreError> {
        let err = |e: DbError| StoreError::Unavailable(e.to_string());
        let row = self
            .db
            .fetch_optional(
                "SELECT tenant_id, resource_id, actor, request_id, run_no, CASE WHEN history IS NULL THEN NULL ELSE created_at END AS timeline FROM runs WHERE run_id = ?",
                &params![run_id],
            )
            .await
            .map_err(err)?;
        let Some(row) = row else {
            return Ok(None);
        };
        let tenant: String = row.get("tenant_id").map_err(err)?;
        let place = place(&row).map_err(err)?;
        // A loaded run is about to be driven here: its commits need its place,
        // and its end who it is about.
        let (resource, actor): (String, String) = (
            row.get("resource_id").map_err(err)?,
            row.get("actor").map_err(err)?,
        );
        let request_id = row_format::read_request_id(row.get("request_id").map_err(err)?, run_id);
        let who = audit::Who {
            tenant: &tenant,
            resource_id: &resource,
            actor: &actor,
            request_id: request_id.as_deref(),
        };
        self.facts.remember(run_id, &who, place);
        let record = self.get(&tenant, run_id).await.map_err(err)?;
        let mut checkpoints = self.checkpoints(&tenant, run_id).await.map_err(err)?;
        // The newest snapshot is the run's; a run written before it moved there
        // has it in its last checkpoint instead.
        let snapshot = self
            .db
            .fetch_optional(
                "SELECT snapshot FROM runs WHERE run_id = ?",
                &params![run_id],
            )
            .await
            .map_err(err)?
            .map(|r| parse_snapshot(r.get("snapshot")?, "runs"))
            .transpose()
            .map_err(err)?
            .flatten();
        if let (Some(snapshot), Some(last)) = (snapshot, checkpoints.last_mut()) {
            last.snapshot = Some(snapshot);
        }
        let ledger = self.ledger(&tenant, run_id).await.map_err(err)?;
        let approval = super::approvals::latest_of_run(&self.db, run_id)
            .await
            .map_err(err)?
            .map(|a| caseops_runtime::store::ApprovalRecord {
                status: caseops_runtime::store::ApprovalStatus::parse(&a.status)
                    .unwrap_or(caseops_runtime::store::ApprovalStatus::Pending),
                approval_id: a.approval_id,
                tool_call_id: a.tool_call_id,
                fingerprint: a.fingerprint,
            });
        Ok(Some(StoredRun {
            spec: record.as_ref().and_then(|r| r.spec.clone()),
            checkpoints,
            ledger,
            outcome: record.as_ref().and_then(Self::outcome_of),
            approval,
        }))
    }
}

/// The run's `columns` (`tenant_id` among them), read inside a commit's
/// transaction before it appends to the tenant's audit chain: on PostgreSQL the
/// same statement takes the chain's lock ([`audit::LOCK`]). No row: the run is
/// not this driver's any more.
async fn run_facts(
    db: &Db,
    tx: &mut Tx,
    head: &mut audit::ChainHead,
    run_id: &str,
    columns: &str,
) -> Result<Row, DbError> {
    let sql = format!(
        "SELECT {columns}{} FROM runs WHERE run_id = ?",
        audit::lock_column(db.dialect)
    );
    let row = tx
        .fetch_optional(&sql, &params![run_id])
        .await?
        .ok_or_else(|| DbError::LeaseLost {
            run_id: run_id.to_string(),
        })?;
    head.hold(&row.get::<String>("tenant_id")?);
    Ok(row)
}

fn is_conflict(e: &DbError) -> bool {
    match e {
        DbError::Query(sqlx::Error::Database(d)) => {
            d.is_unique_violation()
                || d.message().contains("locked")
                || d.message().contains("busy")
        }
        DbError::Sqlite(rusqlite::Error::SqliteFailure(f, _)) => matches!(
            f.code,
            rusqlite::ErrorCode::ConstraintViolation
                | rusqlite::ErrorCode::DatabaseBusy
                | rusqlite::ErrorCode::DatabaseLocked
        ),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn word(status: &str) -> Settled {
        Settled {
            state: "done".into(),
            status: status.into(),
            step_count: 4,
            final_result: None,
            provenance: None,
            stop_reason: None,
            updated_at: 7,
        }
    }

    #[tokio::test]
    async fn a_waiter_keeps_the_settling_commits_word_when_the_driver_stops_after_it() {
        let signals = RunSignals::default();
        let settlement = signals.watch("r1");
        signals.committed("r1", None);
        signals.committed("r1", Some(word("completed")));
        // The driver's end comes before the waiter polls, as it mostly does.
        signals.settled("r1");
        let got = settlement
            .settled()
            .await
            .expect("the commit's word, not a read");
        assert_eq!(*got, word("completed"));
    }

    #[tokio::test]
    async fn a_commit_after_a_parking_makes_the_waiter_read() {
        let signals = RunSignals::default();
        let settlement = signals.watch("r1");
        signals.committed("r1", Some(word("waiting_approval")));
        // Approved and resumed here; its driver stopped before the run ended.
        signals.committed("r1", None);
        signals.settled("r1");
        assert_eq!(settlement.settled().await, None);
    }

    #[test]
    fn a_stored_snapshot_is_kept_as_its_text_and_one_that_is_not_json_is_named_corrupt() {
        let text = r#"{"state":"tool_running","sequence":4}"#;
        let kept = parse_snapshot(Some(text.into()), "runs").unwrap().unwrap();
        assert_eq!(kept.as_str(), text);
        assert_eq!(parse_snapshot(None, "runs").unwrap(), None);
        assert_eq!(parse_snapshot(Some("null".into()), "runs").unwrap(), None);
        match parse_snapshot(Some(r#"{"state":"#.into()), "checkpoints") {
            Err(DbError::Corrupt { table, .. }) => assert_eq!(table, "checkpoints"),
            other => panic!("expected a corrupt row, got {other:?}"),
        }
    }

    #[test]
    fn a_call_id_is_keyed_by_its_own_part_only_when_it_starts_with_its_runs_id() {
        assert_eq!(stored_call("run-1", "run-1:2"), ":2");
        assert_eq!(stored_call("run-1", "run-1:"), ":");
        // A longer run id that merely starts the same, and ids of other shapes,
        // are kept whole behind the other marker.
        assert_eq!(stored_call("run-1", "run-12:3"), "=run-12:3");
        assert_eq!(stored_call("run-1", ":2"), "=:2");
        assert_eq!(stored_call("run-1", "=x"), "==x");
    }

    #[tokio::test]
    async fn a_plain_commit_does_not_wake_a_waiter() {
        let signals = RunSignals::default();
        let settlement = signals.watch("r1");
        signals.committed("r1", None);
        let woke =
            tokio::time::timeout(std::time::Duration::from_millis(20), settlement.settled()).await;
        assert!(woke.is_err(), "woken by a commit that settled nothing");
        // Another run's word is not this waiter's.
        signals.committed("r2", Some(word("completed")));
        signals.settled("r2");
        let woke =
            tokio::time::timeout(std::time::Duration::from_millis(20), settlement.settled()).await;
        assert!(woke.is_err(), "woken by another run");
    }

    #[test]
    fn remembered_runs_stay_bounded_and_each_is_taken_once() {
        let facts = RunFacts::default();
        let who = audit::Who {
            tenant: "t",
            resource_id: "r",
            actor: "a",
            request_id: Some("q"),
        };
        for i in 0..=REMEMBERED_RUNS {
            facts.remember(&format!("run-{i}"), &who, Place::default());
        }
        // At the bound the older runs were forgotten, not the newest.
        assert_eq!(facts.0.lock().unwrap().len(), 1);
        assert!(facts.take("run-0").is_none());
        let newest = facts.take(&format!("run-{REMEMBERED_RUNS}")).unwrap();
        assert_eq!(
            (newest.tenant.as_str(), newest.request_id.as_deref()),
            ("t", Some("q"))
        );
        assert!(facts.take(&format!("run-{REMEMBERED_RUNS}")).is_none());
    }
}
