//! `caseops-service`: the CaseOps claims-investigation host. What is CaseOps lives
//! here — the claims reference data and its tables, the four read-only tool
//! handlers, the C-102 conformance driver, the development keys and the `caseops`
//! binary; everything generic comes from `caseops-host`.

pub mod bench;
pub mod domain;
pub mod event_latency;
pub mod findings;
pub mod keys;
pub mod planner;
pub mod reference;
pub mod tools;

/// The instructions the OpenAI planner is given for claim investigations.
pub const OPENAI_INSTRUCTIONS: &str = "You investigate one insurance claim case. Call one tool at a time to gather evidence. \
When the evidence is sufficient, answer with the final JSON object only. Never invent document codes or evidence references.";

use caseops_generated::{Bundle, Dispatcher};
use caseops_host::host::{App, HostConfig, HostError, RunningHost};

/// Starts a CaseOps host: the generated bundle, the claims tools and case lookups
/// on the host's database, and `planner`. `config.schema` should be
/// [`reference::SCHEMA`].
pub async fn start(
    config: HostConfig,
    planner: planner::AnyPlanner,
) -> Result<RunningHost, HostError> {
    caseops_host::host::start::<Bundle, _, _, _>(
        config,
        App {
            planner,
            tools: |db: &caseops_host::store::Db| {
                Dispatcher(tools::CaseOpsTools {
                    repo: reference::SqlRepository { db: db.clone() },
                })
            },
            resources: |db: &caseops_host::store::Db| reference::SqlRepository { db: db.clone() },
            conclusion: Some(std::sync::Arc::new(findings::DocumentRules)),
        },
    )
    .await
}
