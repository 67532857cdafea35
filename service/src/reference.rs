//! The claims domain in the database: seeding the reference data and the
//! tenant-scoped repository the tools read.

use caseops_host::api::Resources;
use caseops_host::params;
use caseops_host::store::runs::ResourceCondition;
use caseops_host::store::sql::Row;
use caseops_host::store::{AppSchema, Db, DbError, Dialect, Migration};
use caseops_runtime::ToolError;

use crate::domain::{
    AliasRule, Case, CaseTransition, ClaimPolicy, DocumentRequest, ReferenceData, SourceDocument,
};
use crate::tools::{CaseRepository, DocumentRule};

/// The claims domain's tables, migrated with the host's. Host and application
/// migrations are one sequence applied in version order past the database's current
/// version, so a new one, host's or application's, takes a number above every
/// existing one (version 2 predates the host crate; 1001 is the host's approvals).
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
        Migration {
            version: 1002,
            description: "writes",
            sqlite: include_str!("../migrations/sqlite/1002_writes.sql"),
            postgres: include_str!("../migrations/postgres/1002_writes.sql"),
        },
    ],
    tables: &[
        "claim_policies",
        "cases",
        "source_documents",
        "alias_rules",
        "document_requests",
        "case_transitions",
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

    // The cases live in the host's database: the run's creation checks its case.
    fn condition(&self) -> Option<ResourceCondition> {
        Some(ResourceCondition(
            "EXISTS (SELECT 1 FROM cases WHERE tenant_id = ? AND case_id = ?)",
        ))
    }
}

fn unavailable(e: impl std::fmt::Display) -> ToolError {
    ToolError::transient("STORE_UNAVAILABLE", e.to_string())
}

const REQUEST_COLUMNS: &str = "case_id, request_id, idempotency_key, document_codes, status";
const TRANSITION_COLUMNS: &str =
    "case_id, idempotency_key, from_status, to_status, from_version, to_version";

fn request_from(
    tenant: &str,
    r: &caseops_host::store::sql::Row,
) -> Result<DocumentRequest, ToolError> {
    let codes: String = r.get("document_codes").map_err(unavailable)?;
    Ok(DocumentRequest {
        tenant_id: tenant.into(),
        case_id: r.get("case_id").map_err(unavailable)?,
        request_id: r.get("request_id").map_err(unavailable)?,
        idempotency_key: r.get("idempotency_key").map_err(unavailable)?,
        document_codes: serde_json::from_str(&codes).map_err(|_| corrupt("document request"))?,
        status: r.get("status").map_err(unavailable)?,
    })
}

fn transition_from(
    tenant: &str,
    r: &caseops_host::store::sql::Row,
) -> Result<CaseTransition, ToolError> {
    Ok(CaseTransition {
        tenant_id: tenant.into(),
        case_id: r.get("case_id").map_err(unavailable)?,
        idempotency_key: r.get("idempotency_key").map_err(unavailable)?,
        from_status: r.get("from_status").map_err(unavailable)?,
        to_status: r.get("to_status").map_err(unavailable)?,
        from_version: r.get("from_version").map_err(unavailable)?,
        to_version: r.get("to_version").map_err(unavailable)?,
    })
}

const CASE_COLUMNS: &str = "c.version, c.status, c.policy_id, c.policy_version, c.received_codes";

/// The document columns of a row joined from `source_documents`; `None` when the
/// join found no document (its columns are NULL).
fn document_from(
    tenant: &str,
    case_id: &str,
    r: &Row,
) -> Result<Option<SourceDocument>, ToolError> {
    let Some(document_id) = r
        .get::<Option<String>>("document_id")
        .map_err(unavailable)?
    else {
        return Ok(None);
    };
    Ok(Some(SourceDocument {
        tenant_id: tenant.into(),
        case_id: case_id.into(),
        document_id,
        label: r.get("label").map_err(unavailable)?,
        code: r.get("code").map_err(unavailable)?,
        evidence_ref: r.get("evidence_ref").map_err(unavailable)?,
    }))
}

