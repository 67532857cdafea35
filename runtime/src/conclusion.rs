//! Accepting a final answer. A conclusion may cite only evidence the run observed —
//! references returned by its own succeeded tool calls — and must agree with what
//! those calls returned, by the host's domain rules ([`ConclusionCheck`]). A
//! rejected answer gets one correction round; the engine decides what follows.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::normalization::Observation;
use crate::run::reasons;

/// Why an answer was not accepted: a reason code (a run's stop reason if it stands)
/// and a message the planner is shown to correct it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    pub reason: String,
    pub message: String,
}

impl Rejection {
    pub fn new(reason: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            reason: reason.into(),
            message: message.into(),
        }
    }
}

/// Business rules a schema cannot state, supplied by the host: does the answer
/// follow from what the run's tools returned?
pub trait ConclusionCheck: Send + Sync {
    fn check(&self, answer: &Value, observations: &[Observation]) -> Result<(), Rejection>;
}

/// No domain rules: only grounding applies.
pub struct NoDomainRules;

impl ConclusionCheck for NoDomainRules {
    fn check(&self, _: &Value, _: &[Observation]) -> Result<(), Rejection> {
        Ok(())
    }
}

/// The tool call that produced one cited reference.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Provenance {
    pub tool_call_id: String,
    pub tool: String,
    pub attempt: u32,
    pub bundle_digest: String,
}

/// Checks that every reference in `answer[field]` was returned as evidence by a
/// succeeded call (`observations` holds only those) and, when `required`, that there
/// is at least one. Returns where each cited reference came from.
pub fn ground(
    answer: &Value,
    field: &str,
    required: bool,
    observations: &[Observation],
) -> Result<BTreeMap<String, Provenance>, Rejection> {
    let cited: Vec<&str> = answer
        .get(field)
        .and_then(Value::as_array)
        .map(|refs| refs.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    if required && cited.is_empty() {
        return Err(Rejection::new(
            reasons::EVIDENCE_NOT_OBSERVED,
            format!(
                "`{field}` cites no evidence; cite the evidence references your conclusion rests on"
            ),
        ));
    }
    let mut provenance = BTreeMap::new();
    let mut unseen = Vec::new();
    for reference in cited {
        // The first call that returned a reference is the one that produced it.
        match observations
            .iter()
            .find(|o| o.evidence_ref.as_deref() == Some(reference))
        {
            Some(o) => {
                provenance.insert(
                    reference.to_string(),
                    Provenance {
                        tool_call_id: o.tool_call_id.clone(),
                        tool: o.tool.clone(),
                        attempt: o.attempt,
                        bundle_digest: o.bundle_digest.clone(),
                    },
                );
            }
            None => unseen.push(format!("`{reference}`")),
        }
    }
    if !unseen.is_empty() {
        return Err(Rejection::new(
            reasons::EVIDENCE_NOT_OBSERVED,
            format!(
                "`{field}` cites {} that no tool call of this run returned; cite only evidence references from the observations",
                unseen.join(", ")
            ),
        ));
    }
    Ok(provenance)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn seen(id: &str, reference: &str) -> Observation {
        Observation {
            tool_call_id: id.into(),
            tool: "lookup".into(),
            arguments: json!({}).into(),
            result: json!({"evidence_ref": reference}).into(),
            evidence_ref: Some(reference.into()),
            attempt: 2,
            bundle_digest: "sha256:abc".into(),
        }
    }

    #[test]
    fn a_reference_no_call_returned_is_named_in_the_rejection() {
        let answer = json!({"refs": ["ev://a", "ev://fabricated"]});
        let err = ground(&answer, "refs", false, &[seen("r:1", "ev://a")]).unwrap_err();
        assert_eq!(err.reason, reasons::EVIDENCE_NOT_OBSERVED);
        assert!(err.message.contains("`ev://fabricated`"), "{}", err.message);
        assert!(!err.message.contains("`ev://a`"), "{}", err.message);
    }

    #[test]
    fn every_cited_reference_maps_to_the_call_that_returned_it() {
        let answer = json!({"refs": ["ev://b", "ev://a"]});
        let map = ground(
            &answer,
            "refs",
            true,
            &[seen("r:1", "ev://a"), seen("r:2", "ev://b")],
        )
        .unwrap();
        assert_eq!(map["ev://a"].tool_call_id, "r:1");
        assert_eq!(map["ev://b"].tool_call_id, "r:2");
        assert_eq!(map["ev://b"].attempt, 2);
        assert_eq!(map["ev://b"].bundle_digest, "sha256:abc");
    }

    #[test]
    fn an_empty_citation_is_rejected_only_when_evidence_is_required() {
        let answer = json!({"refs": []});
        assert!(ground(&answer, "refs", false, &[]).unwrap().is_empty());
        let err = ground(&answer, "refs", true, &[]).unwrap_err();
        assert_eq!(err.reason, reasons::EVIDENCE_NOT_OBSERVED);
    }
}
