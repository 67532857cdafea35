//! The four read-only CaseOps tools, implementing the generated `ToolHandlers` trait.
//! Every lookup is tenant-scoped: a case of another tenant is exactly as absent as a
//! case that does not exist.

use std::future::Future;
use std::sync::Arc;

use caseops_generated::tools::*;
use caseops_runtime::fingerprint::{canonical_json, sha256_hex};
use caseops_runtime::{CallContext, ToolError};
use serde_json::json;

use crate::domain::{AliasRule, Case, ClaimPolicy, ReferenceData, SourceDocument};

/// One effect of a write tool, recorded once per idempotency key.
#[derive(Debug, Clone, Copy)]
pub struct Effect<'a> {
    pub tenant: &'a str,
    pub case_id: &'a str,
    pub tool: &'a str,
    /// The call's idempotency key (its trusted `idempotency_key` field).
    pub key: &'a str,
    /// What the effect was, as the tool reports it.
    pub payload: &'a serde_json::Value,
}

/// Where the tools read from and write to (memory here; SQL in the durable host).
pub trait CaseRepository: Send + Sync {
    /// Records `effect` unless one with its key exists, and returns the effect
    /// recorded first: a retried or resumed write gets its first result back and
    /// acts only once.
    fn apply_once(
        &self,
        effect: Effect<'_>,
    ) -> impl Future<Output = Result<serde_json::Value, ToolError>> + Send;
    fn case(
        &self,
        tenant: &str,
        case_id: &str,
    ) -> impl Future<Output = Result<Option<Case>, ToolError>> + Send;
    fn policy(
        &self,
        tenant: &str,
        policy_id: &str,
        version: &str,
    ) -> impl Future<Output = Result<Option<ClaimPolicy>, ToolError>> + Send;
    fn documents(
        &self,
        tenant: &str,
        case_id: &str,
    ) -> impl Future<Output = Result<Vec<SourceDocument>, ToolError>> + Send;
    fn alias_rule(
        &self,
        tenant: &str,
        label: &str,
    ) -> impl Future<Output = Result<Option<AliasRule>, ToolError>> + Send;
}

/// Reference data held in memory (and the effects of writes, for this process).
#[derive(Debug, Clone, Default)]
pub struct MemoryRepository(
    pub Arc<ReferenceData>,
    pub Arc<std::sync::Mutex<std::collections::HashMap<(String, String), serde_json::Value>>>,
);

impl MemoryRepository {
    pub fn new(data: ReferenceData) -> Self {
        Self(Arc::new(data), Default::default())
    }
}

impl CaseRepository for MemoryRepository {
    async fn apply_once(&self, effect: Effect<'_>) -> Result<serde_json::Value, ToolError> {
        let mut effects = self.1.lock().unwrap_or_else(|e| e.into_inner());
        Ok(effects
            .entry((effect.tenant.to_string(), effect.key.to_string()))
            .or_insert_with(|| effect.payload.clone())
            .clone())
    }

    async fn case(&self, tenant: &str, case_id: &str) -> Result<Option<Case>, ToolError> {
        Ok(self
            .0
            .cases
            .iter()
            .find(|c| c.tenant_id == tenant && c.case_id == case_id)
            .cloned())
    }
    async fn policy(
        &self,
        tenant: &str,
        policy_id: &str,
        version: &str,
    ) -> Result<Option<ClaimPolicy>, ToolError> {
        Ok(self
            .0
            .policies
            .iter()
            .find(|p| p.tenant_id == tenant && p.policy_id == policy_id && p.version == version)
            .cloned())
    }
    async fn documents(
        &self,
        tenant: &str,
        case_id: &str,
    ) -> Result<Vec<SourceDocument>, ToolError> {
        Ok(self
            .0
            .documents
            .iter()
            .filter(|d| d.tenant_id == tenant && d.case_id == case_id)
            .cloned()
            .collect())
    }
    async fn alias_rule(&self, tenant: &str, label: &str) -> Result<Option<AliasRule>, ToolError> {
        Ok(self
            .0
            .alias_rules
            .iter()
            .find(|r| r.tenant_id == tenant && r.label == label && r.active)
            .cloned())
    }
}

/// SHA-256 of the canonical JSON of an evidence record.
fn digest(record: &serde_json::Value) -> String {
    sha256_hex(canonical_json(record).as_bytes())
}

/// The same error for "no such case" and "another tenant's case".
fn case_not_found() -> ToolError {
    ToolError::business("CASE_NOT_FOUND", "case not found")
}

