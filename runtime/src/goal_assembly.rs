//! Stage 1, goal assembly: what the run is for, in the terms the planner sees.

use serde::{Deserialize, Serialize};

use crate::bundle::ContractBundle;
use crate::run::RunSpec;

/// The goal of a run: the request's text bound to the run's resource and stage.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Goal {
    pub text: String,
    pub resource_type: String,
    pub resource_id: String,
    pub stage: String,
    /// The schema version the final answer must carry.
    pub answer_schema_version: String,
}

pub fn assemble<B: ContractBundle>(spec: &RunSpec, stage: &str) -> Goal {
    Goal {
        text: spec.goal.trim().to_string(),
        resource_type: B::RESOURCE_TYPE.to_string(),
        resource_id: spec.resource_id.clone(),
        stage: stage.to_string(),
        answer_schema_version: B::FINAL_ANSWER_SCHEMA_VERSION.to_string(),
    }
}
