//! Stage 9, state update: counters, observations and budgets, and the stop decision.
//! [`Controls`] fields are private to this module: no other stage can change them.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize, Serializer};

use crate::contract::Budgets;
use crate::normalization::Observation;
use crate::protocol::Usage;
use crate::run::{CallStatus, LedgerRow, reasons};

/// What a snapshot keeps of one observation. The call's ledger row, committed
/// with it, holds its tool, arguments, result, attempt and bundle; the evidence
/// reference is kept because it was read with the contract the call ran under.
#[derive(Debug, Clone, PartialEq, Deserialize)]
struct Observed {
    tool_call_id: String,
    #[serde(default)]
    evidence_ref: Option<String>,
}

/// [`Observed`] as written: borrowed from the observation it names.
#[derive(Serialize)]
struct ObservedRef<'a> {
    tool_call_id: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    evidence_ref: Option<&'a str>,
}

/// Writes the observations as a snapshot names them (see [`Observed`]).
fn named<S: Serializer>(observations: &[Observation], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(observations.iter().map(|o| ObservedRef {
        tool_call_id: &o.tool_call_id,
        evidence_ref: o.evidence_ref.as_deref(),
    }))
}

/// The run's control state.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Controls {
    step_count: u32,
    recovery_count: u32,
    fingerprints: BTreeMap<String, u32>,
    no_new_evidence_steps: u32,
    evidence_refs: Vec<String>,
    /// Written as `observed`, by name ([`Observed`]); recovery takes the rest from
    /// their ledger rows ([`Controls::restore_observations`]). Read whole from
    /// snapshots written before that.
    #[serde(default, rename(serialize = "observed"), serialize_with = "named")]
    observations: Vec<Observation>,
    /// The names a snapshot holds, until recovery turns them into observations.
    #[serde(default, skip_serializing)]
    observed: Vec<Observed>,
    tokens: u64,
    cost_micro_usd: u64,
    /// When the current driving segment began (the run's start, or its last resume).
    started_at_ms: u64,
    /// Time driven in earlier segments, up to each one's last committed checkpoint.
    /// Time a run lay orphaned between segments is not in it: the wall-clock budget
    /// limits work, not the outage of a replica that held the run.
    #[serde(default)]
    driven_ms: u64,
    /// Why earlier final answers were rejected, shown to the planner to correct.
    #[serde(default)]
    corrections: Vec<String>,
}

impl Controls {
    pub fn new(started_at_ms: u64) -> Self {
        Self {
            started_at_ms,
            ..Self::default()
        }
    }

    pub fn step_count(&self) -> u32 {
        self.step_count
    }

    pub fn recovery_count(&self) -> u32 {
        self.recovery_count
    }

    pub fn observations(&self) -> &[Observation] {
        &self.observations
    }

    pub fn evidence_refs(&self) -> &[String] {
        &self.evidence_refs
    }

    /// Tools that produced a conforming result in this run.
    pub fn succeeded_tools(&self) -> Vec<String> {
        self.observations.iter().map(|o| o.tool.clone()).collect()
    }

    /// How often this fingerprint has been proposed, counting this proposal.
    pub fn propose(&mut self, fingerprint: &str) -> u32 {
        let n = self
            .fingerprints
            .entry(fingerprint.to_string())
            .or_insert(0);
        *n += 1;
        *n
    }

    /// A proposal was discarded by recovery: it does not count as a repeat.
    pub fn forget_proposal(&mut self, fingerprint: &str) {
        if let Some(n) = self.fingerprints.get_mut(fingerprint) {
            *n = n.saturating_sub(1);
        }
    }

    pub fn add_usage(&mut self, usage: Usage) {
        self.tokens = self.tokens.saturating_add(usage.tokens);
        self.cost_micro_usd = self.cost_micro_usd.saturating_add(usage.cost_micro_usd);
    }

