//! The relay's side of the outbox: claiming pending events in their tenant's commit
//! order, marking them published, measuring the backlog and pruning.
//!
//! On PostgreSQL several relays share the work: a claim takes one tenant's
//! transaction-scoped advisory lock (so one relay at a time publishes a tenant, in
//! order) and its rows `FOR UPDATE SKIP LOCKED`, and holds both until the rows are
//! marked. On SQLite one relay runs, and a claim holds no lock while it publishes
//! (the database's one writer stays free for runs).

use super::sql::Tx;
use super::{Db, DbError, Dialect, now_ms};
use crate::params;

/// One event to publish.
#[derive(Debug, Clone, PartialEq)]
pub struct PendingEvent {
    pub event_id: String,
    pub tenant_id: String,
    pub topic: String,
    /// The CloudEvents envelope to publish: as written by a version that stored it,
    /// else rendered from the audit chain (see [`render`]).
    pub payload: String,
    pub seq: i64,
    pub created_at: i64,
}

/// Events claimed for publishing; [`Claim::finish`] marks those published.
pub struct Claim {
    tx: Option<Tx>,
    pub events: Vec<PendingEvent>,
}

/// A pending row with what renders it: the audit event of the same tenant and
/// sequence and, for a finished run's, the run's result. Rows that kept their
/// envelope (written before migration 1008) join nothing.
fn pending_from() -> String {
    use super::audit::{LEFT_TO_RUN, RUN_EVENT, RUN_FACTS};
    format!(
        "o.event_id, o.tenant_id, o.topic, o.subject, o.payload, o.seq, o.created_at, \
         a.kind, a.run_id AS audit_run_id, a.payload AS data, {RUN_FACTS} \
         FROM outbox_events o \
         LEFT JOIN audit_events a ON o.payload IS NULL AND a.tenant_id = o.tenant_id AND a.seq = o.seq \
         LEFT JOIN runs r ON (a.kind = '{RUN_EVENT}' OR {LEFT_TO_RUN}) AND r.run_id = a.run_id"
    )
}

fn pending_event(r: &super::sql::Row) -> Result<PendingEvent, DbError> {
    let event_id: String = r.get("event_id")?;
    let tenant_id: String = r.get("tenant_id")?;
    let topic: String = r.get("topic")?;
    let created_at: i64 = r.get("created_at")?;
    let payload = match r.get::<Option<String>>("payload")? {
        Some(written) => written,
        None => render(r, &event_id, &tenant_id, &topic, created_at)?,
    };
    Ok(PendingEvent {
        event_id,
        tenant_id,
        topic,
        payload,
        seq: r.get("seq")?,
        created_at,
    })
}

/// The envelope of an outbox row that holds none: its `data` follows from the
/// audit event at the row's tenant and sequence (and a finished run's result),
/// exactly as it stood when the event was appended — audit events and a finished
/// run's result are never rewritten.
fn render(
    r: &super::sql::Row,
    event_id: &str,
    tenant: &str,
    topic: &str,
    created_at: i64,
) -> Result<String, DbError> {
    let (kind, data, result): (Option<String>, Option<String>, Option<String>) =
        (r.get("kind")?, r.get("data")?, r.get("run_final_result")?);
    let corrupt = |message: String| DbError::Corrupt {
        table: "outbox_events",
        message: format!("event `{event_id}`: {message}"),
    };
    let (Some(kind), Some(data)) = (kind, data) else {
        return Err(corrupt(
            "no audit event at its sequence to render it from".into(),
        ));
    };
    let parse = |text: &str| {
        serde_json::from_str::<serde_json::Value>(text).map_err(|e| corrupt(e.to_string()))
    };
    let run_id: String = r.get("audit_run_id")?;
    let payload = super::audit::payload_of(r, &kind, &run_id, tenant, &data).map_err(corrupt)?;
    let data = super::audit::outbox_data(&kind, payload, result.as_deref().map(parse).transpose()?);
    // None for a run's own event written `compact-timeline`: the run's subject.
    let subject = match r.get::<Option<String>>("subject")? {
        Some(s) => s,
        None if super::audit::is_run_own(&kind) => super::audit::run_subject(&run_id),
        None => String::new(),
    };
    Ok(
        crate::event_types::envelope(event_id, topic, &subject, tenant, created_at, data)
            .to_string(),
    )
}