// Of several active rules for a label the one with the greatest `rule_version`
// applies, compared byte by byte as the memory repository compares strings:
// PostgreSQL would order by its database's collation, so it is told `"C"`.
macro_rules! document_rule {
    () => {
        "SELECT d.document_id, d.label, d.code, d.evidence_ref, a.code AS rule_code, a.rule_version, a.confidence FROM cases c \
         LEFT JOIN source_documents d ON d.tenant_id = c.tenant_id AND d.case_id = c.case_id AND d.document_id = ? \
         LEFT JOIN alias_rules a ON a.tenant_id = c.tenant_id AND a.label = d.label AND a.active = 1 \
         WHERE c.tenant_id = ? AND c.case_id = ?"
    };
}
macro_rules! alias_rule {
    () => {
        "SELECT a.code AS rule_code, a.rule_version, a.confidence FROM alias_rules a \
         WHERE a.tenant_id = ? AND a.label = ? AND a.active = 1"
    };
}
const DOCUMENT_RULE_SQLITE: &str =
    concat!(document_rule!(), " ORDER BY a.rule_version DESC LIMIT 1");
const DOCUMENT_RULE_POSTGRES: &str = concat!(
    document_rule!(),
    " ORDER BY a.rule_version COLLATE \"C\" DESC LIMIT 1"
);
const ALIAS_RULE_SQLITE: &str = concat!(alias_rule!(), " ORDER BY a.rule_version DESC LIMIT 1");
const ALIAS_RULE_POSTGRES: &str = concat!(
    alias_rule!(),
    " ORDER BY a.rule_version COLLATE \"C\" DESC LIMIT 1"
);

/// The active alias rule of a row's `rule_code`, `rule_version` and `confidence`
/// columns; `None` when they are NULL (a join that found no rule).
fn rule_from(tenant: &str, label: &str, r: &Row) -> Result<Option<AliasRule>, ToolError> {
    let Some(code) = r.get::<Option<String>>("rule_code").map_err(unavailable)? else {
        return Ok(None);
    };
    Ok(Some(AliasRule {
        tenant_id: tenant.into(),
        label: label.into(),
        code,
        rule_version: r.get("rule_version").map_err(unavailable)?,
        confidence: r.get("confidence").map_err(unavailable)?,
        active: true,
    }))
}

fn case_from(tenant: &str, case_id: &str, r: &Row) -> Result<Case, ToolError> {
    let received: String = r.get("received_codes").map_err(unavailable)?;
    Ok(Case {
        tenant_id: tenant.into(),
        case_id: case_id.into(),
        version: r.get("version").map_err(unavailable)?,
        status: r.get("status").map_err(unavailable)?,
        policy_id: r.get("policy_id").map_err(unavailable)?,
        policy_version: r.get("policy_version").map_err(unavailable)?,
        received_codes: serde_json::from_str(&received).map_err(|_| corrupt("case"))?,
    })
}

fn corrupt(what: &str) -> ToolError {
    ToolError::transient("STORE_CORRUPT", format!("unreadable {what} row"))
}

impl CaseRepository for SqlRepository {
    async fn case(&self, tenant: &str, case_id: &str) -> Result<Option<Case>, ToolError> {
        let row = self
            .db
            .fetch_optional(
                &format!(
                    "SELECT {CASE_COLUMNS} FROM cases c WHERE c.tenant_id = ? AND c.case_id = ?"
                ),
                &params![tenant, case_id],
            )
            .await
            .map_err(unavailable)?;
        row.map(|r| case_from(tenant, case_id, &r)).transpose()
    }