    /// A tool step finished with a conforming result.
    pub fn observe(&mut self, observation: Observation) {
        self.step_count += 1;
        let new = observation
            .evidence_ref
            .as_ref()
            .is_some_and(|e| !self.evidence_refs.contains(e));
        if new {
            self.evidence_refs
                .push(observation.evidence_ref.clone().expect("checked above"));
            self.no_new_evidence_steps = 0;
        } else {
            self.no_new_evidence_steps += 1;
        }
        self.observations.push(observation);
    }

    /// Rebuilds the observations a snapshot names from the run's committed ledger,
    /// which holds each one's succeeded call (committed in the same batch as the
    /// snapshot or before it). The error names a call the ledger cannot give back.
    pub fn restore_observations(&mut self, ledger: &[LedgerRow]) -> Result<(), String> {
        let observed = std::mem::take(&mut self.observed);
        if !self.observations.is_empty() {
            // An older snapshot, with every observation in it.
            return Ok(());
        }
        let mut restored = Vec::with_capacity(observed.len());
        for named in &observed {
            let id = &named.tool_call_id;
            let row = ledger
                .iter()
                .find(|r| &r.tool_call_id == id)
                .ok_or_else(|| format!("observed call `{id}` is not in the ledger"))?;
            let result = match (&row.status, &row.result) {
                (CallStatus::Succeeded, Some(result)) => result.clone(),
                _ => return Err(format!("observed call `{id}` has no result in the ledger")),
            };
            restored.push(Observation {
                tool_call_id: id.clone(),
                tool: row.tool_name.clone(),
                arguments: std::sync::Arc::new(row.arguments.clone()),
                result: std::sync::Arc::new(result),
                evidence_ref: named.evidence_ref.clone(),
                attempt: row.attempt_count,
                bundle_digest: row.bundle_digest.clone(),
            });
        }
        self.observations = restored;
        Ok(())
    }

    /// A final answer was rejected: the planner is told why.
    pub fn reject_answer(&mut self, message: String) {
        self.corrections.push(message);
    }

    /// How many final answers were rejected so far.
    pub fn rejected_answers(&self) -> usize {
        self.corrections.len()
    }

    pub fn corrections(&self) -> &[String] {
        &self.corrections
    }

    /// A tool step ended without a result (its call failed or was denied).
    pub fn step_without_result(&mut self) {
        self.step_count += 1;
    }

    /// A new driver takes the run over from a checkpoint committed at
    /// `last_commit_ms`: the previous segment counts up to that checkpoint (what it
    /// did after it is lost and will be redone), and a new segment starts now.
    pub fn resume_segment(&mut self, last_commit_ms: u64, now_ms: u64) {
        self.driven_ms = self
            .driven_ms
            .saturating_add(last_commit_ms.saturating_sub(self.started_at_ms));
        self.started_at_ms = now_ms;
    }

    /// Milliseconds this run has been driven, over every segment.
    pub fn driven_ms(&self, now_ms: u64) -> u64 {
        self.driven_ms
            .saturating_add(now_ms.saturating_sub(self.started_at_ms))
    }

    pub fn recovered(&mut self) {
        self.recovery_count += 1;
    }

    /// The budget a new step would cross, if any.
    pub fn exhausted(&self, budgets: &Budgets, now_ms: u64) -> Option<&'static str> {
        let elapsed = self.driven_ms(now_ms);
        if elapsed >= u64::from(budgets.max_wall_clock_seconds) * 1000 {
            return Some(reasons::WALL_CLOCK_EXHAUSTED);
        }
        if let Some(max) = budgets.max_cost_micro_usd
            && self.cost_micro_usd >= max
        {
            return Some(reasons::COST_BUDGET_EXHAUSTED);
        }
        if let Some(max) = budgets.max_tokens
            && self.tokens >= max
        {
            return Some(reasons::TOKEN_BUDGET_EXHAUSTED);
        }
        if self.no_new_evidence_steps >= budgets.max_no_new_evidence_steps {
            return Some(reasons::NO_NEW_EVIDENCE);
        }
        None
    }

    /// Whether another tool call fits the step budget.
    pub fn steps_left(&self, budgets: &Budgets) -> bool {
        self.step_count < budgets.max_steps
    }
}