/// Claims up to `limit` pending events, in commit order per tenant. Empty when
/// there are none (or, on PostgreSQL, when other relays hold every pending tenant).
pub async fn claim(db: &Db, limit: usize) -> Result<Claim, DbError> {
    let limit = limit.max(1) as i64;
    match db.dialect {
        Dialect::Sqlite => {
            let rows = db
                .fetch_all(
                    &format!("SELECT {} WHERE o.published_at IS NULL ORDER BY o.tenant_id, o.seq, o.created_at, o.event_id LIMIT ?", pending_from()),
                    &params![limit],
                )
                .await?;
            Ok(Claim {
                tx: None,
                events: rows.iter().map(pending_event).collect::<Result<_, _>>()?,
            })
        }
        Dialect::Postgres => {
            let mut tx = db.begin_lazy_write().await?;
            let tenants = tx
                .fetch_all(
                    "SELECT DISTINCT tenant_id FROM outbox_events WHERE published_at IS NULL LIMIT 256",
                    &[],
                )
                .await?;
            let mut tenants: Vec<String> = tenants
                .iter()
                .map(|r| r.get("tenant_id"))
                .collect::<Result<_, _>>()?;
            // Relays that start together do not all queue for the same tenant.
            let offset = (uuid::Uuid::new_v4().as_u128() % tenants.len().max(1) as u128) as usize;
            tenants.rotate_left(offset);
            for tenant in tenants {
                let got: i64 = tx
                    .fetch_optional(
                        "SELECT CASE WHEN pg_try_advisory_xact_lock(hashtext(?)) THEN 1 ELSE 0 END::bigint AS got",
                        &params![format!("caseops-relay:{tenant}")],
                    )
                    .await?
                    .map(|r| r.get("got"))
                    .transpose()?
                    .unwrap_or(0);
                if got != 1 {
                    continue;
                }
                let rows = tx
                    .fetch_all(
                        &format!("SELECT {} WHERE o.tenant_id = ? AND o.published_at IS NULL ORDER BY o.seq, o.created_at, o.event_id LIMIT ? FOR UPDATE OF o SKIP LOCKED", pending_from()),
                        &params![&tenant, limit],
                    )
                    .await?;
                if rows.is_empty() {
                    continue;
                }
                return Ok(Claim {
                    tx: Some(tx),
                    events: rows.iter().map(pending_event).collect::<Result<_, _>>()?,
                });
            }
            Ok(Claim {
                tx: Some(tx),
                events: Vec::new(),
            })
        }
    }
}

impl Claim {
    /// Marks the first `published` events published (they were acknowledged in
    /// order) and lets the rest go back to pending.
    pub async fn finish(self, db: &Db, published: usize) -> Result<(), DbError> {
        let ids: Vec<&str> = self
            .events
            .iter()
            .take(published)
            .map(|e| e.event_id.as_str())
            .collect();
        let now = now_ms();
        let mark = |ids: &[&str]| {
            let marks = vec!["?"; ids.len()].join(", ");
            let mut values = params![now].to_vec();
            values.extend(ids.iter().map(|id| (*id).into()));
            (
                format!("UPDATE outbox_events SET published_at = ? WHERE event_id IN ({marks})"),
                values,
            )
        };
        match self.tx {
            Some(mut tx) => {
                for chunk in ids.chunks(500) {
                    let (sql, values) = mark(chunk);
                    tx.execute(&sql, &values).await?;
                }
                tx.commit().await
            }
            None => {
                if ids.is_empty() {
                    return Ok(());
                }
                let mut tx = db.begin_lazy_write().await?;
                for chunk in ids.chunks(500) {
                    let (sql, values) = mark(chunk);
                    tx.execute(&sql, &values).await?;
                }
                tx.commit().await
            }
        }
    }
}

/// Pending events and the age of the oldest one (ms), for `/metrics` and readiness.
pub async fn backlog(db: &Db) -> Result<(u64, Option<i64>), DbError> {
    let row = db
        .fetch_optional(
            "SELECT COUNT(*) AS n, MIN(created_at) AS oldest FROM outbox_events WHERE published_at IS NULL",
            &[],
        )
        .await?;
    let Some(row) = row else {
        return Ok((0, None));
    };
    let n: i64 = row.get("n")?;
    let oldest: Option<i64> = row.get("oldest")?;
    Ok((n.max(0) as u64, oldest.map(|t| (now_ms() - t).max(0))))
}

/// Deletes events published more than `retention_ms` ago; returns how many.
pub async fn prune(db: &Db, retention_ms: i64) -> Result<u64, DbError> {
    db.execute(
        "DELETE FROM outbox_events WHERE published_at IS NOT NULL AND published_at < ?",
        &params![now_ms() - retention_ms],
    )
    .await
}