    // The case and what a tool reads with it, each in one statement (a join) instead
    // of two: on PostgreSQL every statement is a round trip.
    async fn case_policy(
        &self,
        tenant: &str,
        case_id: &str,
    ) -> Result<Option<(Case, Option<ClaimPolicy>)>, ToolError> {
        let row = self
            .db
            .fetch_optional(
                &format!(
                    "SELECT {CASE_COLUMNS}, p.required FROM cases c LEFT JOIN claim_policies p \
                     ON p.tenant_id = c.tenant_id AND p.policy_id = c.policy_id AND p.version = c.policy_version \
                     WHERE c.tenant_id = ? AND c.case_id = ?"
                ),
                &params![tenant, case_id],
            )
            .await
            .map_err(unavailable)?;
        let Some(r) = row else { return Ok(None) };
        let case = case_from(tenant, case_id, &r)?;
        let required: Option<String> = r.get("required").map_err(unavailable)?;
        let policy = required
            .map(|required| {
                Ok::<_, ToolError>(ClaimPolicy {
                    tenant_id: tenant.into(),
                    policy_id: case.policy_id.clone(),
                    version: case.policy_version.clone(),
                    required: serde_json::from_str(&required).map_err(|_| corrupt("policy"))?,
                })
            })
            .transpose()?;
        Ok(Some((case, policy)))
    }

    async fn case_documents(
        &self,
        tenant: &str,
        case_id: &str,
    ) -> Result<Option<(Case, Vec<SourceDocument>)>, ToolError> {
        let rows = self
            .db
            .fetch_all(
                &format!(
                    "SELECT {CASE_COLUMNS}, d.document_id, d.label, d.code, d.evidence_ref FROM cases c \
                     LEFT JOIN source_documents d ON d.tenant_id = c.tenant_id AND d.case_id = c.case_id \
                     WHERE c.tenant_id = ? AND c.case_id = ? ORDER BY d.document_id"
                ),
                &params![tenant, case_id],
            )
            .await
            .map_err(unavailable)?;
        let Some(first) = rows.first() else {
            return Ok(None);
        };
        let case = case_from(tenant, case_id, first)?;
        let mut documents = Vec::with_capacity(rows.len());
        for r in &rows {
            // A case without documents is one row whose document columns are NULL.
            documents.extend(document_from(tenant, case_id, r)?);
        }
        Ok(Some((case, documents)))
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
        let mut documents = Vec::with_capacity(rows.len());
        for r in &rows {
            documents.extend(document_from(tenant, case_id, r)?);
        }
        Ok(documents)
    }

    async fn request_documents(
        &self,
        request: &DocumentRequest,
    ) -> Result<DocumentRequest, ToolError> {
        let codes = serde_json::to_string(&request.document_codes).expect("serializes");
        let mut tx = self.db.begin_write().await.map_err(unavailable)?;
        tx.execute("INSERT INTO document_requests (tenant_id, idempotency_key, case_id, request_id, document_codes, status, created_at) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING", &params![&request.tenant_id, &request.idempotency_key, &request.case_id, &request.request_id, &codes, &request.status, caseops_host::store::now_ms()])
            .await
            .map_err(unavailable)?;
        let row = tx
            .fetch_optional(
                &format!("SELECT {REQUEST_COLUMNS} FROM document_requests WHERE tenant_id = ? AND idempotency_key = ?"),
                &params![&request.tenant_id, &request.idempotency_key],
            )
            .await
            .map_err(unavailable)?
            .ok_or_else(|| corrupt("document request"))?;
        tx.commit().await.map_err(unavailable)?;
        request_from(&request.tenant_id, &row)
    }

    async fn document_requests(
        &self,
        tenant: &str,
        case_id: &str,
    ) -> Result<Vec<DocumentRequest>, ToolError> {
        let rows = self.db.fetch_all(&format!("SELECT {REQUEST_COLUMNS} FROM document_requests WHERE tenant_id = ? AND case_id = ? ORDER BY created_at, request_id"), &params![tenant, case_id])
            .await
            .map_err(unavailable)?;
        rows.iter().map(|r| request_from(tenant, r)).collect()
    }

