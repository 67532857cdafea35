//! Approvals of calls that need one (irreversible writes). A run's commit asks for
//! one in the same transaction that parks the run in `waiting_approval`; a person
//! decides it through the API; a worker expires what nobody decided in time. Every
//! request and decision is an audit event in the tenant's hash chain and an outbox
//! event, written in the transaction of the fact it reports.

use caseops_runtime::store::ApprovalRequest;
use serde_json::{Value, json};

use super::sql::{Row, Statement};
use super::{Db, DbError, now_ms};
use crate::params;

/// The outbox topic of an approval asked for, and of one decided or expired.
pub const REQUESTED_TOPIC: &str = crate::event_types::APPROVAL_REQUESTED;
pub const DECIDED_TOPIC: &str = crate::event_types::APPROVAL_DECIDED;

/// An approval as the API shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct Approval {
    pub approval_id: String,
    pub tenant_id: String,
    pub run_id: String,
    pub tool_call_id: String,
    pub tool_name: String,
    pub arguments: Value,
    pub fingerprint: String,
    pub approver_role: String,
    pub requested_by: String,
    pub status: String,
    pub created_at_ms: i64,
    pub expires_at_ms: i64,
    pub decided_by: Option<String>,
    pub decided_at_ms: Option<i64>,
    pub comment: Option<String>,
}

impl Approval {
    pub fn to_json(&self) -> Value {
        json!({
            "approval_id": self.approval_id,
            "run_id": self.run_id,
            "tool_call_id": self.tool_call_id,
            "tool": self.tool_name,
            "arguments": self.arguments,
            "action_fingerprint": self.fingerprint,
            "approver_role": self.approver_role,
            "requested_by": self.requested_by,
            "status": self.status,
            "created_at_ms": self.created_at_ms,
            "expires_at_ms": self.expires_at_ms,
            "decided_by": self.decided_by,
            "decided_at_ms": self.decided_at_ms,
            "comment": self.comment,
        })
    }
}

const COLUMNS: &str = "approval_id, tenant_id, run_id, tool_call_id, tool_name, arguments, fingerprint, approver_role, requested_by, status, created_at, expires_at, decided_by, decided_at, comment";

fn approval(r: &Row) -> Result<Approval, DbError> {
    let arguments: String = r.get("arguments")?;
    Ok(Approval {
        approval_id: r.get("approval_id")?,
        tenant_id: r.get("tenant_id")?,
        run_id: r.get("run_id")?,
        tool_call_id: r.get("tool_call_id")?,
        tool_name: r.get("tool_name")?,
        arguments: serde_json::from_str(&arguments).map_err(|e| DbError::Corrupt {
            table: "approvals",
            message: e.to_string(),
        })?,
        fingerprint: r.get("fingerprint")?,
        approver_role: r.get("approver_role")?,
        requested_by: r.get("requested_by")?,
        status: r.get("status")?,
        created_at_ms: r.get("created_at")?,
        expires_at_ms: r.get("expires_at")?,
        decided_by: r.get("decided_by")?,
        decided_at_ms: r.get("decided_at")?,
        comment: r.get("comment")?,
    })
}

/// The insert of an approval request (`ON CONFLICT DO NOTHING`: a repeated commit of
/// the same request is one approval).
pub(crate) fn insert(
    req: &ApprovalRequest,
    tenant: &str,
    run_id: &str,
    requested_by: &str,
) -> Statement {
    Statement::new(
        "INSERT INTO approvals (approval_id, tenant_id, run_id, tool_call_id, tool_name, arguments, fingerprint, approver_role, requested_by, status, created_at, expires_at) \
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 'pending', ?, ?) ON CONFLICT DO NOTHING",
        params![
            &req.approval_id,
            tenant,
            run_id,
            &req.tool_call_id,
            &req.tool_name,
            req.arguments.to_string(),
            &req.fingerprint,
            &req.approver_role,
            requested_by,
            now_ms(),
            req.expires_at_ms as i64
        ],
    )
}

/// The latest approval of a run, for its driver.
pub(crate) async fn latest_of_run(db: &Db, run_id: &str) -> Result<Option<Approval>, DbError> {
    let rows = db
        .fetch_all(
            &format!("SELECT {COLUMNS} FROM approvals WHERE run_id = ? ORDER BY created_at DESC, approval_id LIMIT 1"),
            &params![run_id],
        )
        .await?;
    rows.first().map(approval).transpose()
}

/// A tenant's approvals, newest first, optionally of one status.
pub async fn list(
    db: &Db,
    tenant: &str,
    status: Option<&str>,
    limit: i64,
) -> Result<Vec<Approval>, DbError> {
    let rows = match status {
        Some(s) => db.fetch_all(&format!("SELECT {COLUMNS} FROM approvals WHERE tenant_id = ? AND status = ? ORDER BY created_at DESC, approval_id LIMIT ?"), &params![tenant, s, limit]).await?,
        None => db.fetch_all(&format!("SELECT {COLUMNS} FROM approvals WHERE tenant_id = ? ORDER BY created_at DESC, approval_id LIMIT ?"), &params![tenant, limit]).await?,
    };
    rows.iter().map(approval).collect()
}

