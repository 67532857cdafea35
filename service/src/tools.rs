//! The CaseOps tools, implementing the generated `ToolHandlers` trait.
//! Every lookup is tenant-scoped: a case of another tenant is exactly as absent as a
//! case that does not exist.

use std::future::Future;
use std::sync::Arc;

use caseops_generated::tools::*;
use caseops_runtime::fingerprint::{canonical_json, sha256_hex};
use caseops_runtime::handler::idempotency_key;
use caseops_runtime::{CallContext, ToolError};
use serde_json::json;

use crate::domain::{
    AliasRule, Case, CaseTransition, ClaimPolicy, DocumentRequest, READY_FOR_ASSESSMENT,
    ReferenceData, SourceDocument, WAITING_FOR_DOCUMENTS,
};

/// Where the tools read from and write to (memory here; SQL in the durable host).
///
/// Writes are made once per idempotency key: a retried, resumed or reconciled call
/// gets the first effect back and acts only once.
pub trait CaseRepository: Send + Sync {
    /// Records `request` unless one with its key exists; returns the one recorded first.
    fn request_documents(
        &self,
        request: &DocumentRequest,
    ) -> impl Future<Output = Result<DocumentRequest, ToolError>> + Send;
    /// The document requests made for a case, oldest first.
    fn document_requests(
        &self,
        tenant: &str,
        case_id: &str,
    ) -> impl Future<Output = Result<Vec<DocumentRequest>, ToolError>> + Send;
    /// Moves the case as `transition` says unless a transition with its key exists
    /// (then returns that one). `CASE_STATUS_CHANGED` when the case is no longer in
    /// `from_status` at `from_version`.
    fn transition_case(
        &self,
        transition: &CaseTransition,
    ) -> impl Future<Output = Result<CaseTransition, ToolError>> + Send;
    /// The tool-made status transitions of a case, oldest first.
    fn case_transitions(
        &self,
        tenant: &str,
        case_id: &str,
    ) -> impl Future<Output = Result<Vec<CaseTransition>, ToolError>> + Send;
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
    /// The case and its policy (`None` beside the case when the policy is missing).
    /// A repository that can read both at once (one SQL join) says so here.
    fn case_policy(
        &self,
        tenant: &str,
        case_id: &str,
    ) -> impl Future<Output = Result<Option<(Case, Option<ClaimPolicy>)>, ToolError>> + Send {
        async move {
            let Some(case) = self.case(tenant, case_id).await? else {
                return Ok(None);
            };
            let policy = self
                .policy(tenant, &case.policy_id, &case.policy_version)
                .await?;
            Ok(Some((case, policy)))
        }
    }
    /// The case and its documents, like [`CaseRepository::case_policy`].
    fn case_documents(
        &self,
        tenant: &str,
        case_id: &str,
    ) -> impl Future<Output = Result<Option<(Case, Vec<SourceDocument>)>, ToolError>> + Send {
        async move {
            let Some(case) = self.case(tenant, case_id).await? else {
                return Ok(None);
            };
            let documents = self.documents(tenant, case_id).await?;
            Ok(Some((case, documents)))
        }
    }
    /// One document of a case and the active alias rule for its label: `None` when
    /// the case is missing, the document `None` when the case has no such one. A
    /// repository that can read it all at once (one SQL join) says so here.
    fn document_rule(
        &self,
        tenant: &str,
        case_id: &str,
        document_id: &str,
    ) -> impl Future<Output = Result<Option<DocumentRule>, ToolError>> + Send {
        async move {
            let Some((_, documents)) = self.case_documents(tenant, case_id).await? else {
                return Ok(None);
            };
            let Some(document) = documents.into_iter().find(|d| d.document_id == document_id)
            else {
                return Ok(Some((None, None)));
            };
            let rule = self.alias_rule(tenant, &document.label).await?;
            Ok(Some((Some(document), rule)))
        }
    }
}

/// A case's document (if it has it) and the alias rule for its label (if any).
pub type DocumentRule = (Option<SourceDocument>, Option<AliasRule>);

/// What the write tools did, in memory.
#[derive(Debug, Default)]
pub struct Writes {
    pub requests: Vec<DocumentRequest>,
    pub transitions: Vec<CaseTransition>,
}

