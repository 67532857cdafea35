//! Development API keys: an investigator per reference tenant, and a supervisor of
//! the demo tenant who may decide approvals. Production mode refuses them.

use std::collections::HashMap;

use caseops_generated::Bundle;
use caseops_host::api::ApiPrincipal;
use caseops_runtime::ContractBundle;

/// Every scope a tool of the bundle requires, each once (several tools share one;
/// the list is copied into every run's spec and task token).
pub fn all_scopes() -> Vec<String> {
    Bundle::required_scopes()
        .into_iter()
        .map(str::to_string)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_scopes_lists_each_scope_of_the_bundle_once_in_tool_order() {
        let scopes = all_scopes();
        let mut unique = scopes.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(scopes.len(), unique.len(), "{scopes:?}");
        // Several reference tools share a scope: the list is shorter than the tools.
        assert!(scopes.len() < Bundle::TOOLS.len(), "{scopes:?}");
        for tool in Bundle::TOOLS {
            assert!(scopes.iter().any(|s| s == tool.required_scope));
        }
        assert_eq!(scopes[0], Bundle::TOOLS[0].required_scope);
    }
}
