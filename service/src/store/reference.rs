//! The claims domain in the database: seeding the reference data and the
//! tenant-scoped repository the tools read.

use caseops_runtime::ToolError;
use sqlx::Row;

use super::{Db, DbError};
use crate::domain::{AliasRule, Case, ClaimPolicy, ReferenceData, SourceDocument};
use crate::tools::CaseRepository;

/// Writes the reference data; rows that exist are left as they are.
pub async fn seed(db: &Db, data: &ReferenceData) -> Result<(), DbError> {
    let mut tx = db.begin_write().await?;
    for p in &data.policies {
        sqlx::query(db.sql("INSERT INTO claim_policies (tenant_id, policy_id, version, required) VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING"))
            .bind(&p.tenant_id)
            .bind(&p.policy_id)
            .bind(&p.version)
            .bind(serde_json::to_string(&p.required).expect("serializes"))
            .execute(&mut *tx)
            .await?;
    }
    for c in &data.cases {
        sqlx::query(db.sql("INSERT INTO cases (tenant_id, case_id, version, status, policy_id, policy_version, received_codes) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING"))
            .bind(&c.tenant_id)
            .bind(&c.case_id)
            .bind(c.version)
            .bind(&c.status)
            .bind(&c.policy_id)
            .bind(&c.policy_version)
            .bind(serde_json::to_string(&c.received_codes).expect("serializes"))
            .execute(&mut *tx)
            .await?;
    }
    for d in &data.documents {
        sqlx::query(db.sql("INSERT INTO source_documents (tenant_id, case_id, document_id, label, code, evidence_ref) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING"))
            .bind(&d.tenant_id)
            .bind(&d.case_id)
            .bind(&d.document_id)
            .bind(&d.label)
            .bind(&d.code)
            .bind(&d.evidence_ref)
            .execute(&mut *tx)
            .await?;
    }
    for r in &data.alias_rules {
        sqlx::query(db.sql("INSERT INTO alias_rules (tenant_id, label, code, rule_version, confidence, active) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING"))
            .bind(&r.tenant_id)
            .bind(&r.label)
            .bind(&r.code)
            .bind(&r.rule_version)
            .bind(r.confidence)
            .bind(i64::from(r.active))
            .execute(&mut *tx)
            .await?;
    }
    tx.commit().await?;
    Ok(())
}

/// The tools' repository over the database; every query is tenant-scoped.
#[derive(Debug, Clone)]
pub struct SqlRepository {
    pub db: Db,
}

fn unavailable(e: impl std::fmt::Display) -> ToolError {
    ToolError::transient("STORE_UNAVAILABLE", e.to_string())
}

fn corrupt(what: &str) -> ToolError {
    ToolError::transient("STORE_CORRUPT", format!("unreadable {what} row"))
}

impl CaseRepository for SqlRepository {
    async fn case(&self, tenant: &str, case_id: &str) -> Result<Option<Case>, ToolError> {
        let row = sqlx::query(self.db.sql("SELECT version, status, policy_id, policy_version, received_codes FROM cases WHERE tenant_id = ? AND case_id = ?"))
            .bind(tenant)
            .bind(case_id)
            .fetch_optional(&self.db.pool)
            .await
            .map_err(unavailable)?;
        let Some(r) = row else { return Ok(None) };
        let received: String = r.try_get("received_codes").map_err(unavailable)?;
        Ok(Some(Case {
            tenant_id: tenant.into(),
            case_id: case_id.into(),
            version: r.try_get("version").map_err(unavailable)?,
            status: r.try_get("status").map_err(unavailable)?,
            policy_id: r.try_get("policy_id").map_err(unavailable)?,
            policy_version: r.try_get("policy_version").map_err(unavailable)?,
            received_codes: serde_json::from_str(&received).map_err(|_| corrupt("case"))?,
        }))
    }

    async fn policy(
        &self,
        tenant: &str,
        policy_id: &str,
        version: &str,
    ) -> Result<Option<ClaimPolicy>, ToolError> {
        let row = sqlx::query(self.db.sql("SELECT required FROM claim_policies WHERE tenant_id = ? AND policy_id = ? AND version = ?"))
            .bind(tenant)
            .bind(policy_id)
            .bind(version)
            .fetch_optional(&self.db.pool)
            .await
            .map_err(unavailable)?;
        let Some(r) = row else { return Ok(None) };
        let required: String = r.try_get("required").map_err(unavailable)?;
        Ok(Some(ClaimPolicy {
            tenant_id: tenant.into(),
            policy_id: policy_id.into(),
            version: version.into(),
            required: serde_json::from_str(&required).map_err(|_| corrupt("policy"))?,
        }))
    }

    async fn documents(
        &self,
        tenant: &str,
        case_id: &str,
    ) -> Result<Vec<SourceDocument>, ToolError> {
        let rows = sqlx::query(self.db.sql("SELECT document_id, label, code, evidence_ref FROM source_documents WHERE tenant_id = ? AND case_id = ? ORDER BY document_id"))
            .bind(tenant)
            .bind(case_id)
            .fetch_all(&self.db.pool)
            .await
            .map_err(unavailable)?;
        rows.iter()
            .map(|r| {
                Ok(SourceDocument {
                    tenant_id: tenant.into(),
                    case_id: case_id.into(),
                    document_id: r.try_get("document_id").map_err(unavailable)?,
                    label: r.try_get("label").map_err(unavailable)?,
                    code: r.try_get("code").map_err(unavailable)?,
                    evidence_ref: r.try_get("evidence_ref").map_err(unavailable)?,
                })
            })
            .collect()
    }

    async fn alias_rule(&self, tenant: &str, label: &str) -> Result<Option<AliasRule>, ToolError> {
        let row = sqlx::query(self.db.sql("SELECT code, rule_version, confidence FROM alias_rules WHERE tenant_id = ? AND label = ? AND active = 1 ORDER BY rule_version DESC LIMIT 1"))
            .bind(tenant)
            .bind(label)
            .fetch_optional(&self.db.pool)
            .await
            .map_err(unavailable)?;
        let Some(r) = row else { return Ok(None) };
        Ok(Some(AliasRule {
            tenant_id: tenant.into(),
            label: label.into(),
            code: r.try_get("code").map_err(unavailable)?,
            rule_version: r.try_get("rule_version").map_err(unavailable)?,
            confidence: r.try_get("confidence").map_err(unavailable)?,
            active: true,
        }))
    }
}
