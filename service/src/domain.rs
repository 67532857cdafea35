//! The CaseOps reference data: tenants, a claim policy, cases C-102 (complete once a
//! document label is normalized), C-103 (lacks a document) and C-104 (complete), their
//! source documents and the alias rule that normalizes C-102's label; and the records
//! the write tools make.

use serde::{Deserialize, Serialize};

pub const DEMO_TENANT: &str = "tenant-demo";
/// A second tenant, for boundary tests: it has a case with the same id.
pub const OTHER_TENANT: &str = "tenant-other";

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClaimPolicy {
    pub tenant_id: String,
    pub policy_id: String,
    pub version: String,
    /// `(code, label)` of each required document.
    pub required: Vec<(String, String)>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Case {
    pub tenant_id: String,
    pub case_id: String,
    pub version: i64,
    pub status: String,
    pub policy_id: String,
    pub policy_version: String,
    pub received_codes: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceDocument {
    pub tenant_id: String,
    pub case_id: String,
    pub document_id: String,
    pub label: String,
    /// `None` until the label is normalized to a document code.
    pub code: Option<String>,
    pub evidence_ref: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AliasRule {
    pub tenant_id: String,
    pub label: String,
    pub code: String,
    pub rule_version: String,
    pub confidence: f64,
    pub active: bool,
}

/// A request to the claimant for documents a case lacks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DocumentRequest {
    pub tenant_id: String,
    pub case_id: String,
    pub request_id: String,
    /// The business idempotency key the platform derived for the call that made it.
    pub idempotency_key: String,
    pub document_codes: Vec<String>,
    /// `requested` or `cancelled`.
    pub status: String,
}

/// A case's move from one status to the next, made by a tool.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CaseTransition {
    pub tenant_id: String,
    pub case_id: String,
    pub idempotency_key: String,
    pub from_status: String,
    pub to_status: String,
    pub from_version: i64,
    pub to_version: i64,
}

/// The status a case waits in until its documents are complete.
pub const WAITING_FOR_DOCUMENTS: &str = "waiting_for_documents";
/// The status that hands a case to the assessors.
pub const READY_FOR_ASSESSMENT: &str = "ready_for_assessment";

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ReferenceData {
    pub policies: Vec<ClaimPolicy>,
    pub cases: Vec<Case>,
    pub documents: Vec<SourceDocument>,
    pub alias_rules: Vec<AliasRule>,
}

/// The data every demo and test starts from.
pub fn reference_data() -> ReferenceData {
    let policy = |tenant: &str| ClaimPolicy {
        tenant_id: tenant.into(),
        policy_id: "motor-claim-standard".into(),
        version: "2026.1".into(),
        required: vec![
            ("LOSS_STATEMENT".into(), "Loss statement".into()),
            ("IDENTITY_DOCUMENT".into(), "Identity document".into()),
            ("ACCIDENT_CERTIFICATE".into(), "Accident certificate".into()),
        ],
    };
    ReferenceData {
        policies: vec![policy(DEMO_TENANT), policy(OTHER_TENANT)],
        cases: vec![
            Case {
                tenant_id: DEMO_TENANT.into(),
                case_id: "C-102".into(),
                version: 7,
                status: "waiting_for_documents".into(),
                policy_id: "motor-claim-standard".into(),
                policy_version: "2026.1".into(),
                received_codes: vec!["LOSS_STATEMENT".into(), "IDENTITY_DOCUMENT".into()],
            },
            // Lacks the accident certificate; its one unclassified document is a repair
            // quote no alias rule resolves.
            Case {
                tenant_id: DEMO_TENANT.into(),
                case_id: "C-103".into(),
                version: 3,
                status: WAITING_FOR_DOCUMENTS.into(),
                policy_id: "motor-claim-standard".into(),
                policy_version: "2026.1".into(),
                received_codes: vec!["LOSS_STATEMENT".into(), "IDENTITY_DOCUMENT".into()],
            },
            // Holds every required document: ready for assessment once approved.
            Case {
                tenant_id: DEMO_TENANT.into(),
                case_id: "C-104".into(),
                version: 1,
                status: WAITING_FOR_DOCUMENTS.into(),
                policy_id: "motor-claim-standard".into(),
                policy_version: "2026.1".into(),
                received_codes: vec![
                    "LOSS_STATEMENT".into(),
                    "IDENTITY_DOCUMENT".into(),
                    "ACCIDENT_CERTIFICATE".into(),
                ],
            },
            // Another tenant's case with an id the demo tenant might guess.
            Case {
                tenant_id: OTHER_TENANT.into(),
                case_id: "C-555".into(),
                version: 1,
                status: "open".into(),
                policy_id: "motor-claim-standard".into(),
                policy_version: "2026.1".into(),
                received_codes: vec![],
            },
        ],
        documents: vec![
            SourceDocument {
                tenant_id: DEMO_TENANT.into(),
                case_id: "C-102".into(),
                document_id: "DOC-C102-003".into(),
                label: "道路交通事故认定书".into(),
                code: None,
                evidence_ref: "evidence://C-102/DOC-C102-003@1".into(),
            },
            SourceDocument {
                tenant_id: DEMO_TENANT.into(),
                case_id: "C-103".into(),
                document_id: "DOC-C103-003".into(),
                label: "车辆维修报价单".into(),
                code: None,
                evidence_ref: "evidence://C-103/DOC-C103-003@1".into(),
            },
        ],
        alias_rules: vec![AliasRule {
            tenant_id: DEMO_TENANT.into(),
            label: "道路交通事故认定书".into(),
            code: "ACCIDENT_CERTIFICATE".into(),
            rule_version: "2026.1".into(),
            confidence: 1.0,
            active: true,
        }],
    }
}
