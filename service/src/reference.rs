//! The claims domain in the database: seeding the reference data and the
//! tenant-scoped repository the tools read.

use caseops_host::api::Resources;
use caseops_host::params;
use caseops_host::store::{AppSchema, Db, DbError, Migration};
use caseops_runtime::ToolError;

use crate::domain::{AliasRule, Case, ClaimPolicy, ReferenceData, SourceDocument};
use crate::tools::{CaseRepository, Effect};
use serde_json::Value;

/// The claims domain's tables, migrated with the host's. Version 2 predates the
/// host crate (the host's own run between 1 and 4); later ones are 1000 and above.
pub const SCHEMA: AppSchema = AppSchema {
    migrations: &[
        Migration {
            version: 2,
            description: "reference",
            sqlite: include_str!("../migrations/sqlite/0002_reference.sql"),
            postgres: include_str!("../migrations/postgres/0002_reference.sql"),
        },
        Migration {
            version: 1000,
            description: "tool effects",
            sqlite: include_str!("../migrations/sqlite/1000_tool_effects.sql"),
            postgres: include_str!("../migrations/postgres/1000_tool_effects.sql"),
        },
    ],
    tables: &[
        "claim_policies",
        "cases",
        "source_documents",
        "alias_rules",
        "tool_effects",
    ],
};

/// Writes the reference data; rows that exist are left as they are.
pub async fn seed(db: &Db, data: &ReferenceData) -> Result<(), DbError> {
    let mut tx = db.begin_write().await?;
    for p in &data.policies {
        tx.execute("INSERT INTO claim_policies (tenant_id, policy_id, version, required) VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING", &params![&p.tenant_id, &p.policy_id, &p.version, serde_json::to_string(&p.required).expect("serializes")])
            .await?;
    }
    for c in &data.cases {
        tx.execute("INSERT INTO cases (tenant_id, case_id, version, status, policy_id, policy_version, received_codes) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING", &params![&c.tenant_id, &c.case_id, c.version, &c.status, &c.policy_id, &c.policy_version, serde_json::to_string(&c.received_codes).expect("serializes")])
            .await?;
    }
    for d in &data.documents {
        tx.execute("INSERT INTO source_documents (tenant_id, case_id, document_id, label, code, evidence_ref) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING", &params![&d.tenant_id, &d.case_id, &d.document_id, &d.label, &d.code, &d.evidence_ref])
            .await?;
    }
    for r in &data.alias_rules {
        tx.execute("INSERT INTO alias_rules (tenant_id, label, code, rule_version, confidence, active) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING", &params![&r.tenant_id, &r.label, &r.code, &r.rule_version, r.confidence, i64::from(r.active)])
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

/// The API's question "does this case exist for this tenant?", from the case table.
impl Resources for SqlRepository {
    fn exists<'a>(
        &'a self,
        tenant_id: &'a str,
        resource_id: &'a str,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<bool, String>> + Send + 'a>>
    {
        Box::pin(async move {
            self.case(tenant_id, resource_id)
                .await
                .map(|c| c.is_some())
                .map_err(|e| e.to_string())
        })
    }
}

fn unavailable(e: impl std::fmt::Display) -> ToolError {
    ToolError::transient("STORE_UNAVAILABLE", e.to_string())
}

fn corrupt(what: &str) -> ToolError {
    ToolError::transient("STORE_CORRUPT", format!("unreadable {what} row"))
}

impl CaseRepository for SqlRepository {
    async fn case(&self, tenant: &str, case_id: &str) -> Result<Option<Case>, ToolError> {
        let row = self.db.fetch_optional("SELECT version, status, policy_id, policy_version, received_codes FROM cases WHERE tenant_id = ? AND case_id = ?", &params![tenant, case_id])
            .await
            .map_err(unavailable)?;
        let Some(r) = row else { return Ok(None) };
        let received: String = r.get("received_codes").map_err(unavailable)?;
        Ok(Some(Case {
            tenant_id: tenant.into(),
            case_id: case_id.into(),
            version: r.get("version").map_err(unavailable)?,
            status: r.get("status").map_err(unavailable)?,
            policy_id: r.get("policy_id").map_err(unavailable)?,
            policy_version: r.get("policy_version").map_err(unavailable)?,
            received_codes: serde_json::from_str(&received).map_err(|_| corrupt("case"))?,
        }))
    }

    async fn policy(
        &self,
        tenant: &str,
        policy_id: &str,
        version: &str,
    ) -> Result<Option<ClaimPolicy>, ToolError> {
        let row = self.db.fetch_optional("SELECT required FROM claim_policies WHERE tenant_id = ? AND policy_id = ? AND version = ?", &params![tenant, policy_id, version])
            .await
            .map_err(unavailable)?;
        let Some(r) = row else { return Ok(None) };
        let required: String = r.get("required").map_err(unavailable)?;
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
        let rows = self.db.fetch_all("SELECT document_id, label, code, evidence_ref FROM source_documents WHERE tenant_id = ? AND case_id = ? ORDER BY document_id", &params![tenant, case_id])
            .await
            .map_err(unavailable)?;
        rows.iter()
            .map(|r| {
                Ok(SourceDocument {
                    tenant_id: tenant.into(),
                    case_id: case_id.into(),
                    document_id: r.get("document_id").map_err(unavailable)?,
                    label: r.get("label").map_err(unavailable)?,
                    code: r.get("code").map_err(unavailable)?,
                    evidence_ref: r.get("evidence_ref").map_err(unavailable)?,
                })
            })
            .collect()
    }

    async fn apply_once(&self, effect: Effect<'_>) -> Result<Value, ToolError> {
        let mut tx = self.db.begin_write().await.map_err(unavailable)?;
        tx.execute("INSERT INTO tool_effects (tenant_id, idempotency_key, tool, case_id, payload, created_at) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING", &params![effect.tenant, effect.key, effect.tool, effect.case_id, effect.payload.to_string(), caseops_host::store::now_ms()])
            .await
            .map_err(unavailable)?;
        let row = tx
            .fetch_optional(
                "SELECT payload FROM tool_effects WHERE tenant_id = ? AND idempotency_key = ?",
                &params![effect.tenant, effect.key],
            )
            .await
            .map_err(unavailable)?
            .ok_or_else(|| corrupt("effect"))?;
        tx.commit().await.map_err(unavailable)?;
        let payload: String = row.get("payload").map_err(unavailable)?;
        serde_json::from_str(&payload).map_err(|_| corrupt("effect"))
    }

    async fn alias_rule(&self, tenant: &str, label: &str) -> Result<Option<AliasRule>, ToolError> {
        let row = self.db.fetch_optional("SELECT code, rule_version, confidence FROM alias_rules WHERE tenant_id = ? AND label = ? AND active = 1 ORDER BY rule_version DESC LIMIT 1", &params![tenant, label])
            .await
            .map_err(unavailable)?;
        let Some(r) = row else { return Ok(None) };
        Ok(Some(AliasRule {
            tenant_id: tenant.into(),
            label: label.into(),
            code: r.get("code").map_err(unavailable)?,
            rule_version: r.get("rule_version").map_err(unavailable)?,
            confidence: r.get("confidence").map_err(unavailable)?,
            active: true,
        }))
    }
}
