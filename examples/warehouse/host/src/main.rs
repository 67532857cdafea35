//! `warehouse`: a second agent on `caseops-host`. Everything governed — the API,
//! MCP tools behind task tokens, Cedar, leases, the ledger, audit and outbox — is
//! the host's; this file brings the bundle, a deterministic driver and wiring.

use std::collections::HashMap;
use std::process::ExitCode;

use caseops_host::api::ApiPrincipal;
use caseops_host::cli::{HostCli, HostCommand, ServeArgs};
use caseops_host::host::{self, App};
use caseops_runtime::context::PlannerView;
use caseops_runtime::{ContractBundle, Planner, PlannerError};
use clap::Parser;
use serde_json::{Value, json};
use warehouse_generated::{Bundle, Dispatcher};
use warehouse_host::tools::{SCHEMA, Warehouse};

const HOST_CLI: HostCli = HostCli {
    name: "warehouse",
    default_database: "sqlite://warehouse.db",
    default_tenant: Some("tenant-a"),
    schema: &SCHEMA,
    resource_key: Bundle::RESOURCE_ID_FIELD,
    scopes: || {
        Bundle::TOOLS
            .iter()
            .map(|t| t.required_scope.into())
            .collect()
    },
};

/// The warehouse restocking agent: `POST /v1/shelves/{shelf_id}/restock-runs` with
/// `{"goal": "reserve 5 WIDGET-7"}` and the header `X-API-Key: dev-key-warehouse`.
#[derive(Parser)]
#[command(name = "warehouse", version, about)]
struct Cli {
    #[command(subcommand)]
    command: HostCommand,
}

/// The deterministic driver: look the product up, reserve if stock allows, answer.
/// Goals read `reserve <units> <sku>`.
struct Driver;

fn parse_goal(goal: &str) -> Option<(i64, String)> {
    match goal.split_whitespace().collect::<Vec<_>>().as_slice() {
        ["reserve", units, sku] => Some((units.parse().ok()?, sku.to_string())),
        _ => None,
    }
}

impl Planner for Driver {
    fn kind(&self) -> &'static str {
        "warehouse-driver"
    }

    fn is_external(&self) -> bool {
        false
    }

    async fn propose(&self, view: &PlannerView) -> Result<Value, PlannerError> {
        let Some((units, sku)) = parse_goal(&view.goal.text) else {
            return Ok(
                json!({"decision": "needs_human", "reason": "goal is not `reserve <units> <sku>`"}),
            );
        };
        let shelf = &view.goal.resource_id;
        let seen = |tool: &str| view.observations.iter().find(|o| o.tool == tool);
        let answer = |outcome: &str, reserved: i64, summary: String, refs: Vec<&Value>| {
            json!({"decision": "final", "answer": {"outcome": outcome, "summary": summary,
                "reserved_units": reserved, "evidence_refs": refs}})
        };
        Ok(
            match (seen("inventory_lookup"), seen("inventory_reserve")) {
                (None, _) => json!({"decision": "tool_call", "tool": "inventory_lookup",
                "arguments": {"shelf_id": shelf, "sku": sku}}),
                (Some(l), None) => {
                    let free = l.result["on_hand"].as_i64().unwrap_or(0)
                        - l.result["reserved"].as_i64().unwrap_or(0);
                    if free < units {
                        answer(
                            "BLOCKED",
                            0,
                            format!("only {free} {sku} left on {shelf}"),
                            vec![&l.result["evidence_ref"]],
                        )
                    } else {
                        json!({"decision": "tool_call", "tool": "inventory_reserve",
                        "arguments": {"shelf_id": shelf, "sku": sku, "units": units}})
                    }
                }
                (Some(l), Some(r)) => answer(
                    "RESTOCKED",
                    units,
                    format!("reserved {units} {sku} on {shelf}"),
                    vec![&l.result["evidence_ref"], &r.result["evidence_ref"]],
                ),
            },
        )
    }
}

fn dev_keys() -> HashMap<String, ApiPrincipal> {
    let principal = ApiPrincipal {
        tenant_id: "tenant-a".into(),
        actor: "user:stock-keeper".into(),
        scopes: (HOST_CLI.scopes)(),
    };
    HashMap::from([("dev-key-warehouse".to_string(), principal)])
}

async fn serve(args: ServeArgs) -> Result<(), String> {
    let config = args.config(&HOST_CLI, dev_keys())?;
    let database = config.database_url.clone();
    let app = App {
        planner: Driver,
        tools: |db: &caseops_host::store::Db| Dispatcher(Warehouse { db: db.clone() }),
        resources: |db: &caseops_host::store::Db| Warehouse { db: db.clone() },
        // Business rules a final answer must meet besides grounded evidence.
        conclusion: None,
    };
    let running = host::start::<Bundle, _, _, _>(config, app)
        .await
        .map_err(|e| e.to_string())?;
    if !args.production {
        let warehouse = Warehouse {
            db: running.db.clone(),
        };
        warehouse.seed().await.map_err(|e| e.to_string())?;
    }
    caseops_host::cli::serve_until_stopped(&HOST_CLI, running, &database, args.grace()).await
}

#[tokio::main]
async fn main() -> ExitCode {
    caseops_host::install_tls_provider();
    HOST_CLI.run(Cli::parse().command, serve).await
}