/// Reference data held in memory, and the effects of writes, for this process.
#[derive(Debug, Clone, Default)]
pub struct MemoryRepository(pub Arc<ReferenceData>, pub Arc<std::sync::Mutex<Writes>>);

impl MemoryRepository {
    pub fn new(data: ReferenceData) -> Self {
        Self(Arc::new(data), Default::default())
    }

    fn writes(&self) -> std::sync::MutexGuard<'_, Writes> {
        self.1.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl CaseRepository for MemoryRepository {
    async fn request_documents(
        &self,
        request: &DocumentRequest,
    ) -> Result<DocumentRequest, ToolError> {
        let mut writes = self.writes();
        let same = |r: &&DocumentRequest| {
            r.tenant_id == request.tenant_id && r.idempotency_key == request.idempotency_key
        };
        if let Some(first) = writes.requests.iter().find(same) {
            return Ok(first.clone());
        }
        writes.requests.push(request.clone());
        Ok(request.clone())
    }

    async fn document_requests(
        &self,
        tenant: &str,
        case_id: &str,
    ) -> Result<Vec<DocumentRequest>, ToolError> {
        Ok(self
            .writes()
            .requests
            .iter()
            .filter(|r| r.tenant_id == tenant && r.case_id == case_id)
            .cloned()
            .collect())
    }

    async fn transition_case(
        &self,
        transition: &CaseTransition,
    ) -> Result<CaseTransition, ToolError> {
        let case = self
            .case(&transition.tenant_id, &transition.case_id)
            .await?
            .ok_or_else(case_not_found)?;
        let mut writes = self.writes();
        let same = |t: &&CaseTransition| {
            t.tenant_id == transition.tenant_id && t.idempotency_key == transition.idempotency_key
        };
        if let Some(first) = writes.transitions.iter().find(same) {
            return Ok(first.clone());
        }
        if case.status != transition.from_status || case.version != transition.from_version {
            return Err(status_changed(&case));
        }
        writes.transitions.push(transition.clone());
        Ok(transition.clone())
    }

    async fn case_transitions(
        &self,
        tenant: &str,
        case_id: &str,
    ) -> Result<Vec<CaseTransition>, ToolError> {
        Ok(self
            .writes()
            .transitions
            .iter()
            .filter(|t| t.tenant_id == tenant && t.case_id == case_id)
            .cloned()
            .collect())
    }

    async fn case(&self, tenant: &str, case_id: &str) -> Result<Option<Case>, ToolError> {
        let Some(mut case) = self
            .0
            .cases
            .iter()
            .find(|c| c.tenant_id == tenant && c.case_id == case_id)
            .cloned()
        else {
            return Ok(None);
        };
        let writes = self.writes();
        for t in writes
            .transitions
            .iter()
            .filter(|t| t.tenant_id == tenant && t.case_id == case_id)
        {
            case.status = t.to_status.clone();
            case.version = t.to_version;
        }
        Ok(Some(case))
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
            .filter(|r| r.tenant_id == tenant && r.label == label && r.active)
            .max_by(|a, b| a.rule_version.cmp(&b.rule_version))
            .cloned())
    }
}

/// What a case transition reports; the moved case at its new version is the evidence.
fn transition_output(t: CaseTransition) -> CaseopsMarkCaseReadyForAssessmentOutput {
    CaseopsMarkCaseReadyForAssessmentOutput {
        evidence_ref: format!("case://{}@{}", t.case_id, t.to_version),
        case_id: t.case_id,
        status: t.to_status,
        case_version: t.to_version,
        previous_version: t.from_version,
    }
}

/// Where a document request is cited from.
fn request_ref(r: &DocumentRequest) -> String {
    format!("request://{}/{}", r.case_id, r.request_id)
}

/// A stored status as its generated enum.
fn decode_enum<T: serde::de::DeserializeOwned>(value: &str) -> Result<T, ToolError> {
    serde_json::from_value(json!(value))
        .map_err(|_| ToolError::transient("STORE_CORRUPT", format!("unknown status `{value}`")))
}

