//! The run store: idempotent run allocation and the runtime's `RunStore`, one
//! transaction per commit point (checkpoints, ledger rows, run record, and at the
//! terminal state the audit and outbox events too).

use caseops_runtime::store::{Batch, StoreError, StoredRun};
use caseops_runtime::{CallStatus, Checkpoint, LedgerRow, Outcome, RunSpec, RunStore};
use serde_json::Value;
use sqlx::Row;

use super::{Db, DbError, audit, now_ms};

/// A run as the API shows it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct RunRecord {
    pub run_id: String,
    pub tenant_id: String,
    pub case_id: String,
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
    pub stop_reason: Option<String>,
    pub bundle_digest: String,
    pub created_at: i64,
    pub updated_at: i64,
    #[serde(skip)]
    pub spec: Option<RunSpec>,
}

/// What a POST asks for, before a run exists.
#[derive(Debug, Clone)]
pub struct NewRun {
    pub spec: RunSpec,
    pub actor: String,
    pub idempotency_key: String,
    pub request_hash: String,
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
}

/// `RunStore` over a database.
#[derive(Debug, Clone)]
pub struct SqlRunStore {
    pub db: Db,
    /// This process's identity for run leases.
    pub owner: String,
    /// How long a lease lasts without a commit renewing it.
    pub lease_ms: i64,
}

/// Default lease: a run whose process has not committed for this long is taken over.
pub const DEFAULT_LEASE_MS: i64 = 30_000;

fn parse_json(text: Option<String>, table: &'static str) -> Result<Option<Value>, DbError> {
    text.map(|t| {
        serde_json::from_str(&t).map_err(|e| DbError::Corrupt {
            table,
            message: e.to_string(),
        })
    })
    .transpose()
}

fn status_of(s: &str) -> Result<CallStatus, DbError> {
    serde_json::from_value(Value::String(s.to_string())).map_err(|_| DbError::Corrupt {
        table: "tool_executions",
        message: format!("unknown status `{s}`"),
    })
}

