//! What the CaseOps tools' results establish about a case's documents, derived in
//! one place: the conformance driver answers from it, and [`DocumentRules`] checks
//! any planner's answer against it.

use std::collections::BTreeSet;

use caseops_generated::ToolId;
use caseops_runtime::conclusion::{ConclusionCheck, Rejection};
use caseops_runtime::normalization::Observation;
use serde_json::{Value, json};

/// Stop reason of a run whose answer twice contradicted what its tools returned.
pub const CONCLUSION_CONTRADICTS_EVIDENCE: &str = "CONCLUSION_CONTRADICTS_EVIDENCE";

/// The document codes a run's observations establish, and the outcome that follows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Findings {
    pub received: BTreeSet<String>,
    pub required: BTreeSet<String>,
    /// Canonical codes of unclassified documents whose alias resolved.
    pub resolved: BTreeSet<String>,
    pub missing: BTreeSet<String>,
    pub outcome: &'static str,
    /// The evidence a conclusion rests on: the snapshot, the policy, each
    /// resolution that resolved and each write the run made.
    pub evidence: BTreeSet<String>,
}

fn strings(v: &Value) -> impl Iterator<Item = String> + '_ {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|x| x.as_str().map(str::to_string))
}

impl Findings {
    /// From `(tool, result)` pairs of succeeded calls; `None` until both the case
    /// snapshot and the policy requirements were observed.
    pub fn derive<'a>(observed: impl IntoIterator<Item = (&'a str, &'a Value)>) -> Option<Self> {
        let (mut snapshot, mut policy, mut resolutions) = (None, None, Vec::new());
        let mut acted = Vec::new();
        for (tool, result) in observed {
            if tool == ToolId::CaseopsGetCaseSnapshot.name() {
                snapshot.get_or_insert(result);
            } else if tool == ToolId::CaseopsGetPolicyRequirements.name() {
                policy.get_or_insert(result);
            } else if tool == ToolId::CaseopsResolveDocumentAlias.name() {
                resolutions.push(result);
            } else if tool == ToolId::CaseopsRequestMissingDocuments.name()
                || tool == ToolId::CaseopsMarkCaseReadyForAssessment.name()
            {
                acted.push(result);
            }
        }
        let (snapshot, policy) = (snapshot?, policy?);
        let resolved_by: Vec<&Value> = resolutions
            .into_iter()
            .filter(|r| r["resolved"] == json!(true))
            .collect();
        let received: BTreeSet<String> = strings(&snapshot["received_document_codes"]).collect();
        let resolved: BTreeSet<String> = resolved_by
            .iter()
            .filter_map(|r| r["canonical_code"].as_str().map(str::to_string))
            .collect();
        let required: BTreeSet<String> = policy["required_documents"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|d| d["code"].as_str().map(str::to_string))
            .collect();
        let missing: BTreeSet<String> = required
            .iter()
            .filter(|c| !received.contains(*c) && !resolved.contains(*c))
            .cloned()
            .collect();
        let outcome = if !missing.is_empty() {
            "MISSING_REQUIRED_DOCUMENTS"
        } else if resolved
            .iter()
            .any(|c| !received.contains(c) && required.contains(c))
        {
            "DOCUMENTS_COMPLETE_AFTER_NORMALIZATION"
        } else {
            "DOCUMENTS_COMPLETE"
        };
        let mut evidence = BTreeSet::new();
        evidence.extend(snapshot["evidence_ref"].as_str().map(str::to_string));
        evidence.extend(policy["evidence_ref"].as_str().map(str::to_string));
        // What the run did about the case (a document request, the move to
        // assessment) is cited too.
        for r in resolved_by.into_iter().chain(acted) {
            evidence.extend(r["evidence_ref"].as_str().map(str::to_string));
        }
        Some(Findings {
            received,
            required,
            resolved,
            missing,
            outcome,
            evidence,
        })
    }
}

/// CaseOps' rules for a final answer: its document codes are the ones its tools
/// returned and its outcome follows from them. Without the snapshot and the policy
/// only `INSUFFICIENT_EVIDENCE` follows.
pub struct DocumentRules;