/// SHA-256 of the canonical JSON of an evidence record.
fn digest(record: &serde_json::Value) -> String {
    sha256_hex(canonical_json(record).as_bytes())
}

/// The same error for "no such case" and "another tenant's case".
pub(crate) fn case_not_found() -> ToolError {
    ToolError::business("CASE_NOT_FOUND", "case not found")
}

/// A transition's expected status or version is no longer the case's.
pub(crate) fn status_changed(case: &Case) -> ToolError {
    ToolError::business(
        "CASE_STATUS_CHANGED",
        format!(
            "the case is `{}` at version {} now",
            case.status, case.version
        ),
    )
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

    async fn case_policy(
        &self,
        ctx: &CallContext,
        case_id: &str,
    ) -> Result<(Case, ClaimPolicy), ToolError> {
        let (case, policy) = self
            .repo
            .case_policy(&ctx.tenant_id, case_id)
            .await?
            .ok_or_else(case_not_found)?;
        let policy = policy.ok_or_else(|| {
            ToolError::business("POLICY_NOT_FOUND", "the case's policy is not available")
        })?;
        Ok((case, policy))
    }

    async fn case_documents(
        &self,
        ctx: &CallContext,
        case_id: &str,
    ) -> Result<(Case, Vec<SourceDocument>), ToolError> {
        self.repo
            .case_documents(&ctx.tenant_id, case_id)
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
        let (_, policy) = self.case_policy(ctx, &input.case_id).await?;
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
        let (case, docs) = self.case_documents(ctx, &input.case_id).await?;
        let docs: Vec<SourceDocument> = docs.into_iter().filter(|d| d.code.is_none()).collect();
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
        let (doc, rule) = self
            .repo
            .document_rule(&ctx.tenant_id, &input.case_id, &input.document_id)
            .await?
            .ok_or_else(case_not_found)?;
        let doc =
            doc.ok_or_else(|| ToolError::business("DOCUMENT_NOT_FOUND", "document not found"))?;
        Ok(CaseopsResolveDocumentAliasOutput {
            document_id: doc.document_id,
            resolved: rule.is_some(),
            canonical_code: rule.as_ref().map(|r| r.code.clone()),
            rule_version: rule.as_ref().map(|r| r.rule_version.clone()),
            confidence: rule.as_ref().map(|r| r.confidence),
            evidence_ref: doc.evidence_ref,
        })
    }

    async fn caseops_request_missing_documents(
        &self,
        ctx: &CallContext,
        input: CaseopsRequestMissingDocumentsInput,
        trusted: CaseopsRequestMissingDocumentsTrusted,
    ) -> Result<CaseopsRequestMissingDocumentsOutput, ToolError> {
        let (case, policy) = self.case_policy(ctx, &input.case_id).await?;
        if let Some(code) = input
            .document_codes
            .iter()
            .find(|c| !policy.required.iter().any(|(r, _)| r == *c))
        {
            return Err(ToolError::business(
                "DOCUMENT_NOT_REQUIRED",
                format!("the case's policy does not require `{code}`"),
            ));
        }
        let key = trusted.idempotency_key;
        let request = DocumentRequest {
            tenant_id: ctx.tenant_id.clone(),
            request_id: format!("REQ-{}", key.get(..12).unwrap_or(&key).to_uppercase()),
            case_id: case.case_id,
            idempotency_key: key,
            document_codes: input.document_codes,
            status: "requested".into(),
        };
        let first = self.repo.request_documents(&request).await?;
        Ok(CaseopsRequestMissingDocumentsOutput {
            evidence_ref: request_ref(&first),
            status: decode_enum(&first.status)?,
            request_id: first.request_id,
            case_id: first.case_id,
            document_codes: first.document_codes,
        })
    }

    async fn caseops_mark_case_ready_for_assessment(
        &self,
        ctx: &CallContext,
        input: CaseopsMarkCaseReadyForAssessmentInput,
        trusted: CaseopsMarkCaseReadyForAssessmentTrusted,
    ) -> Result<CaseopsMarkCaseReadyForAssessmentOutput, ToolError> {
        let case = self.case(ctx, &input.case_id).await?;
        let case_now = case.clone();
        let transition = CaseTransition {
            tenant_id: ctx.tenant_id.clone(),
            case_id: case.case_id,
            idempotency_key: trusted.idempotency_key,
            from_status: WAITING_FOR_DOCUMENTS.into(),
            to_status: READY_FOR_ASSESSMENT.into(),
            from_version: input.case_version,
            // A version no case has (the largest integer) cannot move; never overflow.
            to_version: input
                .case_version
                .checked_add(1)
                .ok_or_else(|| status_changed(&case_now))?,
        };
        let made = self.repo.transition_case(&transition).await?;
        Ok(transition_output(made))
    }

    async fn caseops_find_case_transition(
        &self,
        ctx: &CallContext,
        input: CaseopsFindCaseTransitionInput,
    ) -> Result<CaseopsFindCaseTransitionOutput, ToolError> {
        let case = self.case(ctx, &input.case_id).await?;
        // The key the transition tool was given for the same arguments.
        let key = idempotency_key(
            &ctx.tenant_id,
            ToolId::CaseopsMarkCaseReadyForAssessment.contract(),
            &json!({ "case_id": input.case_id, "case_version": input.case_version }),
        );
        let found = self
            .repo
            .case_transitions(&ctx.tenant_id, &case.case_id)
            .await?
            .into_iter()
            .find(|t| Some(&t.idempotency_key) == key.as_ref());
        Ok(match found {
            Some(t) => {
                let out = transition_output(t);
                CaseopsFindCaseTransitionOutput {
                    found: true,
                    case_id: Some(out.case_id),
                    status: Some(out.status),
                    case_version: Some(out.case_version),
                    previous_version: Some(out.previous_version),
                    evidence_ref: out.evidence_ref,
                }
            }
            None => CaseopsFindCaseTransitionOutput {
                found: false,
                case_id: None,
                status: None,
                case_version: None,
                previous_version: None,
                evidence_ref: format!("case://{}@{}", case.case_id, case.version),
            },
        })
    }

    async fn caseops_find_document_request(
        &self,
        ctx: &CallContext,
        input: CaseopsFindDocumentRequestInput,
    ) -> Result<CaseopsFindDocumentRequestOutput, ToolError> {
        let case = self.case(ctx, &input.case_id).await?;
        // The key the request tool was given for the same arguments.
        let key = idempotency_key(
            &ctx.tenant_id,
            ToolId::CaseopsRequestMissingDocuments.contract(),
            &json!({ "case_id": input.case_id, "document_codes": input.document_codes }),
        );
        let found = self
            .repo
            .document_requests(&ctx.tenant_id, &case.case_id)
            .await?
            .into_iter()
            .find(|r| Some(&r.idempotency_key) == key.as_ref());
        Ok(match found {
            Some(r) => CaseopsFindDocumentRequestOutput {
                found: true,
                evidence_ref: request_ref(&r),
                status: Some(decode_enum(&r.status)?),
                request_id: Some(r.request_id),
                case_id: Some(r.case_id),
                document_codes: Some(r.document_codes),
            },
            None => CaseopsFindDocumentRequestOutput {
                found: false,
                evidence_ref: format!("case://{}@{}", case.case_id, case.version),
                status: None,
                request_id: None,
                case_id: None,
                document_codes: None,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn marking_a_case_at_the_largest_version_is_refused_not_overflowed() {
        let tools = CaseOpsTools {
            repo: MemoryRepository::new(crate::domain::reference_data()),
        };
        let ctx = CallContext {
            tenant_id: "tenant-demo".into(),
            ..Default::default()
        };
        let err = tools
            .caseops_mark_case_ready_for_assessment(
                &ctx,
                CaseopsMarkCaseReadyForAssessmentInput {
                    case_id: "C-104".into(),
                    case_version: i64::MAX,
                },
                CaseopsMarkCaseReadyForAssessmentTrusted {
                    idempotency_key: "key-1".into(),
                },
            )
            .await
            .unwrap_err();
        assert!(err.to_string().contains("CASE_STATUS_CHANGED"), "{err}");
        let moved = tools
            .repo
            .case("tenant-demo", "C-104")
            .await
            .unwrap()
            .unwrap();
        assert_eq!(moved.version, 1, "the case did not move");
    }
}