pub struct CaseOpsTools<R> {
    pub repo: R,
}

impl<R: CaseRepository> CaseOpsTools<R> {
    async fn case(&self, ctx: &CallContext, case_id: &str) -> Result<Case, ToolError> {
        self.repo
            .case(&ctx.tenant_id, case_id)
            .await?
            .ok_or_else(case_not_found)
    }
}

impl<R: CaseRepository> ToolHandlers for CaseOpsTools<R> {
    async fn caseops_get_case_snapshot(
        &self,
        ctx: &CallContext,
        input: CaseopsGetCaseSnapshotInput,
    ) -> Result<CaseopsGetCaseSnapshotOutput, ToolError> {
        let case = self.case(ctx, &input.case_id).await?;
        let mut received = case.received_codes.clone();
        received.sort();
        Ok(CaseopsGetCaseSnapshotOutput {
            evidence_sha256: digest(&json!(case)),
            evidence_ref: format!("case://{}@{}", case.case_id, case.version),
            case_id: case.case_id,
            case_version: case.version,
            status: case.status,
            policy_id: case.policy_id,
            policy_version: case.policy_version,
            received_document_codes: received,
        })
    }

    async fn caseops_get_policy_requirements(
        &self,
        ctx: &CallContext,
        input: CaseopsGetPolicyRequirementsInput,
    ) -> Result<CaseopsGetPolicyRequirementsOutput, ToolError> {
        let case = self.case(ctx, &input.case_id).await?;
        let policy = self
            .repo
            .policy(&ctx.tenant_id, &case.policy_id, &case.policy_version)
            .await?
            .ok_or_else(|| {
                ToolError::business("POLICY_NOT_FOUND", "the case's policy is not available")
            })?;
        Ok(CaseopsGetPolicyRequirementsOutput {
            evidence_sha256: digest(&json!(policy)),
            evidence_ref: format!("policy://{}@{}", policy.policy_id, policy.version),
            policy_id: policy.policy_id,
            policy_version: policy.version,
            required_documents: policy
                .required
                .into_iter()
                .map(
                    |(code, label)| CaseopsGetPolicyRequirementsOutputRequiredDocumentsItem {
                        code,
                        label,
                    },
                )
                .collect(),
        })
    }

    async fn caseops_list_unclassified_documents(
        &self,
        ctx: &CallContext,
        input: CaseopsListUnclassifiedDocumentsInput,
    ) -> Result<CaseopsListUnclassifiedDocumentsOutput, ToolError> {
        let case = self.case(ctx, &input.case_id).await?;
        let docs: Vec<SourceDocument> = self
            .repo
            .documents(&ctx.tenant_id, &case.case_id)
            .await?
            .into_iter()
            .filter(|d| d.code.is_none())
            .collect();
        Ok(CaseopsListUnclassifiedDocumentsOutput {
            evidence_sha256: digest(&json!(docs)),
            evidence_ref: format!(
                "case://{}@{}/unclassified-documents",
                case.case_id, case.version
            ),
            case_id: case.case_id,
            documents: docs
                .into_iter()
                .map(|d| CaseopsListUnclassifiedDocumentsOutputDocumentsItem {
                    document_id: d.document_id,
                    label: d.label,
                    evidence_ref: d.evidence_ref,
                })
                .collect(),
        })
    }

    async fn caseops_resolve_document_alias(
        &self,
        ctx: &CallContext,
        input: CaseopsResolveDocumentAliasInput,
    ) -> Result<CaseopsResolveDocumentAliasOutput, ToolError> {
        let case = self.case(ctx, &input.case_id).await?;
        let doc = self
            .repo
            .documents(&ctx.tenant_id, &case.case_id)
            .await?
            .into_iter()
            .find(|d| d.document_id == input.document_id)
            .ok_or_else(|| ToolError::business("DOCUMENT_NOT_FOUND", "document not found"))?;
        let rule = self.repo.alias_rule(&ctx.tenant_id, &doc.label).await?;
        Ok(CaseopsResolveDocumentAliasOutput {
            document_id: doc.document_id,
            resolved: rule.is_some(),
            canonical_code: rule.as_ref().map(|r| r.code.clone()),
            rule_version: rule.as_ref().map(|r| r.rule_version.clone()),
            confidence: rule.as_ref().map(|r| r.confidence),
            evidence_ref: doc.evidence_ref,
        })
    }
}