fn record(row: &sqlx::any::AnyRow) -> Result<RunRecord, DbError> {
    let spec: String = row.try_get("spec")?;
    Ok(RunRecord {
        run_id: row.try_get("run_id")?,
        tenant_id: row.try_get("tenant_id")?,
        case_id: row.try_get("case_id")?,
        actor: row.try_get("actor")?,
        idempotency_key: row.try_get("idempotency_key")?,
        request_hash: row.try_get("request_hash")?,
        goal: row.try_get("goal")?,
        planner_kind: row.try_get("planner_kind")?,
        model: row.try_get("model")?,
        status: row.try_get("status")?,
        state: row.try_get("state")?,
        step_count: row.try_get("step_count")?,
        final_result: parse_json(row.try_get("final_result")?, "runs")?,
        stop_reason: row.try_get("stop_reason")?,
        bundle_digest: row.try_get("bundle_digest")?,
        created_at: row.try_get("created_at")?,
        updated_at: row.try_get("updated_at")?,
        spec: Some(serde_json::from_str(&spec).map_err(|e| DbError::Corrupt {
            table: "runs",
            message: e.to_string(),
        })?),
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
        }
    }

    pub fn with_lease_ms(mut self, lease_ms: i64) -> Self {
        self.lease_ms = lease_ms;
        self
    }

    /// Takes the run's lease if it is free, ours, or expired (its process died). The
    /// conditional update is atomic, so two processes never both hold it.
    pub async fn claim(&self, run_id: &str) -> Result<bool, DbError> {
        let now = now_ms();
        let done = sqlx::query(self.db.sql(
            "UPDATE runs SET lease_owner = ?, lease_expires_at = ? WHERE run_id = ? AND status = 'running' \
             AND (lease_owner IS NULL OR lease_owner = ? OR lease_expires_at < ?)",
        ))
        .bind(&self.owner)
        .bind(now + self.lease_ms)
        .bind(run_id)
        .bind(&self.owner)
        .bind(now)
        .execute(&self.db.pool)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    /// Runs whose lease expired (their process died), oldest first. On PostgreSQL
    /// the rows are locked with `FOR UPDATE SKIP LOCKED` so sweeping replicas never
    /// pick the same run; the claim that follows is the real guard on both backends.
    pub async fn expired(&self, limit: i64) -> Result<Vec<(String, String)>, DbError> {
        let now = now_ms();
        let mut tx = self.db.begin_write().await?;
        let sql = match self.db.dialect {
            super::Dialect::Postgres => {
                "SELECT run_id, tenant_id FROM runs WHERE status = 'running' AND lease_expires_at < ? ORDER BY lease_expires_at LIMIT ? FOR UPDATE SKIP LOCKED"
            }
            super::Dialect::Sqlite => {
                "SELECT run_id, tenant_id FROM runs WHERE status = 'running' AND lease_expires_at < ? ORDER BY lease_expires_at LIMIT ?"
            }
        };
        let rows = sqlx::query(self.db.sql(sql))
            .bind(now)
            .bind(limit)
            .fetch_all(&mut *tx)
            .await?;
        let mut out = Vec::new();
        for r in rows {
            let run_id: String = r.try_get("run_id")?;
            let claimed = sqlx::query(self.db.sql("UPDATE runs SET lease_owner = ?, lease_expires_at = ? WHERE run_id = ? AND lease_expires_at < ?"))
                .bind(&self.owner)
                .bind(now + self.lease_ms)
                .bind(&run_id)
                .bind(now)
                .execute(&mut *tx)
                .await?;
            if claimed.rows_affected() == 1 {
                out.push((run_id, r.try_get("tenant_id")?));
            }
        }
        tx.commit().await?;
        Ok(out)
    }

    /// Creates the run unless `(tenant, idempotency key)` exists; the unique
    /// constraint decides between concurrent requests, across processes too.
    pub async fn allocate(&self, new: &NewRun) -> Result<Allocation, DbError> {
        let now = now_ms();
        let spec = serde_json::to_string(&new.spec).expect("specs serialize");
        sqlx::query(self.db.sql(
            "INSERT INTO runs (run_id, tenant_id, case_id, actor, idempotency_key, request_hash, request_id, goal, planner_kind, model, status, state, step_count, spec, bundle_digest, created_at, updated_at, lease_owner, lease_expires_at) \
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'running', 'created', 0, ?, ?, ?, ?, ?, ?) ON CONFLICT (tenant_id, idempotency_key) DO NOTHING",
        ))
        .bind(&new.spec.run_id)
        .bind(&new.spec.tenant_id)
        .bind(&new.spec.resource_id)
        .bind(&new.actor)
        .bind(&new.idempotency_key)
        .bind(&new.request_hash)
        .bind(&new.request_id)
        .bind(&new.spec.goal)
        .bind(&new.planner_kind)
        .bind(&new.model)
        .bind(spec)
        .bind(&new.bundle_digest)
        .bind(now)
        .bind(now)
        .bind(&self.owner)
        .bind(now + self.lease_ms)
        .execute(&self.db.pool)
        .await?;
        let existing = self
            .by_key(&new.spec.tenant_id, &new.idempotency_key)
            .await?
            .ok_or_else(|| DbError::Corrupt {
                table: "runs",
                message: "allocated run vanished".into(),
            })?;
        Ok(if existing.run_id == new.spec.run_id {
            Allocation::New(existing)
        } else if existing.request_hash == new.request_hash {
            Allocation::Existing(existing)
        } else {
            Allocation::Conflict(existing)
        })
    }

    pub async fn by_key(&self, tenant: &str, key: &str) -> Result<Option<RunRecord>, DbError> {
        let sql = "SELECT run_id, tenant_id, case_id, actor, idempotency_key, request_hash, goal, planner_kind, model, status, state, step_count, spec, final_result, stop_reason, bundle_digest, created_at, updated_at FROM runs WHERE tenant_id = ? AND idempotency_key = ?";
        let row = sqlx::query(self.db.sql(sql))
            .bind(tenant)
            .bind(key)
            .fetch_optional(&self.db.pool)
            .await?;
        row.as_ref().map(record).transpose()
    }

    /// A run of `tenant` (another tenant's run is as absent as a missing one).
    pub async fn get(&self, tenant: &str, run_id: &str) -> Result<Option<RunRecord>, DbError> {
        let row = sqlx::query(self.db.sql(
            "SELECT run_id, tenant_id, case_id, actor, idempotency_key, request_hash, goal, planner_kind, model, status, state, step_count, spec, final_result, stop_reason, bundle_digest, created_at, updated_at FROM runs WHERE tenant_id = ? AND run_id = ?",
        ))
        .bind(tenant)
        .bind(run_id)
        .fetch_optional(&self.db.pool)
        .await?;
        row.as_ref().map(record).transpose()
    }

    pub async fn ledger(&self, tenant: &str, run_id: &str) -> Result<Vec<LedgerRow>, DbError> {
        let rows = sqlx::query(self.db.sql(
            "SELECT run_id, tool_call_id, tool_name, tool_version, arguments, arguments_hash, fingerprint, status, attempt_count, result, error_class, error_code, bundle_digest, started_at, finished_at \
             FROM tool_executions WHERE tenant_id = ? AND run_id = ? ORDER BY started_at, tool_call_id",
        ))
        .bind(tenant)
        .bind(run_id)
        .fetch_all(&self.db.pool)
        .await?;
        let mut out: Vec<LedgerRow> = rows
            .iter()
            .map(|r| -> Result<LedgerRow, DbError> {
                let arguments: String = r.try_get("arguments")?;
                Ok(LedgerRow {
                    run_id: r.try_get("run_id")?,
                    tool_call_id: r.try_get("tool_call_id")?,
                    tool_name: r.try_get("tool_name")?,
                    tool_version: r.try_get("tool_version")?,
                    arguments: serde_json::from_str(&arguments).map_err(|e| DbError::Corrupt {
                        table: "tool_executions",
                        message: e.to_string(),
                    })?,
                    arguments_hash: r.try_get("arguments_hash")?,
                    fingerprint: r.try_get("fingerprint")?,
                    status: status_of(&r.try_get::<String, _>("status")?)?,
                    attempt_count: r.try_get::<i64, _>("attempt_count")? as u32,
                    result: parse_json(r.try_get("result")?, "tool_executions")?,
                    error_class: r.try_get("error_class")?,
                    error_code: r.try_get("error_code")?,
                    bundle_digest: r.try_get("bundle_digest")?,
                    started_at_ms: r.try_get::<i64, _>("started_at")? as u64,
                    finished_at_ms: r
                        .try_get::<Option<i64>, _>("finished_at")?
                        .map(|v| v as u64),
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
        let rows = sqlx::query(self.db.sql(
            "SELECT c.run_id, c.sequence, c.from_state, c.to_state, c.at_ms, c.reason, c.snapshot FROM checkpoints c JOIN runs r ON r.run_id = c.run_id \
             WHERE r.tenant_id = ? AND c.run_id = ? ORDER BY c.sequence",
        ))
        .bind(tenant)
        .bind(run_id)
        .fetch_all(&self.db.pool)
        .await?;
        rows.iter()
            .map(|r| {
                Ok(Checkpoint {
                    run_id: r.try_get("run_id")?,
                    sequence: r.try_get::<i64, _>("sequence")? as u64,
                    from: r.try_get("from_state")?,
                    to: r.try_get("to_state")?,
                    at_ms: r.try_get::<i64, _>("at_ms")? as u64,
                    reason: r.try_get("reason")?,
                    snapshot: parse_json(r.try_get("snapshot")?, "checkpoints")?
                        .unwrap_or(Value::Null),
                })
            })
            .collect()
    }

    async fn write(&self, batch: Batch) -> Result<(), DbError> {
        let db = &self.db;
        let mut tx = db.begin_write().await?;
        let run = sqlx::query(
            db.sql("SELECT tenant_id, case_id, actor, request_id FROM runs WHERE run_id = ?"),
        )
        .bind(&batch.run_id)
        .fetch_optional(&mut *tx)
        .await?
        .ok_or_else(|| DbError::Corrupt {
            table: "runs",
            message: format!("no run `{}`", batch.run_id),
        })?;
        let tenant: String = run.try_get("tenant_id")?;
        if !batch.checkpoints.is_empty() {
            // One statement for the batch's checkpoints; the primary key
            // (run_id, sequence) still refuses a duplicated sequence.
            let tuples = vec!["(?, ?, ?, ?, ?, ?, ?)"; batch.checkpoints.len()].join(", ");
            let sql = format!(
                "INSERT INTO checkpoints (run_id, sequence, from_state, to_state, at_ms, reason, snapshot) VALUES {tuples}"
            );
            let mut query = sqlx::query(db.sql_built(sql));
            for cp in &batch.checkpoints {
                let snapshot = (!cp.snapshot.is_null()).then(|| cp.snapshot.to_string());
                query = query
                    .bind(&cp.run_id)
                    .bind(cp.sequence as i64)
                    .bind(&cp.from)
                    .bind(&cp.to)
                    .bind(cp.at_ms as i64)
                    .bind(&cp.reason)
                    .bind(snapshot);
            }
            query.execute(&mut *tx).await?;
        }
        for row in &batch.ledger {
            sqlx::query(db.sql(
                "INSERT INTO tool_executions (run_id, tool_call_id, tenant_id, tool_name, tool_version, arguments, arguments_hash, fingerprint, status, attempt_count, result, error_class, error_code, bundle_digest, started_at, finished_at) \
                 VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) \
                 ON CONFLICT (run_id, tool_call_id) DO UPDATE SET status = excluded.status, attempt_count = excluded.attempt_count, result = excluded.result, \
                 error_class = excluded.error_class, error_code = excluded.error_code, finished_at = excluded.finished_at",
            ))
            .bind(&row.run_id)
            .bind(&row.tool_call_id)
            .bind(&tenant)
            .bind(&row.tool_name)
            .bind(&row.tool_version)
            .bind(row.arguments.to_string())
            .bind(&row.arguments_hash)
            .bind(&row.fingerprint)
            .bind(row.status.as_str())
            .bind(i64::from(row.attempt_count))
            .bind(row.result.as_ref().map(Value::to_string))
            .bind(&row.error_class)
            .bind(&row.error_code)
            .bind(&row.bundle_digest)
            .bind(row.started_at_ms as i64)
            .bind(row.finished_at_ms.map(|v| v as i64))
            .execute(&mut *tx)
            .await?;
        }
        let status = match &batch.outcome {
            Some(o) => o.status.clone(),
            None => "running".to_string(),
        };
        // Every commit renews this process's lease; the terminal one releases it.
        let terminal = batch.outcome.is_some();
        let now = now_ms();
        let (owner, expires) = if terminal {
            (None, None)
        } else {
            (Some(self.owner.clone()), Some(now + self.lease_ms))
        };
        sqlx::query(db.sql("UPDATE runs SET state = ?, status = ?, step_count = ?, final_result = ?, stop_reason = ?, updated_at = ?, lease_owner = ?, lease_expires_at = ? WHERE run_id = ?"))
            .bind(&batch.state)
            .bind(&status)
            .bind(i64::from(batch.step_count))
            .bind(batch.outcome.as_ref().and_then(|o| o.final_answer.as_ref()).map(Value::to_string))
            .bind(batch.outcome.as_ref().and_then(|o| o.stop_reason.clone()))
            .bind(now)
            .bind(owner)
            .bind(expires)
            .bind(&batch.run_id)
            .execute(&mut *tx)
            .await?;
        if let Some(outcome) = &batch.outcome {
            let case: String = run.try_get("case_id")?;
            let actor: String = run.try_get("actor")?;
            let request_id: Option<String> = run.try_get("request_id")?;
            let who = audit::Who {
                tenant: &tenant,
                case_id: &case,
                actor: &actor,
                request_id: request_id.as_deref(),
            };
            audit::record_terminal(db, &mut tx, &who, outcome).await?;
        }
        tx.commit().await?;
        db.count_commit();
        crate::fault::after_commit(db.commits());
        Ok(())
    }

    /// Whether a run has committed any checkpoint (so it can be resumed, not started).
    pub async fn load_started(&self, run_id: &str) -> Result<bool, DbError> {
        let n: i64 = sqlx::query_scalar(
            self.db
                .sql("SELECT COUNT(*) FROM checkpoints WHERE run_id = ?"),
        )
        .bind(run_id)
        .fetch_one(&self.db.pool)
        .await?;
        Ok(n > 0)
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
            step_count: record.step_count as u32,
            recovery_count: 0,
        })
    }
}

impl RunStore for SqlRunStore {
    async fn commit(&self, batch: Batch) -> Result<(), StoreError> {
        // A busy audit chain (two terminal runs of one tenant) is retried a few times.
        let mut last = None;
        for _ in 0..5 {
            match self.write(batch.clone()).await {
                Ok(()) => return Ok(()),
                Err(DbError::Query(e)) if is_conflict(&e) && batch.outcome.is_some() => {
                    last = Some(e.to_string())
                }
                Err(e) => return Err(StoreError::Unavailable(e.to_string())),
            }
        }
        Err(StoreError::Unavailable(last.unwrap_or_default()))
    }

    async fn load(&self, run_id: &str) -> Result<Option<StoredRun>, StoreError> {
        let err = |e: DbError| StoreError::Unavailable(e.to_string());
        let tenant: Option<String> =
            sqlx::query_scalar(self.db.sql("SELECT tenant_id FROM runs WHERE run_id = ?"))
                .bind(run_id)
                .fetch_optional(&self.db.pool)
                .await
                .map_err(|e| err(e.into()))?;
        let Some(tenant) = tenant else {
            return Ok(None);
        };
        let record = self.get(&tenant, run_id).await.map_err(err)?;
        let checkpoints = self.checkpoints(&tenant, run_id).await.map_err(err)?;
        let ledger = self.ledger(&tenant, run_id).await.map_err(err)?;
        Ok(Some(StoredRun {
            checkpoints,
            ledger,
            outcome: record.as_ref().and_then(Self::outcome_of),
        }))
    }
}

fn is_conflict(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Database(d) => {
            d.is_unique_violation()
                || d.message().contains("locked")
                || d.message().contains("busy")
        }
        _ => false,
    }
}
