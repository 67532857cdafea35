//! `__name__`: the agent's host. The API, MCP tools behind task tokens, Cedar, the
//! durable runs with leases, the ledger, audit and outbox are `caseops-host`'s; this
//! file brings the compiled bundle, the tool handlers, a planner and the wiring.

use std::collections::HashMap;
use std::process::ExitCode;

use caseops_host::api::ApiPrincipal;
use caseops_host::cli::{HostCli, HostCommand, ServeArgs};
use caseops_host::host::{self, App};
use caseops_host::store::AppSchema;
use caseops_runtime::context::PlannerView;
use caseops_runtime::{ContractBundle, Planner, PlannerError};
use clap::Parser;
use serde_json::{Value, json};

// This agent's own crates.
use __agent___generated::{Bundle, Dispatcher};
use __agent___host::tools::Items;

const HOST_CLI: HostCli = HostCli {
    name: "__name__",
    default_database: "sqlite://__name__.db",
    default_tenant: Some("tenant-a"),
    schema: &AppSchema::NONE,
    resource_key: Bundle::RESOURCE_ID_FIELD,
    scopes: || {
        Bundle::TOOLS
            .iter()
            .map(|t| t.required_scope.into())
            .collect()
    },
};

/// The __name__ agent: `POST /v1/items/{item_id}/agent-runs` with
/// `{"goal": "…"}` and the header `X-API-Key: dev-key-__name__`.
#[derive(Parser)]
#[command(name = "__name__", version, about)]
struct Cli {
    #[command(subcommand)]
    command: HostCommand,
}

/// A deterministic planner: look the run's item up, then answer from what the tool
/// returned. Replace it with `caseops_host::openai::OpenAiResponsesPlanner` to let
/// a model propose the calls; the control plane governs both the same way.
struct Driver;

impl Planner for Driver {
    fn kind(&self) -> &'static str {
        "__name__-driver"
    }

    fn is_external(&self) -> bool {
        false
    }

    async fn propose(&self, view: &PlannerView) -> Result<Value, PlannerError> {
        let item = &view.goal.resource_id;
        Ok(
            match view.observations.iter().find(|o| o.tool == "item_lookup") {
                None => json!({"decision": "tool_call", "tool": "item_lookup",
                "arguments": {"item_id": item}}),
                Some(seen) => json!({"decision": "final", "answer": {
                "outcome": "FOUND",
                "summary": format!("{item} is {}, {} in stock", seen.result["name"], seen.result["in_stock"]),
                "evidence_refs": [seen.result["evidence_ref"]]}}),
            },
        )
    }
}

fn dev_keys() -> HashMap<String, ApiPrincipal> {
    let principal = ApiPrincipal {
        tenant_id: "tenant-a".into(),
        actor: "user:developer".into(),
        scopes: (HOST_CLI.scopes)(),
    };
    HashMap::from([("dev-key-__name__".to_string(), principal)])
}

async fn serve(args: ServeArgs) -> Result<(), String> {
    let config = args.config(&HOST_CLI, dev_keys())?;
    let database = config.database_url.clone();
    let app = App {
        planner: Driver,
        tools: |_: &caseops_host::store::Db| Dispatcher(Items::development()),
        resources: |_: &caseops_host::store::Db| Items::development(),
        // Business rules a final answer must meet besides grounded evidence.
        conclusion: None,
    };
    let running = host::start::<Bundle, _, _, _>(config, app)
        .await
        .map_err(|e| e.to_string())?;
    caseops_host::cli::serve_until_stopped(&HOST_CLI, running, &database, args.grace()).await
}

#[tokio::main]
async fn main() -> ExitCode {
    caseops_host::install_tls_provider();
    HOST_CLI.run(Cli::parse().command, serve).await
}