/// One approval of a tenant; another tenant's is as absent as a missing one.
pub async fn get(db: &Db, tenant: &str, id: &str) -> Result<Option<Approval>, DbError> {
    let rows = db
        .fetch_all(
            &format!("SELECT {COLUMNS} FROM approvals WHERE tenant_id = ? AND approval_id = ?"),
            &params![tenant, id],
        )
        .await?;
    rows.first().map(approval).transpose()
}

/// The approvals of one run of `tenant`, oldest first.
pub async fn of_run(db: &Db, tenant: &str, run_id: &str) -> Result<Vec<Approval>, DbError> {
    let rows = db
        .fetch_all(
            &format!("SELECT {COLUMNS} FROM approvals WHERE tenant_id = ? AND run_id = ? ORDER BY created_at, approval_id"),
            &params![tenant, run_id],
        )
        .await?;
    rows.iter().map(approval).collect()
}

/// A person's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Approve,
    Reject,
}

impl Decision {
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "approve" => Some(Decision::Approve),
            "reject" => Some(Decision::Reject),
            _ => None,
        }
    }

    fn status(self) -> &'static str {
        match self {
            Decision::Approve => "approved",
            Decision::Reject => "rejected",
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum DecideError {
    #[error("no such approval")]
    NotFound,
    #[error("the approval was already decided: it is `{0}`")]
    AlreadyDecided(String),
    #[error("the approval expired before it was decided")]
    Expired,
    #[error("the run's requester cannot decide its approval (separation of duties)")]
    SameActor,
    #[error(transparent)]
    Db(#[from] DbError),
}

/// Records `decision` by `actor` on a pending approval of `tenant`, and makes its run
/// due so that a worker drives it on. A second decision, one past the expiry and one
/// by the run's own requester are refused; concurrent decisions: one wins.
pub async fn decide(
    db: &Db,
    tenant: &str,
    id: &str,
    actor: &str,
    decision: Decision,
    comment: Option<&str>,
) -> Result<Approval, DecideError> {
    let found = get(db, tenant, id).await?.ok_or(DecideError::NotFound)?;
    if found.status != "pending" {
        return Err(DecideError::AlreadyDecided(found.status));
    }
    let now = now_ms();
    if found.expires_at_ms <= now {
        expire(db, &found).await?;
        return Err(DecideError::Expired);
    }
    if found.requested_by == actor {
        return Err(DecideError::SameActor);
    }
    settle(db, &found, decision.status(), Some(actor), comment).await?;
    get(db, tenant, id).await?.ok_or(DecideError::NotFound)
}

/// Expires every pending approval past its expiry (at most `limit`), making each run
/// due; returns how many expired.
pub async fn expire_due(db: &Db, limit: i64) -> Result<u64, DbError> {
    let rows = db
        .fetch_all(
            &format!("SELECT {COLUMNS} FROM approvals WHERE status = 'pending' AND expires_at <= ? ORDER BY expires_at LIMIT ?"),
            &params![now_ms(), limit],
        )
        .await?;
    let mut n = 0;
    for r in &rows {
        n += u64::from(expire(db, &approval(r)?).await?);
    }
    Ok(n)
}

async fn expire(db: &Db, a: &Approval) -> Result<bool, DbError> {
    match settle(db, a, "expired", None, None).await {
        Ok(()) => Ok(true),
        Err(DecideError::AlreadyDecided(_)) => Ok(false),
        Err(DecideError::Db(e)) => Err(e),
        Err(_) => Ok(false),
    }
}

/// One transaction: the approval's new status (only from `pending`), its run made
/// due, the audit event in the tenant's chain and the outbox event.
async fn settle(
    db: &Db,
    a: &Approval,
    status: &str,
    actor: Option<&str>,
    comment: Option<&str>,
) -> Result<(), DecideError> {
    let now = now_ms();
    let mut tx = db.begin_write().await?;
    let changed = tx
        .execute(
            "UPDATE approvals SET status = ?, decided_by = ?, decided_at = ?, comment = ? WHERE approval_id = ? AND status = 'pending'",
            &params![status, actor, now, comment, &a.approval_id],
        )
        .await?;
    if changed != 1 {
        return Err(DecideError::AlreadyDecided("decided".into()));
    }
    tx.execute(
        "UPDATE runs SET status = 'running', lease_owner = NULL, lease_expires_at = ?, updated_at = ? WHERE run_id = ? AND status = 'waiting_approval'",
        &params![now, now, &a.run_id],
    )
    .await?;
    let payload = json!({
        "approval_id": a.approval_id,
        "run_id": a.run_id,
        "tool": a.tool_name,
        "action_fingerprint": a.fingerprint,
        "status": status,
        "decided_by": actor,
        "comment": comment,
    });
    for s in super::audit::fact_events(
        db,
        &mut tx,
        &mut super::audit::ChainHead::default(),
        &a.tenant_id,
        &a.run_id,
        "approval.decided",
        DECIDED_TOPIC,
        format!("approvals/{}", a.approval_id),
        &payload,
    )
    .await?
    {
        tx.execute(&s.sql, &s.params).await?;
    }
    tx.commit().await?;
    Ok(())
}