    async fn transition_case(&self, t: &CaseTransition) -> Result<CaseTransition, ToolError> {
        let mut tx = self.db.begin_write().await.map_err(unavailable)?;
        let first = tx
            .fetch_optional(
                &format!("SELECT {TRANSITION_COLUMNS} FROM case_transitions WHERE tenant_id = ? AND idempotency_key = ?"),
                &params![&t.tenant_id, &t.idempotency_key],
            )
            .await
            .map_err(unavailable)?;
        if let Some(row) = first {
            return transition_from(&t.tenant_id, &row);
        }
        // The status and version guard makes the move happen at most once even
        // without the key: a second move finds the case moved on.
        let moved = tx
            .execute(
                "UPDATE cases SET status = ?, version = ? WHERE tenant_id = ? AND case_id = ? AND status = ? AND version = ?",
                &params![&t.to_status, t.to_version, &t.tenant_id, &t.case_id, &t.from_status, t.from_version],
            )
            .await
            .map_err(unavailable)?;
        if moved != 1 {
            drop(tx);
            let case = self
                .case(&t.tenant_id, &t.case_id)
                .await?
                .ok_or_else(crate::tools::case_not_found)?;
            return Err(crate::tools::status_changed(&case));
        }
        tx.execute("INSERT INTO case_transitions (tenant_id, idempotency_key, case_id, from_status, to_status, from_version, to_version, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)", &params![&t.tenant_id, &t.idempotency_key, &t.case_id, &t.from_status, &t.to_status, t.from_version, t.to_version, caseops_host::store::now_ms()])
            .await
            .map_err(unavailable)?;
        tx.commit().await.map_err(unavailable)?;
        Ok(t.clone())
    }

    async fn case_transitions(
        &self,
        tenant: &str,
        case_id: &str,
    ) -> Result<Vec<CaseTransition>, ToolError> {
        let rows = self.db.fetch_all(&format!("SELECT {TRANSITION_COLUMNS} FROM case_transitions WHERE tenant_id = ? AND case_id = ? ORDER BY created_at, to_version"), &params![tenant, case_id])
            .await
            .map_err(unavailable)?;
        rows.iter().map(|r| transition_from(tenant, r)).collect()
    }

    /// The case's row, its one document and that document's newest active rule in
    /// one statement: the alias tool's read was two round trips.
    async fn document_rule(
        &self,
        tenant: &str,
        case_id: &str,
        document_id: &str,
    ) -> Result<Option<DocumentRule>, ToolError> {
        // A case with the document and several active rules for its label gives a
        // row per rule, none of them NULL: the newest is first. Without a rule or a
        // document it is one row with those columns NULL.
        let row = self
            .db
            .fetch_optional(
                match self.db.dialect {
                    Dialect::Postgres => DOCUMENT_RULE_POSTGRES,
                    Dialect::Sqlite => DOCUMENT_RULE_SQLITE,
                },
                &params![document_id, tenant, case_id],
            )
            .await
            .map_err(unavailable)?;
        let Some(r) = row else { return Ok(None) };
        let Some(document) = document_from(tenant, case_id, &r)? else {
            return Ok(Some((None, None)));
        };
        let rule = rule_from(tenant, &document.label, &r)?;
        Ok(Some((Some(document), rule)))
    }

    async fn alias_rule(&self, tenant: &str, label: &str) -> Result<Option<AliasRule>, ToolError> {
        let sql = match self.db.dialect {
            Dialect::Postgres => ALIAS_RULE_POSTGRES,
            Dialect::Sqlite => ALIAS_RULE_SQLITE,
        };
        let row = self
            .db
            .fetch_optional(sql, &params![tenant, label])
            .await
            .map_err(unavailable)?;
        match row {
            Some(r) => rule_from(tenant, label, &r),
            None => Ok(None),
        }
    }
}
