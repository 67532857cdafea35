//! Development API keys: an investigator per reference tenant, and a supervisor of
//! the demo tenant who may decide approvals. Production mode refuses them.

use std::collections::HashMap;

use caseops_generated::Bundle;
use caseops_host::api::ApiPrincipal;
use caseops_runtime::ContractBundle;

/// Every scope a tool of the bundle requires.
pub fn all_scopes() -> Vec<String> {
    Bundle::TOOLS
        .iter()
        .map(|t| t.required_scope.to_string())
        .collect()
}

pub fn dev_keys() -> HashMap<String, ApiPrincipal> {
    let scopes = all_scopes();
    HashMap::from([
        (
            "dev-key-tenant-demo".to_string(),
            ApiPrincipal {
                tenant_id: "tenant-demo".into(),
                actor: "user:demo-investigator".into(),
                scopes: scopes.clone(),
            },
        ),
        (
            // Decides approvals (`approval:decide`); never of runs they started.
            "dev-key-tenant-demo-supervisor".to_string(),
            ApiPrincipal {
                tenant_id: "tenant-demo".into(),
                actor: "user:demo-supervisor".into(),
                scopes: scopes
                    .iter()
                    .cloned()
                    .chain([caseops_host::approvals_api::DECIDE_SCOPE.to_string()])
                    .collect(),
            },
        ),
        (
            "dev-key-tenant-other-supervisor".to_string(),
            ApiPrincipal {
                tenant_id: "tenant-other".into(),
                actor: "user:other-supervisor".into(),
                scopes: scopes
                    .iter()
                    .cloned()
                    .chain([caseops_host::approvals_api::DECIDE_SCOPE.to_string()])
                    .collect(),
            },
        ),
        (
            "dev-key-tenant-other".to_string(),
            ApiPrincipal {
                tenant_id: "tenant-other".into(),
                actor: "user:other-investigator".into(),
                scopes,
            },
        ),
    ])
}