impl ConclusionCheck for DocumentRules {
    fn check(&self, answer: &Value, observations: &[Observation]) -> Result<(), Rejection> {
        let contradiction =
            |message: String| Err(Rejection::new(CONCLUSION_CONTRADICTS_EVIDENCE, message));
        let claimed = answer["outcome"].as_str().unwrap_or_default();
        let Some(found) =
            Findings::derive(observations.iter().map(|o| (o.tool.as_str(), &*o.result)))
        else {
            if claimed == "INSUFFICIENT_EVIDENCE" {
                return Ok(());
            }
            return contradiction(format!(
                "outcome `{claimed}` needs the case snapshot and the policy requirements, which this run has not observed; observe both or answer INSUFFICIENT_EVIDENCE"
            ));
        };
        let mut problems = Vec::new();
        for (field, expected) in [
            ("received_document_codes", &found.received),
            ("resolved_document_codes", &found.resolved),
            ("missing_document_codes", &found.missing),
        ] {
            let given: BTreeSet<String> = strings(&answer[field]).collect();
            if &given != expected {
                problems.push(format!(
                    "`{field}` is {given:?} but the tools returned {expected:?}"
                ));
            }
        }
        if claimed != found.outcome {
            problems.push(format!(
                "outcome `{claimed}` does not follow from the observed codes, which give `{}`",
                found.outcome
            ));
        }
        if problems.is_empty() {
            Ok(())
        } else {
            contradiction(problems.join("; "))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(tool: ToolId, result: Value) -> Observation {
        Observation {
            tool_call_id: format!("call-{}", tool.name()),
            tool: tool.name().to_string(),
            arguments: json!({}).into(),
            evidence_ref: result["evidence_ref"].as_str().map(str::to_string),
            result: result.into(),
            attempt: 1,
            bundle_digest: "d".into(),
        }
    }

    /// C-102: PHOTOS received, POLICE_REPORT required and resolved from an alias.
    fn c102() -> Vec<Observation> {
        vec![
            seen(
                ToolId::CaseopsGetCaseSnapshot,
                json!({"received_document_codes": ["PHOTOS"], "evidence_ref": "ev://snapshot"}),
            ),
            seen(
                ToolId::CaseopsGetPolicyRequirements,
                json!({"required_documents": [{"code": "PHOTOS"}, {"code": "POLICE_REPORT"}], "evidence_ref": "ev://policy"}),
            ),
            seen(
                ToolId::CaseopsResolveDocumentAlias,
                json!({"resolved": true, "canonical_code": "POLICE_REPORT", "evidence_ref": "ev://alias"}),
            ),
        ]
    }

    fn answer(outcome: &str, missing: &[&str]) -> Value {
        json!({
            "outcome": outcome,
            "received_document_codes": ["PHOTOS"],
            "resolved_document_codes": ["POLICE_REPORT"],
            "missing_document_codes": missing,
        })
    }

    #[test]
    fn an_answer_that_follows_from_the_observed_codes_is_accepted() {
        let answer = answer("DOCUMENTS_COMPLETE_AFTER_NORMALIZATION", &[]);
        assert_eq!(DocumentRules.check(&answer, &c102()), Ok(()));
    }

    #[test]
    fn an_outcome_the_codes_do_not_give_is_a_contradiction() {
        let rejected = DocumentRules
            .check(&answer("DOCUMENTS_COMPLETE", &[]), &c102())
            .unwrap_err();
        assert_eq!(rejected.reason, CONCLUSION_CONTRADICTS_EVIDENCE);
        assert!(
            rejected
                .message
                .contains("give `DOCUMENTS_COMPLETE_AFTER_NORMALIZATION`"),
            "{}",
            rejected.message
        );
    }

    #[test]
    fn a_missing_code_no_tool_reported_is_a_contradiction() {
        let answer = answer("DOCUMENTS_COMPLETE_AFTER_NORMALIZATION", &["INVOICE"]);
        let rejected = DocumentRules.check(&answer, &c102()).unwrap_err();
        assert!(
            rejected.message.contains("`missing_document_codes`"),
            "{}",
            rejected.message
        );
    }

    #[test]
    fn without_snapshot_and_policy_only_insufficient_evidence_follows() {
        let only_snapshot = &c102()[..1];
        let insufficient = json!({"outcome": "INSUFFICIENT_EVIDENCE"});
        assert_eq!(DocumentRules.check(&insufficient, only_snapshot), Ok(()));
        let complete = answer("DOCUMENTS_COMPLETE", &[]);
        let rejected = DocumentRules.check(&complete, only_snapshot).unwrap_err();
        assert_eq!(rejected.reason, CONCLUSION_CONTRADICTS_EVIDENCE);
    }

    #[test]
    fn an_unresolved_alias_leaves_its_code_missing() {
        let mut observed = c102();
        observed[2] = seen(
            ToolId::CaseopsResolveDocumentAlias,
            json!({"resolved": false, "evidence_ref": "ev://alias"}),
        );
        let found =
            Findings::derive(observed.iter().map(|o| (o.tool.as_str(), &*o.result))).unwrap();
        assert_eq!(found.outcome, "MISSING_REQUIRED_DOCUMENTS");
        assert!(found.missing.contains("POLICE_REPORT"));
        assert!(!found.evidence.contains("ev://alias"));
    }
}
