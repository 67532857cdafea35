//! `ConformancePlanner`: a deterministic protocol driver for the CaseOps
//! investigations (C-102, C-103, C-104). It is not an agent: it walks a fixed order
//! (snapshot → policy → unclassified documents → resolve each one → request the
//! documents still missing, or mark a complete case ready for assessment, when
//! that tool is offered → final answer computed from the observations) and exists to prove the control plane end to end without a model.

use caseops_generated::ToolId;
use caseops_runtime::context::PlannerView;
use caseops_runtime::{Planner, PlannerError};

use crate::findings::Findings;
use serde_json::{Value, json};

#[derive(Debug, Clone, Copy, Default)]
pub struct ConformancePlanner;

fn call(tool: ToolId, arguments: Value) -> Value {
    json!({ "decision": "tool_call", "tool": tool.name(), "arguments": arguments })
}

impl ConformancePlanner {
    /// The next decision for a view (pure: the same view gives the same decision).
    pub fn decide(view: &PlannerView) -> Value {
        let case_id = view.goal.resource_id.clone();
        let seen = |tool: ToolId| view.observations.iter().find(|o| o.tool == tool.name());
        let visible = |tool: ToolId| view.tools.iter().any(|t| t.name == tool.name());
        if seen(ToolId::CaseopsGetCaseSnapshot).is_none() {
            return if visible(ToolId::CaseopsGetCaseSnapshot) {
                call(
                    ToolId::CaseopsGetCaseSnapshot,
                    json!({ "case_id": case_id }),
                )
            } else {
                json!({ "decision": "needs_human", "reason": "the case snapshot tool is not available" })
            };
        }
        if seen(ToolId::CaseopsGetPolicyRequirements).is_none() {
            return call(
                ToolId::CaseopsGetPolicyRequirements,
                json!({ "case_id": case_id }),
            );
        }
        let Some(listing) = seen(ToolId::CaseopsListUnclassifiedDocuments) else {
            return call(
                ToolId::CaseopsListUnclassifiedDocuments,
                json!({ "case_id": case_id }),
            );
        };
        let resolutions: Vec<&Value> = view
            .observations
            .iter()
            .filter(|o| o.tool == ToolId::CaseopsResolveDocumentAlias.name())
            .map(|o| &*o.result)
            .collect();
        for doc in listing.result["documents"].as_array().into_iter().flatten() {
            let id = &doc["document_id"];
            if !resolutions.iter().any(|r| &r["document_id"] == id) {
                return call(
                    ToolId::CaseopsResolveDocumentAlias,
                    json!({ "case_id": case_id, "document_id": id }),
                );
            }
        }

        let observed = view
            .observations
            .iter()
            .map(|o| (o.tool.as_str(), &*o.result));
        let Some(found) = Findings::derive(observed) else {
            return json!({ "decision": "needs_human", "reason": "the snapshot and policy were not observed" });
        };
        let request = ToolId::CaseopsRequestMissingDocuments;
        if !found.missing.is_empty() && seen(request).is_none() && visible(request) {
            return call(
                request,
                json!({ "case_id": case_id, "document_codes": found.missing }),
            );
        }
        // Complete without normalizing any label: hand the case to the assessors, an
        // irreversible move that waits for a person's approval.
        let ready = ToolId::CaseopsMarkCaseReadyForAssessment;
        if let Some(snapshot) = seen(ToolId::CaseopsGetCaseSnapshot)
            && found.outcome == "DOCUMENTS_COMPLETE"
            && snapshot.result["status"] == "waiting_for_documents"
            && seen(ready).is_none()
            && visible(ready)
        {
            return call(
                ready,
                json!({ "case_id": case_id, "case_version": snapshot.result["case_version"] }),
            );
        }
        let Findings {
            received,
            resolved,
            missing,
            outcome,
            evidence,
            ..
        } = found;
        let summary = match outcome {
            "MISSING_REQUIRED_DOCUMENTS" if seen(request).is_some() => format!(
                "Case {case_id} lacks {}; the claimant was asked for it.",
                missing.iter().cloned().collect::<Vec<_>>().join(", ")
            ),
            "MISSING_REQUIRED_DOCUMENTS" => format!(
                "Case {case_id} lacks {}.",
                missing.iter().cloned().collect::<Vec<_>>().join(", ")
            ),
            "DOCUMENTS_COMPLETE_AFTER_NORMALIZATION" => format!(
                "Case {case_id} holds every required document once {} is normalized.",
                resolved.iter().cloned().collect::<Vec<_>>().join(", ")
            ),
            _ if seen(ready).is_some() => {
                format!("Case {case_id} holds every required document; it is ready for assessment.")
            }
            _ => format!("Case {case_id} holds every required document."),
        };
        json!({ "decision": "final", "answer": {
            "outcome": outcome,
            "summary": summary,
            "received_document_codes": received,
            "resolved_document_codes": resolved,
            "missing_document_codes": missing,
            "evidence_refs": evidence,
        }})
    }
}

impl Planner for ConformancePlanner {
    fn kind(&self) -> &'static str {
        "conformance"
    }

    /// The conformance driver decides from the view alone, in-process.
    fn is_external(&self) -> bool {
        false
    }

    async fn propose(&self, view: &PlannerView) -> Result<Value, PlannerError> {
        Ok(Self::decide(view))
    }
}

/// The planner a host runs with, chosen by configuration.
#[derive(Debug, Clone)]
pub enum AnyPlanner {
    Conformance(ConformancePlanner),
    OpenAi(Box<caseops_host::openai::OpenAiResponsesPlanner>),
}

impl Planner for AnyPlanner {
    fn kind(&self) -> &'static str {
        match self {
            AnyPlanner::Conformance(p) => p.kind(),
            AnyPlanner::OpenAi(p) => p.kind(),
        }
    }

    fn is_external(&self) -> bool {
        match self {
            AnyPlanner::Conformance(p) => p.is_external(),
            AnyPlanner::OpenAi(p) => p.is_external(),
        }
    }

    fn model(&self) -> Option<String> {
        match self {
            AnyPlanner::Conformance(p) => p.model(),
            AnyPlanner::OpenAi(p) => Planner::model(p.as_ref()),
        }
    }

    async fn propose(&self, view: &PlannerView) -> Result<Value, PlannerError> {
        match self {
            AnyPlanner::Conformance(p) => p.propose(view).await,
            AnyPlanner::OpenAi(p) => p.propose(view).await,
        }
    }
}
