//! Audit events (append-only, hash-chained per tenant) and outbox events, written in
//! the same transaction as a run's terminal checkpoint.

use caseops_runtime::Outcome;
use caseops_runtime::fingerprint::{canonical_json, sha256_hex};
use serde_json::{Value, json};
use sqlx::{Any, Row, Transaction};

use super::{Db, DbError, now_ms};

pub const RUN_EVENT: &str = "agent.run";
pub const COMPLETED_TOPIC: &str = "case.agent-run.completed.v1";
/// The `prev_hash` of a tenant's first event.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// The hash of one event: its predecessor's hash, its place and its content.
pub fn event_hash(prev_hash: &str, seq: i64, kind: &str, run_id: &str, payload: &Value) -> String {
    sha256_hex(
        format!(
            "{prev_hash}\n{seq}\n{kind}\n{run_id}\n{}",
            canonical_json(payload)
        )
        .as_bytes(),
    )
}

/// Who and what a terminal event is about.
pub(crate) struct Who<'a> {
    pub tenant: &'a str,
    pub case_id: &'a str,
    pub actor: &'a str,
    /// The API request that started the run, for correlation with logs.
    pub request_id: Option<&'a str>,
}

pub(crate) async fn record_terminal(
    db: &Db,
    tx: &mut Transaction<'static, Any>,
    who: &Who<'_>,
    outcome: &Outcome,
) -> Result<(), DbError> {
    let (tenant, case_id, actor) = (who.tenant, who.case_id, who.actor);
    // One appender per tenant chain at a time: on PostgreSQL a transaction-scoped
    // advisory lock on the tenant (SQLite's BEGIN IMMEDIATE already serializes).
    if db.dialect == super::Dialect::Postgres {
        sqlx::query(db.sql("SELECT pg_advisory_xact_lock(hashtext(?))::text"))
            .bind(format!("caseops-audit:{tenant}"))
            .fetch_one(&mut **tx)
            .await?;
    }
    let last = sqlx::query(
        db.sql("SELECT seq, hash FROM audit_events WHERE tenant_id = ? ORDER BY seq DESC LIMIT 1"),
    )
    .bind(tenant)
    .fetch_optional(&mut **tx)
    .await?;
    let (prev_seq, prev_hash) = match last {
        Some(r) => (r.try_get::<i64, _>("seq")?, r.try_get::<String, _>("hash")?),
        None => (0, GENESIS.to_string()),
    };
    let seq = prev_seq + 1;
    let payload = json!({
        "run_id": outcome.run_id,
        "case_id": case_id,
        "actor": actor,
        "request_id": who.request_id,
        "status": outcome.status,
        "stop_reason": outcome.stop_reason,
        "step_count": outcome.step_count,
        "outcome": outcome.final_answer.as_ref().and_then(|a| a.get("outcome")).cloned(),
    });
    let hash = event_hash(&prev_hash, seq, RUN_EVENT, &outcome.run_id, &payload);
    let now = now_ms();
    sqlx::query(db.sql("INSERT INTO audit_events (tenant_id, seq, event_id, run_id, kind, payload, prev_hash, hash, at_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"))
        .bind(tenant)
        .bind(seq)
        .bind(uuid::Uuid::new_v4().to_string())
        .bind(&outcome.run_id)
        .bind(RUN_EVENT)
        .bind(payload.to_string())
        .bind(&prev_hash)
        .bind(&hash)
        .bind(now)
        .execute(&mut **tx)
        .await?;
    let event = json!({
        "type": COMPLETED_TOPIC,
        "tenant_id": tenant,
        "run_id": outcome.run_id,
        "case_id": case_id,
        "request_id": who.request_id,
        "status": outcome.status,
        "stop_reason": outcome.stop_reason,
        "result": outcome.final_answer,
    });
    sqlx::query(db.sql("INSERT INTO outbox_events (event_id, tenant_id, run_id, topic, payload, created_at) VALUES (?, ?, ?, ?, ?, ?)"))
        .bind(uuid::Uuid::new_v4().to_string())
        .bind(tenant)
        .bind(&outcome.run_id)
        .bind(COMPLETED_TOPIC)
        .bind(event.to_string())
        .bind(now)
        .execute(&mut **tx)
        .await?;
    Ok(())
}

/// What `verify` found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Verification {
    pub tenants: usize,
    pub events: usize,
    /// One line per broken link: tenant, sequence and what is wrong.
    pub problems: Vec<String>,
}

/// Recomputes every tenant's chain: an edited, inserted or deleted event breaks it.
pub async fn verify(db: &Db) -> Result<Verification, DbError> {
    let rows = sqlx::query(db.sql("SELECT tenant_id, seq, run_id, kind, payload, prev_hash, hash FROM audit_events ORDER BY tenant_id, seq"))
        .fetch_all(&db.pool)
        .await?;
    let mut v = Verification::default();
    let mut current: Option<(String, i64, String)> = None;
    for r in &rows {
        let tenant: String = r.try_get("tenant_id")?;
        let seq: i64 = r.try_get("seq")?;
        let prev_hash: String = r.try_get("prev_hash")?;
        let hash: String = r.try_get("hash")?;
        let kind: String = r.try_get("kind")?;
        let run_id: String = r.try_get("run_id")?;
        let payload: String = r.try_get("payload")?;
        v.events += 1;
        let (expected_seq, expected_prev) = match &current {
            Some((t, s, h)) if *t == tenant => (s + 1, h.clone()),
            _ => {
                v.tenants += 1;
                (1, GENESIS.to_string())
            }
        };
        if seq != expected_seq {
            v.problems.push(format!(
                "tenant `{tenant}`: event {seq} follows {} (an event is missing)",
                expected_seq - 1
            ));
        }
        if prev_hash != expected_prev {
            v.problems.push(format!(
                "tenant `{tenant}`: event {seq} does not link to its predecessor"
            ));
        }
        match serde_json::from_str::<Value>(&payload) {
            Ok(p) if event_hash(&prev_hash, seq, &kind, &run_id, &p) == hash => {}
            Ok(_) => v.problems.push(format!(
                "tenant `{tenant}`: event {seq} was altered (hash mismatch)"
            )),
            Err(_) => v.problems.push(format!(
                "tenant `{tenant}`: event {seq} has an unreadable payload"
            )),
        }
        current = Some((tenant, seq, hash));
    }
    Ok(v)
}
